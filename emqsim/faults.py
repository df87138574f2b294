"""Fault plans (crash, stop-the-world freeze, blocked event loop, connection outage, a sandboxed child's
crash) and the network model, as plain data.

A fault hits either a worker at an absolute time (`worker=2, at=30`) or whichever worker runs a job's first
attempt, some seconds into it (`job=0, after=1`: "the worker dies 1 s into its job"). `after` and `duration`
take a number of seconds or a distribution; draws come from the run's seeded fault stream. An `Outage` hits one
worker's connection or every worker's at once (a network blip, a Redis restart), from an absolute time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from emqsim.distributions import Distribution, Fixed
from emqsim.errors import (
    ConfigError,
    WrongType,
    require_bool,
    require_instance,
    require_number,
    require_whole,
)
from emqsim.units import to_ms

Seconds = float | Distribution


def _check_target(kind: str, worker: int | None, at: float | None, job: int | None) -> None:
    require_whole(f"{kind}.worker", worker, none=True)
    require_number(f"{kind}.at", at, none=True)
    require_whole(f"{kind}.job", job, none=True)
    by_worker = worker is not None and at is not None
    by_job = job is not None
    if by_worker == by_job:
        raise ConfigError(
            f"{kind} needs either worker= and at= (absolute time) or job= and after= (into the job)"
        )
    if worker is not None and at is not None and (worker < 0 or not math.isfinite(at) or at < 0):
        raise ConfigError(f"{kind}: worker must be >= 0 and at >= 0 seconds, got worker={worker}, at={at}")
    if job is not None and job < 0:
        raise ConfigError(f"{kind}: job must be >= 0, got {job}")


def as_distribution(value: Seconds, name: str) -> Distribution:
    """`value` seconds as a distribution (a number is Fixed); anything else than a number >= 0 or a
    Distribution is refused, naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int | float | Distribution):
        raise WrongType(
            f"{name} must be seconds (a number) or a Distribution such as Fixed(5.0), got {value!r}"
        )
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name} must be >= 0 seconds, got {value}")
        return Fixed(float(value))
    return value


@dataclass(frozen=True)
class Crash:
    """The worker dies (SIGKILL): it never renews again. With `restart_after`, a new worker replaces it."""

    worker: int | None = None
    at: float | None = None
    job: int | None = None
    after: Seconds = 0.0
    restart_after: float | None = None

    def __post_init__(self) -> None:
        _check_target("Crash", self.worker, self.at, self.job)
        as_distribution(self.after, "Crash.after")
        require_number("Crash.restart_after", self.restart_after, none=True)
        if self.restart_after is not None and not (self.restart_after >= 0):
            raise ConfigError(f"Crash.restart_after must be >= 0 seconds, got {self.restart_after}")


@dataclass(frozen=True)
class Freeze:
    """A stop-the-world pause (GC, blocked event loop, SIGSTOP): neither job nor heartbeat advances."""

    duration: Seconds
    worker: int | None = None
    at: float | None = None
    job: int | None = None
    after: Seconds = 0.0

    def __post_init__(self) -> None:
        _check_target("Freeze", self.worker, self.at, self.job)
        as_distribution(self.after, "Freeze.after")
        as_distribution(self.duration, "Freeze.duration")


@dataclass(frozen=True)
class Block:
    """The worker's event loop is blocked (a CPU-bound section of a job in Node): the job's work goes on, but
    no timer fires and no reply is read, so the lock manager sends no renewal and the worker takes no job.
    Timers that came due fire once when the loop frees; the lease lapses if the block outlasts it."""

    duration: Seconds
    worker: int | None = None
    at: float | None = None
    job: int | None = None
    after: Seconds = 0.0

    def __post_init__(self) -> None:
        _check_target("Block", self.worker, self.at, self.job)
        as_distribution(self.after, "Block.after")
        as_distribution(self.duration, "Block.duration")


