"""Figures for runs and result tables: Matplotlib only, the Okabe-Ito colour-blind-safe palette, times in
seconds, and `savefig` that writes byte-identical SVG/PNG when nothing changed.

    timeline(run)            one run: a swimlane per worker with its jobs, locks, heartbeats, sweeps, reclaims
    two_columns(runs)        slow-but-alive and fast-but-dead workers under a timeout and a lease, 2 x 2
    frontier(rows)           false-reclaim rate against detection latency (rows from `emqsim.stats.aggregate`)
    latency_cdf(samples)     detection-latency CDFs with their theoretical bounds
    heatmap(rows)            detection latency and Redis load over a (lease, beat) grid
    freeze_curve(rows)       false reclaims against the length of a stop-the-world freeze
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.figure import Figure, SubFigure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.rcsetup import cycler
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation

from emqsim.records import DUPLICATE_COMPLETION, Attempt, Run
from emqsim.verdict import HOSTAGE_AFTER, Verdict, clock, reclaim_time, verdict

__all__ = [
    "OKABE_ITO",
    "SERIES",
    "RC",
    "Verdict",
    "clock",
    "frontier",
    "freeze_curve",
    "heatmap",
    "latency_cdf",
    "policy_label",
    "savefig",
    "timeline",
    "two_columns",
    "verdict",
]

# -- palette and style ----------------------------------------------------------------------------------------
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}
SERIES = tuple(OKABE_ITO[k] for k in ("blue", "orange", "green", "vermillion", "purple", "sky", "black"))
GREY = "#8C8C8C"

RC: dict[Any, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": cycler(color=list(SERIES)),
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.dpi": 100,
    "hatch.linewidth": 0.6,
    "svg.hashsalt": "emqsim",
    "svg.fonttype": "path",
    "path.simplify": True,
}

_CREATOR = "emqsim (https://matplotlib.org)"


def savefig(fig: Figure | SubFigure, path: str | os.PathLike, *, dpi: int = 150) -> Path:
    """Save `fig` as SVG, PNG or PDF (by suffix) with fixed metadata and id salt, so regenerating an unchanged
    figure gives identical bytes; an existing file with the same bytes is left untouched. A subfigure saves the
    whole figure it belongs to."""
    fig = fig if isinstance(fig, Figure) else fig.figure
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    metadata: dict[str, Any]
    if fmt == "svg":
        metadata = {"Date": None, "Creator": _CREATOR}
    elif fmt == "png":
        metadata = {"Software": _CREATOR}
    elif fmt == "pdf":
        metadata = {"CreationDate": None, "ModDate": None, "Creator": _CREATOR, "Producer": _CREATOR}
    else:
        raise ValueError(f"savefig writes .svg, .png or .pdf, not {path.suffix!r}")
    if (
        fig.get_layout_engine() is not None
        and fig.get_layout_engine().__class__.__name__ != "PlaceHolderLayoutEngine"
    ):
        # A layout engine moves things a little on every draw; settle it once and freeze it, so every
        # later save of this figure gives the same bytes.
        fig.draw_without_rendering()
        fig.set_layout_engine("none")
    buf = io.BytesIO()
    with mpl.rc_context({"svg.hashsalt": "emqsim", "svg.fonttype": "path", "pdf.compression": 6}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=metadata, bbox_inches="tight", pad_inches=0.08)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == data:
        return path
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


# -- labels ---------------------------------------------------------------------------------------------------
def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:g}"


def policy_label(settings: Mapping[str, Any]) -> str:
    """A short human label for a policy's settings (a `Run.policy` dict or a table row)."""
    name = settings.get("policy", "policy")
    if settings.get("label"):
        return str(settings["label"])
    if settings.get("timeout") is not None:
        text = f"timeout {_num(settings['timeout'])} s"
        return text if name == "timeout" else f"{name} ({text})"
    if settings.get("lease") is not None:
        text = f"lease {_num(settings['lease'])} s, beat {_num(settings.get('beat'))} s"
        return text if name == "lease" else f"{name} ({text})"
    return str(name)


