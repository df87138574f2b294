"""Scenarios: the workload, the workers and the faults (everything except the reclaim policy and the seed).

The standard scenarios every surface uses live in `STANDARD`; each is a function taking the knobs a user
would vary and returning a `Scenario`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from emqsim.distributions import DISTRIBUTIONS, Distribution, Fixed, LogNormal
from emqsim.errors import ConfigError, require_instance, require_number
from emqsim.faults import (  # noqa: F401
    Block,
    ChildCrash,
    Crash,
    Freeze,
    MemoryPressure,
    Network,
    Outage,
    Partition,
    RandomFaults,
)


@dataclass(frozen=True)
class Scenario:
    """What happens in one run, in seconds.

    jobs          how many jobs arrive: all at t=0, or as a Poisson stream with `arrival_rate` per second
    duration      each job's work (drawn once per job: a retried job needs the same work again)
    faults        explicit crashes, freezes, blocked loops, connection outages and sandboxed children's
                  crashes; `random_faults` draws more per worker
    phases        "random": workers started at arbitrary times in real deployments, so each worker's renewal
                  timer starts at a uniformly drawn offset, one random worker holds the sweep rate limit
                  and the others' sweep attempts come uniform offsets in (0, scan] after its sweeps;
                  "aligned": all at t=0
    horizon       the run stops here even if jobs are still held (nothing reclaims them if every worker
                  is dead and there is no reaper)
    hz            Redis's active-expire frequency
    remove_on_complete  a completed job's hash is deleted and its id not kept in `completed` (BullMQ's
                  `removeOnComplete: true`): Redis memory stays bounded by the jobs in flight
    attempts      BullMQ's job option `attempts` (default 1): a job its own worker fails (a sandboxed
                  child's crash) goes back to `wait` until it has failed this many times
    """

    name: str = "custom"
    workers: int = 1
    concurrency: int = 1
    jobs: int = 1
    arrival_rate: float | None = None
    duration: Distribution = Fixed(60.0)
    faults: tuple[Crash | Freeze | Block | Outage | ChildCrash | MemoryPressure, ...] = ()
    random_faults: RandomFaults | None = None
    network: Network = field(default_factory=Network)
    phases: Literal["random", "aligned"] = "random"
    horizon: float = 3600.0
    hz: int = 10
    queue: str = "default"
    remove_on_complete: bool = False
    attempts: int = 1

    def __post_init__(self) -> None:
        for name in ("name", "queue"):
            require_instance(f"Scenario.{name}", getattr(self, name), str, "a string")
        require_instance(
            "Scenario.duration", self.duration, DISTRIBUTIONS, "a Distribution, e.g. Fixed(60.0) for 60 s"
        )
        require_instance(
            "Scenario.faults", self.faults, tuple, "a tuple of faults, e.g. (Crash(job=0, after=1.0),)"
        )
        for index, fault in enumerate(self.faults):
            require_instance(
                f"Scenario.faults[{index}]", fault, (Crash, Freeze, Block, Outage, ChildCrash, MemoryPressure),
                "a Crash, Freeze, Block, Outage, ChildCrash or MemoryPressure",
            )  # fmt: skip
        if self.random_faults is not None:
            require_instance(
                "Scenario.random_faults", self.random_faults, RandomFaults, "RandomFaults or None"
            )
        require_instance("Scenario.network", self.network, Network, "a Network, e.g. Network()")
        require_number("Scenario.arrival_rate", self.arrival_rate, none=True)
        require_number("Scenario.horizon", self.horizon)
        for name in ("workers", "concurrency", "jobs", "attempts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"scenario {name} must be a whole number >= 1, got {value!r}")
        if self.arrival_rate is not None and not (math.isfinite(self.arrival_rate) and self.arrival_rate > 0):
            raise ConfigError(f"arrival_rate must be > 0 jobs per second, got {self.arrival_rate}")
        if not (math.isfinite(self.horizon) and self.horizon > 0):
            raise ConfigError(f"horizon must be > 0 seconds, got {self.horizon}")
        if self.horizon < 0.001:
            raise ConfigError(
                f"horizon must be at least 0.001 s (the clock counts whole milliseconds), got {self.horizon:g}"
            )
        if self.phases not in ("random", "aligned"):
            raise ConfigError(f"phases must be 'random' or 'aligned', got {self.phases!r}")
        if not isinstance(self.remove_on_complete, bool):
            raise ConfigError(f"remove_on_complete must be true or false, got {self.remove_on_complete!r}")
        if not isinstance(self.hz, int) or not 1 <= self.hz <= 500:
            raise ConfigError(f"hz must be a whole number in 1..500 (Redis's range), got {self.hz!r}")
        if sum(isinstance(f, MemoryPressure) for f in self.faults) > 1:
            raise ConfigError("a scenario has at most one MemoryPressure (Redis has one maxmemory)")
        for fault in self.faults:
            if fault.worker is not None and fault.worker >= self.workers:
                raise ConfigError(
                    f"a fault targets worker {fault.worker} but the scenario has {self.workers} workers (0..{self.workers - 1})"
                )
            if fault.job is not None and fault.job >= self.jobs:
                raise ConfigError(f"a fault targets job {fault.job} but the scenario has {self.jobs} jobs")
        if self.network.max_retries_per_request is not None and any(
            isinstance(f, Partition) for f in self.faults
        ):
            raise ConfigError(
                "network max_retries_per_request is not modelled with a Partition (ioredis sees no close "
                "until TCP gives up): use an Outage, or leave max_retries_per_request out"
            )

    def with_(self, **changes: Any) -> Scenario:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def slow_alive(duration: float = 900.0, workers: int = 2, horizon: float = 3600.0) -> Scenario:
    """One slow-but-alive job (15 minutes by default) whose worker keeps its heartbeat going."""
    return Scenario(name="slow-alive", workers=workers, jobs=1, duration=Fixed(duration), horizon=horizon)


def fast_dead(
    die_after: float | Distribution = 1.0, duration: float = 60.0, workers: int = 2, horizon: float = 3600.0
) -> Scenario:
    """The worker that takes the job dies `die_after` seconds into it; another worker is alive to recover it."""
    return Scenario(
        name="fast-dead",
        workers=workers,
        jobs=1,
        duration=Fixed(duration),
        faults=(Crash(job=0, after=die_after),),
        horizon=horizon,
    )


def frozen(
    freeze_for: float | Distribution = 45.0,
    freeze_after: float | Distribution = 5.0,
    duration: float = 120.0,
    workers: int = 2,
    horizon: float = 3600.0,
) -> Scenario:
    """A stop-the-world pause of `freeze_for` seconds, `freeze_after` seconds into the job; then it resumes."""
    return Scenario(
        name="frozen",
        workers=workers,
        jobs=1,
        duration=Fixed(duration),
        faults=(Freeze(job=0, after=freeze_after, duration=freeze_for),),
        horizon=horizon,
    )


def blocked_loop(
    block_for: float | Distribution = 45.0,
    block_after: float | Distribution = 5.0,
    duration: float = 120.0,
    workers: int = 2,
    concurrency: int = 1,
    horizon: float = 3600.0,
) -> Scenario:
    """A CPU-bound section blocks the worker's event loop for `block_for` seconds, `block_after` seconds into
    the job: the work goes on but no renewal is sent, so a block longer than the lease lapses the lock of a
    worker that is alive and working (BullMQ's most reported "job stalled" cause)."""
    return Scenario(
        name="blocked-loop",
        workers=workers,
        concurrency=concurrency,
        jobs=1,
        duration=Fixed(duration),
        faults=(Block(job=0, after=block_after, duration=block_for),),
        horizon=horizon,
    )


def flaky_network(
    loss: float = 0.2,
    jobs: int = 12,
    duration: float = 300.0,
    workers: int = 4,
    outage_at: float | None = 120.0,
    outage_for: float = 15.0,
    horizon: float = 3600.0,
) -> Scenario:
    """Renewals lost with probability `loss`, and one connection outage of `outage_for` seconds at
    `outage_at` for every worker at once (a network blip at Redis: commands queue and are resent after the
    reconnect backoff); nobody dies, so every reclaim is a false one. `outage_at=None` leaves the outage out."""
    return Scenario(
        name="flaky-network",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=() if outage_at is None else (Outage(at=outage_at, duration=outage_for),),
        network=Network(loss=loss),
        horizon=horizon,
    )


def memory_pressure(
    maxmemory: int = 2_100_000,
    policy: str = "volatile-lru",
    cache_rate: float = 25.0,
    cache_bytes: int = 1000,
    jobs: int = 12,
    duration: float = 60.0,
    workers: int = 4,
    horizon: float = 600.0,
) -> Scenario:
    """Redis with `maxmemory` bytes and a `volatile-*` policy, shared with a cache writing `cache_rate` keys
    a second of `cache_bytes` bytes with a TTL: once the memory is full every cache write evicts a key with a
    TTL, and a lock idle longer than most cache keys is the one the sampled LRU picks. A live worker loses
    its lock, its renewals fail and the sweep hands its job to another worker (bullmq#2215, #1506)."""
    return Scenario(
        name="memory-pressure",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=(
            MemoryPressure(
                maxmemory=maxmemory, policy=policy, cache_rate=cache_rate, cache_bytes=cache_bytes
            ),
        ),
        horizon=horizon,
    )


def stuck_connection(
    outage_at: float = 30.0,
    outage_for: float = 5.0,
    stuck_worker: int | None = 0,
    jobs: int = 8,
    duration: float = 60.0,
    workers: int = 2,
    horizon: float = 900.0,
) -> Scenario:
    """Redis restarts at `outage_at` for `outage_for` seconds and worker `stuck_worker`'s client never
    recovers (None: no worker's does): a user-supplied client that gave up after `maxRetriesPerRequest`, or
    a blocking client left "reconnecting". Redis is back, but that worker neither fetches nor renews any
    more; its job's lock lapses and the sweep hands the job to a worker that did reconnect (a false reclaim:
    the stuck worker is alive) (bullmq#648, #2466, #4585)."""
    faults: tuple[Outage, ...] = (Outage(at=outage_at, duration=outage_for, redis_restart=True),)
    if stuck_worker is not None:
        faults += (Outage(at=outage_at, duration=outage_for, worker=stuck_worker, recovers=False),)
    else:
        faults = (Outage(at=outage_at, duration=outage_for, redis_restart=True, recovers=False),)
    return Scenario(
        name="stuck-connection",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=faults,
        horizon=horizon,
    )


def failover(
    at: float = 60.0,
    downtime: float = 2.0,
    lag: float = 1.0,
    readonly: float = 10.0,
    jobs: int = 20,
    arrival_rate: float = 0.5,
    duration: float = 20.0,
    workers: int = 4,
    horizon: float = 900.0,
) -> Scenario:
    """Redis fails over at `at` to an asynchronous replica `lag` seconds behind: every write of that last
    `lag` s is lost (a take's job is back in `wait`, a finished job runs again, an added job is gone). The
    clients, away `downtime` s, come back to the demoted primary and their writes fail with READONLY for
    `readonly` s: renewals fail while the new primary's locks run out, finishes are given up (bullmq#648,
    bull#2679, ioredis#1835)."""
    return Scenario(
        name="failover",
        workers=workers,
        jobs=jobs,
        arrival_rate=arrival_rate,
        duration=Fixed(duration),
        faults=(Outage(at=at, duration=downtime, lost_writes=lag, readonly=readonly),),
        horizon=horizon,
    )


def production(
    workers: int = 4,
    concurrency: int = 2,
    jobs: int = 100,
    arrival_rate: float = 0.2,
    median_duration: float = 20.0,
    sigma: float = 1.5,
    crash_rate: float = 2.0,
    freeze_rate: float = 6.0,
    freeze_median: float = 0.5,
    block_rate: float = 1.0,
    block_median: float = 2.0,
    outage_rate: float = 0.5,
    outage_median: float = 2.0,
    horizon: float = 3600.0,
) -> Scenario:
    """Many workers with concurrency, heavy-tailed durations, crashes with restarts, GC-style freezes, blocked
    event loops (CPU-bound sections, lognormal lengths with a heavy tail), short connection outages and
    network jitter: where both failure modes of the timeout meet. Rates are per worker-hour (docs/model.md
    says where each comes from)."""
    return Scenario(
        name="production",
        workers=workers,
        concurrency=concurrency,
        jobs=jobs,
        arrival_rate=arrival_rate,
        duration=LogNormal(median_duration, sigma),
        random_faults=RandomFaults(
            crash_rate=crash_rate,
            restart_after=5.0,
            freeze_rate=freeze_rate,
            freeze_duration=LogNormal(freeze_median, 1.0),
            block_rate=block_rate,
            block_duration=LogNormal(block_median, 1.5),
            outage_rate=outage_rate,
            outage_duration=LogNormal(outage_median, 1.0),
        ),
        network=Network(rtt=LogNormal(0.002, 0.5)),
        horizon=horizon,
    )


def finish_takes_next(
    freeze_for: float | Distribution = 45.0,
    duration: float = 20.0,
    jobs: int = 6,
    workers: int = 2,
    horizon: float = 3600.0,
) -> Scenario:
    """A backlog of `jobs` jobs; the worker of job 0 freezes for `freeze_for` seconds 1 ms after sending job
    0's finish, its reply still on the way. Under BullMQ's moveToFinished with fetchNext (the `bullmq`
    preset's `fetch_next`), that finish has already locked the next waiting job to the frozen worker, and a
    freeze longer than about the lease lapses it on a worker that is alive; a take in its own round trip
    (after the reply is read) never hands a frozen worker a job."""
    return Scenario(
        name="finish-takes-next",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=(Freeze(job=0, after=duration + 0.001, duration=freeze_for),),
        horizon=horizon,
    )


def child_crash(
    crash_after: float | Distribution = 5.0,
    attempts: int = 2,
    duration: float = 20.0,
    jobs: int = 3,
    workers: int = 2,
    horizon: float = 3600.0,
) -> Scenario:
    """Job 0's sandboxed child process exits `crash_after` seconds in: the parent worker, alive, fails the job
    at once ("Unexpected exit code"); with `attempts` > 1 (BullMQ's job option) the job goes back to the end
    of `wait` and runs again, with `attempts=1` it is failed for good. No lease is waited out either way."""
    return Scenario(
        name="child-crash",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=(ChildCrash(job=0, after=crash_after),),
        horizon=horizon,
        attempts=attempts,
    )


def silent_partition(
    partition_for: float = 15.0,
    partition_at: float = 20.0,
    give_up: float = 924.6,
    retransmit: bool = True,
    duration: float = 120.0,
    workers: int = 2,
    horizon: float = 3600.0,
) -> Scenario:
    """Job 0's worker (worker 0) loses its link to Redis for `partition_for` seconds from `partition_at`
    without a FIN: ioredis sees no close, its renewals are held, and traffic flows again at the first TCP
    retransmission after the partition (200 ms doubling to 120 s), or after the reconnects once TCP gave
    up (`give_up`, 924.6 s by Linux's tcp_retries2). A 15 s partition is back at 25.4 s, later than a 15 s
    outage with a FIN (18.179 s), so it can lapse a 30 s lease that the outage cannot."""
    return Scenario(
        name="silent-partition",
        workers=workers,
        jobs=1,
        duration=Fixed(duration),
        faults=(
            Partition(
                at=partition_at, duration=partition_for, worker=0, give_up=give_up, retransmit=retransmit
            ),
        ),
        horizon=horizon,
    )


def resent_finish(
    resend_twice: bool = True, jobs: int = 6, duration: float = 20.0, workers: int = 2
) -> Scenario:
    """Worker 0's connection drops for 1 s while the reply of job 0's finish is on its way back (2 ms after
    it was sent). ioredis resends the finish after the reconnect (`Network.resend_twice`): it already ran,
    so the copy is refused ("Missing lock"), and the next job the first run took for the worker (the
    `bullmq` preset's fetchNext) is orphaned: active and locked to a live worker that never starts it, until
    its lease lapses and a sweep moves it back. `resend_twice=False`: the command runs once (the default)."""
    return Scenario(
        name="resent-finish",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=(Outage(at=duration + 0.006, duration=1.0, worker=0),),
        network=Network(resend_twice=resend_twice),
    )


def max_retries_outage(
    max_retries: int | None = 0,
    outage_for: float = 5.0,
    duration: float = 20.0,
    jobs: int = 4,
    workers: int = 2,
    attempts: int = 1,
    horizon: float = 3600.0,
) -> Scenario:
    """Worker 0's connection drops for `outage_for` seconds just before job 0's work ends, so its finish
    waits in ioredis's offline queue. The worker's client is a user-supplied IORedis instance with
    `maxRetriesPerRequest` = `max_retries` (a BullMQ 6.7 Worker accepts 0 or null): ioredis rejects the
    waiting finish at its first queue flush (1 s after the drop with 0), BullMQ sends moveToFailed, and the
    next flush (2 s) rejects that too, since the client is back only at 5 s: the finish is lost, job 0's lock
    lapses and the stalled check moves it back; it runs again (`faults.finish_fate`). An outage of 1 to 2 s
    fails the job instead (retried with `attempts` > 1); `max_retries=None` (null) waits: it completes once."""
    return Scenario(
        name="max-retries-outage",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=(Outage(at=duration, duration=outage_for, worker=0),),
        network=Network(max_retries_per_request=max_retries),
        attempts=attempts,
        horizon=horizon,
    )


def skipped_ticks(
    skipped: float = 0.01,
    freeze_for: float | Distribution = 21.0,
    freeze_after: float | Distribution = 20.0,
    duration: float = 60.0,
    workers: int = 2,
    horizon: float = 3600.0,
) -> Scenario:
    """A stop-the-world pause of `freeze_for` seconds (default 0.7 of BullMQ's 30 s lockDuration: below its
    threshold L - B = 22.5 s, as the real test's 1.4 s of 2 s), `freeze_after` seconds into the job (past its
    first renewals), while the worker's renewal timer skips each tick with probability `skipped`
    (`Network.skipped_ticks`; 0.01, BullMQ's measured rate). Without skips the freeze never lapses the lock;
    with them it does when the tick before it, or the one at its resume, was skipped:
    `emqsim.analytic_stalls.skipped_tick_freeze_lapse_probability` (1.6% at p = 0.01 under the `bullmq` preset)."""
    return Scenario(
        name="skipped-ticks",
        workers=workers,
        jobs=1,
        duration=Fixed(duration),
        faults=(Freeze(job=0, after=freeze_after, duration=freeze_for),),
        network=Network(skipped_ticks=skipped),
        horizon=horizon,
    )


STANDARD: dict[str, Callable[..., Scenario]] = {
    "slow-alive": slow_alive,
    "fast-dead": fast_dead,
    "frozen": frozen,
    "blocked-loop": blocked_loop,
    "flaky-network": flaky_network,
    "production": production,
    "finish-takes-next": finish_takes_next,
    "child-crash": child_crash,
    "silent-partition": silent_partition,
    "resent-finish": resent_finish,
    "memory-pressure": memory_pressure,
    "stuck-connection": stuck_connection,
    "failover": failover,
    "max-retries-outage": max_retries_outage,
    "skipped-ticks": skipped_ticks,
}


def standard(name: str, **knobs: Any) -> Scenario:
    """A standard scenario by name, with knobs overriding its defaults."""
    try:
        factory = STANDARD[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; choose one of: {', '.join(STANDARD)}") from None
    try:
        return factory(**knobs)
    except TypeError as exc:
        raise ConfigError(f"scenario {name!r}: {exc}") from None
