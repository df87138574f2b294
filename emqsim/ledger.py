"""The ledger: the one writer of a run's records (attempts, lock events, sweeps) and the one place jobs close.

The server, the workers and the simulation report what happened through narrow methods (`taken`, `started`,
`finish_applied`, `reclaimed`, `crashed`, ...); none of them writes an `Attempt` field itself. `finalise`
holds the rules that turn an attempt's facts into its outcome, for the simulator and the live mode alike.

Times come in as the engine's integer milliseconds and are recorded in seconds (one division: exact and
reproducible).
"""

from __future__ import annotations

from collections.abc import Iterable

from emqsim.protocol import SweepReply
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


class Ledger:
    """Every attempt of a run, every lock event and sweep, kept until the run ends, or (streaming) each job's
    attempts only until the job closes."""

    def __init__(self, *, record_locks: bool = True, streaming: bool = False) -> None:
        self.record_locks = record_locks
        self.streaming = streaming  # attempts kept per job until the job closes, no other records
        self.attempts: list[Attempt] = []  # every attempt in take order (not kept when streaming)
        self.job_attempts: dict[str, list[Attempt]] = {}  # streaming: the attempts of jobs not yet closed
        self.open_attempts: dict[str, Attempt] = {}  # job -> its current attempt, while the job is active
        self.attempt_counts: dict[str, int] = {}
        self.work_of: dict[str, float] = {}  # job -> seconds of work each attempt needs
        self.lock_events: list[LockEvent] = []
        self.sweeps: list[SweepEvent] = []

    # -- jobs and attempts ---------------------------------------------------------------------------------
    def arrived(self, job_id: str, work: float) -> None:
        self.work_of[job_id] = work

    def taken(self, job_id: str, worker: int, token: str, now_ms: int, worker_dead: bool) -> Attempt:
        """Redis ran a take: a new attempt, the job's current one. A take whose request was sent just before
        its worker crashed starts out held by a dead worker."""
        n = self.attempt_counts.get(job_id, 0) + 1
        self.attempt_counts[job_id] = n
        attempt = Attempt(job_id, n, worker, token, self.work_of[job_id], taken_at=now_ms / 1000)
        if worker_dead:
            attempt.died_at = attempt.taken_at
        if self.streaming:
            self.job_attempts.setdefault(job_id, []).append(attempt)
        else:
            self.attempts.append(attempt)
        self.open_attempts[job_id] = attempt
        return attempt

    def current(self, job_id: str) -> Attempt | None:
        """The job's current attempt while it is active."""
        return self.open_attempts.get(job_id)

    def active_jobs(self) -> list[str]:
        return list(self.open_attempts)

    @staticmethod
    def started(attempt: Attempt, now_ms: int) -> None:
        """The worker started working on it."""
        attempt.started_at = now_ms / 1000

    @staticmethod
    def finishing(attempt: Attempt, now_ms: int) -> None:
        """The worker finished its work and sent the finish."""
        attempt.finished_at = now_ms / 1000

    def finish_applied(self, attempt: Attempt, now_ms: int, error: str | None) -> None:
        """Redis ran the attempt's finish: accepted (`error` None) or refused with `error`."""
        attempt.finish_applied_at = now_ms / 1000
        attempt.finish_result = "accepted" if error is None else error
        if error is None and self.open_attempts.get(attempt.job) is attempt:
            del self.open_attempts[attempt.job]

    def fail_applied(self, attempt: Attempt, now_ms: int, failed: bool, error: str | None) -> None:
        """Redis ran the holder's move to `failed`: the job failed (`failed`), or the move was refused with
        `error`, or (unfenced, reclaimed meanwhile) accepted without touching the job."""
        attempt.finish_applied_at = now_ms / 1000
        if failed:
            attempt.failed_at = now_ms / 1000
            if self.open_attempts.get(attempt.job) is attempt:
                del self.open_attempts[attempt.job]
        else:
            attempt.finish_result = error

    def reclaimed(self, job_id: str, by: str, now_ms: int, failed: bool, worker_state: str) -> Attempt | None:
        """A sweep took the job back (or failed it); returns the attempt it ended, if the job had one."""
        attempt = self.open_attempts.pop(job_id, None)
        if attempt is None:
            return None
        if failed:
            attempt.failed_at = now_ms / 1000
        else:
            attempt.reclaimed_at = now_ms / 1000
        attempt.reclaimed_by = by
        attempt.worker_state_at_reclaim = worker_state  # type: ignore[assignment]
        return attempt

    @staticmethod
    def stopped(attempt: Attempt, now_ms: int, ran_ms: int) -> None:
        """The attempt's execution ended at `now_ms` after `ran_ms` of work (a sandboxed child exited)."""
        attempt.work_done = min(attempt.work, max(0, ran_ms) / 1000)
        attempt.stopped_at = now_ms / 1000

    @staticmethod
    def crashed(attempt: Attempt, now_ms: int, ran_ms: int | None) -> None:
        """Its worker crashed at `now_ms` (after `ran_ms` of work on it, None if it never started)."""
        now = now_ms / 1000
        if attempt.started_at is not None and attempt.finished_at is None:
            attempt.stopped_at = now  # its execution ends here, whether or not the job is still its own
        # A dead worker holds this job hostage only if the job is still its own (not reclaimed already).
        if (
            attempt.died_at is None
            and attempt.finish_applied_at is None
            and attempt.reclaimed_at is None
            and attempt.failed_at is None
        ):
            attempt.died_at = now
        if ran_ms is not None:
            attempt.work_done = min(attempt.work, max(0, ran_ms) / 1000)

    @staticmethod
    def ran(attempt: Attempt, work_done: float) -> None:
        """Work done so far on an attempt still running when the run stops."""
        attempt.work_done = min(attempt.work, work_done)

    def close(self, job_id: str) -> list[Attempt]:
        """Streaming: the job is final; finalise its attempts and forget it."""
        attempts = self.job_attempts.pop(job_id)
        finalise(attempts)
        del self.work_of[job_id]
        del self.attempt_counts[job_id]
        self.open_attempts.pop(job_id, None)
        return attempts

    # -- locks and sweeps ------------------------------------------------------------------------------------
    def lock(
        self,
        now_ms: int,
        job_id: str,
        token: str | None,
        kind: str,
        expires_ms: int | None = None,
        detail: str = "",
    ) -> None:
        self.lock_events.append(
            LockEvent(
                now_ms / 1000, job_id, token, kind, None if expires_ms is None else expires_ms / 1000, detail
            )
        )

    def lock_restored(self, now_ms: int, job_id: str, token: str, restored: float | None) -> None:
        """A failover undid a lock write: the lock is back to its earlier expiry (seconds), or gone."""
        self.lock_events.append(LockEvent(now_ms / 1000, job_id, token, "lost_in_failover", restored))

    def renewals_lost(self, held: Iterable[tuple[str, str]], sent_ms: int) -> None:
        for job_id, token in held:
            self.lock_events.append(LockEvent(sent_ms / 1000, job_id, token, "renew_lost"))

    def sweep(self, now_ms: int, by: str, reply: SweepReply) -> None:
        self.sweeps.append(
            SweepEvent(now_ms / 1000, by, reply.skipped, reply.reclaimed, reply.failed, len(reply.marked))
        )


# -- finalising: the same rules for the simulator and the live mode ---------------------------------------------
def outcome(a: Attempt) -> str:
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


def finalise(attempts: list[Attempt]) -> None:
    """Final fields of attempts nothing will change any more: a finished run did all its work; outcomes; a
    second accepted completion of the same job is a duplicate, whichever attempt it came from."""
    for a in attempts:
        if a.finished_at is not None:
            a.work_done = a.work
        a.outcome = outcome(a)
    completed: set[str] = set()
    for a in sorted(
        (a for a in attempts if a.finish_result == "accepted"),
        key=lambda a: (a.finish_applied_at, a.job, a.attempt),
    ):
        if a.job in completed:
            a.outcome = DUPLICATE_COMPLETION
        completed.add(a.job)