# -- timeline -------------------------------------------------------------------------------------------------
_C = OKABE_ITO
_LEGEND: dict[str, Callable[[], Any]] = {
    "running": lambda: Patch(facecolor=_C["blue"], label="job running"),
    "frozen": lambda: Patch(facecolor=_C["yellow"], edgecolor=_C["orange"], hatch="///", label="frozen"),
    "blocked": lambda: Patch(
        facecolor=_C["blue"],
        edgecolor=_C["vermillion"],
        hatch="xx",
        label="event loop blocked (work goes on)",
    ),
    "disconnected": lambda: Patch(
        facecolor=_C["purple"], alpha=0.3, edgecolor=_C["purple"], hatch="..", label="connection down"
    ),
    "reconnecting": lambda: Patch(
        facecolor=_C["purple"], alpha=0.12, label="network back, reconnect backoff"
    ),
    "resend": lambda: Line2D(
        [],
        [],
        color=_C["purple"],
        marker=">",
        linestyle="none",
        markersize=6,
        label="reconnected: commands resent",
    ),
    "held": lambda: Patch(
        facecolor="#D9D9D9", edgecolor=GREY, hatch="\\\\\\", label="job held by a dead worker"
    ),
    "dead": lambda: Patch(facecolor="#000000", alpha=0.12, label="worker dead"),
    "lock": lambda: Patch(facecolor=_C["sky"], label="lock alive (ends at expiry)"),
    "deadline": lambda: Patch(
        facecolor=_C["orange"], alpha=0.35, edgecolor=_C["orange"], label="timeout clock running"
    ),
    "renewal": lambda: Line2D(
        [], [], color="black", marker="|", linestyle="none", markersize=7, label="heartbeat renewal"
    ),
    "renew_failed": lambda: Line2D(
        [],
        [],
        color=_C["vermillion"],
        marker="x",
        linestyle="none",
        markersize=6,
        markeredgewidth=1.5,
        label="renewal refused",
    ),
    "sweep": lambda: Line2D([], [], color=GREY, lw=0.8, alpha=0.7, label="sweep"),
    "crash": lambda: Line2D(
        [], [], color="black", marker="v", linestyle="none", markersize=7, label="worker crashes"
    ),
    "reclaim_right": lambda: Line2D(
        [],
        [],
        color=_C["green"],
        marker="o",
        markeredgecolor="black",
        linestyle="none",
        markersize=8,
        label="reclaimed: worker was dead (right)",
    ),
    "reclaim_wrong": lambda: Line2D(
        [],
        [],
        color=_C["vermillion"],
        marker="X",
        markeredgecolor="black",
        linestyle="none",
        markersize=9,
        label="reclaimed: worker was alive (wrong)",
    ),
    "retake": lambda: Line2D(
        [], [], color=_C["purple"], lw=1.4, marker=">", markersize=5, label="job runs again elsewhere"
    ),
    "finish_ok": lambda: Line2D(
        [],
        [],
        color="black",
        marker=">",
        markerfacecolor="white",
        linestyle="none",
        markersize=6,
        label="finish accepted",
    ),
    "finish_dup": lambda: Line2D(
        [],
        [],
        color=_C["vermillion"],
        marker="D",
        markeredgecolor="black",
        linestyle="none",
        markersize=6,
        label="finish accepted again (duplicate)",
    ),
    "finish_rejected": lambda: Line2D(
        [],
        [],
        color=_C["purple"],
        marker="s",
        markeredgecolor="black",
        linestyle="none",
        markersize=6,
        label="late finish rejected (token check)",
    ),
}


@dataclass
class _Worker:
    wid: int
    start: float = 0.0
    restarted: bool = False
    died: float | None = None
    frozen: list[tuple[float, float]] = field(default_factory=list)
    blocked: list[tuple[float, float]] = field(default_factory=list)
    disconnected: list[tuple[float, float]] = field(default_factory=list)
    reconnecting: list[tuple[float, float]] = field(default_factory=list)
    resends: list[float] = field(default_factory=list)


def _workers(run: Run) -> dict[int, _Worker]:
    workers: dict[int, _Worker] = {}
    open_freeze: dict[int, float] = {}
    open_block: dict[int, float] = {}
    open_drop: dict[int, float] = {}
    for e in run.worker_events:
        w = workers.setdefault(e.worker, _Worker(e.worker, start=e.time))
        if e.kind in ("start", "restart"):
            w.start, w.restarted = e.time, e.kind == "restart"
        elif e.kind == "block":
            open_block[e.worker] = e.time
        elif e.kind == "unblock" and e.worker in open_block:
            w.blocked.append((open_block.pop(e.worker), e.time))
        elif e.kind == "disconnect":
            open_drop[e.worker] = e.time
        elif e.kind == "network_up" and e.worker in open_drop:
            w.disconnected.append((open_drop.pop(e.worker), e.time))
            open_drop[e.worker] = e.time
        elif e.kind == "reconnect" and e.worker in open_drop:
            w.reconnecting.append((open_drop.pop(e.worker), e.time))
            w.resends.append(e.time)
        elif e.kind == "freeze":
            open_freeze[e.worker] = e.time
        elif e.kind == "resume" and e.worker in open_freeze:
            w.frozen.append((open_freeze.pop(e.worker), e.time))
        elif e.kind == "crash":
            w.died = e.time
            if e.worker in open_freeze:
                w.frozen.append((open_freeze.pop(e.worker), e.time))
            if e.worker in open_block:
                w.blocked.append((open_block.pop(e.worker), e.time))
    for wid, t in open_freeze.items():
        workers[wid].frozen.append((t, run.end))
    for wid, t in open_block.items():
        workers[wid].blocked.append((t, run.end))
    for a in run.attempts:
        workers.setdefault(a.worker, _Worker(a.worker))
    return dict(sorted(workers.items()))


def _split(
    t0: float, t1: float, frozen: Sequence[tuple[float, float]], blocked: Sequence[tuple[float, float]] = ()
) -> list[tuple[float, float, str]]:
    """[t0, t1] cut into running, frozen and blocked (running with the event loop blocked) pieces."""
    pieces, t = [], t0
    spans = sorted([(f0, f1, "frozen") for f0, f1 in frozen] + [(b0, b1, "blocked") for b0, b1 in blocked])
    for f0, f1, kind in spans:
        a, b = max(f0, t0, t), min(f1, t1)
        if b <= a:
            continue
        if a > t:
            pieces.append((t, a, "running"))
        pieces.append((a, b, kind))
        t = b
    if t1 > t:
        pieces.append((t, t1, "running"))
    return pieces


@dataclass
class _Shape:
    attempt: Attempt
    segments: list[tuple[float, float, str]]
    locks: list[tuple[float, float, bool]]  # (start, end, ended by expiry)
    renewals: list[float]
    refused: list[float]
    deadline: tuple[float, float, bool] | None  # (start, end, reached)
    start: float
    stop: float


