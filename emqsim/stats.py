"""From records to numbers a user can trust: per-run summaries, replication aggregates with 95% confidence
intervals, and paired policy differences on common random numbers.

The replication is the independent unit: jobs and crashes of one run share workers, lock managers and faults.
  means      Student t across replications (a ratio estimator with a cluster-robust standard error when runs
             contribute different numbers of observations)
  rates      per job (or per work hour): a quasi-Poisson Garwood interval whose dispersion is measured from
             the per-run counts; no event in any run: an upper bound from the number of runs
  censoring  a crash still undetected at the horizon counts with its latency so far (a lower bound); the mean
             is then marked as a lower bound and only its interval's lower end is given
  none       fewer than two replications (or no spread between them): no interval, never a zero-width one
Methods per field, and coverage measured against known truths: docs/statistics.md. All times in seconds.
"""

from __future__ import annotations

import csv
import io
import json
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from emqsim.fileio import write_atomically  # noqa: F401  (re-exported: older imports keep working)
from emqsim.records import DUPLICATE_COMPLETION, Attempt, Run

LEVEL = 0.95


@dataclass
class RunSummary:
    """One run boiled down; everything the aggregate needs, nothing else."""

    scenario: str
    policy: dict[str, Any]
    seed: int
    replication: int
    jobs: int  # the scenario's job count
    jobs_arrived: int  # jobs added before the run ended: the jobs at risk, what per-job rates divide by
    end: float
    attempts: int
    completed_jobs: int
    reclaims: int
    false_reclaims: int
    max_false_reclaims_per_job: int
    detection_latencies: list[float] = field(default_factory=list)
    undetected: int = 0
    censored_latencies: list[float] = field(default_factory=list)  # (end - crash) of each undetected crash
    hostage_time: float = 0.0
    duplicate_executions: int = 0
    wasted_work: float = 0.0
    finishes_rejected: int = 0
    duplicate_completions: int = 0
    job_latencies: list[float] = field(default_factory=list)
    work_hours: float = 0.0
    requests: int = 0
    redis_commands: int = 0

    @property
    def redis_requests_per_s(self) -> float:
        """Client requests (round trips) per simulated second; `redis_commands` counts Redis's own."""
        return self.requests / self.end if self.end > 0 else 0.0

    @property
    def redis_commands_per_s(self) -> float:
        """Deprecated alias of `redis_requests_per_s` (it always counted requests, not Redis commands)."""
        return self.redis_requests_per_s


