"""The ledger: the one writer of a run's records (attempts, lock events, sweeps) and the one place jobs close.

Who writes what. The server, the workers and the simulation (and, after a live run, `emqsim.live.records`)
report what happened through narrow methods (`taken`, `started`, `finish_applied`, `reclaimed`, `crashed`,
`lock`, `sweep`, ...); none of them writes a record itself. While a run is in progress each attempt is an
`AttemptDraft`, mutable and private to the ledger: the others hold drafts only as handles and read only the
fields fixed when the attempt was taken (`job`, `attempt`, `worker`, `token`, `work`). `finalise` holds the
rules that turn an attempt's facts into its outcome, for the simulator and the live mode alike, and hands out
frozen `Attempt` records, built once per attempt; lock events and sweeps are frozen when recorded.

Times come in as ticks, `ticks_per_s` to a second: the engine's integer milliseconds (1000, the default), or
the live mode's scenario seconds (1). Records are in seconds, one division each (exact and reproducible).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from emqsim.records import (
    COMPLETED,
    DUPLICATE_COMPLETION,
    FAILED,
    FINISH_REJECTED,
    HELD,
    RECLAIMED,
    RUNNING,
    Attempt,
    LockEvent,
    SweepEvent,
)


class AttemptDraft:
    """An attempt while its run is in progress: `Attempt`'s fields but `outcome`, written only by the `Ledger`.

    Outside the ledger a draft is a handle: read `job`, `attempt`, `worker`, `token` and `work` (fixed at the
    take), nothing else. The final, frozen record is made by `finalise`."""

    __slots__ = (
        "job",
        "attempt",
        "worker",
        "token",
        "work",
        "taken_at",
        "started_at",
        "finished_at",
        "finish_applied_at",
        "finish_result",
        "reclaimed_at",
        "reclaimed_by",
        "worker_state_at_reclaim",
        "failed_at",
        "died_at",
        "stopped_at",
        "work_done",
    )

    def __init__(self, job: str, attempt: int, worker: int, token: str, work: float, taken_at: float) -> None:
        self.job = job
        self.attempt = attempt
        self.worker = worker
        self.token = token
        self.work = work
        self.taken_at = taken_at
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.finish_applied_at: float | None = None
        self.finish_result: str | None = None
        self.reclaimed_at: float | None = None
        self.reclaimed_by: str | None = None
        self.worker_state_at_reclaim: str | None = None
        self.failed_at: float | None = None
        self.died_at: float | None = None
        self.stopped_at: float | None = None
        self.work_done = 0.0


class Ledger:
    """Every attempt of a run, every lock event and sweep, kept until the run ends, or (streaming) each job's
    attempts only until the job closes."""

    def __init__(
        self, *, record_locks: bool = True, streaming: bool = False, ticks_per_s: int = 1000
    ) -> None:
        self.record_locks = record_locks
        self.streaming = streaming  # attempts kept per job until the job closes, no other records
        self.ticks_per_s = ticks_per_s
        self._drafts: list[AttemptDraft] = []  # every attempt in take order (not kept when streaming)
        self.job_attempts: dict[
            str, list[AttemptDraft]
        ] = {}  # streaming: the attempts of jobs not yet closed
        self.open_attempts: dict[
            str, AttemptDraft
        ] = {}  # job -> its current attempt, while the job is active
        self.attempt_counts: dict[str, int] = {}
        self.work_of: dict[str, float] = {}  # job -> seconds of work each attempt needs
        self.lock_events: list[LockEvent] = []
        self.sweeps: list[SweepEvent] = []

    # -- jobs and attempts ---------------------------------------------------------------------------------
    def arrived(self, job_id: str, work: float) -> None:
        self.work_of[job_id] = work

    def taken(self, job_id: str, worker: int, token: str, now: float, worker_dead: bool) -> AttemptDraft:
        """Redis ran a take: a new attempt, the job's current one. A take whose request was sent just before
        its worker crashed starts out held by a dead worker."""
        n = self.attempt_counts.get(job_id, 0) + 1
        self.attempt_counts[job_id] = n
        attempt = AttemptDraft(job_id, n, worker, token, self.work_of[job_id], now / self.ticks_per_s)
        if worker_dead:
            attempt.died_at = attempt.taken_at
        if self.streaming:
            self.job_attempts.setdefault(job_id, []).append(attempt)
        else:
            self._drafts.append(attempt)
        self.open_attempts[job_id] = attempt
        return attempt

    def current(self, job_id: str) -> AttemptDraft | None:
        """The job's current attempt while it is active."""
        return self.open_attempts.get(job_id)

    def active_jobs(self) -> list[str]:
        return list(self.open_attempts)

    def started(self, attempt: AttemptDraft, now: float) -> None:
        """The worker started working on it."""
        attempt.started_at = now / self.ticks_per_s

    def finishing(self, attempt: AttemptDraft, now: float) -> None:
        """The worker finished its work and sent the finish."""
        attempt.finished_at = now / self.ticks_per_s

    def finish_lost(self, attempt: AttemptDraft) -> None:
        """Live: the worker reported sending the finish but died before Redis ran it: it never finished."""
        attempt.finished_at = None

    def finish_applied(self, attempt: AttemptDraft, now: float, error: str | None) -> None:
        """Redis ran the attempt's finish: accepted (`error` None) or refused with `error`."""
        attempt.finish_applied_at = now / self.ticks_per_s
        attempt.finish_result = "accepted" if error is None else error
        if error is None and self.open_attempts.get(attempt.job) is attempt:
            del self.open_attempts[attempt.job]

    def fail_applied(self, attempt: AttemptDraft, now: float, failed: bool, error: str | None) -> None:
        """Redis ran the holder's move to `failed`: the job failed (`failed`), or the move was refused with
        `error`, or (unfenced, reclaimed meanwhile) accepted without touching the job."""
        attempt.finish_applied_at = now / self.ticks_per_s
        if failed:
            attempt.failed_at = now / self.ticks_per_s
            if self.open_attempts.get(attempt.job) is attempt:
                del self.open_attempts[attempt.job]
        else:
            attempt.finish_result = error

    def reclaimed(
        self, job_id: str, by: str, now: float, failed: bool, worker_state: str
    ) -> AttemptDraft | None:
        """A sweep took the job back (or failed it); returns the attempt it ended, if the job had one."""
        attempt = self.open_attempts.pop(job_id, None)
        if attempt is not None:
            self.swept(attempt, by, now, failed, worker_state)
        return attempt

    def swept(self, attempt: AttemptDraft, by: str, now: float, failed: bool, worker_state: str) -> None:
        """A sweep by `by` ended `attempt` (reclaimed it, or failed its job); its worker was in `worker_state`."""
        if failed:
            attempt.failed_at = now / self.ticks_per_s
        else:
            attempt.reclaimed_at = now / self.ticks_per_s
        attempt.reclaimed_by = by
        attempt.worker_state_at_reclaim = worker_state

    def stopped(self, attempt: AttemptDraft, now: float, ran: float) -> None:
        """The attempt's execution ended at `now` after `ran` ticks of work (a sandboxed child exited)."""
        attempt.work_done = min(attempt.work, max(0, ran) / self.ticks_per_s)
        attempt.stopped_at = now / self.ticks_per_s

    def crashed(self, attempt: AttemptDraft, now: float, ran: float | None) -> None:
        """Its worker crashed at `now` (after `ran` ticks of work on it, None if it never started). The
        simulator reports a crash as it happens; the live mode afterwards, for the attempts the dead process
        had taken, which is why the job's fate is judged by the times recorded up to `now`."""
        at = now / self.ticks_per_s
        # A sandboxed child that exited before (`stopped`) ended the attempt's execution then: the crash of its
        # worker later (say, while the job's fail was in flight) neither restarts nor extends that work.
        still_running = attempt.stopped_at is None
        if attempt.started_at is not None and attempt.finished_at is None and still_running:
            attempt.stopped_at = at  # its execution ends here, whether or not the job is still its own
        # A dead worker holds this job hostage only if the job is still its own (not finished at Redis,
        # reclaimed or failed by then).
        if attempt.died_at is None and not any(
            t is not None and t <= at
            for t in (attempt.finish_applied_at, attempt.reclaimed_at, attempt.failed_at)
        ):
            attempt.died_at = at
        if ran is not None and still_running:
            attempt.work_done = min(attempt.work, max(0, ran) / self.ticks_per_s)

    def ran(self, attempt: AttemptDraft, ran: float) -> None:
        """`ran` ticks of work done so far on an attempt still running when the run stops."""
        attempt.work_done = min(attempt.work, max(0, ran) / self.ticks_per_s)

    def close(self, job_id: str) -> list[Attempt]:
        """Streaming: the job is final; finalise its attempts and forget it."""
        attempts = finalise(self.job_attempts.pop(job_id))
        del self.work_of[job_id]
        del self.attempt_counts[job_id]
        self.open_attempts.pop(job_id, None)
        return attempts

    def close_if_final(self, job_id: str, worker_dead: Callable[[int], bool]) -> list[Attempt] | None:
        """Streaming: close a settled job if none of its attempts can change any more, and return its final
        attempts (None if it stays open): each one's finish was applied at Redis, or its worker is dead with no
        finish on the way; and a crash that left the job held was detected or outlived by a completion (else
        its hostage time runs to the end of the run)."""
        drafts = self.job_attempts[job_id]
        for a in drafts:
            if a.finish_applied_at is None and (a.finished_at is not None or not worker_dead(a.worker)):
                return None
        if not any(a.finish_result == "accepted" for a in drafts) and any(
            a.died_at is not None and a.reclaimed_at is None and a.failed_at is None for a in drafts
        ):
            return None
        return self.close(job_id)

    def open_jobs(self) -> list[tuple[str, list[Attempt]]]:
        """Streaming, once the run is over: the jobs never closed, each with its attempts, final."""
        return [(job_id, finalise(drafts)) for job_id, drafts in self.job_attempts.items()]

    def attempts(self) -> list[Attempt]:
        """Once the run is over: every attempt in take order, final (frozen records)."""
        return finalise(self._drafts)

    # -- locks and sweeps ------------------------------------------------------------------------------------
    def lock(
        self,
        now: float,
        job_id: str,
        token: str | None,
        kind: str,
        expires: float | None = None,
        detail: str = "",
    ) -> None:
        tps = self.ticks_per_s
        self.lock_events.append(
            LockEvent(now / tps, job_id, token, kind, None if expires is None else expires / tps, detail)
        )

    def lock_restored(self, now: float, job_id: str, token: str, restored: float | None) -> None:
        """A failover undid a lock write: the lock is back to its earlier expiry (seconds), or gone."""
        self.lock_events.append(
            LockEvent(now / self.ticks_per_s, job_id, token, "lost_in_failover", restored)
        )

    def renewals_lost(self, held: Iterable[tuple[str, str]], sent: float) -> None:
        for job_id, token in held:
            self.lock_events.append(LockEvent(sent / self.ticks_per_s, job_id, token, "renew_lost"))

    def renewals_skipped(self, held: Iterable[tuple[str, str]], now: float) -> None:
        """A renewal-timer tick that renewed none of these due jobs (`Network.skipped_ticks`)."""
        for job_id, token in held:
            self.lock_events.append(LockEvent(now / self.ticks_per_s, job_id, token, "renew_skipped"))

    def sweep(
        self,
        now: float,
        by: str,
        skipped: bool,
        reclaimed: tuple[str, ...],
        failed: tuple[str, ...],
        marked: int,
    ) -> None:
        self.sweeps.append(SweepEvent(now / self.ticks_per_s, by, skipped, reclaimed, failed, marked))