def _shapes(run: Run, workers: Mapping[int, _Worker]) -> list[_Shape]:
    by_token: dict[tuple[str, str | None], list] = {}
    for e in run.lock_events:
        by_token.setdefault((e.job, e.token), []).append(e)
    timeout = run.policy.get("timeout")
    finished: dict[str, list[float]] = {}
    for a in run.attempts:
        if a.finish_result == "accepted" and a.finish_applied_at is not None:
            finished.setdefault(a.job, []).append(a.finish_applied_at)
    shapes = []
    for a in run.attempts:
        start = a.started_at if a.started_at is not None else a.taken_at
        if a.finished_at is not None:
            work_end = a.finished_at
        elif a.died_at is not None:
            work_end = a.died_at
        elif a.failed_at is not None and a.reclaimed_by is None:  # failed by its own worker
            work_end = a.failed_at
        else:
            work_end = run.end
        w = workers[a.worker]
        segments = _split(start, max(start, work_end), w.frozen, w.blocked)
        if a.died_at is not None:
            end = reclaim_time(a)
            segments.append((a.died_at, run.end if end is None else end, "held"))
        locks, renewals, refused = [], [], []
        opened: float | None = None
        expiry: float | None = None
        for e in by_token.get((a.job, a.token), ()):
            if e.kind == "set" or (e.kind == "renewed" and opened is None):
                opened, expiry = e.time, e.expires_at
                if e.kind == "renewed":
                    renewals.append(e.time)
            elif e.kind == "renewed":
                renewals.append(e.time)
                expiry = e.expires_at
            elif e.kind == "renew_failed":
                refused.append(e.time)
            elif e.kind in ("expired", "released", "deleted") and opened is not None:
                locks.append((opened, e.time, e.kind == "expired"))
                opened = None
        if opened is not None:
            locks.append((opened, run.end if expiry is None else min(expiry, run.end), False))
        deadline = None
        if timeout is not None:
            # The clock stops when the job leaves `active`: reclaimed, or finished by any of its attempts.
            limit = a.taken_at + timeout
            leaves = [t for t in (reclaim_time(a), run.end) if t is not None] + [
                t for t in finished.get(a.job, ()) if t >= a.taken_at
            ]
            end = min(limit, min(leaves))
            deadline = (a.taken_at, end, end >= limit)
        stop = max(
            [work_end] + [s[1] for s in segments] + [lk[1] for lk in locks] + [deadline[1] if deadline else 0]
        )
        if a.finish_applied_at is not None:
            stop = max(stop, a.finish_applied_at)
        shapes.append(_Shape(a, segments, locks, renewals, refused, deadline, start, stop))
    return shapes


def _pack(shapes: Sequence[_Shape], gap: float) -> dict[int, int]:
    """Rows inside one lane: first fit, so overlapping attempts of one worker get separate rows."""
    rows_end: list[float] = []
    row_of: dict[int, int] = {}
    for i, s in sorted(enumerate(shapes), key=lambda p: (p[1].start, p[0])):
        for r, end in enumerate(rows_end):
            if end + gap <= s.start:
                rows_end[r] = s.stop
                row_of[i] = r
                break
        else:
            row_of[i] = len(rows_end)
            rows_end.append(s.stop)
    return row_of


def _lanes(
    run: Run, window: tuple[float, float], jobs: Iterable[str] | None
) -> tuple[dict[int, _Worker], list[_Shape], list[tuple[_Worker, list[_Shape], dict[int, int]]]]:
    """Lanes: one per worker that exists in the window, rows inside for overlapping attempts."""
    t0, t1 = window
    workers = _workers(run)
    wanted = None if jobs is None else {str(j) for j in jobs}
    shapes = [
        s
        for s in _shapes(run, workers)
        if (wanted is None or s.attempt.job in wanted) and s.stop >= t0 and s.start <= t1
    ]
    lanes = []
    for w in workers.values():
        mine = [s for s in shapes if s.attempt.worker == w.wid]
        if not mine and (w.start > t1 or (w.died is not None and w.died < t0) or wanted is not None):
            continue
        lanes.append((w, mine, _pack(mine, gap=0.0)))
    return workers, shapes, lanes


def _rects(ax: Axes, rects: list[tuple[float, float, float, float]], **style: Any) -> None:
    if rects:
        ax.add_collection(PatchCollection([Rectangle((x, y), w, h) for x, y, w, h in rects], **style))