class SummaryBuilder:
    """Folds a run's jobs, one at a time and in any order, into its `RunSummary`.

    `summarize` feeds it a finished `Run`'s attempts job by job; a streaming run (`simulate_summary`) feeds it
    each job as the engine closes it. The result does not depend on the order: counts are integers, sums of
    seconds are exactly rounded (`math.fsum`), detection latencies are sorted, job latencies are in job
    order. So both ways give identical summaries (tests/test_streaming.py).
    """

    def __init__(self, jobs: int) -> None:
        self.attempts = 0
        self.completed_jobs = 0
        self.reclaims = 0
        self.false_reclaims = 0
        self.max_false_reclaims_per_job = 0
        self.detection_latencies: list[float] = []
        self.undetected = 0
        self.censored: list[float] = []
        self.hostage_terms = array("d")
        self.duplicate_executions = 0
        self.wasted_terms = array("d")
        self.finishes_rejected = 0
        self.duplicate_completions = 0
        self.work_terms = array("d")
        self._job_latency = np.full(jobs, np.nan)  # by job index: 8 bytes a job, whatever the order

    def add_job(self, attempts: Sequence[Attempt], arrival: float, end: float | None) -> None:
        """One job's attempts, final (outcomes set). `end` (the run's end) is needed only for a job whose
        crash was neither detected nor outlived by a completion; the engine passes None for jobs it closed
        during the run, which never need it."""
        if not attempts:
            return
        self.attempts += len(attempts)
        first_done = None
        for a in attempts:
            done = a.finish_applied_at if a.finish_result == "accepted" else None
            if done is not None and (first_done is None or done < first_done):
                first_done = done
        false = 0
        for a in attempts:
            if a.reclaimed_at is not None or (a.failed_at is not None and a.reclaimed_by is not None):
                self.reclaims += 1  # (a job failed by its own worker, reclaimed_by None, is no reclaim)
                self.wasted_terms.append(a.work_done)
                if a.false_reclaim:
                    false += 1
            if a.died_at is not None:
                latency = a.detection_latency
                if latency is not None:
                    self.detection_latencies.append(latency)
                    self.hostage_terms.append(latency)
                elif first_done is not None:  # another run of the job completed it: held until then
                    self.hostage_terms.append(max(0.0, first_done - a.died_at))
                else:
                    if end is None:
                        raise ValueError(f"job {a.job} was held to the end of the run: pass the run's end")
                    self.undetected += 1
                    self.censored.append(end - a.died_at)
                    self.hostage_terms.append(end - a.died_at)
            if a.finish_result not in (None, "accepted"):
                self.finishes_rejected += 1
            if a.outcome == DUPLICATE_COMPLETION:
                self.duplicate_completions += 1
            self.work_terms.append(a.work_done)
        self.false_reclaims += false
        self.max_false_reclaims_per_job = max(self.max_false_reclaims_per_job, false)
        self.duplicate_executions += _overlapping_attempts(attempts)
        if first_done is not None:
            self.completed_jobs += 1
            self._job_latency[int(attempts[0].job)] = first_done - arrival

    def result(self, run: Run, arrived: int | None = None) -> RunSummary:
        """The summary, with what the run itself knows (its settings, end, traffic). `arrived` is the number
        of jobs added before the run ended; None takes it from the run's records (`len(run.arrivals)`), which a
        streaming run does not keep."""
        latencies = self._job_latency
        return RunSummary(
            scenario=run.scenario,
            policy=run.policy,
            seed=run.seed,
            replication=run.replication,
            jobs=run.jobs,
            jobs_arrived=len(run.arrivals) if arrived is None else arrived,
            end=run.end,
            attempts=self.attempts,
            completed_jobs=self.completed_jobs,
            reclaims=self.reclaims,
            false_reclaims=self.false_reclaims,
            max_false_reclaims_per_job=self.max_false_reclaims_per_job,
            detection_latencies=sorted(self.detection_latencies),
            undetected=self.undetected,
            censored_latencies=sorted(self.censored),
            hostage_time=math.fsum(self.hostage_terms),
            duplicate_executions=self.duplicate_executions,
            wasted_work=math.fsum(self.wasted_terms),
            finishes_rejected=self.finishes_rejected,
            duplicate_completions=self.duplicate_completions,
            job_latencies=latencies[~np.isnan(latencies)].tolist(),
            work_hours=math.fsum(self.work_terms) / 3600,
            requests=run.total_requests,
            redis_commands=run.redis_commands,
        )


def summarize(run: Run) -> RunSummary:
    """Per-run metrics from the records."""
    by_job: dict[str, list[Attempt]] = {}
    for a in run.attempts:
        by_job.setdefault(a.job, []).append(a)
    builder = SummaryBuilder(run.jobs)
    for job, attempts in by_job.items():
        builder.add_job(attempts, run.arrivals[int(job)], run.end)
    return builder.result(run)


def _overlapping_attempts(attempts: Sequence[Attempt]) -> int:
    """Attempts of one job that started while an earlier attempt was still being executed by a worker that
    was not dead: the job ran twice at once. An earlier attempt executes from its start until its worker
    finished it or crashed; one with neither (still running at the end) counts as executing from then on."""
    if len(attempts) < 2:
        return 0
    count = 0
    for i, later in enumerate(attempts[1:], start=1):
        if later.started_at is None:
            continue
        for earlier in attempts[:i]:
            if earlier.started_at is None:
                continue
            stop = earlier.finished_at
            if stop is None:
                stop = earlier.stopped_at if earlier.stopped_at is not None else math.inf
            if earlier.started_at <= later.started_at < stop:
                count += 1
                break
    return count


# -- intervals ----------------------------------------------------------------------------------------------
# Every interval function returns (estimate, lo, hi); lo/hi are nan where no honest interval exists (too few
# independent units, or no spread to measure): callers print `n/a` and write JSON null, never [x, x].
NAN3 = (math.nan, math.nan, math.nan)


# The quantiles come from scipy.special, the functions scipy.stats' distributions call (t.ppf is stdtrit,
# norm.ppf ndtri, chi2.ppf 2 gammaincinv(df/2, p); tests/test_stats.py checks they give the same floats):
# importing scipy.stats takes about a second, most of a command's or a graded notebook's start-up.
def _t(level: float, df: int) -> float:
    """The two-sided Student-t quantile for `level` on `df` degrees of freedom (`scipy.stats.t.ppf`)."""
    from scipy import special

    return float(special.stdtrit(df, (1 + level) / 2))


