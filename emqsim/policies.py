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
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import numpy as np

from emqsim.errors import ConfigError, WrongType, require_bool, require_instance, require_whole
from emqsim.protocol import FinishReply, Queue, SweepReply
from emqsim.units import to_ms, to_s

SweptBy = Literal["workers", "reaper"]


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
    track_by: str = "token"

    def __post_init__(self) -> None:
        if self.track_by not in ("token", "job"):
            raise ConfigError(f"track_by must be 'token' or 'job', got {self.track_by!r}")

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

    def settings(self) -> dict[str, Any]:
        """Plain settings for tables, in seconds; None where a setting does not apply. The keys are the same
        for every policy (lease, beat, scan, timeout), so runs of different policies share one table."""
        return {
            "policy": self.name,
            "lease": None,
            "beat": None,
            "scan": to_s(self.sweep_interval_ms),
            "timeout": None,
        }

    def params(self) -> dict[str, Any]:
        """The policy's own parameters, in seconds, for a table: those of `settings()` that apply (a
        `Detector` shows its own)."""
        return {k: v for k, v in self.settings().items() if k != "policy" and v is not None}

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
            started = time.monotonic()
            verdict = self.suspect(job, now)
            took = time.monotonic() - started
            if took > self.answer_within:
                raise TimeoutError(
                    f"{type(self).__qualname__}.suspect({job!r}, {now}) took {took:.1f} s of real time; a "
                    f"detector must answer within {self.answer_within:g} s (answer_within): does it wait or "
                    "sleep?"
                )
            if not isinstance(verdict, bool | np.bool_):
                raise TypeError(
                    f"{type(self).__qualname__}.suspect({job!r}, {now}) returned {verdict!r}; "
                    "it must return True or False"
                )
            if verdict:
                result = queue.reclaim(job, self.max_stalled)
                if result is not None:
                    (reclaimed if result == "reclaimed" else failed).append(job)
        return SweepReply(False, tuple(reclaimed), tuple(failed))

    def params(self) -> dict[str, Any]:
        """Every public number, string or flag set on the detector (its parameters, not its state)."""
        return {
            k: v
            for k, v in vars(self).items()
            if not k.startswith("_") and isinstance(v, int | float | str | bool) and k != "sweep_interval_ms"
        } | {"scan": self.scan}

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "beat": self.beat, **self.params()}


