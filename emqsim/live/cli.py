"""`python -m emqsim live ...`: one scenario under one policy on a real Redis, printed like a simulator run.

python -m emqsim live --scenario fast-dead --lease 30 --beat 10 --scan 5
python -m emqsim live --scenario slow-alive --timeout 60 --time-scale 0.01 --json
python -m emqsim live --redis redis://localhost:6379/15 --scenario frozen
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import replace

from emqsim.errors import ConfigError
from emqsim.faults import Outage
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, TimeoutPolicy
from emqsim.records import Run
from emqsim.scenario import STANDARD, Scenario, standard
from emqsim.stats import summarize, summary_dict

from .runner import LiveWarning, run_live
from .server import RedisUnavailable


def _seconds(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {text!r} is not a number of seconds (e.g. 30)") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{flag} {text!r} must be a positive number of seconds (e.g. 30)")
    return value


def policy_from_args(args: argparse.Namespace) -> ReclaimPolicy:
    """The policy the flags describe: --timeout alone gives the reaper, otherwise the lease."""
    lease = _seconds("--lease", args.lease)
    beat = _seconds("--beat", args.beat)
    scan = _seconds("--scan", args.scan) or 5.0
    timeout = _seconds("--timeout", args.timeout)
    if timeout is not None:
        if lease is not None or beat is not None:
            raise ConfigError(
                "--timeout runs the reaper, which has no lease or heartbeat; drop --lease/--beat"
            )
        return TimeoutPolicy(timeout, scan)
    lease = lease or 30.0
    beat = beat or lease / 3
    if beat >= lease:
        raise ConfigError(
            f"--beat {beat:g} must be shorter than the lease ({lease:g}); try --beat {lease / 3:g}"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaseWarning)
        policy = LeasePolicy(lease, beat, scan)
    for w in caught:
        print(f"emqsim live: warning: {w.message}", file=sys.stderr)
    return policy


def main_live(args: argparse.Namespace) -> int:
    """Run the `live` subcommand; bad input raises ConfigError (the CLI prints it and exits 2)."""
    if args.scenario not in STANDARD:
        raise ConfigError(f"--scenario {args.scenario!r} is unknown; choose one of: {', '.join(STANDARD)}")
    try:
        scale = float(args.time_scale)
    except (TypeError, ValueError):
        raise ConfigError(f"--time-scale {args.time_scale!r} is not a number (e.g. 0.02)") from None
    if not (math.isfinite(scale) and 0 < scale <= 10):
        raise ConfigError(f"--time-scale {args.time_scale!r} must be in (0, 10], e.g. 0.02")
    try:
        seed = int(args.seed)
    except (TypeError, ValueError):
        raise ConfigError(f"--seed {args.seed!r} is not a whole number") from None
    if seed < 0:
        raise ConfigError(f"--seed {seed} must be >= 0")
    policy = policy_from_args(args)
    scenario = standard(args.scenario)
    if args.without_outages:
        scenario = without_outages(scenario)
    if args.redis_restart_for is not None and args.redis_restart_at is None:
        raise ConfigError("--redis-restart-for: needs --redis-restart-at T (when Redis goes down)")
    if args.redis_restart_at is not None:
        if args.redis:
            raise ConfigError(
                "--redis-restart-at: live mode restarts only its own private redis-server; leave out --redis"
            )
        down = args.redis_restart_for if args.redis_restart_for is not None else 5.0
        if args.redis_restart_at + down >= scenario.horizon:  # real time: 1e12 s would never end
            raise ConfigError(
                f"--redis-restart-at {args.redis_restart_at:g} with --redis-restart-for {down:g}: Redis would "
                f"still be down at the run's horizon ({scenario.horizon:g} s); restart it earlier or for less "
                f"than {max(scenario.horizon - args.redis_restart_at, 0):g} s"
            )
        restart = Outage(at=args.redis_restart_at, duration=down, redis_restart=True)
        scenario = replace(scenario, faults=(*scenario.faults, restart))
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LiveWarning)
        try:
            run = run_live(
                scenario,
                policy,
                redis_url=args.redis,
                time_scale=scale,
                allow_foreign_keys=args.allow_foreign_keys,
                seed=seed,
            )
        except RedisUnavailable as exc:
            print(f"emqsim live: error: {exc}", file=sys.stderr)
            return 1
        except RuntimeError as exc:  # a process or the private server failed to start: its first line
            first = (str(exc).splitlines() or ["the live run failed"])[0].rstrip(":")
            hint = (
                "Redis refuses writes on a read-only replica and, under maxmemory, when nothing can be evicted"
                if "Redis refused" in first
                else "run it again; if it persists, check redis-server"
            )
            print(f"emqsim live: error: {first} ({hint})", file=sys.stderr)
            return 1
    for w in caught:
        print(f"emqsim live: warning: {w.message}", file=sys.stderr)
    real = time.monotonic() - started
    if args.json:
        out = {"run": run.as_dict(), "summary": summary_dict(summarize(run)), "real_seconds": round(real, 3)}
        print(json.dumps(out, indent=2, allow_nan=False))
    else:
        print(format_run(run, real, args.redis))
    return 0


def _t(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def format_run(run: Run, real_seconds: float, redis_url: str | None = None) -> str:
    """A short human report of one live run."""
    p = run.policy
    if p.get("timeout") is not None:
        settings = f"timeout {p['timeout']:g} s, scan {p['scan']:g} s"
    else:
        settings = f"lease {p['lease']:g} s, beat {p['beat']:g} s, scan {p['scan']:g} s"
    scale = p.get("time_scale", 1.0)
    lines = [
        f"live run: {run.scenario} under {p['policy']} ({settings}); time scale {scale:g} "
        f"(1 s = {1000 * scale:g} ms real)",
        f"redis: {redis_url or 'private redis-server'}",
        f"ended: {run.ended_by} at {run.end:.2f} s ({real_seconds:.2f} s real, including start-up)",
        "",
        f"{'job':>4} {'try':>3} {'worker':>6}  {'outcome':<21} {'taken':>8} {'died':>8} {'reclaimed':>9}  "
        f"{'worker then':<11} finish",
    ]
    for a in run.attempts[:40]:
        lines.append(
            f"{a.job:>4} {a.attempt:>3} {a.worker:>6}  {a.outcome:<21} {_t(a.taken_at):>8} {_t(a.died_at):>8} "
            f"{_t(a.reclaimed_at if a.reclaimed_at is not None else a.failed_at):>9}  "
            f"{a.worker_state_at_reclaim or '':<11} {a.finish_result or ''}"
        )
    if len(run.attempts) > 40:
        lines.append(f"  ... {len(run.attempts) - 40} more attempts (--json for all)")
    s = summarize(run)
    det = ", ".join(f"{x:.2f}" for x in s.detection_latencies[:10]) or "none"
    lines += [
        "",
        f"detection latency (crash -> reclaim, s): {det}",
        f"false reclaims: {s.false_reclaims}   rejected finishes: {s.finishes_rejected}   "
        f"duplicate completions: {s.duplicate_completions}   undetected dead: {s.undetected}",
        "requests: "
        + ", ".join(f"{k} {v}" for k, v in run.requests.items())
        + f"; redis commands {run.redis_commands}",
    ]
    return "\n".join(lines)


def without_outages(scenario: Scenario) -> Scenario:
    """The scenario with its connection outages removed (explicit ones, failovers among them, and the random
    ones); everything else is unchanged: to compare with the simulator without them."""
    faults = tuple(f for f in scenario.faults if not isinstance(f, Outage))
    randoms = scenario.random_faults
    if randoms is not None and randoms.outage_rate > 0:
        randoms = replace(randoms, outage_rate=0.0)
    return scenario.with_(faults=faults, random_faults=randoms)
