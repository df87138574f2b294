"""Do emqsim's 95% intervals cover the truth 95% of the time? Repeat experiments whose answer is known
independently (a closed form from emqsim.analytic, checked separately against the simulator in
tests/test_theory_vs_sim.py) and count how often the interval printed by `aggregate`/`paired_difference`
contains it.

    python benchmarks/coverage.py --experiments 400 --replications 20      # the table in docs/statistics.md
    python benchmarks/coverage.py --experiments 40 --replications 10       # a quick look
    python benchmarks/coverage.py --check-poisson-truth 20000              # the Poisson cases' truth vs runs

Cases (times are scaled down to fractions of a second so that thousands of runs take minutes):
  mean latency        lease 0.3 s / beat 0.1 s / reaper every 0.05 s; 8 workers per run each crash once, at a
                      random moment of the job's steady state; truth: lease_detection(...).mean
  rate near 0         4 jobs per worker (concurrency 4), each of 5 workers freezes once for F with
                      P(lapse) = 0.02; one freeze lapses all 4 leases of its worker at once (clustered);
                      truth: freeze_lapse_probability = false reclaims per job
  rate near 0.5       the same with P(lapse) = 0.5
  horizon cut         jobs arrive at random (Poisson, 0.5/s) and the horizon ends each run when about half of
                      the 100 have arrived; every job's worker freezes 0.25 s into it with P(lapse) = 0.3;
                      truth: freeze_lapse_probability per job that arrived (the last ~0.6 s of arrivals, whose
                      freeze may not be over, are under 1% of them)
  paired difference   lease minus a 0.6 s timeout on the same seeds, one crash 0.35 s into each of 8 jobs;
                      truth: lease_detection(...).mean - timeout_detection(...).mean
  one replication     the mean-latency case with one run: the right answer is "no interval"
For comparison, the rate cases also report the old interval (Wilson over pooled jobs), which treats the jobs
of a run as independent; for the horizon cut, Wilson over the scenario's jobs, arrived or not (the old
denominator).

Zero-event bounds (a second table): when no run of an experiment has a false reclaim, the rate's interval is
[0, U]. U claims one-sided 97.5%: P(no event seen and U < truth) <= 2.5% (an experiment with events makes no
claim through U). Each case reports that one-sided coverage over all experiments, how often zero events were
seen, how often U covered when they were, and the same for the other bound on the same runs. 4 workers of
concurrency 2 hold the 8 jobs of a run from t=0 (0.5 s of work each, max_stalled=0: a reclaimed job fails, so a
job is falsely reclaimed at most once); a freeze of 0.5 s > the lease lapses every lock its worker holds
(freeze_lapse_probability = 1):
  Poisson pauses      tune's Workload (pauses a Poisson process per worker, rate lambda) and tune's path:
                      emqsim.tune.measure.rate_interval with cluster = the workload's concurrency, i.e.
                      stats.poisson_zero_upper_bound; truth: P(a pause starts during a job's work) =
                      1 - exp(-lambda x 0.5 s). lambda such that the truth is 0.55 x the bound (R runs
                      expect about 2 lapsing pauses: zero events in about e^-2 = 13% of experiments)
  ..., truth above    lambda such that the truth is 5% above the bound: every zero-event experiment is a miss,
                      so the one-sided coverage is 1 - P(zero events), >= 97.5% if the bound is right
  fleet stalls        a scheduled, correlated fault: each run, with probability q, has every worker freeze
                      together at 0.2 s (a fleet-wide stall), lapsing all 8 jobs; truth: q per job. Checked:
                      run/sweep's path (stats.aggregate: stats.zero_rate_upper_bound over runs), q = U(R)/2;
                      the other bound is tune's Poisson bound, whose assumption is false here
  ..., truth above    q = 1.05 U(R): the truth 5% above the run/sweep bound
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from emqsim import Crash, Fixed, Freeze, LeasePolicy, Scenario, TimeoutPolicy
from emqsim.analytic import freeze_lapse_probability, lease_detection, timeout_detection
from emqsim.stats import (
    LEVEL,
    RunSummary,
    aggregate,
    paired_difference,
    poisson_zero_upper_bound,
    wilson_ci,
    zero_rate_upper_bound,
)
from emqsim.summaries import simulate_summary
from emqsim.tune.inputs import Workload
from emqsim.tune.measure import rate_interval

LEASE, BEAT, SCAN, TIMEOUT = 0.3, 0.1, 0.05, 0.6
LEASE_POLICY = LeasePolicy(LEASE, BEAT, SCAN, swept_by="reaper", max_stalled=0)
CRASH_AFTER = 0.35  # after the first renewal (steady state), before the timeout


def _crashes(workers: int, after: float) -> Scenario:
    faults = tuple(Crash(job=i, after=after) for i in range(workers))
    return Scenario(workers=workers, jobs=workers, duration=Fixed(3.0), faults=faults, horizon=60.0)


def _freezes(workers: int, lapse: float) -> tuple[Scenario, float]:
    freeze = round(LEASE - BEAT + lapse * BEAT, 3)
    faults = tuple(Freeze(worker=w, at=1.0, duration=freeze) for w in range(workers))
    scenario = Scenario(
        workers=workers, concurrency=4, jobs=4 * workers, duration=Fixed(3.0), faults=faults, horizon=60.0
    )
    return scenario, freeze_lapse_probability(LEASE, BEAT, freeze)


@dataclass
class Outcome:
    covered: bool
    interval: bool  # an interval was given
    old_covered: bool | None = None  # the pooled-jobs (Wilson) interval, for the rate cases


def _covers(ci, truth: float) -> bool:
    return ci is not None and ci[0] is not None and ci[1] is not None and ci[0] <= truth <= ci[1]


def mean_latency(seed: int, replications: int) -> Outcome:
    scenario = _crashes(8, CRASH_AFTER)
    truth = lease_detection(LEASE, BEAT, SCAN, swept_by="reaper").mean
    row = aggregate([simulate_summary(scenario, LEASE_POLICY, seed, r) for r in range(replications)])
    ci = row["detection_latency_mean_s_ci"]
    return Outcome(_covers(ci, truth), ci is not None)


def _rate(lapse: float) -> Callable[[int, int], Outcome]:
    def case(seed: int, replications: int) -> Outcome:
        scenario, truth = _freezes(5, lapse)
        summaries = [simulate_summary(scenario, LEASE_POLICY, seed, r) for r in range(replications)]
        row = aggregate(summaries)
        ci = row["false_reclaims_per_job_ci"]
        _, lo, hi = wilson_ci(row["false_reclaims_total"], row["jobs_arrived_total"])
        return Outcome(_covers(ci, truth), ci is not None, lo <= truth <= hi)

    return case


HORIZON_CUT_JOBS = 100


def _horizon_cut(lapse: float) -> tuple[Scenario, float]:
    freeze = round(LEASE - BEAT + lapse * BEAT, 3)
    faults = tuple(Freeze(job=i, after=0.25, duration=freeze) for i in range(HORIZON_CUT_JOBS))
    scenario = Scenario(
        workers=4,
        jobs=HORIZON_CUT_JOBS,
        arrival_rate=0.5,
        duration=Fixed(1.0),
        faults=faults,
        horizon=100.0,
    )
    return scenario, freeze_lapse_probability(LEASE, BEAT, freeze)


def horizon_cut(seed: int, replications: int) -> Outcome:
    scenario, truth = _horizon_cut(0.3)
    row = aggregate([simulate_summary(scenario, LEASE_POLICY, seed, r) for r in range(replications)])
    ci = row["false_reclaims_per_job_ci"]
    # the old interval: over the scenario's jobs, arrived or not
    _, lo, hi = wilson_ci(row["false_reclaims_total"], row["jobs_total"])
    return Outcome(_covers(ci, truth), ci is not None, lo <= truth <= hi)


def paired(seed: int, replications: int) -> Outcome:
    scenario = _crashes(8, CRASH_AFTER)
    timeout = TimeoutPolicy(TIMEOUT, SCAN, max_stalled=0)
    truth = (
        lease_detection(LEASE, BEAT, SCAN, swept_by="reaper").mean
        - timeout_detection(TIMEOUT, SCAN, CRASH_AFTER).mean
    )
    a = [simulate_summary(scenario, LEASE_POLICY, seed, r) for r in range(replications)]
    b = [simulate_summary(scenario, timeout, seed, r) for r in range(replications)]
    d = paired_difference(a, b, "detection_latencies")
    return Outcome(_covers(d["ci"], truth), d["ci"] is not None)


def one_replication(seed: int, replications: int) -> Outcome:
    del replications
    outcome = mean_latency(seed, 1)
    # the right answer with one run is no interval: "covered" here means none was given
    return Outcome(not outcome.interval, outcome.interval)


CASES: dict[str, Callable[[int, int], Outcome]] = {
    "mean latency": mean_latency,
    "rate near 0 (clustered)": _rate(0.02),
    "rate near 0.5 (clustered)": _rate(0.5),
    "horizon cut": horizon_cut,
    "paired difference": paired,
    "one replication": one_replication,
}


# -- zero-event bounds --------------------------------------------------------------------------------------------
ZERO_WORKERS, ZERO_CONCURRENCY = 4, 2
ZERO_JOBS = ZERO_WORKERS * ZERO_CONCURRENCY  # all taken at t=0: a lapsing freeze hits `concurrency` jobs
ZERO_WORK, ZERO_FREEZE = 0.5, 0.5  # seconds; the freeze outlasts the lease, so it always lapses
ZERO_POLICY = LeasePolicy(LEASE, BEAT, SCAN, swept_by="reaper", max_stalled=0)  # reclaimed once, then failed
EDGE = 1.05  # the "truth above" cases put the truth this much above the bound they test
TYPICAL = 0.55  # the Poisson case's truth: over half the bound, so that the bound without its cluster factor
# (concurrency 2) would miss every time zero events are seen, which they are in about 13% of experiments
ZERO_CLAIM = 1 - (1 - LEVEL) / 2  # the one-sided level both bounds claim (97.5%)
assert freeze_lapse_probability(LEASE, BEAT, ZERO_FREEZE) == 1.0


@dataclass
class ZeroOutcome:
    zero: bool  # no false reclaim in any run of the experiment
    truth: float
    bound: float  # the tested path's zero-event bound (meaningful when zero)
    other: float  # the other zero-event bound, on the same runs

    def covered(self, bound: float) -> bool:
        """The one-sided claim: no miss, where a miss is zero events seen and a bound below the truth (or none
        given: nan)."""
        return not self.zero or bound >= self.truth


def _zero_bounds(runs: list[RunSummary]) -> tuple[bool, float, float]:
    """(no event at all, run/sweep's bound, tune's bound) on the same runs, each through its own code path."""
    zero = sum(s.false_reclaims for s in runs) == 0
    ci = aggregate(runs)["false_reclaims_per_job_ci"]
    sweep_bound = ci[1] if zero and ci is not None and ci[1] is not None else math.nan
    metric = rate_interval(
        [s.false_reclaims for s in runs], [float(s.jobs_arrived) for s in runs], LEVEL, ZERO_CONCURRENCY
    )
    tune_bound = metric.hi if zero and metric.hi is not None else math.nan
    return zero, sweep_bound, tune_bound


def poisson_workload(pauses_per_job: float) -> Scenario:
    """Tune's Workload, its pauses a Poisson process per worker with `pauses_per_job` expected during a job's
    work; all jobs at t=0 (every lapsing pause hits `concurrency` jobs, the case the bound's cluster is for).
    Workload insists on crashes: one per 1000 worker-hours, never seen in runs of about a second."""
    w = Workload(
        duration=Fixed(ZERO_WORK),
        workers=ZERO_WORKERS,
        concurrency=ZERO_CONCURRENCY,
        jobs=ZERO_JOBS,
        crash_rate=1e-3,
        pause_rate=pauses_per_job / ZERO_WORK * 3600,
        pause_length=Fixed(ZERO_FREEZE),
        horizon=30.0,
    )
    return replace(w.scenario(), arrival_rate=None)


def poisson_truth_check(runs: int, per_job: float = 0.2, seed: int = 0) -> dict[str, float]:
    """The Poisson cases' closed form against the simulator with many events: `runs` runs of
    `poisson_workload(per_job)`; the simulated rate per job with its 95% interval (`aggregate`'s), and the
    truth 1 - exp(-per_job)."""
    scenario = poisson_workload(per_job)
    row = aggregate([simulate_summary(scenario, ZERO_POLICY, seed, r) for r in range(runs)])
    lo, hi = row["false_reclaims_per_job_ci"]
    return {"simulated": row["false_reclaims_per_job"], "lo": lo, "hi": hi, "truth": 1 - math.exp(-per_job)}


def _poisson(edge: bool) -> Callable[[int, int], ZeroOutcome]:
    def case(seed: int, replications: int) -> ZeroOutcome:
        bound = poisson_zero_upper_bound(replications * ZERO_JOBS, LEVEL, ZERO_CONCURRENCY)
        truth = (EDGE if edge else TYPICAL) * bound
        # the truth is P(a pause of its worker starts during the job's work) = 1 - exp(-pauses per job)
        per_job = -math.log(1 - truth)
        scenario = poisson_workload(per_job)
        runs = [simulate_summary(scenario, ZERO_POLICY, seed, r) for r in range(replications)]
        zero, sweep_bound, tune_bound = _zero_bounds(runs)
        return ZeroOutcome(zero, truth, tune_bound, sweep_bound)

    return case


def fleet_stall(stalled: bool) -> Scenario:
    """A run whose workers all freeze together at 0.2 s (a fleet-wide stall: every job lapses), or none."""
    faults = (
        tuple(Freeze(worker=w, at=0.2, duration=ZERO_FREEZE) for w in range(ZERO_WORKERS)) if stalled else ()
    )
    return Scenario(
        workers=ZERO_WORKERS,
        concurrency=ZERO_CONCURRENCY,
        jobs=ZERO_JOBS,
        duration=Fixed(ZERO_WORK),
        faults=faults,
        horizon=30.0,
    )


def _fleet(edge: bool) -> Callable[[int, int], ZeroOutcome]:
    def case(seed: int, replications: int) -> ZeroOutcome:
        bound = zero_rate_upper_bound(replications)
        q = EDGE * bound if edge else bound / 2
        runs = []
        for r in range(replications):
            rng = np.random.default_rng(np.random.SeedSequence([seed, r], spawn_key=(5171,)))
            runs.append(simulate_summary(fleet_stall(bool(rng.random() < q)), ZERO_POLICY, seed, r))
        zero, sweep_bound, tune_bound = _zero_bounds(runs)
        return ZeroOutcome(zero, q, sweep_bound, tune_bound)

    return case


ZERO_CASES: dict[str, Callable[[int, int], ZeroOutcome]] = {
    "zero: Poisson pauses (tune's bound)": _poisson(edge=False),
    "zero: Poisson pauses, truth above (tune's bound)": _poisson(edge=True),
    "zero: fleet stalls (run/sweep's bound)": _fleet(edge=False),
    "zero: fleet stalls, truth above (run/sweep's bound)": _fleet(edge=True),
}


def measure_zero(
    name: str, experiments: int, replications: int, seed: int = 0
) -> dict[str, float | int | None]:
    """Run `experiments` experiments of one zero-event case: the tested bound's one-sided coverage over all of
    them, the share with zero events, the coverage among those, bound / truth, and the same for the other
    bound on the same runs."""
    outcomes = [ZERO_CASES[name](seed * 10**6 + i, replications) for i in range(experiments)]
    zeros = [o for o in outcomes if o.zero]

    def ratio(values: list[float]) -> float | None:
        return float(np.median(values)) if values else None

    return {
        "experiments": experiments,
        "coverage": sum(o.covered(o.bound) for o in outcomes) / experiments,
        "zero_seen": len(zeros) / experiments,
        "covered_when_zero": sum(o.bound >= o.truth for o in zeros) / len(zeros) if zeros else None,
        "bound_over_truth": ratio([o.bound / o.truth for o in zeros]),
        "other_coverage": sum(o.covered(o.other) for o in outcomes) / experiments,
        "other_bound_over_truth": ratio([o.other / o.truth for o in zeros]),
    }


def measure(name: str, experiments: int, replications: int, seed: int = 0) -> dict[str, float | int | None]:
    """Run `experiments` independent experiments (seeds seed*10^6 + i) of one case."""
    outcomes = [CASES[name](seed * 10**6 + i, replications) for i in range(experiments)]
    old = [o.old_covered for o in outcomes if o.old_covered is not None]
    return {
        "experiments": experiments,
        "coverage": sum(o.covered for o in outcomes) / experiments,
        "intervals": sum(o.interval for o in outcomes) / experiments,
        "old_pooled_coverage": sum(old) / len(old) if old else None,
    }


def _fmt(x: float | int | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=400)
    parser.add_argument("--replications", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--case", action="append", choices=[*CASES, *ZERO_CASES])
    parser.add_argument(
        "--check-poisson-truth",
        type=int,
        metavar="RUNS",
        help="only compare the Poisson cases' truth with RUNS simulated runs (at 0.2 pauses per job)",
    )
    args = parser.parse_args(argv)
    if args.check_poisson_truth is not None and args.check_poisson_truth < 2:
        parser.error("--check-poisson-truth needs at least 2 runs for an interval, e.g. 20000")
    if args.check_poisson_truth:
        c = poisson_truth_check(args.check_poisson_truth, seed=args.seed)
        print(
            f"{args.check_poisson_truth} runs, seed {args.seed}: simulated {c['simulated']:.4f} "
            f"[{c['lo']:.4f}, {c['hi']:.4f}], closed form {c['truth']:.4f}"
        )
        return 0 if c["lo"] <= c["truth"] <= c["hi"] else 1
    chosen = args.case or [*CASES, *ZERO_CASES]
    print(f"{args.experiments} experiments per case, {args.replications} replications each, seed {args.seed}")
    ok = True
    if intervals := [name for name in chosen if name in CASES]:
        print(
            "| case | coverage of the 95% interval | intervals given | old pooled-jobs interval | seconds |"
        )
        print("|---|---|---|---|---|")
    for name in intervals:
        start = time.perf_counter()
        m = measure(name, args.experiments, args.replications, args.seed)
        old = "-" if m["old_pooled_coverage"] is None else f"{m['old_pooled_coverage']:.3f}"
        label = "no interval given" if name == "one replication" else "covers"
        print(
            f"| {name} | {m['coverage']:.3f} ({label}) | {m['intervals']:.0%} | {old} | "
            f"{time.perf_counter() - start:.0f} |",
            flush=True,
        )
        ok = ok and float(m["coverage"]) >= 0.93
    if zeros := [name for name in chosen if name in ZERO_CASES]:
        print(
            f"\n| case | one-sided coverage (claim {ZERO_CLAIM:.3f}) | zero events seen | covered when zero seen "
            "| bound / truth | the other bound: coverage | its bound / truth | seconds |"
        )
        print("|---|---|---|---|---|---|---|---|")
    for name in zeros:
        start = time.perf_counter()
        m = measure_zero(name, args.experiments, args.replications, args.seed)
        print(
            f"| {name} | {m['coverage']:.3f} | {m['zero_seen']:.1%} | {_fmt(m['covered_when_zero'])} | "
            f"{_fmt(m['bound_over_truth'], '.2f')} | {m['other_coverage']:.3f} | "
            f"{_fmt(m['other_bound_over_truth'], '.2f')} | {time.perf_counter() - start:.0f} |",
            flush=True,
        )
        # the tested bound: below its claim by more than two standard errors of the estimate is a failure
        se = math.sqrt(ZERO_CLAIM * (1 - ZERO_CLAIM) / args.experiments)
        ok = ok and float(m["coverage"]) >= ZERO_CLAIM - 2 * se
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