class LeasePolicy(ReclaimPolicy):
    """A lock with a `PX` lease, renewed by a heartbeat; the sweep reclaims jobs whose lock is gone.

    `lease`, `beat` and `scan` are seconds. `two_phase` selects BullMQ's mark-then-move sweep (default) or a
    single pass. `renewal` overrides the default rule `RenewalRule.every(beat)` (e.g. BullMQ's exact rule);
    `track_by` ("token" or "job") sets the rule's lock-manager keying. `take` is "atomic" (a blocking move
    Redis serves even to a frozen client) or "after-wakeup" (BullMQ: marker wake-up, then moveToActive;
    idle takers wait up to `drain_delay` s); `lazy_fail` fails a job past `max_stalled` at its next take;
    `fetch_next` makes an accepted finish take the slot's next job in the same step (BullMQ's moveToFinished).
    """

    def __init__(
        self,
        lease: float = 30.0,
        beat: float = 10.0,
        scan: float = 5.0,
        *,
        two_phase: bool = True,
        max_stalled: int | None = 1,
        swept_by: SweptBy = "workers",
        renewal: RenewalRule | None = None,
        name: str = "lease",
        take: str = "atomic",
        drain_delay: float = 5.0,
        lazy_fail: bool = False,
        track_by: str | None = None,
        fetch_next: bool = False,
    ) -> None:
        _require_positive("lease", lease)
        _require_positive("drain_delay", drain_delay)
        require_bool("two_phase", two_phase)
        require_whole("max_stalled", max_stalled, none=True)
        require_instance("name", name, str, "a string")
        if take not in ("atomic", "after-wakeup"):
            raise ConfigError(f"take must be 'atomic' or 'after-wakeup', got {take!r}")
        if not isinstance(lazy_fail, bool):
            raise ConfigError(f"lazy_fail must be true or false, got {lazy_fail!r}")
        require_bool("fetch_next", fetch_next)
        _require_positive("beat", beat)
        _require_positive("scan", scan)
        if beat >= lease:
            raise ConfigError(
                f"beat ({beat:g} s) must be shorter than the lease ({lease:g} s): the lock would lapse "
                "between renewals; try beat <= lease/3"
            )
        if max_stalled is not None and max_stalled < 0:
            raise ConfigError(f"max_stalled must be >= 0 or None, got {max_stalled}")
        if swept_by not in ("workers", "reaper"):
            raise ConfigError(f"swept_by must be 'workers' or 'reaper', got {swept_by!r}")
        self.lease_ms = to_ms(lease)
        self.beat_ms = to_ms(beat)
        self.sweep_interval_ms = to_ms(scan)
        self.two_phase = two_phase
        self.max_stalled = max_stalled
        self.swept_by = swept_by
        self.renewal = renewal or RenewalRule.every(beat)
        if track_by is not None:
            self.renewal = replace(self.renewal, track_by=track_by)
        if self.renewal.tick_ms >= self.lease_ms:
            raise ConfigError("the renewal timer must tick more often than the lease lasts")
        self.name = name
        self.fenced = True
        self.take_after_wakeup = take == "after-wakeup"
        self.drain_delay_ms = to_ms(drain_delay)
        self.lazy_fail = lazy_fail
        self.fetch_next = fetch_next
        if lease / beat < 2:
            warnings.warn(
                f"lease/beat = {lease / beat:.2f} < 2: a single late or lost heartbeat lapses the lease",
                LeaseWarning,
                stacklevel=2,
            )

    @property
    def lease(self) -> float:
        """Seconds a lock lives without a renewal."""
        return self.lease_ms / 1000

    @property
    def beat(self) -> float:
        """Seconds between two heartbeats."""
        return self.beat_ms / 1000

    def settings(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "lease": to_s(self.lease_ms),
            "beat": to_s(self.beat_ms),
            "scan": to_s(self.sweep_interval_ms),
            "timeout": None,
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

    def __repr__(self) -> str:
        return (
            f"LeasePolicy(lease={to_s(self.lease_ms)}, beat={to_s(self.beat_ms)}, "
            f"scan={to_s(self.sweep_interval_ms)}, two_phase={self.two_phase})"
        )


class TimeoutPolicy(ReclaimPolicy):
    """The fixed-timeout reaper: every `scan` seconds, reclaim any active job older than `timeout` seconds.

    No heartbeat. Finishes are not token-checked unless `fenced=True`, so a late finish of a reclaimed job is
    accepted: the job has then completed twice.
    """

    def __init__(
        self,
        timeout: float = 600.0,
        scan: float = 5.0,
        *,
        fenced: bool = False,
        max_stalled: int | None = None,
        swept_by: SweptBy = "reaper",
        name: str = "timeout",
    ) -> None:
        _require_positive("timeout", timeout)
        _require_positive("scan", scan)
        require_bool("fenced", fenced)
        require_whole("max_stalled", max_stalled, none=True)
        require_instance("name", name, str, "a string")
        if swept_by not in ("workers", "reaper"):
            raise ConfigError(f"swept_by must be 'workers' or 'reaper', got {swept_by!r}")
        self.timeout_ms = to_ms(timeout)
        self.sweep_interval_ms = to_ms(scan)
        self.fenced = fenced
        self.max_stalled = max_stalled
        self.swept_by = swept_by
        self.renewal = None
        self.name = name

    @property
    def timeout(self) -> float:
        """Seconds after its take that an active job counts as dead."""
        return self.timeout_ms / 1000

    def settings(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "lease": None,
            "beat": None,
            "scan": to_s(self.sweep_interval_ms),
            "timeout": to_s(self.timeout_ms),
        }

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        return queue.reap(now_ms, self.timeout_ms, self.max_stalled)

    def __repr__(self) -> str:
        return f"TimeoutPolicy(timeout={to_s(self.timeout_ms)}, scan={to_s(self.sweep_interval_ms)})"