def _draw_timeline(
    ax: Axes,
    run: Run,
    *,
    window: tuple[float, float] | None = None,
    jobs: Iterable[str] | None = None,
    label_jobs: bool | None = None,
    max_sweep_lines: int = 120,
) -> list[str]:
    """Draw `run` on `ax`; returns the legend keys used (in legend order)."""
    t0, t1 = window if window is not None else (0.0, run.end)
    span = max(t1 - t0, 1e-9)
    workers, shapes, lanes = _lanes(run, (t0, t1), jobs)
    if label_jobs is None:
        label_jobs = len(shapes) <= 16
    used: set[str] = set()
    y = 0.0
    gap = 0.35
    yticks, ylabels = [], []
    ypos: dict[int, float] = {}  # id(attempt) -> bar centre
    bars: dict[str, list] = {"running": [], "frozen": [], "blocked": [], "held": []}
    lock_rects, deadline_rects, tick_segs, refused_pts = [], [], [], []
    crash_pts: list[tuple[float, float]] = []
    dead_rects, frozen_rects = [], []
    down_rects: list[Any] = []
    backoff_rects: list[Any] = []
    resend_pts: list[tuple[float, float]] = []
    for w, mine, row_of in lanes:
        rows = max(row_of.values(), default=0) + 1
        top, bottom = y, y + rows
        yticks.append((top + bottom) / 2)
        ylabels.append(f"worker {w.wid}" + (" (restart)" if w.restarted else ""))
        if w.died is not None:
            dead_rects.append((w.died, top - 0.1, max(t1, w.died) - w.died + span, bottom - top + 0.2))
            crash_pts.append((w.died, top - 0.02))
        for f0, f1 in w.frozen:
            frozen_rects.append((f0, top - 0.1, f1 - f0, bottom - top + 0.2))
        for d0, d1 in w.disconnected:
            down_rects.append((d0, top - 0.1, d1 - d0, bottom - top + 0.2))
        for d0, d1 in w.reconnecting:
            backoff_rects.append((d0, top - 0.1, d1 - d0, bottom - top + 0.2))
        resend_pts.extend((t, top - 0.02) for t in w.resends)
        for i, s in enumerate(mine):
            r = y + row_of[i]
            centre = r + 0.36
            ypos[id(s.attempt)] = centre
            for x0, x1, kind in s.segments:
                bars[kind].append((x0, r + 0.14, x1 - x0, 0.44))
            for x0, x1, _ in s.locks:
                lock_rects.append((x0, r + 0.66, x1 - x0, 0.16))
            if s.deadline is not None:
                x0, x1, _ = s.deadline
                deadline_rects.append((x0, r + 0.66, x1 - x0, 0.16))
            tick_segs.extend([((t, r + 0.6), (t, r + 0.88)) for t in s.renewals])
            refused_pts.extend([(t, r + 0.74) for t in s.refused])
        y = bottom + gap

    # Backgrounds: frozen and dead workers.
    _rects(ax, frozen_rects, facecolor=_C["yellow"], alpha=0.3, edgecolor="none", zorder=0)
    _rects(ax, dead_rects, facecolor="#000000", alpha=0.12, edgecolor="none", zorder=0)
    if frozen_rects:
        used.add("frozen")
    if dead_rects:
        used.add("dead")
    # Connection outages: down (hatched), then the reconnect backoff (light), then the resend.
    _rects(
        ax, down_rects, facecolor=_C["purple"], alpha=0.3, edgecolor=_C["purple"], hatch="..", lw=0, zorder=0
    )
    _rects(ax, backoff_rects, facecolor=_C["purple"], alpha=0.12, edgecolor="none", zorder=0)
    if down_rects:
        used.add("disconnected")
    if backoff_rects:
        used.add("reconnecting")
    if resend_pts:
        used.add("resend")
        xs, ys = zip(*resend_pts, strict=True)
        ax.plot(xs, ys, **_marker("resend"), zorder=7)

    # Sweeps: vertical lines (a rug along the top when there are too many to read).
    sweeps = [s for s in run.sweeps if not s.skipped and t0 <= s.time <= t1]
    if sweeps:
        used.add("sweep")
        quiet = [s.time for s in sweeps if not (s.reclaimed or s.failed)]
        if len(quiet) <= max_sweep_lines:
            for q in quiet:
                ax.axvline(q, color=GREY, lw=0.6, alpha=0.55, zorder=0.5)
        else:
            ax.plot(
                quiet,
                [1.0] * len(quiet),
                transform=ax.get_xaxis_transform(),
                linestyle="none",
                marker="|",
                markersize=4,
                markeredgewidth=0.6,
                color=GREY,
                alpha=0.7,
                clip_on=False,
            )
        for sweep in sweeps:
            if sweep.reclaimed or sweep.failed:
                ax.axvline(sweep.time, color="black", lw=0.9, ls=(0, (4, 2)), alpha=0.8, zorder=0.6)

    # Jobs, locks, timeout clocks, heartbeats.
    _rects(ax, bars["running"], facecolor=_C["blue"], edgecolor="none", zorder=2)
    _rects(ax, bars["frozen"], facecolor=_C["yellow"], edgecolor=_C["orange"], hatch="///", lw=0.5, zorder=2)
    _rects(
        ax, bars["blocked"], facecolor=_C["blue"], edgecolor=_C["vermillion"], hatch="xx", lw=0.5, zorder=2
    )
    if bars["blocked"]:
        used.add("blocked")
    _rects(ax, bars["held"], facecolor="#D9D9D9", edgecolor=GREY, hatch="\\\\\\", lw=0.5, zorder=2)
    _rects(ax, lock_rects, facecolor=_C["sky"], edgecolor="none", zorder=2)
    _rects(ax, deadline_rects, facecolor=_C["orange"], alpha=0.35, edgecolor=_C["orange"], lw=0.8, zorder=2)
    for kind, items in (("running", bars["running"]), ("held", bars["held"])):
        if items:
            used.add(kind)
    if bars["frozen"]:
        used.add("frozen")
    if lock_rects:
        used.add("lock")
    if deadline_rects:
        used.add("deadline")
    if tick_segs:
        used.add("renewal")
        ax.add_collection(LineCollection(tick_segs, colors="black", linewidths=0.9, zorder=3))
    if refused_pts:
        used.add("renew_failed")
        xs, ys = zip(*refused_pts, strict=True)
        ax.plot(xs, ys, **_marker("renew_failed"), zorder=5)
    if crash_pts:
        used.add("crash")
        xs, ys = zip(*crash_pts, strict=True)
        ax.plot(xs, ys, **_marker("crash"), zorder=5, clip_on=False)

    # Outcomes: reclaims (right or wrong), the next run of the job, finishes.
    points: dict[str, list[tuple[float, float]]] = {}
    by_job: dict[str, dict[int, Attempt]] = {}
    for a in run.attempts:
        by_job.setdefault(a.job, {})[a.attempt] = a
    arrows = 0
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72  # type: ignore[union-attr]
    for s in shapes:
        a = s.attempt
        yc = ypos[id(a)]
        t = reclaim_time(a)
        if t is not None:
            points.setdefault("reclaim_wrong" if a.false_reclaim else "reclaim_right", []).append((t, yc))
            nxt = by_job[a.job].get(a.attempt + 1)
            if nxt is not None and id(nxt) in ypos and arrows < 40:
                arrows += 1
                used.add("retake")
                begin = nxt.started_at if nxt.started_at is not None else nxt.taken_at
                ax.annotate(
                    "",
                    xy=(begin, ypos[id(nxt)]),
                    xytext=(t, yc),
                    arrowprops={
                        "arrowstyle": "-|>",
                        "color": _C["purple"],
                        "lw": 1.4,
                        "shrinkA": 5,
                        "shrinkB": 2,
                        "connectionstyle": "arc3,rad=-0.15",
                    },
                    zorder=6,
                )
        if a.finish_applied_at is not None:
            if a.finish_result != "accepted":
                key = "finish_rejected"
            elif a.outcome == DUPLICATE_COMPLETION:
                key = "finish_dup"
            else:
                key = "finish_ok"
            points.setdefault(key, []).append((a.finish_applied_at, yc))
        if label_jobs:
            text = f"job {a.job}" + (f" · try {a.attempt}" if a.attempt > 1 else "")
            # Written at the start of the longest visible piece, white on dark blue, black on light fills.
            pieces = [(min(b0, t1) - max(a0, t0), max(a0, t0), k) for a0, b0, k in s.segments]
            longest, begin, under = max(pieces, default=(0.0, t0, "held"), key=lambda p: p[0])
            if longest / span * width_pt > 4.4 * len(text) + 8:
                at = begin + 0.01 * span
                ax.text(
                    at,
                    yc,
                    text,
                    va="center",
                    ha="left",
                    fontsize=7,
                    color="white" if under == "running" else "black",
                    zorder=4,
                    clip_on=True,
                )
    for key in ("finish_ok", "finish_dup", "finish_rejected", "reclaim_right", "reclaim_wrong"):
        if key in points:
            used.add(key)
            xs, ys = zip(*points[key], strict=True)
            ax.plot(xs, ys, **_marker(key), zorder=7)

    ax.set_xlim(t0, t1 + 0.01 * span)
    ax.set_ylim(max(y - gap, 1) + 0.15, -0.3)
    ax.set_yticks(yticks, ylabels)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)
    ax.set_xlabel("time (s)")
    return [k for k in _LEGEND if k in used]


