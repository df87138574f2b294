"""Scenarios and policies built from the flags, checked before anything runs (a bad combination is a
ConfigError naming the flag)."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

from emqsim.distributions import Distribution
from emqsim.errors import ConfigError
from emqsim.faults import Crash, Freeze
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import PRESETS, Preset
from emqsim.scenario import Scenario, standard

DEFAULT_TIMEOUTS = (30.0, 120.0, 600.0, 1200.0)
DEFAULT_SCENARIOS = ("slow-alive", "fast-dead", "frozen", "flaky-network", "production")


def fail(flag: str, message: str) -> NoReturn:
    """Refuse the flag `flag`: one line naming it and saying what to do."""
    raise ConfigError(f"{flag}: {message}")


def check_preset_flags(chosen: Preset, keys: Sequence[str]) -> None:
    """Refuse a setting flag (--lease, --beat, --scan, --timeout: `keys`) that the preset does not take."""
    for key in keys:
        if key in chosen.defaults:
            continue
        if key == "beat" and "lease" in chosen.defaults:
            fail("--beat", f"preset {chosen.name!r} derives its heartbeat from the lease; drop --beat")
        fail(f"--{key}", f"preset {chosen.name!r} has no {key}; it takes {', '.join(chosen.defaults)}")


def with_fault_flags(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """The scenario with the fault flags' faults added (checked here, before anything runs)."""
    from emqsim.distributions import LogNormal
    from emqsim.faults import Block, ChildCrash, Outage, Partition, RandomFaults

    get = lambda name: getattr(args, name, None)  # noqa: E731
    faults = list(scenario.faults)
    if get("block_after") is not None and get("block_for") is None:
        fail("--block-after", "needs --block-for X (the block's length in seconds)")
    if get("block_for") is not None:  # replaces the scenario's own block of job 0 (as --freeze-for does)
        faults = [f for f in faults if not isinstance(f, Block) or f.job != 0]
        faults.append(
            Block(job=0, after=span_dist(get("block_after") or (0.0, 0.0)), duration=args.block_for)
        )
    if (get("outage_at") is None) != (get("outage_for") is None):
        fail(
            "--outage-at" if get("outage_at") is None else "--outage-for",
            "give both --outage-at T and --outage-for X",
        )
    if get("failover_lag") is not None and get("outage_at") is None:
        fail("--failover-lag", "needs --outage-at T and --outage-for X (the failover's downtime)")
    if get("redis_restart") and get("outage_at") is None:
        fail("--redis-restart", "needs --outage-at T and --outage-for X (Redis's downtime)")
    if get("redis_restart") and get("failover_lag") is not None:
        fail("--redis-restart", "a restart keeps its data: leave out --failover-lag (that is a failover)")
    if get("readonly") is not None and get("failover_lag") is None:
        fail(
            "--readonly",
            "needs --failover-lag S (and --outage-at/--outage-for): a demoted primary is a failover's",
        )
    if get("never_reconnect") and get("outage_at") is None:
        fail(
            "--never-reconnect", "needs --outage-at T and --outage-for X (the outage it never recovers from)"
        )
    if get("outage_at") is not None:
        faults.append(
            Outage(
                at=args.outage_at,
                duration=args.outage_for,
                lost_writes=get("failover_lag") or 0.0,
                redis_restart=bool(get("redis_restart")),
                recovers=not get("never_reconnect"),
                readonly=get("readonly") or 0.0,
            )
        )
    if get("child_crash_after") is not None:
        faults.append(ChildCrash(job=0, after=span_dist(args.child_crash_after)))
    if (get("partition_at") is None) != (get("partition_for") is None) or (
        get("partition_give_up") is not None and get("partition_at") is None
    ):
        flag = "--partition-for" if get("partition_at") is not None else "--partition-at"
        fail(flag, "give both --partition-at T and --partition-for X")
    if get("partition_at") is not None:
        give_up = get("partition_give_up")
        faults.append(Partition(at=args.partition_at, duration=args.partition_for, give_up=give_up or 924.6))
    if (get("maxmemory_policy") is not None or get("cache_rate") is not None) and get("maxmemory") is None:
        fail("--maxmemory-policy" if get("maxmemory_policy") else "--cache-rate", "needs --maxmemory BYTES")
    if get("maxmemory") is not None:  # replaces the scenario's own memory pressure
        from emqsim.faults import MemoryPressure

        faults = [f for f in faults if not isinstance(f, MemoryPressure)]
        faults.append(
            MemoryPressure(
                maxmemory=args.maxmemory,
                policy=get("maxmemory_policy") or "volatile-lru",
                cache_rate=25.0 if args.cache_rate is None else args.cache_rate,
            )
        )
    changes: dict[str, Any] = {}
    if get("attempts") is not None:
        changes["attempts"] = args.attempts
    if get("resend_twice"):
        changes["network"] = replace(scenario.network, resend_twice=True)
    if get("max_retries_per_request") is not None:
        network = changes.get("network", scenario.network)
        changes["network"] = replace(network, max_retries_per_request=args.max_retries_per_request)
    if get("skipped_ticks") is not None:
        changes["network"] = replace(
            changes.get("network", scenario.network), skipped_ticks=args.skipped_ticks
        )
    if faults != list(scenario.faults):
        changes["faults"] = tuple(faults)
    randoms: dict[str, Any] = {}
    if get("block_rate") is not None or get("block_median") is not None:
        randoms["block_rate"] = get("block_rate") if get("block_rate") is not None else 1.0
        randoms["block_duration"] = LogNormal(get("block_median") or 2.0, 1.5)
    if get("outage_rate") is not None or get("outage_median") is not None:
        randoms["outage_rate"] = get("outage_rate") if get("outage_rate") is not None else 0.5
        randoms["outage_duration"] = LogNormal(get("outage_median") or 2.0, 1.0)
    if randoms:
        base = scenario.random_faults or RandomFaults(restart_after=None)
        changes["random_faults"] = replace(base, **randoms)
    result = scenario.with_(**changes) if changes else scenario
    for line in late_faults(result):
        print(f"emqsim: note: {line}", file=sys.stderr)
    return result