def _z(level: float) -> float:
    """The two-sided normal quantile for `level` (`scipy.stats.norm.ppf`)."""
    from scipy import special

    return float(special.ndtri((1 + level) / 2))


def _chi2_ppf(p: float, df: float) -> float:
    """The chi-squared quantile (`scipy.stats.chi2.ppf`, for 0 < p < 1 and df > 0)."""
    from scipy import special

    return float(2 * special.gammaincinv(df / 2, p))


def mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """Mean and Student-t interval over independent values (e.g. one per replication).

    (nan, nan, nan) with no data; (mean, nan, nan) with one value or no spread (all values equal): a
    zero-width interval would claim a certainty the data cannot give."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return NAN3
    m = float(x.mean())
    sd = float(x.std(ddof=1)) if x.size > 1 else 0.0
    if x.size < 2 or sd == 0:
        return (m, math.nan, math.nan)
    half = _t(level, x.size - 1) * sd / math.sqrt(x.size)
    return (m, m - half, m + half)


def ratio_ci(
    sums: Sequence[float], counts: Sequence[float], level: float = LEVEL
) -> tuple[float, float, float]:
    """Pooled mean sum(S)/sum(N) over clusters (replications) with a cluster-robust (linearised ratio
    estimator) t interval on (clusters - 1) degrees of freedom. Clusters with N = 0 carry no information and
    are dropped; fewer than two clusters left, or no spread between them: no interval."""
    s = np.asarray(sums, dtype=float)
    n = np.asarray(counts, dtype=float)
    keep = n > 0
    s, n = s[keep], n[keep]
    if n.sum() == 0:
        return NAN3
    m = float(s.sum() / n.sum())
    r = len(n)
    if r < 2:
        return (m, math.nan, math.nan)
    resid = (s - m * n) / n.mean()
    se = math.sqrt(float((resid**2).sum()) / (r * (r - 1)))
    if se == 0:
        return (m, math.nan, math.nan)
    half = _t(level, r - 1) * se
    return (m, m - half, m + half)


def wilson_ci(successes: int, trials: int, level: float = LEVEL) -> tuple[float, float, float]:
    """Wilson score interval for a proportion of INDEPENDENT trials (not for jobs of one run: see
    `cluster_rate_ci`)."""
    if trials == 0:
        return NAN3
    z = _z(level)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == trials else min(1.0, centre + half)
    return (p, lo, hi)


def poisson_rate_ci(count: float, exposure: float, level: float = LEVEL) -> tuple[float, float, float]:
    """Garwood (exact Poisson) interval for count/exposure, for INDEPENDENT events; `count` may be
    fractional (an effective count, see `cluster_rate_ci`)."""
    if exposure <= 0:
        return NAN3
    alpha = 1 - level
    lo = 0.0 if count == 0 else _chi2_ppf(alpha / 2, 2 * count) / 2
    hi = _chi2_ppf(1 - alpha / 2, 2 * count + 2) / 2
    return (count / exposure, lo / exposure, hi / exposure)


def zero_rate_upper_bound(replications: int, level: float = LEVEL) -> float:
    """Upper confidence bound on the fraction of runs that would see any event, when none of `replications`
    independent runs did: 1 - (alpha/2)^(1/R) (Clopper-Pearson, one-sided at 1 - alpha/2, the same tail as
    the upper end of a two-sided interval). About 3.7/R.

    The independent unit is the run, so it holds for any scenario, faults correlated within a run included
    (`run` and `sweep` use it, through `cluster_rate_ci`); its coverage is benchmarks/coverage.py's "fleet
    stalls" rows. One of the two zero-event bounds: docs/statistics.md says why they are not one function."""
    if replications < 1:
        return math.nan
    return 1.0 - ((1 - level) / 2) ** (1.0 / replications)


def poisson_zero_upper_bound(exposure: float, level: float = LEVEL, cluster: int = 1) -> float:
    """Upper bound on a rate when no event was seen over `exposure` (all runs together), for events that come
    from a Poisson process of faults, each causing at most `cluster` events: -ln(alpha/2) x cluster / exposure
    (the one-sided Poisson bound at 1 - alpha/2, the same tail as `zero_rate_upper_bound`: its limit when the
    independent units are many faults, n (1 - (alpha/2)^(1/n)) -> -ln(alpha/2)). `emqsim tune` uses it, where
    the workload's faults are such a process; its coverage is benchmarks/coverage.py's "Poisson pauses" rows,
    and on faults that are not Poisson (one stall of every worker at once) it covers far less than it claims:
    docs/statistics.md compares the two bounds and says why they stay two functions."""
    if exposure <= 0:
        return math.nan
    return -math.log((1 - level) / 2) * max(1, cluster) / exposure


