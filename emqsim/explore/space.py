"""The space of one exploration: its coordinates (fault offsets and sizes, sweep and renewal phases) and the run
at one point."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emqsim.distributions import Fixed
from emqsim.engine import REAPER, simulate
from emqsim.errors import ConfigError
from emqsim.explore.faults import FAULT_KINDS, FaultSpec, SkippedTick
from emqsim.explore.properties import Property, default_properties
from emqsim.faults import Network
from emqsim.policies import ReclaimPolicy
from emqsim.records import Run
from emqsim.scenario import Scenario
from emqsim.server import TieBreak

# -- the space ----------------------------------------------------------------------------------------------
# The other order the fixed rule could have chosen for each pair of same-millisecond events that matters: two
# requests at Redis (a sweep and a finish, a sweep and a renewal), a lock's expiry and a step at Redis (a
# renewal landing exactly at the expiry), a fault and a timer (a crash on a renewal tick).
TIE_VARIANTS = (
    TieBreak(arrivals="reversed"),
    TieBreak(expiry="before"),
    TieBreak(fault_last=True),
)


# Fault kinds that drop a worker's connection (an `Outage`), the only ones the network settings act on.
DROPS = ("outage", "restart", "failover")
RESEND_BACKLOG = 3  # jobs in a world with resend_twice: two workers busy and one waiting, as finish-freeze's


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
    # the explored world's Network (docs/explore.md, "Network settings"): ioredis resending a command whose
    # reply a drop caught, and its maxRetriesPerRequest (None: null)
    resend_twice: bool = False
    max_retries_per_request: int | None = None

    @property
    def points(self) -> int:
        return math.prod(d.size for d in self.dims)

    def coords(self, point: Sequence[int]) -> dict[str, int]:
        values = dict(self.pinned)
        values.update({d.role: x for d, x in zip(self.dims, point, strict=True)})
        return values

    def setup(self, point: Sequence[int]) -> tuple[Scenario, dict[tuple[str, int], int]]:
        """The scenario and pinned timer phases of one point (its placed skipped ticks: `skipped_ticks`)."""
        values = self.coords(point)
        faults = []
        for i, spec in enumerate(self.faults):
            params = {name: values[f"fault{i}.{name}"] for name in FAULT_KINDS[spec.kind].params}
            kind = FAULT_KINDS[spec.kind]
            at_ms = values[f"fault{i}.offset"] + (self.duration_ms if kind.after_finish else 0)
            faults.append(kind.place(spec.target, at_ms, params, self.rtt_ms))
        phases: dict[tuple[str, int], int] = {}
        for role, value in values.items():
            timer, _, who = role.partition(".")
            if timer in ("sweep", "renew"):
                phases[(timer, REAPER if who == "reaper" else int(who))] = value
        scenario = Scenario(
            name="explore",
            workers=self.workers,
            jobs=self.jobs,
            duration=Fixed(self.duration_ms / 1000),
            faults=tuple(f for f in faults if not isinstance(f, SkippedTick)),
            network=Network(
                rtt=Fixed(self.rtt_ms / 1000),
                resend_twice=self.resend_twice,
                max_retries_per_request=self.max_retries_per_request,
            ),
            horizon=self.horizon_ms / 1000,
        )
        return scenario, phases

    @property
    def jobs(self) -> int:
        """Jobs in the world: one, or a backlog of three for two workers if a fault kind needs one, or with
        `resend_twice` (so that a resent finish has a job its first run's fetchNext took to orphan)."""
        return max(
            [RESEND_BACKLOG if self.resend_twice else 1, *(FAULT_KINDS[f.kind].jobs for f in self.faults)]
        )

    def skipped_ticks(self, point: Sequence[int]) -> tuple[int, ...]:
        """The offsets (ms into the job) of the point's `skip` faults, for `simulate(skipped_ticks_at=...)`."""
        values = self.coords(point)
        return tuple(values[f"fault{i}.offset"] for i, spec in enumerate(self.faults) if spec.kind == "skip")

    def run(self, point: Sequence[int], tie_break: TieBreak | None = None) -> Run:
        """Simulate one point (the same run every time)."""
        scenario, phases = self.setup(point)
        skips = self.skipped_ticks(point)
        return simulate(
            scenario, self.policy, 0, timer_phases=phases, tie_break=tie_break, skipped_ticks_at=skips
        )

    def fault_time_ms(self, point: Sequence[int]) -> int:
        """When the first fault strikes (ms; the job starts at rtt)."""
        values = self.coords(point)
        return self.rtt_ms + min(
            values[f"fault{i}.offset"] + (self.duration_ms if FAULT_KINDS[spec.kind].after_finish else 0)
            for i, spec in enumerate(self.faults)
        )


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


def _check_network(
    faults: Sequence[FaultSpec], resend_twice: bool, max_retries: int | None, flags: bool = False
) -> None:
    """Refuse network settings that would change nothing (no connection drop among the faults) or that the
    model does not have (with a silent partition), in one line naming them as arguments (`flags`: as the
    command line's flags)."""
    Network(resend_twice=resend_twice, max_retries_per_request=max_retries)  # the types, as a Network says
    names = [
        ("--" + name.replace("_", "-")) if flags else name
        for name, on in (("resend_twice", resend_twice), ("max_retries_per_request", max_retries is not None))
        if on
    ]
    if not names:
        return
    kinds = {f.kind for f in faults}
    what = " and ".join(names)
    if "partition" in kinds:
        raise ConfigError(
            f"{what}: not modelled with a silent partition (ioredis sees no close until TCP gives up); use "
            "an outage fault instead"
        )
    if not kinds & set(DROPS):
        raise ConfigError(
            f"{what}: {'they act' if len(names) > 1 else 'it acts'} only on a dropped connection, so "
            f"{'they change' if len(names) > 1 else 'it changes'} nothing here: add an "
            f"{', '.join(DROPS[:-1])} or {DROPS[-1]} fault, e.g. "
            + (
                "--fault outage,length=0.5:2"
                if flags
                else "FaultSpec('outage', params={'length': (500, 2000)})"
            )
        )


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
    resend_twice: bool = False,
    max_retries_per_request: int | None = None,
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
    `resend_twice` and `max_retries_per_request` set the world's `Network` (they act on a dropped connection
    only, so they need an `outage`, `restart` or `failover` fault) and add the properties
    `no_duplicate_execution` and `no_finish_lost` to the default ones.
    """
    if not isinstance(policy, ReclaimPolicy):
        raise ConfigError(f"policy must be a ReclaimPolicy, got {policy!r}")
    if not 1 <= len(faults) <= 2:
        raise ConfigError(f"explore takes one fault or a pair, got {len(faults)}")
    if not isinstance(workers, int) or workers < 2:
        raise ConfigError(f"explore needs at least 2 workers (one to fail, one to recover), got {workers!r}")
    _check_network(faults, resend_twice, max_retries_per_request)
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
        if spec.offset is None and FAULT_KINDS[spec.kind].after_finish:  # from the finish: one renewal period
            offset = (0, tick_ms or policy.sweep_interval_ms)
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
        network = resend_twice or max_retries_per_request is not None
        properties = default_properties(bound, executions=network)
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
        resend_twice=resend_twice,
        max_retries_per_request=max_retries_per_request,
    )
