"""Closed forms for the stalls real BullMQ users report (docs/model.md): the finish that takes the next job, silent
partitions and maxmemory eviction. Each is the freeze rule of `emqsim.analytic` at a recovery time, or a
counting argument; the tests check them against the simulator to the millisecond."""

from __future__ import annotations

import math

from emqsim.analytic import DEFAULT_RTT, MS, freeze_lapse_probability, freeze_lapses
from emqsim.faults import partition_recovery_ms
from emqsim.policies import RenewalRule
from emqsim.units import to_ms


def fetched_lock_lapses(lease: float, since_finish: float, freeze: float, *, resolution: float = MS) -> bool:
    """A worker that freezes (or blocks) for X s, u s after it SENT a finish that took its next job
    (BullMQ's moveToFinished with fetchNext, `fetch_next`), loses that job's lock iff u + X > L: the finish
    set the lock when it reached Redis, and the job, tracked from that take (processedOn), is renewed by the
    overdue tick as the worker resumes. Without fetch_next a frozen worker is handed no lock at all (its take
    waits for the reply), so the same freeze lapses nothing."""
    return freeze_lapses(lease, since_finish, freeze, resolution=resolution)


def partition_recovery(
    partition: float, *, give_up: float = 924.6, connect_timeout: float = 10.0, retransmit: bool = True
) -> float:
    """R_P(D): seconds from a silent partition's start until its connection carries traffic again
    (`faults.partition_recovery_ms`): the first TCP retransmission after D (200 ms doubling to 120 s) while
    D < give_up, else the close at give_up and ioredis's reconnects, each waiting out connect_timeout while
    the partition lasts. A 15 s partition comes back at 25.4 s, later than a 15 s outage (18.179 s)."""
    return partition_recovery_ms(to_ms(partition), to_ms(give_up), to_ms(connect_timeout), retransmit) / 1000


def partition_lapses(
    lease: float, since_renewal: float, partition: float, *, resolution: float = MS, give_up: float = 924.6
) -> bool:
    """A silent partition of D s starting u s after the worker SENT its last lock-setting request lapses the
    lock iff u + R_P(D) > L: renewals are held (not lost) and the first reaches Redis half a round trip after
    traffic flows again, like the overdue renewal after a freeze of R_P(D) (`partition_recovery`)."""
    recovery = partition_recovery(partition, give_up=give_up)
    return freeze_lapses(lease, since_renewal, recovery, resolution=resolution)


def partition_lapse_probability(
    lease: float,
    renewal: float | RenewalRule,
    partition: float,
    *,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
    give_up: float = 924.6,
) -> float:
    """P(lapse) for a silent partition of D s at a uniformly random moment: the freeze formula at R_P(D)."""
    recovery = partition_recovery(partition, give_up=give_up)
    return freeze_lapse_probability(lease, renewal, recovery, rtt=rtt, resolution=resolution)


def random_eviction_probability(hold: float, evictions_per_s: float, volatile_keys: float) -> float:
    """P(a lock held `hold` s is evicted) under maxmemory with `volatile-random` (or `allkeys-random` with
    `volatile_keys` all keys), once the memory is full: each eviction draws one of the V candidate keys
    uniformly (evict.c's `dictGetRandomKey`), so a given lock survives n evictions with (1 - 1/V)^n; at E
    evictions a second that is 1 - (1 - 1/V)^(E h). With a cache writing keys of one size and locks much
    smaller, E is about the cache's write rate and V the cache keys that fit plus the locks. The LRU/LFU/TTL
    policies rank keys instead (the sampled pool): no closed form here."""
    if hold < 0 or evictions_per_s < 0 or volatile_keys < 1:
        raise ValueError("hold and evictions_per_s must be >= 0 and volatile_keys >= 1")
    if volatile_keys == 1:
        return 1.0 if evictions_per_s * hold > 0 else 0.0
    return float(-math.expm1(evictions_per_s * hold * math.log1p(-1.0 / volatile_keys)))
