"""From records to numbers a user can trust: per-run summaries, replication aggregates with 95% confidence
intervals, and paired policy differences on common random numbers.

Intervals:
  means      Student t across replications (a ratio estimator with a cluster-robust standard error when runs
             contribute different numbers of observations; with one replication, across observations)
  rates      false reclaims per job: Wilson score interval while no job was falsely reclaimed twice (a
             proportion), else a Garwood (exact Poisson) interval for the count per job
All times in seconds.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from emqsim.engine import Simulation
from emqsim.policies import ReclaimPolicy
from emqsim.records import DUPLICATE_COMPLETION, Attempt, Run
from emqsim.scenario import Scenario

LEVEL = 0.95


@dataclass
class RunSummary:
    """One run boiled down; everything the aggregate needs, nothing else."""

    scenario: str
    policy: dict[str, Any]
    seed: int
    replication: int
    jobs: int
    end: float
    attempts: int
    completed_jobs: int
    reclaims: int
    false_reclaims: int
    max_false_reclaims_per_job: int
    detection_latencies: list[float] = field(default_factory=list)
    undetected: int = 0
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
    def redis_commands_per_s(self) -> float:
        return self.requests / self.end if self.end > 0 else 0.0


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

    def result(self, run: Run) -> RunSummary:
        """The summary, with what the run itself knows (its settings, end, traffic)."""
        latencies = self._job_latency
        return RunSummary(
            scenario=run.scenario,
            policy=run.policy,
            seed=run.seed,
            replication=run.replication,
            jobs=run.jobs,
            end=run.end,
            attempts=self.attempts,
            completed_jobs=self.completed_jobs,
            reclaims=self.reclaims,
            false_reclaims=self.false_reclaims,
            max_false_reclaims_per_job=self.max_false_reclaims_per_job,
            detection_latencies=sorted(self.detection_latencies),
            undetected=self.undetected,
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


def simulate_summary(
    scenario: Scenario, policy: ReclaimPolicy, seed: int = 0, replication: int = 0
) -> RunSummary:
    """`summarize(simulate(...))` without keeping the records: each job is folded into the summary as soon as
    it is final, so memory follows the jobs in flight (with `Scenario.remove_on_complete`, Redis's too).
    The same summary as `summarize(simulate(scenario, policy, seed, replication))`, bit for bit."""
    builder = SummaryBuilder(scenario.jobs)
    run = Simulation(scenario, policy, seed, replication, job_sink=builder.add_job).run()
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
def mean_ci(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """Mean and Student-t interval; (nan, nan, nan) with no data, a zero-width interval with one value."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(x.mean())
    if x.size == 1:
        return (m, m, m)
    from scipy import stats as st  # imported on first use: it costs most of the CLI's start-up

    half = float(st.t.ppf((1 + level) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return (m, m - half, m + half)


def ratio_ci(
    sums: Sequence[float], counts: Sequence[int], level: float = LEVEL
) -> tuple[float, float, float]:
    """Pooled mean sum(S)/sum(N) over clusters (replications) with a cluster-robust t interval."""
    s = np.asarray(sums, dtype=float)
    n = np.asarray(counts, dtype=float)
    keep = n > 0
    s, n = s[keep], n[keep]
    if n.sum() == 0:
        return (math.nan, math.nan, math.nan)
    m = float(s.sum() / n.sum())
    r = len(n)
    if r < 2:
        return (m, m, m)
    resid = (s - m * n) / n.mean()
    se = math.sqrt(float((resid**2).sum()) / (r * (r - 1)))
    from scipy import stats as st

    half = float(st.t.ppf((1 + level) / 2, r - 1)) * se
    return (m, m - half, m + half)


def wilson_ci(successes: int, trials: int, level: float = LEVEL) -> tuple[float, float, float]:
    if trials == 0:
        return (math.nan, math.nan, math.nan)
    from scipy import stats as st

    z = float(st.norm.ppf((1 + level) / 2))
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == trials else min(1.0, centre + half)
    return (p, lo, hi)


def poisson_rate_ci(count: int, exposure: float, level: float = LEVEL) -> tuple[float, float, float]:
    """Garwood exact interval for count/exposure."""
    if exposure <= 0:
        return (math.nan, math.nan, math.nan)
    alpha = 1 - level
    from scipy import stats as st

    lo = 0.0 if count == 0 else float(st.chi2.ppf(alpha / 2, 2 * count)) / 2
    hi = float(st.chi2.ppf(1 - alpha / 2, 2 * count + 2)) / 2
    return (count / exposure, lo / exposure, hi / exposure)


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


# -- aggregation ---------------------------------------------------------------------------------------------
def aggregate(summaries: Sequence[RunSummary], **extra: Any) -> dict[str, Any]:
    """One table row for the replications of one (scenario, policy, settings) cell."""
    if not summaries:
        raise ValueError("aggregate needs at least one run summary")
    first = summaries[0]
    jobs = sum(s.jobs for s in summaries)
    false = sum(s.false_reclaims for s in summaries)
    if max(s.max_false_reclaims_per_job for s in summaries) <= 1:
        rate, rate_lo, rate_hi = wilson_ci(false, jobs)
    else:
        rate, rate_lo, rate_hi = poisson_rate_ci(false, jobs)
    work_hours = sum(s.work_hours for s in summaries)
    det_all = [x for s in summaries for x in s.detection_latencies]
    if len(summaries) >= 2:
        det_mean, det_lo, det_hi = ratio_ci(
            [sum(s.detection_latencies) for s in summaries], [len(s.detection_latencies) for s in summaries]
        )
    else:
        det_mean, det_lo, det_hi = mean_ci(det_all)
    lat_all = [x for s in summaries for x in s.job_latencies]
    q = np.percentile(det_all, [50, 95, 99]) if det_all else [math.nan] * 3
    row: dict[str, Any] = {
        "scenario": first.scenario,
        **first.policy,
        "replications": len(summaries),
        "jobs": jobs,
        "attempts": sum(s.attempts for s in summaries),
        "reclaims": sum(s.reclaims for s in summaries),
        "false_reclaims": false,
        "false_reclaim_rate": rate,
        "false_reclaim_rate_ci": [rate_lo, rate_hi],
        "false_reclaims_per_job_hour": false / work_hours if work_hours > 0 else None,
        "detections": len(det_all),
        "detection_latency_mean": det_mean,
        "detection_latency_mean_ci": [det_lo, det_hi],
        "detection_latency_min": min(det_all) if det_all else None,
        "detection_latency_p50": float(q[0]),
        "detection_latency_p95": float(q[1]),
        "detection_latency_p99": float(q[2]),
        "detection_latency_max": max(det_all) if det_all else None,
        "undetected": sum(s.undetected for s in summaries),
        "hostage_time": sum(s.hostage_time for s in summaries) / len(summaries),
        "duplicate_executions": sum(s.duplicate_executions for s in summaries),
        "wasted_work": sum(s.wasted_work for s in summaries) / len(summaries),
        "finishes_rejected": sum(s.finishes_rejected for s in summaries),
        "duplicate_completions": sum(s.duplicate_completions for s in summaries),
        "job_latency_mean": float(np.mean(lat_all)) if lat_all else None,
        "throughput_per_s": sum(s.completed_jobs for s in summaries) / sum(s.end for s in summaries),
        "redis_commands_per_s": sum(s.requests for s in summaries) / sum(s.end for s in summaries),
        "redis_internal_commands_per_s": sum(s.redis_commands for s in summaries)
        / sum(s.end for s in summaries),
    }
    row.update(extra)
    return {k: _clean(v) for k, v in row.items()}


def _clean(v: Any) -> Any:
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, np.floating | np.integer):
        v = v.item()
    return _nan_to_none(v) if isinstance(v, float) else v


def paired_difference(
    a: Sequence[RunSummary], b: Sequence[RunSummary], metric: str, level: float = LEVEL
) -> dict[str, float | None]:
    """Mean of metric(a) - metric(b) over replications run on the same seeds, with a t interval.

    `metric` names a RunSummary attribute; list attributes (latencies) are reduced to their mean.
    """
    pairs_a = {(s.seed, s.replication): s for s in a}
    diffs = []
    for s in b:
        other = pairs_a.get((s.seed, s.replication))
        if other is None:
            continue
        va, vb = _metric(other, metric), _metric(s, metric)
        if va is not None and vb is not None:
            diffs.append(va - vb)
    m, lo, hi = mean_ci(diffs, level)
    return {
        "metric": metric,
        "pairs": len(diffs),
        "mean": _nan_to_none(m),
        "ci": [_nan_to_none(lo), _nan_to_none(hi)],
    }


def _metric(s: RunSummary, metric: str) -> float | None:
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


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a crash never leaves half a file."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".emqsim-", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def summary_dict(s: RunSummary) -> dict[str, Any]:
    return asdict(s)
