"""A downstream store that checks fencing tokens, fed by the writes a run's workers made.

A worker that finishes its work writes the job's result to a downstream resource (a database row, a file)
and then tells the queue it finished. The queue's own token check (`fenced=True`, BullMQ's `moveToFinished`)
protects only the queue's completion; the result written downstream is protected only if the *store* checks
a token (Kleppmann, *How to do distributed locking*, 2016). This module replays a `Run`'s writes through such a
store, after the simulation: it changes nothing the simulator computes.

* **Token:** `Attempt.attempt`, the job's take counter (BullMQ's `attemptsStarted`): take n of a job carries
  token n, so tokens grow with every take of the same job.
* **Writes:** every attempt that finished its work (`finished_at` set) writes its result, the value
  ``"take <n> by worker <w>"``, at `finished_at`: the worker writes before the queue hears of its finish.
  Writes are replayed in time order; writes at the same instant keep the engine's record order.
* **The store** keeps, per job, the token and value of the last write it accepted. `accept(last_token,
  token)` decides each write; `last_token` is None when nothing was accepted for the job yet. `fenced` accepts
  only a token greater than the last one (an equal token is refused: it is not newer); `accept_all` is a store
  without the check.
* **Corruption:** a job is *corrupted* when the store accepted a write whose token is lower than the token of
  the value it replaced: a newer take's result was overwritten by a stale one. A store with a check that
  refuses such writes (e.g. `fenced`) never corrupts a job.
* **Check-then-act:** with `check_gap`, each worker first asks Redis whether the job's lock is still its own
  (a GET of the lock) and writes only if it is. The check runs `check_gap` seconds of the worker's own running
  time before the write: a pause (freeze or blocked loop) that lands between the check and the write is not
  seen by the check, so the worker writes on a lock that lapsed meanwhile. The check reads the run's lock
  events (`simulate(..., record_locks=True)`, the default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from emqsim.records import Attempt, LockEvent, Run

Accept = Callable[[int | None, int], bool]


def fenced(last_token: int | None, token: int) -> bool:
    """The fencing check: accept only a token greater than the last accepted one (or the first write)."""
    return last_token is None or token > last_token


def accept_all(last_token: int | None, token: int) -> bool:
    """A store without the check: every write is accepted."""
    return True


@dataclass(frozen=True, slots=True)
class StoreWrite:
    """One write the store received, and what it did with it. `replaced` is the token of the value an accepted
    write replaced (None: the first accepted write of the job, or a refused write)."""

    job: str
    token: int
    value: str
    at: float
    accepted: bool
    replaced: int | None = None

    @property
    def stale_overwrite(self) -> bool:
        """Accepted although the store held a newer take's result: the corruption this module counts."""
        return self.accepted and self.replaced is not None and self.replaced > self.token


class DownstreamStore:
    """One key per job holding (token, value) of the last accepted write; `accept` is the store's check."""

    def __init__(self, accept: Accept = fenced) -> None:
        if not callable(accept):
            raise TypeError("accept must be a function accept(last_token, token) -> bool")
        self.accept = accept
        self.tokens: dict[str, int] = {}
        self.values: dict[str, str] = {}
        self.log: list[StoreWrite] = []

    def write(self, job: str, token: int, value: str, at: float) -> bool:
        """Offer a write; True if the store accepted it. Raises TypeError if `accept` answers anything but a
        bool."""
        last = self.tokens.get(job)
        ok = self.accept(last, token)
        if not isinstance(ok, bool):
            raise TypeError(f"accept({last!r}, {token!r}) returned {ok!r}: it must return True or False")
        if ok:
            self.tokens[job] = token
            self.values[job] = value
        self.log.append(StoreWrite(job, token, value, at, ok, last if ok else None))
        return ok


@dataclass(frozen=True, slots=True)
class Write:
    """A write a worker makes: the job, its take's token, the result, the time, and (with a lock check) when
    the worker checked its lock and whether the check said the lock was its own."""

    job: str
    token: int
    value: str
    at: float
    worker: int
    checked_at: float | None = None
    lock_ok: bool | None = None


@dataclass(frozen=True, slots=True)
class FencingReport:
    """A run's writes replayed through a store. `skipped`: writes the worker's own lock check stopped.
    `final`: (job, token, value) stored at the end, by job. `corrupted_jobs`: jobs with a stale overwrite."""

    writes: int
    accepted: int
    rejected: int
    skipped: int
    corrupted_jobs: tuple[str, ...]
    final: tuple[tuple[str, int, str], ...]
    log: tuple[StoreWrite, ...]
    checks: tuple[Write, ...]

    @property
    def corrupted(self) -> int:
        return len(self.corrupted_jobs)


