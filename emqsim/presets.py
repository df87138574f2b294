"""Real systems' defaults as ready-made policies, each with its source (see docs/presets.md).

Overrides keep a system's derived rules: `preset("bullmq", lease=2)` keeps renew = lock/2, tick = renew/2.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from emqsim.errors import ConfigError
from emqsim.policies import LeasePolicy, ReclaimPolicy, RenewalRule, TimeoutPolicy
from emqsim.protocol import Queue, SweepReply


@dataclass(frozen=True)
class Preset:
    """A real system's reclaim mechanism and defaults, with where they come from."""

    name: str
    system: str
    mechanism: str
    defaults: Mapping[str, float | int | None]
    source: str
    description: str
    build: Callable[..., ReclaimPolicy]

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))  # read-only, as the rest

    def policy(self, **overrides: Any) -> ReclaimPolicy:
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            raise ConfigError(
                f"preset {self.name!r} has no setting {', '.join(unknown)}; it takes: {', '.join(self.defaults)}"
            )
        settings = {**self.defaults, **{k: v for k, v in overrides.items() if v is not None}}
        return self.build(name=self.name, **settings)


# The command names a BullMQ 6.7.0 Queue and Worker (ioredis 5.11.1) make redis-server 7.0.15 run, as its
# `INFO latencystats` lists them after a Queue added three jobs and a Worker completed one, failed one and
# retried one (tests/test_bullmq_real_vocabulary.py checks them on real BullMQ): under maxmemory each holds a
# latency histogram (emqsim.store.eviction).
BULLMQ_REDIS_COMMANDS = frozenset(
    {
        "bzpopmin", "client|setname", "del", "eval", "evalsha", "exists", "get", "hdel", "hget", "hgetall",
        "hincrby", "hmget", "hmset", "hset", "incr", "info", "llen", "lpush", "lrange", "lrem", "rpoplpush",
        "sadd", "scard", "set", "smembers", "srem", "xadd", "xtrim", "zadd", "zcard", "zpopmin", "zrange",
        "zrangebyscore",
    }
)  # fmt: skip


def _bullmq(name: str, lease: float, scan: float, max_stalled: int) -> ReclaimPolicy:
    # lockRenewTime = lockDuration/2, tick = lockRenewTime/2; the LockManager's map is keyed by job id
    rule = RenewalRule.bullmq(lease, track_by="job")
    return LeasePolicy(
        lease=lease,
        beat=rule.tick_ms / 1000,
        scan=scan,
        two_phase=True,
        max_stalled=max_stalled,
        swept_by="workers",
        renewal=rule,
        name=name,
        take_mode="after-wakeup",  # BZPOPMIN on the marker, then moveToActive (drainDelay 5 s)
        drain_delay=5.0,
        lazy_fail=True,  # past maxStalledCount: `defa` set, re-queued, failed by the next taker
        fetch_next=True,  # moveToFinished locks the next waiting job to the same worker (fetchNextJob)
        redis_commands=tuple(BULLMQ_REDIS_COMMANDS),
    )


def _echomq(name: str, lease: float, beat: float, scan: float) -> ReclaimPolicy:
    return LeasePolicy(lease=lease, beat=beat, scan=scan, two_phase=True, max_stalled=1, name=name)


class SweepThatNeverRecovers(LeasePolicy):
    """A lease whose stalled sweep changes nothing: the sweep script errors (or returns at its first check)
    because its caller passes keys and arguments in another order than the script reads them. Renewals work,
    so live jobs keep their locks; a dead worker's job is never moved back (held to the horizon)."""

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        return SweepReply(skipped=True)

    def sweep_refused(self, queue: Queue, arrival_ms: int) -> bool:
        return False


def _echomq_code(name: str, lease: float, scan: float) -> ReclaimPolicy:
    # LockManager: tick lock_renew_time/2 = lease/4, strict `ts + threshold < now`, rescheduled after the
    # batched extend_locks returns (a GenServer call), a map keyed by job id.
    rule = RenewalRule.bullmq(lease, track_by="job")
    return SweepThatNeverRecovers(
        lease=lease,
        beat=rule.tick_ms / 1000,
        scan=scan,
        two_phase=True,
        max_stalled=1,
        renewal=rule,
        name=name,
    )


def _timeout(name: str, timeout: float, scan: float) -> ReclaimPolicy:
    return TimeoutPolicy(timeout=timeout, scan=scan, fenced=False, name=name)


