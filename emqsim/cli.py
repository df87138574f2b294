"""The command line: `python -m emqsim sweep --lease 30 --beat 10` and friends.

Every flag is checked before anything runs; bad input gets one line on stderr (`emqsim: error: ...`) naming
the flag, the value and the fix, and exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import errno
import io
import json
import math
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from emqsim.distributions import Distribution, parse_distribution
from emqsim.errors import ConfigError
from emqsim.faults import Crash, Freeze, Network
from emqsim.fileio import write_atomically
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import PRESETS, presets_table
from emqsim.scenario import STANDARD, Scenario, standard
from emqsim.stats import to_csv, to_json
from emqsim.units import MAX_SECONDS, check_distribution

RUN_REPLICATIONS = 10  # `run`'s default: enough runs for t intervals with 9 degrees of freedom, in seconds
DEFAULT_TIMEOUTS = (30.0, 120.0, 600.0, 1200.0)
DEFAULT_SCENARIOS = ("slow-alive", "fast-dead", "frozen", "flaky-network", "production")

EXAMPLES = """
examples:
  python -m emqsim sweep --lease 30 --beat 10
  python -m emqsim sweep --lease 10:60:10 --beat 5 --timeout 60,600 --scenario fast-dead --json
  python -m emqsim sweep --preset bullmq --out results.csv --plot frontier.png
  python -m emqsim run --scenario frozen --freeze-after 5 --freeze-for 40 --lease 30 --beat 10
  python -m emqsim compare
  python -m emqsim timeline --scenario fast-dead --policy lease --out run.html
  python -m emqsim run --config measured-durations
  python -m emqsim run --scenario production --duration file:durations.csv
  python -m emqsim examples
  python -m emqsim presets
"""


# -- argument types: each raises ArgumentTypeError with the fix in the message ------------------------------
def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (e.g. 30 or 0.5)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds (e.g. 30)")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is beyond the simulator's clock (integer milliseconds): at most {MAX_SECONDS:g} s"
        )
    return value


def seconds_or_zero(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return seconds(text)


MAX_COUNT = 10**9  # workers, jobs, concurrency, replications: far beyond any sweep that fits in memory


def whole(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {high:,}")
        return value

    return parse


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability (e.g. 0.1)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a probability in [0, 1), e.g. 0.1")
    return value


def grid(text: str) -> list[float]:
    """`30`, `10,20,30` or `10:60:10` (start:stop:step, stop included), or a mix: `5,10:30:10`."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise argparse.ArgumentTypeError(f"{text!r} has an empty item; use 10,20,30 or 10:60:10")
        if ":" in part:
            pieces = part.split(":")
            if len(pieces) != 3:
                raise argparse.ArgumentTypeError(f"range {part!r} must be start:stop:step, e.g. 10:60:10")
            start, stop, step = (seconds(p) for p in pieces)
            if stop < start:
                raise argparse.ArgumentTypeError(f"range {part!r} has stop < start; write it as 10:60:10")
            count = int(math.floor((stop - start) / step + 1e-9)) + 1
            if count > 1000:
                raise argparse.ArgumentTypeError(f"range {part!r} has {count} values; at most 1000")
            values.extend(round(start + i * step, 9) for i in range(count))
        else:
            values.append(seconds(part))
    return sorted(set(values))


def timeouts(text: str) -> list[float]:
    if text.strip().lower() == "none":
        return []
    return grid(text)


def span(text: str) -> tuple[float, float]:
    """`A` or `A:B` seconds (uniform in [A, B])."""
    parts = text.split(":")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be A or A:B seconds, e.g. 1 or 1:5")
    low = seconds_or_zero(parts[0])
    high = seconds_or_zero(parts[-1])
    if high < low:
        raise argparse.ArgumentTypeError(f"{text!r} has B < A; write A:B with A <= B, e.g. 1:5")
    return (low, high)


def distribution(text: str) -> Distribution:
    try:
        return check_distribution(parse_distribution(text), "the distribution")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def scenario_name(text: str) -> str:
    if text not in STANDARD:
        raise argparse.ArgumentTypeError(f"unknown scenario {text!r}; choose one of: {', '.join(STANDARD)}")
    return text


def preset_name(text: str) -> str:
    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}; choose one of: {', '.join(PRESETS)}")
    return text


def output_path(*suffixes: str):
    def parse(text: str) -> Path:
        path = Path(text)
        if path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text!r} must end in {' or '.join(suffixes)}")
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"folder {str(folder)!r} does not exist; create it first")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"folder {str(folder)!r} is not writable")
        if path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{text!r} is a folder; give a file name, e.g. {text}/results{suffixes[0]}"
            )
        if path.exists() and not path.is_file():
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a regular file; give another name")
        if path.exists() and not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"{text!r} is read-only; make it writable or give another name")
        return path

    return parse


def writable_folder(what: str):
    """A folder that exists and is writable, or that can be created (its nearest existing parent is)."""

    def parse(text: str) -> Path:
        path = Path(text)
        if path.exists():
            if not path.is_dir():
                raise argparse.ArgumentTypeError(f"{text!r} is a file; {what} must be a folder")
            if not os.access(path, os.W_OK | os.X_OK):
                raise argparse.ArgumentTypeError(f"folder {text!r} is not writable")
            return path
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(
                f"cannot create folder {text!r}: {str(parent)!r} is not a writable folder"
            )
        return path

    return parse


CONFIG_HELP = (
    "a TOML scenario file instead of --scenario: a path, or the name of a shipped example such as "
    "gc-pauses (list them with `emqsim examples`)"
)


def example_files() -> dict[str, Path]:
    """The example scenario files installed with the package, by name (`gc-pauses` -> .../gc-pauses.toml)."""
    from importlib.resources import files

    folder = files("emqsim") / "examples"
    return {
        entry.name.removesuffix(".toml"): Path(str(entry))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    }


def config_file(text: str) -> Path:
    """A scenario file: an existing path, or a shipped example's name (`gc-pauses` or `gc-pauses.toml`)."""
    path = Path(text)
    if path.is_file():
        return path
    examples = example_files()
    name = text.removesuffix(".toml")
    if "/" not in text and name in examples:
        return examples[name]
    if path.name.removesuffix(".toml") in examples and path.parts[-2:-1] == ("examples",):
        return examples[path.name.removesuffix(".toml")]  # emqsim/examples/X.toml outside a checkout
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a readable file or an example name; check the path, or give one of: "
        f"{', '.join(examples)} (see `emqsim examples`)"
    )


# Optional features and the modules they need; `missing_extra` names what to install before any work starts.
EXTRAS = {
    "live": ("redis",),
    "notebooks": ("nbformat", "nbclient", "ipykernel"),
    "dask": ("dask", "distributed"),
}


def missing_extra(extra: str) -> str | None:
    """None if the modules of `extra` import, else one line saying which extra to install."""
    from importlib.util import find_spec

    def absent(module: str) -> bool:
        try:
            return find_spec(module) is None
        except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
            return True

    missing = [module for module in EXTRAS[extra] if absent(module)]
    if not missing:
        return None
    return f"needs the {extra!r} extra ({', '.join(missing)} missing): pip install 'emqsim[{extra}]'"


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable file; check the path")
    return path


