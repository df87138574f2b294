"""The command line's parser: every subcommand and flag, with its type (`emqsim.cli.argtypes`) and help."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from emqsim.cli.argtypes import (
    CONFIG_HELP,
    MAX_COUNT,
    POLICY_HELP,
    add_policy_flags,
    config_file,
    distribution,
    existing_file,
    missing_extra,
    output_path,
    policy_choice,
    probability,
    rate,
    scenario_name,
    seconds,
    seconds_or_zero,
    span,
    whole,
    writable_folder,
)
from emqsim.cli.work import MAX_COMMANDS
from emqsim.store.eviction import POLICIES

HELP_WIDTH = 100  # every --help wraps here at most, like the tables' default width
RUN_REPLICATIONS = 10  # `run`'s default: enough runs for t intervals with 9 degrees of freedom, in seconds


EXAMPLES = """
examples:
  python -m emqsim sweep --lease 30 --beat 10
  python -m emqsim sweep --lease 10:60:10 --beat 5 --timeout 60,600 --scenario fast-dead --json
  python -m emqsim sweep --preset bullmq --out results.csv --plot frontier.png
  python -m emqsim run --scenario frozen --freeze-after 5 --freeze-for 40 --lease 30 --beat 10
  python -m emqsim compare
  python -m emqsim timeline --scenario fast-dead --policy lease --out run.html
  python -m emqsim run --config measured-durations
  python -m emqsim run --scenario production --duration file:my-durations.csv  # measured
  python -m emqsim examples    # the shipped scenarios and durations.csv, with their installed paths
  python -m emqsim presets
"""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is ONE line: `emqsim sweep: error: argument --lease: ...`."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's formatter, wrapping at the terminal's width as argparse does but never past
        HELP_WIDTH columns (a wide terminal still gets readable lines)."""
        import shutil

        width = min(shutil.get_terminal_size().columns - 2, HELP_WIDTH)
        cls = self.formatter_class
        if cls is argparse.RawDescriptionHelpFormatter:
            cls = ExamplesFormatter
        return cls(prog=self.prog, width=width)  # type: ignore[call-arg]


class ExamplesFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps a description's or epilog's lines as written (example command lines, indented), but wraps a
    line of prose longer than the width."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        lines = []
        for line in text.splitlines(keepends=False):
            if len(indent + line) > width and not line.startswith(" "):
                lines.append(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent))
            else:
                lines.append(indent + line)
        return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


