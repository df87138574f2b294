"""A run laid out for a timeline, without drawing: each worker's spans (frozen, blocked, disconnected, dead),
each attempt's pieces (running, frozen, blocked, held by a dead worker), its locks, renewals and timeout clock,
and the rows that keep overlapping attempts of one worker apart."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from emqsim.records import Attempt, Run
from emqsim.verdict import reclaim_time

__all__ = ["AttemptShape", "WorkerSpans", "attempt_shapes", "lay_out", "worker_spans"]


@dataclass
class WorkerSpans:
    """One worker's life on the timeline: when it started (or restarted), died, and its spans frozen, with the
    event loop blocked, disconnected and reconnecting, and the times it resent its commands."""

    wid: int
    start: float = 0.0
    restarted: bool = False
    died: float | None = None
    frozen: list[tuple[float, float]] = field(default_factory=list)
    blocked: list[tuple[float, float]] = field(default_factory=list)
    disconnected: list[tuple[float, float]] = field(default_factory=list)
    reconnecting: list[tuple[float, float]] = field(default_factory=list)
    resends: list[float] = field(default_factory=list)


def worker_spans(run: Run) -> dict[int, WorkerSpans]:
    """Every worker of `run` (by id, in order), its spans read from the run's worker events."""
    workers: dict[int, WorkerSpans] = {}
    open_freeze: dict[int, float] = {}
    open_block: dict[int, float] = {}
    open_drop: dict[int, float] = {}
    for e in run.worker_events:
        w = workers.setdefault(e.worker, WorkerSpans(e.worker, start=e.time))
        if e.kind in ("start", "restart"):
            w.start, w.restarted = e.time, e.kind == "restart"
        elif e.kind == "block":
            open_block[e.worker] = e.time
        elif e.kind == "unblock" and e.worker in open_block:
            w.blocked.append((open_block.pop(e.worker), e.time))
        elif e.kind == "disconnect":
            open_drop[e.worker] = e.time
        elif e.kind == "network_up" and e.worker in open_drop:
            w.disconnected.append((open_drop.pop(e.worker), e.time))
            open_drop[e.worker] = e.time
        elif e.kind == "reconnect" and e.worker in open_drop:
            w.reconnecting.append((open_drop.pop(e.worker), e.time))
            w.resends.append(e.time)
        elif e.kind == "freeze":
            open_freeze[e.worker] = e.time
        elif e.kind == "resume" and e.worker in open_freeze:
            w.frozen.append((open_freeze.pop(e.worker), e.time))
        elif e.kind == "crash":
            w.died = e.time
            if e.worker in open_freeze:
                w.frozen.append((open_freeze.pop(e.worker), e.time))
            if e.worker in open_block:
                w.blocked.append((open_block.pop(e.worker), e.time))
    for wid, t in open_freeze.items():
        workers[wid].frozen.append((t, run.end))
    for wid, t in open_block.items():
        workers[wid].blocked.append((t, run.end))
    for a in run.attempts:
        workers.setdefault(a.worker, WorkerSpans(a.worker))
    return dict(sorted(workers.items()))


def split_work(
    t0: float, t1: float, frozen: Sequence[tuple[float, float]], blocked: Sequence[tuple[float, float]] = ()
) -> list[tuple[float, float, str]]:
    """[t0, t1] cut into running, frozen and blocked (running with the event loop blocked) pieces."""
    pieces, t = [], t0
    spans = sorted([(f0, f1, "frozen") for f0, f1 in frozen] + [(b0, b1, "blocked") for b0, b1 in blocked])
    for f0, f1, kind in spans:
        a, b = max(f0, t0, t), min(f1, t1)
        if b <= a:
            continue
        if a > t:
            pieces.append((t, a, "running"))
        pieces.append((a, b, kind))
        t = b
    if t1 > t:
        pieces.append((t, t1, "running"))
    return pieces


@dataclass
class AttemptShape:
    """One attempt as drawn: its work pieces, its locks, renewals and refused renewals, its timeout clock, and
    the time span everything occupies (for packing rows)."""

    attempt: Attempt
    segments: list[tuple[float, float, str]]
    locks: list[tuple[float, float, bool]]  # (start, end, ended by expiry)
    renewals: list[float]
    refused: list[float]
    deadline: tuple[float, float, bool] | None  # (start, end, reached)
    start: float
    stop: float


