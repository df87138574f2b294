"""Statistics: intervals against scipy's own, aggregation of runs, paired differences, tables."""

import json
import math

import numpy as np
import pytest
from scipy import stats as st

from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.stats import (
    aggregate,
    mean_ci,
    paired_difference,
    poisson_rate_ci,
    ratio_ci,
    summarize,
    to_csv,
    to_frame,
    to_json,
    wilson_ci,
)


def test_mean_ci_matches_scipy_t_interval():
    x = np.random.default_rng(0).normal(10, 2, 25)
    m, lo, hi = mean_ci(x)
    ref = st.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=st.sem(x))
    assert m == pytest.approx(x.mean()) and (lo, hi) == pytest.approx(ref)
    assert mean_ci([]) == pytest.approx((math.nan,) * 3, nan_ok=True)
    assert mean_ci([3.0]) == (3.0, 3.0, 3.0)


def test_ratio_ci_reduces_to_t_interval_for_equal_clusters():
    sums, counts = [10.0, 14.0, 9.0, 12.0], [2, 2, 2, 2]
    m, lo, hi = ratio_ci(sums, counts)
    per_cluster = [s / c for s, c in zip(sums, counts, strict=True)]
    assert (m, lo, hi) == pytest.approx(mean_ci(per_cluster))


def test_wilson_matches_statsmodels_formula_and_edges():
    p, lo, hi = wilson_ci(3, 10)
    assert p == 0.3 and lo == pytest.approx(0.10779, abs=1e-4) and hi == pytest.approx(0.60322, abs=1e-4)
    assert wilson_ci(0, 30)[1] == 0.0 and wilson_ci(30, 30)[2] == 1.0
    assert wilson_ci(0, 30)[2] == pytest.approx(0.11351, abs=1e-4)


def test_poisson_rate_ci_garwood():
    rate, lo, hi = poisson_rate_ci(4, 2.0)
    assert rate == 2.0
    assert lo == pytest.approx(st.chi2.ppf(0.025, 8) / 4) and hi == pytest.approx(st.chi2.ppf(0.975, 10) / 4)


def runs(policy, n=6, scenario="fast-dead"):
    return [summarize(simulate(standard(scenario), policy, seed=5, replication=r)) for r in range(n)]


def test_summarize_fast_dead_counts_one_detection_and_no_false_reclaim():
    (s,) = runs(LeasePolicy(30, 10, 5), n=1)
    assert s.false_reclaims == 0 and len(s.detection_latencies) == 1 and s.undetected == 0
    assert s.hostage_time == pytest.approx(s.detection_latencies[0])
    assert s.completed_jobs == 1 and s.requests > 0 and s.redis_commands > s.requests


def test_summarize_slow_alive_timeout_counts_the_duplicates():
    (s,) = runs(TimeoutPolicy(600, 5), n=1, scenario="slow-alive")
    assert s.false_reclaims == 1 and s.duplicate_executions == 1 and s.duplicate_completions == 1
    assert s.wasted_work == pytest.approx(900.0)


def test_a_run_stopped_by_its_workers_crash_is_not_a_duplicate_of_a_later_one():
    """Job 0's first run is reclaimed from its live worker at ~30 s and keeps running until that worker
    crashes at 40 s; the second run starts at ~45 s (a restarted worker), after the first had stopped: not a
    duplicate execution. Every later run starts while the one before it still runs (100 s of work, reclaimed
    after 30): each of those is."""
    from emqsim import Crash, Fixed, Scenario

    scenario = Scenario(
        workers=2,
        concurrency=1,
        jobs=2,
        duration=Fixed(100),
        faults=(Crash(worker=0, at=40, restart_after=5),),
        horizon=600,
        phases="aligned",
    )
    run = simulate(scenario, TimeoutPolicy(30, 1), seed=0)
    job0 = [a for a in run.attempts if a.job == "0"]
    first, second = job0[:2]
    assert first.reclaimed_at < 40 and first.died_at is None and first.stopped_at == 40.0
    assert first.work_done == pytest.approx(40.0 - first.started_at)
    assert second.started_at > 40
    later = job0[2:]
    assert all(a.started_at < b.finished_at for b, a in zip(job0[1:], later, strict=False) if b.finished_at)
    assert summarize(run).duplicate_executions == len(later)


def test_aggregate_row_has_the_contract_fields_in_seconds():
    row = aggregate(runs(TimeoutPolicy(600, 5)))
    assert row["policy"] == "timeout" and row["timeout"] == 600 and row["lease"] is None
    assert row["replications"] == 6 and row["jobs"] == 6
    assert 599 < row["detection_latency_mean"] < 606
    lo, hi = row["detection_latency_mean_ci"]
    assert lo <= row["detection_latency_mean"] <= hi
    assert row["detection_latency_min"] <= row["detection_latency_p50"] <= row["detection_latency_max"]
    assert row["false_reclaim_rate"] == 0 and row["false_reclaim_rate_ci"][0] == 0
    json.dumps(row, allow_nan=False)


def test_paired_difference_on_common_random_numbers():
    lease, timeout = runs(LeasePolicy(30, 10, 5)), runs(TimeoutPolicy(600, 5))
    d = paired_difference(lease, timeout, "detection_latencies")
    assert d["pairs"] == 6 and -580 < d["mean"] < -560
    assert d["ci"][0] <= d["mean"] <= d["ci"][1]


def test_tables_csv_json_frame():
    rows = [aggregate(runs(LeasePolicy(30, 10, 5), n=2)), aggregate(runs(TimeoutPolicy(600, 5), n=2))]
    csv_text = to_csv(rows)
    header = csv_text.splitlines()[0].split(",")
    assert "false_reclaim_rate_ci_lo" in header and "detection_latency_mean_ci_hi" in header
    assert len(csv_text.splitlines()) == 3
    assert json.loads(to_json(rows, version="x"))["rows"][1]["timeout"] == 600
    frame = to_frame(rows)
    assert list(frame["policy"]) == ["lease", "timeout"]
