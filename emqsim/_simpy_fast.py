"""The only place that touches SimPy's private attributes, for speed on the hottest paths.

SimPy 4 keeps the clock in `Environment._now` and an event's outcome in `_ok` / `_value`; `schedule` puts
an event on the queue. Going through them directly saves a Python frame per store command and one event
per reply. A SimPy release that changed them would change the golden digests (tests/test_golden.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import simpy
from simpy.events import NORMAL


def clock(env: simpy.Environment) -> Callable[[], Any]:
    """A zero-argument reader of `env.now` that runs no Python frame (C calls only)."""
    return partial(getattr, env, "_now")


def replier(env: simpy.Environment) -> Callable[[simpy.Event, Any, int], None]:
    """`reply(event, value, delay)`: `event` succeeds with `value` `delay` from now, as one scheduled event
    (what a `Timeout` does), instead of a timeout whose callback then triggers the event."""
    schedule = env.schedule

    def reply(event: simpy.Event, value: Any, delay: int) -> None:
        event._ok = True
        event._value = value
        schedule(event, NORMAL, delay)

    return reply
