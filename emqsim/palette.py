"""The colours every timeline shares, PNG/SVG (`emqsim.plots`) and HTML (`emqsim.timeline_html`) alike: the
Okabe-Ito colour-blind-safe palette and what a finish's outcome is drawn in, one table for both so they never
disagree (standard library only: the HTML page needs no Matplotlib)."""

from __future__ import annotations

__all__ = ["FINISH_COLOURS", "OKABE_ITO"]

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

# A finish that was applied a second time (a duplicate completion: the harm) and one the token check
# rejected (a stale worker's late finish, refused). Vermillion stays the colour of a reclaimed attempt.
FINISH_COLOURS = {
    "duplicate_completion": OKABE_ITO["purple"],
    "finish_rejected": OKABE_ITO["orange"],
}
