"""Reclaim policies: how a dead worker's job is found and given back to the queue.

A policy says three things: what a worker does while it holds a job (`renewal`: the heartbeat rule, or None),
what the server does on each atomic step (`take`, `renew`, `finish`, `sweep`, all run inside the store at one
instant, like Lua scripts), and who runs the sweep and how often. The engine knows nothing else about it, so a
new detector (an adaptive timeout, phi accrual) is one subclass: of `Detector` (seconds, one method to write,
docs/policies.md) or of `ReclaimPolicy` (every step, in the engine's milliseconds). The engine works on a
fresh copy of the policy in every run, so per-run state kept on `self` is safe.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Literal, Protocol, get_args

import numpy as np

from emqsim import watchdog
from emqsim.errors import ConfigError, WrongType, require_bool, require_instance, require_whole
from emqsim.protocol import FinishReply, Queue, SweepReply
from emqsim.units import to_ms, to_s

SweptBy = Literal["workers", "reaper"]
TakeMode = Literal["atomic", "after-wakeup"]
TrackBy = Literal["token", "job"]


class LeaseWarning(UserWarning):
    """Settings that work but are fragile (a lease that one missed heartbeat lapses)."""


def _require_positive(name: str, seconds: float) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise WrongType(f"{name} must be a positive number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{name} must be a positive number of seconds, got {seconds!r}")
    if to_ms(seconds) < 1:
        raise ConfigError(
            f"{name} must be at least 0.001 s (the clock counts whole milliseconds), got {seconds}"
        )


def _require_choice(name: str, value: Any, choices: Any) -> None:
    """Refuse a string option outside its `Literal` type's values, naming them."""
    allowed = get_args(choices)
    if value not in allowed:
        raise ConfigError(f"{name} must be {' or '.join(map(repr, allowed))}, got {value!r}")


def _rule_settings(rule: RenewalRule) -> dict[str, Any]:
    """A renewal rule's options as plain settings, in seconds (for `settings()`)."""
    return {
        "renew_tick": to_s(rule.tick_ms),
        "renew_min_age": to_s(rule.min_age_ms),
        "renew_strict": rule.strict,
        "renew_after_reply": rule.after_reply,
        "renew_per_job": rule.per_job,
        "recreate_missing": rule.recreate_missing,
        "track_by": rule.track_by,
    }


@dataclass(frozen=True)
class RenewalRule:
    """When a worker renews its leases.

    The worker's one lock-manager timer fires every `tick_ms`; on each tick it renews, in ONE batched round
    trip, every held job whose last renewal `ts` satisfies `now - ts > min_age_ms` (or `>=` when not
    `strict`), setting `ts = now`. With `after_reply` the next tick is scheduled when the round trip returns
    (BullMQ's `setTimeout` after `await`), else at a fixed rate. `per_job` gives every job its own timer and
    round trip instead (the naive design, for comparing Redis load). `recreate_missing` makes a renewal set
    a missing lock again instead of failing the token check. `track_by` keys the lock manager's table:
    "token" (one entry per take) or "job" (BullMQ's and EchoMQ's map by job id: a re-take of a job the
    worker still runs a stale copy of replaces the stale entry, and the stale copy's end untracks the fresh
    one, whose lock then lapses).
    """

    tick_ms: int
    min_age_ms: int = 0
    strict: bool = True
    after_reply: bool = True
    per_job: bool = False
    recreate_missing: bool = False
    track_by: TrackBy = "token"

    def __post_init__(self) -> None:
        require_whole("RenewalRule.tick_ms", self.tick_ms)
        require_whole("RenewalRule.min_age_ms", self.min_age_ms)
        if self.tick_ms < 1 or self.min_age_ms < 0:
            raise ConfigError(
                f"RenewalRule needs tick_ms >= 1 and min_age_ms >= 0, got {self.tick_ms} and {self.min_age_ms}"
            )
        for name in ("strict", "after_reply", "per_job", "recreate_missing"):
            require_bool(f"RenewalRule.{name}", getattr(self, name))
        _require_choice("track_by", self.track_by, TrackBy)

    @classmethod
    def every(cls, beat: float, **kw: Any) -> RenewalRule:
        """Renew every held job on each beat, at a fixed rate (EchoMQ's interval timer: 'lease 30 s renewed
        every 10 s; two missed renewals still leave the lock alive, three lapse it')."""
        kw.setdefault("after_reply", False)
        return cls(tick_ms=to_ms(beat), min_age_ms=0, **kw)

    @classmethod
    def bullmq(cls, lock_duration: float, lock_renew_time: float | None = None, **kw: Any) -> RenewalRule:
        """BullMQ's LockManager: renew = lockDuration/2, tick every renew/2, renew when `ts + renew/2 < now`."""
        renew_ms = to_ms(lock_renew_time) if lock_renew_time is not None else to_ms(lock_duration) // 2
        half = renew_ms // 2
        return cls(tick_ms=half, min_age_ms=half, strict=True, after_reply=True, **kw)

    @property
    def tick(self) -> float:
        """Seconds between two ticks of a worker's lock-manager timer."""
        return self.tick_ms / 1000

    def due(self, now_ms: int, ts_ms: int) -> bool:
        age = now_ms - ts_ms
        return age > self.min_age_ms if self.strict else age >= self.min_age_ms


