"""The search: run (candidate, replication) tasks on common random numbers, race each family to a decision, and
verify the best on fresh seeds."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import numpy as np

from emqsim.errors import ConfigError
from emqsim.policies import ReclaimPolicy
from emqsim.pools import batches, owned_pool, result_of, submit_all, wait_some
from emqsim.scenario import Scenario
from emqsim.stats import RunSummary, poisson_zero_upper_bound
from emqsim.sweep import run_batch
from emqsim.tune.candidates import Candidate, Metric
from emqsim.tune.inputs import VERIFY_CANDIDATES, VERIFY_SEED_OFFSET, Limits, SearchSpace, Workload
from emqsim.tune.measure import (
    _fmt,
    bootstrap_p99_difference,
    check_limits,
    measure,
    objective,
    paired_interval,
)
from emqsim.tune.results import Race


class _Runner:
    """Runs (candidate, replication) tasks, serially or on a process pool, caching summaries by key."""

    def __init__(
        self, scenario: Scenario, seed: int, jobs: int, progress: bool, executor: Executor | None = None
    ):
        self.scenario = scenario
        self.seed = seed
        self.jobs = jobs
        self.progress = progress
        self.results: dict[tuple[int, int], RunSummary] = {}
        self.count = 0
        self._pool = executor
        self._owned = contextlib.ExitStack()

    def __enter__(self) -> _Runner:
        if self._pool is None and self.jobs > 1:
            self._pool = self._owned.enter_context(owned_pool(self.jobs))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._owned.__exit__(*exc)  # an owned pool: shut down, or stopped at once after a Ctrl-C or failure

    def ensure(
        self, wanted: dict[int, tuple[ReclaimPolicy, int]], stage: str, seed: int | None = None
    ) -> None:
        """Make sure candidate i has replications 0..n-1 (wanted: i -> (policy, n))."""
        seed = self.seed if seed is None else seed
        tasks = [
            (i, self.scenario, policy, seed, r)
            for i, (policy, n) in sorted(wanted.items())
            for r in range(n)
            if (i, r) not in self.results
        ]
        if not tasks:
            return
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(tasks), disable=not self.progress, unit="run", file=sys.stderr, desc=stage, leave=False
        )
        try:
            if self._pool is None:
                for task in tasks:
                    self._absorb(run_batch([task]), bar)
            else:
                pending = set(submit_all(self._pool, run_batch, batches(tasks, parts=8 * self.jobs)))
                while pending:
                    done, pending = wait_some(pending)
                    for future in done:
                        self._absorb(result_of(future), bar)
        finally:
            bar.close()

    def _absorb(self, results: list[tuple[int, RunSummary]], bar: Any) -> None:
        for i, s in results:
            self.results[(i, s.replication)] = s
            self.count += 1
            bar.update(1)

    def runs_of(self, i: int, n: int) -> list[RunSummary]:
        return [self.results[(i, r)] for r in range(n)]


WAVE = 12  # candidates racing at once; more are admitted, best predicted first, as others drop out


def detection_floor(c: Candidate, limits: Limits) -> float:
    """The closed form's lower bound on a candidate's detection statistic, less a margin for the random round
    trip and crashes before a job's first renewal (0 for timeouts: their latency depends on the job)."""
    key = "detection_mean" if limits.detection_stat == "mean" else "detection_p99_at_least"
    value = c.predicted.get(key)
    return 0.0 if value is None else (value - 0.05) / 1.05


