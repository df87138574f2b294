"""Text output: numbers and intervals for tables, the sweep table, `run`'s report, the paired differences,
the text timeline."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TABLE_WIDTH = 100  # default tables fit a 100-column terminal; --wide adds the rest


FIELDS_HINT = "columns explained: python -m emqsim fields"
SETTINGS_KEY = "L lease, B beat, S scan (sweep interval), T timeout, in s; undet.: crashes never detected"


def decimals(x: float, significant: int) -> int:
    """Decimals that show `significant` significant digits of x (0 for big numbers, at most 4)."""
    if x == 0 or not math.isfinite(x):
        return 0
    return max(0, min(4, significant - 1 - math.floor(math.log10(abs(x)))))


def fmt(x: Any, digits: int | None = None) -> str:
    """A number for a table: `-` for none, whole numbers as they are, floats with 3 significant digits
    (or `digits` decimals)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, bool) or not isinstance(x, float):
        return str(x)
    if x == 0:
        return "0"
    if digits is None and x.is_integer() and abs(x) < 1e6:
        return f"{x:.0f}"
    d = digits if digits is not None else decimals(x, 3)
    return f"{x:.{d}f}"


def ci_text(value: Any, ci: Any, lower_bound: bool = False, upper_bound: bool = False) -> str:
    """`est [lo, hi]`, with `n/a` for a missing end (or for the whole interval when there is none) and a
    `>=`/`<=` marker when the estimate is only a bound. Never prints a zero-width interval."""
    if value is None:
        return "-"
    marker = ">=" if lower_bound else ("<=" if upper_bound else "")
    ends = [x for x in (ci or []) if x is not None]
    if not ends:
        return f"{marker}{fmt(value)} [n/a]"
    if ci[0] is not None and ci[1] is not None and ci[0] == ci[1]:
        return f"{marker}{fmt(value)} [n/a]"  # defensive: a zero-width interval is no interval
    d = decimals(float(value), 3) if value else 0
    d = max([d] + [decimals(float(x), 2) for x in ends if x])
    if ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        d = max(d, min(4, decimals(ci[1] - ci[0], 1)))
    if value:
        d = min(d, max(0, 3 - math.floor(math.log10(abs(value)))))  # at most 4 significant digits
    d = distinct(ci, d)

    def end(x: Any) -> str:
        return "n/a" if x is None else ("0" if x == 0 else f"{x:.{d}f}")

    est = "0" if value == 0 else f"{value:.{d}f}"
    return f"{marker}{est} [{end(ci[0])}, {end(ci[1])}]"


def distinct(ci: Any, d: int) -> int:
    """More decimals until the two printed ends differ: an interval must never look zero-width."""
    if ci and ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        while d < 8 and f"{ci[0]:.{d}f}" == f"{ci[1]:.{d}f}":
            d += 1
    return d


def settings_text(row: dict[str, Any]) -> str:
    """The policy and its settings in seconds: `lease L=30 B=10 S=5`, `timeout T=600 S=5`."""
    if row.get("timeout") is not None:
        return f"{row['policy']} T={row['timeout']:g} S={row['scan']:g}"
    beat = f" B={row['beat']:g}" if row.get("beat") is not None else ""
    lease = f" L={row['lease']:g}" if row.get("lease") is not None else ""  # a detector has none
    return f"{row['policy']}{lease}{beat} S={row['scan']:g}"


def is_bound(row: dict[str, Any], key: str) -> bool:
    return bool(row.get(key))


@dataclass(frozen=True)
class Column:
    """A table column: a two-line header (what; per run / per job / total, unit), the cell, the JSON field."""

    title: str
    scope: str
    cell: Callable[[dict[str, Any]], str]
    field: str
    wide: bool = False  # shown only with --wide


