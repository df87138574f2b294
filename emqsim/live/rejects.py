"""A live worker's requests that ioredis rejects at a queue flush (`Network.max_retries_per_request`).

Standard library (and redis-py) only: emqsim/live/worker.py, run as a file, loads it by path (as `lua.py`).
`Rejecting` is the part of `LiveWorker` that plays ioredis's `maxRetriesPerRequest` (emqsim/live/flushes.py
says how the parent finds the spans): a request of a kind the simulator rejects, sent where a flush catches
it, is rejected at the flush's time instead of waiting for the reconnect, as the simulator's
`Client.rejected`: one that had reached Redis first (sent just before the drop) runs there and its reply is
thrown away. What the worker does then is the simulator's (emqsim/worker.py): a rejected renewal is lost
(its jobs stay tracked), a rejected take is sent again (at the reconnect, where the simulator's marker wait
returns), and a rejected finish makes the worker send moveToFailed with ioredis's error, to the real Redis
when the connection is back; if a flush rejects that too, the finish is given up: the job stays active, its
lock lapses unrenewed and a sweep moves it back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import redis


class Rejected:
    """A request ioredis rejected with MaxRetriesPerRequestError at a flush. `ran`: it had reached Redis and
    run before the drop caught its reply, which is `reply` (kept for the records, unseen by the worker)."""

    __slots__ = ("ran", "reply")

    def __init__(self, ran: bool, reply: Any = None) -> None:
        self.ran = ran
        self.reply = reply


class Rejecting:
    """`rejection`, `reject` and what a rejection leads to, for `LiveWorker` (which provides `call`, `emit`,
    `sleep_until`, `reconnect_at`, `new_token` and `fail_job`)."""

    flushes: Sequence[tuple[float, float, float, bool]] = ()  # real (from, until, flush at, ran), from `go`
    reject_kinds: Collection[str] = frozenset()  # the kinds the simulator rejects (live.flushes)
    max_retries_error = ""  # ioredis's MaxRetriesPerRequestError text
    stopping: threading.Event

    if TYPE_CHECKING:  # LiveWorker's (declared for the type checker only: nothing here may shadow them)

        def call(self, fn: Any, t: float) -> Any: ...

        def emit(self, event: str, **fields: Any) -> None: ...

        def sleep_until(self, when: float) -> None: ...

        def reconnect_at(self, t: float) -> float | None: ...

        def new_token(self) -> str: ...

        def fail_job(
            self, job: str, token: str, reason: str, attempts: int | None = None, finish_ran: bool = False
        ) -> Any: ...

    def rejection(self, kind: str, t: float) -> tuple[float, bool] | None:
        """(flush time, had run at Redis) if a flush rejects a request of `kind` sent at `t`, else None."""
        if kind not in self.reject_kinds:
            return None
        return next(((f, ran) for b, u, f, ran in self.flushes if b <= t < u), None)

    def reject(self, fn: Any, t: float, flush: float, ran: bool, issued: Any) -> tuple[float, Rejected]:
        """The request `fn` sent at `t`, rejected at `flush`: sent to Redis first if it got there before the
        drop (`ran`), then waited on until the flush -> (t, Rejected)."""
        reply = self.call(fn, t) if ran else None
        if issued is not None:
            issued()
        self.sleep_until(flush)
        if self.stopping.is_set():
            raise redis.ConnectionError("stopped while waiting for a flush")  # the thread ends quietly
        return t, Rejected(ran, reply)

    def renew_rejected(self, got: Rejected, due: list[tuple[str, str]], sent: float) -> list[str]:
        """A rejected renewal: recorded as Redis ran it (`ran`), or lost (`renew_lost`, at its send time, as
        the simulator's `Server.renewal_lost`); its jobs stay tracked either way -> no failed jobs."""
        if got.ran and isinstance(got.reply, list):
            self.emit("renew", t=sent, held=due, failed=got.reply)
        elif got.ran:  # refused READONLY by a failover's demoted primary: nothing extended
            self.emit("renew", t=sent, held=due, failed=[], readonly=True)
        else:
            self.emit("renew", t=sent, held=due, failed=None, rejected=True)
        return []

    def take_rejected(self, got: Rejected, token: str, sent: float) -> str:
        """A rejected take (moveToActive): a job its run at Redis took is orphaned (taken, never started);
        BullMQ fetches again, which the simulator's marker wait lets happen at the reconnect -> the token of
        the next take."""
        if got.ran and isinstance(got.reply, str):  # (its take counts the request in the records)
            self.emit("take", job=got.reply, token=token, t=sent, s=None, orphan=True)
            token = self.new_token()
        else:
            self.emit("rejected", kind="take", t=sent)  # one moveToActive in the records' request count
        back = self.reconnect_at(time.time())
        if back is not None:
            self.sleep_until(back)
        return token

    def finish_rejected(self, got: Rejected, job: str, token: str, sent: float, nxt: str | None) -> Any:
        """A rejected finish: recorded as Redis ran it, if it did (and the job its fetchNext took is orphaned);
        then BullMQ's handleFailed: moveToFailed with ioredis's error (`fail_job`) -> what that returns."""
        if got.ran and isinstance(got.reply, list):  # (refused READONLY: the records show nothing)
            code, active = got.reply[:2]
            self.emit("finished", job=job, token=token, t=sent, r=time.time(), code=code, active=active)
            if nxt is not None and len(got.reply) > 2 and got.reply[2]:
                self.emit("take", job=str(got.reply[2]), token=nxt, t=sent, s=None, fetched=True, orphan=True)
        return self.fail_job(job, token, self.max_retries_error, finish_ran=got.ran)

    def fail_rejected(
        self, got: Rejected, job: str, token: str, sent: float, nxt: str | None, after: bool
    ) -> None:
        """A rejected moveToFailed (`after`: it follows a finish that had run): recorded as Redis ran it, if it
        did; else, after a finish that never ran, the finish is given up (`given_up`: `finish_rejected` with
        ioredis's error at the flush; the job stays active and its lock lapses)."""
        if got.ran and isinstance(got.reply, list):
            code, active, retried = got.reply[:3]
            if not (after and code != 0):  # the copy of a finish that ran is refused: the records stay
                self.emit(
                    "failed",
                    job=job,
                    token=token,
                    t=sent,
                    code=code,
                    active=active,
                    retried=retried,
                    reason=self.max_retries_error,
                )
            if nxt is not None and got.reply[3]:
                self.emit("take", job=str(got.reply[3]), token=nxt, t=sent, s=None, fetched=True, orphan=True)
        elif not got.ran and not after:
            self.emit("given_up", job=job, token=token, t=time.time(), error=self.max_retries_error)
