"""What each mark on a timeline means: one legend entry per kind of mark, and the marker style drawn with it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from emqsim.palette import FINISH_COLOURS
from emqsim.plots.style import GREY, OKABE_ITO

__all__ = ["LEGEND", "legend_handles", "marker_style"]

_C = OKABE_ITO
LEGEND: dict[str, Callable[[], Any]] = {
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
        color=FINISH_COLOURS["duplicate_completion"],
        marker="D",
        markeredgecolor="black",
        linestyle="none",
        markersize=6,
        label="finish accepted again (duplicate)",
    ),
    "finish_rejected": lambda: Line2D(
        [],
        [],
        color=FINISH_COLOURS["finish_rejected"],
        marker="s",
        markeredgecolor="black",
        linestyle="none",
        markersize=6,
        label="late finish rejected (token check)",
    ),
}


def marker_style(key: str) -> dict[str, Any]:
    h = LEGEND[key]()
    return {
        "linestyle": "none",
        "marker": h.get_marker(),
        "markersize": h.get_markersize(),
        "color": h.get_color(),
        "markerfacecolor": h.get_markerfacecolor(),
        "markeredgecolor": h.get_markeredgecolor(),
        "markeredgewidth": h.get_markeredgewidth(),
    }


def legend_handles(keys: Iterable[str]) -> list[Any]:
    return [LEGEND[k]() for k in keys]
