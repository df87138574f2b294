"""The look every emqsim figure shares: the Okabe-Ito colour-blind-safe palette and Matplotlib settings (fixed
fonts, SVG text as paths, a fixed SVG id salt) so figures render the same on every machine."""

from __future__ import annotations

from typing import Any

from matplotlib.rcsetup import cycler

from emqsim.palette import OKABE_ITO

__all__ = ["GREY", "OKABE_ITO", "RC", "SERIES"]

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
