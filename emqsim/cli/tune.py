"""`python -m emqsim tune`: flags and a TOML file ([workload], [limits], [search]) into `emqsim.tune.tune`.

Every value is checked before any run starts; a bad one gets one line and exit status 2 (emqsim.cli).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from emqsim.cli.argtypes import (
    distribution,
    existing_file,
    grid,
    output_path,
    policy_choice,
    probability,
    rate,
    seconds,
    seconds_or_zero,
    timeouts,
    whole,
)
from emqsim.errors import ConfigError
from emqsim.policies import ReclaimPolicy
from emqsim.tune import (
    Limits,
    SearchSpace,
    Workload,
    build_candidates,
    read_durations,
    report,
    to_json_dict,
    tune,
)

EXAMPLE = """
examples:
  python -m emqsim tune --durations durations.csv --pause-rate 12 --pause-length lognormal:2:1 \\
      --max-false-reclaims 0.01 --max-requests 5
  python -m emqsim tune --preset bullmq --duration lognormal:20:1.5 --max-detection 40 --json
  python -m emqsim tune --config tune.toml --plot frontier.png --toml tuned.toml
"""


def amount(unit: str, example: str, zero: str = ""):
    """An argument type: a positive number of `unit` (the error names the unit; `zero` says why 0 cannot
    work, where it is a tempting value)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit} (e.g. {example})") from None
        if not math.isfinite(value) or value <= 0:
            why = f": {zero}" if zero and value == 0 else ""
            raise argparse.ArgumentTypeError(
                f"{text!r} must be a positive number of {unit} (e.g. {example}){why}"
            )
        return value

    return parse


WORKLOAD_KEYS = {
    "duration", "durations", "workers", "concurrency", "jobs", "arrival_rate", "crash_rate", "restart_after",
    "pause_rate", "pause_length", "rtt", "loss", "command_timeout", "outage_rate", "outage_length", "horizon",
}  # fmt: skip
LIMIT_KEYS = {
    "false_reclaims",
    "false_reclaims_per",
    "detection",
    "detection_stat",
    "requests_per_s",
    "confidence",
}
SEARCH_KEYS = {
    "leases",
    "beat_ratios",
    "scans",
    "timeouts",
    "preset",
    "min_replications",
    "max_replications",
    "indifference",
}


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 0.95)") from None
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0.5, 1), e.g. 0.95")
    return value