def late_faults(scenario: Scenario) -> list[str]:
    """One line for each fault set at or after the horizon: it cannot happen (the run stops first)."""
    lines = []
    for fault in scenario.faults:
        at = getattr(fault, "at", None)
        if at is not None and at >= scenario.horizon:
            lines.append(
                f"{scenario.name}: the {type(fault).__name__.lower()} at {at:g} s is at or after the horizon "
                f"({scenario.horizon:g} s): it cannot happen; raise the horizon or move it"
            )
    return lines


def with_model_options(policy: ReclaimPolicy, args: argparse.Namespace) -> ReclaimPolicy:
    """The policy with --take/--track-by/--lazy-fail/--fetch-next applied (lease policies only)."""
    take, track_by, lazy = (
        getattr(args, "take", None),
        getattr(args, "track_by", None),
        getattr(args, "lazy_fail", False),
    )
    fetch_next = getattr(args, "fetch_next", None)
    if take is None and track_by is None and not lazy and fetch_next is None:
        return policy
    if not isinstance(policy, LeasePolicy):
        flag = "--take" if take else "--track-by" if track_by else "--lazy-fail" if lazy else "--fetch-next"
        fail(flag, f"{policy.name!r} has no lease: the BullMQ model options apply to lease policies only")
    changes: dict[str, Any] = {}
    if take is not None:
        changes["take_mode"] = take
    if track_by is not None:
        changes["track_by"] = track_by
    if lazy:
        changes["lazy_fail"] = True
    if fetch_next is not None:
        changes["fetch_next"] = fetch_next == "on"
    return replace(policy, **changes)


def lease_policies(args: argparse.Namespace) -> list[ReclaimPolicy]:
    scans = args.scan or [5.0]
    if args.preset:
        chosen = PRESETS[args.preset]
        policies = []
        check_preset_flags(chosen, [key for key in ("lease", "scan", "beat") if getattr(args, key)])
        for scan in args.scan or [None]:
            for lease in args.lease or [None]:
                overrides = {k: v for k, v in (("lease", lease), ("scan", scan)) if v is not None}
                for beat in args.beat or [None]:
                    policies.append(chosen.policy(**overrides, **({} if beat is None else {"beat": beat})))
        return policies
    leases = args.lease or [30.0]
    pairs = []
    for lease in leases:
        for beat in args.beat or [lease / 3]:
            if beat >= lease:
                continue
            pairs.append((lease, beat))
    if not pairs:
        fail(
            "--beat",
            f"every heartbeat {args.beat} is >= every lease {leases}; use a beat shorter than the lease, e.g. lease/3",
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaseWarning)
        policies = [LeasePolicy(lease, beat, scan) for lease, beat in pairs for scan in scans]
    for w in {str(w.message) for w in caught}:
        print(f"emqsim: warning: {w}", file=sys.stderr)
    skipped = len(leases) * len(args.beat or [0]) - len(pairs)
    if skipped and args.beat:
        print(f"emqsim: note: skipped {skipped} (lease, beat) pair(s) with beat >= lease", file=sys.stderr)
    return policies


