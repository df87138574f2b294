"""The look every emqsim figure shares: the Okabe-Ito colour-blind-safe palette and Matplotlib settings (fixed
fonts, SVG text as paths, a fixed SVG id salt) so figures render the same on every machine."""

from __future__ import annotations

from typing import Any

from matplotlib.rcsetup import cycler

__all__ = ["GREY", "OKABE_ITO", "RC", "SERIES"]

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