def _k8s(name: str, lease: float, beat: float, scan: float) -> ReclaimPolicy:
    # The node controller checks every monitor period and acts on a lease that is older than the grace
    # period: one pass, no marking round, a dedicated controller (never one of the nodes).
    return LeasePolicy(
        lease=lease, beat=beat, scan=scan, two_phase=False, max_stalled=None, swept_by="reaper", name=name
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "bullmq",
            "BullMQ 6",
            "lease + heartbeat, two-phase stalled sweep run by every worker",
            {"lease": 30.0, "scan": 30.0, "max_stalled": 1},
            "npm bullmq 6: classes/worker.js, classes/lock-manager.js, commands/moveStalledJobsToWait-9.lua",
            "lockDuration 30 s, lockRenewTime = lockDuration/2, LockManager tick = lockRenewTime/2 with the "
            "strict `ts + renew/2 < now` rule and jobs tracked by id, stalledInterval 30 s, maxStalledCount 1 "
            "failed lazily by the next taker, takes after a marker wake-up (drainDelay 5 s), a finish that takes the "
            "next waiting job in the same script (moveToFinished's fetchNext)",
            _bullmq,
        ),
        Preset(
            "echomq",
            "EchoMQ (seed)",
            "lease + heartbeat, BullMQ's protocol under `emq:{queue}:` keys",
            {"lease": 30.0, "beat": 10.0, "scan": 5.0},
            "seed document 'Lock-expiry detection'",
            "lease 30 s renewed every 10 s: two missed renewals still leave the lock alive, three lapse it",
            _echomq,
        ),
        Preset(
            "echomq-code",
            "EchoMQ (its Elixir code)",
            "lease + BullMQ's LockManager; the stalled sweep's script call does not match the script",
            {"lease": 30.0, "scan": 30.0},
            "jonny-novikov/fiberfx echo/apps/echomq/lib/echomq: lock_manager.ex, worker.ex, scripts.ex, "
            "stalled_checker.ex (see docs/presets.md)",
            "lock_duration 30 s renewed on BullMQ's rule (tick 7.5 s, strict, jobs keyed by id); the stalled "
            "check's arguments do not match moveStalledJobsToWait-8.lua's, so it recovers nothing",
            _echomq_code,
        ),
        Preset(
            "celery-redis",
            "Celery + Redis broker",
            "fixed visibility timeout from delivery, no extension",
            {"timeout": 3600.0, "scan": 100.0},
            "Celery docs 'Using Redis' (visibility_timeout); kombu transport/redis.py (restore about every 100 s)",
            "visibility_timeout 1 h; unacked messages restored about every 100 s; acks_late off",
            _timeout,
        ),
        Preset(
            "sqs",
            "Amazon SQS",
            "visibility timeout (no ChangeMessageVisibility heartbeat)",
            {"timeout": 30.0, "scan": 1.0},
            "SQS API reference: VisibilityTimeout default 30 s; ChangeMessageVisibility",
            "VisibilityTimeout 30 s enforced by a server-side timer (modelled as a scan every second)",
            _timeout,
        ),
        Preset(
            "faktory",
            "Faktory",
            "fixed reservation per fetch, not extendable in the OSS server",
            {"timeout": 1800.0, "scan": 15.0},
            "Faktory manager/working.go: reserve_for default 1800 s, reaper every 15 s",
            "reserve_for 30 min, reservation reaper every 15 s",
            _timeout,
        ),
        Preset(
            "oban-lifeline",
            "Oban Lifeline",
            "rescue jobs executing longer than a fixed age",
            {"timeout": 3600.0, "scan": 60.0},
            "Oban.Plugins.Lifeline docs: rescue_after 60 min, interval 60 s",
            "rescue_after 60 min, checked every 60 s",
            _timeout,
        ),
        Preset(
            "k8s-node-lease",
            "Kubernetes node lease",
            "lease + heartbeat, checked by the node controller",
            {"lease": 40.0, "beat": 10.0, "scan": 5.0},
            "Kubernetes docs 'Nodes' and 'Leases': lease 40 s renewed every 10 s, node-monitor-period 5 s",
            "lease 40 s renewed every 10 s, node monitor period 5 s, grace period 40 s",
            _k8s,
        ),
    )
}


def preset(name: str, **overrides: Any) -> ReclaimPolicy:
    """The policy a real system ships with, optionally with some settings changed."""
    try:
        chosen = PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
    return chosen.policy(**overrides)


def presets_table() -> list[dict[str, Any]]:
    """One row per preset: name, system, mechanism, defaults, source."""
    return [
        {
            "name": p.name,
            "system": p.system,
            "mechanism": p.mechanism,
            **{k: v for k, v in p.defaults.items()},
            "description": p.description,
            "source": p.source,
        }
        for p in PRESETS.values()
    ]