def ratios(text: str) -> list[float]:
    values = grid(text)
    if any(v < 2 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: lease/beat ratios must be >= 2, e.g. 3 or 2,3,5")
    return values


def add_tune_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EXAMPLE
    p.add_argument(
        "--config", type=existing_file, help="a TOML file with [workload], [limits], [search] tables"
    )
    w = p.add_argument_group("your workload (what you measured)")
    w.add_argument("--duration", type=distribution, help="job durations: lognormal:20:1.5, exp:60, 900, ...")
    w.add_argument("--durations", type=existing_file, metavar="FILE",
                   help="measured durations: seconds per line, a CSV with a duration column, or BullMQ's "
                   "processedOn,finishedOn (ms)")  # fmt: skip
    w.add_argument("--workers", type=whole(1), help="worker processes (default 4)")
    w.add_argument("--concurrency", type=whole(1), help="jobs per worker at once (default 2)")
    w.add_argument("--jobs-per-run", type=whole(1), help="jobs in one simulated run (default 100)")
    w.add_argument(
        "--arrival-rate",
        type=amount("jobs per second", "0.5"),
        metavar="PER_S",
        help="jobs per second (default: half capacity)",
    )
    w.add_argument(
        "--crash-rate",
        type=amount("crashes per worker-hour", "2"),
        metavar="PER_WORKER_HOUR",
        help="crashes per worker-hour (default 2)",
    )
    w.add_argument(
        "--restart-after",
        type=seconds_or_zero,
        metavar="S",
        help="a crashed worker restarts after S s (default 5)",
    )
    w.add_argument(
        "--pause-rate",
        type=rate,
        metavar="PER_WORKER_HOUR",
        help="pauses (GC, blocked loop) per worker-hour (default 6)",
    )
    w.add_argument("--pause-length", type=distribution, help="pause lengths (default lognormal:0.5:1)")
    w.add_argument("--rtt", type=distribution, help="round trip to Redis (default lognormal:0.002:0.5)")
    w.add_argument("--loss", type=probability, help="probability a renewal is lost (default 0)")
    w.add_argument(
        "--outage-rate",
        type=rate,
        metavar="PER_WORKER_HOUR",
        help="connection outages per worker-hour (default 0)",
    )
    w.add_argument("--outage-length", type=distribution, help="outage lengths (default lognormal:2:1)")
    w.add_argument("--horizon", type=seconds, help="a run stops here (default 14400 s)")
    g = p.add_argument_group("your limits")
    g.add_argument(
        "--max-false-reclaims",
        type=amount(
            "false reclaims per job (per hour with --per hour)",
            "0.01",
            "no number of runs can show a rate of exactly 0; give the rate you can live with, e.g. 0.001",
        ),
        metavar="X",
        help="false reclaims per job (or --per hour); default 0.01",
    )
    g.add_argument(
        "--per", choices=("job", "hour"), help="false reclaims per job (default) or per hour of operation"
    )
    g.add_argument("--max-detection", type=seconds, metavar="S", help="detection latency limit in seconds")
    g.add_argument("--detection", choices=("mean", "p99"), help="which detection statistic (default mean)")
    g.add_argument(
        "--max-requests",
        type=amount("Redis requests per second", "5"),
        metavar="PER_S",
        help="Redis requests per second, whole fleet",
    )
    g.add_argument("--confidence", type=fraction, help="joint confidence for the limits (default 0.95)")
    s = p.add_argument_group("the search")
    s.add_argument("--preset", choices=("bullmq",), help="tune within BullMQ's rules (tick = lockDuration/4)")
    s.add_argument("--lease", type=grid, help="leases to try (default 5,10,15,20,30,45,60,90,120)")
    s.add_argument("--beat-ratio", type=ratios, help="lease/beat ratios to try (default 2,3,5)")
    s.add_argument("--scan", type=grid, help="sweep intervals to try (default 1,2,5,10,15,30)")
    s.add_argument("--timeout", type=timeouts, help="fixed timeouts to compare ('none' to skip)")
    s.add_argument(
        "--policy",
        type=policy_choice,
        metavar="FILE.py:Class",
        help="also measure your detector, from its file (FILE.py:Class or 'FILE.py:Class(key=value, ...)', "
        "parameters as literals; docs/policies.md): on the same seeds and limits, decided meets / fails / "
        "undecided and reported beside the recommendation; no closed form prunes it and it is not tuned",
    )
    s.add_argument("--min-replications", type=whole(2), help="replications every candidate gets (default 3)")
    s.add_argument(
        "--max-replications", type=whole(2), help="most replications of one candidate (default 30)"
    )
    s.add_argument(
        "--verify",
        type=whole(0),
        default=10,
        help="runs of the answer on fresh seeds, doubled while undecided (default 10; 0 skips the check)",
    )
    s.add_argument(
        "--verify-max",
        type=whole(1),
        help="most fresh-seed runs of one setting (default 8 x --verify); up to 3 settings are tried",
    )
    o = p.add_argument_group("output")
    o.add_argument("--jobs", type=whole(1), help="parallel processes (default: all cores; same answer)")
    o.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on a Dask scheduler ('local' for a LocalCluster); the same answer as serial",
    )
    o.add_argument("--seed", type=whole(0), default=0, help="root seed (default 0)")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    o.add_argument("--quiet", action="store_true", help="no progress")
    o.add_argument(
        "--wide",
        action="store_true",
        help="tables with every interval in full (the default shows each estimate with its upper end and "
        "fits 100 columns)",
    )
    o.add_argument("--yes", action="store_true", help="run even if the work estimate is over the limit")
    o.add_argument("--plot", type=output_path(".png", ".svg"), help="write the frontier figure")
    o.add_argument("--toml", type=output_path(".toml"), help="write the tuned scenario + policy file")


# -- TOML input -------------------------------------------------------------------------------------------------
def load_tune_config(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """([workload], [limits], [search]) as keyword arguments, distributions parsed, errors naming the line."""
    from emqsim.config import Located, read_toml, toml_distribution

    data, text = read_toml(path, "tune file")  # the project's one TOML reader: size, type and depth checked
    where = Located(path, text)
    tables = {"workload": WORKLOAD_KEYS, "limits": LIMIT_KEYS, "search": SEARCH_KEYS}
    for key in data:
        if key not in tables:
            raise where.error(key, "unknown table; a tune file has [workload], [limits] and [search]")
    out = []
    for name, allowed in tables.items():
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise where.error(name, "must be a table")
        for key in table:
            if key not in allowed:
                raise where.error(f"{name}.{key}", f"unknown key; allowed: {', '.join(sorted(allowed))}")
        table = dict(table)
        for key in ("duration", "pause_length", "rtt", "outage_length"):
            if key in table:
                table[key] = toml_distribution(table[key], f"{name}.{key}", where)
        if "durations" in table:
            if not isinstance(table["durations"], str):
                raise where.error(f"{name}.durations", 'must be a file name in quotes, e.g. "durations.csv"')
            table["duration"] = read_durations(path.parent / table.pop("durations"))
        for key in ("leases", "beat_ratios", "scans", "timeouts"):
            if key in table:
                values = table[key]
                if not isinstance(values, list) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in values
                ):
                    raise where.error(f"{name}.{key}", "must be a list of numbers, e.g. [10, 20, 30]")
                if not all(math.isfinite(v) and v > 0 for v in values) or (key != "timeouts" and not values):
                    raise where.error(f"{name}.{key}", "must hold numbers > 0 (finite), e.g. [10, 20, 30]")
                if key == "beat_ratios" and any(v < 2 for v in values):
                    raise where.error(f"{name}.{key}", "lease/beat ratios must be >= 2, e.g. [2, 3, 5]")
                table[key] = tuple(float(v) for v in values)
        out.append(table)
    return out[0], out[1], out[2]


