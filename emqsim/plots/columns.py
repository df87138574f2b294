"""The two columns: slow-but-alive and fast-but-dead workers under a timeout and a lease, each panel titled with
its verdict (`emqsim.verdict`), so the figure and `emqsim compare` say the same thing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from emqsim.plots.common import policy_label
from emqsim.plots.marks import LEGEND, legend_handles
from emqsim.plots.style import OKABE_ITO, RC
from emqsim.plots.swimlanes import draw_timeline
from emqsim.records import Run
from emqsim.verdict import HOSTAGE_AFTER, verdict

__all__ = ["two_columns"]

_C = OKABE_ITO
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
                for k in draw_timeline(ax, run, window=window, label_jobs=True):
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
        order = [k for k in LEGEND if k in used]
        fig.legend(handles=legend_handles(order), loc="outside lower center", ncol=min(5, len(order)))
        if title:
            fig.suptitle(title, fontsize=12, fontweight="bold")
    return fig