def worker_pauses(run: Run, worker: int) -> list[tuple[float, float]]:
    """The worker's pauses (freeze -> resume, block -> unblock) as (start, end); an unended one ends at
    `run.end`."""
    out: list[tuple[float, float]] = []
    open_at: dict[str, float] = {}
    ends = {"resume": "freeze", "unblock": "block"}
    for e in run.worker_events:
        if e.worker != worker:
            continue
        if e.kind in ("freeze", "block"):
            open_at.setdefault(e.kind, e.time)
        elif e.kind in ends and ends[e.kind] in open_at:
            out.append((open_at.pop(ends[e.kind]), e.time))
    out.extend((start, run.end) for start in open_at.values())
    return sorted(out)


def check_time(run: Run, attempt: Attempt, gap: float) -> float:
    """When the worker of `attempt` checks its lock: `gap` seconds of its own running time before its write
    (pauses do not count), and not before it started the job."""
    if attempt.finished_at is None:
        raise ValueError(f"take {attempt.attempt} of job {attempt.job} made no write")
    if gap < 0:
        raise ValueError(f"check_gap must be >= 0, got {gap}")
    start = attempt.started_at if attempt.started_at is not None else attempt.taken_at
    t, left = attempt.finished_at, gap
    for s, e in reversed(worker_pauses(run, attempt.worker)):
        if s >= t:
            continue
        e = min(e, t)
        if t - e >= left:
            break
        left -= t - e
        t = s
    return round(max(t - left, start), 6)


def holds_lock(events: list[LockEvent], job: str, token: str, at: float) -> bool:
    """What a GET of the job's lock at `at` tells the worker holding `token`: whether the lock is its own.
    `events` are the run's lock events (with their logical expiries)."""
    held = False
    for e in events:
        if e.time > at:
            break
        if e.job != job or e.token != token:
            continue
        if e.kind in ("set", "renewed"):
            held = True
        elif e.kind in ("expired", "deleted", "released"):
            held = False
        elif e.kind == "lost_in_failover":
            held = e.expires_at is not None
    return held


def writes(run: Run, check_gap: float | None = None) -> list[Write]:
    """The writes of `run`'s workers in the order the store receives them (time, then record order). With
    `check_gap`, each carries the time and answer of its worker's lock check."""
    if check_gap is not None and not run.lock_events and run.attempts:
        raise ValueError("a lock check needs the run's lock events: simulate(..., record_locks=True)")
    events = sorted(run.lock_events, key=lambda e: e.time)
    out = []
    for a in run.attempts:
        if a.finished_at is None:
            continue
        value = f"take {a.attempt} by worker {a.worker}"
        checked_at = lock_ok = None
        if check_gap is not None:
            checked_at = check_time(run, a, check_gap)
            lock_ok = holds_lock(events, a.job, a.token, checked_at)
        out.append(Write(a.job, a.attempt, value, a.finished_at, a.worker, checked_at, lock_ok))
    out.sort(key=lambda w: w.at)  # stable: same-time writes keep the engine's record order
    return out


def replay(run: Run, accept: Accept = fenced, *, check_gap: float | None = None) -> FencingReport:
    """Replay `run`'s writes through a `DownstreamStore(accept)`. With `check_gap` (seconds), each worker
    checks its lock that long before writing and skips the write if the lock was not its own then."""
    store = DownstreamStore(accept)
    offered = writes(run, check_gap)
    skipped = 0
    for w in offered:
        if w.lock_ok is False:
            skipped += 1
            continue
        store.write(w.job, w.token, w.value, w.at)
    accepted = sum(s.accepted for s in store.log)
    corrupted = sorted({s.job for s in store.log if s.stale_overwrite}, key=_job_order)
    return FencingReport(
        writes=len(offered),
        accepted=accepted,
        rejected=len(store.log) - accepted,
        skipped=skipped,
        corrupted_jobs=tuple(corrupted),
        final=tuple(
            (job, store.tokens[job], store.values[job]) for job in sorted(store.tokens, key=_job_order)
        ),
        log=tuple(store.log),
        checks=tuple(offered) if check_gap is not None else (),
    )


def _job_order(job: str) -> tuple[int, str]:
    return (int(job), job) if job.isdigit() else (-1, job)


__all__ = [
    "Accept",
    "DownstreamStore",
    "FencingReport",
    "StoreWrite",
    "Write",
    "accept_all",
    "check_time",
    "fenced",
    "holds_lock",
    "worker_pauses",
    "replay",
    "writes",
]