def attempt_shapes(run: Run, workers: Mapping[int, WorkerSpans]) -> list[AttemptShape]:
    """The shape of every attempt of `run`, in the run's attempt order."""
    by_token: dict[tuple[str, str | None], list] = {}
    for e in run.lock_events:
        by_token.setdefault((e.job, e.token), []).append(e)
    timeout = run.policy.get("timeout")
    finished: dict[str, list[float]] = {}
    for a in run.attempts:
        if a.finish_result == "accepted" and a.finish_applied_at is not None:
            finished.setdefault(a.job, []).append(a.finish_applied_at)
    shapes = []
    for a in run.attempts:
        start = a.started_at if a.started_at is not None else a.taken_at
        if a.finished_at is not None:
            work_end = a.finished_at
        elif a.died_at is not None:
            work_end = a.died_at
        elif a.failed_at is not None and a.reclaimed_by is None:  # failed by its own worker
            work_end = a.failed_at
        else:
            work_end = run.end
        w = workers[a.worker]
        segments = split_work(start, max(start, work_end), w.frozen, w.blocked)
        if a.died_at is not None:
            end = reclaim_time(a)
            segments.append((a.died_at, run.end if end is None else end, "held"))
        locks, renewals, refused = [], [], []
        opened: float | None = None
        expiry: float | None = None
        for e in by_token.get((a.job, a.token), ()):
            if e.kind == "set" or (e.kind == "renewed" and opened is None):
                opened, expiry = e.time, e.expires_at
                if e.kind == "renewed":
                    renewals.append(e.time)
            elif e.kind == "renewed":
                renewals.append(e.time)
                expiry = e.expires_at
            elif e.kind == "renew_failed":
                refused.append(e.time)
            elif e.kind in ("expired", "released", "deleted") and opened is not None:
                locks.append((opened, e.time, e.kind == "expired"))
                opened = None
        if opened is not None:
            locks.append((opened, run.end if expiry is None else min(expiry, run.end), False))
        deadline = None
        if timeout is not None:
            # The clock stops when the job leaves `active`: reclaimed, or finished by any of its attempts.
            limit = a.taken_at + timeout
            leaves = [t for t in (reclaim_time(a), run.end) if t is not None] + [
                t for t in finished.get(a.job, ()) if t >= a.taken_at
            ]
            end = min(limit, min(leaves))
            deadline = (a.taken_at, end, end >= limit)
        stop = max(
            [work_end] + [s[1] for s in segments] + [lk[1] for lk in locks] + [deadline[1] if deadline else 0]
        )
        if a.finish_applied_at is not None:
            stop = max(stop, a.finish_applied_at)
        shapes.append(AttemptShape(a, segments, locks, renewals, refused, deadline, start, stop))
    return shapes


def pack_rows(shapes: Sequence[AttemptShape], gap: float) -> dict[int, int]:
    """Rows inside one lane: first fit, so overlapping attempts of one worker get separate rows."""
    rows_end: list[float] = []
    row_of: dict[int, int] = {}
    for i, s in sorted(enumerate(shapes), key=lambda p: (p[1].start, p[0])):
        for r, end in enumerate(rows_end):
            if end + gap <= s.start:
                rows_end[r] = s.stop
                row_of[i] = r
                break
        else:
            row_of[i] = len(rows_end)
            rows_end.append(s.stop)
    return row_of


def lay_out(
    run: Run, window: tuple[float, float], jobs: Iterable[str] | None
) -> tuple[
    dict[int, WorkerSpans], list[AttemptShape], list[tuple[WorkerSpans, list[AttemptShape], dict[int, int]]]
]:
    """Lanes: one per worker that exists in the window, rows inside for overlapping attempts."""
    t0, t1 = window
    workers = worker_spans(run)
    wanted = None if jobs is None else {str(j) for j in jobs}
    shapes = [
        s
        for s in attempt_shapes(run, workers)
        if (wanted is None or s.attempt.job in wanted) and s.stop >= t0 and s.start <= t1
    ]
    lanes = []
    for w in workers.values():
        mine = [s for s in shapes if s.attempt.worker == w.wid]
        if not mine and (w.start > t1 or (w.died is not None and w.died < t0) or wanted is not None):
            continue
        lanes.append((w, mine, pack_rows(mine, gap=0.0)))
    return workers, shapes, lanes
