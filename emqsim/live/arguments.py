"""The `live` subcommand's flags and help, importable without redis-py so `emqsim live --help` reads without
the `live` extra installed (the values are checked by `emqsim.live.cli.main_live`)."""

from __future__ import annotations

import argparse

from emqsim.cli.argtypes import seconds, seconds_or_zero
from emqsim.live.settings import DEFAULT_TIME_SCALE
from emqsim.scenario import STANDARD

LIVE_EXAMPLES = """
examples:
  python -m emqsim live --scenario fast-dead --lease 30 --beat 10 --scan 5
  python -m emqsim live --scenario slow-alive --timeout 60
  python -m emqsim live --scenario frozen --time-scale 0.05 --json
  python -m emqsim live --redis redis://localhost:6379/15 --scenario fast-dead

Settings are in the scenario's seconds; --time-scale turns them into real time (0.02: lease 30 s = 600 ms).
Without --redis a private redis-server is started and stopped (apt-get install redis-server).
"""


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    """The `live` subcommand's flags (values are checked by `main_live`, which raises ConfigError)."""
    parser.description = (
        "Run one scenario under one policy with real worker processes on a real Redis: a crash is SIGKILL, "
        "a freeze SIGSTOP/SIGCONT, an outage an offline queue in the worker. Records are reported in the "
        "scenario's seconds, like the simulator's."
    )
    parser.epilog = LIVE_EXAMPLES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--redis",
        metavar="URL",
        help="use this Redis (redis://host:port/db, unix:///path); default: a private one",
    )
    parser.add_argument(
        "--scenario",
        metavar="NAME",
        default="fast-dead",
        help=f"one of {', '.join(STANDARD)} (default fast-dead); connection outages are reproduced by "
        "holding each worker's requests back while its connection is down, failovers on two real "
        "redis-servers (--without-outages drops them)",
    )
    parser.add_argument(
        "--without-outages",
        action="store_true",
        help="drop the scenario's connection outages, failovers included "
        "(compare with `emqsim run --scenario NAME --outage-rate 0`)",
    )
    parser.add_argument(
        "--redis-restart-at",
        type=seconds_or_zero,
        metavar="T",
        help="restart the private redis-server at T scenario s (SHUTDOWN SAVE, then a start on its data)",
    )
    parser.add_argument("--redis-restart-for", type=seconds, metavar="X", help="... down for X s (default 5)")
    g = parser.add_argument_group("policy (scenario seconds): the lease, or --timeout for the reaper")
    g.add_argument("--lease", metavar="S", help="lock lease (default 30)")
    g.add_argument("--beat", metavar="S", help="heartbeat period (default lease/3)")
    g.add_argument("--scan", metavar="S", help="stalled sweep / reaper interval (default 5)")
    g.add_argument("--timeout", metavar="S", help="run the fixed-timeout reaper with this timeout instead")
    parser.add_argument(
        "--time-scale",
        metavar="F",
        default=str(DEFAULT_TIME_SCALE),
        help=f"real seconds per scenario second (default {DEFAULT_TIME_SCALE}; 1 = real time)",
    )
    parser.add_argument(
        "--allow-foreign-keys",
        action="store_true",
        help="run even if the --redis database holds other keys (the run touches only its own prefix)",
    )
    parser.add_argument("--seed", metavar="N", default="0", help="seed for job durations, phases, faults")
    parser.add_argument("--json", action="store_true", help="print the run's records and summary as JSON")
