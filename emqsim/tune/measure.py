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
    """The 99th percentile of the groups' values pooled in order (NumPy arrays pool fastest: the bootstrap
    calls this a thousand times per candidate)."""
    pooled = np.concatenate([np.asarray(g, dtype=float) for g in groups]) if groups else np.empty(0)
    return float(np.percentile(pooled, 99)) if pooled.size else None


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
    c.metrics["detection_p99"] = bootstrap_interval(latencies, _p99, level, seed)
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
