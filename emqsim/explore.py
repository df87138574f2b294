"""Every fault timing instead of a sample of them: exact worst cases and the smallest fault that breaks a policy.

A `Space` is one small world (a few workers, one job, one or two faults placed on the job's worker or another
worker) and the timings to search: each fault's offset, a fault's size (a freeze's length), each sweeper's
phase and, optionally, the holding worker's renewal phase, all in whole milliseconds. Every point of the space
is one deterministic run (`Simulation` with `timer_phases` pinned), so "every timing" is a finite set.

The search does not run every point. Along one coordinate the outcome of a run is piecewise constant and its
latency piecewise linear (shift the fault by 1 ms and the reclaim stays on the same sweep: the latency moves
by 1 ms; past an event time the reclaim jumps to another sweep). `explore` bisects each line for the points
where the outcome changes, and across the outer coordinates it bisects for the points where the *pattern* of
a line changes: between two lines whose pieces have the same outcomes and whose boundaries and latencies move
linearly (an integer number of ms per ms), every line in between is the interpolation, checked at the middle.
The result covers the whole space: exact minimum, maximum and distribution of the latency (each point weighs
the same, as the uniform-phase assumption of docs/theory.md says), the boundaries, and per property the
smallest counterexample. docs/explore.md says what "exact" means here and where it stops.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emqsim.distributions import Fixed
from emqsim.engine import REAPER, simulate
from emqsim.errors import ConfigError
from emqsim.faults import Block, Crash, Freeze, Network, Outage
from emqsim.policies import ReclaimPolicy
from emqsim.pools import gather, owned_pool, submit_all
from emqsim.records import HELD, Run
from emqsim.scenario import Scenario
from emqsim.server import TieBreak

# -- fault kinds: one registry entry each ------------------------------------------------------------------------
HOLDER, OTHER = "holder", "other"  # the worker running the job's first attempt, or worker 1


@dataclass(frozen=True)
class FaultKind:
    """How to place one kind of fault at an offset: `place(target, at_ms, params, start_ms)` returns the fault
    (`target` HOLDER: `at_ms` into the job's first attempt; OTHER: worker 1 at `start_ms + at_ms`). `params`
    names its sizes in ms (a freeze's "length"); `size` orders counterexamples (smaller first). A kind that
    is not `targeted` hits every worker at once (a Redis restart): it takes no target."""

    name: str
    params: tuple[str, ...]
    place: Callable[[str, int, Mapping[str, int], int], Any]
    description: str
    targeted: bool = True


def _place_crash(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Crash:
    if target == HOLDER:
        return Crash(job=0, after=at_ms / 1000)
    return Crash(worker=1, at=(start_ms + at_ms) / 1000)


def _place_pause(cls: type) -> Callable[[str, int, Mapping[str, int], int], Any]:
    def place(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Any:
        length = params["length"] / 1000
        if target == HOLDER:
            return cls(job=0, after=at_ms / 1000, duration=length)
        return cls(worker=1, at=(start_ms + at_ms) / 1000, duration=length)

    return place


FAULT_KINDS: dict[str, FaultKind] = {}


def register_fault(kind: FaultKind) -> FaultKind:
    """Add a fault kind to `explore` (and the CLI's `--fault NAME`)."""
    FAULT_KINDS[kind.name] = kind
    return kind


register_fault(FaultKind("crash", (), _place_crash, "the worker dies (SIGKILL)"))
register_fault(FaultKind("freeze", ("length",), _place_pause(Freeze), "a stop-the-world pause of `length`"))


register_fault(
    FaultKind("block", ("length",), _place_pause(Block), "a blocked event loop: work goes on, no renewals")
)


def _place_outage(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Any:
    worker = 0 if target == HOLDER else 1
    return Outage(at=(start_ms + at_ms) / 1000, duration=params["length"] / 1000, worker=worker)


register_fault(FaultKind("outage", ("length",), _place_outage, "the worker's connection is down"))


def _place_restart(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Any:
    return Outage(at=(start_ms + at_ms) / 1000, duration=params["length"] / 1000, redis_restart=True)


register_fault(
    FaultKind(
        "restart",
        ("length",),
        _place_restart,
        "Redis restarts on its data: every client, producer and reaper included, is cut off for `length`",
        targeted=False,
    )
)


@dataclass(frozen=True)
class FaultSpec:
    """One fault to explore: its kind, whose worker, the offsets to try (ms, inclusive; None: one renewal
    period in steady state) and each parameter's range (ms, inclusive)."""

    kind: str
    target: str = HOLDER
    offset: tuple[int, int] | None = None
    params: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ConfigError(f"unknown fault {self.kind!r}; choose one of: {', '.join(FAULT_KINDS)}")
        if self.target not in (HOLDER, OTHER):
            raise ConfigError(f"fault target must be {HOLDER!r} or {OTHER!r}, got {self.target!r}")
        kind = FAULT_KINDS[self.kind]
        if not kind.targeted and self.target != HOLDER:
            raise ConfigError(f"fault {self.kind!r} hits every worker at once: leave its target out")
        missing = set(kind.params) - set(self.params)
        extra = set(self.params) - set(kind.params)
        if missing or extra:
            need = ", ".join(kind.params) or "no parameters"
            raise ConfigError(
                f"fault {self.kind!r} takes {need}; got {', '.join(sorted(self.params)) or 'none'}"
            )
        for name, (lo, hi) in [*self.params.items(), *([("offset", self.offset)] if self.offset else [])]:
            if not (0 <= lo <= hi):
                raise ConfigError(
                    f"fault {self.kind!r} {name} range {lo}..{hi} ms must have 0 <= low <= high"
                )
        if self.kind != "crash" and any(lo < 1 for lo, _ in self.params.values()):
            raise ConfigError(f"fault {self.kind!r}: a length must be at least 1 ms")


# -- properties ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Property:
    """A named check over one run's records: `check(run)` is True when the run satisfies it."""

    name: str
    check: Callable[[Run], bool]
    description: str = ""


def _no_job_lost(run: Run) -> bool:
    """Every job completed, failed, waits, or runs on a live worker; none held by a dead one or vanished."""
    if sum(run.final_state.values()) != run.jobs:
        return False
    by_job: dict[str, list] = {}
    for a in run.attempts:
        by_job.setdefault(a.job, []).append(a)
    for attempts in by_job.values():
        if any(a.finish_result == "accepted" or a.failed_at is not None for a in attempts):
            continue
        if attempts[-1].outcome == HELD:
            return False
    return True


def _no_duplicate_completion(run: Run) -> bool:
    return not any(a.outcome == "duplicate_completion" for a in run.attempts)


def _live_never_reclaimed(run: Run) -> bool:
    return not any(a.false_reclaim for a in run.attempts)


NO_JOB_LOST = Property("no_job_lost", _no_job_lost, "no job ends held by a dead worker or vanishes")
NO_DUPLICATE_COMPLETION = Property(
    "no_duplicate_completion", _no_duplicate_completion, "no job is completed twice"
)
LIVE_NEVER_RECLAIMED = Property(
    "live_never_reclaimed", _live_never_reclaimed, "a live (or frozen) worker's job is never reclaimed"
)


@dataclass(frozen=True)
class _ReclaimedWithin:
    bound: float

    def __call__(self, run: Run) -> bool:
        for a in run.attempts:
            if a.died_at is not None:
                latency = a.detection_latency
                if latency is None or latency > self.bound + 1e-9:
                    return False
        return True


def dead_reclaimed_within(bound: float) -> Property:
    """A dead worker's job is reclaimed within `bound` seconds of the crash (never reclaimed: violated)."""
    if not (isinstance(bound, int | float) and math.isfinite(bound) and bound > 0):
        raise ConfigError(f"the detection bound must be a positive number of seconds, got {bound!r}")
    return Property(
        f"dead_reclaimed_within_{bound:g}s",
        _ReclaimedWithin(float(bound)),
        f"a dead worker's job is reclaimed within {bound:g} s",
    )


def default_properties(bound: float | None = None) -> list[Property]:
    """The standard set; `bound` (seconds) adds the dead-worker detection bound."""
    props = [NO_JOB_LOST, NO_DUPLICATE_COMPLETION, LIVE_NEVER_RECLAIMED]
    if bound is not None:
        props.append(dead_reclaimed_within(bound))
    return props


# -- the space ----------------------------------------------------------------------------------------------
# The other order the fixed rule could have chosen for each pair of same-millisecond events that matters: two
# requests at Redis (a sweep and a finish, a sweep and a renewal), a lock's expiry and a step at Redis (a
# renewal landing exactly at the expiry), a fault and a timer (a crash on a renewal tick).
TIE_VARIANTS = (
    TieBreak(arrivals="reversed"),
    TieBreak(expiry="before"),
    TieBreak(fault_last=True),
)


@dataclass(frozen=True)
class Dim:
    """One coordinate of the space: `role` says what it sets ("fault0.offset", "fault0.length",
    "sweep.reaper", "sweep.1", "renew.0"), in ms from `lo` to `hi` inclusive."""

    role: str
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True)
class Space:
    """A world and the timings to search. Build it with `space(...)`, which fills in the defaults."""

    policy: ReclaimPolicy
    faults: tuple[FaultSpec, ...]
    dims: tuple[Dim, ...]
    pinned: Mapping[str, int]
    workers: int
    duration_ms: int
    rtt_ms: int
    horizon_ms: int
    properties: tuple[Property, ...]
    step: int = 1  # every coordinate is sampled at least every `step` ms before bisecting

    @property
    def points(self) -> int:
        return math.prod(d.size for d in self.dims)

    def coords(self, point: Sequence[int]) -> dict[str, int]:
        values = dict(self.pinned)
        values.update({d.role: x for d, x in zip(self.dims, point, strict=True)})
        return values

    def setup(self, point: Sequence[int]) -> tuple[Scenario, dict[tuple[str, int], int]]:
        """The scenario and pinned timer phases of one point."""
        values = self.coords(point)
        faults = []
        for i, spec in enumerate(self.faults):
            params = {name: values[f"fault{i}.{name}"] for name in FAULT_KINDS[spec.kind].params}
            place = FAULT_KINDS[spec.kind].place
            faults.append(place(spec.target, values[f"fault{i}.offset"], params, self.rtt_ms))
        phases: dict[tuple[str, int], int] = {}
        for role, value in values.items():
            timer, _, who = role.partition(".")
            if timer in ("sweep", "renew"):
                phases[(timer, REAPER if who == "reaper" else int(who))] = value
        scenario = Scenario(
            name="explore",
            workers=self.workers,
            jobs=1,
            duration=Fixed(self.duration_ms / 1000),
            faults=tuple(faults),
            network=Network(rtt=Fixed(self.rtt_ms / 1000)),
            horizon=self.horizon_ms / 1000,
        )
        return scenario, phases

    def run(self, point: Sequence[int], tie_break: TieBreak | None = None) -> Run:
        """Simulate one point (the same run every time)."""
        scenario, phases = self.setup(point)
        return simulate(scenario, self.policy, 0, timer_phases=phases, tie_break=tie_break)

    def fault_time_ms(self, point: Sequence[int]) -> int:
        """When the first fault strikes (ms; the job starts at rtt)."""
        values = self.coords(point)
        return self.rtt_ms + min(values[f"fault{i}.offset"] for i in range(len(self.faults)))


def _steady_window(policy: ReclaimPolicy, workers: int, rtt_ms: int, tick_ms: int) -> tuple[int, int]:
    """Offsets (ms into the job) covering one renewal period after the job's first renewal, for renewal
    phases pinned to the tick: found by running the fault-free world and reading its first two renewals."""
    if policy.renewal is None:
        period = policy.sweep_interval_ms + rtt_ms
        return (1, period)
    scenario = Scenario(
        name="explore", workers=workers, jobs=1, duration=Fixed(10 * tick_ms / 1000 + 1),
        network=Network(rtt=Fixed(rtt_ms / 1000)), horizon=3600.0,
    )  # fmt: skip
    phases = {("renew", w): tick_ms for w in range(workers)}
    run = simulate(scenario, policy, 0, timer_phases=phases)
    renewed = [e.time for e in run.lock_events if e.kind == "renewed" and e.token == "0:1"]
    if len(renewed) < 2:
        raise ConfigError("explore: the job saw fewer than two renewals; is the lease longer than the beat?")
    h = rtt_ms // 2
    first_send = round(renewed[0] * 1000) - h
    period = round((renewed[1] - renewed[0]) * 1000)
    return (first_send + 1 - rtt_ms, first_send + period - rtt_ms)


def space(
    policy: ReclaimPolicy,
    faults: Sequence[FaultSpec],
    *,
    workers: int = 2,
    duration: float | None = None,
    rtt: float = 0.002,
    horizon: float | None = None,
    vary_renewal: bool = False,
    sweep_phases: bool = True,
    properties: Sequence[Property] | None = None,
    bound: float | None = None,
    step: int | None = None,
) -> Space:
    """The space to explore: `policy` in a world of `workers` workers and one job of `duration` seconds
    (default: 1 s past the latest fault offset), a fixed round trip `rtt`, and `faults` (one or two).

    Dimensions: each fault's offset (default: one renewal period in the job's steady state, so the offset
    from the last renewal is uniform, as docs/theory.md assumes) and parameters, each sweeper's phase over
    one sweep period `scan + rtt` (unless `sweep_phases=False`: all pinned to 0), and with `vary_renewal`
    the holding worker's renewal phase over one tick (else every renewal timer ticks first at one tick).
    `properties` defaults to `default_properties(bound)`. `step` (ms) is how densely every coordinate is
    sampled before bisecting (default: an eighth of the shortest timer period, the sweep's or the renewal
    tick's): a pattern narrower than that which appears only between two samples can be missed.
    """
    if not isinstance(policy, ReclaimPolicy):
        raise ConfigError(f"policy must be a ReclaimPolicy, got {policy!r}")
    if not 1 <= len(faults) <= 2:
        raise ConfigError(f"explore takes one fault or a pair, got {len(faults)}")
    if not isinstance(workers, int) or workers < 2:
        raise ConfigError(f"explore needs at least 2 workers (one to fail, one to recover), got {workers!r}")
    rtt_ms = round(rtt * 1000)
    if rtt_ms < 1:
        raise ConfigError(f"rtt must be at least 0.001 s, got {rtt}")
    tick_ms = policy.renewal.tick_ms if policy.renewal is not None else None
    if tick_ms is not None and rtt_ms >= tick_ms:
        raise ConfigError("rtt must be shorter than the renewal tick")
    dims: list[Dim] = []
    pinned: dict[str, int] = {}
    window = None
    for i, spec in enumerate(faults):
        if spec.offset is None and window is None:
            window = _steady_window(policy, workers, rtt_ms, tick_ms or 0)
        offset = spec.offset or window
        assert offset is not None  # the window is computed for every fault without an offset
        lo, hi = offset
        dims.append(Dim(f"fault{i}.offset", lo, hi))
        for name, (plo, phi) in spec.params.items():
            dims.append(Dim(f"fault{i}.{name}", plo, phi))
    period = policy.sweep_interval_ms + rtt_ms
    sweepers = ["reaper"] if policy.swept_by == "reaper" else [str(w) for w in range(workers)]
    for who in sweepers:
        if sweep_phases:
            dims.append(Dim(f"sweep.{who}", 0, period - 1))
        else:
            pinned[f"sweep.{who}"] = 0
    if tick_ms is not None:
        for w in range(workers):
            pinned[f"renew.{w}"] = tick_ms
        if vary_renewal:
            dims.append(Dim("renew.0", rtt_ms + 1, tick_ms))
    for d in [d for d in dims if d.size == 1]:
        pinned[d.role] = d.lo
    dims = [d for d in dims if d.size > 1]
    latest = max(
        [d.hi for d in dims if d.role.endswith(".offset")]
        + [v for k, v in pinned.items() if k.endswith(".offset")]
    )
    duration_ms = round(duration * 1000) if duration is not None else latest + 1000
    if duration_ms < 1:
        raise ConfigError(f"duration must be at least 0.001 s, got {duration}")
    longest = sum(max(d.hi for d in dims if d.role == f"fault{i}.length") if any(
        d.role == f"fault{i}.length" for d in dims) else pinned.get(f"fault{i}.length", 0)
        for i in range(len(faults)))  # fmt: skip
    horizon_ms = (
        round(horizon * 1000)
        if horizon is not None
        else 2 * (latest + duration_ms + longest) + 10 * (period + (tick_ms or 0)) + 600_000
    )
    if properties is None:
        properties = default_properties(bound)
    if step is None:
        step = max(1, min(x for x in (period, tick_ms) if x) // 8)
    if not isinstance(step, int) or step < 1:
        raise ConfigError(f"step must be a whole number of ms >= 1, got {step!r}")
    if not properties:
        raise ConfigError("explore needs at least one property to check")
    return Space(
        policy=policy,
        faults=tuple(faults),
        dims=tuple(dims),
        pinned=pinned,
        workers=workers,
        duration_ms=duration_ms,
        rtt_ms=rtt_ms,
        horizon_ms=horizon_ms,
        properties=tuple(properties),
        step=step,
    )


# -- one point ----------------------------------------------------------------------------------------------
Sig = tuple  # what a run's outcome is, as a hashable value: two points with equal Sig behave alike


def _metric_ms(run: Run, fault_ms: int) -> int | None:
    """Fault -> the first reclaim (or sweep failure) of the job's first attempt, ms; None if never."""
    first = run.attempts[0] if run.attempts else None
    if first is None:
        return None
    end = first.reclaimed_at if first.reclaimed_at is not None else first.failed_at
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


def _chunk(
    args: tuple[Space, int, int, bool], on_run: Callable[[], None] | None = None
) -> tuple[_Aggregate, int, list, dict]:
    """Explore the outermost coordinate from lo to hi and sum it up (module-level, so process pools can
    pickle it). `on_run` (serial runs only) is called after every run, for a progress bar."""
    sp, lo, hi, ties = args
    search = _Search(sp, ties)
    search.eval.on_run = on_run
    structure = search.level((), 0, lo, hi) if len(sp.dims) > 1 else search.line(())
    agg = _Aggregate(sp)
    agg.structure(structure, len(sp.dims) - 1)
    agg.space = None  # not sent back
    return agg, search.eval.runs, search.tie_findings, search.tie_latencies


def explore(
    sp: Space,
    *,
    jobs: int | None = 1,
    executor: Executor | None = None,
    ties: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Exploration:
    """Search every point of `sp` (see the module docstring); `jobs` processes or an `executor` (e.g. Dask's)
    split the outermost coordinate. `ties`: also run the points around every flip of a property under the
    other same-millisecond orders (`TIE_VARIANTS`). `progress(n)` is told of n more runs as they happen
    (run by run in one process; part by part with several)."""
    if not sp.dims:
        raise ConfigError("explore: every coordinate is pinned; nothing to search")
    outer = sp.dims[0]
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    parts = (
        1 if (executor is None and workers <= 1) or len(sp.dims) == 1 else min(outer.size, max(workers, 2))
    )
    edges = np.linspace(outer.lo, outer.hi + 1, parts + 1).round().astype(int).tolist()
    tasks = [(sp, lo, hi - 1, ties) for lo, hi in zip(edges, edges[1:], strict=False) if hi - 1 >= lo]
    if parts == 1:
        tick = None if progress is None else (lambda: progress(1))
        results = [_chunk(t, tick) for t in tasks]
    else:
        with contextlib.ExitStack() as stack:
            if executor is None:
                executor = stack.enter_context(owned_pool(workers))
            results = gather(submit_all(executor, _chunk, tasks))
        if progress is not None:
            progress(sum(r[1] for r in results))
    agg = _Aggregate(sp)
    runs = 0
    tie_findings = []
    tie_latencies: dict[TieBreak, list] = {}
    for part, n, found, extremes in results:
        runs += n
        agg.merge(part)
        tie_findings += found
        for tie, pair in extremes.items():
            both = tie_latencies.get(tie, []) + pair
            tie_latencies[tie] = [min(both), max(both)]
    values, weights = agg.histogram()
    key = _key_from_order(agg.order)
    counterexamples = [
        Counterexample(name, sp.coords(agg.best[i]), agg.best[i])
        for i, name in enumerate(agg.names)
        if i in agg.best
    ]
    boundaries = []
    for i, name in enumerate(agg.names):
        flips = agg.flips.get(i)
        if flips:
            first = min(flips, key=lambda f: (f[0], key(f[1] + (f[0],))))
            last = max(flips, key=lambda f: f[0])
            boundaries.append(
                Boundary(
                    name, sp.dims[-1].role, first[0], last[0],
                    sp.coords(first[1] + (first[0],)), sp.coords(last[1] + (last[0],)),
                )
            )  # fmt: skip
    any_order = {
        _tie_text(tie): {"min": (lo[0], sp.coords(lo[1])), "max": (hi[0], sp.coords(hi[1]))}
        for tie, (lo, hi) in sorted(tie_latencies.items(), key=lambda kv: _tie_text(kv[0]))
    }
    ties_out = [TieDependence(sp.coords(point), _tie_text(tie), props) for point, tie, props in tie_findings]
    return Exploration(
        space=sp,
        points=agg.total,
        runs=runs,
        counts=dict(zip(agg.names, agg.held, strict=True)),
        latency_values=values,
        latency_weights=weights,
        never_reclaimed=agg.never,
        counterexamples=counterexamples,
        boundaries=boundaries,
        tie_dependent=ties_out,
        tie_extremes=any_order,
    )


def _tie_text(tie: TieBreak) -> str:
    return f"arrivals {tie.arrivals}, expiry {tie.expiry}, fault {'last' if tie.fault_last else 'in order'}"


# -- text -------------------------------------------------------------------------------------------------------
def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.3f} s"


def _where(point: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v / 1000:g} s" for k, v in sorted(point.items()))


def _wrap(line: str, width: int) -> str:
    """A line wrapped to `width` columns (0: as it is), continuations indented 4 more than the line."""
    if not width or len(line) <= width:
        return line
    import textwrap

    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False)


def format_exploration(result: Exploration, width: int = 100) -> str:
    """The report `python -m emqsim explore` prints, wrapped to `width` columns (0: unwrapped)."""
    sp = result.space

    def whom(f: FaultSpec) -> str:
        if not FAULT_KINDS[f.kind].targeted:
            return "every client"
        return "the job's worker" if f.target == HOLDER else "worker 1"

    faults = " + ".join(f"{f.kind} ({whom(f)})" for f in sp.faults)
    lines = [
        f"explored {result.points:,} timings of {faults} under {sp.policy!r} with {result.runs:,} runs",
        "coordinates (ms): " + ", ".join(f"{d.role} {d.lo}..{d.hi}" for d in sp.dims),
        "pinned (ms): " + (", ".join(f"{k} {v}" for k, v in sorted(sp.pinned.items())) or "-"),
        "",
        "fault -> reclaim of the job's first attempt (every timing weighs the same):",
        f"  min {_s(result.latency_min)}  mean {_s(result.latency_mean)}  max {_s(result.latency_max)}"
        f"  (p50 {_s(result.latency_quantile(0.5))}, p95 {_s(result.latency_quantile(0.95))}; "
        f"never reclaimed at {result.never_reclaimed:,} timings)",
    ]
    lo, hi = result.latency_min_any_order(), result.latency_max_any_order()
    if (lo, hi) != (result.latency_min, result.latency_max):
        lines.append(f"  with the other same-millisecond orders: min {_s(lo)}  max {_s(hi)}")
    lines.append("")
    lines.append("properties:")
    for p in sp.properties:
        held = result.counts[p.name]
        mark = "holds everywhere" if held == result.points else f"FAILS at {result.points - held:,} timings"
        lines.append(f"  {p.name:28} {mark}")
    for b in result.boundaries:
        lines.append(
            f"  boundary: {b.property} starts failing at {b.dim} = {_s(b.first)} .. {_s(b.last)} "
            f"(first at {_where(b.where_first)})"
        )
    for c in result.counterexamples:
        lines.append(f"  smallest counterexample of {c.property}: {_where(c.point)}")
    if result.tie_dependent:
        lines.append("")
        lines.append("depends on the order of same-millisecond events:")
        seen = set()
        for t in result.tie_dependent:
            key = (t.tie_break, t.properties)
            if key in seen:
                continue
            seen.add(key)
            count = sum(1 for u in result.tie_dependent if (u.tie_break, u.properties) == key)
            lines.append(
                f"  {', '.join(t.properties)} under '{t.tie_break}' ({count} place(s), e.g. {_where(t.point)})"
            )
    return "\n".join(_wrap(line, width) for line in lines)


def counterexample_run(result: Exploration, prop: str) -> Run:
    """The run of a property's smallest counterexample (to print with `cli.text_timeline` or draw)."""
    for c in result.counterexamples:
        if c.property == prop:
            return result.space.run(c.coords)
    raise KeyError(f"no counterexample for {prop!r}; violated: {', '.join(result.violated()) or 'none'}")


# -- the command line -------------------------------------------------------------------------------------------
def fault_spec(text: str) -> FaultSpec:
    """`KIND[,name=A[:B]...][,offset=A:B][,target=holder|other]`, seconds (an argparse type):
    `crash`, `freeze,length=20:31`, `crash,target=other,offset=0:10`."""
    import argparse

    from emqsim.cli.argtypes import span
    from emqsim.units import to_ms

    kind, *items = [part.strip() for part in text.split(",")]
    if kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"unknown fault {kind!r}; choose one of: {', '.join(FAULT_KINDS)}")
    target, offset, params = HOLDER, None, {}
    given: set[str] = set()
    for item in items:
        name, eq, value = item.partition("=")
        if not eq:
            raise argparse.ArgumentTypeError(f"{item!r} in {text!r} must be name=value, e.g. length=20:31")
        if name in given:
            raise argparse.ArgumentTypeError(f"{name!r} is given twice in {text!r}; give each setting once")
        given.add(name)
        if name == "target":
            if not FAULT_KINDS[kind].targeted:
                raise argparse.ArgumentTypeError(
                    f"fault {kind!r} hits every worker at once: leave target out"
                )
            if value not in (HOLDER, OTHER):
                raise argparse.ArgumentTypeError(f"target must be {HOLDER} or {OTHER}, got {value!r}")
            target = value
            continue
        if name != "offset" and name not in FAULT_KINDS[kind].params:
            need = ", ".join(
                (*FAULT_KINDS[kind].params, "offset", *(["target"] if FAULT_KINDS[kind].targeted else []))
            )
            raise argparse.ArgumentTypeError(f"fault {kind!r} takes {need}; not {name!r}")
        low, high = span(value)
        pair = (to_ms(low), to_ms(high))
        if name == "offset":
            offset = pair
        else:
            params[name] = pair
    missing = [n for n in FAULT_KINDS[kind].params if n not in params]
    if missing:
        raise argparse.ArgumentTypeError(
            f"fault {kind!r} needs {', '.join(missing)}, e.g. {kind},{missing[0]}=20:31 (seconds, A or A:B)"
        )
    try:
        return FaultSpec(kind, target, offset, params)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_RUNS = 1_000_000
MAX_RUN_TICKS = 1e6  # simulated timer steps of one run (several CPU-seconds) before --yes is asked for
MAX_WORKERS = 1000  # an explored world is small: every run simulates each worker's timers


def add_explore_arguments(p: Any) -> None:
    from emqsim.cli.argtypes import add_policy_flags, output_path, seconds, whole

    p.add_argument(
        "--policy", choices=("lease", "timeout"), default="lease", help="detector to explore (default lease)"
    )
    add_policy_flags(p, gridded=False)
    p.add_argument("--swept-by", choices=("workers", "reaper"), help="who sweeps (default: the policy's)")
    p.add_argument("--single-phase", action="store_true", help="the lease's single-pass sweep")
    p.add_argument(
        "--fault",
        type=fault_spec,
        action="append",
        metavar="SPEC",
        help="crash, or KIND,length=A:B (seconds) with KIND one of "
        + ", ".join(name for name, kind in FAULT_KINDS.items() if kind.params)
        + "; options offset=A:B, target=holder|other (not for restart); give one or two",
    )
    p.add_argument(
        "--workers",
        type=whole(2, MAX_WORKERS),
        default=2,
        help=f"workers in the explored world (default 2, at most {MAX_WORKERS:,})",
    )
    p.add_argument("--duration", type=seconds, help="the job's work (default: 1 s past the latest offset)")
    p.add_argument("--rtt", type=seconds, default=0.002, help="fixed round trip (default 0.002)")
    p.add_argument("--bound", type=seconds, help="check that a dead worker's job is reclaimed within BOUND s")
    p.add_argument("--vary-renewal", action="store_true", help="also search the job's worker's renewal phase")
    p.add_argument("--pin-sweeps", action="store_true", help="pin every sweep phase to 0 (fewer runs)")
    p.add_argument("--no-ties", action="store_true", help="skip the other same-millisecond orders")
    p.add_argument("--jobs", type=whole(1), default=1, help="parallel processes (default 1)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on a Dask scheduler ('local' for a LocalCluster)")
    p.add_argument(
        "--max-runs", type=whole(1), default=MAX_RUNS, help=f"refuse bigger (default {MAX_RUNS:,})"
    )
    p.add_argument("--yes", action="store_true", help="run even if the estimate is over --max-runs")
    p.add_argument("--quiet", action="store_true", help="no progress bar (shown on a terminal's stderr)")
    p.add_argument(
        "--plot",
        type=output_path(".png", ".svg", ".html"),
        help="draw each violated property's smallest counterexample (FILE-<property>.png|svg, or .html: the "
        "interactive timeline)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _policy(args: Any) -> ReclaimPolicy:
    from emqsim.cli.building import single_policy
    from emqsim.policies import LeasePolicy, TimeoutPolicy

    policy = single_policy(args)
    if isinstance(policy, LeasePolicy) and (args.swept_by or args.single_phase) and not args.preset:
        return LeasePolicy(
            policy.lease_ms / 1000,
            policy.beat_ms / 1000,
            policy.sweep_interval_ms / 1000,
            two_phase=not args.single_phase,
            swept_by=args.swept_by or policy.swept_by,
        )
    if isinstance(policy, TimeoutPolicy) and args.swept_by and not args.preset:
        return TimeoutPolicy(
            policy.timeout_ms / 1000, policy.sweep_interval_ms / 1000, swept_by=args.swept_by
        )
    if args.single_phase and not isinstance(policy, LeasePolicy):
        raise ConfigError("--single-phase: only the lease policy has a two-phase sweep; drop it")
    return policy


def cmd_explore(args: Any) -> int:
    import json
    import sys
    from pathlib import Path

    faults = args.fault or [FaultSpec("crash")]
    if len(faults) > 2:
        raise ConfigError(f"--fault: give one fault or a pair, not {len(faults)}")
    if args.plot:  # the files it may write, checked before the exploration rather than after it
        from emqsim.fileio import writable_problem

        path = Path(args.plot)
        names = [f"{path.stem}-{p.name}{path.suffix}" for p in default_properties(args.bound)]
        problem = writable_problem(path, *names)
        if problem:
            raise ConfigError(f"--plot: {names[0]} and the like cannot be written: {problem}")
    sp = space(
        _policy(args),
        faults,
        workers=args.workers,
        duration=args.duration,
        rtt=args.rtt,
        vary_renewal=args.vary_renewal,
        sweep_phases=not args.pin_sweeps,
        bound=args.bound,
    )
    estimate = estimate_runs(sp, ties=not args.no_ties)
    if estimate > args.max_runs and not args.yes:
        raise ConfigError(
            f"about {estimate:,} runs (an upper estimate) is over --max-runs {args.max_runs:,}; narrow the "
            "ranges, add --pin-sweeps or --no-ties, or pass --yes"
        )
    # each run lasts to a horizon that grows with the faults' lengths, every worker's timers ticking to it
    tick_ms = sp.policy.renewal.tick_ms if sp.policy.renewal is not None else sp.policy.sweep_interval_ms
    ticks = sp.horizon_ms / max(1, min(tick_ms, sp.policy.sweep_interval_ms)) * sp.workers * 3
    if ticks > MAX_RUN_TICKS and not args.yes:
        raise ConfigError(
            f"each run lasts up to {sp.horizon_ms / 1000:,.0f} simulated s (the faults' lengths set it): "
            f"about {ticks:.1e} timer steps per run, over {MAX_RUN_TICKS:.0e} (several CPU-seconds per run); "
            "shorten the fault lengths or --duration, or pass --yes"
        )
    executor = client = None
    if args.dask:
        from emqsim.cli.work import dask_executor as _dask_executor

        executor, client = _dask_executor(args.dask)
    from emqsim.sweep import _progress_bar

    # progress on stderr (a terminal only, unless --quiet): the total is the upper estimate of the runs
    bar = _progress_bar(estimate, None if not args.quiet else False)
    bar.set_description("exploring")
    try:
        result = explore(sp, jobs=args.jobs, executor=executor, ties=not args.no_ties, progress=bar.update)
    finally:
        bar.close()
        if client is not None:
            from emqsim.cli.work import close_dask

            close_dask(client)
    if args.json:
        sys.stdout.write(json.dumps(as_json(result), indent=1) + "\n")
    else:
        print(format_exploration(result))
    from emqsim.cli.tables import text_timeline

    shown: dict[tuple[int, ...], str] = {}
    for c in result.counterexamples:
        run = sp.run(c.coords)
        if not args.json:
            print(f"\nsmallest counterexample of {c.property}:")
            print(f"(the same run as for {shown[c.coords]})" if c.coords in shown else text_timeline(run))
        shown.setdefault(c.coords, c.property)
        if args.plot:
            path = Path(args.plot)
            out = path.with_name(f"{path.stem}-{c.property}{path.suffix}")
            if out.suffix.lower() == ".html":
                from emqsim.timeline_html import write_timeline_html

                write_timeline_html(run, out)
            else:
                from emqsim.plots import savefig, timeline

                title = f"smallest counterexample of {c.property}: {_where(c.point)}"
                savefig(timeline(run, title=title).figure, out)
            print(f"wrote {out}", file=sys.stderr)
    return 0


def as_json(result: Exploration) -> dict[str, Any]:
    """The exploration as plain data (latencies in seconds)."""
    sp = result.space

    def secs(ms: float | None) -> float | None:
        return None if ms is None else ms / 1000

    return {
        "policy": sp.policy.settings(),
        "faults": [{"kind": f.kind, "target": f.target} for f in sp.faults],
        "coordinates_ms": {d.role: [d.lo, d.hi] for d in sp.dims},
        "pinned_ms": dict(sp.pinned),
        "points": result.points,
        "runs": result.runs,
        "latency": {
            "min": secs(result.latency_min),
            "mean": secs(result.latency_mean),
            "max": secs(result.latency_max),
            "min_any_order": secs(result.latency_min_any_order()),
            "max_any_order": secs(result.latency_max_any_order()),
            "never_reclaimed": result.never_reclaimed,
            "histogram_ms": [
                [int(v), int(w)] for v, w in zip(result.latency_values, result.latency_weights, strict=True)
            ],
        },
        "properties": {
            name: {"holds_at": held, "fails_at": result.points - held} for name, held in result.counts.items()
        },
        "counterexamples": {c.property: c.point for c in result.counterexamples},
        "boundaries": [vars(b) for b in result.boundaries],
        "tie_dependent": [vars(t) for t in result.tie_dependent],
    }