def _race(
    family: list[tuple[int, Candidate]],
    runner: _Runner,
    limits: Limits,
    w: Workload,
    space: SearchSpace,
    seed: int,
    name: str,
    say: Callable[[str], None],
    wave: int = WAVE,
) -> Race:
    """Sequential replications on the candidates that matter, common random numbers across candidates.

    Candidates enter best predicted detection first, `wave` (WAVE) at a time; once a leader (the fastest decided
    feasible) exists, a candidate whose closed-form detection floor is above the leader's upper bound is out
    without a run, and a racing one is out when its paired difference to the leader says it is not faster
    by more than the indifference margin."""
    pending = sorted(
        (p for p in family if p[1].status != "pruned"), key=lambda p: (detection_floor(p[1], limits), p[0])
    )
    if not pending:
        return Race(None, None, "every candidate was ruled out by the closed forms", False)
    n: dict[int, int] = {}
    active: dict[int, Candidate] = {}
    leader: int | None = None
    undecided: list[int] = []
    round_no = 0
    while True:
        round_no += 1
        if leader is not None:
            lead = active[leader]
            m = lead.metrics[f"detection_{limits.detection_stat}"]
            cutoff = m.hi if m.hi is not None else m.value
            assert cutoff is not None  # the leader has a decided value
            keep = []
            for i, c in pending:
                if detection_floor(c, limits) > cutoff:
                    c.status = "beaten"
                    c.reason = (
                        f"closed form: detection {limits.detection_stat} at least {detection_floor(c, limits):.3g} s, "
                        f"above the leader's {cutoff:.3g} s"
                    )
                else:
                    keep.append((i, c))
            pending = keep
        while pending and len(active) < wave:
            i, c = pending.pop(0)
            active[i] = c
            n[i] = space.min_replications
        runner.ensure({i: (active[i].policy(), n[i]) for i in active}, f"{name} round {round_no}")
        for i, c in active.items():
            measure(c, runner.runs_of(i, n[i]), limits, w, seed)
            verdict, why = check_limits(c, limits)
            c.status = {"fails": "fails", "meets": "feasible"}.get(verdict, "open")
            c.reason = why
        active = {i: c for i, c in active.items() if c.status != "fails"}
        feasible = {i: c for i, c in active.items() if c.status == "feasible"}
        leader = min(feasible, key=lambda i: (objective(feasible[i], limits), i)) if feasible else None
        more: set[int] = set()
        for i, c in list(active.items()):
            if i == leader:
                continue
            if leader is not None:
                d = _paired_objective(i, leader, runner, min(n[i], n[leader]), limits, seed)
                delta = space.indifference * objective(active[leader], limits)
                if d.value is not None and d.lo is not None and d.lo > -delta:
                    c.status = "beaten"
                    c.reason = (
                        f"detection {limits.detection_stat} {d.value:+.3g} s vs the leader "
                        f"[{d.lo:+.3g}, {d.hi:+.3g}] (paired, same seeds)"
                    )
                    del active[i]
                    continue
            if n[i] < space.max_replications:
                more.add(i)
            else:  # out of replications, still undecided: it leaves the race (and makes room for the next)
                c.reason = f"undecided after {n[i]} replications: {c.reason}"
                undecided.append(i)
                del active[i]
        contenders = [i for i in active if i != leader]
        say(
            f"{name}: round {round_no}, {len(active)} racing, {len(pending)} waiting, "
            f"{len(feasible)} decided feasible, {runner.count} runs so far"
        )
        if not pending and (not more or (leader is not None and not contenders)):
            break
        if leader is not None and n[leader] < space.max_replications and contenders:
            more.add(leader)
        for i in more:
            n[i] = min(space.max_replications, n[i] + max(2, n[i] // 2))
    ranked = sorted(
        (c for _, c in family if c.metrics and c.status in ("feasible", "open", "beaten")),
        key=lambda c: (c.status != "feasible", objective(c, limits)),
    )
    best = active[leader] if leader is not None else None
    decided = (
        best is not None
        and not [i for i in active if i != leader]
        and not [i for i in undecided if objective(dict(family)[i], limits) < objective(best, limits)]
    )
    runner_up = next((c for c in ranked if c is not best), None)
    return Race(best, runner_up, _why_lost(runner_up, best, limits), decided)


def _paired_objective(i: int, j: int, runner: _Runner, n: int, limits: Limits, seed: int) -> Metric:
    a, b = runner.runs_of(i, n), runner.runs_of(j, n)
    level = limits.level
    if limits.detection_stat == "mean":
        diffs = [
            float(np.mean(x.detection_latencies) - np.mean(y.detection_latencies))
            for x, y in zip(a, b, strict=True)
            if x.detection_latencies and y.detection_latencies
        ]
        return paired_interval(diffs, level)
    pairs = [
        (np.asarray(x.detection_latencies, dtype=float), np.asarray(y.detection_latencies, dtype=float))
        for x, y in zip(a, b, strict=True)
    ]
    return bootstrap_p99_difference(pairs, level, seed)


def _why_lost(runner_up: Candidate | None, best: Candidate | None, limits: Limits) -> str:
    if runner_up is None:
        return "no other candidate was simulated"
    if best is None:
        return f"{runner_up.label()}: {runner_up.reason}"
    if runner_up.status == "beaten":
        return f"{runner_up.label()}: {runner_up.reason}"
    if runner_up.status == "feasible":
        return (
            f"{runner_up.label()}: meets every limit but detects slower "
            f"({limits.detection_stat} {_fmt(runner_up.metrics[f'detection_{limits.detection_stat}'])} s)"
        )
    return f"{runner_up.label()}: not decided at the requested confidence ({runner_up.reason})"


def max_runs(candidates: Sequence[Candidate], space: SearchSpace, verify_max: int) -> int:
    """The most runs a search can take: every candidate left after pruning at its most replications, and
    the fresh-seed verification of up to VERIFY_CANDIDATES settings at `verify_max` each."""
    return (
        sum(c.status != "pruned" for c in candidates) * space.max_replications
        + VERIFY_CANDIDATES * verify_max
    )


def verification_sizes(verify: int, verify_max: int) -> list[int]:
    """The fresh-seed replication counts at which a verification looks: verify, 2 verify, 4 verify, ...,
    ending at `verify_max`."""
    sizes = []
    n = verify
    while verify and n < verify_max:
        sizes.append(n)
        n *= 2
    return sizes + [verify_max] if verify else []


def verify_on_fresh_seeds(
    order: Sequence[Candidate],
    runner: _Runner,
    limits: Limits,
    w: Workload,
    seed: int,
    sizes: Sequence[int],
    say: Callable[[str], None],
) -> tuple[list[Candidate], float]:
    """Run settings again on seeds the search never saw, in `order`, until one meets every limit.

    Sequential: each setting gets sizes[0] replications, then more (the next size) while its intervals still
    straddle a limit; it is confirmed when they meet every limit, refuted when one is decided over a limit,
    unconfirmed when the last size leaves it open; then the next setting is tried. Every look is a test, so
    the intervals are Bonferroni-adjusted over all looks that could happen (len(sizes) x len(order), fixed
    before any fresh run): a setting confirmed this way meets the limits at `limits.confidence`, however many
    looks it took. Returns the measurements and the level of their intervals."""
    looks = len(sizes) * len(order)
    strict = replace(limits, confidence=1 - (1 - limits.confidence) / looks)
    out = []
    for k, cand in enumerate(order):
        key = -(k + 1)
        fresh = replace(cand, metrics={})
        verdict, why = "unknown", "no runs"
        for n in sizes:
            runner.ensure({key: (cand.policy(), n)}, f"verify {cand.label()}", seed=seed + VERIFY_SEED_OFFSET)
            measure(fresh, runner.runs_of(key, n), strict, w, seed)
            verdict, why = check_limits(fresh, strict)
            if verdict != "unknown":
                break
        fresh.status = {"meets": "confirmed", "fails": "refuted"}.get(verdict, "unconfirmed")
        fresh.reason = (
            f"fresh seeds (root seed {seed + VERIFY_SEED_OFFSET}), {fresh.replications} runs: {why}"
        )
        say(f"verify: {cand.label()} {fresh.status} on {fresh.replications} fresh runs ({why})")
        out.append(fresh)
        if verdict == "meets":
            break
    return out, strict.level


def zero_event_bound(w: Workload, limits: Limits, runs: int, level: float) -> float:
    """The smallest upper bound `rate_interval` can give the false-reclaim rate from `runs` runs: with no false
    reclaim at all, the Poisson bound -ln((1 - level)/2) x concurrency over the most exposure the runs can have
    (every job arrived, per job; the whole horizon, per hour)."""
    exposure = w.jobs if limits.false_reclaims_per == "job" else w.horizon / 3600
    return poisson_zero_upper_bound(runs * exposure, level, w.concurrency)


def check_certifiable(w: Workload, limits: Limits, runs: int, level: float, budget: str) -> None:
    """Refuse, before any run, a false-reclaim limit that `runs` runs could not show to be met even with no
    false reclaim at all: the search would run to its budget and decide nothing. Names the runs it takes."""
    limit = limits.false_reclaims
    if limit is None:
        return
    floor = zero_event_bound(w, limits, runs, level)
    if floor <= limit:
        return
    need = math.ceil(runs * floor / limit)
    unit = f"per {limits.false_reclaims_per}"
    flag = {"max_replications": "--max-replications", "verify_max": "--verify-max"}[budget]
    jobs = math.ceil(w.jobs * floor / limit)
    more = f" or --jobs-per-run {jobs}" if limits.false_reclaims_per == "job" else ""
    raise ConfigError(
        f"a limit of {limit:g} false reclaims {unit} cannot be shown with {runs} runs ({budget}): even with "
        f"none at all they bound the rate only at {floor:.3g} {unit} ({100 * level:.4g}% interval; one fault "
        f"can lapse all {w.concurrency} jobs of a worker); give {flag} {need}{more}, or a limit of at least "
        f"{floor:.3g}"
    )