TABLE_COLUMNS = (
    Column("scenario", "", lambda r: str(r["scenario"]), "scenario"),
    Column("policy, settings", "seconds", settings_text, "policy"),
    Column(
        "false reclaims",
        "per job [95% CI]",
        lambda r: ci_text(r["false_reclaims_per_job"], r["false_reclaims_per_job_ci"]),
        "false_reclaims_per_job",
    ),
    Column(
        "detection s",
        "mean/crash [95% CI]",
        lambda r: ci_text(
            r["detection_latency_mean_s"],
            r["detection_latency_mean_s_ci"],
            lower_bound=is_bound(r, "detection_latency_censored"),
        ),
        "detection_latency_mean_s",
    ),
    Column(
        "p95 s",
        "pooled",
        lambda r: (
            (">=" if is_bound(r, "detection_latency_pooled_p95_s_lower_bound") else "")
            + fmt(r["detection_latency_pooled_p95_s"])
        ),
        "detection_latency_pooled_p95_s",
        wide=True,
    ),
    Column("undet.", "total", lambda r: fmt(r["crashes_undetected_total"]), "crashes_undetected_total"),
    Column(
        "hostage s",
        "per run",
        lambda r: (">=" if is_bound(r, "detection_latency_censored") else "") + fmt(r["hostage_s_per_run"]),
        "hostage_s_per_run",
    ),
    Column(
        "max s",
        "pooled",
        lambda r: (
            (">=" if is_bound(r, "detection_latency_censored") else "")
            + fmt(r["detection_latency_pooled_max_s"])
        ),
        "detection_latency_pooled_max_s",
        wide=True,
    ),
    Column("crashes", "total", lambda r: fmt(r["crashes_total"]), "crashes_total", wide=True),
    Column(
        "dup runs",
        "per run",
        lambda r: fmt(r["duplicate_executions_per_run"]),
        "duplicate_executions_per_run",
        wide=True,
    ),
    Column(
        "wasted s",
        "per run [95% CI]",
        lambda r: ci_text(r["wasted_work_s_per_run"], r["wasted_work_s_per_run_ci"]),
        "wasted_work_s_per_run",
        wide=True,
    ),
    Column(
        "redis req/s",
        "per run-second",
        lambda r: fmt(r["redis_requests_per_s"]),
        "redis_requests_per_s",
        wide=True,
    ),
)


