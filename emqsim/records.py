"""What a run leaves behind: plain, immutable records that statistics, plots and notebooks read.

Every record is a frozen dataclass, made by one writer, `emqsim.ledger.Ledger`: it keeps a private draft of
each attempt while the run is in progress and `emqsim.ledger.finalise` turns the drafts into `Attempt`s when
nothing can change them any more (the simulator and the live mode alike); `WorkerEvent`s are made by the
simulation (or the live runner) that saw the worker act. Nothing changes a record once made: read the fields
by name, or copy one with `dataclasses.replace`.

Times are seconds (floats made from the engine's integer milliseconds by one division, so they are exact and
reproducible). A `Run` hashes to a digest that proves two runs were bit-identical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

# Bumped by every change that alters any simulated result (a fix, a model change). The golden files in
# tests/golden/ pin the results of each schema, and the sweep cache keys on it, so a stale cache can never
# serve numbers an older model produced. 5: run summaries hold `jobs_arrived` and per-job rates divide by it
# (the jobs added before the run ended); run digests did not change. 6: the `bullmq` preset's finish takes
# the slot's next job in the same step (`fetch_next`, BullMQ's moveToFinished), so its runs change; the golden
# corpus holds the new standard scenarios (memory-pressure, stuck-connection, failover, finish-takes-next,
# child-crash, silent-partition, resent-finish); a failover (`Outage.lost_writes`) loses every write of its lag
# window, not only lock writes (changes runs with lost_writes; none was in the corpus). 7: a worker's stalled
# checks draw their round trips from a stream of their own ("network", wid, 2) and each of their steps runs
# after every other event of its millisecond, workers in id order (issue 27's sweep coordinator counts the
# refused ones without simulating them), so every run whose workers run the stalled check changes.
# 8: the golden corpus holds the new standard scenario skipped-ticks (`Network.skipped_ticks`, drawn only when
# > 0); no earlier run changes (every digest recorded under 7 is the same under 8).
# 9: under maxmemory the memory used counts Redis 7's latency histograms (24,688 bytes for each command name
# the server has run: `store.eviction.LATENCY_HISTOGRAM_BYTES`), so every run with `MemoryPressure` changes;
# the standard scenario memory-pressure has maxmemory 1,700,000 (was 1,300,000: the queue's histograms would
# leave its keys almost nothing). No run without maxmemory changes.
# 10: a policy's `redis_commands` (the command names its client library makes Redis run) hold their histograms
# from the start instead of the model's step names: the `bullmq` preset's are BullMQ 6.7's 33 (measured), so
# its runs with `MemoryPressure` change; memory-pressure's maxmemory is 2,100,000 (BullMQ's histograms take
# 814,704 bytes). No run without maxmemory changes.
RESULTS_SCHEMA = 10

WorkerState = Literal["alive", "frozen", "blocked", "disconnected", "dead"]

# Outcomes of one attempt (one take of a job by a worker).
COMPLETED = "completed"  # finish accepted, the job's first completion
DUPLICATE_COMPLETION = (
    "duplicate_completion"  # finish accepted although the job was reclaimed or already done
)
FINISH_REJECTED = "finish_rejected"  # finish refused by the token check ("Missing lock" / "Lock mismatch")
RECLAIMED = "reclaimed"  # taken back by the sweep; the worker never finished it
FAILED = "failed"  # stalled more than max_stalled times: moved to `failed`
RUNNING = "running"  # still running on a live (or frozen) worker at the horizon
HELD = "held"  # its worker is dead and nothing reclaimed it by the horizon (hostage)
OUTCOMES = (COMPLETED, DUPLICATE_COMPLETION, FINISH_REJECTED, RECLAIMED, FAILED, RUNNING, HELD)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One take of a job, final (made by `emqsim.ledger.finalise`, immutable). Server-side times (`taken_at`, `reclaimed_at`, `finish_applied_at`) are when Redis
    executed the step; worker-side times (`started_at`, `finished_at`) are when the worker acted."""

    job: str
    attempt: int
    worker: int
    token: str
    work: float  # seconds of work this attempt needs
    taken_at: float
    started_at: float | None = None
    finished_at: float | None = None  # the worker finished its work and sent the finish
    finish_applied_at: float | None = None
    finish_result: str | None = None  # "accepted", or the moveToFinished error text
    reclaimed_at: float | None = None
    reclaimed_by: str | None = None  # "worker <id>" or "reaper"
    worker_state_at_reclaim: WorkerState | None = None
    failed_at: float | None = None
    died_at: float | None = None  # its worker crashed while holding it
    stopped_at: float | None = None  # its worker crashed while executing it (held, or already reclaimed)
    work_done: float = 0.0  # seconds of work the worker actually did on it
    outcome: str = RUNNING

    @property
    def false_reclaim(self) -> bool:
        """Reclaimed (or failed by the sweep) while its worker was not dead (alive, frozen, blocked or
        disconnected)."""
        return self.worker_state_at_reclaim is not None and self.worker_state_at_reclaim != "dead"

    @property
    def detection_latency(self) -> float | None:
        """Crash -> reclaim, for attempts whose worker died holding them."""
        if self.died_at is None:
            return None
        end = self.reclaimed_at if self.reclaimed_at is not None else self.failed_at
        return None if end is None else end - self.died_at


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    time: float
    worker: int
    kind: str  # start, crash, freeze, resume, block, unblock, disconnect, network_up, reconnect, child_crash, restart
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LockEvent:
    time: float
    job: str
    token: str | None
    # kind: set, renewed, renew_failed, renew_lost, released, deleted, expired, evicted, lost_in_failover,
    # memory_evicted (maxmemory evicted the lock while it was live: `evicted` is an expired lock's removal),
    # renew_skipped (a renewal-timer tick renewed none of its due jobs: Network.skipped_ticks; nothing sent)
    kind: str
    expires_at: float | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SweepEvent:
    time: float
    by: str
    skipped: bool
    reclaimed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    marked: int = 0