@dataclass(frozen=True)
class Outage:
    """The connection to Redis is down from `at` for `duration` seconds: one worker's (`worker=2`) or every
    worker's at once (`worker=None`: a network blip at Redis, a Redis restart that keeps its data). Clients
    behave as ioredis under BullMQ (`maxRetriesPerRequest: null`): commands wait in the offline queue and
    unanswered ones are resent once the client reconnects; reconnect attempts follow BullMQ's retry strategy
    (`reconnect_delay_ms`), so the client is back at the first attempt after the network is.

    `lost_writes` > 0 makes it a failover to an asynchronous replica that lags that many seconds: every write
    Redis applied in the last `lost_writes` seconds before `at` is lost (the promoted replica has the data as
    of `at - lost_writes`): a take's job is back in `wait` (its worker's finish is refused), a finish's job is
    back in `active` with its lock (it runs again), an add's job is gone, a renewal's lock is back to its
    earlier expiry, a sweep's moves are undone.

    `redis_restart` makes it Redis itself going down for `duration` and coming back with its data (a
    `SHUTDOWN` that saves, then a start that loads the file; expiries are absolute, so a lock whose time
    passed meanwhile is gone): every client is cut off, the producer's adds and the timeout reaper too, not
    only the workers (a plain outage of every worker is a network blip on the workers' side).

    `recovers=False` makes the workers' clients never come back, though Redis and the network are back after
    `duration`: a user-supplied ioredis client that gave up (`maxRetriesPerRequest`, 20 by default, then every
    command fails), or BullMQ's blocking client left "reconnecting" (bullmq#648, #2466, #4585). The worker
    stops fetching and renewing; its jobs' work goes on but their finishes never arrive, so the sweep takes
    them back from a worker that is alive (`disconnected`).

    `readonly` > 0 (a failover, `lost_writes` > 0): the clients come back to the demoted primary, now a
    replica, and every write of theirs (a take, a renewal, a finish, a sweep: all of BullMQ's calls write)
    is refused with `READONLY` for `readonly` seconds from the network's return. ioredis hands the error to
    the caller and stays connected (`reconnectOnError` is the user's, unset by default), so `readonly` is how
    long until something else moves the clients (a Sentinel's switch, a killed connection); `math.inf` for
    never. BullMQ 6 retries a refused take at once, keeps renewing a refused lock, and gives a refused finish
    up (its moveToFailed is refused too): the job is reclaimed later. The producer is not affected."""

    at: float
    duration: float
    worker: int | None = None
    lost_writes: float = 0.0
    redis_restart: bool = False
    recovers: bool = True
    readonly: float = 0.0

    def __post_init__(self) -> None:
        for name in ("at", "duration", "lost_writes"):
            require_number(f"Outage.{name}", getattr(self, name))
        require_whole("Outage.worker", self.worker, none=True)
        require_bool("Outage.redis_restart", self.redis_restart)
        require_bool("Outage.recovers", self.recovers)
        require_number("Outage.readonly", self.readonly)
        if not (self.readonly >= 0):
            raise ConfigError(f"Outage.readonly must be >= 0 seconds, got {self.readonly}")
        if self.readonly > 0 and self.lost_writes <= 0:
            raise ConfigError(
                "Outage.readonly is a failover's demoted primary: give lost_writes > 0 (the replica's lag)"
            )
        if not (math.isfinite(self.at) and self.at >= 0):
            raise ConfigError(f"Outage.at must be >= 0 seconds, got {self.at}")
        if not (math.isfinite(self.lost_writes) and self.lost_writes >= 0):
            raise ConfigError(f"Outage.lost_writes must be >= 0 seconds, got {self.lost_writes}")
        if self.lost_writes > 0 and self.worker is not None:
            raise ConfigError(
                "Outage.lost_writes is a Redis failover: it hits every worker (leave worker out)"
            )
        if not (math.isfinite(self.duration) and self.duration > 0):
            raise ConfigError(f"Outage.duration must be > 0 seconds, got {self.duration}")
        if self.redis_restart and (self.worker is not None or self.lost_writes > 0):
            raise ConfigError(
                "Outage.redis_restart is Redis going down with its data kept: it hits every client (leave "
                "worker out) and loses no writes (a failover with lost_writes is the other kind)"
            )
        if self.worker is not None and self.worker < 0:
            raise ConfigError(f"Outage.worker must be >= 0 (or omitted for every worker), got {self.worker}")

    job = None  # an outage targets connections, never a job


