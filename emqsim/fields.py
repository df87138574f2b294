"""The field reference: what every row field (JSON, CSV, table column) counts, and its interval.

`python -m emqsim fields` prints it; docs/statistics.md holds the same table (a test keeps the two equal).
Scopes: "per job" and "per crash" are rates or means over the unit named; "per run" is a mean over
replications; "total" is summed over all replications (it grows with --replications); "pooled" pools every
replication's values before taking a percentile (a point estimate, no interval).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    meaning: str
    interval: str
    deprecated: tuple[str, ...] = ()


_RATE = "quasi-Poisson over replications (dispersion from per-run counts); none seen: [0, bound from R runs]"
_MEAN_RUNS = "Student t over replications"
_CENSORED_MEAN = (
    "cluster-robust t over replications (ratio estimator); with crashes undetected at the horizon the "
    "estimate is a lower bound and only the lower end is given"
)
_NONE = "none (a count or a point estimate)"
_POOLED = "none: a pooled point estimate; `_lower_bound` says whether an undetected crash could raise it"

FIELDS = (
    Field("replications", "Independent runs aggregated into the row.", _NONE),
    Field(
        "jobs_total",
        "Jobs in the scenario, summed over replications (a horizon can end a run before all arrive).",
        _NONE,
        ("jobs",),
    ),
    Field(
        "jobs_arrived_total",
        "Jobs added before their run ended (the jobs at risk: per-job rates divide by them), total.",
        _NONE,
    ),
    Field("attempts_total", "Takes of jobs by workers, total.", _NONE, ("attempts",)),
    Field("reclaims_total", "Jobs taken back by a sweep or failed, total.", _NONE, ("reclaims",)),
    Field(
        "false_reclaims_total", "Reclaims from a worker that was not dead, total.", _NONE, ("false_reclaims",)
    ),
    Field(
        "false_reclaims_per_job",
        "False reclaims per job that arrived (a count per job: can exceed 1 when a job is falsely reclaimed "
        "repeatedly).",
        _RATE + " (the bound assumes at most one per job)",
        ("false_reclaim_rate", "false_reclaim_rate_ci"),
    ),
    Field(
        "false_reclaims_per_work_hour",
        "False reclaims per hour of work the workers did.",
        _RATE,
        ("false_reclaims_per_job_hour",),
    ),
    Field("crashes_total", "Crashes of a worker holding a job (detected + undetected), total.", _NONE),
    Field("detections_total", "Crashes detected (the job reclaimed), total.", _NONE, ("detections",)),
    Field(
        "crashes_undetected_total",
        "Crashes whose job was still held at the horizon (censored), total.",
        _NONE,
        ("undetected",),
    ),
    Field(
        "detection_latency_censored",
        "True if any crash was undetected at the horizon: latency and hostage numbers are lower bounds.",
        _NONE,
    ),
    Field(
        "detection_latency_mean_s",
        "Seconds from a crash to the reclaim of its job, mean per crash; undetected crashes count with their "
        "time so far (end - crash).",
        _CENSORED_MEAN,
        ("detection_latency_mean", "detection_latency_mean_ci"),
    ),
    Field(
        "detection_latency_pooled_p50_s / _p95_s / _p99_s",
        "Percentiles of the detection latency over all replications' crashes pooled (undetected ones at their "
        "time so far).",
        _POOLED,
        ("detection_latency_p50", "detection_latency_p95", "detection_latency_p99"),
    ),
    Field(
        "detection_latency_pooled_min_s / _max_s",
        "Smallest and largest latency over all replications (the max grows with replications).",
        "none; the max is a lower bound when detection_latency_censored",
        ("detection_latency_min", "detection_latency_max"),
    ),
    Field(
        "hostage_s_per_run",
        "Seconds crashed workers' jobs stayed hidden, summed per run, mean over replications.",
        _MEAN_RUNS + "; a lower bound (upper end n/a) when detection_latency_censored",
        ("hostage_time",),
    ),
    Field(
        "duplicate_executions_total / _per_run",
        "Runs of a job that started while an earlier run of it was still executing.",
        _NONE,
        ("duplicate_executions",),
    ),
    Field(
        "wasted_work_s_per_run",
        "Seconds of work done on attempts that were reclaimed, per run.",
        _MEAN_RUNS,
        ("wasted_work",),
    ),
    Field(
        "finishes_rejected_total",
        "Finishes refused by the token check.",
        _NONE,
        ("finishes_rejected",),
    ),
    Field(
        "duplicate_completions_total",
        "Finishes accepted for a job already completed.",
        _NONE,
        ("duplicate_completions",),
    ),
    Field("job_latency_mean_s", "Seconds from arrival to first completion, mean per completed job.", _NONE),
    Field("completed_jobs_per_s", "Jobs completed per simulated second.", _NONE, ("throughput_per_s",)),
    Field(
        "redis_requests_per_s",
        "Client requests (round trips) to Redis per simulated second.",
        _NONE,
        ("redis_commands_per_s",),
    ),
    Field(
        "redis_internal_commands_per_s",
        "Redis commands executed (inside scripts too) per simulated second.",
        _NONE,
    ),
)


def markdown_table() -> str:
    """The reference as a Markdown table (docs/statistics.md embeds it)."""
    lines = ["| field | what it counts | interval | replaces |", "|---|---|---|---|"]
    for f in FIELDS:
        old = ", ".join(f"`{d}`" for d in f.deprecated)
        lines.append(f"| `{f.name}` | {f.meaning} | {f.interval} | {old} |")
    return "\n".join(lines)