# -- the parser ---------------------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse, but an error is ONE line: `emqsim sweep: error: argument --lease: ...`."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class MissingExtra(Parser):
    """The parser of a subcommand whose extra is not installed: any use, `--help` included, is one line
    naming the extra to install, and exit status 2."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> NoReturn:  # type: ignore[override]
        command = self.prog.split()[-1]
        message = missing_extra(command) or f"needs the {command!r} extra"
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_policy_flags(p: argparse.ArgumentParser, gridded: bool) -> None:
    kind = grid if gridded else seconds
    g = p.add_argument_group("policy settings (seconds)")
    several = "; a grid: 10,20,30 or 10:60:10" if gridded else ""
    g.add_argument("--lease", type=kind, help=f"lock lease (PX){several} (default 30)")
    g.add_argument("--beat", type=kind, help=f"heartbeat period{several} (default lease/3)")
    g.add_argument("--scan", type=kind, help=f"sweep/reaper interval{several} (default 5)")
    g.add_argument(
        "--timeout",
        type=timeouts if gridded else seconds,
        help="fixed timeout(s) for the reaper"
        + (" (default 30,120,600,1200; 'none' to skip)" if gridded else ""),
    )
    g.add_argument("--preset", type=preset_name, help=f"a real system's defaults: {', '.join(PRESETS)}")


def rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate per worker-hour (e.g. 2 or 0.5)") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a rate >= 0 per worker-hour (e.g. 2)")
    return value


def add_fault_flags(p: argparse.ArgumentParser) -> None:
    """Faults real deployments hit (added to every scenario run) and the BullMQ model options (lease
    policies and lease presets)."""
    g = p.add_argument_group("faults real queues hit (added to the scenario)")
    g.add_argument(
        "--block-for", type=seconds, metavar="X", help="job 0's event loop is blocked X s (work goes on)"
    )
    g.add_argument(
        "--block-after", type=span, metavar="A[:B]", help="... starting A (or U[A,B]) s into job 0"
    )
    g.add_argument("--block-rate", type=rate, metavar="R", help="random blocked loops per worker-hour")
    g.add_argument(
        "--block-median",
        type=seconds,
        metavar="S",
        help="their median length (lognormal, sigma 1.5; default 2)",
    )
    g.add_argument(
        "--outage-at", type=seconds_or_zero, metavar="T", help="every worker's connection drops at T s"
    )
    g.add_argument(
        "--outage-for", type=seconds, metavar="X", help="... for X s (then BullMQ's reconnect backoff)"
    )
    g.add_argument(
        "--failover-lag", type=seconds, metavar="S",
        help="... and it is a failover to a replica S s behind: the last S s of lock writes are lost",
    )  # fmt: skip
    g.add_argument("--outage-rate", type=rate, metavar="R", help="random connection outages per worker-hour")
    g.add_argument(
        "--outage-median",
        type=seconds,
        metavar="S",
        help="their median length (lognormal, sigma 1; default 2)",
    )
    g.add_argument(
        "--child-crash-after", type=span, metavar="A[:B]", help="job 0's sandboxed child exits A s in"
    )
    m = p.add_argument_group("BullMQ model options (lease policies)")
    m.add_argument(
        "--take",
        choices=("atomic", "after-wakeup"),
        help="atomic blocking move, or BullMQ's marker wake-up then moveToActive",
    )
    m.add_argument(
        "--track-by", choices=("token", "job"), help="lock manager keyed by take token, or by job id (BullMQ)"
    )
    m.add_argument(
        "--lazy-fail",
        action="store_true",
        help="past max_stalled: mark and re-queue; the next taker fails it (BullMQ 6)",
    )


def with_fault_flags(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """The scenario with the fault flags' faults added (checked here, before anything runs)."""
    from emqsim.distributions import LogNormal
    from emqsim.faults import Block, ChildCrash, Outage, RandomFaults

    get = lambda name: getattr(args, name, None)  # noqa: E731
    faults = list(scenario.faults)
    if get("block_after") is not None and get("block_for") is None:
        _fail("--block-after", "needs --block-for X (the block's length in seconds)")
    if get("block_for") is not None:  # replaces the scenario's own block of job 0 (as --freeze-for does)
        faults = [f for f in faults if not isinstance(f, Block) or f.job != 0]
        faults.append(
            Block(job=0, after=_span_dist(get("block_after") or (0.0, 0.0)), duration=args.block_for)
        )
    if (get("outage_at") is None) != (get("outage_for") is None):
        _fail(
            "--outage-at" if get("outage_at") is None else "--outage-for",
            "give both --outage-at T and --outage-for X",
        )
    if get("failover_lag") is not None and get("outage_at") is None:
        _fail("--failover-lag", "needs --outage-at T and --outage-for X (the failover's downtime)")
    if get("outage_at") is not None:
        faults.append(
            Outage(at=args.outage_at, duration=args.outage_for, lost_writes=get("failover_lag") or 0.0)
        )
    if get("child_crash_after") is not None:
        faults.append(ChildCrash(job=0, after=_span_dist(args.child_crash_after)))
    changes: dict[str, Any] = {}
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
    return scenario.with_(**changes) if changes else scenario


def with_model_options(policy: ReclaimPolicy, args: argparse.Namespace) -> ReclaimPolicy:
    """The policy with --take/--track-by/--lazy-fail applied (lease policies only)."""
    take, track_by, lazy = (
        getattr(args, "take", None),
        getattr(args, "track_by", None),
        getattr(args, "lazy_fail", False),
    )
    if take is None and track_by is None and not lazy:
        return policy
    if policy.renewal is None:
        flag = "--take" if take else "--track-by" if track_by else "--lazy-fail"
        _fail(flag, f"{policy.name!r} has no lease: the BullMQ model options apply to lease policies only")
    policy = copy.deepcopy(policy)
    if take is not None:
        policy.take_after_wakeup = take == "after-wakeup"
    if track_by is not None:
        assert policy.renewal is not None  # checked above
        policy.renewal = replace(policy.renewal, track_by=track_by)
    if lazy:
        policy.lazy_fail = True
    return policy


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=whole(0), default=0, help="root seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_work_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--yes",
        action="store_true",
        help=f"run even if the work is estimated above {MAX_COMMANDS:.0e} simulated Redis commands",
    )


