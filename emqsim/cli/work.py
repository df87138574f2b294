"""Bounded work: an estimate of the simulated Redis commands before anything runs (above MAX_COMMANDS a
command asks for --yes), --jobs clamped to the usable cores, a Dask executor, a progress bar."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from emqsim.cli.building import DEFAULT_TIMEOUTS, fail
from emqsim.errors import ConfigError
from emqsim.policies import ReclaimPolicy
from emqsim.presets import PRESETS
from emqsim.scenario import Scenario

# A run's cost is about linear in the Redis commands it simulates: about 7.5 microseconds each on a 2020s laptop
# core (measured with benchmarks-style timings of the standard scenarios). Above MAX_COMMANDS (about two
# CPU-hours) a command asks for --yes first.
MAX_COMMANDS = 1e9


SECONDS_PER_COMMAND = 7.5e-6


def commands_per_run(scenario: Scenario, beat: float | None, scan: float) -> float:
    """An upper estimate of the Redis commands one run simulates: every job's steps, every sweep of every
    worker and every heartbeat of every slot until the horizon, and the random faults' restarts."""
    horizon = scenario.horizon
    estimate = 10.0 * scenario.jobs + 3.0 * scenario.workers * horizon / scan
    if beat:
        estimate += 2.0 * scenario.workers * scenario.concurrency * horizon / beat
    faults = scenario.random_faults
    if faults is not None:  # every kind of random fault, each a few commands (a restart, a resend)
        per_hour = faults.crash_rate + faults.freeze_rate + faults.block_rate + faults.outage_rate
        estimate += 10.0 * per_hour * scenario.workers * horizon / 3600
    estimate += 10.0 * len(scenario.faults) * scenario.workers  # explicit faults: resent commands, a restart
    return estimate


def check_work(
    args: argparse.Namespace,
    commands: float,
    what: str,
    shrink: str = "the grids, --replications, --job-count, --workers or --horizon",
) -> None:
    """Refuse, before any work, a command estimated above MAX_COMMANDS unless --yes was given."""
    if commands <= MAX_COMMANDS or getattr(args, "yes", False):
        return
    hours = commands * SECONDS_PER_COMMAND / 3600
    raise ConfigError(
        f"{what} is estimated at up to {commands:.1e} simulated Redis commands (about {hours:,.1f} CPU-hours); "
        f"shrink {shrink}, or pass --yes to run it anyway"
    )


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def clamp_jobs(jobs: int | None) -> int | None:
    """--jobs above the usable cores only adds processes that wait: use the cores, with a notice."""
    cores = usable_cores()
    if jobs is not None and jobs > cores:
        print(
            f"emqsim: note: --jobs {jobs} is more than the {cores} usable core(s); using {cores}",
            file=sys.stderr,
        )
        return cores
    return jobs


def processes(args: Any) -> int:
    """The processes a pooled command runs: `--jobs` clamped to the usable cores (as given with `--dask`,
    whose workers are elsewhere), or one per usable core without it."""
    return (clamp_jobs(args.jobs) if not args.dask else args.jobs) or usable_cores()


def policy_grid(
    args: argparse.Namespace, config_policy: ReclaimPolicy | None
) -> tuple[int, float | None, float]:
    """How many policies the sweep's flags make, and their shortest heartbeat and scan (for the estimate),
    counted from the flags' grids without building them."""
    timeouts = len(DEFAULT_TIMEOUTS if args.timeout is None else args.timeout)
    scans = list(args.scan or [])
    beats = list(args.beat or [])
    if config_policy is not None:  # the file's policy, with the flags' grids over its settings
        settings = config_policy.settings()
        count = len(args.lease or [0]) * max(1, len(beats)) * max(1, len(scans))
        count += timeouts * max(1, len(scans))
        if not args.beat and args.lease and settings["beat"] is None:
            beats.append(min(args.lease) / 3)
        beats.append(settings["beat"] or 0)
        scans.append(settings["scan"])
    elif args.preset:
        # the preset's heartbeat follows its lease: an overridden lease of 0.004 s beats every millisecond
        shortest = {"lease": min(args.lease)} if args.lease else {}
        settings = PRESETS[args.preset].policy(**shortest).settings()
        count = max(1, len(scans)) * len(args.lease or [None]) * max(1, len(beats))
        if args.timeout is not None:
            count += timeouts * max(1, len(scans))
        beats.append(settings["beat"] or 0)
        scans.append(settings["scan"] or 5.0)
    else:
        count = len(args.lease or [30.0]) * max(1, len(beats)) * max(1, len(scans)) + timeouts * max(
            1, len(scans)
        )
        beats.append(min(args.lease or [30.0]) / 3)
    beat = min((b for b in beats if b), default=None)
    return count, beat, min(scans or [5.0])


def check_sweep_work(
    args: argparse.Namespace, scenarios: Sequence[Scenario], config_policy: ReclaimPolicy | None
) -> None:
    count, beat, scan = policy_grid(args, config_policy)
    per_policy = sum(commands_per_run(s, beat, scan) for s in scenarios)
    check_work(
        args,
        per_policy * count * args.replications,
        f"this sweep ({len(scenarios) * count:,} cells x {args.replications} replications)",
    )


_SCRATCH: dict[int, str] = {}  # a `--dask local` client's scratch folder, by id(client)


def close_dask(client: Any) -> None:
    """Close a client from `dask_executor`; a `--dask local` cluster is closed too and its scratch folder
    removed (after the cluster, whose workers clean their own folders as they stop)."""
    import shutil

    scratch = _SCRATCH.pop(id(client), None)
    cluster = client.cluster if scratch is not None else None
    client.close()
    if cluster is not None:
        cluster.close()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def dask_executor(address: str):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        fail("--dask", "needs Dask: pip install 'emqsim[dask]'")
    if address == "local":
        # the cluster's scratch files go in a private temporary folder that close_dask removes (by default
        # Dask leaves a dask-scratch-space/ folder in the current one)
        import tempfile

        scratch = tempfile.mkdtemp(prefix="emqsim-dask-")
        import logging

        # the workers' own logs stay quiet: a task's error comes back to this process as the command's one line
        cluster = LocalCluster(
            processes=True, dashboard_address=None, local_directory=scratch, silence_logs=logging.CRITICAL
        )
        client = Client(cluster)
        _SCRATCH[id(client)] = scratch
    else:
        try:
            client = Client(address, timeout="10s")
        except (OSError, ValueError, TypeError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            fail(
                "--dask",
                f"cannot reach a scheduler at {address!r} ({reason}); give 'local' or an address like tcp://host:8786",
            )
    return client.get_executor(), client


def progress(items: Any, quiet: bool) -> Any:
    """A tqdm bar on stderr over `items` when stderr is a terminal (long runs show they are moving)."""
    if quiet or not sys.stderr.isatty():
        return items
    from tqdm.auto import tqdm

    return tqdm(items, unit="run", file=sys.stderr, desc="simulating", leave=False)
