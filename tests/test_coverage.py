"""Coverage, checked: repeated experiments with a known truth, and how often the 95% interval contains it.

A small seeded version of benchmarks/coverage.py (whose large run is the table in docs/statistics.md): 40
experiments of 8 replications per case. A 95% interval should cover in about 38 of 40; the threshold 34/40
fails an interval whose real coverage is 80% or less most of the time (and the old pooled-jobs interval on
clustered jobs, measured alongside, does fail it).
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
