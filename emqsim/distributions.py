"""Duration and latency distributions, in seconds, sampled from a generator the caller owns.

Each distribution is a frozen dataclass (plain data, hashable, printable) with `sample(rng, n)` and the
`survival(x)` function P(X > x) that the closed forms in `emqsim.analytic` need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from emqsim.errors import ConfigError


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
    """Resample from observed values (e.g. measured job durations)."""

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


def parse_distribution(text: str) -> Distribution:
    """Parse `900`, `fixed:900`, `uniform:1:3`, `exp:60`, `lognormal:30:1.2` or `empirical:1,2,5` (seconds)."""
    spec = str(text).strip()
    kind, _, rest = spec.partition(":")
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
        "lognormal:MEDIAN:SIGMA or empirical:1,2,5"
    )