def build_parser() -> Parser:
    from emqsim import __version__

    parser = Parser(
        prog="emqsim",
        description="Simulate dead-worker detection in a Redis job queue: lock lease + heartbeat vs fixed timeout.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"emqsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    p = sub.add_parser(
        "sweep",
        help="the main job: standard scenarios under the lease and a range of timeouts, one table",
        description="Run the standard scenarios under the lease policy and under the timeout policy at a range "
        "of timeouts, with replications, and print one table with 95% confidence intervals.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_policy_flags(p, gridded=True)
    p.add_argument("--scenario", type=scenario_name, action="append", help="repeatable (default: all five)")
    p.add_argument("--config", type=config_file, help=CONFIG_HELP)
    p.add_argument("--replications", type=whole(1, MAX_COUNT), default=30, help="runs per cell (default 30)")
    p.add_argument("--jobs", type=whole(1, 4096), help="parallel processes (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on a Dask scheduler ('local' for a LocalCluster)")
    p.add_argument(
        "--cache",
        type=writable_folder("the cache"),
        metavar="DIR",
        help="reuse finished cells from DIR (resumable sweeps)",
    )
    p.add_argument(
        "--out", type=output_path(".csv", ".json"), help="also write the rows to FILE.csv|FILE.json"
    )
    p.add_argument("--plot", type=output_path(".png", ".svg"), help="write the trade-off figure")
    p.add_argument(
        "--force",
        action="store_true",
        help="after an interrupt, replace --out even if it held more rows than finished",
    )
    p.add_argument("--wide", action="store_true", help="all table columns (the default fits 100 columns)")
    add_fault_flags(p)
    add_run_flags(p)
    add_work_flags(p)

    p = sub.add_parser("run", help="one scenario under one policy, with the scenario's knobs as flags")
    p.add_argument(
        "--scenario", type=scenario_name, default="production", help="standard scenario to start from"
    )
    p.add_argument("--config", type=config_file, help=CONFIG_HELP)
    p.add_argument("--policy", choices=("lease", "timeout"), help="detector to run (default lease)")
    add_policy_flags(p, gridded=False)
    knobs = p.add_argument_group("scenario knobs")
    knobs.add_argument("--workers", type=whole(1, MAX_COUNT), help="worker processes")
    knobs.add_argument("--concurrency", type=whole(1, MAX_COUNT), help="jobs each worker runs at once")
    knobs.add_argument("--job-count", type=whole(1, MAX_COUNT), help="how many jobs")
    knobs.add_argument(
        "--duration",
        type=distribution,
        help="job work: 900, exp:60, lognormal:20:1.5, empirical:1,2,5 or file:durations.csv "
        "(measured seconds, one per line; see docs/durations.md)",
    )
    knobs.add_argument(
        "--die-after", type=span, metavar="A[:B]", help="job 0's worker dies A (or U[A,B]) s in"
    )
    knobs.add_argument("--freeze-after", type=span, metavar="A[:B]", help="job 0's worker freezes A s in")
    knobs.add_argument("--freeze-for", type=seconds, metavar="X", help="freeze length in seconds")
    knobs.add_argument("--loss", type=probability, help="probability a renewal is lost")
    knobs.add_argument(
        "--rtt", type=distribution, help="network round trip in seconds, e.g. 0.002 or exp:0.005"
    )
    knobs.add_argument("--horizon", type=seconds, help="stop the run here (seconds)")
    knobs.add_argument(
        "--remove-on-complete",
        action="store_true",
        help="delete completed jobs from Redis (BullMQ's removeOnComplete): same results, Redis memory bounded "
        "by the jobs in flight (for big --job-count)",
    )
    p.add_argument(
        "--replications",
        type=whole(1, MAX_COUNT),
        default=RUN_REPLICATIONS,
        help=f"independent runs (default {RUN_REPLICATIONS}; with 1 there are no confidence intervals)",
    )
    add_fault_flags(p)
    add_run_flags(p)
    add_work_flags(p)

    p = sub.add_parser("compare", help="the two columns: slow-but-alive vs fast-but-dead, timeout vs lease")
    p.add_argument("--lease", type=seconds, default=30.0, help="lock lease in seconds (default 30)")
    p.add_argument("--beat", type=seconds, default=10.0, help="heartbeat period in seconds (default 10)")
    p.add_argument("--scan", type=seconds, default=5.0, help="sweep/reaper interval in seconds (default 5)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="the reaper's fixed timeout (default 600)")
    p.add_argument("--slow-duration", type=seconds, default=900.0, help="the slow job's length (default 900)")
    p.add_argument(
        "--die-after", type=seconds_or_zero, default=1.0, help="when the fast worker dies (default 1)"
    )
    p.add_argument("--replications", type=whole(1, MAX_COUNT), default=20, help="runs per cell (default 20)")
    add_run_flags(p)
    add_work_flags(p)

    p = sub.add_parser(
        "timeline", help="one scenario's timeline: an interactive HTML page, a PNG/SVG image, or text"
    )
    p.add_argument(
        "--scenario", type=scenario_name, default="fast-dead", help="standard scenario (default fast-dead)"
    )
    p.add_argument("--config", type=config_file, help=CONFIG_HELP)
    p.add_argument("--policy", choices=("lease", "timeout"), help="detector to run (default lease)")
    add_policy_flags(p, gridded=False)
    p.add_argument(
        "--out",
        type=output_path(".html", ".png", ".svg"),
        help="FILE.html (one self-contained page: zoom, hover for each record), FILE.png or FILE.svg; "
        "without it, a text timeline",
    )
    p.add_argument("--seed", type=whole(0), default=0, help="root seed (default 0)")
    add_work_flags(p)

    p = sub.add_parser(
        "explore",
        help="every fault timing, not a sample: exact worst case, boundaries, smallest counterexamples",
        description="Search every timing of one fault (or a pair) at 1 ms: offsets against the renewal tick, "
        "sweep phases, fault lengths. Prints the exact min/mean/max of fault -> reclaim, the properties "
        "that fail, their boundaries and smallest counterexamples (docs/explore.md).",
    )
    from emqsim.explore import add_explore_arguments

    add_explore_arguments(p)

    p = sub.add_parser("presets", help="list real systems' defaults and their sources")
    p.add_argument("--json", action="store_true", help="print the presets as JSON")

    p = sub.add_parser("scenarios", help="list the standard scenarios and their knobs")

    p = sub.add_parser(
        "examples", help="list the example scenario files shipped with emqsim and where they are installed"
    )

    p = sub.add_parser("fields", help="what every table column and JSON field counts, and its interval")
    p.add_argument("--json", action="store_true", help="print the fields as JSON")

    p = sub.add_parser("figures", help="regenerate every figure in figures/ from fixed seeds")
    p.add_argument(
        "--out", type=writable_folder("--out"), default=Path("figures"), help="folder (default figures/)"
    )
    p.add_argument("--quick", action="store_true", help="fewer replications (for tests)")

    p = sub.add_parser(
        "grade",
        help="check an assignment notebook without nbgrader (runs the notebook's code; "
        "pip install 'emqsim[notebooks]')",
        description="Run an assignment notebook in a private copy of its folder and score its test cells. This "
        "runs the notebook's code: run it as an unprivileged user or in a container for untrusted submissions.",
    )
    p.add_argument("notebook", type=existing_file, help="the assignment notebook (.ipynb)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="per-cell timeout (default 600)")
    p.add_argument(
        "--time-limit",
        type=seconds,
        default=3600.0,
        help="wall-clock limit for the whole grading (default 3600)",
    )
    p.add_argument("--student", metavar="ID", help="the student id the per-student seeds derive from")
    p.add_argument(
        "--against",
        type=existing_file,
        metavar="SOURCE",
        help="the instructor's source notebook: its locked and test cells (hidden tests too) replace the file's",
    )
    from emqsim.assignments import add_assignments_parser

    add_assignments_parser(sub)

    from emqsim.tune_cli import add_tune_arguments

    p = sub.add_parser("tune", help="recommend lease, beat and sweep settings from your own measurements")
    add_tune_arguments(p)

    live_help = "run the lease protocol on a real Redis with real processes"
    if missing_extra("live"):  # the subcommand stays; running it (even --help) names the extra to install
        p = sub.add_parser("live", help=f"{live_help} (pip install 'emqsim[live]')", add_help=False)
        p.__class__ = MissingExtra  # same state as a Parser; parsing anything names the extra
    else:
        from emqsim.live import add_live_arguments

        p = sub.add_parser("live", help=live_help)
        add_live_arguments(p)
    return parser


# -- building policies and scenarios from flags ---------------------------------------------------------------
def _fail(flag: str, message: str) -> NoReturn:
    raise ConfigError(f"{flag}: {message}")


def lease_policies(args: argparse.Namespace) -> list[ReclaimPolicy]:
    scans = args.scan or [5.0]
    if args.preset:
        chosen = PRESETS[args.preset]
        policies = []
        for scan in args.scan or [None]:
            for lease in args.lease or [None]:
                overrides: dict[str, Any] = {}
                for key, value in (("lease", lease), ("scan", scan)):
                    if value is not None:
                        if key not in chosen.defaults:
                            _fail(
                                f"--{key}",
                                f"preset {chosen.name!r} has no {key}; it takes {', '.join(chosen.defaults)}",
                            )
                        overrides[key] = value
                if args.beat:
                    if "beat" not in chosen.defaults:
                        _fail(
                            "--beat",
                            f"preset {chosen.name!r} derives its heartbeat from the lease; drop --beat",
                        )
                    for beat in args.beat:
                        policies.append(chosen.policy(**overrides, beat=beat))
                else:
                    policies.append(chosen.policy(**overrides))
        return policies
    leases = args.lease or [30.0]
    pairs = []
    for lease in leases:
        for beat in args.beat or [lease / 3]:
            if beat >= lease:
                continue
            pairs.append((lease, beat))
    if not pairs:
        _fail(
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


def single_policy(args: argparse.Namespace) -> ReclaimPolicy:
    if args.preset:
        chosen = PRESETS[args.preset]
        overrides = {
            k: getattr(args, k) for k in ("lease", "beat", "scan", "timeout") if getattr(args, k) is not None
        }
        for key in overrides:
            if key not in chosen.defaults:
                _fail(
                    f"--{key}", f"preset {chosen.name!r} has no {key}; it takes {', '.join(chosen.defaults)}"
                )
        return chosen.policy(**overrides)
    scan = args.scan or 5.0
    if getattr(args, "policy", None) == "lease" and args.timeout is not None:
        _fail("--timeout", "--policy lease has no timeout; drop --timeout or use --policy timeout")
    if getattr(args, "policy", None) == "timeout" or (
        args.timeout is not None and args.lease is None and args.beat is None
    ):
        if args.lease is not None or args.beat is not None:
            _fail(
                "--lease",
                "the timeout policy has no lease or heartbeat; drop --lease/--beat or use --policy lease",
            )
        return TimeoutPolicy(args.timeout or 600.0, scan)
    if args.timeout is not None:
        _fail("--timeout", "the lease policy has no timeout; use --policy timeout")
    lease = args.lease or 30.0
    beat = args.beat or lease / 3
    if beat >= lease:
        _fail("--beat", f"{beat:g} must be shorter than the lease ({lease:g}); try --beat {lease / 3:g}")
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
        faults.append(Crash(job=0, after=_span_dist(args.die_after)))
    if getattr(args, "freeze_for", None) is not None or getattr(args, "freeze_after", None) is not None:
        if args.freeze_for is None:
            _fail("--freeze-after", "needs --freeze-for X (the pause length in seconds)")
        faults = [f for f in faults if not isinstance(f, Freeze) or f.job != 0]
        faults.append(
            Freeze(job=0, after=_span_dist(args.freeze_after or (0.0, 0.0)), duration=args.freeze_for)
        )
    changes["faults"] = tuple(faults)
    if getattr(args, "remove_on_complete", False):
        changes["remove_on_complete"] = True
    if getattr(args, "loss", None) is not None or getattr(args, "rtt", None) is not None:
        net = scenario.network
        changes["network"] = Network(
            rtt=args.rtt if args.rtt is not None else net.rtt,
            loss=args.loss if args.loss is not None else net.loss,
            loss_on=net.loss_on,
            command_timeout=net.command_timeout,
        )
    return with_fault_flags(scenario.with_(**changes), args)


def _span_dist(pair: tuple[float, float]) -> float | Distribution:
    from emqsim.distributions import Uniform

    low, high = pair
    return low if low == high else Uniform(low, high)


# -- output ---------------------------------------------------------------------------------------------------
TABLE_WIDTH = 100  # default tables fit a 100-column terminal; --wide adds the rest
FIELDS_HINT = "columns explained: python -m emqsim fields"


def _decimals(x: float, significant: int) -> int:
    """Decimals that show `significant` significant digits of x (0 for big numbers, at most 4)."""
    if x == 0 or not math.isfinite(x):
        return 0
    return max(0, min(4, significant - 1 - math.floor(math.log10(abs(x)))))


def _fmt(x: Any, digits: int | None = None) -> str:
    """A number for a table: `-` for none, whole numbers as they are, floats with 3 significant digits
    (or `digits` decimals)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, bool) or not isinstance(x, float):
        return str(x)
    if x == 0:
        return "0"
    if digits is None and x.is_integer() and abs(x) < 1e6:
        return f"{x:.0f}"
    d = digits if digits is not None else _decimals(x, 3)
    return f"{x:.{d}f}"


def _ci(value: Any, ci: Any, lower_bound: bool = False, upper_bound: bool = False) -> str:
    """`est [lo, hi]`, with `n/a` for a missing end (or for the whole interval when there is none) and a
    `>=`/`<=` marker when the estimate is only a bound. Never prints a zero-width interval."""
    if value is None:
        return "-"
    marker = ">=" if lower_bound else ("<=" if upper_bound else "")
    ends = [x for x in (ci or []) if x is not None]
    if not ends:
        return f"{marker}{_fmt(value)} [n/a]"
    if ci[0] is not None and ci[1] is not None and ci[0] == ci[1]:
        return f"{marker}{_fmt(value)} [n/a]"  # defensive: a zero-width interval is no interval
    d = _decimals(float(value), 3) if value else 0
    d = max([d] + [_decimals(float(x), 2) for x in ends if x])
    if ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        d = max(d, min(4, _decimals(ci[1] - ci[0], 1)))
    if value:
        d = min(d, max(0, 3 - math.floor(math.log10(abs(value)))))  # at most 4 significant digits
    d = _distinct(ci, d)

    def end(x: Any) -> str:
        return "n/a" if x is None else ("0" if x == 0 else f"{x:.{d}f}")

    est = "0" if value == 0 else f"{value:.{d}f}"
    return f"{marker}{est} [{end(ci[0])}, {end(ci[1])}]"


def _distinct(ci: Any, d: int) -> int:
    """More decimals until the two printed ends differ: an interval must never look zero-width."""
    if ci and ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        while d < 8 and f"{ci[0]:.{d}f}" == f"{ci[1]:.{d}f}":
            d += 1
    return d


def settings_text(row: dict[str, Any]) -> str:
    """The policy and its settings in seconds: `lease L=30 B=10 S=5`, `timeout T=600 S=5`."""
    if row.get("timeout") is not None:
        return f"{row['policy']} T={row['timeout']:g} S={row['scan']:g}"
    beat = f" B={row['beat']:g}" if row.get("beat") is not None else ""
    return f"{row['policy']} L={row['lease']:g}{beat} S={row['scan']:g}"


def _bound(row: dict[str, Any], key: str) -> bool:
    return bool(row.get(key))


@dataclass(frozen=True)
class Column:
    """A table column: a two-line header (what; per run / per job / total, unit), the cell, the JSON field."""

    title: str
    scope: str
    cell: Callable[[dict[str, Any]], str]
    field: str
    wide: bool = False  # shown only with --wide


TABLE_COLUMNS = (
    Column("scenario", "", lambda r: str(r["scenario"]), "scenario"),
    Column("policy, settings", "seconds", settings_text, "policy"),
    Column(
        "false reclaims",
        "per job [95% CI]",
        lambda r: _ci(r["false_reclaims_per_job"], r["false_reclaims_per_job_ci"]),
        "false_reclaims_per_job",
    ),
    Column(
        "detection s",
        "mean/crash [95% CI]",
        lambda r: _ci(
            r["detection_latency_mean_s"],
            r["detection_latency_mean_s_ci"],
            lower_bound=_bound(r, "detection_latency_censored"),
        ),
        "detection_latency_mean_s",
    ),
    Column(
        "p95 s",
        "pooled",
        lambda r: (
            (">=" if _bound(r, "detection_latency_pooled_p95_s_lower_bound") else "")
            + _fmt(r["detection_latency_pooled_p95_s"])
        ),
        "detection_latency_pooled_p95_s",
        wide=True,
    ),
    Column("undet.", "total", lambda r: _fmt(r["crashes_undetected_total"]), "crashes_undetected_total"),
    Column(
        "hostage s",
        "per run",
        lambda r: (">=" if _bound(r, "detection_latency_censored") else "") + _fmt(r["hostage_s_per_run"]),
        "hostage_s_per_run",
    ),
    Column(
        "max s",
        "pooled",
        lambda r: (
            (">=" if _bound(r, "detection_latency_censored") else "")
            + _fmt(r["detection_latency_pooled_max_s"])
        ),
        "detection_latency_pooled_max_s",
        wide=True,
    ),
    Column("crashes", "total", lambda r: _fmt(r["crashes_total"]), "crashes_total", wide=True),
    Column(
        "dup runs",
        "per run",
        lambda r: _fmt(r["duplicate_executions_per_run"]),
        "duplicate_executions_per_run",
        wide=True,
    ),
    Column(
        "wasted s",
        "per run [95% CI]",
        lambda r: _ci(r["wasted_work_s_per_run"], r["wasted_work_s_per_run_ci"]),
        "wasted_work_s_per_run",
        wide=True,
    ),
    Column(
        "redis req/s",
        "per run-second",
        lambda r: _fmt(r["redis_requests_per_s"]),
        "redis_requests_per_s",
        wide=True,
    ),
)


def format_table(rows: Sequence[dict[str, Any]], columns=TABLE_COLUMNS, wide: bool = False) -> str:
    """A plain-text table with a two-line header; the first two columns left-aligned, numbers right-aligned;
    a footer pointing at the field reference."""
    columns = [c for c in columns if wide or not c.wide]
    cells = [[c.title for c in columns], [c.scope for c in columns]]
    cells += [[c.cell(r) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if n == 1:
            lines.append("  ".join("-" * w for w in widths))
    extra = "" if wide else "; --wide for more columns"
    lines.append(f"{FIELDS_HINT}{extra}")
    return "\n".join(lines)


PROVENANCE_LIBRARIES = ("simpy", "numpy", "scipy", "matplotlib")


def provenance(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    """What produced a result: emqsim's version, the seed, `fields`, the command line, Python's and the
    libraries' versions. A FILE.json written by --out carries it as top-level keys, a FILE.csv as its first
    line (`--json` on stdout keeps only version, seed and replications, so equal runs print equal text)."""
    import platform
    import shlex
    from importlib.metadata import PackageNotFoundError, version

    from emqsim import __version__

    libraries: dict[str, str | None] = {}
    for name in PROVENANCE_LIBRARIES:
        try:
            libraries[name] = version(name)
        except PackageNotFoundError:
            libraries[name] = None
    argv = getattr(args, "argv", None)
    return {
        "version": __version__,
        "seed": getattr(args, "seed", None),
        **fields,
        "command": shlex.join(["emqsim", *argv]) if argv is not None else None,
        "python": platform.python_version(),
        "libraries": libraries,
    }


CSV_PROVENANCE_PREFIX = "# emqsim provenance: "


def _wrap(text: str, indent: int, width: int = TABLE_WIDTH) -> str:
    import textwrap

    pad = " " * indent
    return textwrap.fill(text, width=width, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False)


def write_rows(path: Path, rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    """FILE.json: `{**header, "rows": [...]}`. FILE.csv: one comment line `# emqsim provenance: {JSON header}`,
    then the rows (`pandas.read_csv(path, comment="#")` skips the comment)."""
    if path.suffix.lower() == ".json":
        text = to_json(rows, **header)
    else:
        text = CSV_PROVENANCE_PREFIX + json.dumps(header, separators=(", ", ": ")) + "\n" + to_csv(rows)
    write_atomically(path, text)


# -- commands -------------------------------------------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.sweep import Cell, run_sweep

    if args.config and args.scenario:
        _fail("--config", "give either --config FILE or --scenario NAME, not both")
    config_policy = None
    if args.config:
        from emqsim.config import load_config

        scenario, config_policy = load_config(args.config)
        scenarios = [scenario]
    else:
        scenarios = [standard(name) for name in (args.scenario or DEFAULT_SCENARIOS)]
    scenarios = [with_fault_flags(s, args) for s in scenarios]
    use_config_policy = config_policy is not None and not (args.lease or args.preset)
    check_sweep_work(args, scenarios, config_policy if use_config_policy else None)
    policies: list[ReclaimPolicy]
    if use_config_policy:
        assert config_policy is not None
        policies = [config_policy] + timeout_policies(args)
    else:
        policies = lease_policies(args) + (
            [] if args.preset and args.timeout is None else timeout_policies(args)
        )
    if args.take or args.track_by or args.lazy_fail:
        policies = [with_model_options(p, args) if p.renewal is not None else p for p in policies]
    cells = [Cell(s, p) for s in scenarios for p in policies]
    jobs = clamp_jobs(args.jobs) if not args.dask else args.jobs
    executor = None
    client = None
    if args.dask:
        executor, client = _dask_executor(args.dask)
    interrupted: list[str] = []
    stop = StopSignals()

    def on_interrupt(done: int, total: int) -> None:
        word = "terminated" if stop.signum == signal.SIGTERM else "interrupted"
        interrupted.append(f"emqsim: {word}: kept the {done} of {total} cells that finished")

    with stop.installed():
        try:
            result = run_sweep(
                cells,
                replications=args.replications,
                seed=args.seed,
                jobs=jobs,
                executor=executor,
                progress=False if args.quiet else None,
                cache_dir=args.cache,
                on_interrupt=on_interrupt,
            )
        finally:
            stop.defer()  # from here on a signal is noted, never raised: the finished rows get written
            if client is not None:
                client.close()
        rows = result.rows
        header = {"version": __version__, "seed": args.seed, "replications": args.replications}
        saved = save_rows(args, rows, header, complete=result.complete)
        if args.plot and rows and result.complete:
            from emqsim.plots import frontier, savefig

            savefig(frontier(rows).figure, args.plot)
        for line in interrupted:
            print(line + saved, file=sys.stderr)
        if args.json:
            sys.stdout.write(to_json(rows, **header))
        else:
            print(format_table(rows, wide=args.wide))
            _print_paired(result, cells)
    if interrupted or stop.signum is not None:
        return 143 if stop.signum == signal.SIGTERM else 130
    return 0


def _ignore_further_interrupts() -> None:
    """After a Ctrl-C the process only reports and exits: another Ctrl-C must not turn the exit status 130
    into death by signal."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM while a sweep runs: the first raises KeyboardInterrupt, so the sweep stops
    and keeps the cells that finished; any later one (a second, impatient Ctrl-C) is only noted, so it cannot
    cut short the bounded work of stopping and saving. After `defer()` no signal raises at all."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferred = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            if not self.deferred:
                raise KeyboardInterrupt

    def defer(self) -> None:
        self.deferred = True

    def installed(self):
        import contextlib

        @contextlib.contextmanager
        def scope():
            import threading

            if (
                threading.current_thread() is not threading.main_thread()
            ):  # signals reach the main thread only
                yield self
                return
            previous = {sig: signal.signal(sig, self) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield self
            finally:
                for sig, handler in previous.items():
                    # once stopping, the process only saves, reports and exits: a later Ctrl-C must not
                    # kill it by signal on the way out (the exit status says 130 or 143, not -2)
                    signal.signal(sig, signal.SIG_IGN if self.signum is not None else handler)

        return scope()


def rows_in(path: Path) -> float | None:
    """How many result rows an existing --out file holds: None if there is no file, inf if it cannot be read
    as results (it is then never replaced by a partial sweep)."""
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            return float(len(json.loads(text)["rows"]))
        import csv
        import io

        body = [line for line in text.splitlines() if not line.startswith(CSV_PROVENANCE_PREFIX)]
        return float(max(0, sum(1 for _ in csv.reader(io.StringIO("\n".join(body)))) - 1))

        return float(max(0, sum(1 for _ in csv.reader(io.StringIO(text))) - 1))
    except (OSError, ValueError, KeyError, TypeError):
        return math.inf


def save_rows(
    args: argparse.Namespace, rows: list[dict[str, Any]], header: dict[str, Any], complete: bool
) -> str:
    """Write --out. A complete sweep replaces the file; an interrupted one never replaces a file that held
    more rows (unless --force): its rows go beside it, to NAME.partial.csv|json. Says what it did."""
    if not args.out:
        return ""
    if not rows:
        return f"; no cell finished, {args.out} not written"
    old = rows_in(args.out)
    if not complete and old is not None and len(rows) < old and not args.force:
        partial = args.out.with_name(f"{args.out.stem}.partial{args.out.suffix}")
        write_rows(partial, rows, provenance(args, replications=header["replications"]))
        held = "rows it cannot read" if math.isinf(old) else f"{old:.0f} rows"
        return f"; {args.out} kept ({held}); the {len(rows)} finished rows are in {partial} (--force replaces it)"
    write_rows(args.out, rows, provenance(args, replications=header["replications"]))
    return f"; rows written to {args.out}"


# -- bounded work ---------------------------------------------------------------------------------------------
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
    if faults is not None:
        per_hour = (faults.crash_rate or 0) + (faults.freeze_rate or 0)
        estimate += 10.0 * per_hour * scenario.workers * horizon / 3600
    return estimate


def check_work(args: argparse.Namespace, commands: float, what: str) -> None:
    """Refuse, before any work, a command estimated above MAX_COMMANDS unless --yes was given."""
    if commands <= MAX_COMMANDS or getattr(args, "yes", False):
        return
    hours = commands * SECONDS_PER_COMMAND / 3600
    raise ConfigError(
        f"{what} is estimated at up to {commands:.1e} simulated Redis commands (about {hours:,.1f} CPU-hours); "
        "shrink the grids, --replications, --job-count, --workers or --horizon, or pass --yes to run it anyway"
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


def _policy_grid(
    args: argparse.Namespace, config_policy: ReclaimPolicy | None
) -> tuple[int, float | None, float]:
    """How many policies the sweep's flags make, and their shortest heartbeat and scan (for the estimate),
    counted from the flags' grids without building them."""
    timeouts = len(DEFAULT_TIMEOUTS if args.timeout is None else args.timeout)
    scans = list(args.scan or [])
    beats = list(args.beat or [])
    if config_policy is not None:
        settings = config_policy.settings()
        count = 1 + timeouts * max(1, len(scans))
        beats.append(settings["beat"] or 0)
        scans.append(settings["scan"])
    elif args.preset:
        settings = PRESETS[args.preset].policy().settings()
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
    count, beat, scan = _policy_grid(args, config_policy)
    per_policy = sum(commands_per_run(s, beat, scan) for s in scenarios)
    check_work(
        args,
        per_policy * count * args.replications,
        f"this sweep ({len(scenarios) * count:,} cells x {args.replications} replications)",
    )


PAIRED_METRICS = (
    ("detection_latencies", "detection s per crash", " s"),
    ("false_reclaims", "false reclaims per run", ""),
    ("hostage_time", "hostage s per run", " s"),
)


def paired_text(d: dict[str, Any], unit: str) -> str:
    """`-425.5 s [-466.1, -384.9]`; a censored side makes it a bound (`<=`/`>=`, one end n/a); no spread
    between the pairs gives `[n/a: the same in all N pairs]`, never a zero-width interval."""
    marker = {"upper": "<=", "lower": ">=", "none": "~"}.get(d.get("bound", "exact"), "")
    mean = d["mean"]
    if d["ci"] is None:
        why = f"the same in all {d['pairs']} pairs" if d["pairs"] >= 2 else f"{d['pairs']} pair"
        if d.get("bound") == "none":
            why = "both sides censored"
        return f"{marker}{mean:+.3g}{unit} [n/a: {why}]"
    ci = d["ci"]
    d_ = max(_decimals(mean, 3) if mean else 0, *(_decimals(x, 2) for x in ci if x))
    if ci[0] is not None and ci[1] is not None and ci[1] > ci[0]:
        d_ = max(d_, min(4, _decimals(ci[1] - ci[0], 2)))
    d_ = _distinct(ci, d_)
    ends = ["n/a" if x is None else f"{x:+.{d_}f}" for x in ci]
    return f"{marker}{mean:+.{d_}f}{unit} [{ends[0]}, {ends[1]}]"


def _print_paired(result, cells) -> None:
    """Per scenario: the lease minus the seed's 10-minute timeout, paired on the same seeds, with 95% CIs."""
    lines = []
    by_scenario: dict[str, dict[str, int]] = {}
    for index, cell in enumerate(cells):
        if not result.summaries[index]:
            continue
        settings = cell.policy.settings()
        key = (
            "timeout" if settings["timeout"] == 600.0 else ("lease" if settings["timeout"] is None else None)
        )
        if key and key not in by_scenario.setdefault(cell.scenario.name, {}):
            by_scenario[cell.scenario.name][key] = index
    name_width = max((len(n) for n in by_scenario), default=0)
    label_width = max(len(label) for _, label, _ in PAIRED_METRICS)
    for name, pair in by_scenario.items():
        if "lease" not in pair or "timeout" not in pair:
            continue
        first = True
        for metric, label, unit in PAIRED_METRICS:
            d = result.paired(pair["lease"], pair["timeout"], metric)
            if d["mean"] is None or d["pairs"] < 1 or (d["mean"] == 0 and d["ci"] is None):
                continue  # nothing to compare, or no difference in any pair
            head = name if first else ""
            lines.append(f"  {head.ljust(name_width)}  {label.ljust(label_width)}  {paired_text(d, unit)}")
            first = False
    if lines:
        print("\nlease minus the 600 s timeout, paired on the same seeds (95% CI):\n" + "\n".join(lines))
        if any("  <=" in line or "  >=" in line for line in lines):
            print("  (<= / >=: some crashes were still undetected at the horizon, so only one end is known)")


def _dask_executor(address: str):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        _fail("--dask", "needs Dask: pip install 'emqsim[dask]'")
    if address == "local":
        client = Client(LocalCluster(processes=True, dashboard_address=None))
    else:
        try:
            client = Client(address, timeout="10s")
        except (OSError, ValueError, TypeError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            _fail(
                "--dask",
                f"cannot reach a scheduler at {address!r} ({reason}); give 'local' or an address like tcp://host:8786",
            )
    return client.get_executor(), client


def cmd_run(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.stats import aggregate
    from emqsim.summaries import simulate_summary

    scenario = run_scenario(args)
    policy = single_policy(args)
    if args.config and not (args.lease or args.timeout or args.preset):
        from emqsim.config import load_config

        config_policy = load_config(args.config)[1]
        policy = config_policy or policy
    policy = with_model_options(policy, args)
    settings = policy.settings()
    check_work(
        args,
        commands_per_run(scenario, settings["beat"], settings["scan"] or 5.0) * args.replications,
        f"this run ({args.replications} replication(s))",
    )
    summaries = [
        simulate_summary(scenario, policy, args.seed, r)
        for r in _progress(range(args.replications), args.quiet or args.replications < 2)
    ]
    row = aggregate(summaries)
    if args.json:
        sys.stdout.write(to_json([row], version=__version__, seed=args.seed, replications=args.replications))
        return 0
    print(f"{scenario.name} under {policy!r}")
    print(f"{args.replications} replication(s), seed {args.seed}; 95% CIs over replications", end="")
    print(" (none with one replication)" if args.replications < 2 else "")
    print(run_report(row))
    print(FIELDS_HINT)
    return 0


def _progress(items: Any, quiet: bool) -> Any:
    """A tqdm bar on stderr over `items` when stderr is a terminal (long runs show they are moving)."""
    if quiet or not sys.stderr.isatty():
        return items
    from tqdm.auto import tqdm

    return tqdm(items, unit="run", file=sys.stderr, desc="simulating", leave=False)


def run_report(row: dict[str, Any]) -> str:
    """`run`'s output: one line per field (new names only, no deprecated aliases), numbers rounded for
    reading, each interval beside its estimate (`n/a` where there is none), bounds marked `>=`."""
    from emqsim.stats import DEPRECATED_KEYS

    skip = set(DEPRECATED_KEYS) | {"scenario"}
    keys = [k for k in row if k not in skip and not k.endswith("_ci") and not k.endswith("_lower_bound")]
    keys = [k for k in keys if k != "detection_latency_censored"]
    width = max(len(k) for k in keys)
    lines = []
    for key in keys:
        value = row[key]
        lower = (key == "hostage_s_per_run" or key.startswith("detection_latency_")) and bool(
            row.get("detection_latency_censored")
        )
        if key.startswith("detection_latency_pooled_p"):
            lower = bool(row.get(f"{key}_lower_bound"))
        if key == "detection_latency_pooled_min_s":
            lower = False
        if f"{key}_ci" in row:
            text = _ci(value, row[f"{key}_ci"], lower_bound=lower)
        else:
            text = (">=" if lower and value is not None else "") + _fmt(value)
        lines.append(f"  {key.ljust(width)}  {text}")
    if row.get("detection_latency_censored"):
        lines.append(
            f"  >=: {row['crashes_undetected_total']} crash(es) still undetected at the horizon count with "
            "their latency so far"
        )
    return "\n".join(lines)


COMPARE_VERDICTS = {
    ("slow", True): "WRONG: reclaimed from a live worker; the job runs twice",
    ("slow", False): "right: left alone",
    ("dead", True): "right: recovered",
    ("dead", False): "WRONG: not recovered by the horizon",
}
# A dead worker's job recovered later than this is held hostage: the same rule as `plots.verdict`'s
# `slow_after`, so the table and the two-columns figure give each cell the same verdict.
HOSTAGE_AFTER = 120.0


def cmd_compare(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.engine import simulate
    from emqsim.stats import aggregate, summarize

    policies = {
        "timeout": TimeoutPolicy(args.timeout, args.scan),
        "lease": LeasePolicy(args.lease, args.beat, args.scan),
    }
    worlds = {
        "slow-but-alive": standard("slow-alive", duration=args.slow_duration),
        "fast-but-dead": standard("fast-dead", die_after=args.die_after),
    }
    check_work(
        args,
        sum(commands_per_run(sc, args.beat, args.scan) for sc in worlds.values()) * 2 * args.replications,
        f"this comparison (4 x {args.replications} replications)",
    )
    rows = []
    for world, scenario in worlds.items():
        for rule, policy in policies.items():
            summaries, reclaim_ages = [], []
            for r in range(args.replications):
                run = simulate(scenario, policy, args.seed, r)
                summaries.append(summarize(run))
                first = run.attempts[0]
                if first.reclaimed_at is not None:
                    reclaim_ages.append(first.reclaimed_at - first.taken_at)
            row = aggregate(summaries, world=world, rule=rule)
            row["reclaimed_fraction"] = len(reclaim_ages) / args.replications
            row["reclaimed_after_mean"] = sum(reclaim_ages) / len(reclaim_ages) if reclaim_ages else None
            rows.append(row)
    if args.json:
        sys.stdout.write(to_json(rows, version=__version__, seed=args.seed, replications=args.replications))
        return 0
    cells = {}
    for row in rows:
        kind = "slow" if row["world"] == "slow-but-alive" else "dead"
        reclaimed = row["reclaimed_fraction"] > 0
        text = COMPARE_VERDICTS[(kind, reclaimed)]
        if reclaimed and kind == "slow":
            text += f" (at {row['reclaimed_after_mean']:.0f} s, in {row['reclaimed_fraction']:.0%} of runs)"
        elif reclaimed and row["detection_latency_mean_s"] > HOSTAGE_AFTER:
            text = (
                f"WRONG: held hostage, recovered only {row['detection_latency_mean_s']:.0f} s after the crash"
            )
        elif reclaimed:
            latency = _ci(
                row["detection_latency_mean_s"],
                row["detection_latency_mean_s_ci"],
                lower_bound=bool(row["detection_latency_censored"]),
            )
            text += f" {latency} s after the crash (mean [95% CI])"
        cells[(row["world"], row["rule"])] = text
    print(f"timeout {args.timeout:g} s vs lease {args.lease:g} s / beat {args.beat:g} s (scan {args.scan:g} s), "
          f"{args.replications} runs each")  # fmt: skip
    for world in worlds:
        print(f"\n{world}")
        for rule in ("timeout", "lease"):
            print(_wrap(f"{rule + ' rule':13} {cells[(world, rule)]}", 2, TABLE_WIDTH))
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from emqsim.engine import simulate

    if args.config:
        from emqsim.config import load_config

        scenario = load_config(args.config)[0]
    else:
        scenario = standard(args.scenario)
    policy = single_policy(args)
    settings = policy.settings()
    check_work(
        args, commands_per_run(scenario, settings["beat"], settings["scan"] or 5.0), "this timeline's run"
    )
    run = simulate(scenario, policy, args.seed)
    if args.out and args.out.suffix.lower() == ".html":
        from emqsim.timeline_html import write_timeline_html

        write_timeline_html(run, args.out)
        print(f"wrote {args.out}")
        return 0
    if args.out:
        from emqsim.plots import savefig, timeline

        savefig(timeline(run).figure, args.out)
        print(f"wrote {args.out}")
        return 0
    print(text_timeline(run))
    return 0


WORKER_EVENT_TEXT = {
    "block": "BLOCKED (event loop: work goes on, no renewal) for",
    "unblock": "unblocked",
    "disconnect": "DISCONNECTED (commands wait in the offline queue);",
    "network_up": "network back, RECONNECTING (retry backoff):",
    "reconnect": "reconnected, RESENDING:",
    "child_crash": "sandboxed child exited, running",
}


def text_timeline(run) -> str:
    """The run's events in time order, one per line (for terminals and for `timeline` without --out)."""
    events: list[tuple[float, int, str]] = []
    for e in run.worker_events:
        label = WORKER_EVENT_TEXT.get(e.kind, e.kind)
        events.append((e.time, 0, f"worker {e.worker} {label} {e.detail}".rstrip()))
    for a in run.attempts:
        events.append(
            (a.taken_at, 1, f"job {a.job} taken by worker {a.worker} (attempt {a.attempt}, token {a.token})")
        )
        if a.reclaimed_at is not None:
            verdict = (
                "right: its worker is dead"
                if a.worker_state_at_reclaim == "dead"
                else f"WRONG: its worker is {a.worker_state_at_reclaim}"
            )
            events.append(
                (
                    a.reclaimed_at,
                    2,
                    f"job {a.job} reclaimed from worker {a.worker} by {a.reclaimed_by} ({verdict})",
                )
            )
        if a.finish_applied_at is not None:
            if a.failed_at is not None and a.reclaimed_by is None:
                text = f"job {a.job} failed by its worker {a.worker} (a child's exit or a deferred failure)"
            else:
                text = f"job {a.job} finish by worker {a.worker}: {a.finish_result}"
            events.append((a.finish_applied_at, 3, text))
        elif a.failed_at is not None:
            events.append((a.failed_at, 2, f"job {a.job} failed by {a.reclaimed_by} (stalled too often)"))
    for e in run.lock_events:
        if e.kind in ("expired", "renew_failed"):
            events.append((e.time, 4, f"lock of job {e.job} {e.kind.replace('_', ' ')}"))
    events.sort(key=lambda t: (t[0], t[1]))
    head = f"{run.scenario} under {run.policy['policy']} (seed {run.seed}); ended by {run.ended_by} at {run.end:g} s"
    return "\n".join([head] + [f"{t:10.3f} s  {text}" for t, _, text in events])


def cmd_explore(args: argparse.Namespace) -> int:
    from emqsim.explore import cmd_explore as run_explore

    return run_explore(args)


def cmd_presets(args: argparse.Namespace) -> int:
    rows = presets_table()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    for row in rows:
        settings = ", ".join(
            f"{k} {v:g}" for k, v in row.items() if k in ("lease", "beat", "scan", "timeout", "max_stalled")
        )
        print(_wrap(f"{row['name']}: {row['system']}: {row['mechanism']}", 0))
        for text in (f"settings (s): {settings}", row["description"], f"source: {row['source']}"):
            print(_wrap(text, 4))
        print()
    return 0


def scenario_summary(factory: Any) -> str:
    """A scenario's description: the first paragraph of its factory's docstring, as one line (whole, never cut)."""
    return " ".join((factory.__doc__ or "").strip().split("\n\n")[0].split())


def _indented(text: str, width: int = 100) -> str:
    import textwrap

    return textwrap.fill(text, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)


def cmd_scenarios(args: argparse.Namespace) -> int:
    import inspect

    for name, factory in STANDARD.items():
        knobs = ", ".join(f"{p.name}={p.default!r}" for p in inspect.signature(factory).parameters.values())
        print(f"{name}\n" + _indented(scenario_summary(factory)) + "\n" + _indented(f"knobs: {knobs}"))
    return 0


def cmd_fields(args: argparse.Namespace) -> int:
    from emqsim.fields import FIELDS

    if args.json:
        sys.stdout.write(json.dumps([f.__dict__ for f in FIELDS], indent=2) + "\n")
        return 0
    for f in FIELDS:
        old = f" (was {', '.join(f.deprecated)})" if f.deprecated else ""
        print(_wrap(f"{f.name}{old}", 0))
        print(_wrap(f"{f.meaning} Interval: {f.interval}", 4))
    print(_wrap("Deprecated keys are still written, with the same values, until 0.4; methods and coverage: "
                "docs/statistics.md.", 0))  # fmt: skip
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from emqsim.figures import generate_all

    if args.out.exists() and not args.out.is_dir():
        _fail("--out", f"{str(args.out)!r} is a file; give a folder")
    paths = generate_all(args.out, quick=args.quick)
    for path in paths:
        print(path)
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    """Each shipped example scenario: its name (usable as `--config NAME`), its first comment line, its path."""
    examples = example_files()
    for name, path in examples.items():
        about = next(
            (
                line.lstrip("# ").strip()
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ),
            "",
        )
        print(f"{name}\n{_indented(about)}\n  {path}")
    example = "gc-pauses" if "gc-pauses" in examples else next(iter(examples))
    print(f"\nuse one with --config NAME (e.g. --config {example}); copy a file to change it")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    problem = missing_extra("notebooks")
    if problem:
        raise ConfigError(problem)
    from emqsim.grading import grade_notebook

    return grade_notebook(
        args.notebook,
        timeout=args.timeout,
        time_limit=args.time_limit,
        student=args.student,
        against=args.against,
    )


def cmd_assignments(args: argparse.Namespace) -> int:
    from emqsim.assignments import main_assignments

    return main_assignments(args)


def cmd_tune(args: argparse.Namespace) -> int:
    from emqsim.tune_cli import cmd_tune as tune_command

    return tune_command(args)


COMMANDS = {
    "sweep": cmd_sweep,
    "run": cmd_run,
    "compare": cmd_compare,
    "timeline": cmd_timeline,
    "explore": cmd_explore,
    "presets": cmd_presets,
    "scenarios": cmd_scenarios,
    "examples": cmd_examples,
    "fields": cmd_fields,
    "figures": cmd_figures,
    "grade": cmd_grade,
    "assignments": cmd_assignments,
    "tune": cmd_tune,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if sys.stdout is None:  # started with standard output closed (`>&-`)
        print(
            "emqsim: error: standard output is closed; redirect it instead, e.g. > /dev/null", file=sys.stderr
        )
        return 2
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line, for the provenance written with results
    if args.command == "live":
        from emqsim.live import main_live

        handler = main_live
    else:
        handler = COMMANDS[args.command]
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)  # type: ignore[assignment]
    try:
        code = handler(args)
        sys.stdout.flush()  # a full disk or closed pipe shows here, not as a traceback at exit
        return code
    except ConfigError as exc:
        message = " ".join(str(exc).splitlines())  # one line, whatever a value held
        print(f"emqsim {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _ignore_further_interrupts()
        print("emqsim: interrupted", file=sys.stderr)
        return 130
    except StdoutError as exc:
        _detach_stdout()
        if exc.errno == errno.EPIPE:  # `emqsim ... | head`: the reader has all it wanted
            return 0
        print(
            f"emqsim {args.command}: error: cannot write to standard output ({exc.strerror})", file=sys.stderr
        )
        return 2
    except BrokenPipeError:
        _detach_stdout()
        return 0
    except OSError as exc:  # a failing disk or folder: one line, no traceback
        print(f"emqsim {args.command}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout


class StdoutError(OSError):
    """Writing standard output failed (a full disk, a closed pipe): reported in one line, not a traceback."""


class _GuardedStdout:
    """Standard output whose write errors are told apart from every other OSError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _detach_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


if __name__ == "__main__":
    sys.exit(main())