class ReclaimPolicy:
    """The interface the engine uses. Subclass and override what differs; see LeasePolicy and TimeoutPolicy.

    Attributes read by the engine:
      name            a short label for tables ("lease", "timeout", a preset's name, yours)
      renewal         RenewalRule the workers follow while holding jobs, or None for no heartbeat
      sweep_interval_ms  how often the sweep runs
      swept_by        "workers" (every live worker runs it on its own timer, rate-limited as BullMQ does) or
                      "reaper" (one dedicated process that never dies)
      fenced          whether finishes are token-checked (a stale finish is rejected instead of accepted)
      take_after_wakeup  False: a blocking take (BLMOVE) that Redis runs atomically as soon as a job is there,
                      even for a frozen client; True: BullMQ's fetch, a BZPOPMIN on the queue's marker (up
                      to `drain_delay_ms`) and moveToActive only after the client has read the wake-up
      lazy_fail       a job stalled more than max_stalled times is marked (`defa`) and re-queued, and its
                      next taker fails it (BullMQ 6), instead of being failed by the sweep
      fetch_next      an accepted finish also takes the next waiting job for the same slot in the same
                      atomic step (BullMQ's moveToFinished with fetchNext), locking it even if the worker
                      freezes before it reads the reply
    """

    name: str = "custom"
    renewal: RenewalRule | None = None
    sweep_interval_ms: int = 5000
    swept_by: SweptBy = "reaper"
    fenced: bool = True
    take_after_wakeup: bool = False
    drain_delay_ms: int = 5000
    lazy_fail: bool = False
    fetch_next: bool = False

    @property
    def scan(self) -> float:
        """Seconds between two sweeps (kept internally as `sweep_interval_ms`, the clock's whole ms)."""
        return self.sweep_interval_ms / 1000

    @scan.setter
    def scan(self, seconds: float) -> None:
        _require_positive("scan", seconds)
        self.sweep_interval_ms = to_ms(seconds)

    @property
    def drain_delay(self) -> float:
        """Seconds an idle taker waits on the queue's marker (take after wake-up only)."""
        return self.drain_delay_ms / 1000

    def table_settings(self) -> dict[str, Any]:
        """The settings a result row and `Run.policy` record, in seconds; None where a setting does not apply.
        The keys are the same for every policy (policy, lease, beat, scan, timeout), so runs of different
        policies share one table (a `Detector` adds its parameters). A policy written when `settings()` was
        the row (it overrides `settings()` alone) is recorded by its `settings()`, as it was."""
        owner = next(c for c in type(self).__mro__ if "settings" in vars(c))
        if owner.__module__ != __name__:
            return self.settings()
        return self._row()

    def _row(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "lease": None,
            "beat": None,
            "scan": to_s(self.sweep_interval_ms),
            "timeout": None,
        }

    def settings(self) -> dict[str, Any]:
        """Every setting of the policy, in seconds: `table_settings()` and each option besides (the built-in
        policies name them all: take, tracking, lazy fail, the renewal rule...), so two policies that
        behave differently never have equal settings."""
        return {
            **self._row(),
            "swept_by": self.swept_by,
            "fenced": self.fenced,
            "take_after_wakeup": self.take_after_wakeup,
            "lazy_fail": self.lazy_fail,
            **({} if self.renewal is None else _rule_settings(self.renewal)),
        }

    def params(self) -> dict[str, Any]:
        """The policy's own parameters, in seconds, for a table: those of `table_settings()` that apply (a
        `Detector` shows its own)."""
        return {k: v for k, v in self.table_settings().items() if k != "policy" and v is not None}

    # Server-side atomic steps; each runs inside the store at one instant.
    def take(self, queue: Queue, token: str, now_ms: int) -> str | None:
        return queue.take(token, now_ms, lock_ms=None, set_lock=self.fenced)

    def renew(self, queue: Queue, held: list[tuple[str, str]], now_ms: int) -> list[str]:
        return [job_id for job_id, _ in held]

    def finish(self, queue: Queue, job_id: str, token: str, now_ms: int) -> FinishReply:
        return queue.finish(job_id, token, check_token=self.fenced)

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        raise NotImplementedError