def _marker(key: str) -> dict[str, Any]:
    h = _LEGEND[key]()
    return {
        "linestyle": "none",
        "marker": h.get_marker(),
        "markersize": h.get_markersize(),
        "color": h.get_color(),
        "markerfacecolor": h.get_markerfacecolor(),
        "markeredgecolor": h.get_markeredgecolor(),
        "markeredgewidth": h.get_markeredgewidth(),
    }


def _legend_handles(keys: Iterable[str]) -> list[Any]:
    return [_LEGEND[k]() for k in keys]


def timeline(
    run: Run,
    ax: Axes | None = None,
    *,
    window: tuple[float, float] | None = None,
    jobs: Iterable[str] | None = None,
    title: str | None = None,
    legend: bool = True,
    label_jobs: bool | None = None,
    max_sweep_lines: int = 120,
) -> Axes:
    """One run as swimlanes: a lane per worker (rows inside it when jobs overlap) with its jobs (running,
    frozen, held by a dead worker), each lock's life up to its expiry with heartbeat renewals as ticks (or the
    timeout's clock for a timeout policy), sweeps as vertical lines (dashed when they reclaim), reclaims marked
    right or wrong, an arrow to the job's next run, and finishes (accepted, duplicate, rejected).

    `window` = (t0, t1) zooms in; `jobs` keeps only some job ids. Returns the axes.
    """
    with mpl.rc_context(RC):
        if ax is None:
            t_window = window if window is not None else (0.0, run.end)
            _, _, lanes = _lanes(run, t_window, jobs)
            rows = sum(max(r.values(), default=0) + 1 for _, _, r in lanes)
            _, ax = plt.subplots(
                figsize=(10, 1.3 + 0.42 * max(rows, 2) + 0.1 * len(lanes)), layout="constrained"
            )
        keys = _draw_timeline(
            ax, run, window=window, jobs=jobs, label_jobs=label_jobs, max_sweep_lines=max_sweep_lines
        )
        if title is None:
            title = f"{run.scenario} · {policy_label(run.policy)}: {verdict(run).text}"
        ax.set_title(title, loc="left")
        if legend:
            ax.legend(handles=_legend_handles(keys), loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


# -- two columns ----------------------------------------------------------------------------------------------
_KIND_LABEL = {"slow-alive": "slow but alive worker", "fast-dead": "fast but dead worker"}


def _rule_header(rule: str, p: Mapping[str, Any]) -> str:
    scan = f"{p['scan']:g}" if p.get("scan") is not None else "?"
    if p.get("timeout") is not None:
        return f"fixed timeout of {p['timeout']:g} s (reaper scans every {scan} s)"
    if p.get("lease") is not None:
        return f"lease {p['lease']:g} s renewed every {p['beat']:g} s (sweep every {scan} s)"
    return f"{rule}: {policy_label(p)}"


def _row_label(kind: str, runs: Iterable[Run]) -> str:
    label = _KIND_LABEL.get(kind, kind)
    for run in runs:
        if not run.attempts:
            continue
        first = run.attempts[0]
        if first.died_at is not None and first.started_at is not None:
            return f"{label}\n(dies {first.died_at - first.started_at:g} s into a {first.work:g} s job)"
        return f"{label}\n({first.work / 60:g}-minute job, heartbeat alive)"
    return label


def two_columns(
    runs_by_cell: Mapping[tuple[str, str], Run],
    *,
    kinds: Sequence[str] = ("slow-alive", "fast-dead"),
    rules: Sequence[str] = ("timeout", "lease"),
    title: str | None = None,
    share_row_time: bool = True,
    slow_after: float = HOSTAGE_AFTER,
) -> Figure:
    """A grid of timelines: rows are worker kinds (`kinds`), columns are rules (`rules`); keys of
    `runs_by_cell` are (kind, rule). Each panel is titled with its one-line verdict (green when right,
    vermillion when wrong or slow). With `share_row_time`, panels in a row share their time axis, so the
    lengths compare directly."""
    with mpl.rc_context(RC):
        fig, axes = plt.subplots(
            len(kinds),
            len(rules),
            figsize=(6.2 * len(rules) + 1.2, 2.6 * len(kinds) + 1.4),
            layout="constrained",
            squeeze=False,
        )
        used: list[str] = []
        for i, kind in enumerate(kinds):
            row_runs = [runs_by_cell[(kind, rule)] for rule in rules if (kind, rule) in runs_by_cell]
            end = max((r.end for r in row_runs), default=1.0)
            for j, rule in enumerate(rules):
                ax = axes[i][j]
                run = runs_by_cell.get((kind, rule))
                if run is None:
                    ax.set_axis_off()
                    continue
                window = (0.0, end) if share_row_time else None
                for k in _draw_timeline(ax, run, window=window, label_jobs=True):
                    if k not in used:
                        used.append(k)
                v = verdict(run, slow_after=slow_after)
                colour = _C["green"] if v.good else _C["vermillion"]
                ax.set_title(("✓ " if v.good else "✗ ") + v.text, loc="left", color=colour, fontweight="bold")
                if i == 0:
                    ax.annotate(
                        _rule_header(rule, run.policy),
                        xy=(0.5, 1.0),
                        xycoords="axes fraction",
                        xytext=(0, 26),
                        textcoords="offset points",
                        ha="center",
                        va="bottom",
                        fontsize=11,
                        fontweight="bold",
                    )
                if j == 0:
                    ax.set_ylabel(
                        _row_label(kind, row_runs),
                        rotation=0,
                        ha="right",
                        va="center",
                        fontsize=10,
                        fontweight="bold",
                        labelpad=10,
                    )
                if i < len(kinds) - 1:
                    ax.set_xlabel("")
        order = [k for k in _LEGEND if k in used]
        fig.legend(handles=_legend_handles(order), loc="outside lower center", ncol=min(5, len(order)))
        if title:
            fig.suptitle(title, fontsize=12, fontweight="bold")
    return fig


# -- frontier -------------------------------------------------------------------------------------------------
def _err(value: float | None, ci: Sequence[float | None] | None) -> tuple[float, float]:
    if value is None or not ci or ci[0] is None or ci[1] is None:
        return (0.0, 0.0)
    return (max(0.0, value - ci[0]), max(0.0, ci[1] - value))


def _is_timeout(row: Mapping[str, Any]) -> bool:
    return row.get("timeout") is not None


def frontier(
    rows: Sequence[Mapping[str, Any]],
    ax: Axes | None = None,
    *,
    title: str | None = None,
    annotate: bool = True,
    annotate_points: bool = False,
    logx: bool = True,
    linthresh: float = 1e-3,
) -> Axes:
    """False-reclaim rate (per job) against mean detection latency, with 95% intervals both ways. Timeout rows
    (a `timeout` value, policy named "timeout") make one curve in timeout order; every other row is a point
    labelled with its settings (and, with `annotate_points`, its row's `label` written beside it). Timeout
    values are written along the curve with `annotate`. The y axis is linear below `linthresh` so a zero rate
    still shows."""
    with mpl.rc_context(RC):
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 5.2), layout="constrained")
        usable = [
            r
            for r in rows
            if r.get("detection_latency_mean") is not None and r.get("false_reclaim_rate") is not None
        ]
        # One timeout curve per scenario; with several scenarios each has its own colour and every label
        # names its scenario (rows of different scenarios would otherwise share labels in the legend).
        scenarios = list(dict.fromkeys(str(r.get("scenario", "")) for r in usable))
        many = len(scenarios) > 1
        lease_colours = [_C["blue"], _C["green"], _C["purple"], _C["vermillion"], _C["sky"], _C["black"]]
        scenario_colours = [_C["orange"], *lease_colours]
        markers = ["s", "D", "^", "v", "P", "h", "o", "<"]  # 6 or 7 colours x 8 markers: distinct styles
        seen_labels: set[str] = set()
        point_index = 0
        for si, scenario in enumerate(scenarios):
            mine = [r for r in usable if str(r.get("scenario", "")) == scenario]
            prefix = f"{scenario}: " if many else ""
            curve_colour = scenario_colours[si % len(scenario_colours)] if many else _C["orange"]
            curve = sorted(
                (r for r in mine if _is_timeout(r) and r.get("policy") == "timeout"),
                key=lambda r: r["timeout"],
            )
            points = [r for r in mine if not (_is_timeout(r) and r.get("policy") == "timeout")]
            if curve:
                xs = [r["detection_latency_mean"] for r in curve]
                ys = [r["false_reclaim_rate"] for r in curve]
                xerr = np.array(
                    [_err(r["detection_latency_mean"], r.get("detection_latency_mean_ci")) for r in curve]
                ).T
                yerr = np.array(
                    [_err(r["false_reclaim_rate"], r.get("false_reclaim_rate_ci")) for r in curve]
                ).T
                ax.errorbar(
                    xs,
                    ys,
                    xerr=xerr,
                    yerr=yerr,
                    color=curve_colour,
                    marker="o",
                    markersize=5,
                    lw=1.8,
                    capsize=2.5,
                    elinewidth=0.9,
                    label=prefix + "fixed timeout (one point per timeout)",
                    zorder=3,
                )
                if annotate:
                    for r, x, y_ in zip(curve, xs, ys, strict=True):
                        ax.annotate(
                            f"T={r['timeout']:g} s",
                            (x, y_),
                            xytext=(6, 5),
                            textcoords="offset points",
                            fontsize=7.5,
                            color=curve_colour,
                        )
            colours = list(lease_colours)
            if not curve and not many:
                colours.insert(1, _C["orange"])  # orange is the timeout curve's colour when there is one
            for i, r in enumerate(points):
                index = point_index if not many else i
                colour = curve_colour if many else colours[index % len(colours)]
                x, y_ = r["detection_latency_mean"], r["false_reclaim_rate"]
                xe = np.array([_err(x, r.get("detection_latency_mean_ci"))]).T
                ye = np.array([_err(y_, r.get("false_reclaim_rate_ci"))]).T
                label = (
                    prefix
                    + policy_label(r)
                    + (f", scan {r['scan']:g} s" if r.get("scan") is not None and not r.get("label") else "")
                )
                ax.errorbar(
                    [x],
                    [y_],
                    xerr=xe,
                    yerr=ye,
                    color=colour,
                    marker=markers[index % len(markers)],
                    markersize=7,
                    linestyle="none",
                    capsize=2.5,
                    elinewidth=0.9,
                    label=label if label not in seen_labels else "_nolegend_",
                    zorder=4,
                )
                seen_labels.add(label)
                if annotate_points and r.get("label"):
                    ax.annotate(
                        str(r["label"]),
                        (x, y_),
                        xytext=(5, 6 + 9 * (index % 2)),
                        textcoords="offset points",
                        fontsize=7.5,
                        color=colour,
                    )
                point_index += 1
        if logx:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(PlainLogFormatter())
            ax.xaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))
        ax.set_yscale("symlog", linthresh=linthresh, linscale=0.6)
        ax.set_ylim(bottom=-linthresh * 0.15)
        ax.yaxis.set_major_formatter(FuncFormatter(_rate_fmt))
        ax.set_xlabel("mean detection latency: crash → job reclaimed (s)")
        ax.set_ylabel("false reclaims per job (live worker's job taken)")
        ax.grid(True, which="major", lw=0.4, alpha=0.5)
        ax.legend(loc="upper right")
        ax.set_title(title or "Detection speed against false reclaims", loc="left")
    return ax


