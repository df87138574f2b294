"""A live worker (or reaper) process: real threads, real Redis, real time.

Started by `emqsim.live.runner` as `python <this file>`, so it imports only the standard library, redis-py
and the sibling `lua.py` (loaded by path), never the `emqsim` package with its scientific stack: a worker
starts in about 0.3 s. Its settings arrive as one JSON line on stdin; it connects, says `ready` and waits
(the runner keeps a ready spare to replace crashed workers at once); `go {json}` gives it its worker id,
its start time and its timer phases, and `stop` ends it. It reports every protocol step as one JSON line on stdout (one `os.write` per line, atomic for
lines under PIPE_BUF, so a SIGKILL never leaves half a line in the middle of the stream).

Threads, as in a BullMQ worker:
  fetcher       takes a job whenever a concurrency slot is free (polling `take` while `wait` is empty)
  one per job   works (sleeps in short chunks, so time spent stopped by SIGSTOP does not count as work),
                then sends the finish
  lock manager  ONE timer renewing every due lease of this worker in ONE EVALSHA per tick
  sweeper       the stalled sweep (or the timeout reaper) on its own timer; the `stalled-check` key
                rate-limits it to once per interval for the whole queue

Node runs all of these on one event loop; here `loop` is a lock each thread takes before each step (a timer
firing, a take, a finish). `block <seconds>` on stdin runs a busy loop holding it, as a CPU-bound job blocks
Node's loop: the jobs' work goes on, but no renewal, sweep, take or finish is sent until it ends.

Connection outages are emulated on the client side, as ioredis behaves under BullMQ (`maxRetriesPerRequest:
null`): `go` carries the worker's outage windows (real times: disconnected, reconnected), computed by the
parent with the simulator's own function; a request sent inside a window waits in an offline queue until
the reconnect and is then sent, in the order it was queued. A take already waiting for a job when the
connection drops (a parked blocking take; here the fetcher's polls since before the disconnect) stays
parked at Redis, as in the simulator: it may take a job during the outage, and the worker reads that reply
at the reconnect. At the disconnect the parent closes this worker's connections for real (`CLIENT KILL`;
the worker names them `emqsim-w<id>`); a request the close caught waits for the reconnect and is resent,
as ioredis resends unanswered commands. The polls standing for a parked take open a new connection (in the
model that take is still parked at Redis). While the parent restarts Redis (windows marked `down`) every
connection is closed by the shutdown, the parked take is dropped with it and resent at the reconnect like
every other request, and a request that meets the server still starting is tried again every 5 ms, as
ioredis keeps reconnecting. With `Network(resend_twice)` a request sent where the simulator's rule says a drop
catches its reply runs twice: its reply is thrown away and the same command sent again when ioredis would
resend it (`Resending`, emqsim/live/replies.py). With `Network(max_retries_per_request)` a request still held
at one of ioredis's queue flushes is rejected there (`Rejecting`, emqsim/live/rejects.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def _sibling(name: str) -> Any:
    """A sibling module (standard library only) loaded from its file, without importing the emqsim package."""
    spec = importlib.util.spec_from_file_location(
        f"emqsim_live_{name}", Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __package__:
    from .lua import RawScripts
    from .rejects import Rejected, Rejecting
    from .replies import LOST, READONLY, READONLY_CODE, Resending, redis_refusal
    from .sandbox import Sandbox
else:  # run as a file: the same classes, loaded from their files
    RawScripts = _sibling("lua").RawScripts  # type: ignore[misc]
    _r = _sibling("replies")
    LOST, READONLY, READONLY_CODE = _r.LOST, _r.READONLY, _r.READONLY_CODE
    Resending, redis_refusal = _r.Resending, _r.redis_refusal  # type: ignore[misc]
    Sandbox = _sibling("sandbox").Sandbox  # type: ignore[misc]
    _j = _sibling("rejects")  # once: `Rejected` must be the class `Rejecting` makes
    Rejected, Rejecting = _j.Rejected, _j.Rejecting  # type: ignore[misc]

# Real seconds a Redis call may wait for a reply; as emqsim.live.server.SOCKET_TIMEOUT (no emqsim import here).
SOCKET_TIMEOUT = 5.0


def connection_name(wid: int) -> str:
    """The name a worker's Redis connections carry (`CLIENT SETNAME`) when it has outages."""
    return f"emqsim-w{wid}"


