"""The fault kinds an exploration places (one registry entry each) and `FaultSpec`, one fault to explore."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from emqsim.errors import ConfigError
from emqsim.faults import Block, Crash, Freeze, Outage, Partition

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
    # A kind that strikes after the job's finish: its offset counts from the finish's send (the space adds the
    # job's work), and the world has a backlog of `jobs` jobs, so that the finish has a next job to take.
    after_finish: bool = False
    jobs: int = 1


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


def _place_finish_freeze(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Any:
    # at_ms: into job 0's attempt, past its work (the space adds it): the worker that finished job 0 freezes
    return Freeze(job=0, after=at_ms / 1000, duration=params["length"] / 1000)


register_fault(
    FaultKind(
        "finish-freeze",
        ("length",),
        _place_finish_freeze,
        "the job's worker freezes for `length`, `offset` after sending its finish, which under a backlog "
        "(two jobs) and `fetch_next` has already locked the next job to it",
        after_finish=True,
        jobs=3,
    )
)


@dataclass(frozen=True)
class SkippedTick:
    """A skipped renewal tick placed by explore (`Network.skipped_ticks` draws them): the job's holder's first
    tick with the job due at or after `after_ms` into its first attempt renews nothing. Not a scenario fault:
    `Space.setup` hands it to the run as `skipped_ticks_at`."""

    after_ms: int


def _place_skip(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> SkippedTick:
    return SkippedTick(at_ms)


register_fault(
    FaultKind(
        "skip",
        (),
        _place_skip,
        "the job's holder skips its first renewal tick with the job due from `offset` on (BullMQ's strict "
        "check at exactly lockRenewTime/2; Network.skipped_ticks draws them)",
    )
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


def _place_partition(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Any:
    worker = 0 if target == HOLDER else 1
    return Partition(at=(start_ms + at_ms) / 1000, duration=params["length"] / 1000, worker=worker)


register_fault(
    FaultKind(
        "partition",
        ("length",),
        _place_partition,
        "the worker's packets are dropped without a FIN: held, then flowing at the first TCP retransmission",
    )
)


def _place_failover(target: str, at_ms: int, params: Mapping[str, int], start_ms: int) -> Any:
    return Outage(
        at=(start_ms + at_ms) / 1000,
        duration=params["length"] / 1000,
        lost_writes=params["lag"] / 1000,
        readonly=params["readonly"] / 1000,
    )


register_fault(
    FaultKind(
        "failover",
        ("length", "lag", "readonly"),
        _place_failover,
        "Redis fails over to a replica `lag` behind (that window's writes are lost); every client is away "
        "`length`, then refused with READONLY on the demoted primary for `readonly`",
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
        if self.kind == "skip" and self.target != HOLDER:
            raise ConfigError("fault 'skip' skips a renewal tick of the job's holder: leave its target out")
        if kind.after_finish and self.target != HOLDER:
            raise ConfigError(
                f"fault {self.kind!r} strikes the worker that finished the job: leave its target out"
            )
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
