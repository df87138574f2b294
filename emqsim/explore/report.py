"""An exploration as text (the report `python -m emqsim explore` prints) and as plain data (its --json)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emqsim.explore.faults import FAULT_KINDS, HOLDER, FaultSpec
from emqsim.explore.results import Exploration
from emqsim.server import TieBreak


def _tie_text(tie: TieBreak) -> str:
    return f"arrivals {tie.arrivals}, expiry {tie.expiry}, fault {'last' if tie.fault_last else 'in order'}"


# -- text -------------------------------------------------------------------------------------------------------
def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.3f} s"


def _where(point: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v / 1000:g} s" for k, v in sorted(point.items()))


def _wrap(line: str, width: int) -> str:
    """A line wrapped to `width` columns (0: as it is), continuations indented 4 more than the line."""
    if not width or len(line) <= width:
        return line
    import textwrap

    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False)


def _network_lines(sp: Any) -> list[str]:
    """The explored world's network settings, if any (`space(resend_twice=..., max_retries_per_request=...)`)."""
    said = []
    if sp.resend_twice:
        said.append(f"a command whose reply a drop caught runs twice (resend_twice; {sp.jobs} jobs)")
    if sp.max_retries_per_request is not None:
        said.append(f"ioredis maxRetriesPerRequest {sp.max_retries_per_request}")
    return ["network: " + "; ".join(said)] if said else []


def format_exploration(result: Exploration, width: int = 100) -> str:
    """The report `python -m emqsim explore` prints, wrapped to `width` columns (0: unwrapped)."""
    sp = result.space

    def whom(f: FaultSpec) -> str:
        if not FAULT_KINDS[f.kind].targeted:
            return "every client"
        return "the job's worker" if f.target == HOLDER else "worker 1"

    faults = " + ".join(f"{f.kind} ({whom(f)})" for f in sp.faults)
    lines = [
        f"explored {result.points:,} timings of {faults} under {sp.policy!r} with {result.runs:,} runs",
        "coordinates (ms): " + ", ".join(f"{d.role} {d.lo}..{d.hi}" for d in sp.dims),
        "pinned (ms): " + (", ".join(f"{k} {v}" for k, v in sorted(sp.pinned.items())) or "-"),
        *_network_lines(sp),
        "",
        "fault -> reclaim of the job's first attempt (every timing weighs the same):",
        f"  min {_s(result.latency_min)}  mean {_s(result.latency_mean)}  max {_s(result.latency_max)}"
        f"  (p50 {_s(result.latency_quantile(0.5))}, p95 {_s(result.latency_quantile(0.95))}; "
        f"never reclaimed at {result.never_reclaimed:,} timings)",
    ]
    lo, hi = result.latency_min_any_order(), result.latency_max_any_order()
    if (lo, hi) != (result.latency_min, result.latency_max):
        lines.append(f"  with the other same-millisecond orders: min {_s(lo)}  max {_s(hi)}")
    lines.append("")
    lines.append("properties:")
    for p in sp.properties:
        held = result.counts[p.name]
        mark = "holds everywhere" if held == result.points else f"FAILS at {result.points - held:,} timings"
        lines.append(f"  {p.name:28} {mark}")
    for b in result.boundaries:
        lines.append(
            f"  boundary: {b.property} starts failing at {b.dim} = {_s(b.first)} .. {_s(b.last)} "
            f"(first at {_where(b.where_first)})"
        )
    for c in result.counterexamples:
        lines.append(f"  smallest counterexample of {c.property}: {_where(c.point)}")
    if result.tie_dependent:
        lines.append("")
        lines.append("depends on the order of same-millisecond events:")
        seen = set()
        for t in result.tie_dependent:
            key = (t.tie_break, t.properties)
            if key in seen:
                continue
            seen.add(key)
            count = sum(1 for u in result.tie_dependent if (u.tie_break, u.properties) == key)
            lines.append(
                f"  {', '.join(t.properties)} under '{t.tie_break}' ({count} place(s), e.g. {_where(t.point)})"
            )
    return "\n".join(_wrap(line, width) for line in lines)


def as_json(result: Exploration) -> dict[str, Any]:
    """The exploration as plain data (latencies in seconds)."""
    sp = result.space

    def secs(ms: float | None) -> float | None:
        return None if ms is None else ms / 1000

    return {
        "policy": sp.policy.settings(),
        "faults": [{"kind": f.kind, "target": f.target} for f in sp.faults],
        "coordinates_ms": {d.role: [d.lo, d.hi] for d in sp.dims},
        "pinned_ms": dict(sp.pinned),
        "network": {"resend_twice": sp.resend_twice, "max_retries_per_request": sp.max_retries_per_request},
        "jobs": sp.jobs,
        "points": result.points,
        "runs": result.runs,
        "latency": {
            "min": secs(result.latency_min),
            "mean": secs(result.latency_mean),
            "max": secs(result.latency_max),
            "min_any_order": secs(result.latency_min_any_order()),
            "max_any_order": secs(result.latency_max_any_order()),
            "never_reclaimed": result.never_reclaimed,
            "histogram_ms": [
                [int(v), int(w)] for v, w in zip(result.latency_values, result.latency_weights, strict=True)
            ],
        },
        "properties": {
            name: {"holds_at": held, "fails_at": result.points - held} for name, held in result.counts.items()
        },
        "counterexamples": {c.property: c.point for c in result.counterexamples},
        "boundaries": [vars(b) for b in result.boundaries],
        "tie_dependent": [vars(t) for t in result.tie_dependent],
    }
