"""A tune result as text (the report `python -m emqsim tune` prints), as BullMQ Worker options, as an emqsim
scenario file and as plain data (its --json)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from emqsim.tune.candidates import Candidate, Metric, _typical_rtt
from emqsim.tune.inputs import VERIFY_SEED_OFFSET, Limits, distribution_spec
from emqsim.tune.measure import _fmt
from emqsim.tune.results import TuneResult


# -- output ---------------------------------------------------------------------------------------------------
def bullmq_settings(c: Candidate) -> dict[str, Any]:
    """The Worker options a BullMQ user pastes, with what lockRenewTime means for the beat."""
    out: dict[str, Any] = {
        "lockDuration": int(round(c.lease_s * 1000)),
        "stalledInterval": int(round(c.scan * 1000)),
        "maxStalledCount": 1,
    }
    if c.preset != "bullmq":
        # BullMQ's LockManager ticks every lockRenewTime/2 and renews then (plus a round trip): a beat of B
        # seconds is lockRenewTime = 2 B.
        out["lockRenewTime"] = int(round(2 * c.beat_s * 1000))
    return out


def lock_renew_note(c: Candidate, rtt: float) -> str:
    """What lockRenewTime means for the heartbeat (BullMQ's LockManager renews on ticks of lockRenewTime/2)."""
    B = c.predicted.get("renewal_period", c.beat)
    if c.preset == "bullmq":
        return (
            f"(BullMQ derives lockRenewTime = lockDuration/2 = {c.lease_s * 500:.0f} ms; its lock manager ticks every "
            f"lockRenewTime/2 = {c.beat_s * 1000:.0f} ms and, with a {rtt * 1000:g} ms round trip, renews on every "
            f"tick: a renewal every {B:.4g} s per worker holding jobs. maxStalledCount 1 retries a stalled job once)"
        )
    return (
        f"(lockRenewTime = 2 x beat = {2 * c.beat_s * 1000:.0f} ms: BullMQ's lock manager ticks every lockRenewTime/2 "
        f"and renews on each tick, every {c.beat:g} s plus a round trip; leaving lockRenewTime at its default "
        f"(lockDuration/2) would renew every {c.lease_s / 4:g} s instead. maxStalledCount 1 retries a stalled job once)"
    )


def scenario_toml(r: TuneResult, c: Candidate | None = None) -> str:
    """The workload and the recommended policy as an emqsim scenario file (`run --config`, `sweep --config`)."""
    c = c or r.recommended
    w = r.workload
    lines = [
        "# Written by `python -m emqsim tune`: your workload and the recommended settings.",
        "[scenario]",
        'name = "tuned"',
        f"workers = {w.workers}",
        f"concurrency = {w.concurrency}",
        f"jobs = {w.jobs}",
        f"arrival_rate = {w.rate!r}",
        f'duration = "{distribution_spec(w.duration)}"',
        f"horizon = {w.horizon:g}",
        "",
        "[scenario.random_faults]",
        f"crash_rate = {w.crash_rate:g}",
        f"restart_after = {w.restart_after:g}",
        f"freeze_rate = {w.pause_rate:g}",
        f'freeze_duration = "{distribution_spec(w.pause_length)}"',
        f"outage_rate = {w.outage_rate:g}",
        f'outage_duration = "{distribution_spec(w.outage_length)}"',
        "",
        "[scenario.network]",
        f'rtt = "{distribution_spec(w.rtt)}"',
        f"loss = {w.loss:g}",
        f"command_timeout = {w.command_timeout:g}",
    ]
    if c is not None:
        lines += ["", "[policy]"]
        if c.preset == "bullmq":
            lines += ['kind = "bullmq"', f"lease = {c.lease:g}", f"scan = {c.scan:g}", "max_stalled = 1"]
        else:
            lines += ['kind = "lease"', f"lease = {c.lease:g}", f"beat = {c.beat:g}", f"scan = {c.scan:g}"]
    return "\n".join(lines) + "\n"


def _row(c: Candidate, limits: Limits, wide: bool = True) -> list[str]:
    """One table row: every metric as `estimate [lower, upper]` (`wide`), or as `estimate <= upper` (the
    default report: every limit is checked against an interval's upper end, and this fits 100 columns)."""
    m = c.metrics
    cell = _fmt if wide else _fmt_upper
    narrow = (
        type(c.custom).__qualname__
        if c.custom is not None
        else c.label().replace(" s,", ",").removesuffix(" s")
    )
    return [
        c.label() if wide else narrow,  # a detector's parameters are in its section's heading
        str(c.replications),
        cell(m.get("false_reclaims")),
        cell(m.get(f"detection_{limits.detection_stat}")),
        cell(m.get("requests_per_s")),
        c.status,
    ]


def _fmt_upper(m: Metric | None, digits: int = 3) -> str:
    """An estimate and its interval's upper end, `0.01 <= 0.0787` (the narrow table's cell, under a heading
    naming the interval's level)."""
    if m is None or m.value is None:
        return "-"
    if m.hi is None:
        return f"{m.value:.{digits}g} [no interval]"
    return f"{m.value:.{digits}g} <= {m.hi:.{digits}g}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    """A plain text table; a heading may hold a newline: its parts stand on two heading lines."""
    parts = [h.split("\n") for h in header]
    depth = max(len(p) for p in parts)
    heads = [[(p[i] if i < len(p) else "") for p in parts] for i in range(depth)]
    cells = heads + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for n, r in enumerate(cells):
        out.append("  ".join(x.ljust(wd) for x, wd in zip(r, widths, strict=True)).rstrip())
        if n == depth - 1:
            out.append("  ".join("-" * wd for wd in widths))
    return "\n".join(out)


def _bullet(text: str, width: int = 100) -> str:
    """One "  - text" item wrapped to `width` columns, continuation lines indented under the text."""
    import textwrap

    return textwrap.fill(text, width, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False)


def _prose(text: str, width: int = 100) -> str:
    """A line of prose wrapped to `width` columns, continuations indented 2 more than its first line."""
    if len(text) <= width:
        return text
    import textwrap

    indent = " " * (len(text) - len(text.lstrip()) + 2)
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)


def report(r: TuneResult, wide: bool = True) -> str:
    """The human-readable answer: with `wide` every interval in full, else each estimate with its upper end
    (what the limits are checked against) under two-line headings, so the tables fit 100 columns."""
    limits = r.limits
    per = limits.false_reclaims_per
    lvl = f"{limits.level:.1%}".replace(".0%", "%")
    if wide:
        header = [
            "settings",
            "reps",
            f"false reclaims/{per} [{lvl}]",
            f"detect {limits.detection_stat} s [{lvl}]",
            f"Redis req/s [{lvl}]",
            "status",
        ]
    else:
        header = [
            "settings (s)",
            "reps",
            f"false reclaims/{per}\n({lvl} upper)",
            f"detect {limits.detection_stat} s\n({lvl} upper)",
            f"Redis req/s\n({lvl} upper)",
            "status",
        ]

    def row(c: Candidate) -> list[str]:
        return _row(c, limits, wide)

    lines = [
        _prose(
            f"limits: false reclaims <= {limits.false_reclaims if limits.false_reclaims is not None else 'any'} per {per}; "
            f"detection {limits.detection_stat} <= {limits.detection if limits.detection is not None else 'any'} s; "
            f"Redis <= {limits.requests_per_s if limits.requests_per_s is not None else 'any'} requests/s; "
            f"confidence {limits.confidence:g}: intervals are two-sided at {lvl}, so their upper ends hold together "
            f"at {limits.confidence:g} over the {max(1, limits.count)} limit(s) (Bonferroni)"
        ),
        f"simulated runs: {r.runs} (at most {r.max_runs}); seed {r.seed}",
        "",
    ]
    best = r.recommended
    if best is None:
        lines.append("no lease setting was decided feasible at the requested confidence.")
    else:
        margin = f"{r.space.indifference:.0%}"
        if r.lease.decided:
            state = f"meets every limit; no other setting detects faster by more than {margin}"
        else:
            state = (
                f"meets every limit; the fastest point estimate, but not separated from the runner-up by "
                f"{r.space.max_replications} replications (the difference is within the noise)"
            )
        if r.verifications and r.confirmed is None:
            state += "; NOT confirmed on fresh seeds (below)"
        elif r.lease.best is not None and best is not r.lease.best:
            state = (
                f"meets every limit; the race's fastest, {r.lease.best.label()}, was not confirmed on fresh "
                f"seeds, this one was"
            )
        lines += [
            f"recommended: {best.label()}",
            _prose(f"  ({state})"),
            _table([row(best)], header),
        ]
        if r.verifications:
            assert r.verify_level is not None
            vlvl = f"{r.verify_level:.2%}"
            lines += [
                _prose(
                    f"on fresh seeds (root seed {r.seed + VERIFY_SEED_OFFSET}; sequential, so every interval is "
                    f"at {vlvl}: Bonferroni over the limits and every look that could happen):"
                ),
                _table(
                    [row(v) for v in r.verifications],
                    [h.replace(f"[{lvl}]", f"[{vlvl}]").replace(f"({lvl} ", f"({vlvl} ") for h in header],
                ),
            ]
            lines += [
                _prose(f"  {v.label()}: {v.reason}") for v in r.verifications if v.status != "confirmed"
            ]
        lines += ["", _prose(f"runner-up: {r.lease.why_runner_up_lost}")]
        lines += [
            "",
            "BullMQ Worker options:",
            _prose("  " + ", ".join(f"{k}: {v}" for k, v in bullmq_settings(best).items())),
        ]
        lines.append(_prose("  " + lock_renew_note(best, _typical_rtt(r.workload.rtt))))
    t = r.timeout.best
    lines += ["", "best fixed timeout, for comparison:"]
    lines.append(
        _table([row(t)], header)
        if t is not None
        else _prose(f"  none met the limits ({r.timeout.why_runner_up_lost})")
    )
    mine = r.detector
    if mine is not None:
        verdict = f"fails: {mine.reason}" if mine.status == "fails" else mine.reason  # meets, or undecided
        lines += ["", _prose(f"your detector, {mine.label()}, on the same seeds and limits (not tuned):")]
        lines += [_table([row(mine)], header), _prose(f"  {verdict}")]
    lines += ["", "Pareto frontier (false reclaims, detection, Redis requests; simulated lease settings):"]
    lines.append(_table([row(c) for c in r.frontier()], header))
    lines += ["", "what would change the answer:"] + [_bullet(x) for x in r.what_would_change]
    if best is not None:
        lines += ["", "emqsim scenario file (python -m emqsim run --config FILE):", scenario_toml(r).rstrip()]
    return "\n".join(lines)


def to_json_dict(r: TuneResult) -> dict[str, Any]:
    from emqsim import __version__

    best = r.recommended
    return {
        "version": __version__,
        "seed": r.seed,
        "runs": r.runs,
        "max_runs": r.max_runs,
        "limits": asdict(r.limits),
        "level": r.limits.level,
        "workload": {
            k: (distribution_spec(v) if not isinstance(v, int | float | type(None)) else v)
            for k, v in vars(r.workload).items()
        },
        "decided": r.lease.decided,
        "recommended": best.as_dict() if best else None,
        "verification": r.verification.as_dict() if r.verification else None,
        "verifications": [v.as_dict() for v in r.verifications],
        "verify_level": r.verify_level,
        "confirmed": r.confirmed is not None,
        "runner_up": r.lease.runner_up.as_dict() if r.lease.runner_up else None,
        "why_runner_up_lost": r.lease.why_runner_up_lost,
        "best_timeout": r.timeout.best.as_dict() if r.timeout.best else None,
        "frontier": [c.as_dict() for c in r.frontier()],
        "what_would_change": r.what_would_change,
        "bullmq": bullmq_settings(best) if best else None,
        "toml": scenario_toml(r) if best else None,
        "candidates": [c.as_dict() for c in r.candidates],
        "detector": r.detector.as_dict() if r.detector is not None else None,
    }