# -- finalising: the same rules for the simulator and the live mode ---------------------------------------------
def outcome(a: AttemptDraft) -> str:
    """An attempt's outcome from its facts (a second accepted completion is made a duplicate by `finalise`)."""
    if a.finish_result == "accepted":
        return COMPLETED
    if a.finish_result is not None:
        return FINISH_REJECTED
    if a.failed_at is not None:
        return FAILED
    if a.reclaimed_at is not None:
        return RECLAIMED
    return HELD if a.died_at is not None else RUNNING


def finalise(drafts: list[AttemptDraft]) -> list[Attempt]:
    """The frozen records of attempts nothing will change any more: a finished run did all its work; outcomes;
    a second accepted completion of the same job is a duplicate, whichever attempt it came from."""
    duplicates: set[int] = set()  # id() of the drafts whose completion is a duplicate
    completed: set[str] = set()
    for a in sorted(
        (a for a in drafts if a.finish_result == "accepted"),
        key=lambda a: (a.finish_applied_at, a.job, a.attempt),
    ):
        if a.job in completed:
            duplicates.add(id(a))
        completed.add(a.job)
    return [
        Attempt(
            a.job,
            a.attempt,
            a.worker,
            a.token,
            a.work,
            a.taken_at,
            a.started_at,
            a.finished_at,
            a.finish_applied_at,
            a.finish_result,
            a.reclaimed_at,
            a.reclaimed_by,
            a.worker_state_at_reclaim,  # type: ignore[arg-type]
            a.failed_at,
            a.died_at,
            a.stopped_at,
            a.work if a.finished_at is not None else a.work_done,
            DUPLICATE_COMPLETION if id(a) in duplicates else outcome(a),
        )
        for a in drafts
    ]