def cluster_rate_ci(
    counts: Sequence[float],
    exposures: Sequence[float],
    level: float = LEVEL,
    *,
    cap: Sequence[float] | None = None,
) -> tuple[float, float, float]:
    """A rate sum(counts)/sum(exposures) (e.g. false reclaims per job) with an interval that treats the
    replication, not the job, as the independent unit.

    Events in one run are clustered (one freeze lapses all of a worker's leases at once), so the spread of the
    per-run counts is measured: the Pearson dispersion phi = sum((X_r - rate n_r)^2 / (rate n_r)) / (R - 1)
    over the R runs (at least 1), scaled by (t_{R-1}/z)^2 for the noise of estimating it from R runs. The
    interval is then Garwood's on the effective count X/phi over the effective exposure N/phi (a
    quasi-Poisson interval): as wide as a cluster-robust t interval for many events, and still skewed and
    positive for few.

    No event in any run: [0, U], U = zero_rate_upper_bound(R) times the largest `cap` (the most a run's rate
    can be if it has any events; per job: 1, i.e. each job falsely reclaimed at most once): of R
    independent runs none had an event, so P(a run has one) <= U/cap, and the mean rate <= that times cap.
    Fewer than two runs: no interval.
    """
    x = np.asarray(counts, dtype=float)
    n = np.asarray(exposures, dtype=float)
    total, exposure = float(x.sum()), float(n.sum())
    if exposure <= 0:
        return NAN3
    rate = total / exposure
    r = int(np.count_nonzero(n > 0))
    if r < 2:
        return (rate, math.nan, math.nan)
    if total == 0:
        if cap is None:
            return (0.0, 0.0, math.nan)
        return (0.0, 0.0, zero_rate_upper_bound(r, level) * float(max(cap)))
    keep = n > 0
    x, n = x[keep], n[keep]
    expected = rate * n
    phi = float(((x - expected) ** 2 / expected).sum()) / (r - 1)
    phi = max(phi, 1.0) * (_t(level, r - 1) / _z(level)) ** 2
    _, lo, hi = poisson_rate_ci(total / phi, exposure / phi, level)
    return (rate, lo, hi)


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# -- aggregation ---------------------------------------------------------------------------------------------
# Old row keys and the keys that replaced them (kept as deprecated aliases for one minor version: 0.3.x).
DEPRECATED_KEYS = {
    "jobs": "jobs_total",
    "attempts": "attempts_total",
    "reclaims": "reclaims_total",
    "false_reclaims": "false_reclaims_total",
    "false_reclaim_rate": "false_reclaims_per_job",
    "false_reclaim_rate_ci": "false_reclaims_per_job_ci",
    "false_reclaims_per_job_hour": "false_reclaims_per_work_hour",
    "detections": "detections_total",
    "detection_latency_mean": "detection_latency_mean_s",
    "detection_latency_mean_ci": "detection_latency_mean_s_ci",
    "detection_latency_min": "detection_latency_pooled_min_s",
    "detection_latency_p50": "detection_latency_pooled_p50_s",
    "detection_latency_p95": "detection_latency_pooled_p95_s",
    "detection_latency_p99": "detection_latency_pooled_p99_s",
    "detection_latency_max": "detection_latency_pooled_max_s",
    "undetected": "crashes_undetected_total",
    "hostage_time": "hostage_s_per_run",
    "duplicate_executions": "duplicate_executions_total",
    "wasted_work": "wasted_work_s_per_run",
    "finishes_rejected": "finishes_rejected_total",
    "duplicate_completions": "duplicate_completions_total",
    "job_latency_mean": "job_latency_mean_s",
    "throughput_per_s": "completed_jobs_per_s",
    "redis_commands_per_s": "redis_requests_per_s",
}


def _interval(lo: float, hi: float) -> list[float | None] | None:
    """JSON form of an interval: [lo, hi], an end null where only one side is known, or null for none."""
    if math.isnan(lo) and math.isnan(hi):
        return None
    return [_nan_to_none(lo), _nan_to_none(hi)]


