"""Duration and latency distributions, in seconds, sampled from a generator the caller owns.

Each distribution is a frozen dataclass (plain data, hashable, printable) with `sample(rng, n)` and the
`survival(x)` function P(X > x) that the closed forms in `emqsim.analytic` need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from emqsim.errors import ConfigError


@runtime_checkable
class Distribution(Protocol):
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray: ...
    def survival(self, x: float) -> float: ...
    def mean(self) -> float: ...


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not (isinstance(value, int | float) and math.isfinite(value) and ok):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound} seconds, got {value!r}")


@dataclass(frozen=True)
class Fixed:
    """Always the same value."""

    value: float

    def __post_init__(self) -> None:
        _positive("fixed value", self.value, allow_zero=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))

    def survival(self, x: float) -> float:
        return 1.0 if self.value > x else 0.0

    def mean(self) -> float:
        return float(self.value)


@dataclass(frozen=True)
class Uniform:
    """Uniform on [low, high]."""

    low: float
    high: float

    def __post_init__(self) -> None:
        _positive("uniform low", self.low, allow_zero=True)
        _positive("uniform high", self.high, allow_zero=True)
        if self.high < self.low:
            raise ConfigError(f"uniform needs low <= high, got {self.low} > {self.high}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)

    def survival(self, x: float) -> float:
        if self.high == self.low:
            return 1.0 if self.low > x else 0.0
        return float(np.clip((self.high - x) / (self.high - self.low), 0.0, 1.0))

    def mean(self) -> float:
        return (self.low + self.high) / 2


@dataclass(frozen=True)
class Exponential:
    """Exponential with the given mean."""

    mean_value: float

    def __post_init__(self) -> None:
        _positive("exponential mean", self.mean_value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean_value, n)

    def survival(self, x: float) -> float:
        return 1.0 if x < 0 else math.exp(-x / self.mean_value)

    def mean(self) -> float:
        return self.mean_value


@dataclass(frozen=True)
class LogNormal:
    """Log-normal given by its median and the sigma of the underlying normal (heavy-tailed job durations)."""

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _positive("lognormal median", self.median)
        _positive("lognormal sigma", self.sigma, allow_zero=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.lognormal(math.log(self.median), self.sigma, n)

    def survival(self, x: float) -> float:
        if self.sigma == 0:
            return 1.0 if self.median > x else 0.0
        from scipy import stats  # imported on first use (slow to import)

        return float(stats.lognorm(s=self.sigma, scale=self.median).sf(x))

    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class Empirical:
    """Resample from observed values (e.g. measured job durations): each draw is one of `values`, equally
    likely, with replacement (the empirical distribution). `read_durations` builds one from a file."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ConfigError("empirical distribution needs at least one value")
        for v in self.values:
            _positive("empirical value", v, allow_zero=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=float), n)

    def survival(self, x: float) -> float:
        return sum(v > x for v in self.values) / len(self.values)

    def mean(self) -> float:
        return float(np.mean(self.values))


MAX_DURATIONS_BYTES = 100_000_000  # about 10 million measured durations


def read_durations(path: str | Path) -> Empirical:
    """Measured durations from a text/CSV file: one number of seconds per line (one column). Blank lines and
    lines starting with `#` are skipped; the first other line may be a header (e.g. `duration_s`). Any other
    problem (no such file, no values, a non-number, a negative, NaN or infinite value, several columns) is a
    ConfigError naming the file and line."""
    from emqsim.fileio import read_regular_text

    path = Path(path)
    text = read_regular_text(path, MAX_DURATIONS_BYTES, "durations file")  # a pipe or /dev/zero: refused
    values: list[float] = []
    seen_line = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        first, seen_line = not seen_line, True
        where = f"{path}:{number}"
        if "," in line or "\t" in line or ";" in line:
            raise ConfigError(f"{where}: {line!r} has several columns; give one column of seconds per line")
        try:
            value = float(line)
        except ValueError:
            if first:
                continue  # a header such as `duration_s`
            raise ConfigError(f"{where}: {line!r} is not a number of seconds") from None
        if math.isnan(value) or math.isinf(value):
            raise ConfigError(f"{where}: {line!r} is not a finite number of seconds")
        if value < 0:
            raise ConfigError(f"{where}: {line!r} is negative; durations are seconds >= 0")
        values.append(value)
    if not values:
        raise ConfigError(f"durations file {str(path)!r} has no values; put one number of seconds per line")
    return Empirical(tuple(values))


def parse_distribution(text: str, base: str | Path | None = None) -> Distribution:
    """Parse `900`, `fixed:900`, `uniform:1:3`, `exp:60`, `lognormal:30:1.2`, `empirical:1,2,5` or
    `file:durations.csv` (an `Empirical` of the file's measured seconds; see `read_durations`), in seconds. A
    relative file path is taken from `base` (a scenario file's folder) or else the current folder."""
    spec = str(text).strip()
    kind, _, rest = spec.partition(":")
    if kind.lower() == "file":
        if not rest.strip():
            raise ConfigError("file: needs a path, e.g. file:durations.csv (one number of seconds per line)")
        path = Path(rest.strip()).expanduser()
        return read_durations(path if path.is_absolute() or base is None else Path(base) / path)
    try:
        if not rest:
            return Fixed(float(kind))
        parts = rest.split(":")
        match kind.lower():
            case "fixed":
                return Fixed(float(rest))
            case "uniform" if len(parts) == 2:
                return Uniform(float(parts[0]), float(parts[1]))
            case "exp" | "exponential":
                return Exponential(float(rest))
            case "lognormal" if len(parts) == 2:
                return LogNormal(float(parts[0]), float(parts[1]))
            case "empirical":
                return Empirical(tuple(float(v) for v in rest.split(",")))
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
    raise ConfigError(
        f"cannot read distribution {text!r}: use seconds like 900, fixed:900, uniform:1:3, exp:60, "
        "lognormal:MEDIAN:SIGMA, empirical:1,2,5 or file:durations.csv"
    )