def format_table(rows: Sequence[dict[str, Any]], columns=TABLE_COLUMNS, wide: bool = False) -> str:
    """A plain-text table with a two-line header; the first two columns left-aligned, numbers right-aligned;
    a footer pointing at the field reference."""
    columns = [c for c in columns if wide or not c.wide]
    cells = [[c.title for c in columns], [c.scope for c in columns]]
    cells += [[c.cell(r) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if n == 1:
            lines.append("  ".join("-" * w for w in widths))
    extra = "" if wide else "; --wide for more columns"
    lines.append(SETTINGS_KEY)
    lines.append(f"{FIELDS_HINT}{extra}")
    return "\n".join(lines)


def column_headings() -> list[tuple[str, str]]:
    """(the sweep table's heading, its JSON field) for every column, default and --wide (for `fields`)."""
    return [(" ".join(x for x in (c.title, c.scope) if x), c.field) for c in TABLE_COLUMNS]


def wrap(text: str, indent: int, width: int = TABLE_WIDTH) -> str:
    import textwrap

    pad = " " * indent
    return textwrap.fill(text, width=width, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False)


PAIRED_METRICS = (
    ("detection_latencies", "detection s per crash", " s"),
    ("false_reclaims", "false reclaims per run", ""),
    ("hostage_time", "hostage s per run", " s"),
)


def paired_text(d: dict[str, Any], unit: str) -> str:
    """`-425.5 s [-466.1, -384.9]`; a censored side makes it a bound (`<=`/`>=`, one end n/a); no spread
    between the pairs gives `[n/a: the same in all N pairs]`, never a zero-width interval."""
    marker = {"upper": "<=", "lower": ">=", "none": "~"}.get(d.get("bound", "exact"), "")
    mean = d["mean"]
    if d["ci"] is None:
        why = f"the same in all {d['pairs']} pairs" if d["pairs"] >= 2 else f"{d['pairs']} pair"
        if d.get("bound") == "none":
            why = "both sides censored"
        return f"{marker}{mean:+.3g}{unit} [n/a: {why}]"
    ci = d["ci"]
    d_ = max(decimals(mean, 3) if mean else 0, *(decimals(x, 2) for x in ci if x))
    if ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        d_ = max(d_, min(4, decimals(ci[1] - ci[0], 2)))
    d_ = distinct(ci, d_)
    ends = ["n/a" if x is None else f"{x:+.{d_}f}" for x in ci]
    return f"{marker}{mean:+.{d_}f}{unit} [{ends[0]}, {ends[1]}]"


def print_paired(result, cells) -> None:
    """Per scenario: the lease minus the seed's 10-minute timeout, paired on the same seeds, with 95% CIs."""
    lines = []
    side = "lease"
    by_scenario: dict[str, dict[str, int]] = {}
    for index, cell in enumerate(cells):
        if not result.summaries[index]:
            continue
        settings = cell.policy.settings()
        key = (
            "timeout" if settings["timeout"] == 600.0 else ("lease" if settings["timeout"] is None else None)
        )
        if key and key not in by_scenario.setdefault(cell.scenario.name, {}):
            by_scenario[cell.scenario.name][key] = index
            if key == "lease" and settings["lease"] is None:  # a detector: said by its name
                side = str(settings["policy"])
    name_width = max((len(n) for n in by_scenario), default=0)
    label_width = max(len(label) for _, label, _ in PAIRED_METRICS)
    for name, pair in by_scenario.items():
        if "lease" not in pair or "timeout" not in pair:
            continue
        first = True
        for metric, label, unit in PAIRED_METRICS:
            d = result.paired(pair["lease"], pair["timeout"], metric)
            if d["mean"] is None or d["pairs"] < 1 or (d["mean"] == 0 and d["ci"] is None):
                continue  # nothing to compare, or no difference in any pair
            head = name if first else ""
            lines.append(f"  {head.ljust(name_width)}  {label.ljust(label_width)}  {paired_text(d, unit)}")
            first = False
    if lines:
        print(f"\n{side} minus the 600 s timeout, paired on the same seeds (95% CI):\n" + "\n".join(lines))
        if any("  <=" in line or "  >=" in line for line in lines):
            print("  (<= / >=: some crashes were still undetected at the horizon, so only one end is known)")


def run_report(row: dict[str, Any]) -> str:
    """`run`'s output: one line per field (new names only, no deprecated aliases), numbers rounded for
    reading, each interval beside its estimate (`n/a` where there is none), bounds marked `>=`."""
    from emqsim.stats import DEPRECATED_KEYS

    skip = set(DEPRECATED_KEYS) | {"scenario"}
    keys = [k for k in row if k not in skip and not k.endswith("_ci") and not k.endswith("_lower_bound")]
    keys = [k for k in keys if k != "detection_latency_censored"]
    width = max(len(k) for k in keys)
    lines = []
    for key in keys:
        value = row[key]
        lower = (key == "hostage_s_per_run" or key.startswith("detection_latency_")) and bool(
            row.get("detection_latency_censored")
        )
        if key.startswith("detection_latency_pooled_p"):
            lower = bool(row.get(f"{key}_lower_bound"))
        if key == "detection_latency_pooled_min_s":
            lower = False
        if f"{key}_ci" in row:
            text = ci_text(value, row[f"{key}_ci"], lower_bound=lower)
        else:
            text = (">=" if lower and value is not None else "") + fmt(value)
        lines.append(f"  {key.ljust(width)}  {text}")
    if row.get("detection_latency_censored"):
        lines.append(
            f"  >=: {row['crashes_undetected_total']} crash(es) still undetected at the horizon count with "
            "their latency so far"
        )
    return "\n".join(lines)


WORKER_EVENT_TEXT = {
    "block": "BLOCKED (event loop: work goes on, no renewal) for",
    "unblock": "unblocked",
    "disconnect": "DISCONNECTED (commands wait in the offline queue);",
    "network_up": "network back, RECONNECTING (retry backoff):",
    "reconnect": "reconnected, RESENDING:",
    "child_crash": "sandboxed child exited, running",
}


def text_timeline(run) -> str:
    """The run's events in time order, one per line (for terminals and for `timeline` without --out)."""
    events: list[tuple[float, int, str]] = []
    for e in run.worker_events:
        label = WORKER_EVENT_TEXT.get(e.kind, e.kind)
        events.append((e.time, 0, f"worker {e.worker} {label} {e.detail}".rstrip()))
    for a in run.attempts:
        events.append(
            (a.taken_at, 1, f"job {a.job} taken by worker {a.worker} (attempt {a.attempt}, token {a.token})")
        )
        if a.reclaimed_at is not None:
            verdict = (
                "right: its worker is dead"
                if a.worker_state_at_reclaim == "dead"
                else f"WRONG: its worker is {a.worker_state_at_reclaim}"
            )
            events.append(
                (
                    a.reclaimed_at,
                    2,
                    f"job {a.job} reclaimed from worker {a.worker} by {a.reclaimed_by} ({verdict})",
                )
            )
        if a.finish_applied_at is not None:
            if a.failed_at is not None and a.reclaimed_by is None:
                text = f"job {a.job} failed by its worker {a.worker} (a child's exit or a deferred failure)"
            else:
                text = f"job {a.job} finish by worker {a.worker}: {a.finish_result}"
            events.append((a.finish_applied_at, 3, text))
        elif a.failed_at is not None:
            events.append((a.failed_at, 2, f"job {a.job} failed by {a.reclaimed_by} (stalled too often)"))
    for e in run.lock_events:
        if e.kind in ("expired", "renew_failed"):
            events.append((e.time, 4, f"lock of job {e.job} {e.kind.replace('_', ' ')}"))
        elif e.kind == "renew_skipped":  # Network.skipped_ticks, or explore's `skip` fault
            events.append((e.time, 4, f"lock of job {e.job}: its worker's renewal tick skipped"))
    events.sort(key=lambda t: (t[0], t[1]))
    head = f"{run.scenario} under {run.policy['policy']} (seed {run.seed}); ended by {run.ended_by} at {run.end:g} s"
    return "\n".join([head] + [f"{t:10.3f} s  {text}" for t, _, text in events])


def scenario_summary(factory: Any) -> str:
    """A scenario's description: the first paragraph of its factory's docstring, as one line (whole, never cut)."""
    return " ".join((factory.__doc__ or "").strip().split("\n\n")[0].split())


def indented(text: str, width: int = 100) -> str:
    import textwrap

    return textwrap.fill(text, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
