"""Coverage, checked: repeated experiments with a known truth, and how often the 95% interval contains it.

A small seeded version of benchmarks/coverage.py (whose large run is the table in docs/statistics.md): 40
experiments of 8 replications per case. A 95% interval should cover in about 38 of 40; the threshold 34/40
fails an interval whose real coverage is 80% or less most of the time (and the old pooled-jobs interval on
clustered jobs, measured alongside, does fail it). The zero-event bounds have their own sizes and threshold
(below).
"""

import functools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import coverage  # noqa: E402

EXPERIMENTS, REPLICATIONS = 40, 8


@functools.cache
def measured(case: str) -> dict:
    return coverage.measure(case, EXPERIMENTS, REPLICATIONS, seed=1)


@pytest.mark.parametrize(
    "case", ["mean latency", "rate near 0 (clustered)", "rate near 0.5 (clustered)", "paired difference"]
)
def test_intervals_cover_the_known_truth(case):
    m = measured(case)
    assert m["intervals"] == 1.0
    assert m["coverage"] >= 34 / 40, m


def test_pooling_the_jobs_of_a_run_would_be_caught():
    """The same check fails the old interval (Wilson over all jobs, as if independent) when one freeze lapses
    a worker's four leases together: the test has the power to see what the issue was."""
    m = measured("rate near 0.5 (clustered)")
    assert m["old_pooled_coverage"] < 34 / 40


def test_one_replication_gives_no_interval():
    m = coverage.measure("one replication", 10, 1, seed=1)
    assert m["intervals"] == 0.0 and m["coverage"] == 1.0


@pytest.mark.slow
def test_a_horizon_that_cuts_the_arrivals_keeps_the_rate_interval_honest():
    """Issue 28: runs that end before every job arrived. Per job that arrived, the interval covers the
    known lapse probability; the old denominator (every job of the scenario) never does."""
    m = coverage.measure("horizon cut", 20, 6, seed=1)
    assert m["intervals"] == 1.0
    assert m["coverage"] >= 17 / 20, m
    assert m["old_pooled_coverage"] < 0.5, m


# -- zero-event bounds (issue 26): 100 experiments of 3 runs per case -----------------------------------------------
# Both bounds claim one-sided 97.5%: P(no event seen and the bound below the truth) <= 2.5%, about 2.5 misses
# in 100. Allowing 6 (a correct bound misses more than 6 of 100 with probability about 1%) still fails a bound
# that misses in 13% of experiments (about 13 of 100) nearly always.
ZERO_EXPERIMENTS, ZERO_REPLICATIONS, ZERO_MISSES = 100, 3, 6
TYPICAL = ["zero: Poisson pauses (tune's bound)", "zero: fleet stalls (run/sweep's bound)"]
EDGE = [case for case in coverage.ZERO_CASES if case not in TYPICAL]


@functools.cache
def measured_zero(case: str) -> dict:
    return coverage.measure_zero(case, ZERO_EXPERIMENTS, ZERO_REPLICATIONS, seed=1)


@pytest.mark.parametrize("case", TYPICAL)
def test_zero_event_bounds_cover_at_their_one_sided_level(case):
    """Tune's Poisson bound on tune's Poisson workload, run/sweep's bound over runs on fleet-wide stalls:
    each misses (zero events seen, bound below the truth) in at most 6 of 100 experiments; zero events are
    seen often, and then the bound covers."""
    m = measured_zero(case)
    assert m["coverage"] >= 1 - ZERO_MISSES / ZERO_EXPERIMENTS, m
    assert m["zero_seen"] > 0 and m["covered_when_zero"] == 1.0, m


def test_the_poisson_bound_fails_on_correlated_faults():
    """Why run and sweep keep the bound over runs: on fleet-wide stalls (one fault lapses every worker's
    jobs, not `concurrency` of them) tune's Poisson bound is below the truth whenever no run stalled, and the
    same check catches it."""
    m = measured_zero("zero: fleet stalls (run/sweep's bound)")
    assert m["other_bound_over_truth"] < 1
    assert m["other_coverage"] < 1 - ZERO_MISSES / ZERO_EXPERIMENTS, m


def test_the_poisson_bound_needs_its_cluster_factor():
    """One lapsing pause fails both (`concurrency`) jobs of its worker: without that factor tune's bound
    would be below the truth in every zero-event experiment, more of them than the check allows."""
    m = measured_zero("zero: Poisson pauses (tune's bound)")
    assert m["bound_over_truth"] / coverage.ZERO_CONCURRENCY < 1
    assert m["zero_seen"] > ZERO_MISSES / ZERO_EXPERIMENTS, m


@pytest.mark.slow
@pytest.mark.parametrize("case", EDGE)
def test_zero_event_bounds_cover_with_the_truth_just_above_them(case):
    """The truth 5% above the bound: every zero-event experiment misses, so only their rarity (at most
    2.5% if the bound is right) keeps the claim."""
    m = measured_zero(case)
    assert m["coverage"] >= 1 - ZERO_MISSES / ZERO_EXPERIMENTS, m
    assert m["covered_when_zero"] in (None, 0.0), m


@pytest.mark.slow
def test_the_poisson_pause_truth_matches_the_simulator():
    """The Poisson cases' truth, 1 - exp(-pauses per job), against 2,000 simulated runs with many events:
    inside the 95% interval of the simulated rate."""
    c = coverage.poisson_truth_check(2000, seed=3)
    assert c["lo"] <= c["truth"] <= c["hi"], c
