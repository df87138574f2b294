"""tune's intervals are emqsim.stats' (one module of intervals): the same numbers, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emqsim.stats import cluster_rate_ci, mean_ci, poisson_zero_upper_bound, ratio_ci, zero_rate_upper_bound
from emqsim.tune import Limits, Workload, paired_interval, rate_interval, ratio_interval, zero_event_bound


def _triple(m):
    return tuple(math.nan if v is None else v for v in (m.value, m.lo, m.hi))


@pytest.mark.parametrize("seed", range(20))
def test_tunes_intervals_are_the_stats_functions(seed):
    rng = np.random.default_rng(seed)
    runs = int(rng.integers(0, 8))
    counts = rng.poisson(rng.choice([0.5, 3.0]), runs).astype(float)
    exposures = rng.integers(1, 300, runs).astype(float)
    level = 0.95
    if counts.sum() > 0:
        assert _triple(rate_interval(counts, exposures, level, 2)) == pytest.approx(
            cluster_rate_ci(counts, exposures, level), nan_ok=True, rel=0, abs=0
        )
    assert _triple(ratio_interval(counts, exposures, level)) == pytest.approx(
        ratio_ci(counts, exposures, level), nan_ok=True, rel=0, abs=0
    )
    diffs = counts - exposures / 100
    assert _triple(paired_interval(diffs, level)) == pytest.approx(
        mean_ci(diffs, level), nan_ok=True, rel=0, abs=0
    )


def test_tunes_zero_event_bound_is_the_poisson_one_and_the_sweeps_is_named():
    """No event: tune bounds the rate with stats.poisson_zero_upper_bound over every run's exposure (its
    faults are Poisson), the sweep with zero_rate_upper_bound (any scenario); docs/statistics.md says why."""
    m = rate_interval([0, 0, 0], [100, 100, 100], 0.95, cluster=2)
    assert (m.value, m.lo) == (0.0, 0.0) and m.hi == poisson_zero_upper_bound(300, 0.95, 2)
    assert m.hi == pytest.approx(-math.log(0.025) * 2 / 300)
    w = Workload(jobs=100, concurrency=2)
    assert zero_event_bound(w, Limits(), 30, 0.95) == poisson_zero_upper_bound(3000, 0.95, 2)
    assert zero_event_bound(w, Limits(), 30, 0.95) < 0.01 < zero_rate_upper_bound(30, 0.95)