class SweepShortcut(Protocol):
    """Internal and optional, for speed only: a policy whose sweep is rate-limited may say when a sweep is
    certain to be refused, and the engine then spares that sweep its network events. A policy without it
    sends every sweep (same results, more events)."""

    def sweep_refused(self, queue: Queue, arrival_ms: int) -> bool:
        """True only if a sweep reaching Redis at `arrival_ms` is certain to be turned away without changing
        anything but the command count (its one command is `EXISTS`)."""
        ...


class Detector(ReclaimPolicy):
    """The short way to write a detector, all in seconds: workers send a heartbeat every `beat` s while they
    hold a job; every `scan` s a reaper asks `suspect(job, now)` of each active job and takes back those it
    suspects. Write `suspect`; `taken` and `heartbeat` tell you what happened, to keep what you need on
    `self` (a fresh copy in every run). Finishes are token-checked: a reclaimed job's old holder cannot
    complete it. See docs/policies.md."""

    name = "detector"
    swept_by: SweptBy = "reaper"
    fenced = True
    answer_within = 5.0  # real seconds one suspect() call may take; a slower one stops the run with an error

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own `__init__` must call `super().__init__(...)`: checked as it returns, so a detector
        that forgot it fails at construction with a TypeError saying so, not deep inside a run."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__init__")
        if own is None:
            return

        def __init__(self: Detector, *args: Any, **kw: Any) -> None:
            own(self, *args, **kw)
            if type(self) is cls and "renewal" not in vars(self):
                raise TypeError(
                    f"{cls.__qualname__}.__init__ must call super().__init__(beat=..., scan=...): "
                    "the Detector's beat and scan are not set"
                )

        __init__.__doc__, __init__.__wrapped__ = own.__doc__, own  # type: ignore[attr-defined]
        cls.__init__ = __init__  # type: ignore[method-assign]

    def __init__(self, beat: float = 2.0, scan: float = 1.0, max_stalled: int | None = None) -> None:
        _require_positive("beat", beat)
        require_whole("max_stalled", max_stalled, none=True)
        self.beat = beat
        self.scan = scan
        self.max_stalled = max_stalled  # reclaims of one job before it goes to `failed` (None: never)
        self.renewal = RenewalRule.every(beat)

    # -- yours to write -----------------------------------------------------------------------------------
    def taken(self, job: str, now: float) -> None:
        """A worker took `job` at `now` (seconds)."""

    def heartbeat(self, job: str, now: float) -> None:
        """The holder of `job` sent a heartbeat that reached Redis at `now` (seconds)."""

    def suspect(self, job: str, now: float) -> bool:
        """True if `job`'s worker should now be presumed dead (the job is then taken back)."""
        raise NotImplementedError("a Detector must define suspect(job, now)")

    # -- the engine's steps, on the queue's public operations ------------------------------------------------
    def take(self, queue: Queue, token: str, now_ms: int) -> str | None:
        job = queue.take(token, now_ms, lock_ms=None)  # a fencing token without expiry
        if job is not None:
            self.taken(job, now_ms / 1000)
        return job

    def renew(self, queue: Queue, held: list[tuple[str, str]], now_ms: int) -> list[str]:
        failed = []
        for job, token in held:
            if queue.holds(job, token):
                self.heartbeat(job, now_ms / 1000)
            else:
                failed.append(job)  # reclaimed meanwhile: the worker stops beating for it
        return failed

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        now = now_ms / 1000
        reclaimed: list[str] = []
        failed: list[str] = []
        for job in queue.active_jobs():
            if self._suspected(job, now):
                result = queue.reclaim(job, self.max_stalled)
                if result is not None:
                    (reclaimed if result == "reclaimed" else failed).append(job)
        return SweepReply(False, tuple(reclaimed), tuple(failed))

    def _suspected(self, job: str, now: float) -> bool:
        """`suspect(job, now)`, stopped if it runs longer than `answer_within` real seconds, and checked to be
        a bool answered in time."""
        started = time.monotonic()
        verdict = self._ask_suspect(job, now, started)
        took = time.monotonic() - started
        if took > self.answer_within:
            raise watchdog.DetectorBlocked(
                f"{type(self).__qualname__}.suspect({job!r}, {now}) took {took:.1f} s of real time; a "
                f"detector must answer within {self.answer_within:g} s (answer_within): does it wait or "
                "sleep?"
            )
        if not isinstance(verdict, bool | np.bool_):
            raise TypeError(
                f"{type(self).__qualname__}.suspect({job!r}, {now}) returned {verdict!r}; "
                "it must return True or False"
            )
        return bool(verdict)

    def _ask_suspect(self, job: str, now: float, started: float) -> Any:
        """The call itself, under the watchdog. (The grader's stand-in for a student's detector asks the
        student's kernel instead, within the same limit: emqsim.grading.trusted.)"""
        return watchdog.call(self.suspect, job, now, self.answer_within, started)

    def params(self) -> dict[str, Any]:
        """Every public number, string or flag set on the detector (its parameters, not its state)."""
        return {
            k: v
            for k, v in vars(self).items()
            if not k.startswith("_") and isinstance(v, int | float | str | bool) and k != "sweep_interval_ms"
        } | {"scan": self.scan}

    def table_settings(self) -> dict[str, Any]:
        return {**super().table_settings(), "beat": self.beat, **self.params()}

    def __repr__(self) -> str:
        """The class and its parameters (`PhiAccrual(beat=2.0, threshold=8, ..., scan=1.0)`), not its state."""
        return f"{type(self).__qualname__}({', '.join(f'{k}={v!r}' for k, v in self.params().items())})"

    def settings(self) -> dict[str, Any]:
        return {**self.table_settings(), "max_stalled": self.max_stalled}


