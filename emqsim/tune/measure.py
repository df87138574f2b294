"""A candidate's metrics from its runs, each with an interval (the replication is the unit), and whether it meets
the limits."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from emqsim.stats import RunSummary, cluster_rate_ci, mean_ci, poisson_zero_upper_bound, ratio_ci
from emqsim.tune.candidates import Candidate, Metric
from emqsim.tune.inputs import Limits, Workload


# -- intervals: the replication is the unit; the arithmetic is emqsim.stats' ---------------------------------
def _metric(estimate: float, lo: float, hi: float) -> Metric:
    """stats' (estimate, lo, hi), nan where no honest value exists, as a Metric (None there)."""

    def value(x: float) -> float | None:
        return None if math.isnan(x) else x

    return Metric(value(estimate), value(lo), value(hi))


def rate_interval(counts: Sequence[float], exposures: Sequence[float], level: float, cluster: int) -> Metric:
    """Events per unit of exposure over replications: `stats.cluster_rate_ci` (a quasi-Poisson Garwood
    interval whose dispersion is measured from the per-run counts). With no event in any run: [0, U] with U
    `stats.poisson_zero_upper_bound` (the Poisson bound on the whole exposure, times `cluster`, the most events
    one fault can cause); docs/statistics.md says why tune's zero bound is not the sweep's."""
    total, exposure = (
        float(np.asarray(counts, dtype=float).sum()),
        float(np.asarray(exposures, dtype=float).sum()),
    )
    if total == 0 and exposure > 0 and len(counts) >= 2:
        return Metric(0.0, 0.0, poisson_zero_upper_bound(exposure, level, cluster))
    return _metric(*cluster_rate_ci(counts, exposures, level))


def ratio_interval(sums: Sequence[float], counts: Sequence[float], level: float) -> Metric:
    """sum(S)/sum(N) over replications with a cluster-robust t interval (`stats.ratio_ci`)."""
    return _metric(*ratio_ci(sums, counts, level))


def paired_interval(diffs: Sequence[float], level: float) -> Metric:
    """Mean of per-replication differences (same seeds) with a t interval (`stats.mean_ci`)."""
    return _metric(*mean_ci(diffs, level))


Group = TypeVar("Group")  # what one replication contributes to a bootstrapped statistic


def bootstrap_interval(
    groups: Sequence[Group],
    stat: Callable[[list[Group]], float | None],
    level: float,
    seed: int,
    draws: int = 1000,
) -> Metric:
    """Percentile bootstrap over replications: resample whole replications (index lists shared by paired
    statistics), recompute the statistic. Seeded, so deterministic."""
    value = stat(list(groups))
    if value is None or len(groups) < 2:
        return Metric(value)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7919,)))
    idx = rng.integers(0, len(groups), size=(draws, len(groups)))
    values = [v for row in idx if (v := stat([groups[i] for i in row])) is not None]
    if not values:
        return Metric(value)
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return Metric(value, float(lo), float(hi))


def _p99(groups: Sequence[Sequence[float] | np.ndarray]) -> float | None:
    """The 99th percentile of the groups' values pooled in order."""
    pooled = np.concatenate([np.asarray(g, dtype=float) for g in groups]) if groups else np.empty(0)
    return float(np.percentile(pooled, 99)) if pooled.size else None