@dataclass
class Run:
    """Everything one simulation produced, plus what it was asked to do."""

    scenario: str
    policy: dict[str, Any]
    seed: int
    replication: int
    end: float  # simulated seconds when it stopped
    ended_by: str  # "done" (every job settled) or "horizon"
    jobs: int
    arrivals: list[float] = field(default_factory=list)  # arrival time of job `str(i)` at index i
    attempts: list[Attempt] = field(default_factory=list)
    worker_events: list[WorkerEvent] = field(default_factory=list)
    lock_events: list[LockEvent] = field(default_factory=list)
    sweeps: list[SweepEvent] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)  # client round trips to Redis, by kind
    redis_commands: int = 0  # commands Redis executed (inside scripts too)
    resident_keys_peak: int = 0
    final_state: dict[str, int] = field(
        default_factory=dict
    )  # jobs in wait/active/completed/failed at the end

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of every record: equal digests mean bit-identical runs."""
        text = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def attempts_table(self) -> list[dict[str, Any]]:
        """The attempts as rows (dicts); `pandas.DataFrame(run.attempts_table())` gives a table."""
        rows = []
        for a in self.attempts:
            row = dataclasses.asdict(a)
            row["false_reclaim"] = a.false_reclaim
            row["detection_latency"] = a.detection_latency
            rows.append(row)
        return rows


def with_expiries(events: list[LockEvent], end: float, one_ms: float = 0.001) -> list[LockEvent]:
    """Add the logical expiry of every lock that lapsed: visible through `expires_at`, gone one millisecond
    later (`one_ms` in the records' seconds; the live mode's time scale changes it). Used by the simulator and
    the live mode alike, so both report lapses the same way."""
    events = sorted(events, key=lambda e: e.time)  # stable: same-time events keep their recorded order
    last: dict[tuple[str, str | None], LockEvent] = {}
    out = list(events)

    def lapse(previous: LockEvent | None, before: float) -> None:
        if (
            previous is not None
            and previous.expires_at is not None
            and previous.expires_at + one_ms <= before
        ):
            out.append(
                LockEvent(round(previous.expires_at + one_ms, 6), previous.job, previous.token, "expired")
            )

    for event in events:
        key = (event.job, event.token)
        if event.kind in ("set", "renewed"):
            lapse(last.get(key), event.time)
            last[key] = event
        elif event.kind in ("released", "deleted", "memory_evicted"):
            last.pop(key, None)
        elif event.kind == "lost_in_failover":  # the lock is back to its earlier expiry, or gone
            if event.expires_at is None:
                last.pop(key, None)
            else:
                last[key] = event
    for event in last.values():
        lapse(event, end)
    out.sort(key=lambda e: e.time)
    return out
