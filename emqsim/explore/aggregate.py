"""Folds a searched structure into the whole space's counts, latency histogram, boundaries and smallest
counterexamples, and estimates the runs a space needs before any runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from emqsim.explore.space import Space


def _lift(s: Any, depth: int, t: np.ndarray, drift: Any) -> Any:
    """A batch of structures: s + t * drift for every t (arrays where s has numbers)."""
    if depth == 0:
        return tuple(
            (
                a + t * (drift[j][0] if drift else 0),
                g,
                None if m is None else m + t * (drift[j][1] if drift else 0),
                k,
            )
            for j, (a, g, m, k) in enumerate(s)
        )
    return tuple(
        (
            a + t * (drift[j][0] if drift else 0),
            b + t * (drift[j][1] if drift else 0),
            _lift(sub, depth - 1, t, drift[j][2] if drift else None),
            d,
        )
        for j, (a, b, sub, d) in enumerate(s)
    )


def _take(s: Any, depth: int, idx: np.ndarray, extra: np.ndarray, drift: Any) -> Any:
    """Rows `idx` of a batch, each moved by `extra` along its own drift."""
    if depth == 0:
        return tuple(
            (
                a[idx] + extra * (drift[j][0] if drift else 0),
                g,
                None if m is None else m[idx] + extra * (drift[j][1] if drift else 0),
                k,
            )
            for j, (a, g, m, k) in enumerate(s)
        )
    return tuple(
        (
            a[idx] + extra * (drift[j][0] if drift else 0),
            b[idx] + extra * (drift[j][1] if drift else 0),
            _take(sub, depth - 1, idx, extra, drift[j][2] if drift else None),
            d,
        )
        for j, (a, b, sub, d) in enumerate(s)
    )


class _Aggregate:
    """Sums a structure over every point of the space, in vectorised batches of lines: points per property,
    the latency histogram, the smallest violating point per property, and the extreme flip positions."""

    BLOCK = 1 << 20  # lines per batch

    def __init__(self, sp: Space) -> None:
        self.space: Space | None = sp  # dropped before the aggregate is sent back from a process
        self.inner_hi = sp.dims[-1].hi
        self.names = [p.name for p in sp.properties]
        self.held = [0] * len(self.names)
        self.never = 0
        self.total = 0
        self.low = 0
        self.hist = np.zeros(0, dtype=np.int64)  # latency counts from `low` on
        self.diff = np.zeros(1, dtype=np.int64)  # unit runs of latencies, as differences
        self.order = _key_order(sp)
        self.best: dict[int, tuple[int, ...]] = {}
        self.flips: dict[int, list[tuple[int, tuple[int, ...]]]] = {}

    def structure(self, s: Any, depth: int) -> None:
        """The whole (top-level) structure."""
        if depth == 0:
            self.batch([], _lift(s, 0, np.zeros(1, dtype=np.int64), None), 0)
            return
        for a, b, sub, d in s:
            for t0 in range(0, b - a + 1, max(1, self.BLOCK // 4096)):
                t = np.arange(t0, min(b - a + 1, t0 + max(1, self.BLOCK // 4096)), dtype=np.int64)
                self.batch([a + t], _lift(sub, depth - 1, t, d), depth - 1)

    def batch(self, cols: list[np.ndarray], s: Any, depth: int) -> None:
        if depth == 0:
            self.lines(cols, s)
            return
        for a, b, sub, d in s:
            n = b - a + 1
            rows = len(n)
            for r0 in range(0, rows, 4096):
                part = slice(r0, min(rows, r0 + 4096))
                counts = n[part]
                idx = np.repeat(np.arange(r0, part.stop), counts)
                offsets = np.cumsum(counts) - counts
                extra = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(offsets, counts)
                sub_rows = _take(sub, depth - 1, idx, extra, d)
                self.batch([c[idx] for c in cols] + [a[idx] + extra], sub_rows, depth - 1)

    def _point(self, cols: list[np.ndarray], row: int, inner: int) -> tuple[int, ...]:
        return tuple(int(c[row]) for c in cols) + (inner,)

    def _smallest(self, cols: list[np.ndarray], inner: np.ndarray) -> int:
        columns = [*cols, inner]
        return int(np.lexsort([columns[i] for i in reversed(self.order)])[0])

    def lines(self, cols: list[np.ndarray], line: Any) -> None:
        hi = self.inner_hi
        n = len(line)
        key = _key_from_order(self.order)
        for j, (start, sig, m, slope) in enumerate(line):
            end = line[j + 1][0] - 1 if j + 1 < n else np.full_like(start, hi)
            count = end - start + 1
            total = int(count.sum())
            self.total += total
            verdicts = sig[0]
            for i, v in enumerate(verdicts):
                if v:
                    self.held[i] += total
                else:
                    row = self._smallest(cols, start)
                    point = self._point(cols, row, int(start[row]))
                    if i not in self.best or key(point) < key(self.best[i]):
                        self.best[i] = point
            if j > 0:  # a property that held just before this piece's start and fails from it
                for i, (v0, v1) in enumerate(zip(line[j - 1][1][0], verdicts, strict=True)):
                    if v0 and not v1:
                        rows = (int(np.argmin(start)), int(np.argmax(start)))
                        self.flips.setdefault(i, []).extend(
                            (int(start[r]), self._point(cols, r, int(start[r]))[:-1]) for r in rows
                        )
            if m is None:
                self.never += total
            elif slope == 0:
                self._add(m, count)
            elif abs(slope) == 1:
                last = m + slope * (count - 1)
                self._add_runs(np.minimum(m, last), np.maximum(m, last))
            else:
                for mi, ci in zip(m.tolist(), count.tolist(), strict=True):
                    values = mi + slope * np.arange(ci, dtype=np.int64)
                    self._add(values, np.ones_like(values))

    def _fit(self, lo: int, hi: int) -> None:
        if len(self.hist) == 0:
            self.low = lo
            self.hist = np.zeros(hi - lo + 1, dtype=np.int64)
            self.diff = np.zeros(hi - lo + 2, dtype=np.int64)
            return
        new_low = min(self.low, lo)
        new_high = max(self.low + len(self.hist) - 1, hi)
        if new_low == self.low and new_high == self.low + len(self.hist) - 1:
            return
        hist = np.zeros(new_high - new_low + 1, dtype=np.int64)
        diff = np.zeros(new_high - new_low + 2, dtype=np.int64)
        shift = self.low - new_low
        hist[shift : shift + len(self.hist)] = self.hist
        diff[shift : shift + len(self.diff)] = self.diff
        self.low, self.hist, self.diff = new_low, hist, diff

    def _add(self, values: np.ndarray, weights: np.ndarray) -> None:
        if len(values) == 0:
            return
        self._fit(int(values.min()), int(values.max()))
        self.hist += np.bincount(values - self.low, weights=weights, minlength=len(self.hist)).astype(
            np.int64
        )

    def _add_runs(self, lo: np.ndarray, hi: np.ndarray) -> None:
        if len(lo) == 0:
            return
        self._fit(int(lo.min()), int(hi.max()))
        size = len(self.diff)
        self.diff += np.bincount(lo - self.low, minlength=size)
        self.diff -= np.bincount(hi + 1 - self.low, minlength=size)

    def merge(self, other: _Aggregate) -> None:
        """Add another part of the space (the same space, a different range of its first coordinate)."""
        key = _key_from_order(self.order)
        self.held = [x + y for x, y in zip(self.held, other.held, strict=True)]
        self.never += other.never
        self.total += other.total
        if len(other.hist):
            self._fit(other.low, other.low + len(other.hist) - 1)
            shift = other.low - self.low
            self.hist[shift : shift + len(other.hist)] += other.hist
            self.diff[shift : shift + len(other.diff)] += other.diff
        for i, point in other.best.items():
            if i not in self.best or key(point) < key(self.best[i]):
                self.best[i] = point
        for i, flips in other.flips.items():
            self.flips.setdefault(i, []).extend(flips)

    def histogram(self) -> tuple[np.ndarray, np.ndarray]:
        hist = self.hist + np.cumsum(self.diff)[: len(self.hist)]
        values = np.nonzero(hist)[0]
        return values + self.low, hist[values]


def _key_order(sp: Space) -> list[int]:
    """Coordinates in the order that ranks counterexamples: fault sizes first (smaller is smaller), then
    offsets, then the rest in dimension order."""

    def rank(i: int) -> tuple[int, int]:
        role = sp.dims[i].role
        return (0 if role.split(".")[-1] in _SIZE_NAMES else 1 if role.endswith(".offset") else 2, i)

    return sorted(range(len(sp.dims)), key=rank)


def _key_from_order(order: list[int]) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    return lambda point: tuple(point[i] for i in order)


_SIZE_NAMES = {"length"}


def estimate_runs(sp: Space, ties: bool = True) -> int:
    """An upper estimate of the runs `explore` needs, from the space's sizes alone (no run): a coordinate
    spanning m periods of the world's timers (the sweep period, the renewal tick) has about 2 + 2m pieces
    or pattern changes, each found by bisection (log2 of its size); other tie orders at most double it."""
    period = min(
        x
        for x in (sp.policy.sweep_interval_ms + sp.rtt_ms, sp.policy.renewal and sp.policy.renewal.tick_ms)
        if x
    )
    cost = 1
    for d in sp.dims:
        spans = math.ceil(d.size / period)
        cost *= min(d.size, (2 + 2 * spans) * max(1, math.ceil(math.log2(d.size))))
    return int(cost * (2 if ties else 1))
