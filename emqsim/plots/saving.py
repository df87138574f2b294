"""Saving a figure so that regenerating an unchanged one gives the same bytes."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure, SubFigure

from emqsim.fileio import write_atomically

__all__ = ["savefig"]

_CREATOR = "emqsim (https://matplotlib.org)"


def savefig(fig: Figure | SubFigure, path: str | os.PathLike, *, dpi: int = 150) -> Path:
    """Save `fig` as SVG, PNG or PDF (by suffix) with fixed metadata and id salt, so regenerating an unchanged
    figure gives identical bytes; an existing file with the same bytes is left untouched. A subfigure saves the
    whole figure it belongs to."""
    fig = fig if isinstance(fig, Figure) else fig.figure
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    metadata: dict[str, Any]
    if fmt == "svg":
        metadata = {"Date": None, "Creator": _CREATOR}
    elif fmt == "png":
        metadata = {"Software": _CREATOR}
    elif fmt == "pdf":
        metadata = {"CreationDate": None, "ModDate": None, "Creator": _CREATOR, "Producer": _CREATOR}
    else:
        raise ValueError(f"savefig writes .svg, .png or .pdf, not {path.suffix!r}")
    if (
        fig.get_layout_engine() is not None
        and fig.get_layout_engine().__class__.__name__ != "PlaceHolderLayoutEngine"
    ):
        # A layout engine moves things a little on every draw; settle it once and freeze it, so every
        # later save of this figure gives the same bytes.
        fig.draw_without_rendering()
        fig.set_layout_engine("none")
    buf = io.BytesIO()
    with mpl.rc_context({"svg.hashsalt": "emqsim", "svg.fonttype": "path", "pdf.compression": 6}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=metadata, bbox_inches="tight", pad_inches=0.08)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == data:
        return path
    write_atomically(path, data)  # its temporary file never outlives a failed write
    return path
