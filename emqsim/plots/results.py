"""Charts of result rows (`emqsim.stats.aggregate`): the trade-off frontier, detection-latency CDFs, the
(lease, beat) heatmap and the freeze curve. Rows are read under their current names (`emqsim.fields`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation

from emqsim.plots.common import ci_errors, metric, place_legend, policy_label
from emqsim.plots.style import GREY, OKABE_ITO, RC, SERIES
from emqsim.stats import DEPRECATED_KEYS

__all__ = ["PlainLogFormatter", "freeze_curve", "frontier", "heatmap", "latency_cdf"]

_C = OKABE_ITO


# -- frontier -------------------------------------------------------------------------------------------------
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
            if metric(r, "detection_latency_mean_s") is not None
            and metric(r, "false_reclaims_per_job") is not None
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
                xs = [metric(r, "detection_latency_mean_s") for r in curve]
                ys = [metric(r, "false_reclaims_per_job") for r in curve]
                xerr = np.array(
                    [
                        ci_errors(
                            metric(r, "detection_latency_mean_s"), metric(r, "detection_latency_mean_s_ci")
                        )
                        for r in curve
                    ]
                ).T
                yerr = np.array(
                    [
                        ci_errors(metric(r, "false_reclaims_per_job"), metric(r, "false_reclaims_per_job_ci"))
                        for r in curve
                    ]
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
                x, y_ = metric(r, "detection_latency_mean_s"), metric(r, "false_reclaims_per_job")
                xe = np.array([ci_errors(x, metric(r, "detection_latency_mean_s_ci"))]).T
                ye = np.array([ci_errors(y_, metric(r, "false_reclaims_per_job_ci"))]).T
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
        place_legend(ax, handles + extra, legend_loc)
        ax.set_xlim(0, hi * 1.05)
        ax.set_ylim(0, 1.0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction of crashes detected")
        ax.grid(True, lw=0.4, alpha=0.5)
        ax.set_title(title or "How long a dead worker's job waits", loc="left", pad=16)
    return ax


# -- heatmap --------------------------------------------------------------------------------------------------
_VALUE_LABEL = {
    "detection_latency_mean_s": ("mean detection latency (s)", "{:.0f}"),
    "detection_latency_pooled_p95_s": ("95th percentile detection latency (s)", "{:.0f}"),
    "redis_requests_per_s": ("Redis requests per second", "{:.2g}"),
    "false_reclaims_per_job": ("false reclaims per job", "{:.2g}"),
}


def heatmap(
    rows: Sequence[Mapping[str, Any]],
    *,
    values: Sequence[str] = ("detection_latency_mean_s", "redis_requests_per_s"),
    x: str = "beat",
    y: str = "lease",
    labels: Mapping[str, str] | None = None,
    title: str | None = None,
    cmap: str = "cividis",
) -> Figure:
    """One panel per metric in `values`, over the grid of `x` and `y` settings found in `rows` (seconds);
    cells without a row (e.g. beat >= lease) are hatched. Each cell is annotated with its value."""
    # A metric may be named by its deprecated 0.2 name (`emqsim.stats.DEPRECATED_KEYS`) during 0.3.x.
    values = [DEPRECATED_KEYS.get(v, v) for v in values]
    labels = {DEPRECATED_KEYS.get(k, k): text for k, text in (labels or {}).items()}
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
                if r.get(x) in xs and r.get(y) in ys and metric(r, value) is not None:
                    grid[ys.index(r[y]), xs.index(r[x])] = metric(r, value)
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
            ys = [metric(r, "false_reclaims_per_job") for r in items]
            yerr = np.array(
                [
                    ci_errors(metric(r, "false_reclaims_per_job"), metric(r, "false_reclaims_per_job_ci"))
                    for r in items
                ]
            ).T
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
        place_legend(ax, handles, legend_loc)
        ax.set_xlabel("freeze length (s)")
        ax.set_ylabel("false reclaims per job")
        ax.set_ylim(-0.03, 1.05)
        ax.grid(True, lw=0.4, alpha=0.5)
        ax.set_title(title or "False reclaims against the length of a freeze", loc="left")
    return ax