def build_inputs(args: argparse.Namespace) -> tuple[Workload, Limits, SearchSpace]:
    """Flags over the TOML file over the defaults; all checked here, before any run."""
    wk, lk, sk = load_tune_config(args.config) if args.config else ({}, {}, {})
    if args.duration is not None and args.durations is not None:
        raise ConfigError("--durations: give either --duration SPEC or --durations FILE, not both")
    if args.verify and args.verify_max is not None and args.verify_max < args.verify:
        raise ConfigError(
            f"--verify-max {args.verify_max} is below --verify {args.verify}: give at least as many"
        )
    flags = {
        "duration": args.duration or (read_durations(args.durations) if args.durations else None),
        "workers": args.workers, "concurrency": args.concurrency, "jobs": args.jobs_per_run,
        "arrival_rate": args.arrival_rate, "crash_rate": args.crash_rate, "restart_after": args.restart_after,
        "pause_rate": args.pause_rate, "pause_length": args.pause_length, "rtt": args.rtt, "loss": args.loss,
        "outage_rate": args.outage_rate, "outage_length": args.outage_length, "horizon": args.horizon,
    }  # fmt: skip
    wk.update({k: v for k, v in flags.items() if v is not None})
    lflags = {
        "false_reclaims": args.max_false_reclaims, "false_reclaims_per": args.per, "detection": args.max_detection,
        "detection_stat": args.detection, "requests_per_s": args.max_requests, "confidence": args.confidence,
    }  # fmt: skip
    lk.update({k: v for k, v in lflags.items() if v is not None})
    sflags = {
        "leases": args.lease, "beat_ratios": args.beat_ratio, "scans": args.scan, "timeouts": args.timeout,
        "preset": args.preset, "min_replications": args.min_replications, "max_replications": args.max_replications,
    }  # fmt: skip
    sk.update({k: tuple(v) if isinstance(v, list) else v for k, v in sflags.items() if v is not None})
    try:
        return Workload(**wk), Limits(**lk), SearchSpace(**sk)
    except TypeError as exc:
        raise ConfigError(f"wrong type of value ({exc})") from None


def tune_commands(
    workload: Workload, space: SearchSpace, verify_max: int, detector: ReclaimPolicy | None = None
) -> float:
    """An upper estimate of the Redis commands a search simulates (as `run` and `sweep` estimate theirs):
    every candidate at its most replications, and the fresh-seed check of up to 3 settings. A run lasts
    until its jobs are done (they arrive at `workload.rate`; 10 mean durations allowed for the last) or the
    horizon."""
    from emqsim.cli.work import commands_per_run

    mean = workload.duration.mean()
    last = 10 * mean if math.isfinite(mean) else workload.horizon
    span = min(workload.horizon, workload.jobs / workload.rate + last)
    scenario = workload.scenario().with_(horizon=max(span, 0.001))
    per_run = [commands_per_run(scenario, c.beat, c.scan) for c in build_candidates(space)]
    if detector is not None:  # measured at up to max_replications too
        per_run.append(commands_per_run(scenario, detector.settings()["beat"], detector.settings()["scan"]))
    return sum(per_run) * space.max_replications + 3 * verify_max * max(per_run, default=0.0)


def cmd_tune(args: argparse.Namespace) -> int:
    from emqsim.cli.work import check_work, close_dask, dask_executor, processes
    from emqsim.plots import savefig
    from emqsim.plots.tune import figure
    from emqsim.stats import write_atomically
    from emqsim.tune import scenario_toml

    if args.policy is not None and not isinstance(args.policy, ReclaimPolicy):
        raise ConfigError(
            "--policy: tune always searches the lease (and the timeouts of --timeout); give your detector as "
            "FILE.py:Class to measure it beside them"
        )
    workload, limits, space = build_inputs(args)
    verify_max = args.verify_max or 8 * args.verify
    candidates = len(build_candidates(space)) + (args.policy is not None)
    runs = candidates * space.max_replications + 3 * verify_max
    check_work(
        args,
        tune_commands(workload, space, verify_max, args.policy),
        f"this search (up to {runs:,} runs)",
        "--workers, --jobs-per-run, --horizon, --max-replications or the grids",
    )
    jobs = processes(args)
    say = (lambda msg: print(msg, file=sys.stderr)) if not args.quiet else None
    executor = client = None
    if (
        args.dask
    ):  # the sweep's and explore's helper: a LocalCluster for 'local', else the scheduler's address
        executor, client = dask_executor(args.dask)
    try:
        result = tune(
            workload, limits, space, seed=args.seed, jobs=jobs, verify=args.verify,
            verify_max=args.verify_max, detector=args.policy, executor=executor,
            progress=not args.quiet and sys.stderr.isatty(), say=say,
        )  # fmt: skip
    finally:
        if client is not None:
            close_dask(client)
    if args.json:
        sys.stdout.write(json.dumps(to_json_dict(result), indent=2, allow_nan=False) + "\n")
    else:
        print(report(result, wide=args.wide))
    if args.plot:
        savefig(figure(result), args.plot)
    if args.toml and result.recommended is not None:
        write_atomically(args.toml, scenario_toml(result))
    return 0