class PlainLogFormatter(LogFormatterSciNotation):
    """Log-axis tick labels as plain numbers (`40`, `0.5`, `1000`) rather than `4x10^1`; matplotlib still
    decides which ticks get a label (minor ticks only when the axis spans less than about a decade)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def _rate_fmt(v: float, _: Any) -> str:
    if v == 0:
        return "0"
    if v >= 1:
        return f"{v:g}"
    return f"{v:.3g}"


# -- latency CDF ----------------------------------------------------------------------------------------------
def latency_cdf(
    samples: Mapping[str, Sequence[float]],
    ax: Axes | None = None,
    *,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    means: Mapping[str, float] | None = None,
    theory: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
    title: str | None = None,
    xlabel: str = "detection latency: crash → job reclaimed (s)",
    legend_loc: str = "best",
) -> Axes:
    """Empirical CDFs of detection latency, one per label, with each label's theoretical range `bounds`
    (shaded, dashed edges), its theoretical mean (`means`, a dotted line) and CDF (`theory`, dashed)."""
    bounds = bounds or {}
    means = means or {}
    theory = theory or {}
    with mpl.rc_context(RC):
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
        hi = max((max(v) for v in samples.values() if len(v)), default=1.0)
        hi = max([hi] + [b[1] for b in bounds.values()])
        for i, (label, values) in enumerate(samples.items()):
            colour = SERIES[i % len(SERIES)]
            x = np.sort(np.asarray(values, dtype=float))
            if x.size:
                y = np.arange(1, x.size + 1) / x.size
                ax.step(
                    np.r_[0.0, x],
                    np.r_[0.0, y],
                    where="post",
                    color=colour,
                    lw=1.8,
                    label=f"{label} (n={x.size})",
                )
            if label in bounds:
                lo, up = bounds[label]
                ax.axvspan(lo, up, color=colour, alpha=0.1, lw=0)
                for edge in (lo, up):
                    ax.axvline(edge, color=colour, lw=0.9, ls=(0, (4, 3)))
                ax.annotate(
                    f"[{round(lo, 1):g}, {round(up, 1):g}] s",
                    xy=((lo + up) / 2, 1.0),
                    xycoords=("data", "axes fraction"),
                    xytext=(0, 4),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7.5,
                    color=colour,
                )
            if label in theory:
                grid = np.linspace(0, hi * 1.05, 600)
                ax.plot(grid, theory[label](grid), color=colour, lw=1.0, ls=(0, (1.5, 1.5)), alpha=0.9)
            if label in means:
                ax.plot([means[label]], [0.5], marker="|", markersize=14, color=colour, mew=2)
        handles, _ = ax.get_legend_handles_labels()
        extra: list[Any] = []
        if bounds:
            extra.append(Patch(facecolor=GREY, alpha=0.25, label="theoretical range"))
        if theory:
            extra.append(Line2D([], [], color=GREY, ls=(0, (1.5, 1.5)), label="theoretical CDF"))
        if means:
            extra.append(
                Line2D(
                    [], [], color=GREY, marker="|", ls="none", markersize=12, mew=2, label="theoretical mean"
                )
            )
        _legend(ax, handles + extra, legend_loc)
        ax.set_xlim(0, hi * 1.05)
        ax.set_ylim(0, 1.0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction of crashes detected")
        ax.grid(True, lw=0.4, alpha=0.5)
        ax.set_title(title or "How long a dead worker's job waits", loc="left", pad=16)
    return ax


def _legend(ax: Axes, handles: list[Any], loc: str) -> None:
    """A legend inside the axes at `loc`, or to the right of them with loc="outside"."""
    if loc == "outside":
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles=handles, loc=loc)  # type: ignore[call-overload]


# -- heatmap --------------------------------------------------------------------------------------------------
_VALUE_LABEL = {
    "detection_latency_mean": ("mean detection latency (s)", "{:.0f}"),
    "detection_latency_p95": ("95th percentile detection latency (s)", "{:.0f}"),
    "redis_commands_per_s": ("Redis requests per second", "{:.2g}"),
    "false_reclaim_rate": ("false reclaims per job", "{:.2g}"),
}


def heatmap(
    rows: Sequence[Mapping[str, Any]],
    *,
    values: Sequence[str] = ("detection_latency_mean", "redis_commands_per_s"),
    x: str = "beat",
    y: str = "lease",
    labels: Mapping[str, str] | None = None,
    title: str | None = None,
    cmap: str = "cividis",
) -> Figure:
    """One panel per metric in `values`, over the grid of `x` and `y` settings found in `rows` (seconds);
    cells without a row (e.g. beat >= lease) are hatched. Each cell is annotated with its value."""
    labels = dict(labels or {})
    xs = sorted({r[x] for r in rows if r.get(x) is not None})
    ys = sorted({r[y] for r in rows if r.get(y) is not None})
    with mpl.rc_context(RC):
        fig, axes = plt.subplots(
            1,
            len(values),
            figsize=(4.6 * len(values) + 0.6, 0.5 * len(ys) + 2.2),
            layout="constrained",
            squeeze=False,
        )
        for ax, value in zip(axes[0], values, strict=True):
            grid = np.full((len(ys), len(xs)), np.nan)
            for r in rows:
                if r.get(x) in xs and r.get(y) in ys and r.get(value) is not None:
                    grid[ys.index(r[y]), xs.index(r[x])] = r[value]
            name, fmt = _VALUE_LABEL.get(value, (value, "{:.3g}"))
            name = labels.get(value, name)
            ax.add_patch(
                Rectangle(
                    (-0.5, -0.5),
                    len(xs),
                    len(ys),
                    facecolor="white",
                    edgecolor=GREY,
                    hatch="xx",
                    lw=0,
                    zorder=0,
                )
            )
            masked = np.ma.masked_invalid(grid)
            mesh = ax.pcolormesh(
                np.arange(len(xs) + 1) - 0.5,
                np.arange(len(ys) + 1) - 0.5,
                masked,
                cmap=cmap,
                shading="flat",
                zorder=1,
            )
            cmap_obj = mesh.get_cmap()
            norm = mesh.norm
            for (iy, ix), v in np.ndenumerate(grid):
                if math.isnan(v):
                    continue
                r_, g_, b_, _ = cmap_obj(norm(v))
                light = 0.299 * r_ + 0.587 * g_ + 0.114 * b_ > 0.5
                ax.text(
                    ix,
                    iy,
                    fmt.format(v),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if light else "white",
                )
            ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
            ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
            ax.set_xlabel(f"{x} period (s)" if x == "beat" else f"{x} (s)")
            ax.set_ylabel(f"{y} (s)")
            ax.set_xlim(-0.5, len(xs) - 0.5)
            ax.set_ylim(-0.5, len(ys) - 0.5)
            ax.spines[:].set_visible(False)
            fig.colorbar(mesh, ax=ax, shrink=0.85, label=name)
            ax.set_title(name, loc="left")
        if title:
            fig.suptitle(title, fontsize=11, fontweight="bold")
    return fig


# -- freeze curve ---------------------------------------------------------------------------------------------
def freeze_curve(
    rows: Sequence[Mapping[str, Any]],
    ax: Axes | None = None,
    *,
    x: str = "freeze",
    group: str = "label",
    theory: Mapping[str, tuple[Sequence[float] | np.ndarray, Sequence[float]]] | None = None,
    marks: Mapping[str, float] | None = None,
    title: str | None = None,
    legend_loc: str = "best",
) -> Axes:
    """False reclaims per job against freeze length: one line per group (`group` key of the rows, else the
    policy label), with 95% intervals, dashed theory curves per group (`theory`: label -> (xs, ys)) and labelled
    vertical marks (`marks`: text -> x, e.g. {"L - B": 20})."""
    theory = theory or {}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r.get(group) or policy_label(r)), []).append(r)
    with mpl.rc_context(RC):
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
        for i, (label, items) in enumerate(groups.items()):
            colour = SERIES[i % len(SERIES)]
            items = sorted(items, key=lambda r: r[x])
            xs = [r[x] for r in items]
            ys = [r["false_reclaim_rate"] for r in items]
            yerr = np.array([_err(r["false_reclaim_rate"], r.get("false_reclaim_rate_ci")) for r in items]).T
            ax.errorbar(
                xs,
                ys,
                yerr=yerr,
                color=colour,
                marker="o",
                markersize=4,
                lw=1.6,
                capsize=2,
                elinewidth=0.8,
                label=label,
            )
            if label in theory:
                tx, ty = theory[label]
                ax.plot(tx, ty, color=colour, lw=1.0, ls=(0, (4, 2)), alpha=0.9)
        for text, where in (marks or {}).items():
            ax.axvline(where, color=GREY, lw=0.8, ls=":")
            ax.annotate(
                text,
                xy=(where, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                fontsize=7.5,
                color="#555555",
                va="top",
            )
        handles, _ = ax.get_legend_handles_labels()
        if theory:
            handles.append(Line2D([], [], color=GREY, ls=(0, (4, 2)), label="theory"))
        _legend(ax, handles, legend_loc)
        ax.set_xlabel("freeze length (s)")
        ax.set_ylabel("false reclaims per job")
        ax.set_ylim(-0.03, 1.05)
        ax.grid(True, lw=0.4, alpha=0.5)
        ax.set_title(title or "False reclaims against the length of a freeze", loc="left")
    return ax
