"""One run as swimlanes (`timeline`): a lane per worker with its jobs, locks, heartbeats, sweeps and reclaims."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.patches import Rectangle

from emqsim.plots.common import policy_label
from emqsim.plots.lanes import lay_out
from emqsim.plots.marks import LEGEND, legend_handles, marker_style
from emqsim.plots.style import GREY, OKABE_ITO, RC
from emqsim.records import DUPLICATE_COMPLETION, Attempt, Run
from emqsim.verdict import reclaim_time, verdict

__all__ = ["draw_timeline", "timeline"]

_C = OKABE_ITO


def _rects(ax: Axes, rects: list[tuple[float, float, float, float]], **style: Any) -> None:
    if rects:
        ax.add_collection(PatchCollection([Rectangle((x, y), w, h) for x, y, w, h in rects], **style))


def draw_timeline(
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
    workers, shapes, lanes = lay_out(run, (t0, t1), jobs)
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
        ax.plot(xs, ys, **marker_style("resend"), zorder=7)

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
        ax.plot(xs, ys, **marker_style("renew_failed"), zorder=5)
    if crash_pts:
        used.add("crash")
        xs, ys = zip(*crash_pts, strict=True)
        ax.plot(xs, ys, **marker_style("crash"), zorder=5, clip_on=False)

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
            ax.plot(xs, ys, **marker_style(key), zorder=7)

    ax.set_xlim(t0, t1 + 0.01 * span)
    ax.set_ylim(max(y - gap, 1) + 0.15, -0.3)
    ax.set_yticks(yticks, ylabels)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)
    ax.set_xlabel("time (s)")
    return [k for k in LEGEND if k in used]


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
            _, _, lanes = lay_out(run, t_window, jobs)
            rows = sum(max(r.values(), default=0) + 1 for _, _, r in lanes)
            _, ax = plt.subplots(
                figsize=(10, 1.3 + 0.42 * max(rows, 2) + 0.1 * len(lanes)), layout="constrained"
            )
        keys = draw_timeline(
            ax, run, window=window, jobs=jobs, label_jobs=label_jobs, max_sweep_lines=max_sweep_lines
        )
        if title is None:
            title = f"{run.scenario} · {policy_label(run.policy)}: {verdict(run).text}"
        ax.set_title(title, loc="left")
        if legend:
            ax.legend(handles=legend_handles(keys), loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax
