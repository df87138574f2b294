"""The properties an exploration checks on every run: named checks over one run's records."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from emqsim.errors import ConfigError
from emqsim.records import FAILED, FINISH_REJECTED, HELD, Run


# -- properties ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Property:
    """A named check over one run's records: `check(run)` is True when the run satisfies it."""

    name: str
    check: Callable[[Run], bool]
    description: str = ""


def _no_job_lost(run: Run) -> bool:
    """Every job completed, failed, waits, or runs on a live worker; none held by a dead one or vanished."""
    if sum(run.final_state.values()) != run.jobs:
        return False
    by_job: dict[str, list] = {}
    for a in run.attempts:
        by_job.setdefault(a.job, []).append(a)
    for attempts in by_job.values():
        if any(a.finish_result == "accepted" or a.failed_at is not None for a in attempts):
            continue
        if attempts[-1].outcome == HELD:
            return False
    return True


def _no_duplicate_completion(run: Run) -> bool:
    return not any(a.outcome == "duplicate_completion" for a in run.attempts)


def _live_never_reclaimed(run: Run) -> bool:
    return not any(a.false_reclaim for a in run.attempts)


def _no_duplicate_execution(run: Run) -> bool:
    """No job's work is done in full twice: at most one attempt per job finished its work (sent a finish)."""
    finished: set[str] = set()
    for a in run.attempts:
        if a.finished_at is not None:
            if a.job in finished:
                return False
            finished.add(a.job)
    return True


def _no_finish_lost(run: Run) -> bool:
    """Every finish a worker sent was accepted: none refused by the token check, rejected by ioredis
    (maxRetriesPerRequest) or turned into a failure (BullMQ's moveToFailed after a rejected finish)."""
    return not any(
        a.finished_at is not None
        and (a.outcome in (FINISH_REJECTED, FAILED) or a.finish_result not in (None, "accepted"))
        for a in run.attempts
    )


NO_JOB_LOST = Property("no_job_lost", _no_job_lost, "no job ends held by a dead worker or vanishes")
NO_DUPLICATE_COMPLETION = Property(
    "no_duplicate_completion", _no_duplicate_completion, "no job is completed twice"
)
LIVE_NEVER_RECLAIMED = Property(
    "live_never_reclaimed", _live_never_reclaimed, "a live (or frozen) worker's job is never reclaimed"
)

NO_DUPLICATE_EXECUTION = Property(
    "no_duplicate_execution", _no_duplicate_execution, "no job's work is done in full twice"
)
NO_FINISH_LOST = Property(
    "no_finish_lost", _no_finish_lost, "every finish sent is accepted (none refused, rejected or failed)"
)


@dataclass(frozen=True)
class _ReclaimedWithin:
    bound: float

    def __call__(self, run: Run) -> bool:
        for a in run.attempts:
            if a.died_at is not None:
                latency = a.detection_latency
                if latency is None or latency > self.bound + 1e-9:
                    return False
        return True


def dead_reclaimed_within(bound: float) -> Property:
    """A dead worker's job is reclaimed within `bound` seconds of the crash (never reclaimed: violated)."""
    if not (isinstance(bound, int | float) and math.isfinite(bound) and bound > 0):
        raise ConfigError(f"the detection bound must be a positive number of seconds, got {bound!r}")
    return Property(
        f"dead_reclaimed_within_{bound:g}s",
        _ReclaimedWithin(float(bound)),
        f"a dead worker's job is reclaimed within {bound:g} s",
    )


def default_properties(bound: float | None = None, *, executions: bool = False) -> list[Property]:
    """The standard set; `bound` (seconds) adds the dead-worker detection bound, `executions` (the default
    of a space with network settings, `space(resend_twice=..., max_retries_per_request=...)`) adds
    `no_duplicate_execution` and `no_finish_lost`."""
    props = [NO_JOB_LOST, NO_DUPLICATE_COMPLETION, LIVE_NEVER_RECLAIMED]
    if executions:
        props += [NO_DUPLICATE_EXECUTION, NO_FINISH_LOST]
    if bound is not None:
        props.append(dead_reclaimed_within(bound))
    return props
