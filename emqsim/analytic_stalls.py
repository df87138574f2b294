"""Closed forms for the stalls real BullMQ users report (docs/model.md): the finish that takes the next job, silent
partitions, maxmemory eviction and the lock manager's skipped ticks. Each is the freeze rule of `emqsim.analytic`
at a recovery time, or a counting argument; the tests check them against the simulator."""

from __future__ import annotations

import math

import numpy as np

from emqsim.analytic import (
    DEFAULT_RTT,
    MS,
    _rule,
    _ticks,
    freeze_lapse_probability,
    freeze_lapses,
    renewal_period,
)
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


def skipped_tick_freeze_lapse_probability(
    lease: float,
    renewal: float | RenewalRule,
    freeze: float,
    skipped: float,
    *,
    rtt: float = DEFAULT_RTT,
) -> float:
    """P(lapse) for a freeze of F s at a uniformly random moment (steady state) when each tick with jobs due
    renews nothing with probability p (`Network.skipped_ticks`), on the engine's ms grid.

    After the renewal sent at 0, the due ticks come at B, B + T, ... until one is not skipped (a skipped tick
    sends nothing, so the next comes T later, with no round trip): a renewal interval is B + kT with
    probability (1 - p) p^k. A moment in the cycle lies `a` ms after the last send with weight 1 for a in
    1..B and p^j for a in the j-th skipped tick's interval (B + (j-1)T, B + jT]. A freeze from a to a + F
    fires the first tick at x = max(next tick, a + F) (after-reply timer and a freeze before the reply was
    read, its arrival's ms included: the reply is read at the resume and x = a + F + T); from x the due ticks come T apart (fixed rate:
    on the timer's grid), each skipped with probability p, and the lock lapses iff the first one not skipped
    comes after L (the h's cancel, as in `freeze_lapses`): p^(due ticks in [x, L]). At p = 0 this is
    `freeze_lapse_probability` (a freeze that starts on the ms its reply arrives reads it at the resume too).
    For BullMQ's rule (lockDuration 2 s, F = 1.4 s, p = 0.01) about 1.6 p: a freeze lapses when the tick
    before it was skipped (a later start in a longer interval) or the tick at its resume is."""
    if not 0 <= skipped < 1:
        raise ValueError(f"skipped must be a probability in [0, 1), got {skipped}")
    rule = _rule(renewal)
    L, F, r = (_ticks(x, MS) for x in (lease, freeze, rtt))
    T, M = _ticks(rule.tick, MS), _ticks(rule.min_age, MS)
    B = _ticks(renewal_period(renewal, rtt=rtt), MS)
    p = float(skipped)

    def due_from(x: np.ndarray) -> np.ndarray:
        """The first due tick from tick time x on (strict `age > M`, else `>=`; ts is the last send, 0)."""
        below = (M - x) if rule.strict else (M - 1 - x)
        return np.where(below < 0, x, x + (np.maximum(below, 0) // T + 1) * T)

    def lapse(a: np.ndarray, scheduled: np.ndarray) -> np.ndarray:
        x = np.maximum(scheduled, a + F)
        if rule.after_reply:
            x = np.where(a <= r, np.maximum(r, a + F) + T, x)  # the reply read at the resume, then one tick
            first = due_from(x)
            nxt = first + T  # later ticks come T after a skipped one
        else:
            first = due_from(x)
            nxt = (first // T + 1) * T  # the timer's grid (the last send was on it)
        # due ticks at or before L: the first one, then nxt, nxt + T, ... (all due: the age only grows)
        count = np.where(first > L, 0, 1 + np.where(nxt > L, 0, (L - nxt) // T + 1))
        return np.power(p, count)

    a = np.arange(1, B + 1)
    scheduled = np.full(a.shape, B) if rule.after_reply else np.maximum(B, (a + T - 1) // T * T)
    total, weight = float(lapse(a, np.minimum(scheduled, B)).sum()), float(B)
    j = 1
    while p > 0 and B + (j - 1) * T <= L + F:  # later intervals lapse anyway (the skips alone pass L)
        a = np.arange(B + (j - 1) * T + 1, B + j * T + 1)
        total += p**j * float(lapse(a, np.full(a.shape, B + j * T)).sum())
        weight += p**j * T
        j += 1
    if p > 0:  # the rest: intervals past L + F, every moment of them lapses
        tail = T * p**j / (1 - p)
        total, weight = total + tail, weight + tail
    return float(total / weight)