@dataclass(frozen=True)
class ChildCrash:
    """A sandboxed processor's child process dies `after` seconds into job `job`'s first attempt: the parent
    worker stays alive and fails the job at once ("Unexpected exit code"), without waiting for the lease."""

    job: int
    after: Seconds = 0.0

    def __post_init__(self) -> None:
        require_whole("ChildCrash.job", self.job)
        if self.job < 0:
            raise ConfigError(f"ChildCrash: job must be >= 0, got {self.job}")
        as_distribution(self.after, "ChildCrash.after")

    worker = None  # hits a job's worker, never a worker by id


def reconnect_delay_ms(times: int) -> int:
    """BullMQ's ioredis retry strategy: `Math.max(Math.min(Math.exp(times), 20000), 1000)` ms before
    reconnect attempt `times` (1, 2, ...); whole ms, as the timer runs them."""
    return int(max(min(math.exp(min(times, 20)), 20000.0), 1000.0))


def reconnect_after_ms(down_ms: int) -> int:
    """How long after a disconnect the client is connected again when the network is back `down_ms` after
    it: the first reconnect attempt at or after `down_ms` (attempts are made at the cumulative retry delays
    and succeed at once once Redis is reachable)."""
    elapsed, times = 0, 0
    while elapsed < down_ms and reconnect_delay_ms(times + 1) < _MAX_RECONNECT_DELAY_MS:
        times += 1
        elapsed += reconnect_delay_ms(times)
    if elapsed < down_ms:  # from here every attempt waits the 20 s cap: count them, not step them
        elapsed += -(-(down_ms - elapsed) // _MAX_RECONNECT_DELAY_MS) * _MAX_RECONNECT_DELAY_MS
    return elapsed


_MAX_RECONNECT_DELAY_MS = 20000  # reconnect_delay_ms's cap, reached at attempt 10 (e^10 > 20000)

NEVER_MS = 2**62  # the reconnect time of a client that never recovers (`Outage(recovers=False)`)


def never_recovers(
    windows: list[OutageWindow], faults: Iterable[object], wid: int, restarted: bool
) -> list[OutageWindow]:
    """Worker `wid`'s outage `windows` with the first outage that does not recover (`Outage(recovers=False)`
    for it or for everyone) ending in no reconnect at all: that window's reconnect is `NEVER_MS`, and later
    windows are dropped (the client is gone for good). A replacement worker (`restarted`) starts afresh."""
    stuck = [
        to_ms(f.at)
        for f in faults
        if isinstance(f, Outage)
        and not f.recovers
        and (f.worker is None or (f.worker == wid and not restarted))
    ]
    if not stuck:
        return windows
    at = min(stuck)
    out: list[OutageWindow] = []
    for begin, up, back in windows:
        if begin <= at < back:
            out.append((begin, up, NEVER_MS))
            break
        out.append((begin, up, back))
    return out


OutageSpan = tuple[int, int, "int | None"]  # (at, length) in ms, and the worker (None: every worker)
OutageWindow = tuple[int, int, int]  # (disconnected, network back, reconnected) in ms


def outage_spans(faults: Iterable[object]) -> list[OutageSpan]:
    """A scenario's explicit outages as (at, length, worker or None) in ms, in time order."""
    spans = [(to_ms(f.at), to_ms(f.duration), f.worker) for f in faults if isinstance(f, Outage)]
    return sorted(spans, key=lambda s: (s[0], s[1], -1 if s[2] is None else s[2]))  # everyone's first


def redis_down_windows(faults: Iterable[object], horizon_ms: int) -> list[OutageWindow]:
    """The scenario's Redis restarts as the producer's and the reaper's connection outages (they are cut off
    only when Redis itself is down), with the same reconnect backoff as the workers'."""
    spans = [
        (to_ms(f.at), to_ms(f.duration), None) for f in faults if isinstance(f, Outage) and f.redis_restart
    ]
    return outage_windows(sorted(spans), -1, 0, False, None, horizon_ms, _no_stream)


def overlaps_restart(
    window: tuple[float, float, float], redis_down: Iterable[tuple[float, float, float]]
) -> bool:
    """Whether Redis restarts during a client's outage `window` (disconnected, up, reconnected; any unit)."""
    begin, _, back = window
    return any(b < back and begin < r for b, _, r in redis_down)


def disconnect_detail(window: OutageWindow, redis_down: list[OutageWindow]) -> str:
    """The `disconnect` record's detail: whose outage it is (Redis restarting, or the connection's) and when
    the far side is back."""
    begin, up, _ = window
    return f"{'Redis restarting' if overlaps_restart(window, redis_down) else 'network'} back in {(up - begin) / 1000:g} s"


def _no_stream() -> np.random.Generator:
    raise AssertionError("Redis restarts are explicit faults: no random draws")


def outage_windows(
    spans: list[OutageSpan],
    wid: int,
    start_ms: int,
    restarted: bool,
    random_faults: RandomFaults | None,
    horizon_ms: int,
    rng: Callable[[], np.random.Generator],
) -> list[OutageWindow]:
    """Worker `wid`'s connection outages as (disconnected, network back, reconnected) in ms, for a worker
    started at `start_ms`: the scenario's `spans` for it (not for a replacement that took a crashed worker's
    place: `restarted`) or for everyone, and its random ones drawn from `rng()` (the run's seeded stream
    ("faults", wid, 3); called only when `random_faults` has outages) up to the horizon; overlapping ones
    merge, and the reconnect follows BullMQ's retry strategy from the disconnect. The simulator and the live
    mode both take a worker's windows from here."""
    found = [
        (max(at, start_ms), at + length)
        for at, length, target in spans
        if (target is None or (target == wid and not restarted)) and at + length > start_ms
    ]
    if random_faults is not None and random_faults.outage_rate > 0:
        draws = rng()
        mean_gap_s = 3600.0 / random_faults.outage_rate
        t = start_ms
        while True:
            t += max(1, to_ms(draws.exponential(mean_gap_s)))
            if t >= horizon_ms:
                break
            length = max(1, to_ms(float(random_faults.outage_duration.sample(draws, 1)[0])))
            found.append((t, t + length))
    windows: list[OutageWindow] = []
    for begin, up in sorted(found):
        if windows and begin < windows[-1][2]:
            first = windows[-1][0]
            up = max(up, windows[-1][1])
            windows[-1] = (first, up, first + reconnect_after_ms(up - first))
        else:
            windows.append((begin, up, begin + reconnect_after_ms(up - begin)))
    return windows


@dataclass(frozen=True)
class RandomFaults:
    """Faults drawn per worker as Poisson processes (rates per worker-hour): crashes, stop-the-world freezes,
    blocked event loops (`block_rate`, lengths `block_duration`) and connection outages (`outage_rate`,
    lengths `outage_duration`)."""

    crash_rate: float = 0.0
    restart_after: float | None = 5.0
    freeze_rate: float = 0.0
    freeze_duration: Distribution = Fixed(1.0)
    block_rate: float = 0.0
    block_duration: Distribution = Fixed(1.0)
    outage_rate: float = 0.0
    outage_duration: Distribution = Fixed(5.0)

    def __post_init__(self) -> None:
        require_number("RandomFaults.restart_after", self.restart_after, none=True)
        for name in ("freeze_duration", "block_duration", "outage_duration"):
            require_instance(f"RandomFaults.{name}", getattr(self, name), Distribution, "a Distribution")
        for name in ("crash_rate", "freeze_rate", "block_rate", "outage_rate"):
            value = getattr(self, name)
            require_number(f"RandomFaults.{name}", value)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"RandomFaults.{name} must be >= 0 per worker-hour, got {value}")


