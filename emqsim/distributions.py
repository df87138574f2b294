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
        if x <= 0:
            return 1.0
        from scipy import special  # what scipy.stats.lognorm's sf calls, without importing scipy.stats

        return float(special.ndtr(-(np.log(x / self.median) / self.sigma)))

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


# What `isinstance(value, DISTRIBUTIONS)` accepts: the library's own distributions, found without the protocol's
# structural check (about 15 us per call, and every Scenario and Network makes one), then any object that has
# the protocol's methods.
DISTRIBUTIONS: tuple[type, ...] = (Fixed, Uniform, Exponential, LogNormal, Empirical, Distribution)

MAX_DURATIONS_BYTES = 100_000_000  # about 10 million measured durations


def read_durations(path: str | Path) -> Empirical:
    """Measured durations from a text/CSV file, in one of three layouts: one number of seconds per line (the
    first line may be a header such as `duration_s`); a CSV with a `duration` or `duration_s` column in
    seconds; or a BullMQ export with `processedOn` and `finishedOn` columns (epoch ms; rows without
    `finishedOn`, jobs not finished, are skipped). Blank lines and lines starting with `#` are skipped. Any
    other problem (no such file, no values, a non-number, a negative, NaN or infinite value, several columns
    without those headers) is a ConfigError naming the file and line. `run`, `sweep` (`--duration
    file:PATH`), scenario files and `tune --durations` all read durations with this one reader."""
    from emqsim.fileio import read_regular_text

    path = Path(path)
    text = read_regular_text(path, MAX_DURATIONS_BYTES, "durations file")  # a pipe or /dev/zero: refused
    numbered = [
        (n, raw.strip())
        for n, raw in enumerate(text.splitlines(), start=1)
        if raw.strip() and not raw.strip().startswith("#")
    ]
    if numbered and any(sep in numbered[0][1] for sep in ",\t;"):
        values = _read_columns(path, numbered)
    else:
        values = _read_one_column(path, numbered)
    if not values:
        raise ConfigError(f"durations file {str(path)!r} has no values; put one number of seconds per line")
    return Empirical(tuple(values))


def _seconds(where: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(f"{where}: {cell!r} is not a number") from None
    if math.isnan(value) or math.isinf(value):
        raise ConfigError(f"{where}: {cell!r} is not a finite number of seconds")
    if value < 0:
        raise ConfigError(f"{where}: {cell!r} is negative; durations are seconds >= 0")
    return value


def _read_one_column(path: Path, numbered: list[tuple[int, str]]) -> list[float]:
    values: list[float] = []
    for i, (number, line) in enumerate(numbered):
        where = f"{path}:{number}"
        if "," in line or "\t" in line or ";" in line:
            raise ConfigError(f"{where}: {line!r} has several columns; give one column of seconds per line")
        try:
            float(line)
        except ValueError:
            if i == 0:
                continue  # a header such as `duration_s`
            raise ConfigError(f"{where}: {line!r} is not a number of seconds") from None
        values.append(_seconds(where, line))
    return values


def _read_columns(path: Path, numbered: list[tuple[int, str]]) -> list[float]:
    """A CSV with a header: BullMQ's `processedOn`/`finishedOn` (epoch ms) or a `duration`/`duration_s`
    column (seconds)."""
    import csv

    delimiter = next(sep for sep in ",\t;" if sep in numbered[0][1])
    rows = list(csv.reader([line for _, line in numbered], delimiter=delimiter))
    header = [h.strip() for h in rows[0]]
    values: list[float] = []
    if {"processedOn", "finishedOn"} <= set(header):
        a, b = header.index("processedOn"), header.index("finishedOn")
        for (n, _), row in zip(numbered[1:], rows[1:], strict=True):
            if len(row) <= max(a, b) or not row[a].strip() or not row[b].strip():
                continue  # a job that has not finished
            start, end = _seconds(f"{path}:{n}", row[a]), _seconds(f"{path}:{n}", row[b])
            if end < start:
                raise ConfigError(f"{path}:{n}: finishedOn is before processedOn")
            values.append((end - start) / 1000)
        if not values:
            raise ConfigError(f"{path}: no finished jobs in it (every row lacks processedOn or finishedOn)")
        return values
    name = "duration" if "duration" in header else "duration_s" if "duration_s" in header else None
    if name is None:
        raise ConfigError(
            f"{path}:{numbered[0][0]}: {numbered[0][1]!r} has several columns but no `duration` (seconds) or "
            "`processedOn`,`finishedOn` (BullMQ, ms) header; give one of those or one column of seconds"
        )
    col = header.index(name)
    values = []
    for (n, _), row in zip(numbered[1:], rows[1:], strict=True):
        if len(row) <= col or not row[col].strip():
            raise ConfigError(f"{path}:{n}: no value in the `{name}` column; give every row its seconds")
        values.append(_seconds(f"{path}:{n}", row[col]))
    return values


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