def timeout_policies(args: argparse.Namespace) -> list[ReclaimPolicy]:
    values = DEFAULT_TIMEOUTS if args.timeout is None else args.timeout
    return [TimeoutPolicy(t, scan) for t in values for scan in (args.scan or [5.0])]


POLICY_FLAGS = ("lease", "beat", "scan", "timeout")


def policy_overrides(args: argparse.Namespace, flags: tuple[str, ...] = POLICY_FLAGS) -> list[dict[str, Any]]:
    """The policy settings given on the command line, which win over a scenario file's [policy] table: one
    dict per combination of the flags' values (a sweep's grids; `run` has one of each), with `kind` from
    --preset or --policy. The rule is in docs/presets.md and `emqsim run --help`."""
    kind = getattr(args, "preset", None) or getattr(args, "policy", None)
    grids = [
        [(name, v) for v in (value if isinstance(value, list) else [value])]
        for name in flags
        if (value := getattr(args, name, None)) is not None and value != []
    ]
    import itertools

    return [{**({"kind": kind} if kind else {}), **dict(combo)} for combo in itertools.product(*grids)]


def single_policy(args: argparse.Namespace) -> ReclaimPolicy:
    if isinstance(getattr(args, "policy", None), ReclaimPolicy):  # a user's detector, built from its file
        for flag in ("preset", "lease", "beat", "scan", "timeout"):
            if getattr(args, flag, None) is not None:
                fail(
                    f"--{flag}", "a detector takes its own settings: --policy 'FILE.py:Class(beat=2, scan=1)'"
                )
        return args.policy
    if args.preset:
        chosen = PRESETS[args.preset]
        overrides = {
            k: getattr(args, k) for k in ("lease", "beat", "scan", "timeout") if getattr(args, k) is not None
        }
        check_preset_flags(chosen, list(overrides))
        return chosen.policy(**overrides)
    scan = args.scan or 5.0
    if getattr(args, "policy", None) == "lease" and args.timeout is not None:
        fail("--timeout", "--policy lease has no timeout; drop --timeout or use --policy timeout")
    if getattr(args, "policy", None) == "timeout" or (
        args.timeout is not None and args.lease is None and args.beat is None
    ):
        if args.lease is not None or args.beat is not None:
            fail(
                "--lease",
                "the timeout policy has no lease or heartbeat; drop --lease/--beat or use --policy lease",
            )
        return TimeoutPolicy(args.timeout or 600.0, scan)
    if args.timeout is not None:
        fail("--timeout", "the lease policy has no timeout; use --policy timeout")
    lease = args.lease or 30.0
    beat = args.beat or lease / 3
    if beat >= lease:
        fail("--beat", f"{beat:g} must be shorter than the lease ({lease:g}); try --beat {lease / 3:g}")
    return LeasePolicy(lease, beat, scan)


def run_scenario(args: argparse.Namespace) -> Scenario:
    if args.config:
        from emqsim.config import load_config

        scenario, _ = load_config(args.config)
    else:
        scenario = standard(args.scenario)
    changes: dict[str, Any] = {}
    for flag, field in (("workers", "workers"), ("concurrency", "concurrency"), ("job_count", "jobs"),
                        ("duration", "duration"), ("horizon", "horizon")):  # fmt: skip
        value = getattr(args, flag, None)
        if value is not None:
            changes[field] = value
    faults = list(scenario.faults)
    if getattr(args, "die_after", None) is not None:
        faults = [f for f in faults if not isinstance(f, Crash) or f.job != 0]
        faults.append(Crash(job=0, after=span_dist(args.die_after)))
    if getattr(args, "freeze_for", None) is not None or getattr(args, "freeze_after", None) is not None:
        if args.freeze_for is None:
            fail("--freeze-after", "needs --freeze-for X (the pause length in seconds)")
        faults = [f for f in faults if not isinstance(f, Freeze) or f.job != 0]
        faults.append(
            Freeze(job=0, after=span_dist(args.freeze_after or (0.0, 0.0)), duration=args.freeze_for)
        )
    changes["faults"] = tuple(faults)
    if getattr(args, "remove_on_complete", False):
        changes["remove_on_complete"] = True
    if getattr(args, "loss", None) is not None or getattr(args, "rtt", None) is not None:
        net = scenario.network  # its other settings (resend_twice, skipped_ticks) stay
        changes["network"] = replace(
            net,
            rtt=args.rtt if args.rtt is not None else net.rtt,
            loss=args.loss if args.loss is not None else net.loss,
        )
    return with_fault_flags(scenario.with_(**changes), args)


def span_dist(pair: tuple[float, float]) -> float | Distribution:
    from emqsim.distributions import Uniform

    low, high = pair
    return low if low == high else Uniform(low, high)
