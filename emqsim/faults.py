"""Fault plans (crash, stop-the-world freeze, blocked event loop, connection outage, silent partition, a
sandboxed child's crash) and the network model, as plain data.

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

from emqsim.distributions import DISTRIBUTIONS, Distribution, Fixed
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
    `duration`: a user-supplied ioredis client whose `retryStrategy` gave up (it returned no number: ioredis
    ends the connection for good), or BullMQ's blocking client left "reconnecting" (bullmq#648, #2466,
    #4585; BullMQ 6.7's blocking-wait watchdog resets it). `maxRetriesPerRequest` does not stop a client:
    it rejects pending commands and the client reconnects (`Network.max_retries_per_request`). The worker
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
class Partition(Outage):
    """A silent partition from `at` for `duration` seconds, of one worker's connection (`worker=2`) or every
    worker's (`worker=None`): packets are dropped, no FIN or RST arrives, so ioredis sees no close (it sets
    no command timeout by default, and its keep-alive, `setKeepAlive(true, 0)`, only probes an idle
    connection after the OS's tcp_keepalive_time, 7200 s). Requests and replies are held, not lost:

    - if TCP delivers before it gives up, the held bytes flow when the partition ends, at the first
      retransmission after that (`retransmit=True`: Linux's RTO backoff from 200 ms, doubling to 120 s,
      counted from `at`) or at once (`retransmit=False`: a link or proxy that holds bytes without dropping
      them); nothing is resent or run twice;
    - a connection with unacknowledged data gives up `give_up` seconds after `at` (Linux's
      tcp_retries2 = 15: 924.6 s, Documentation/networking/ip-sysctl.rst; a shorter TCP_USER_TIMEOUT or a
      proxy that closes after a chosen time sets it lower): ioredis sees the close, reconnects with BullMQ's
      retry strategy, and each attempt made while the partition lasts waits out `connect_timeout` (ioredis's
      connectTimeout, 10 s) unless a SYN retransmission (1, 3, 7 s after it, with `retransmit`) gets through
      once the partition is over; unanswered commands are then resent, as after an `Outage`.

    `lost_writes` and `redis_restart` do not apply (a partition is between clients and a Redis that stays up)."""

    give_up: float = 924.6
    connect_timeout: float = 10.0
    retransmit: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require_number("Partition.give_up", self.give_up)
        require_number("Partition.connect_timeout", self.connect_timeout)
        require_bool("Partition.retransmit", self.retransmit)
        if self.lost_writes > 0 or self.redis_restart:
            raise ConfigError(
                "Partition: lost_writes and redis_restart are kinds of Outage, not of a partition"
            )
        for name in ("give_up", "connect_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"Partition.{name} must be > 0 seconds, got {value}")

    def reconnect_after_ms(self) -> int:
        """ms from `at` until the connection carries traffic again (`partition_recovery_ms`)."""
        return partition_recovery_ms(
            to_ms(self.duration), to_ms(self.give_up), to_ms(self.connect_timeout), self.retransmit
        )


TCP_RTO_MIN_MS = 200  # Linux TCP_RTO_MIN (include/net/tcp.h); loopback and LAN RTTs sit below it
TCP_RTO_MAX_MS = 120_000  # Linux TCP_RTO_MAX
TCP_SYN_RETRIES_MS = (1000, 3000, 7000, 15000, 31000, 63000)  # a SYN's retransmissions (initial RTO 1 s)


def tcp_retransmissions_ms(retries: int = 15) -> list[int]:
    """ms after a segment's first send at which Linux retransmits it (RTO from TCP_RTO_MIN, doubling, capped
    at TCP_RTO_MAX), and last the give-up time: with tcp_retries2 = 15 the 15 retransmissions end at 204.6 +
    600 s and the connection is dropped at 924.6 s (the kernel's documented "hypothetical timeout")."""
    out, t, rto = [], 0, TCP_RTO_MIN_MS
    for _ in range(retries + 1):
        t += rto
        out.append(t)
        rto = min(2 * rto, TCP_RTO_MAX_MS)
    return out


def partition_recovery_ms(length_ms: int, give_up_ms: int, connect_timeout_ms: int, retransmit: bool) -> int:
    """ms from a silent partition's start until its connection carries traffic again (see `Partition`).

    Before the give-up: the partition's end, or with `retransmit` the first retransmission at or after it.
    Otherwise the connection closes at `give_up_ms`; reconnect attempt n comes `reconnect_delay_ms(n)`
    after the previous close; an attempt made while the partition lasts fails after `connect_timeout_ms`
    (unless, with `retransmit`, one of its SYN retransmissions falls after the end, within the timeout);
    the first attempt at or after the end connects at once."""
    if length_ms < give_up_ms:
        if not retransmit:
            return length_ms
        for t in tcp_retransmissions_ms()[:-1]:  # the last entry is the give-up itself
            if length_ms <= t < give_up_ms:
                return t
    closed, times = give_up_ms, 0
    while True:
        times += 1
        attempt = closed + reconnect_delay_ms(times)
        if attempt >= length_ms:
            return attempt
        if not retransmit and attempt + connect_timeout_ms > length_ms:
            return length_ms  # the held SYN goes through when the partition ends
        if retransmit:
            for syn in TCP_SYN_RETRIES_MS:
                if syn < connect_timeout_ms and attempt + syn >= length_ms:
                    return attempt + syn
        closed = attempt + connect_timeout_ms


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
_CAPPED_FROM = 10  # the first attempt whose delay is the cap


def reconnect_attempt_ms(k: int) -> int:
    """ms from a disconnect until reconnect attempt `k` (0: the disconnect itself), the attempts following
    BullMQ's retry strategy (`reconnect_delay_ms`): 1000, 2000, ..., 6000, 7096, 10076, 18179, 38179 ms,
    then every 20 s."""
    if k <= _CAPPED_FROM:
        return sum(reconnect_delay_ms(i) for i in range(1, k + 1))
    return reconnect_attempt_ms(_CAPPED_FROM) + (k - _CAPPED_FROM) * _MAX_RECONNECT_DELAY_MS


def max_retries_flush_ms(n: int, after_ms: int) -> int:
    """ms from a disconnect until the first flush of ioredis's command queues later than `after_ms` (ms from
    the same disconnect; negative for before it), for a client with `maxRetriesPerRequest` = n >= 0.

    ioredis's close handler (built/redis/event_handler.js:185-210) counts every close, the disconnect and
    each failed reconnect attempt, in `retryAttempts` (reset on ready) and, when `retryAttempts % (n + 1)`
    is 0, rejects every command of the offline queue and every sent, unanswered one with
    MaxRetriesPerRequestError. Close number j comes with attempt j - 1's failure, so the flushes come at
    attempts n, 2n + 1, 3n + 2, ... (`reconnect_attempt_ms`); only those before the reconnect happen."""
    if after_ms < 0:
        k = 0
    elif after_ms < reconnect_attempt_ms(_CAPPED_FROM):
        k = next(i for i in range(_CAPPED_FROM + 1) if reconnect_attempt_ms(i) > after_ms)
    else:
        k = _CAPPED_FROM + (after_ms - reconnect_attempt_ms(_CAPPED_FROM)) // _MAX_RECONNECT_DELAY_MS + 1
    k = -(-(k + 1) // (n + 1)) * (n + 1) - 1  # the first flushing close at or after attempt k
    return reconnect_attempt_ms(k)


def finish_fate(n: int, down_ms: int, sent_ms: int = -1) -> str:
    """What becomes of a BullMQ finish (moveToCompleted) sent `sent_ms` after its worker's connection
    dropped (negative, the default: on the wire when it dropped; one sent in a flush's own millisecond comes
    after that flush, as in the simulator's event order, and waits for the next), the network back `down_ms`
    after the drop, on a Worker whose client has `maxRetriesPerRequest` = n: "waits" (it reaches Redis at the
    reconnect), "failed" (rejected at a flush; the moveToFailed BullMQ sends then reaches Redis at the
    reconnect: the job fails with the error, or is retried if attempts are left) or "lost" (the moveToFailed
    is rejected at the next flush too: the job stays active, its lock lapses and the stalled check moves it
    back to run again). The same rule as `Client.flush_at`'s."""
    back = reconnect_after_ms(down_ms)
    first = max_retries_flush_ms(n, sent_ms)
    if first >= back:
        return "waits"
    return "lost" if max_retries_flush_ms(n, first) < back else "failed"


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


# (at, length) in ms, the worker (None: every worker), and for a `Partition` the ms from `at` until traffic
# flows again (None: an outage, back at BullMQ's reconnect backoff from `at`)
OutageSpan = tuple[int, int, "int | None", "int | None"]
OutageWindow = tuple[int, int, int]  # (disconnected, network back, reconnected) in ms


def outage_spans(faults: Iterable[object]) -> list[OutageSpan]:
    """A scenario's explicit outages and silent partitions as (at, length, worker or None, recovery or
    None) in ms, in time order (an everyone-outage before a one-worker outage at the same moment)."""
    spans = [
        (
            to_ms(f.at),
            to_ms(f.duration),
            f.worker,
            f.reconnect_after_ms() if isinstance(f, Partition) else None,
        )
        for f in faults
        if isinstance(f, Outage)
    ]
    return sorted(
        spans, key=lambda s: (s[0], s[1], -1 if s[2] is None else s[2], -1 if s[3] is None else s[3])
    )


def redis_down_windows(faults: Iterable[object], horizon_ms: int) -> list[OutageWindow]:
    """The scenario's Redis restarts as the producer's and the reaper's connection outages (they are cut off
    only when Redis itself is down), with the same reconnect backoff as the workers'."""
    spans: list[OutageSpan] = [
        (to_ms(f.at), to_ms(f.duration), None, None)
        for f in faults
        if isinstance(f, Outage) and f.redis_restart
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
    found: list[tuple[int, int, int | None]] = [
        (max(at, start_ms), at + length, None if recovery is None else at + recovery)
        for at, length, target, recovery in spans
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
            found.append((t, t + length, None))
    windows: list[OutageWindow] = []
    for begin, up, flows in sorted(found, key=lambda w: (w[0], w[1])):
        if windows and begin < windows[-1][2]:  # overlapping: one window from the first disconnect
            first, earlier_up, earlier_back = windows[-1]
            up = max(up, earlier_up)
            back = first + reconnect_after_ms(up - first) if flows is None else flows
            windows[-1] = (first, up, max(back, earlier_back))
        else:
            windows.append((begin, up, begin + reconnect_after_ms(up - begin) if flows is None else flows))
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
            require_instance(f"RandomFaults.{name}", getattr(self, name), DISTRIBUTIONS, "a Distribution")
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
    (a lost renewal simply does not extend the lock; other requests are retried).

    `resend_twice`: a command whose reply a connection drop (an `Outage`) caught had already run at Redis,
    and ioredis resends it after the reconnect (`autoResendUnfulfilledCommands`, on by default), so it runs
    twice: a renewal extends the lock again, a finish is refused the second time ("Missing lock"), and a job
    the first run took (a take, or a finish's fetchNext) is orphaned until its lease lapses. Off by default
    (the command runs once and its reply is read after the reconnect); not meant for a `Partition` that TCP
    did not give up on, where nothing is resent.

    `max_retries_per_request` = n: ioredis's `maxRetriesPerRequest` of each worker's main client (the one
    that takes, renews and finishes; BullMQ 6.7 leaves it at ioredis's default 20 when it builds that
    client from connection options, and a user-supplied IORedis instance keeps its own, which a Worker
    accepts only as 0 or null). During an outage ioredis rejects every command still waiting at its n-th,
    (2n + 1)-th, ... failed reconnect attempt (`max_retries_flush_ms`): a rejected renewal is lost, a
    rejected take is sent again, a rejected finish makes BullMQ send moveToFailed, which fails the job if
    it gets through and is lost if it is rejected too (`finish_fate`). None (the default): null, commands
    wait for the reconnect however long it takes. Stalled checks and the blocking client's commands are
    not rejected (BullMQ forces null on the blocking client); not modelled for a `Partition`.

    `skipped_ticks`: the probability that a worker's renewal timer tick with jobs due renews nothing (BullMQ's
    LockManager: the strict `ts + lockRenewTime/2 < now` check fails when `now - ts` is exactly
    lockRenewTime/2 in whole ms of two clocks, so the jobs keep their `ts` and the next tick renews them; a
    plain lease: that beat's batch is not sent). It stands for that sub-ms timing rule at its measured rate
    (up to 1% of ticks on a loaded 2-core box, docs/bullmq-validation.md): each tick draws from the worker's
    own "ticks" stream, only when `skipped_ticks > 0`. A skip is recorded as a `renew_skipped` lock event.
    It sits with the network because it is the worker's environment (a quick reply within the loop's
    millisecond), not a policy's rule: every policy sees the same draws. 0 by default."""

    rtt: Distribution = Fixed(0.002)
    loss: float = 0.0
    loss_on: str = "renewals"
    command_timeout: float = 1.0
    resend_twice: bool = False
    max_retries_per_request: int | None = None
    skipped_ticks: float = 0.0

    def __post_init__(self) -> None:
        require_instance("Network.rtt", self.rtt, DISTRIBUTIONS, "a Distribution, e.g. Fixed(0.002)")
        if self.max_retries_per_request is not None and (
            isinstance(self.max_retries_per_request, bool)
            or not isinstance(self.max_retries_per_request, int)
            or self.max_retries_per_request < 0
        ):
            raise ConfigError(
                "network max_retries_per_request must be a whole number >= 0 (ioredis's maxRetriesPerRequest "
                f"of the workers' main client; leave it out for null), got {self.max_retries_per_request!r}"
            )
        require_number("Network.loss", self.loss)
        require_number("Network.command_timeout", self.command_timeout)
        require_bool("Network.resend_twice", self.resend_twice)
        if not (0.0 <= self.loss < 1.0):
            raise ConfigError(f"network loss must be a probability in [0, 1), got {self.loss}")
        if self.loss_on not in ("renewals", "all"):
            raise ConfigError(f"network loss_on must be 'renewals' or 'all', got {self.loss_on!r}")
        if not (self.command_timeout > 0):
            raise ConfigError(f"network command_timeout must be > 0 seconds, got {self.command_timeout}")
        require_number("Network.skipped_ticks", self.skipped_ticks)
        if not (0.0 <= self.skipped_ticks < 1.0):
            raise ConfigError(
                f"Network.skipped_ticks must be a probability in [0, 1), e.g. 0.01, got {self.skipped_ticks}"
            )


@dataclass(frozen=True)
class MemoryPressure:
    """Redis runs with `maxmemory` bytes and `policy` (`maxmemory-policy`, sampling `samples` keys) and
    shares its memory with another tenant, a cache that writes `cache_rate` keys a second (a Poisson
    stream from the run's "memory" stream) of `cache_bytes` bytes each with a TTL of `cache_ttl` seconds.
    Once the memory is full, Redis evicts before each command (Redis 7's sampled approximate LRU/LFU/TTL,
    `emqsim.store.eviction`); under a `volatile-*` policy the candidates are the keys with a TTL: the cache's
    and the queue's locks. A lock evicted from a live worker is recorded as `memory_evicted`; its renewals
    fail from then on and the stalled sweep reclaims the job (BullMQ only warns about the policy).
    `latency_tracking` (Redis 7's default): every command name Redis has run holds a 24,688-byte latency
    histogram within `maxmemory` (emqsim's scripts' 0.37 MB, BullMQ's 0.81 MB); False for a server with
    `latency-tracking no`."""

    maxmemory: int
    policy: str = "volatile-lru"
    samples: int = 5
    cache_rate: float = 0.0
    cache_bytes: int = 1000
    cache_ttl: float = 3600.0
    latency_tracking: bool = True

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
        require_bool("MemoryPressure.latency_tracking", self.latency_tracking)

    worker = None  # memory pressure is Redis's, not a worker's
    job = None
