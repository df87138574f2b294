"""What becomes of a live worker's request: lost on the emulated network, refused READONLY, or run twice.

Standard library (and redis-py) only: emqsim/live/worker.py, run as a file, loads it by path (as `lua.py`).
`Resending` is the part of `LiveWorker` that plays `Network(resend_twice=True)` (emqsim/live/resend.py says
how the parent finds the windows): a request whose reply the simulator's rule says a drop catches runs at
the real Redis, its reply is thrown away, and the same command is sent again when ioredis would resend it.
Its `call` sends a request on the real connection: a write a failover's demoted primary refuses comes back
as READONLY, and a connection an outage (or a restart) closed is tried again at the reconnect.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

import redis

LOST = object()  # a request dropped by the emulated network
READONLY = object()  # a write refused by a demoted primary (Redis's READONLY error)
READONLY_CODE = -100  # emqsim.protocol.READONLY: a finish refused with READONLY


class Resending:
    """`call`, `deliver` and `ran_first`, for `LiveWorker` (which provides `emit`, `sleep_until`,
    `reconnect_at` and the windows from `go`)."""

    resend: Sequence[tuple[float, float, float]] = ()  # real (from, until, copy sent at), from `go`
    resend_kinds: Collection[str] = frozenset()  # the kinds the simulator resends (live.resend.resent_kinds)
    stopping: threading.Event
    outages: list[tuple[float, float, bool]]  # (disconnected, reconnected, Redis itself down), real
    switches: list[tuple[float, float]]  # around a failover whose clients stay on the demoted primary, real

    def emit(self, event: str, **fields: Any) -> None: ...  # (LiveWorker's)

    def sleep_until(self, when: float) -> None: ...  # (LiveWorker's)

    def reconnect_at(self, t: float) -> float | None: ...  # (LiveWorker's)

    def call(self, fn: Any, t: float) -> Any:
        """`fn(t)`. A connection closed by an outage's disconnect: the request is resent at the reconnect.
        Around a Redis restart a refused or dropped connection is tried again every 5 ms (for up to 30 s
        after the last restart's reconnect). Elsewhere a connection error ends the worker, as before."""
        while True:
            try:
                return fn(t)
            except redis.ResponseError as exc:
                readonly = isinstance(exc, redis.exceptions.ReadOnlyError) or str(exc).startswith("READONLY")
                now = time.time()
                if readonly and any(begin <= now <= end for begin, end in self.switches):
                    return READONLY  # a failover's demoted primary refused the write: the caller goes on
                raise  # elsewhere (a replica given as --redis) it ends the run with Redis's words
            except redis.ConnectionError:
                if self.stopping.is_set():
                    raise
                back = self.reconnect_at(time.time())
                if back is not None:
                    self.sleep_until(back)
                    continue
                now = time.time()
                if self.reconnect_at(now - 0.25) is not None:  # the parent reopens the far side (a
                    time.sleep(0.005)  # partition's proxy) a few ms after the reconnect: try again
                    continue
                if any(begin <= now <= end for begin, end in self.switches):
                    time.sleep(0.005)  # a failover's server demoted or left: ioredis reconnects
                    continue
                last = max((back for _, back, down in self.outages if down), default=None)
                if last is None or time.time() > last + 30.0:
                    raise
                time.sleep(0.005)

    def deliver(self, fn: Any, t: float, issued: Any, kind: str, first: Any) -> tuple[float, Any]:
        """`fn(t)` sent at `t` -> (t, reply); `issued()` once it is answered. With `Network.resend_twice`, a
        request of a kind the simulator resends, sent where its rule says a drop catches the reply (`resend`,
        from `go`; emqsim/live/resend.py): it runs at Redis, its reply is lost (appended to `first` with `t`,
        for the records), and the same command (same script, same arguments) is sent again when the resent
        copy reaches Redis in the simulator -> (that time, the copy's reply)."""
        reply = self.call(fn, t)
        if issued is not None:
            issued()
        again = (
            next((a for b, u, a in self.resend if b <= t < u), None) if kind in self.resend_kinds else None
        )
        if again is None:
            return t, reply
        if first is not None:
            first.append((t, reply))
        self.sleep_until(again)
        if self.stopping.is_set():
            raise redis.ConnectionError("stopped while waiting to resend")  # the thread ends quietly
        return time.time(), self.call(fn, t)

    def ran_first(
        self, first: list[Any], sent: float, reply: Any, job: str, token: str, nxt: str | None
    ) -> tuple[float, Any]:
        """A finish or fail that ran twice (`deliver`) -> the first run's time and reply, which the records keep
        (the refused copy leaves them, as in the simulator); reports the copy (`resent`: a round trip more) and
        the job the first run's fetchNext took, which this worker never learns of: taken, never started,
        orphaned until its lock lapses. Ran once: (sent, reply)."""
        if not first:
            return sent, reply
        ran, got = first[0]
        code = READONLY_CODE if reply is READONLY else reply[0]
        self.emit("resent", kind="finish", job=job, token=token, t=sent, code=code)
        if nxt is not None and got is not READONLY and got[-1]:
            self.emit("take", job=str(got[-1]), token=nxt, t=ran, s=None, fetched=True, orphan=True)
        return ran, got


def redis_refusal(exc: BaseException) -> str | None:
    """Redis's own error text when it refused a command (READONLY on a demoted primary, OOM under maxmemory,
    ...), for the parent to show in one line; None for any other failure."""
    if not isinstance(exc, redis.ResponseError):
        return None
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
