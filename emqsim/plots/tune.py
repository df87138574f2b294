"""The figure of a tune result: detection latency against false reclaims of every simulated setting."""

from __future__ import annotations

import math

from emqsim.tune import TuneResult, objective


def figure(r: TuneResult):
    """Detection latency vs false reclaims of every simulated setting, coloured by Redis requests/s; the
    frontier circled, the recommendation starred above everything, the best timeout and the limits labelled;
    nothing clipped at the axes."""
    import matplotlib.pyplot as plt

    from emqsim.plots import RC

    limits = r.limits
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(7.0, 5.4))
        sims = [c for c in r.candidates if c.metrics and objective(c, limits) < math.inf]
        leases = [c for c in sims if c.kind == "lease"]
        xs = [objective(c, limits) for c in leases]
        ys = [c.metrics["false_reclaims"].value or 0.0 for c in leases]
        zs = [c.metrics["requests_per_s"].value or 0.0 for c in leases]
        sc = ax.scatter(xs, ys, c=zs, cmap="viridis", s=18, label="lease settings (simulated)", clip_on=False)
        fig.colorbar(sc, ax=ax, label="Redis requests/s")
        front = r.frontier()
        ax.scatter(
            [objective(c, limits) for c in front],
            [c.metrics["false_reclaims"].value or 0.0 for c in front],
            s=70, facecolors="none", edgecolors="#D55E00", linewidths=1.2, clip_on=False,
            label="Pareto frontier (false reclaims, detection, requests)",
        )  # fmt: skip
        tops = list(ys)
        if r.recommended is not None:
            c = r.recommended
            ax.scatter(
                [objective(c, limits)],
                [c.metrics["false_reclaims"].value or 0.0],
                marker="*", s=320, color="#F0E442", edgecolors="#000000", linewidths=1.0, zorder=6,
                clip_on=False, label=f"recommended: {c.label()}",
            )  # fmt: skip
        if r.timeout.best is not None:
            c = r.timeout.best
            tops.append(c.metrics["false_reclaims"].value or 0.0)
            ax.scatter(
                [objective(c, limits)],
                [c.metrics["false_reclaims"].value or 0.0],
                marker="s", s=40, color="#000000", zorder=5, clip_on=False, label=f"best {c.label()}",
            )  # fmt: skip
        per = limits.false_reclaims_per
        if limits.false_reclaims is not None:
            tops.append(limits.false_reclaims)
            ax.axhline(
                limits.false_reclaims, color="#8C8C8C", ls="--", lw=0.8,
                label=f"limit: {limits.false_reclaims:g} false reclaims per {per}",
            )  # fmt: skip
        if limits.detection is not None:
            ax.axvline(
                limits.detection, color="#8C8C8C", ls=":", lw=0.8,
                label=f"limit: detection {limits.detection_stat} {limits.detection:g} s",
            )  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=max(1e-4, (limits.false_reclaims or 1e-3) / 10))
        ax.set_xlabel(f"detection latency {limits.detection_stat} (s)")
        ax.set_ylabel(f"false reclaims per {per}")
        ax.set_ylim(bottom=0, top=2 * max([*tops, 1e-3]))
        ax.set_title("tune: simulated settings, false reclaims against detection", fontsize=11)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
        fig.tight_layout()
    return fig
