"""Live mode: the lease protocol as Lua scripts on a real Redis, with real worker processes and real faults.

>>> from emqsim import standard, LeasePolicy
>>> from emqsim.live import run_live
>>> run = run_live(standard("fast-dead"), LeasePolicy(lease=30, beat=10, scan=5), time_scale=0.02)

`run_live` returns the same `emqsim.records.Run` as `emqsim.simulate`, in the scenario's seconds, so
`emqsim.stats.summarize` and every table and plot work on both. See docs/live.md.
"""

from emqsim.live.cli import add_live_arguments, format_run, main_live
from emqsim.live.clockwatch import ClockWatch, Disturbed, NotJudged, Steadiness, until_steady
from emqsim.live.runner import DEFAULT_TIME_SCALE, LiveRun, LiveSettings, LiveWarning, run_live
from emqsim.live.scripts import SCRIPT_NAMES, LuaQueue
from emqsim.live.server import PrivateRedis, redis_server_path
from emqsim.live.settings import LiveDisturbed

__all__ = [
    "DEFAULT_TIME_SCALE",
    "SCRIPT_NAMES",
    "ClockWatch",
    "Disturbed",
    "LiveDisturbed",
    "LiveRun",
    "LiveSettings",
    "LiveWarning",
    "LuaQueue",
    "NotJudged",
    "PrivateRedis",
    "Steadiness",
    "add_live_arguments",
    "format_run",
    "main_live",
    "redis_server_path",
    "run_live",
    "until_steady",
]
