"""The search over one space: runs each point at most once, bisects each line for the points where the
outcome changes and, across the outer coordinates, for the points where a line's pattern changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emqsim.explore.space import TIE_VARIANTS, Space
from emqsim.records import Run
from emqsim.server import TieBreak

# -- one point ----------------------------------------------------------------------------------------------
Sig = tuple  # what a run's outcome is, as a hashable value: two points with equal Sig behave alike


def _metric_ms(run: Run, fault_ms: int) -> int | None:
    """Fault -> the first reclaim (or sweep failure) of the job's first attempt, ms; None if never. A failure
    its own worker sent (BullMQ's moveToFailed after ioredis rejected the finish, `max_retries_per_request`)
    is not a reclaim: a sweep's failure names the sweeper (`reclaimed_by`)."""
    first = run.attempts[0] if run.attempts else None
    if first is None:
        return None
    swept_failure = first.failed_at if first.reclaimed_by is not None else None
    end = first.reclaimed_at if first.reclaimed_at is not None else swept_failure
    return None if end is None else round(end * 1000) - fault_ms


def _signature(run: Run, verdicts: tuple[bool, ...], metric: int | None) -> Sig:
    attempts = tuple(
        (
            a.worker,
            a.outcome,
            a.worker_state_at_reclaim,
            a.reclaimed_by,
            a.finish_result,
            a.died_at is not None,
        )
        for a in run.attempts
    )
    return (verdicts, attempts, run.ended_by, metric is None)


class _Evaluator:
    """Runs points (each at most once) and counts the runs."""

    def __init__(self, sp: Space) -> None:
        self.space = sp
        self.cache: dict[tuple[tuple[int, ...], TieBreak | None], tuple[Sig, int | None]] = {}
        self.runs = 0
        self.on_run: Callable[[], None] | None = None  # progress: called after every run

    def verdicts(self, run: Run) -> tuple[bool, ...]:
        return tuple(bool(p.check(run)) for p in self.space.properties)

    def __call__(self, point: tuple[int, ...], tie: TieBreak | None = None) -> tuple[Sig, int | None]:
        hit = self.cache.get((point, tie))
        if hit is None:
            run = self.space.run(point, tie)
            self.runs += 1
            if self.on_run is not None:
                self.on_run()
            metric = _metric_ms(run, self.space.fault_time_ms(point))
            hit = (_signature(run, self.verdicts(run), metric), metric)
            self.cache[(point, tie)] = hit
        return hit


# -- the search ----------------------------------------------------------------------------------------------
# A line (innermost coordinate): a tuple of pieces (start, sig, metric at start or None, slope).
# A level above it: a tuple of segments (a, b, S_a, D): over a..b the structure below is S_a + (x - a) D.
# D (a "drift") mirrors the structure: a line's drift is ((dstart, dmetric), ...); a level's drift is
# ((da, db, dS), ...).


def _grid(lo: int, hi: int, step: int) -> list[int]:
    """lo, lo + step, ..., hi (at least lo and hi)."""
    return sorted({*range(lo, hi, max(1, step)), hi}) if hi > lo else [lo, hi]


def _div(x: int, d: int) -> int | None:
    return x // d if x % d == 0 else None


def _merge(q: list, p: list) -> bool:
    """Extend piece q by the next piece p if together they are one piece (same sig, one straight line)."""
    if q[2] != p[2]:
        return False
    if q[3] is None:
        q[1] = p[1]
        q[4] = 0
        return True
    step = _div(p[3] - q[3], p[0] - q[0])
    if step is None or q[4] not in (None, step) or p[4] not in (None, step):
        return False
    q[1] = p[1]
    q[4] = step
    return True


def _drift(s0: Any, s1: Any, delta: int, depth: int) -> Any:
    """The drift taking s0 to s1 over `delta` ms (integer ms per ms everywhere), or None."""
    if len(s0) != len(s1):
        return None
    out: list[Any] = []
    if depth == 0:
        for (a0, g0, m0, k0), (a1, g1, m1, k1) in zip(s0, s1, strict=True):
            if g0 != g1 or k0 != k1:
                return None
            da = _div(a1 - a0, delta)
            dm = 0 if m0 is None else _div(m1 - m0, delta)
            if da is None or dm is None:
                return None
            out.append((da, dm))
        return tuple(out)
    for (a0, b0, sub0, d0), (a1, b1, sub1, d1) in zip(s0, s1, strict=True):
        if d0 != d1:
            return None
        da, db = _div(a1 - a0, delta), _div(b1 - b0, delta)
        dsub = _drift(sub0, sub1, delta, depth - 1)
        if da is None or db is None or dsub is None:
            return None
        out.append((da, db, dsub))
    return tuple(out)


def _shift(s: Any, drift: Any, t: int, depth: int) -> Any:
    """s + t * drift."""
    if depth == 0:
        return tuple(
            (a + t * da, g, None if m is None else m + t * dm, k)
            for (a, g, m, k), (da, dm) in zip(s, drift, strict=True)
        )
    return tuple(
        (a + t * da, b + t * db, _shift(sub, dsub, t, depth - 1), d)
        for (a, b, sub, d), (da, db, dsub) in zip(s, drift, strict=True)
    )


def _boundaries(*lines: tuple) -> frozenset[int]:
    """Each piece boundary of the given lines and its two neighbours: where a line between them is sampled
    too (a piece that is born or dies between two lines is narrowest there, often narrower than `step`)."""
    found: set[int] = set()
    for line in lines:
        for (a, *_), (b, *_) in zip(line, line[1:], strict=False):
            found.update((a - 1, a, b - 1, b, b + 1))
    return frozenset(found)


def _along(seg: tuple, x: int, depth: int) -> Any:
    """The structure below a segment at coordinate x (a <= x <= b)."""
    a, _, sub, d = seg
    return sub if x == a else _shift(sub, d, x - a, depth)


class _Search:
    def __init__(self, sp: Space, ties: bool) -> None:
        self.space = sp
        self.eval = _Evaluator(sp)
        self.dims = sp.dims
        self.ties = ties
        self.tie_findings: list[tuple[tuple[int, ...], TieBreak, tuple[str, ...]]] = []
        self.tie_latencies: dict[TieBreak, list[tuple[int, tuple[int, ...]]]] = {}  # least and greatest

    # the innermost coordinate: pieces by bisection
    def line(self, prefix: tuple[int, ...], hints: frozenset[int] = frozenset()) -> tuple:
        """The pieces of one line. `hints` are extra coordinates to sample (where the neighbouring lines have
        piece boundaries), so a piece narrower than `step` that grows out of a neighbour's is not missed."""
        dim = self.dims[-1]
        lo, hi = dim.lo, dim.hi
        ga, ma = self.eval(prefix + (lo,))
        if hi == lo:
            return ((lo, ga, ma, 0),)
        merged = self._pieces(prefix, lo, ga, ma, hi, None, hints)
        if self.ties:
            self._try_ties(prefix, merged)
        return tuple((a, g, m, 0 if k is None else k) for a, _, g, m, k in merged)

    def _pieces(
        self, prefix, lo, ga, ma, hi, tie: TieBreak | None, hints: frozenset[int] = frozenset()
    ) -> list[list]:
        """Pieces of a..b: sampled every `self.space.step` ms and at `hints`, then bisected between samples."""
        merged: list[list] = []
        grid = sorted({*_grid(lo, hi, self.space.step), *(x for x in hints if lo < x < hi)})
        for a, b in zip(grid, grid[1:], strict=False):
            ga, ma = self.eval(prefix + (a,), tie)
            gb, mb = self.eval(prefix + (b,), tie)
            part = self._bisect(prefix, a, ga, ma, b, gb, mb, tie)
            if merged:  # a is the previous part's last point
                first = part[0]
                if first[1] == a:
                    part = part[1:]
                else:
                    first[0] = a + 1
                    if first[3] is not None:
                        first[3] += first[4]
            for piece in part:
                if merged and _merge(merged[-1], piece):
                    continue
                merged.append(piece)
        return merged

    def _bisect(self, prefix, a, ga, ma, b, gb, mb, tie: TieBreak | None) -> list[list]:
        """Pieces [start, end, sig, metric at start, slope or None (one point)] covering a..b."""
        if b - a == 1:
            return [[a, a, ga, ma, None], [b, b, gb, mb, None]]
        m = (a + b) // 2
        gm, mm = self.eval(prefix + (m,), tie)
        if ga == gb == gm:
            slope = 0 if ma is None else _div(mb - ma, b - a)
            if slope is not None and (ma is None or mm == ma + slope * (m - a)):
                return [[a, b, ga, ma, slope]]  # one piece, checked at both ends and the middle
        left = self._bisect(prefix, a, ga, ma, m, gm, mm, tie)
        right = self._bisect(prefix, m, gm, mm, b, gb, mb, tie)
        first = right[0]  # starts at m, which the left half covers
        if first[1] == m:
            right = right[1:]
        else:
            first[0] = m + 1
            if first[3] is not None:
                first[3] += first[4]
        return left + right

    def _try_ties(self, prefix: tuple[int, ...], pieces: list) -> None:
        """Try the other same-millisecond orders on this line: at the ends of every piece (where event times
        meet) first; where an order changes anything there, its whole line is searched too. Records the
        verdicts that change and the latencies those orders reach."""
        points = sorted(
            {x for left, right in zip(pieces, pieces[1:], strict=False) for x in (left[1], right[0])}
        )
        for tie in TIE_VARIANTS:
            if all(self.eval(prefix + (x,), tie) == self.eval(prefix + (x,)) for x in points):
                continue
            lo = self.dims[-1].lo
            ga, ma = self.eval(prefix + (lo,), tie)
            other = self._pieces(prefix, lo, ga, ma, self.dims[-1].hi, tie)
            for a, b, g, m, k in other:
                if m is not None:
                    last = m + (k or 0) * (b - a)
                    found = self.tie_latencies.setdefault(tie, [])
                    found += [(m, prefix + (a,)), (last, prefix + (b,))]
                    self.tie_latencies[tie] = [min(found), max(found)]
                for a0, b0, g0, _, _ in pieces:  # the default order's pieces overlapping this one
                    if a0 <= b and a <= b0 and g0[0] != g[0]:
                        changed = tuple(
                            p.name
                            for p, v0, v1 in zip(self.space.properties, g0[0], g[0], strict=True)
                            if v0 != v1
                        )
                        self.tie_findings.append((prefix + (max(a, a0),), tie, changed))

    # the outer coordinates: segments by bisection on the pattern of the structure below
    def level(
        self,
        prefix: tuple[int, ...],
        k: int,
        lo: int | None = None,
        hi: int | None = None,
        hints: frozenset[int] = frozenset(),
    ) -> tuple:
        if k == len(self.dims) - 1:
            return self.line(prefix, hints)
        dim = self.dims[k]
        lo = dim.lo if lo is None else lo
        hi = dim.hi if hi is None else hi
        sa = self.level(prefix + (lo,), k + 1)
        if hi == lo:
            return ((lo, lo, sa, None),)
        depth = len(self.dims) - 2 - k
        segments: list[tuple] = []
        grid = _grid(lo, hi, self.space.step)
        for a, b in zip(grid, grid[1:], strict=False):
            sb = self.level(prefix + (b,), k + 1)
            part: list[tuple] = []
            self._segments(prefix, k, depth, a, sa, b, sb, part)
            if segments:  # a is the previous part's last point
                first = part[0]
                if first[1] == a:
                    part = part[1:]
                else:
                    part[0] = (a + 1, first[1], _along(first, a + 1, depth), first[3])
            segments.extend(part)
            sa = sb
        return tuple(segments)

    def _segments(self, prefix, k, depth, a, sa, b, sb, out: list) -> None:
        """Append segments covering [a, b]."""
        if b - a <= 1:
            d = _drift(sa, sb, 1, depth) if b > a else None
            if d is not None:
                out.append((a, b, sa, d))
            else:
                out.append((a, a, sa, None))
                if b > a:
                    out.append((b, b, sb, None))
            return
        d = _drift(sa, sb, b - a, depth)
        m = (a + b) // 2
        sm = self.level(prefix + (m,), k + 1, hints=_boundaries(sa, sb) if depth == 0 else frozenset())
        if d is not None and _shift(sa, d, m - a, depth) == sm:
            out.append((a, b, sa, d))
            return
        left: list[tuple] = []
        self._segments(prefix, k, depth, a, sa, m, sm, left)
        right: list[tuple] = []
        self._segments(prefix, k, depth, m, sm, b, sb, right)
        first = right[0]  # starts at m, which the left half already covers
        if first[1] == m:
            right = right[1:]
        else:
            right[0] = (m + 1, first[1], _along(first, m + 1, depth), first[3])
        out.extend(left)
        out.extend(right)
