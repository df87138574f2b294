"""Figures for runs and result tables: Matplotlib only, the Okabe-Ito colour-blind-safe palette, times in
seconds, and `savefig` that writes byte-identical SVG/PNG when nothing changed.

    timeline(run)            one run: a swimlane per worker with its jobs, locks, heartbeats, sweeps, reclaims
    two_columns(runs)        slow-but-alive and fast-but-dead workers under a timeout and a lease, 2 x 2
    frontier(rows)           false-reclaim rate against detection latency (rows from `emqsim.stats.aggregate`)
    latency_cdf(samples)     detection-latency CDFs with their theoretical bounds
    heatmap(rows)            detection latency and Redis load over a (lease, beat) grid
    freeze_curve(rows)       false reclaims against the length of a stop-the-world freeze
    race_timeline(run, gap)  a check-then-act worker's stale write, with and without the store's token check
"""

from emqsim.plots.columns import two_columns
from emqsim.plots.common import policy_label
from emqsim.plots.fencing import race_timeline
from emqsim.plots.results import PlainLogFormatter, freeze_curve, frontier, heatmap, latency_cdf
from emqsim.plots.saving import savefig
from emqsim.plots.style import GREY, OKABE_ITO, RC, SERIES
from emqsim.plots.swimlanes import timeline
from emqsim.verdict import Verdict, clock, verdict

__all__ = [
    "GREY",
    "OKABE_ITO",
    "SERIES",
    "RC",
    "PlainLogFormatter",
    "Verdict",
    "clock",
    "frontier",
    "freeze_curve",
    "heatmap",
    "latency_cdf",
    "policy_label",
    "race_timeline",
    "savefig",
    "timeline",
    "two_columns",
    "verdict",
]
