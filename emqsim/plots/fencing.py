"""The check-then-act race on a timeline: each take of a job as a row, with its lock, its worker's pause, the
worker's own lock check, and its write to the downstream store, accepted or refused without and with the
store's token check (emqsim/fencing.py)."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from emqsim.fencing import accept_all, fenced, replay, worker_pauses
from emqsim.plots.common import policy_label
from emqsim.plots.style import GREY, OKABE_ITO, RC
from emqsim.records import Run

__all__ = ["race_timeline"]


def _lock_spans(run: Run, job: str, token: str) -> list[tuple[float, float]]:
    """(from, to) while the lock of `token` was set, from the run's lock events."""
    spans: list[tuple[float, float]] = []
    start = None
    for e in sorted(run.lock_events, key=lambda e: e.time):
        if e.job != job or e.token != token:
            continue
        if e.kind in ("set", "renewed") and start is None:
            start = e.time
        elif e.kind in ("expired", "deleted", "released") and start is not None:
            spans.append((start, e.time))
            start = None
    if start is not None:
        spans.append((start, run.end))
    return spans


def race_timeline(
    run: Run, check_gap: float, ax: Axes | None = None, *, job: str = "0", title: str | None = None
) -> Axes:
    """Every take of `job` in `run` as a row: the lock it held (bar), its worker's pauses (hatched), the
    worker's lock check `check_gap` seconds of its running time before its write (circle: the lock was its own;
    cross: it was not, so the worker skipped the write), and the write, labelled with what a store without the
    token check and a store with it did. Returns the axes."""
    bare = replay(run, accept_all, check_gap=check_gap)
    checked = replay(run, fenced, check_gap=check_gap)
    takes = [a for a in run.attempts if a.job == job]
    with mpl.rc_context(RC):
        if ax is None:
            _, ax = plt.subplots(figsize=(10, 1.4 + 0.7 * max(len(takes), 2)), layout="constrained")
        blue, green, red = OKABE_ITO["blue"], OKABE_ITO["green"], OKABE_ITO["vermillion"]
        for row, a in enumerate(takes):
            y = len(takes) - 1 - row
            end = a.finished_at if a.finished_at is not None else run.end
            ax.plot([a.taken_at, end], [y, y], color=GREY, lw=1)
            for s, e in _lock_spans(run, a.job, a.token):
                ax.barh(y, e - s, left=s, height=0.3, color=blue, alpha=0.35, lw=0)
            for s, e in worker_pauses(run, a.worker):
                s, e = max(s, a.taken_at), min(e, end)
                if s < e:
                    ax.barh(y, e - s, left=s, height=0.5, fill=False, hatch="///", edgecolor=GREY, lw=0.8)
            ax.plot([a.taken_at], [y], marker=">", color="black", ms=7, ls="")
            ax.annotate(
                f"take {a.attempt} (token {a.attempt})",
                (a.taken_at, y),
                xytext=(4, -14),
                textcoords="offset points",
                fontsize=8,
            )
            check = next((w for w in bare.checks if w.job == a.job and w.token == a.attempt), None)
            if check is None or check.checked_at is None:
                continue
            ax.plot(
                [check.checked_at],
                [y],
                marker="o" if check.lock_ok else "X",
                color=green if check.lock_ok else red,
                ms=7,
                ls="",
            )
            ax.annotate(
                "lock check: mine" if check.lock_ok else "lock check: gone",
                (check.checked_at, y),
                xytext=(-4, -14),
                textcoords="offset points",
                ha="right",
                fontsize=8,
            )
            if not check.lock_ok:
                continue
            without = next(s for s in bare.log if s.job == a.job and s.token == a.attempt)
            with_ = next(s for s in checked.log if s.job == a.job and s.token == a.attempt)
            ax.plot([check.at], [y], marker="D", color=red if without.stale_overwrite else blue, ms=7, ls="")
            words = "corrupts" if without.stale_overwrite else "accepted"
            ax.annotate(
                f"write: {words} without the check, {'accepted' if with_.accepted else 'rejected'} with it",
                (check.at, y),
                xytext=(-4, 9),
                textcoords="offset points",
                ha="right",
                fontsize=8,
            )
        lapses = sorted(
            e.time for e in run.lock_events if e.job == job and e.kind == "expired" and e.token is not None
        )
        for t in lapses:
            ax.axvline(t, color=red, ls=":", lw=1)
            ax.annotate(
                "lock lapses", (t, len(takes) - 0.45), xytext=(3, 0), textcoords="offset points", fontsize=8
            )
        ax.set_xlim(left=0)
        ax.set_yticks(range(len(takes)), [f"worker {a.worker}" for a in reversed(takes)])
        ax.set_ylim(-0.7, len(takes) - 0.3)
        ax.set_xlabel("time (s)")
        handles = [
            Patch(color=blue, alpha=0.35, label="lock held"),
            Patch(fill=False, hatch="///", edgecolor=GREY, label="worker paused"),
            Line2D([], [], color=red, ls=":", label="lock lapses"),
            Line2D([], [], marker="o", color=green, ls="", label="lock check"),
            Line2D([], [], marker="D", color=blue, ls="", label="write"),
        ]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        if title is None:
            title = (
                f"check-then-act under {policy_label(run.policy)}: "
                f"{bare.corrupted} corrupted without the store's check, {checked.corrupted} with it"
            )
        ax.set_title(title, loc="left")
    return ax