@dataclass(frozen=True)
class LeasePolicy(ReclaimPolicy):
    """A lock with a `PX` lease, renewed by a heartbeat; the sweep reclaims jobs whose lock is gone.

    `lease`, `beat` and `scan` are seconds. `two_phase` selects BullMQ's mark-then-move sweep (default) or a
    single pass. `renewal` overrides the default rule `RenewalRule.every(beat)` (e.g. BullMQ's exact rule);
    `track_by` ("token" or "job") sets the rule's lock-manager keying. `take_mode` is "atomic" (a blocking move
    Redis serves even to a frozen client) or "after-wakeup" (BullMQ: marker wake-up, then moveToActive;
    idle takers wait up to `drain_delay` s); `lazy_fail` fails a job past `max_stalled` at its next take;
    `fetch_next` makes an accepted finish take the slot's next job in the same step (BullMQ's moveToFinished).
    `redis_commands`, when known, is every command name the client library makes Redis run (its scripts'
    own commands, its connection setup): under maxmemory each holds a latency histogram, counted from the
    start instead of the names of the model's own steps (empty: the steps' names, as emqsim's scripts run).

    Frozen and validated: change a setting with `dataclasses.replace(policy, lazy_fail=True)` (checked
    again). The stored `renewal` is the rule in force (the default one resolved from `beat`), so a `replace`
    that changes `beat` keeps it unless it also passes `renewal=None`.
    """

    lease: float = 30.0
    beat: float = 10.0
    scan: float = 5.0
    _: KW_ONLY
    two_phase: bool = True
    max_stalled: int | None = 1
    swept_by: SweptBy = "workers"
    renewal: RenewalRule | None = None
    name: str = "lease"
    take_mode: TakeMode = "atomic"
    drain_delay: float = 5.0
    lazy_fail: bool = False
    track_by: TrackBy | None = None
    fetch_next: bool = False
    redis_commands: tuple[str, ...] = ()  # sorted (by __post_init__): the same text in every process
    # the engine's whole milliseconds, derived from the seconds above (not settings of their own)
    lease_ms: int = field(init=False, repr=False, compare=False)
    beat_ms: int = field(init=False, repr=False, compare=False)
    sweep_interval_ms: int = field(init=False, repr=False, compare=False)
    drain_delay_ms: int = field(init=False, repr=False, compare=False)
    take_after_wakeup: bool = field(init=False, repr=False, compare=False)
    fenced = True

    def __post_init__(self) -> None:
        lease, beat, scan, drain_delay = self.lease, self.beat, self.scan, self.drain_delay
        _require_positive("lease", lease)
        _require_positive("drain_delay", drain_delay)
        require_bool("two_phase", self.two_phase)
        require_whole("max_stalled", self.max_stalled, none=True)
        require_instance("name", self.name, str, "a string")
        _require_choice("take_mode", self.take_mode, TakeMode)
        if not isinstance(self.lazy_fail, bool):
            raise ConfigError(f"lazy_fail must be true or false, got {self.lazy_fail!r}")
        require_bool("fetch_next", self.fetch_next)
        names = self.redis_commands
        if isinstance(names, str) or not isinstance(names, tuple | list | set | frozenset):
            raise ConfigError(f"redis_commands must be a set of Redis command names, got {names!r}")
        if not all(isinstance(n, str) and n.strip() and n == n.strip() for n in names):
            raise ConfigError(
                f"redis_commands must hold command names (non-empty strings), got {list(names)!r}"
            )
        _require_positive("beat", beat)
        _require_positive("scan", scan)
        if beat >= lease:
            raise ConfigError(
                f"beat ({beat:g} s) must be shorter than the lease ({lease:g} s): the lock would lapse "
                "between renewals; try beat <= lease/3"
            )
        if self.max_stalled is not None and self.max_stalled < 0:
            raise ConfigError(f"max_stalled must be >= 0 or None, got {self.max_stalled}")
        _require_choice("swept_by", self.swept_by, SweptBy)
        if self.track_by is not None:
            _require_choice("track_by", self.track_by, TrackBy)
        if self.renewal is not None:
            require_instance("renewal", self.renewal, RenewalRule, "a RenewalRule or None")
        rule = self.renewal or RenewalRule.every(beat)
        if self.track_by is not None:
            rule = replace(rule, track_by=self.track_by)
        values = {
            "lease": to_s(to_ms(lease)),  # the clock's whole milliseconds, as seconds: 30 and 30.0 are equal
            "beat": to_s(to_ms(beat)),
            "scan": to_s(to_ms(scan)),
            "drain_delay": to_s(to_ms(drain_delay)),
            "renewal": rule,
            "track_by": rule.track_by,
            "lease_ms": to_ms(lease),
            "beat_ms": to_ms(beat),
            "sweep_interval_ms": to_ms(scan),
            "drain_delay_ms": to_ms(drain_delay),
            "take_after_wakeup": self.take_mode == "after-wakeup",
            "redis_commands": tuple(sorted({n.lower() for n in names})),  # as INFO latencystats names them
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)
        if rule.tick_ms >= self.lease_ms:
            raise ConfigError("the renewal timer must tick more often than the lease lasts")
        if lease / beat < 2:
            warnings.warn(
                f"lease/beat = {lease / beat:.2f} < 2: a single late or lost heartbeat lapses the lease",
                LeaseWarning,
                stacklevel=3,
            )

    def table_settings(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "lease": to_s(self.lease_ms),
            "beat": to_s(self.beat_ms),
            "scan": to_s(self.sweep_interval_ms),
            "timeout": None,
        }

    def settings(self) -> dict[str, Any]:
        rule = self.renewal
        assert rule is not None  # a lease always has a renewal rule
        return {
            **self.table_settings(),
            "two_phase": self.two_phase,
            "max_stalled": self.max_stalled,
            "swept_by": self.swept_by,
            "take_mode": self.take_mode,
            "drain_delay": self.drain_delay,
            "lazy_fail": self.lazy_fail,
            "fetch_next": self.fetch_next,
            "redis_commands": list(self.redis_commands),
            **_rule_settings(rule),
        }

    def take(self, queue: Queue, token: str, now_ms: int) -> str | None:
        return queue.take(token, now_ms, lock_ms=self.lease_ms)

    def renew(self, queue: Queue, held: list[tuple[str, str]], now_ms: int) -> list[str]:
        rule = self.renewal
        assert rule is not None  # a lease always has a renewal rule
        return queue.extend_locks(held, self.lease_ms, recreate_missing=rule.recreate_missing)

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        if self.two_phase:
            return queue.sweep_two_phase(now_ms, self.sweep_interval_ms, self.max_stalled, self.lazy_fail)
        return queue.sweep_single_phase(now_ms, self.sweep_interval_ms, self.max_stalled)

    def sweep_refused(self, queue: Queue, arrival_ms: int) -> bool:
        return queue.sweep_rate_limited(arrival_ms)


