"""Live mode: the lease protocol as Lua scripts on a real Redis, with real worker processes and real faults.

>>> from emqsim import standard, LeasePolicy
>>> from emqsim.live import run_live
>>> run = run_live(standard("fast-dead"), LeasePolicy(lease=30, beat=10, scan=5), time_scale=0.02)

`run_live` returns the same `emqsim.records.Run` as `emqsim.simulate`, in the scenario's seconds, so
`emqsim.stats.summarize` and every table and plot work on both. See docs/live.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emqsim.live.clockwatch import ClockWatch, Disturbed, NotJudged, Steadiness, until_steady
    from emqsim.live.runner import LiveRun, run_live
    from emqsim.live.scripts import SCRIPT_NAMES, LuaQueue
    from emqsim.live.server import PrivateRedis, redis_server_path
    from emqsim.live.settings import DEFAULT_TIME_SCALE, LiveDisturbed, LiveSettings, LiveWarning

# Each name imports its module on first use (PEP 562), so `emqsim.live.arguments` (the `live --help` text)
# imports without redis-py: `emqsim live --help` reads without the extra installed. The command line itself
# (`emqsim.live.cli`, `emqsim.live.arguments`) is a front end: import it from there, not from here.
_HOMES = {
    "ClockWatch": "clockwatch",
    "Disturbed": "clockwatch",
    "NotJudged": "clockwatch",
    "Steadiness": "clockwatch",
    "until_steady": "clockwatch",
    "LiveRun": "runner",
    "LiveSettings": "settings",
    "LiveWarning": "settings",
    "run_live": "runner",
    "SCRIPT_NAMES": "scripts",
    "LuaQueue": "scripts",
    "PrivateRedis": "server",
    "redis_server_path": "server",
    "DEFAULT_TIME_SCALE": "settings",
    "LiveDisturbed": "settings",
}


def __getattr__(name: str) -> Any:
    """The public name `name`, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'emqsim.live' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"emqsim.live.{home}"), name)
    globals()[name] = value
    return value


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
    "redis_server_path",
    "run_live",
    "until_steady",
]
