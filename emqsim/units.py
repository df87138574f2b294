"""Seconds at the edges, integer milliseconds inside: the one place where the two meet.

Redis keeps expiry times in whole milliseconds, so the simulated clock ticks in integer milliseconds too.
Users speak seconds; every conversion goes through these two functions.

The clock's range: any one time or duration is at most 2**53 ms (`MAX_SECONDS`, about 285,000 years). Below
that a float of seconds converts to exactly the intended millisecond, and sums of a few such times stay far
inside int64, so nothing can wrap around. Larger values are refused with a `ConfigError`, never wrapped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from emqsim.errors import ConfigError

MAX_MS = 2**53
HOUR_S = 3600.0  # rates of random faults are per worker-hour
MAX_SECONDS = MAX_MS / 1000


def _beyond(seconds: Any) -> ConfigError:
    return ConfigError(
        f"a time of {seconds} s is beyond the simulator's clock (integer milliseconds, at most {MAX_SECONDS:g} s); "
        "use shorter durations, times or horizon"
    )


def to_ms(seconds: float) -> int:
    """Seconds (float) to whole milliseconds, rounding half away from zero."""
    magnitude = abs(seconds)
    if not magnitude <= MAX_SECONDS:  # also refuses NaN
        raise _beyond(seconds)
    return int(math.floor(magnitude * 1000 + 0.5)) * (1 if seconds >= 0 else -1)


def to_ms_array(seconds: np.ndarray) -> np.ndarray:
    """`to_ms` of every element (the same float operations, so the same integers), as int64."""
    seconds = np.asarray(seconds, dtype=np.float64)
    magnitude = np.abs(seconds)
    if magnitude.size and not magnitude.max() <= MAX_SECONDS:
        raise _beyond(float(magnitude.max()))
    ms = np.floor(magnitude * 1000 + 0.5).astype(np.int64)
    return np.where(seconds >= 0, ms, -ms)


def to_s(ms: int | None) -> float | None:
    """Whole milliseconds to seconds; None stays None."""
    return None if ms is None else ms / 1000


def check_seconds(value: float, name: str) -> float:
    """`value` if it is a finite number of seconds within the clock's range; else a ConfigError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
    if abs(value) > MAX_SECONDS:
        raise ConfigError(
            f"{name} = {value:g} s is beyond the simulator's clock (integer milliseconds): at most {MAX_SECONDS:g} s"
        )
    return value


def check_distribution(dist: Any, name: str) -> Any:
    """`dist` if its parameters and its mean are within the clock's range; else a ConfigError naming it."""
    if dataclasses.is_dataclass(dist):
        for f in dataclasses.fields(dist):
            value = getattr(dist, f.name)
            values = value if isinstance(value, tuple | list) else (value,)
            for v in values:
                if isinstance(v, int | float) and not isinstance(v, bool):
                    check_seconds(v, f"{name}'s {f.name}")
    mean = getattr(dist, "mean", None)
    if callable(mean):
        try:
            m = float(mean())
        except (OverflowError, ValueError):
            m = math.inf
        if not abs(m) <= MAX_SECONDS:
            raise ConfigError(
                f"{name} has a mean beyond the simulator's clock (integer milliseconds, at most {MAX_SECONDS:g} s); "
                "use smaller parameters"
            )
    return dist
