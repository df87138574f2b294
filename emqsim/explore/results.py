"""What an exploration returns: the counterexamples, boundaries and same-millisecond dependences, and the exact
latency distribution over the whole space."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emqsim.explore.space import Space
from emqsim.records import Run


# -- results --------------------------------------------------------------------------------------------------
@dataclass
class Counterexample:
    """The smallest point (by fault sizes, then offsets, then phases) violating one property."""

    property: str
    point: dict[str, int]
    coords: tuple[int, ...]


@dataclass
class TieDependence:
    """A point where a property's verdict depends on the order of same-millisecond steps."""

    point: dict[str, int]
    tie_break: str
    properties: tuple[str, ...]


@dataclass
class Boundary:
    """Where a property starts failing along the innermost coordinate (it holds at x - 1 and fails at x):
    the smallest and the largest such x (ms) over the rest of the space, with a point at each."""

    property: str
    dim: str
    first: int
    last: int
    where_first: dict[str, int]
    where_last: dict[str, int]


@dataclass
class Exploration:
    """What `explore` found. Latencies are fault -> first reclaim of the job's first attempt, ms."""

    space: Space
    points: int
    runs: int
    counts: dict[str, int]  # per property: points where it holds
    latency_values: np.ndarray  # distinct latencies (ms)
    latency_weights: np.ndarray  # points with each latency
    never_reclaimed: int  # points where the job's first attempt was never reclaimed
    counterexamples: list[Counterexample]
    boundaries: list[Boundary]
    tie_dependent: list[TieDependence]
    # per other tie order: {"min": (latency, point), "max": ...} over the lines where that order mattered
    tie_extremes: dict[str, dict[str, tuple[int, dict[str, int]]]]

    @property
    def reclaimed(self) -> int:
        return int(self.latency_weights.sum())

    @property
    def latency_min(self) -> int | None:
        return int(self.latency_values[0]) if self.reclaimed else None

    @property
    def latency_max(self) -> int | None:
        return int(self.latency_values[-1]) if self.reclaimed else None

    @property
    def latency_mean(self) -> float | None:
        if not self.reclaimed:
            return None
        total = int(np.dot(self.latency_values.astype(object), self.latency_weights.astype(object)))
        return total / self.reclaimed

    def latency_quantile(self, q: float) -> int | None:
        """The smallest latency with at least a share q of the reclaimed points at or below it."""
        if not self.reclaimed:
            return None
        cum = np.cumsum(self.latency_weights)
        return int(self.latency_values[np.searchsorted(cum, q * cum[-1] - 1e-9)])

    def _any_order(self, which: str, expiry_before: bool) -> list[int]:
        own = self.latency_min if which == "min" else self.latency_max
        values = [] if own is None else [own]
        for tie, ends in self.tie_extremes.items():
            if expiry_before or "expiry after" in tie:
                values.append(ends[which][0])
        return values

    def latency_min_any_order(self, expiry_before: bool = False) -> int | None:
        """The least latency under the fixed rule or any other same-millisecond order explore tried. The
        orders the model leaves open are a fault against a timer and requests reaching Redis together;
        `expiry_before` also counts a lock expiring before the steps of its expiry millisecond, which is not
        Redis's rule (a key lives through its expiry millisecond)."""
        values = self._any_order("min", expiry_before)
        return min(values) if values else None

    def latency_max_any_order(self, expiry_before: bool = False) -> int | None:
        values = self._any_order("max", expiry_before)
        return max(values) if values else None

    def violated(self) -> list[str]:
        return [name for name, held in self.counts.items() if held < self.points]


def counterexample_run(result: Exploration, prop: str) -> Run:
    """The run of a property's smallest counterexample (to print with `cli.text_timeline` or draw)."""
    for c in result.counterexamples:
        if c.property == prop:
            return result.space.run(c.coords)
    raise KeyError(f"no counterexample for {prop!r}; violated: {', '.join(result.violated()) or 'none'}")