@dataclass(frozen=True)
class Network:
    """Worker <-> Redis round trips: each takes `rtt` seconds (drawn per request, at least 1 ms), half each
    way. A request is lost with probability `loss` (on renewals only, or on every request with
    `loss_on="all"`); a lost request never reaches Redis, and the client learns it after `command_timeout`
    (a lost renewal simply does not extend the lock; other requests are retried)."""

    rtt: Distribution = Fixed(0.002)
    loss: float = 0.0
    loss_on: str = "renewals"
    command_timeout: float = 1.0

    def __post_init__(self) -> None:
        require_instance("Network.rtt", self.rtt, Distribution, "a Distribution, e.g. Fixed(0.002)")
        require_number("Network.loss", self.loss)
        require_number("Network.command_timeout", self.command_timeout)
        if not (0.0 <= self.loss < 1.0):
            raise ConfigError(f"network loss must be a probability in [0, 1), got {self.loss}")
        if self.loss_on not in ("renewals", "all"):
            raise ConfigError(f"network loss_on must be 'renewals' or 'all', got {self.loss_on!r}")
        if not (self.command_timeout > 0):
            raise ConfigError(f"network command_timeout must be > 0 seconds, got {self.command_timeout}")


@dataclass(frozen=True)
class MemoryPressure:
    """Redis runs with `maxmemory` bytes and `policy` (`maxmemory-policy`, sampling `samples` keys) and
    shares its memory with another tenant, a cache that writes `cache_rate` keys a second (a Poisson
    stream from the run's "memory" stream) of `cache_bytes` bytes each with a TTL of `cache_ttl` seconds.
    Once the memory is full, Redis evicts before each command (Redis 7's sampled approximate LRU/LFU/TTL,
    `emqsim.store.eviction`); under a `volatile-*` policy the candidates are the keys with a TTL: the cache's
    and the queue's locks. A lock evicted from a live worker is recorded as `memory_evicted`; its renewals
    fail from then on and the stalled sweep reclaims the job (BullMQ only warns about the policy)."""

    maxmemory: int
    policy: str = "volatile-lru"
    samples: int = 5
    cache_rate: float = 0.0
    cache_bytes: int = 1000
    cache_ttl: float = 3600.0

    def __post_init__(self) -> None:
        from emqsim.store.eviction import POLICIES

        for name in ("maxmemory", "samples", "cache_bytes"):
            require_whole(f"MemoryPressure.{name}", getattr(self, name))
        require_number("MemoryPressure.cache_rate", self.cache_rate)
        require_number("MemoryPressure.cache_ttl", self.cache_ttl)
        if self.maxmemory < 1:
            raise ConfigError(f"MemoryPressure.maxmemory must be >= 1 byte, got {self.maxmemory}")
        if self.policy not in POLICIES:
            raise ConfigError(
                f"MemoryPressure.policy must be one of {', '.join(POLICIES)}, got {self.policy!r}"
            )
        if not 1 <= self.samples <= 64:
            raise ConfigError(
                f"MemoryPressure.samples must be in 1..64 (maxmemory-samples), got {self.samples}"
            )
        if not (math.isfinite(self.cache_rate) and self.cache_rate >= 0):
            raise ConfigError(f"MemoryPressure.cache_rate must be >= 0 keys a second, got {self.cache_rate}")
        if self.cache_bytes < 0:
            raise ConfigError(f"MemoryPressure.cache_bytes must be >= 0, got {self.cache_bytes}")
        if not (math.isfinite(self.cache_ttl) and self.cache_ttl >= 0.001):
            raise ConfigError(f"MemoryPressure.cache_ttl must be >= 0.001 seconds, got {self.cache_ttl}")

    worker = None  # memory pressure is Redis's, not a worker's
    job = None