class Tracked:
    """A tracked take, keyed by its token: one worker may hold a job twice (a stale take and a new one)."""

    __slots__ = ("job", "ts")

    def __init__(self, job: str, ts: float) -> None:
        self.job = job
        self.ts = ts


class LiveWorker(Resending, Rejecting):
    """One process: its settings, its Redis connection pool, its threads."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.wid: int | None = None  # given by `go`
        self.label = ""
        self.first_renew_ms = 0
        self.first_sweep_ms = 0
        self.client = self.connect()
        self.scripts = RawScripts(self.client, cfg["keys"], cfg["shas"])
        self.out_lock = threading.Lock()
        self.tracked: dict[str, Tracked] = {}
        self.tracked_lock = threading.Lock()
        self.loop = threading.Lock()  # the event loop: held by a blocking (CPU-bound) section
        self.by_job = bool((cfg.get("renewal") or {}).get("track_by") == "job")
        self.counts = {"take": 0, "poll": 0, "renew": 0, "finish": 0, "sweep": 0}
        self.takes = 0  # tokens handed out (`new_token`)
        self.counts_lock = threading.Lock()
        self.stopping = threading.Event()
        self.go = threading.Event()
        self.t0 = 0.0
        net = cfg.get("network") or {}
        self.loss = float(net.get("loss", 0.0))
        self.loss_all = net.get("loss_on") == "all"
        self.command_timeout = float(net.get("command_timeout_s", 1.0))
        self.rng = random.Random(0)
        self.rng_lock = threading.Lock()
        # (disconnected, reconnected, Redis itself down), real times, from `go`
        self.outages: list[tuple[float, float, bool]] = []
        # real (from, until) in which a silent partition's proxy holds this worker's connections (`go`)
        self.held: list[tuple[float, float]] = []
        # real (from, until, copy sent at): requests of `resend_kinds` sent then run twice (`deliver`, `go`)
        self.resend: list[tuple[float, float, float]] = []
        self.resend_kinds = set(cfg.get("resend_kinds") or ())
        # Network.max_retries_per_request: real (from, until, flush, ran) spans a flush rejects (`go`, `reject`)
        self.reject_kinds, self.max_retries_error = set(cfg.get("reject_kinds") or ()), cfg.get("error", "")
        # real (from, until) around a failover whose clients stay on the demoted primary (`go`): a closed
        # connection is reopened (the demotion, then the move to the new primary close them)
        self.switches: list[tuple[float, float]] = []
        self.offline = threading.Condition()  # the offline queue: requests sent in ticket order
        self.tickets = 0
        self.served = 0
        # A lock-manager tick decides which leases are due and sends them in one step, as a callback on Node's
        # loop does: a finish waits while a decided tick is not yet issued (sent and answered, queued offline,
        # or lost), so it can never reach Redis between the tick's decision and its renewal.
        self.tick = threading.Condition()
        self.tick_pending = False

    def connect(self, name: str | None = None) -> redis.Redis:
        """A client of the run's Redis (named `name`, if given); `call` decides what is tried again."""
        return redis.Redis.from_url(
            self.cfg["redis"],
            decode_responses=True,
            health_check_interval=0,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
            client_name=name,
        )

    # -- reporting ------------------------------------------------------------------------------------------
    def emit(self, event: str, **fields: Any) -> None:
        line = (json.dumps({"e": event, "w": self.wid, **fields}, separators=(",", ":")) + "\n").encode()
        with self.out_lock:
            view = memoryview(line)
            while view:
                n = os.write(1, view)
                view = view[n:]

    def count(self, kind: str) -> None:
        with self.counts_lock:
            self.counts[kind] += 1

    def emit_counts(self) -> None:
        with self.counts_lock:
            counts = dict(self.counts)
        self.emit("counts", counts=counts)

    # -- requests ------------------------------------------------------------------------------------------
    def lost(self, kind: str) -> bool:
        if self.loss <= 0 or not (self.loss_all or kind == "renew"):
            return False
        with self.rng_lock:
            return self.rng.random() < self.loss

    def request(
        self,
        kind: str,
        fn: Any,
        retry: bool = True,
        offline: bool = True,
        issued: Any = None,
        first: Any = None,
    ) -> tuple[float, Any]:
        """One round trip: `fn(t)` sent at real time `t` -> (t, reply). An emulated lost request costs
        `command_timeout` and is retried unless `retry` is False (renewals), in which case LOST comes back.
        A request sent while the connection is down waits in the offline queue (`offline=False`: a poll of
        a take that is parked at Redis, which an outage does not hold back). `issued()`, if given, is called
        once the request is on its way for good: lost, queued offline, or answered. `first`: see `deliver`."""
        while True:
            if self.lost(kind):
                if kind != "poll":
                    self.count(kind)
                if issued is not None:
                    issued()
                time.sleep(self.command_timeout)
                if not retry:
                    return time.time(), LOST
                continue
            # a flush rejects it (Network.max_retries_per_request; rejects.py); a parked take is not rejected
            hit = self.rejection(kind, time.time()) if offline else None
            if hit is not None:
                return self.reject(fn, time.time(), *hit, issued)
            if offline or self.redis_down_at(time.time()):
                t, reply = self.send(fn, issued, kind, first)
                return self.reached(t), reply
            t, reply = self.deliver(fn, time.time(), issued, kind, first)
            return self.reached(t), reply

    def reached(self, t: float) -> float:
        """When a request sent at `t` reached Redis: at once, or, sent during a silent partition, at its end
        (the proxy let go, or after TCP gave up the request was resent at the reconnect). That is the step's
        time in the records; the script's `now` stays `t`, the client's clock, as BullMQ's."""
        for begin, end in self.held:
            if begin <= t < end:
                return end
        return t

    def reconnect_at(self, t: float) -> float | None:
        """The reconnect ending the outage `t` falls in (None: the connection is up at `t`)."""
        for begin, back, _ in self.outages:
            if begin <= t < back:
                return back
        return None

    def redis_down_at(self, t: float) -> bool:
        return any(begin <= t < back and down for begin, back, down in self.outages)

    def send(self, fn: Any, issued: Any = None, kind: str = "", first: Any = None) -> tuple[float, Any]:
        """Send `fn(t)` now, or, while disconnected, queue it until the reconnect and send it then, after the
        requests queued before it (ioredis's offline queue). `issued`, `kind`, `first`: as in `request`."""
        t = time.time()
        back = self.reconnect_at(t)
        if back is None:
            return self.deliver(fn, t, issued, kind, first)
        with self.offline:
            ticket = self.tickets
            self.tickets += 1
        if issued is not None:
            issued()
        self.sleep_until(back)
        with self.offline:
            while self.served != ticket and not self.stopping.is_set():
                self.offline.wait(0.05)
        try:
            return self.deliver(fn, time.time(), None, kind, first)
        finally:
            with self.offline:
                self.served += 1
                self.offline.notify_all()

    # -- threads -------------------------------------------------------------------------------------------
    def sleep_until(self, when: float) -> None:
        delay = when - time.time()
        if delay > 0:
            self.stopping.wait(delay)

    def new_token(self) -> str:
        """The next take's token (`<wid>:<n>`): the fetcher's takes and the finishes' fetchNext share the count."""
        with self.counts_lock:
            self.takes += 1
            return f"{self.wid}:{self.takes}"

    def fetcher(self) -> None:
        take = self.cfg["take"]
        slots = threading.Semaphore(self.cfg["concurrency"])
        poll = self.cfg["poll_s"]

        def take_as(token: str) -> Any:
            return lambda t: self.scripts.take(token, int(t * 1000), take["lock_ms"], take["set_lock"])

        while not self.stopping.is_set():
            slots.acquire()
            parked = False  # the first take is sent (through the offline queue); the polls after it stand
            token = (
                self.new_token()
            )  # for a blocking take parked at Redis, which an outage does not hold back
            while True:
                if self.stopping.is_set():
                    return
                self.wait_loop()
                first: list[Any] = []
                t, job = self.request("take", take_as(token), offline=not parked, first=first)
                if isinstance(job, Rejected):  # BullMQ fetches again (at the reconnect: its marker wait)
                    token, parked = self.take_rejected(job, token, t), False
                    continue
                for ran, got in first:  # ran twice (`deliver`): the job the first run took is orphaned
                    if got is not None and got is not READONLY:
                        self.emit("take", job=got, token=token, t=ran, s=None, orphan=True)
                        token = token if job is not None else self.new_token()  # the next take's own
                if job is READONLY:  # refused by a demoted primary: no job; BullMQ fetches again at once
                    job = None
                if job is not None:
                    break
                parked = True
                self.count("poll")
                self.stopping.wait(poll)
            self.count("take")
            back = self.reconnect_at(t)
            if back is not None:  # taken while disconnected: the reply is read at the reconnect
                self.sleep_until(back)
            threading.Thread(
                target=self.guard(self.start_job), args=(job, token, t, slots), daemon=True
            ).start()

    def doomed(self, job: str) -> bool:
        """lazy_fail (BullMQ 6): whether the sweep marked the job (`defa`) for its next taker to fail. BullMQ
        reads it in moveToActive's reply; here it is one more read, right after the take."""
        if not self.cfg.get("lazy_fail"):
            return False
        key = self.cfg["keys"]["prefix"] + job
        return self.send(lambda _: self.client.hget(key, "defa"))[1] is not None

    def start_job(self, job: str, token: str, t: float, slots: threading.Semaphore) -> None:
        """A job the fetcher took: fail it at once if marked (lazy_fail: its attempt never starts), else work
        on it (`run_job`)."""
        if self.doomed(job):
            self.emit("take", job=job, token=token, t=t, s=None)
            fetched = self.fail_job(job, token, "job stalled more than allowable limit", attempts=1)
            if fetched is None:
                slots.release()
                return
            job, token = fetched
        else:
            started = time.time()
            self.begin(job, token, t, started, started * 1000)
        self.run_job(job, token, slots)

    def begin(self, job: str, token: str, t: float, started: float, tracked_ms: float, **extra: Any) -> None:
        """Start work on a job taken at (sent) time `t`: the lock manager tracks it from `tracked_ms`."""
        with self.tracked_lock:
            if self.by_job:  # a lock manager keyed by job id: a re-take replaces the stale entry
                for other in [k for k, h in self.tracked.items() if h.job == job]:
                    del self.tracked[other]
            self.tracked[token] = Tracked(job, tracked_ms)
        self.emit("take", job=job, token=token, t=t, s=started, **extra)

    def run_job(self, job: str, token: str, slots: threading.Semaphore) -> None:
        """Work on the job and finish it; with fetchNext, as long as the finish takes the next job, work on
        that one in the same slot."""
        while True:
            fetched = self.work_and_finish(job, token)
            if fetched is None:
                break
            job, token = fetched
        slots.release()

    def work_and_finish(self, job: str, token: str) -> tuple[str, str] | None:
        """One job's work and finish; returns the next job the finish took for this slot (fetchNext), else
        None."""
        work = float(self.cfg["works"][int(job)])
        remaining = work
        chunk, slack = self.cfg["chunk_s"], self.cfg["slack_s"]
        spawning = time.monotonic()
        child = Sandbox(self, job, token) if self.cfg.get("sandboxed") else None
        remaining -= time.monotonic() - spawning  # the child's start is part of the job's run
        exited = child.exited if child is not None else threading.Event()
        while remaining > 0 and not self.stopping.is_set() and not exited.is_set():
            step = min(remaining, chunk)
            start = time.monotonic()
            exited.wait(step)
            # Time beyond the chunk (plus scheduling slack) is time this process was stopped, not working.
            remaining -= min(time.monotonic() - start, step + slack)
        if self.stopping.is_set():
            return None
        if child is not None and child.died(max(0.0, work - max(remaining, 0.0))):
            return self.fail_job(job, token, "Unexpected exit code")
        self.wait_loop()  # the job's completion runs on the loop: after any block
        t = time.time()
        self.emit("finishing", job=job, token=token, t=t)
        self.count("finish")
        fenced, remove = self.cfg["fenced"], self.cfg.get("remove_on_complete", False)
        self.after_tick()
        take = self.cfg["take"]
        nxt = self.new_token() if self.cfg.get("fetch_next") else None

        def finish(t: float) -> Any:
            fetch = None if nxt is None else (nxt, int(t * 1000), take["lock_ms"], take["set_lock"])
            return self.scripts.finish(job, token, fenced, remove, fetch)

        first: list[Any] = []
        sent, reply = self.request("finish", finish, first=first)
        if isinstance(reply, Rejected):  # a flush rejected it: BullMQ's handleFailed (emqsim/live/rejects.py)
            return self.finish_rejected(reply, job, token, sent, nxt)
        ran, ran_reply = self.ran_first(first, sent, reply, job, token, nxt)
        if reply is READONLY:  # refused, and its moveToFailed too: the job is given up (reclaimed later)
            reply = [READONLY_CODE, 0]
        fetched = reply[2] if len(reply) > 2 and reply[2] else None
        code, active = [READONLY_CODE, 0] if ran_reply is READONLY else ran_reply[:2]
        self.emit("finished", job=job, token=token, t=ran, r=time.time(), code=code, active=active)
        return self.after_finish(job, token, sent, fetched, nxt)

    def fail_job(
        self, job: str, token: str, reason: str, attempts: int | None = None, finish_ran: bool = False
    ) -> tuple[str, str] | None:
        """moveToFinished(failed) by the holder (fail.lua), retried while the job's `attempts` are not used up;
        with fetchNext an accepted failure that is not a retry takes the next job (returned, as
        `work_and_finish` does). `finish_ran`: it follows a rejected finish that had run (emqsim/live/rejects.py)."""
        self.wait_loop()
        t = time.time()
        self.emit("failing", job=job, token=token, t=t, reason=reason)
        self.count("finish")
        self.after_tick()
        take = self.cfg["take"]
        nxt = self.new_token() if self.cfg.get("fetch_next") else None

        def fail(t: float) -> Any:
            fetch = None if nxt is None else (nxt, int(t * 1000), take["lock_ms"], take["set_lock"])
            tries = self.cfg.get("attempts", 1) if attempts is None else attempts
            return self.scripts.fail(job, token, self.cfg["fenced"], tries, fetch)

        first: list[Any] = []
        sent, reply = self.request("finish", fail, first=first)
        if isinstance(reply, Rejected):  # a flush rejected it too: given up (emqsim/live/rejects.py)
            self.fail_rejected(reply, job, token, sent, nxt, finish_ran)
            return self.after_finish(job, token)
        ran, ran_reply = self.ran_first(first, sent, reply, job, token, nxt)
        fetched = None if reply is READONLY else reply[3]
        code, active, retried = [READONLY_CODE, 0, 0] if ran_reply is READONLY else ran_reply[:3]
        if finish_ran and code != 0:  # refused after a finish that ran: the records stay the finish's
            return self.after_finish(job, token)
        self.emit(
            "failed", job=job, token=token, t=ran, code=code, active=active, retried=retried, reason=reason
        )
        return self.after_finish(job, token, sent, str(fetched) if fetched else None, nxt)

    def after_finish(
        self, job: str, token: str, sent: float = 0.0, fetched: str | None = None, nxt: str | None = None
    ) -> tuple[str, str] | None:
        """Stop renewing a finished (or failed) job; start the job its fetchNext took, if any."""
        with self.tracked_lock:
            self.tracked.pop(token, None)
            if self.by_job:  # untrackJob(job.id): a fresh copy of the same job stops being renewed too
                for other in [k for k, h in self.tracked.items() if h.job == job]:
                    del self.tracked[other]
        if fetched is None or nxt is None:
            return None
        back = self.reconnect_at(sent)
        if back is not None:  # sent while disconnected: the reply is read at the reconnect
            self.sleep_until(back)
        # BullMQ tracks a fetched job from its processedOn (trackJob(job.id, token, job.processedOn)): the
        # time the finish was sent, which is the `now` the script stamped.
        if self.doomed(fetched):  # marked by lazy_fail: failed at once, never started
            self.emit("take", job=fetched, token=nxt, t=sent, s=None, fetched=True)
            return self.fail_job(fetched, nxt, "job stalled more than allowable limit", attempts=1)
        self.begin(fetched, nxt, sent, time.time(), sent * 1000, fetched=True)
        return fetched, nxt

    def due_at(self, now_ms: float, min_age: float, strict: bool) -> list[tuple[str, str]]:
        """(job, token) of the tracked takes a tick at `now_ms` renews: older than `min_age` (as old, when not
        `strict`), in real ms never truncated to whole ms. A real ms is 1/time_scale simulated ones (4 at 0.25),
        more than the round trip (2 ms) by which BullMQ's tick after the reply finds a lease older than its
        min_age: truncated, 625.x ms read 625 about one tick in three, and the strict rule renewed nothing."""
        ages = [(h.job, token, now_ms - h.ts) for token, h in self.tracked.items()]
        return [(job, token) for job, token, age in ages if age > min_age or (not strict and age >= min_age)]

    def lock_manager(self) -> None:
        rule = self.cfg["renewal"]
        tick, recreate = rule["tick_ms"] / 1000, rule["recreate_missing"]
        lease_ms, min_age, strict = rule["lease_ms"], rule["min_age_ms"], rule["strict"]
        next_tick = self.t0 + self.first_renew_ms / 1000
        self.sleep_until(next_tick)
        while not self.stopping.is_set():
            self.wait_loop()
            with self.tick:
                self.tick_pending = True
            now = time.time()
            now_ms = now * 1000
            with self.tracked_lock:
                due = self.due_at(now_ms, min_age, strict)
                if due and next(self.skips, "0") == "1":  # Network.skipped_ticks: nothing sent, `ts` stays
                    self.emit("renew_skipped", t=now, held=due)
                    due = []
                for _, token in due:
                    self.tracked[token].ts = now_ms
            if not due:
                self.tick_issued()
            else:
                self.count("renew")
                first: list[Any] = []
                try:
                    sent, failed = self.request(
                        "renew",
                        lambda _, d=due, r=recreate: self.scripts.extend_locks(d, lease_ms, r),
                        retry=False,
                        issued=self.tick_issued,
                        first=first,
                    )
                finally:
                    self.tick_issued()
                for ran, got in first:  # ran twice (`deliver`): the first run, as Redis ran it
                    self.emit(
                        "renew",
                        t=ran,
                        held=due,
                        failed=[] if got is READONLY else got,
                        readonly=got is READONLY,
                    )
                lost = failed is LOST
                if isinstance(failed, Rejected):  # a flush rejected it: its jobs stay tracked
                    failed = self.renew_rejected(failed, due, sent)
                elif failed is READONLY:  # nothing extended; the jobs stay tracked and are tried again
                    self.emit("renew", t=sent, held=due, failed=[], readonly=True)
                    failed = []
                else:
                    self.emit("renew", t=sent, held=due, failed=None if lost else failed)
                if not lost and failed:
                    jobs = [job for job, _ in due]
                    for job, token in due:
                        # extendLocks answers with job ids; if this worker holds the job twice, the lock's
                        # current value says which take failed
                        if job in failed and (
                            jobs.count(job) == 1
                            or self.send(
                                lambda _, j=job: self.client.get(self.scripts.k["prefix"] + j + ":lock")
                            )[1]
                            != token
                        ):
                            with self.tracked_lock:
                                self.tracked.pop(token, None)  # lockRenewalFailed: stop renewing a lost lock
            if rule["after_reply"]:
                self.stopping.wait(tick)
            else:
                # Fixed rate on the original grid; ticks missed while the reply was awaited (a blocked loop,
                # an outage) are not replayed: one fires at once, the rest are skipped (the simulator's rule).
                next_tick += tick
                if next_tick <= now:
                    next_tick += ((now - next_tick) // tick + 1) * tick
                late = time.time()
                if next_tick <= late:
                    next_tick += (late - next_tick) // tick * tick
                self.sleep_until(next_tick)

    def sweeper(self) -> None:
        sweep = self.cfg["sweep"]
        kind = sweep["kind"]
        interval = sweep["interval_ms"] / 1000
        lazy = bool(sweep.get("lazy_fail"))  # a job past max_stalled is marked (`defa`), not failed

        def two_phase(now_ms: int, interval_ms: int, max_stalled: int | None) -> Any:
            return self.scripts.sweep_two_phase(now_ms, interval_ms, max_stalled, lazy)

        self.sleep_until(self.t0 + self.first_sweep_ms / 1000)
        while not self.stopping.is_set():
            self.wait_loop()
            self.count("sweep")
            if kind == "reap":
                t, reply = self.request(
                    "sweep",
                    lambda t: self.scripts.reap(int(t * 1000), sweep["timeout_ms"], sweep["max_stalled"]),
                )
            else:
                fn = two_phase if kind == "two_phase" else self.scripts.sweep_single_phase
                t, reply = self.request(
                    "sweep", lambda t, f=fn: f(int(t * 1000), sweep["interval_ms"], sweep["max_stalled"])
                )
            if reply is READONLY:  # the stalled check fails on a demoted primary; the next comes as usual
                reply = [1, [], [], []]
            skipped, reclaimed, failed, marked = reply
            self.emit(
                "sweep",
                t=t,
                by=self.label,
                skipped=bool(skipped),
                reclaimed=reclaimed,
                failed=failed,
                marked=len(marked),
            )
            self.stopping.wait(interval)

    def tick_issued(self) -> None:
        with self.tick:
            self.tick_pending = False
            self.tick.notify_all()

    def after_tick(self) -> None:
        """Wait while a lock-manager tick has decided but not yet issued its renewal (see `tick`)."""
        with self.tick:
            while self.tick_pending and not self.stopping.is_set():
                self.tick.wait(0.05)

    def wait_loop(self) -> None:
        """Wait until the event loop is free (a step's callback cannot run while a block holds it)."""
        with self.loop:
            pass

    def block(self, seconds: float) -> None:
        """A CPU-bound section: a busy loop holding the event loop for `seconds`. It spins on the clock but
        lets go of Python's GIL at every turn (`sleep(0)`), so the jobs' own threads keep their pace: in
        Node the blocking section would be the job's own work, which this process models by time."""
        with self.loop:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not self.stopping.is_set():
                time.sleep(0)

    def reporter(self) -> None:
        while not self.stopping.wait(0.25):
            self.emit_counts()

    def guard(self, fn: Any) -> Any:
        """Wrap a thread body: any exception is reported to the parent and ends the process."""

        def run(*args: Any) -> None:
            try:
                fn(*args)
            except BaseException as exc:
                if self.stopping.is_set():
                    return
                self.emit("error", msg=traceback.format_exc(limit=5), refused=redis_refusal(exc))
                os._exit(3)

        return run

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start_threads(self) -> None:
        bodies = [self.reporter]
        if self.cfg["role"] == "worker":
            bodies.append(self.fetcher)
            if self.cfg.get("renewal"):
                bodies.append(self.lock_manager)
        if self.cfg.get("sweep"):
            bodies.append(self.sweeper)
        for body in bodies:
            threading.Thread(target=self.guard(body), daemon=True).start()

    def main(self) -> int:
        self.client.ping()
        self.emit("ready", pid=os.getpid())
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "go" and not self.go.is_set():
                go = json.loads(line[2:])
                self.wid = int(go["wid"])
                self.label = "reaper" if self.cfg["role"] == "reaper" else f"worker {self.wid}"
                self.t0 = float(go["t0"])
                self.first_renew_ms = int(go["first_renew_ms"])
                self.first_sweep_ms = int(go["first_sweep_ms"])
                self.rng.seed(int(go["seed"]))
                self.outages = [(float(b), float(r), bool(d)) for b, r, d in go.get("outages", ())]
                self.switches = [(float(b), float(e)) for b, e in go.get("switches", ())]
                self.held = [(float(b), float(e)) for b, e in go.get("held", ())]
                self.resend = [(float(b), float(u), float(a)) for b, u, a in go.get("resend", ())]
                self.flushes = [
                    (float(b), float(u), float(f), bool(r)) for b, u, f, r in go.get("flushes", ())
                ]
                self.skips = iter(go.get("skips", ""))  # Network.skipped_ticks: "1" skips a due tick
                if go.get("redis"):  # its own address: a silent partition's proxy
                    self.cfg["redis"] = go["redis"]
                if self.outages or go.get("redis"):  # named, so that the parent can close its connections
                    self.client.close()
                    self.client = self.connect(connection_name(self.wid))
                    self.scripts = RawScripts(self.client, self.cfg["keys"], self.scripts.shas)
                self.go.set()
                self.start_threads()
            elif words[0] == "block" and self.go.is_set():
                threading.Thread(target=self.guard(self.block), args=(float(words[1]),), daemon=True).start()
            elif words[0] == "stop":
                break
        self.stopping.set()
        self.emit_counts()
        self.emit("bye")
        return 0


def main() -> int:
    cfg = json.loads(sys.stdin.readline())
    try:
        worker = LiveWorker(cfg)
        code = worker.main()
    except BaseException:
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(2)
    sys.stderr.flush()
    os._exit(code)  # daemon threads may be inside a Redis call: do not wait for them


if __name__ == "__main__":
    main()