class MissingExtra(Parser):
    """The parser of a subcommand whose extra is not installed: `--help` prints its help, any other use is
    one line naming the extra to install, and exit status 2."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        if args is not None and any(a in ("-h", "--help") for a in args):
            return super().parse_known_args(args, namespace)
        command = self.prog.split()[-1]
        message = missing_extra(command) or f"needs the {command!r} extra"
        self.exit(2, f"{self.prog}: error: {message}\n")


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
    g.add_argument(
        "--redis-restart", action="store_true",
        help="... and it is Redis restarting with its data (the producer and the reaper are cut off too)",
    )  # fmt: skip
    g.add_argument(
        "--readonly", type=seconds, metavar="S",
        help="... and the clients come back to the demoted primary: their writes fail with READONLY for S s",
    )  # fmt: skip
    g.add_argument(
        "--never-reconnect", action="store_true",
        help="... and the workers' clients never recover (gave up, or left 'reconnecting') though Redis is back",
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
    g.add_argument(
        "--partition-at", type=seconds, metavar="T", help="a silent partition (no FIN) of every worker at T s"
    )
    g.add_argument("--partition-for", type=seconds, metavar="X", help="its length in seconds")
    g.add_argument(
        "--partition-give-up",
        type=seconds,
        metavar="G",
        help="s until TCP gives up on the connection (default 924.6, Linux's tcp_retries2 = 15)",
    )
    g.add_argument(
        "--resend-twice",
        action="store_true",
        help="a command whose reply an outage caught runs again when ioredis resends it",
    )
    g.add_argument(
        "--max-retries-per-request",
        type=whole(0),
        metavar="N",
        help="the workers' ioredis maxRetriesPerRequest: an outage rejects waiting commands at every "
        "(N+1)-th reconnect attempt (default: null, they wait)",
    )
    g.add_argument(
        "--skipped-ticks",
        type=probability,
        metavar="P",
        help="each renewal-timer tick renews nothing with probability P (BullMQ's strict check; measured 0.01)",
    )
    g.add_argument(
        "--attempts",
        type=whole(1),
        metavar="N",
        help="BullMQ's job option: a job its worker fails is retried until it failed N times (default 1)",
    )
    g.add_argument(
        "--maxmemory", type=whole(1), metavar="BYTES",
        help="Redis's maxmemory, shared with a cache writing --cache-rate keys/s (locks can be evicted)",
    )  # fmt: skip
    g.add_argument(
        "--maxmemory-policy", choices=POLICIES, metavar="POLICY",
        help=f"... its maxmemory-policy: {', '.join(POLICIES)} (default volatile-lru)",
    )  # fmt: skip
    g.add_argument(
        "--cache-rate", type=rate, metavar="R", help="... the cache's writes a second (default 25)"
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
    m.add_argument(
        "--fetch-next",
        choices=("on", "off"),
        help="a finish also takes the slot's next job in the same step (BullMQ's moveToFinished; bullmq: on)",
    )


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
    p.add_argument(
        "--policy",
        type=policy_choice,
        metavar="POLICY",
        help=POLICY_HELP
        + "; lease: the lease grid only, timeout: the timeouts only, a detector: it (and the timeouts of --timeout)",
    )
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
    p.add_argument(
        "--duration",
        type=distribution,
        help="job work in every scenario: 900, exp:60, lognormal:20:1.5 or file:durations.csv (measured "
        "seconds, one per line, or a BullMQ export; see docs/durations.md)",
    )
    add_fault_flags(p)
    add_run_flags(p)
    add_work_flags(p)

    p = sub.add_parser("run", help="one scenario under one policy, with the scenario's knobs as flags")
    p.add_argument(
        "--scenario", type=scenario_name, default="production", help="standard scenario to start from"
    )
    p.add_argument("--config", type=config_file, help=CONFIG_HELP)
    p.add_argument("--policy", type=policy_choice, metavar="POLICY", help=POLICY_HELP)
    add_policy_flags(p, gridded=False)
    knobs = p.add_argument_group("scenario knobs")
    knobs.add_argument("--workers", type=whole(1, MAX_COUNT), help="worker processes")
    knobs.add_argument("--concurrency", type=whole(1, MAX_COUNT), help="jobs each worker runs at once")
    knobs.add_argument("--job-count", type=whole(1, MAX_COUNT), help="how many jobs")
    knobs.add_argument(
        "--duration",
        type=distribution,
        help="job work: 900, exp:60, lognormal:20:1.5, empirical:1,2,5 or file:durations.csv "
        "(measured seconds, one per line, or a BullMQ export; see docs/durations.md)",
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
    p.add_argument(
        "--policy",
        type=policy_choice,
        metavar="FILE.py:Class",
        help="also compare your detector, from its file: FILE.py:Class or 'FILE.py:Class(key=value, ...)' "
        "with its parameters as literals (docs/policies.md); the timeout and the lease always run",
    )
    add_run_flags(p)
    add_work_flags(p)

    p = sub.add_parser(
        "timeline", help="one scenario's timeline: an interactive HTML page, a PNG/SVG image, or text"
    )
    p.add_argument(
        "--scenario", type=scenario_name, default="fast-dead", help="standard scenario (default fast-dead)"
    )
    p.add_argument("--config", type=config_file, help=CONFIG_HELP)
    p.add_argument("--policy", type=policy_choice, metavar="POLICY", help=POLICY_HELP)
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
    from emqsim.cli.explore import add_explore_arguments

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
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser(
        "grade",
        help="check an assignment notebook without nbgrader (runs the notebook's code; "
        "pip install 'emqsim[notebooks]')",
        description="Run an assignment notebook in a sandboxed kernel, in a private copy of its folder, and "
        "score its test cells: their checks run in this process, which never runs the notebook's code, on the "
        "answers handed over as plain data. Several notebooks (a class's submissions) are graded one after "
        "another, each in a sandbox of its own, and a summary table follows their reports. This runs the "
        "notebooks' code (in the kernel): run it as an unprivileged user or in a container for untrusted "
        "submissions.",
        epilog="exit status: 0 every notebook passes every autograded check, 1 one does not, 2 one could not be "
        "graded (bad input stops before any notebook runs)",
    )
    p.add_argument("notebook", type=existing_file, nargs="+", help="the assignment notebook(s) (.ipynb)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="per-cell timeout (default 600)")
    p.add_argument(
        "--time-limit",
        type=seconds,
        default=3600.0,
        help="wall-clock limit for grading each notebook (default 3600)",
    )
    p.add_argument(
        "--student",
        metavar="ID",
        help="the student id the per-student seeds derive from, for every notebook given (default: each "
        "notebook's nbgrader submitted/<id>/ or autograded/<id>/ folder, else your own id)",
    )
    p.add_argument(
        "--against",
        type=existing_file,
        metavar="SOURCE",
        help="the instructor's source notebook: its locked and test cells (hidden tests too) replace the file's",
    )
    p.add_argument("--quiet", action="store_true", help="no progress line")
    from emqsim.assignments import add_assignments_parser

    add_assignments_parser(sub)

    from emqsim.cli.tune import add_tune_arguments

    p = sub.add_parser("tune", help="recommend lease, beat and sweep settings from your own measurements")
    add_tune_arguments(p)

    from emqsim.live.arguments import add_live_arguments  # no redis-py: the help reads without the extra

    live_help = "run the lease protocol on a real Redis with real processes"
    needs = missing_extra("live")
    p = sub.add_parser("live", help=f"{live_help} (pip install 'emqsim[live]')" if needs else live_help)
    add_live_arguments(p)
    if needs:  # the subcommand and its --help stay; running it names the extra to install
        p.description = f"{p.description} Needs the 'live' extra: pip install 'emqsim[live]'."
        p.__class__ = MissingExtra  # same state as a Parser; parsing anything but --help names the extra
    return parser