def _pooled_percentile(values: np.ndarray, censored: np.ndarray, q: float) -> tuple[float, bool]:
    """The q-th percentile of detected latencies and censored caps pooled together, and whether it is only a
    lower bound (a censored crash's true latency, somewhere above its cap, could move it)."""
    if values.size == 0:
        return (math.nan, False)
    value = float(np.percentile(values, q))
    if censored.size == 0:
        return (value, False)
    upper_neighbour = float(np.percentile(values, q, method="higher"))
    return (value, bool(censored.min() <= upper_neighbour))


def aggregate(summaries: Sequence[RunSummary], **extra: Any) -> dict[str, Any]:
    """One table row for the replications of one (scenario, policy, settings) cell.

    Field meanings and interval methods: docs/statistics.md (and `python -m emqsim fields`).
    """
    if not summaries:
        raise ValueError("aggregate needs at least one run summary")
    first = summaries[0]
    reps = len(summaries)
    # Per-job rates divide by the jobs at risk: those added before the run ended (a horizon can cut the
    # arrivals short), not the scenario's job count.
    jobs_per_run = [s.jobs_arrived for s in summaries]
    false_per_run = [s.false_reclaims for s in summaries]
    false = sum(false_per_run)
    rate, rate_lo, rate_hi = cluster_rate_ci(false_per_run, jobs_per_run, cap=[1.0] * reps)
    hours = [s.work_hours for s in summaries]
    per_hour_cap = [s.jobs_arrived / s.work_hours for s in summaries if s.work_hours > 0] or [math.nan]
    hour_rate, hour_lo, hour_hi = cluster_rate_ci(false_per_run, hours, cap=per_hour_cap)
    # Detection latency: crashes still undetected at the horizon are censored at (end - crash); the mean
    # over detected and censored crashes is then a lower bound, and only its interval's lower end holds.
    censored_total = sum(len(s.censored_latencies) for s in summaries)
    det_mean, det_lo, det_hi = ratio_ci(
        [math.fsum(s.detection_latencies) + math.fsum(s.censored_latencies) for s in summaries],
        [len(s.detection_latencies) + len(s.censored_latencies) for s in summaries],
    )
    if censored_total:
        det_hi = math.nan
    detected = np.asarray([x for s in summaries for x in s.detection_latencies], dtype=float)
    caps = np.asarray([x for s in summaries for x in s.censored_latencies], dtype=float)
    pooled = np.concatenate([detected, caps])
    percentiles = {q: _pooled_percentile(pooled, caps, q) for q in (50, 95, 99)}
    hostage, hostage_lo, hostage_hi = mean_ci([s.hostage_time for s in summaries])
    if censored_total:
        hostage_hi = math.nan
    wasted, wasted_lo, wasted_hi = mean_ci([s.wasted_work for s in summaries])
    lat_all = [x for s in summaries for x in s.job_latencies]
    seconds = sum(s.end for s in summaries)
    row: dict[str, Any] = {
        "scenario": first.scenario,
        **first.policy,
        "replications": reps,
        "jobs_total": sum(s.jobs for s in summaries),
        "jobs_arrived_total": sum(jobs_per_run),
        "attempts_total": sum(s.attempts for s in summaries),
        "reclaims_total": sum(s.reclaims for s in summaries),
        "false_reclaims_total": false,
        "false_reclaims_per_job": rate,
        "false_reclaims_per_job_ci": _interval(rate_lo, rate_hi),
        "false_reclaims_per_work_hour": hour_rate if sum(hours) > 0 else None,
        "false_reclaims_per_work_hour_ci": _interval(hour_lo, hour_hi) if sum(hours) > 0 else None,
        "crashes_total": detected.size + caps.size,
        "detections_total": int(detected.size),
        "crashes_undetected_total": sum(s.undetected for s in summaries),
        "detection_latency_censored": censored_total > 0,
        "detection_latency_mean_s": det_mean,
        "detection_latency_mean_s_ci": _interval(det_lo, det_hi),
        "detection_latency_pooled_min_s": float(pooled.min()) if pooled.size else None,
        "detection_latency_pooled_p50_s": percentiles[50][0],
        "detection_latency_pooled_p50_s_lower_bound": percentiles[50][1],
        "detection_latency_pooled_p95_s": percentiles[95][0],
        "detection_latency_pooled_p95_s_lower_bound": percentiles[95][1],
        "detection_latency_pooled_p99_s": percentiles[99][0],
        "detection_latency_pooled_p99_s_lower_bound": percentiles[99][1],
        "detection_latency_pooled_max_s": float(pooled.max()) if pooled.size else None,
        "hostage_s_per_run": hostage,
        "hostage_s_per_run_ci": _interval(hostage_lo, hostage_hi),
        "duplicate_executions_total": sum(s.duplicate_executions for s in summaries),
        "duplicate_executions_per_run": sum(s.duplicate_executions for s in summaries) / reps,
        "wasted_work_s_per_run": wasted,
        "wasted_work_s_per_run_ci": _interval(wasted_lo, wasted_hi),
        "finishes_rejected_total": sum(s.finishes_rejected for s in summaries),
        "duplicate_completions_total": sum(s.duplicate_completions for s in summaries),
        "job_latency_mean_s": float(np.mean(lat_all)) if lat_all else None,
        "completed_jobs_per_s": sum(s.completed_jobs for s in summaries) / seconds,
        "redis_requests_per_s": sum(s.requests for s in summaries) / seconds,
        "redis_internal_commands_per_s": sum(s.redis_commands for s in summaries) / seconds,
    }
    for old, new in DEPRECATED_KEYS.items():
        row[old] = row[new]
    row.update(extra)
    return {k: _clean(v) for k, v in row.items()}


