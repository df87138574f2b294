"""Seconds at the edges, integer milliseconds inside: the one place where the two meet.

Redis keeps expiry times in whole milliseconds, so the simulated clock ticks in integer milliseconds too.
Users speak seconds; every conversion goes through these two functions.
"""

from __future__ import annotations

import math

import numpy as np


def to_ms(seconds: float) -> int:
    """Seconds (float) to whole milliseconds, rounding half away from zero."""
    return int(math.floor(abs(seconds) * 1000 + 0.5)) * (1 if seconds >= 0 else -1)


def to_ms_array(seconds: np.ndarray) -> np.ndarray:
    """`to_ms` of every element (the same float operations, so the same integers), as int64."""
    seconds = np.asarray(seconds, dtype=np.float64)
    ms = np.floor(np.abs(seconds) * 1000 + 0.5).astype(np.int64)
    return np.where(seconds >= 0, ms, -ms)


def to_s(ms: int | None) -> float | None:
    """Whole milliseconds to seconds; None stays None."""
    return None if ms is None else ms / 1000
