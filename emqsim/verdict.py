"""Right or wrong, in one line: what a reclaim rule did to a slow-but-alive or a fast-but-dead worker's job.

The rule and its words live here once, so a timeline's title, the two-columns figure (`emqsim.plots`) and the
`emqsim compare` table (`emqsim.cli`) give each cell the same verdict:

- a job reclaimed from a live worker is wrong (it runs twice);
- a dead worker's job never recovered is wrong;
- a dead worker's job recovered more than `HOSTAGE_AFTER` seconds after the crash is wrong (held hostage);
- anything else is right.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from emqsim.records import DUPLICATE_COMPLETION, Attempt, Run

__all__ = ["HOSTAGE_AFTER", "Verdict", "clock", "compare_verdict", "held_hostage", "verdict"]

HOSTAGE_AFTER = 120.0
"""Seconds: a dead worker's job recovered later than this after the crash was held hostage (a wrong call)."""


class Verdict(NamedTuple):
    """One line on what happened, and whether the rule got it right."""

    text: str
    good: bool


def held_hostage(latency: float, *, slow_after: float = HOSTAGE_AFTER) -> bool:
    """Whether a dead worker's job recovered `latency` seconds after the crash waited too long."""
    return latency > slow_after


def clock(seconds: float) -> str:
    """A time as m:ss (or h:mm:ss): 602.6 -> '10:03'."""
    total = int(math.floor(seconds + 0.5))
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def reclaim_time(a: Attempt) -> float | None:
    """When the attempt was taken away from its worker (reclaimed, or failed by a sweep), if it was."""
    return a.reclaimed_at if a.reclaimed_at is not None else a.failed_at


def verdict(run: Run, *, slow_after: float = HOSTAGE_AFTER) -> Verdict:
    """One line on what happened to the run's jobs: a false reclaim and its consequence, how long a dead
    worker's job took to recover, or a clean finish. `good` is False for a false reclaim, a job never
    recovered, or a recovery slower than `slow_after` seconds."""
    attempts = run.attempts
    false = [a for a in attempts if a.false_reclaim]
    if false:
        first = min(false, key=lambda a: reclaim_time(a) or 0.0)  # a false reclaim has a time
        same = [a for a in attempts if a.job == first.job]
        ran = sum(a.started_at is not None for a in same)
        parts = [f"wrongly reclaimed at {clock(reclaim_time(first) or 0.0)}", f"ran {_times(ran)}"]
        completions = sum(a.finish_result == "accepted" for a in same)
        if completions > 1:
            parts.append(f"completed {_times(completions)}")
        if any(a.finish_result not in (None, "accepted") for a in same):
            parts.append("stale finish rejected")
        if len(false) > 1:
            parts.append(f"{len(false)} false reclaims in all")
        return Verdict(", ".join(parts), False)
    dead = [a for a in attempts if a.died_at is not None]
    if dead:
        found = [a.detection_latency for a in dead if a.detection_latency is not None]
        lost = [a for a in dead if a.detection_latency is None]
        if lost:
            held = max(run.end - died for a in lost if (died := a.died_at) is not None)
            return Verdict(f"never recovered: held {held:.0f} s until the run stopped", False)
        if len(found) == 1:
            text = f"recovered {found[0]:.0f} s after the crash"
        else:
            text = f"{len(found)} jobs recovered {min(found):.0f}-{max(found):.0f} s after crashes"
        return Verdict(text, not held_hostage(max(found), slow_after=slow_after))
    done = [a for a in attempts if a.finish_result == "accepted"]
    dup = sum(a.outcome == DUPLICATE_COMPLETION for a in attempts)
    if len(done) == 1 and not dup:
        return Verdict(f"never reclaimed, finished once at {clock(done[0].finish_applied_at or 0.0)}", True)
    return Verdict(f"{len(done)} finishes, {dup} duplicates, no reclaim", dup == 0)


def compare_verdict(
    alive: bool,
    *,
    reclaimed_fraction: float,
    reclaimed_after: float | None,
    latency: float | None,
    latency_text: str = "",
    slow_after: float = HOSTAGE_AFTER,
) -> Verdict:
    """The verdict on one cell of `emqsim compare` from its replications: `alive` says whether the worker was
    slow but alive (else fast but dead), `reclaimed_fraction` is the share of runs where its job was reclaimed,
    `reclaimed_after` the mean time from take to reclaim, `latency` the mean detection latency (crash to
    reclaim) and `latency_text` that mean written with its interval."""
    reclaimed = reclaimed_fraction > 0
    if alive and reclaimed:
        return Verdict(
            "WRONG: reclaimed from a live worker; the job runs twice"
            f" (at {reclaimed_after or 0.0:.0f} s, in {reclaimed_fraction:.0%} of runs)",
            False,
        )
    if alive:
        return Verdict("right: left alone", True)
    if not reclaimed or latency is None:
        return Verdict("WRONG: not recovered by the horizon", False)
    if held_hostage(latency, slow_after=slow_after):
        return Verdict(f"WRONG: held hostage, recovered only {latency:.0f} s after the crash", False)
    return Verdict(f"right: recovered {latency_text} s after the crash (mean [95% CI])", True)