@dataclass(frozen=True)
class TimeoutPolicy(ReclaimPolicy):
    """The fixed-timeout reaper: every `scan` seconds, reclaim any active job older than `timeout` seconds.

    No heartbeat. Finishes are not token-checked unless `fenced=True`, so a late finish of a reclaimed job is
    accepted: the job has then completed twice. Frozen and validated, as `LeasePolicy`.
    """

    timeout: float = 600.0
    scan: float = 5.0
    _: KW_ONLY
    fenced: bool = False
    max_stalled: int | None = None
    swept_by: SweptBy = "reaper"
    name: str = "timeout"
    timeout_ms: int = field(init=False, repr=False, compare=False)
    sweep_interval_ms: int = field(init=False, repr=False, compare=False)
    renewal = None

    def __post_init__(self) -> None:
        _require_positive("timeout", self.timeout)
        _require_positive("scan", self.scan)
        require_bool("fenced", self.fenced)
        require_whole("max_stalled", self.max_stalled, none=True)
        require_instance("name", self.name, str, "a string")
        if self.max_stalled is not None and self.max_stalled < 0:
            raise ConfigError(f"max_stalled must be >= 0 or None, got {self.max_stalled}")
        _require_choice("swept_by", self.swept_by, SweptBy)
        for key, value in {
            "timeout": to_s(to_ms(self.timeout)),
            "scan": to_s(to_ms(self.scan)),
            "timeout_ms": to_ms(self.timeout),
            "sweep_interval_ms": to_ms(self.scan),
        }.items():
            object.__setattr__(self, key, value)

    def table_settings(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "lease": None,
            "beat": None,
            "scan": to_s(self.sweep_interval_ms),
            "timeout": to_s(self.timeout_ms),
        }

    def settings(self) -> dict[str, Any]:
        return {
            **self.table_settings(),
            "fenced": self.fenced,
            "max_stalled": self.max_stalled,
            "swept_by": self.swept_by,
        }

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        return queue.reap(now_ms, self.timeout_ms, self.max_stalled)