def _p99_of_resamples(groups: Sequence[np.ndarray], idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_p99` of every resample at once, bit for bit: row r of `idx` pools `groups[i]` for each i in the row.
    Returns (the p99s, which rows pooled any value). A percentile depends only on the pooled multiset, so
    each row's order statistics are read off one sorted copy of all the values, weighted by how often the row
    drew each value's group; the interpolation is `np.percentile`'s linear method, step for step."""
    draws, n_groups = idx.shape
    values = np.concatenate([np.asarray(g, dtype=float) for g in groups])
    labels = np.repeat(np.arange(n_groups), [len(g) for g in groups])
    order = np.argsort(values, kind="stable")
    values, labels = values[order], labels[order]
    counts = np.bincount((np.arange(draws)[:, None] * n_groups + idx).ravel(), minlength=draws * n_groups)
    cumulative = np.cumsum(counts.reshape(draws, n_groups)[:, labels], axis=1)  # (draws, all values)
    n = cumulative[:, -1] if values.size else np.zeros(draws, dtype=np.int64)
    pooled = n > 0
    cumulative, n = cumulative[pooled], n[pooled]
    virtual = (n - 1) * np.float64(0.99)  # np.percentile's linear method: (n - 1) q, q = 99 / 100
    below = np.floor(virtual).astype(np.int64)
    top = virtual >= n - 1  # np.percentile takes the last value for both neighbours there
    below = np.where(top, n - 1, below)
    above = np.where(top, n - 1, below + 1)
    gamma = virtual - np.where(top, -1, below)

    def kth(k: np.ndarray) -> np.ndarray:
        """The k-th smallest pooled value of each row (0-based)."""
        return values[(cumulative <= k[:, None]).sum(axis=1)]

    a, b = kth(below), kth(above)
    diff = b - a
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma), pooled


def _resample_rows(n_groups: int, seed: int, draws: int) -> np.ndarray:
    """The bootstrap's resamples: row r lists the replications drawn (the same rows for every statistic)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7919,)))
    return rng.integers(0, n_groups, size=(draws, n_groups))


def _percentile_interval(value: float, stats: np.ndarray, level: float) -> Metric:
    if not stats.size:
        return Metric(value)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return Metric(value, float(lo), float(hi))


def bootstrap_p99(groups: Sequence[np.ndarray], level: float, seed: int, draws: int = 1000) -> Metric:
    """`bootstrap_interval(groups, _p99, level, seed, draws)`, computed for all resamples at once (the same
    floats: tests/test_tune.py compares them)."""
    value = _p99(groups)
    if value is None or len(groups) < 2:
        return Metric(value)
    p99s, pooled = _p99_of_resamples(groups, _resample_rows(len(groups), seed, draws))
    return _percentile_interval(value, p99s, level)


def bootstrap_p99_difference(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], level: float, seed: int, draws: int = 1000
) -> Metric:
    """The bootstrap of p99(first) - p99(second) over paired replications (resampled together), computed for
    all resamples at once; a resample where either side pooled nothing is left out, as `bootstrap_interval`
    leaves out a statistic of None."""
    firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
    pa, pb = _p99(firsts), _p99(seconds)
    value = None if pa is None or pb is None else pa - pb
    if value is None or len(pairs) < 2:
        return Metric(value)
    idx = _resample_rows(len(pairs), seed, draws)
    a, pooled_a = _p99_of_resamples(firsts, idx)
    b, pooled_b = _p99_of_resamples(seconds, idx)
    both = pooled_a & pooled_b
    return _percentile_interval(value, a[both[pooled_a]] - b[both[pooled_b]], level)


# -- measuring a candidate --------------------------------------------------------------------------------------
def measure(c: Candidate, runs: Sequence[RunSummary], limits: Limits, w: Workload, seed: int) -> None:
    """Fill a candidate's metrics from its runs (replications 0..n-1, same seeds as every other candidate)."""
    level = limits.level
    c.replications = len(runs)
    if limits.false_reclaims_per == "job":
        exposure = [float(s.jobs_arrived) for s in runs]  # the jobs at risk: added before the run ended
    else:
        exposure = [s.end / 3600 for s in runs]
    c.metrics["false_reclaims"] = rate_interval(
        [s.false_reclaims for s in runs], exposure, level, w.concurrency
    )
    c.metrics["detection_mean"] = ratio_interval(
        [math.fsum(s.detection_latencies) for s in runs], [len(s.detection_latencies) for s in runs], level
    )
    latencies: list[np.ndarray] = [np.asarray(s.detection_latencies, dtype=float) for s in runs]
    c.metrics["detection_p99"] = bootstrap_p99(latencies, level, seed)
    c.metrics["requests_per_s"] = ratio_interval([s.requests for s in runs], [s.end for s in runs], level)
    c.metrics["undetected"] = Metric(float(sum(s.undetected for s in runs)))


def objective(c: Candidate, limits: Limits) -> float:
    m = c.metrics.get(f"detection_{limits.detection_stat}")
    return m.value if m is not None and m.value is not None else math.inf


def check_limits(c: Candidate, limits: Limits) -> tuple[str, str]:
    """('meets' | 'fails' | 'unknown', why) for all limits together."""
    checks = [
        ("false_reclaims", limits.false_reclaims, f"false reclaims per {limits.false_reclaims_per}"),
        (f"detection_{limits.detection_stat}", limits.detection, f"detection {limits.detection_stat} (s)"),
        ("requests_per_s", limits.requests_per_s, "Redis requests/s"),
    ]
    unknown = []
    for key, limit, name in checks:
        if limit is None:
            continue
        m = c.metrics[key]
        if m.value is None:
            unknown.append(f"{name}: no data")
        elif m.lo is not None and m.lo > limit:
            return "fails", f"{name} {_fmt(m)} is over the limit {limit:g}"
        elif m.hi is None or m.hi > limit:
            unknown.append(f"{name} {_fmt(m)} vs limit {limit:g}")
    if unknown:
        return "unknown", "; ".join(unknown)
    return "meets", "meets every limit"


def _fmt(m: Metric | None, digits: int = 3) -> str:
    if m is None or m.value is None:
        return "-"
    if m.lo is None or m.hi is None:
        return f"{m.value:.{digits}g} [no interval]"
    return f"{m.value:.{digits}g} [{m.lo:.{digits}g}, {m.hi:.{digits}g}]"


# -- the search -------------------------------------------------------------------------------------------------