def _clean(v: Any) -> Any:
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.floating | np.integer):
        v = v.item()
    return _nan_to_none(v) if isinstance(v, float) else v


CENSORED_METRICS = ("detection_latencies", "hostage_time")  # lower bounds in a run with an undetected crash


def paired_difference(
    a: Sequence[RunSummary], b: Sequence[RunSummary], metric: str, level: float = LEVEL
) -> dict[str, Any]:
    """Mean of metric(a) - metric(b) over replications run on the same seeds, with a t interval over the
    pairs (the pair is the independent unit). `ci` is None with fewer than two pairs or when every pair
    differs by the same amount (no spread to measure).

    `metric` names a RunSummary attribute; "detection_latencies" is the run's mean over its crashes with
    undetected ones censored at the horizon (as is the hostage time of a job held to the end). Censoring makes a side's value a lower bound, so the difference
    is then one-sided: `bound` is "upper" (only b censored: the true difference is at most the estimate, and
    only the interval's upper end holds), "lower" (only a censored), "none" (both) or "exact".
    """
    pairs_a = {(s.seed, s.replication): s for s in a}
    diffs = []
    censored_a = censored_b = False
    for s in b:
        other = pairs_a.get((s.seed, s.replication))
        if other is None:
            continue
        va, vb = _metric(other, metric), _metric(s, metric)
        if va is not None and vb is not None:
            diffs.append(va - vb)
            if metric in CENSORED_METRICS:
                censored_a |= bool(other.censored_latencies)
                censored_b |= bool(s.censored_latencies)
    m, lo, hi = mean_ci(diffs, level)
    bound = {(False, False): "exact", (True, False): "lower", (False, True): "upper", (True, True): "none"}[
        (censored_a, censored_b)
    ]
    if bound in ("upper", "none"):
        lo = math.nan
    if bound in ("lower", "none"):
        hi = math.nan
    return {
        "metric": metric,
        "pairs": len(diffs),
        "mean": _nan_to_none(m),
        "ci": _interval(lo, hi),
        "bound": bound,
    }


def _metric(s: RunSummary, metric: str) -> float | None:
    if metric == "detection_latencies":
        values = list(s.detection_latencies) + list(s.censored_latencies)
        return float(np.mean(values)) if values else None
    value = getattr(s, metric)
    if isinstance(value, list):
        return float(np.mean(value)) if value else None
    return float(value)


# -- tables ---------------------------------------------------------------------------------------------------
def to_frame(rows: Iterable[dict[str, Any]]):
    """A pandas DataFrame of the rows (pandas is optional: `pip install pandas`)."""
    import pandas as pd

    return pd.DataFrame(list(rows))


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if isinstance(v, list) and len(v) == 2:
            out[f"{k}_lo"], out[f"{k}_hi"] = v
        elif v is None and k.endswith("_ci"):  # no interval: both ends empty, same columns in every row
            out[f"{k}_lo"], out[f"{k}_hi"] = None, None
        else:
            out[k] = v
    return out


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV text; [lo, hi] intervals become two columns `<name>_lo`, `<name>_hi`."""
    flat = [_flat(r) for r in rows]
    fields: list[str] = []
    for r in flat:
        fields.extend(k for k in r if k not in fields)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    return buf.getvalue()


def to_json(rows: Sequence[dict[str, Any]], **header: Any) -> str:
    return json.dumps({**header, "rows": list(rows)}, indent=2, allow_nan=False) + "\n"


def summary_dict(s: RunSummary) -> dict[str, Any]:
    return asdict(s)
