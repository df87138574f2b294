"""Statistics: intervals against scipy's own, aggregation of runs, paired differences, tables."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st_
from scipy import stats as st

from emqsim import LeasePolicy, TimeoutPolicy, simulate, simulate_summary, standard
from emqsim.stats import (
    DEPRECATED_KEYS,
    aggregate,
    cluster_rate_ci,
    mean_ci,
    paired_difference,
    poisson_rate_ci,
    ratio_ci,
    summarize,
    to_csv,
    to_frame,
    to_json,
    wilson_ci,
    zero_rate_upper_bound,
)


def test_mean_ci_matches_scipy_t_interval():
    x = np.random.default_rng(0).normal(10, 2, 25)
    m, lo, hi = mean_ci(x)
    ref = st.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=st.sem(x))
    assert m == pytest.approx(x.mean()) and (lo, hi) == pytest.approx(ref)
    assert mean_ci([]) == pytest.approx((math.nan,) * 3, nan_ok=True)
    # one value (or no spread) gives no interval: a zero-width [3, 3] would claim certainty
    assert mean_ci([3.0]) == pytest.approx((3.0, math.nan, math.nan), nan_ok=True)
    assert mean_ci([2.0, 2.0, 2.0]) == pytest.approx((2.0, math.nan, math.nan), nan_ok=True)


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
    assert 599 < row["detection_latency_mean_s"] < 606
    lo, hi = row["detection_latency_mean_s_ci"]
    assert lo <= row["detection_latency_mean_s"] <= hi
    assert (
        row["detection_latency_pooled_min_s"]
        <= row["detection_latency_pooled_p50_s"]
        <= row["detection_latency_pooled_max_s"]
    )
    assert row["false_reclaims_per_job"] == 0 and row["false_reclaims_per_job_ci"][0] == 0
    # no false reclaim in 6 runs: the bound is over runs (1 - 0.025^(1/6)), not over pooled jobs
    assert row["false_reclaims_per_job_ci"][1] == pytest.approx(1 - 0.025 ** (1 / 6))
    json.dumps(row, allow_nan=False)


def test_deprecated_keys_are_aliases_with_the_same_values():
    row = aggregate(runs(TimeoutPolicy(600, 5)))
    for old, new in DEPRECATED_KEYS.items():
        assert row[old] == row[new], old
    assert row["redis_requests_per_s"] == row["redis_commands_per_s"]


def test_paired_difference_on_common_random_numbers():
    lease, timeout = runs(LeasePolicy(30, 10, 5)), runs(TimeoutPolicy(600, 5))
    d = paired_difference(lease, timeout, "detection_latencies")
    assert d["pairs"] == 6 and -580 < d["mean"] < -560
    assert d["ci"][0] <= d["mean"] <= d["ci"][1] and d["bound"] == "exact"


def test_tables_csv_json_frame():
    rows = [aggregate(runs(LeasePolicy(30, 10, 5), n=2)), aggregate(runs(TimeoutPolicy(600, 5), n=2))]
    csv_text = to_csv(rows)
    header = csv_text.splitlines()[0].split(",")
    assert "false_reclaims_per_job_ci_lo" in header and "detection_latency_mean_s_ci_hi" in header
    assert "false_reclaim_rate_ci_lo" in header  # the deprecated alias, for one minor version
    assert len(csv_text.splitlines()) == 3
    assert json.loads(to_json(rows, version="x"))["rows"][1]["timeout"] == 600
    frame = to_frame(rows)
    assert list(frame["policy"]) == ["lease", "timeout"]


# -- cluster-robust rates, censoring, no zero-width intervals ---------------------------------------------------
def test_cluster_rate_ci_widens_with_clustering():
    """The same 40 events in 40 of 80 runs of 4 jobs: one at a time (per job) or four at a time (a worker's
    four leases lapse together). Clustering must widen the interval about twofold (sqrt of the cluster
    size); a pooled-jobs interval would not change."""
    runs_ = 80
    spread = [1] * 40 + [0] * 40
    clustered = [4] * 10 + [0] * 70
    jobs = [4] * runs_
    _, lo1, hi1 = cluster_rate_ci(spread, jobs)
    rate, lo4, hi4 = cluster_rate_ci(clustered, jobs)
    assert rate == 40 / 320
    assert (hi4 - lo4) > 1.8 * (hi1 - lo1)


def test_cluster_rate_ci_matches_the_t_interval_for_many_events():
    rng = np.random.default_rng(3)
    counts = rng.poisson(200, 30) * 3  # over-dispersed: clusters of 3
    jobs = [1000] * 30
    rate, lo, hi = cluster_rate_ci(counts, jobs)
    m, tlo, thi = mean_ci(np.asarray(counts) / 1000)
    assert rate == pytest.approx(m)
    assert (hi - lo) == pytest.approx(thi - tlo, rel=0.05)


def test_zero_events_get_an_upper_bound_from_the_number_of_runs():
    assert zero_rate_upper_bound(30) == pytest.approx(1 - 0.025 ** (1 / 30))
    rate, lo, hi = cluster_rate_ci([0] * 30, [500] * 30, cap=[1.0] * 30)
    assert rate == 0 and lo == 0 and hi == pytest.approx(zero_rate_upper_bound(30))
    # the bound does not shrink with more jobs per run: the runs are the independent units
    assert cluster_rate_ci([0] * 30, [10**6] * 30, cap=[1.0] * 30)[2] == hi


def test_one_replication_gives_no_interval():
    for rate in (cluster_rate_ci([3], [10]), cluster_rate_ci([0], [10], cap=[1.0])):
        assert math.isnan(rate[1]) and math.isnan(rate[2])
    assert all(math.isnan(x) for x in ratio_ci([10.0], [2])[1:])
    row = aggregate(runs(LeasePolicy(30, 10, 5), n=1))
    for key, value in row.items():
        if key.endswith("_ci"):
            assert value is None, key


def test_undetected_crashes_are_censored_not_dropped():
    """A timeout longer than the horizon detects nothing: every crash is censored at (end - crash), the mean
    is a lower bound with only its lower end, and the hostage time too."""
    fast_dead = standard("fast-dead", horizon=300.0)
    summaries = [simulate_summary(fast_dead, TimeoutPolicy(600, 5), seed=1, replication=r) for r in range(5)]
    assert all(s.undetected == 1 and len(s.censored_latencies) == 1 for s in summaries)
    row = aggregate(summaries)
    assert row["detections_total"] == 0 and row["crashes_undetected_total"] == 5 and row["crashes_total"] == 5
    assert row["detection_latency_censored"] is True
    assert 290 < row["detection_latency_mean_s"] < 300  # the time so far: a lower bound on the truth (~601)
    # every run censored at the same 299 s: no spread, so not even a lower end is claimed
    assert row["detection_latency_mean_s_ci"] is None and row["hostage_s_per_run_ci"] is None
    production = standard("production", jobs=60, horizon=400.0)
    mixed = aggregate([simulate_summary(production, TimeoutPolicy(600, 5), 2, r) for r in range(4)])
    assert mixed["detection_latency_censored"] is True
    lo, hi = mixed["detection_latency_mean_s_ci"]
    assert lo <= mixed["detection_latency_mean_s"] and hi is None
    assert row["detection_latency_pooled_p95_s_lower_bound"] is True


def test_paired_difference_with_censoring_is_one_sided():
    fast_dead = standard("fast-dead", horizon=300.0)
    lease = [simulate_summary(fast_dead, LeasePolicy(30, 10, 5), 1, r) for r in range(5)]
    timeout = [simulate_summary(fast_dead, TimeoutPolicy(600, 5), 1, r) for r in range(5)]
    d = paired_difference(lease, timeout, "detection_latencies")
    assert d["bound"] == "upper" and d["ci"][0] is None and d["ci"][1] >= d["mean"]
    same = paired_difference(lease, lease, "false_reclaims")
    assert same["mean"] == 0 and same["ci"] is None  # no spread between pairs: no interval


@settings(max_examples=60, deadline=None)
@given(
    st_.lists(st_.integers(0, 20), min_size=1, max_size=12),
    st_.integers(1, 50),
)
def test_property_rate_interval_contains_the_estimate_and_is_never_zero_width(counts, jobs):
    rate, lo, hi = cluster_rate_ci(counts, [jobs] * len(counts), cap=[1.0] * len(counts))
    if len(counts) < 2:
        assert math.isnan(lo) and math.isnan(hi)
        return
    assert lo <= rate <= hi and hi > lo


@settings(max_examples=60, deadline=None)
@given(st_.lists(st_.floats(-1e3, 1e3, allow_nan=False), min_size=0, max_size=12))
def test_property_mean_interval_contains_the_mean_or_is_absent(values):
    m, lo, hi = mean_ci(values)
    if math.isnan(lo):
        assert math.isnan(hi)
        return
    assert lo <= m <= hi and hi > lo


def test_csv_has_the_same_interval_columns_with_or_without_an_interval():
    rows = [aggregate(runs(LeasePolicy(30, 10, 5), n=1)), aggregate(runs(LeasePolicy(30, 10, 5), n=3))]
    lines = to_csv(rows).splitlines()
    header = lines[0].split(",")
    assert "detection_latency_mean_s_ci_lo" in header and "detection_latency_mean_s_ci" not in header
    assert all(len(line.split(",")) == len(header) for line in lines[1:])


def test_per_job_rates_divide_by_the_jobs_that_arrived_before_the_horizon():
    """Issue 28: a horizon that ends runs before every job arrived must not dilute the per-job rates. Jobs
    that never arrived were never at risk; the row says how many arrived."""
    from emqsim import Freeze, LeasePolicy, Scenario
    from emqsim.distributions import Fixed

    # 40 jobs, one every ~2 s, so a 30 s horizon cuts the arrivals about halfway; each job's worker freezes
    # for longer than the lease 1 s into it, so every job that ran that far is falsely reclaimed once
    faults = tuple(Freeze(job=i, after=1.0, duration=3.0) for i in range(40))
    scenario = Scenario(
        workers=8, jobs=40, arrival_rate=0.5, duration=Fixed(5.0), faults=faults, horizon=30.0
    )
    policy = LeasePolicy(2.0, 0.5, 0.5, swept_by="reaper", max_stalled=0)
    records = [simulate(scenario, policy, seed=3, replication=r) for r in range(4)]
    summaries = [summarize(run) for run in records]
    assert [s.jobs_arrived for s in summaries] == [len(run.arrivals) for run in records]
    assert all(s.jobs == 40 and 0 < s.jobs_arrived < 40 for s in summaries)
    # streaming runs keep no arrival records but count the same arrivals
    assert [simulate_summary(scenario, policy, seed=3, replication=r).jobs_arrived for r in range(4)] == [
        s.jobs_arrived for s in summaries
    ]
    row = aggregate(summaries)
    arrived = sum(s.jobs_arrived for s in summaries)
    assert row["jobs_total"] == 160 and row["jobs_arrived_total"] == arrived
    assert row["false_reclaims_per_job"] == pytest.approx(row["false_reclaims_total"] / arrived)
    # every job that ran past its freeze was falsely reclaimed (all but those that arrived in the last few
    # seconds): the rate is near 1, where dividing by the scenario's 160 jobs gave about a half
    assert row["false_reclaims_per_job"] > 0.75 and row["false_reclaims_total"] / 160 < 0.55
    assert (
        row["false_reclaims_per_job_ci"][0]
        <= row["false_reclaims_per_job"]
        <= row["false_reclaims_per_job_ci"][1]
    )


def test_a_run_with_every_job_arrived_has_jobs_arrived_equal_to_jobs():
    s = simulate_summary(standard("fast-dead"), LeasePolicy(30, 10), seed=0)
    assert s.jobs_arrived == s.jobs


def test_quantiles_from_scipy_special_are_scipy_stats_own() -> None:
    """emqsim's intervals take their quantiles from scipy.special (importing scipy.stats costs about a second of
    every command's and graded notebook's start-up): the same floats scipy.stats gives, bit for bit."""
    from scipy import stats as st

    from emqsim import stats as S
    from emqsim.distributions import LogNormal

    rng = np.random.default_rng(1)
    for level in (0.5, 0.8, 0.9, 0.95, 0.99, 0.999):
        assert S._z(level) == float(st.norm.ppf((1 + level) / 2))
        for df in [*range(1, 200), 500, 1000, 10**5]:
            assert S._t(level, df) == float(st.t.ppf((1 + level) / 2, df)), (level, df)
    for p in [*rng.uniform(1e-6, 1 - 1e-6, 100), 0.025, 0.975, 0.005, 0.995]:
        for df in [*rng.uniform(0.01, 200, 10), 2, 4, 2.5, 100]:
            assert S._chi2_ppf(p, df) == float(st.chi2.ppf(p, df)), (p, df)
    for median in (0.5, 3, 60, 300):
        for sigma in (0.1, 0.5, 1, 2):
            for x in [*rng.uniform(0, 2000, 50), 0, -1, median]:
                got = LogNormal(median, sigma).survival(x)
                assert got == float(st.lognorm(s=sigma, scale=median).sf(x)), (median, sigma, x)
