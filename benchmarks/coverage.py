"""Do emqsim's 95% intervals cover the truth 95% of the time? Repeat experiments whose answer is known
independently (a closed form from emqsim.analytic, checked separately against the simulator in
tests/test_theory_vs_sim.py) and count how often the interval printed by `aggregate`/`paired_difference`
contains it.

    python benchmarks/coverage.py --experiments 400 --replications 20      # the table in docs/statistics.md
    python benchmarks/coverage.py --experiments 40 --replications 10       # a quick look

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
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from emqsim import Crash, Fixed, Freeze, LeasePolicy, Scenario, TimeoutPolicy
from emqsim.analytic import freeze_lapse_probability, lease_detection, timeout_detection
from emqsim.stats import aggregate, paired_difference, wilson_ci
from emqsim.summaries import simulate_summary

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=400)
    parser.add_argument("--replications", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--case", action="append", choices=list(CASES))
    args = parser.parse_args(argv)
    print(f"{args.experiments} experiments per case, {args.replications} replications each, seed {args.seed}")
    print("| case | coverage of the 95% interval | intervals given | old pooled-jobs interval | seconds |")
    print("|---|---|---|---|---|")
    worst = 1.0
    for name in args.case or CASES:
        start = time.perf_counter()
        m = measure(name, args.experiments, args.replications, args.seed)
        old = "-" if m["old_pooled_coverage"] is None else f"{m['old_pooled_coverage']:.3f}"
        label = "no interval given" if name == "one replication" else "covers"
        print(
            f"| {name} | {m['coverage']:.3f} ({label}) | {m['intervals']:.0%} | {old} | "
            f"{time.perf_counter() - start:.0f} |",
            flush=True,
        )
        worst = min(worst, float(m["coverage"]))
    return 0 if worst >= 0.93 else 1


if __name__ == "__main__":
    sys.exit(main())
