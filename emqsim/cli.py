"""The command line: `python -m emqsim sweep --lease 30 --beat 10` and friends.

Every flag is checked before anything runs; bad input gets one line on stderr (`emqsim: error: ...`) naming
the flag, the value and the fix, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from emqsim.distributions import Distribution, parse_distribution
from emqsim.errors import ConfigError
from emqsim.faults import Crash, Freeze, Network
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import PRESETS, presets_table
from emqsim.scenario import STANDARD, Scenario, standard
from emqsim.stats import to_csv, to_json, write_atomically

DEFAULT_TIMEOUTS = (30.0, 120.0, 600.0, 1200.0)
DEFAULT_SCENARIOS = ("slow-alive", "fast-dead", "frozen", "flaky-network", "production")

EXAMPLES = """
examples:
  python -m emqsim sweep --lease 30 --beat 10
  python -m emqsim sweep --lease 10:60:10 --beat 5 --timeout 60,600 --scenario fast-dead --json
  python -m emqsim sweep --preset bullmq --out results.csv --plot frontier.png
  python -m emqsim run --scenario frozen --freeze-after 5 --freeze-for 40 --lease 30 --beat 10
  python -m emqsim compare
  python -m emqsim timeline --scenario fast-dead --policy lease --out timeline.png
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
    return value


def seconds_or_zero(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return seconds(text)


def whole(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {low}")
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
        return parse_distribution(text)
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
        if not os.access(folder, os.W_OK):
            raise argparse.ArgumentTypeError(f"folder {str(folder)!r} is not writable")
        return path

    return parse


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


def add_policy_flags(p: argparse.ArgumentParser, gridded: bool) -> None:
    kind = grid if gridded else seconds
    g = p.add_argument_group("policy settings (seconds)")
    g.add_argument("--lease", type=kind, help="lock lease (PX); a grid: 10,20,30 or 10:60:10 (default 30)")
    g.add_argument("--beat", type=kind, help="heartbeat period (default lease/3)")
    g.add_argument("--scan", type=kind, help="sweep/reaper interval (default 5)")
    g.add_argument(
        "--timeout",
        type=timeouts if gridded else seconds,
        help="fixed timeout(s) for the reaper"
        + (" (default 30,120,600,1200; 'none' to skip)" if gridded else ""),
    )
    g.add_argument("--preset", type=preset_name, help=f"a real system's defaults: {', '.join(PRESETS)}")


def add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=whole(0), default=0, help="root seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


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
        "of timeouts, with replications, and print one table with 95%% confidence intervals.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_policy_flags(p, gridded=True)
    p.add_argument("--scenario", type=scenario_name, action="append", help="repeatable (default: all five)")
    p.add_argument("--config", type=existing_file, help="a TOML scenario file instead of --scenario")
    p.add_argument("--replications", type=whole(1), default=30, help="runs per cell (default 30)")
    p.add_argument("--jobs", type=whole(1), help="parallel processes (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on a Dask scheduler ('local' for a LocalCluster)")
    p.add_argument(
        "--cache", type=Path, metavar="DIR", help="reuse finished cells from DIR (resumable sweeps)"
    )
    p.add_argument(
        "--out", type=output_path(".csv", ".json"), help="also write the rows to FILE.csv|FILE.json"
    )
    p.add_argument("--plot", type=output_path(".png", ".svg"), help="write the trade-off figure")
    add_run_flags(p)

    p = sub.add_parser("run", help="one scenario under one policy, with the scenario's knobs as flags")
    p.add_argument(
        "--scenario", type=scenario_name, default="production", help="standard scenario to start from"
    )
    p.add_argument("--config", type=existing_file, help="a TOML scenario file instead of --scenario")
    p.add_argument("--policy", choices=("lease", "timeout"), default="lease")
    add_policy_flags(p, gridded=False)
    knobs = p.add_argument_group("scenario knobs")
    knobs.add_argument("--workers", type=whole(1))
    knobs.add_argument("--concurrency", type=whole(1))
    knobs.add_argument("--job-count", type=whole(1), help="how many jobs")
    knobs.add_argument("--duration", type=distribution, help="job work: 900, exp:60, lognormal:20:1.5, ...")
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
    p.add_argument("--replications", type=whole(1), default=1)
    add_run_flags(p)

    p = sub.add_parser("compare", help="the two columns: slow-but-alive vs fast-but-dead, timeout vs lease")
    p.add_argument("--lease", type=seconds, default=30.0)
    p.add_argument("--beat", type=seconds, default=10.0)
    p.add_argument("--scan", type=seconds, default=5.0)
    p.add_argument("--timeout", type=seconds, default=600.0)
    p.add_argument("--slow-duration", type=seconds, default=900.0, help="the slow job's length (default 900)")
    p.add_argument(
        "--die-after", type=seconds_or_zero, default=1.0, help="when the fast worker dies (default 1)"
    )
    p.add_argument("--replications", type=whole(1), default=20)
    add_run_flags(p)

    p = sub.add_parser("timeline", help="draw one scenario's timeline (PNG/SVG), or print it as text")
    p.add_argument("--scenario", type=scenario_name, default="fast-dead")
    p.add_argument("--config", type=existing_file)
    p.add_argument("--policy", choices=("lease", "timeout"), default="lease")
    add_policy_flags(p, gridded=False)
    p.add_argument("--out", type=output_path(".png", ".svg"), help="image file; without it, a text timeline")
    p.add_argument("--seed", type=whole(0), default=0)

    p = sub.add_parser("presets", help="list real systems' defaults and their sources")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("scenarios", help="list the standard scenarios and their knobs")

    p = sub.add_parser("figures", help="regenerate every figure in figures/ from fixed seeds")
    p.add_argument("--out", type=Path, default=Path("figures"), help="folder (default figures/)")
    p.add_argument("--quick", action="store_true", help="fewer replications (for tests)")

    p = sub.add_parser("grade", help="check an assignment notebook without nbgrader")
    p.add_argument("notebook", type=existing_file)
    p.add_argument("--timeout", type=seconds, default=600.0, help="per-cell timeout (default 600)")

    from emqsim.tune_cli import add_tune_arguments

    p = sub.add_parser("tune", help="recommend lease, beat and sweep settings from your own measurements")
    add_tune_arguments(p)

    try:
        from emqsim.live import add_live_arguments
    except ImportError:  # the live mode needs the `redis` package: pip install emqsim[live]
        add_live_arguments = None
    if add_live_arguments is not None:
        p = sub.add_parser("live", help="run the lease protocol on a real Redis with real processes")
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
    if args.policy == "timeout" or (args.timeout is not None and args.lease is None and args.beat is None):
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
    return scenario.with_(**changes)


def _span_dist(pair: tuple[float, float]) -> float | Distribution:
    from emqsim.distributions import Uniform

    low, high = pair
    return low if low == high else Uniform(low, high)


# -- output ---------------------------------------------------------------------------------------------------
def _fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _ci(value: Any, ci: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if not ci or ci[0] is None:
        return _fmt(value, digits)
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def settings_text(row: dict[str, Any]) -> str:
    if row.get("timeout") is not None:
        return f"T={row['timeout']:g} scan={row['scan']:g}"
    return f"L={row['lease']:g} B={row['beat']:g} scan={row['scan']:g}"


TABLE_COLUMNS = (
    ("scenario", lambda r: r["scenario"]),
    ("policy", lambda r: r["policy"]),
    ("settings (s)", settings_text),
    ("false reclaims/job [95% CI]", lambda r: _ci(r["false_reclaim_rate"], r["false_reclaim_rate_ci"], 3)),
    ("detect mean s [95% CI]", lambda r: _ci(r["detection_latency_mean"], r["detection_latency_mean_ci"])),
    ("p95", lambda r: _fmt(r["detection_latency_p95"])),
    ("max", lambda r: _fmt(r["detection_latency_max"])),
    ("undet", lambda r: _fmt(r["undetected"])),
    ("hostage s/run", lambda r: _fmt(r["hostage_time"])),
    ("dup runs", lambda r: _fmt(r["duplicate_executions"])),
    ("wasted s/run", lambda r: _fmt(r["wasted_work"])),
    ("redis req/s", lambda r: _fmt(r["redis_commands_per_s"], 2)),
)


def format_table(rows: Sequence[dict[str, Any]], columns=TABLE_COLUMNS) -> str:
    cells = [[name for name, _ in columns]] + [[get(r) for _, get in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_rows(path: Path, rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    text = to_json(rows, **header) if path.suffix.lower() == ".json" else to_csv(rows)
    write_atomically(path, text)


# -- commands -------------------------------------------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.sweep import Cell, run_sweep

    if args.config and args.scenario:
        _fail("--config", "give either --config FILE or --scenario NAME, not both")
    policies = lease_policies(args) + ([] if args.preset and args.timeout is None else timeout_policies(args))
    if args.config:
        from emqsim.config import load_config

        scenario, config_policy = load_config(args.config)
        scenarios = [scenario]
        if config_policy is not None and not (args.lease or args.preset):
            policies = [config_policy] + timeout_policies(args)
    else:
        scenarios = [standard(name) for name in (args.scenario or DEFAULT_SCENARIOS)]
    cells = [Cell(s, p) for s in scenarios for p in policies]
    executor = None
    client = None
    if args.dask:
        executor, client = _dask_executor(args.dask)
    interrupted: list[str] = []

    def on_interrupt(done: int, total: int) -> None:
        interrupted.append(f"emqsim: interrupted: kept the {done} of {total} cells that finished")

    previous = signal.getsignal(signal.SIGINT)
    try:
        result = run_sweep(
            cells,
            replications=args.replications,
            seed=args.seed,
            jobs=args.jobs,
            executor=executor,
            progress=False if args.quiet else None,
            cache_dir=args.cache,
            on_interrupt=on_interrupt,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
        if client is not None:
            client.close()
    rows = result.rows
    header = {"version": __version__, "seed": args.seed, "replications": args.replications}
    if args.json:
        sys.stdout.write(to_json(rows, **header))
    else:
        print(format_table(rows))
        _print_paired(result, cells)
    if args.out:
        write_rows(args.out, rows, header)
    if args.plot and rows:
        from emqsim.plots import frontier, savefig

        savefig(frontier(rows).figure, args.plot)
    for line in interrupted:
        print(line + (f"; rows written to {args.out}" if args.out else ""), file=sys.stderr)
    return 130 if interrupted else 0


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
    for name, pair in by_scenario.items():
        if "lease" not in pair or "timeout" not in pair:
            continue
        parts = []
        for metric, label, unit in (
            ("detection_latencies", "detection latency", " s"),
            ("false_reclaims", "false reclaims/run", ""),
            ("hostage_time", "hostage time", " s"),
        ):
            d = result.paired(pair["lease"], pair["timeout"], metric)
            if d["mean"] is not None and d["pairs"] >= 2 and not (d["mean"] == 0 and d["ci"] == [0.0, 0.0]):
                parts.append(f"{label} {d['mean']:+.2f}{unit} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]")
        if parts:
            lines.append(f"  {name}: " + "; ".join(parts))
    if lines:
        print("\nlease minus the 600 s timeout, paired on the same seeds (95% CI):\n" + "\n".join(lines))


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
        except OSError as exc:
            _fail("--dask", f"cannot reach the scheduler at {address!r} ({exc}); check the address")
    return client.get_executor(), client


def cmd_run(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.stats import aggregate, simulate_summary

    scenario = run_scenario(args)
    policy = single_policy(args)
    if args.config and not (args.lease or args.timeout or args.preset):
        from emqsim.config import load_config

        config_policy = load_config(args.config)[1]
        policy = config_policy or policy
    summaries = [simulate_summary(scenario, policy, args.seed, r) for r in range(args.replications)]
    row = aggregate(summaries)
    if args.json:
        sys.stdout.write(to_json([row], version=__version__, seed=args.seed))
        return 0
    print(f"{scenario.name} under {policy!r}, {args.replications} run(s), seed {args.seed}")
    width = max(len(k) for k in row)
    for key, value in row.items():
        print(f"  {key.ljust(width)}  {value}")
    return 0


COMPARE_VERDICTS = {
    ("slow", True): "WRONG: reclaimed from a live worker; the job runs twice",
    ("slow", False): "right: left alone",
    ("dead", True): "right: recovered",
    ("dead", False): "not recovered by the horizon",
}


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
        sys.stdout.write(to_json(rows, version=__version__, seed=args.seed))
        return 0
    cells = {}
    for row in rows:
        kind = "slow" if row["world"] == "slow-but-alive" else "dead"
        reclaimed = row["reclaimed_fraction"] > 0
        text = COMPARE_VERDICTS[(kind, reclaimed)]
        if reclaimed and kind == "slow":
            text += f" (at {row['reclaimed_after_mean']:.0f} s, in {row['reclaimed_fraction']:.0%} of runs)"
        elif reclaimed:
            text += f" {row['detection_latency_mean']:.0f} s after the crash"
            if row["detection_latency_mean"] > 5 * args.lease:
                text += ": held hostage"
        cells[(row["world"], row["rule"])] = text
    print(f"timeout {args.timeout:g} s vs lease {args.lease:g} s / beat {args.beat:g} s (scan {args.scan:g} s), "
          f"{args.replications} runs each\n")  # fmt: skip
    width = max(len(t) for t in cells.values())
    print(f"{'':16}  {'timeout rule'.ljust(width)}  lease rule")
    for world in worlds:
        print(f"{world:16}  {cells[(world, 'timeout')].ljust(width)}  {cells[(world, 'lease')]}")
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from emqsim.engine import simulate

    if args.config:
        from emqsim.config import load_config

        scenario = load_config(args.config)[0]
    else:
        scenario = standard(args.scenario)
    policy = single_policy(args)
    run = simulate(scenario, policy, args.seed)
    if args.out:
        from emqsim.plots import savefig, timeline

        savefig(timeline(run).figure, args.out)
        print(f"wrote {args.out}")
        return 0
    print(text_timeline(run))
    return 0


def text_timeline(run) -> str:
    """The run's events in time order, one per line (for terminals and for `timeline` without --out)."""
    events: list[tuple[float, int, str]] = []
    for e in run.worker_events:
        events.append((e.time, 0, f"worker {e.worker} {e.kind} {e.detail}".rstrip()))
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
            events.append(
                (a.finish_applied_at, 3, f"job {a.job} finish by worker {a.worker}: {a.finish_result}")
            )
    for e in run.lock_events:
        if e.kind in ("expired", "renew_failed"):
            events.append((e.time, 4, f"lock of job {e.job} {e.kind.replace('_', ' ')}"))
    events.sort(key=lambda t: (t[0], t[1]))
    head = f"{run.scenario} under {run.policy['policy']} (seed {run.seed}); ended by {run.ended_by} at {run.end:g} s"
    return "\n".join([head] + [f"{t:10.3f} s  {text}" for t, _, text in events])


def cmd_presets(args: argparse.Namespace) -> int:
    rows = presets_table()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    for row in rows:
        settings = ", ".join(
            f"{k} {v:g}" for k, v in row.items() if k in ("lease", "beat", "scan", "timeout", "max_stalled")
        )
        print(
            f"{row['name']:15} {row['system']}: {row['mechanism']}\n{'':15} {settings}\n{'':15} {row['description']}\n{'':15} source: {row['source']}\n"
        )
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    import inspect

    for name, factory in STANDARD.items():
        knobs = ", ".join(f"{p.name}={p.default!r}" for p in inspect.signature(factory).parameters.values())
        doc = (factory.__doc__ or "").strip().splitlines()[0]
        print(f"{name:14} {doc}\n{'':14} knobs: {knobs}")
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from emqsim.figures import generate_all

    if args.out.exists() and not args.out.is_dir():
        _fail("--out", f"{str(args.out)!r} is a file; give a folder")
    paths = generate_all(args.out, quick=args.quick)
    for path in paths:
        print(path)
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from emqsim.grading import grade_notebook

    return grade_notebook(args.notebook, timeout=args.timeout)


def cmd_tune(args: argparse.Namespace) -> int:
    from emqsim.tune_cli import cmd_tune as tune_command

    return tune_command(args)


COMMANDS = {
    "sweep": cmd_sweep,
    "run": cmd_run,
    "compare": cmd_compare,
    "timeline": cmd_timeline,
    "presets": cmd_presets,
    "scenarios": cmd_scenarios,
    "figures": cmd_figures,
    "grade": cmd_grade,
    "tune": cmd_tune,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "live":
        from emqsim.live import main_live

        handler = main_live
    else:
        handler = COMMANDS[args.command]
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"emqsim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("emqsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
