"""The only place that touches SimPy's private attributes, for speed on the hottest paths.

SimPy 4 keeps the clock in `Environment._now` and an event's outcome in `_ok` / `_value`; `schedule` puts
an event on the queue. Going through them directly saves a Python frame per store command and one event
per reply, and lets the workers' timers run as callbacks on a reusable queue entry (`Tick`) instead of
processes. A SimPy release that changed them would change the golden digests (tests/test_golden.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from heapq import heappush
from typing import Any

import simpy
from simpy.events import NORMAL, URGENT

__all__ = ["CHECKS", "NORMAL", "URGENT", "Tick", "clock", "replier"]

# The place of a worker's stalled-check steps (its send, the reading of its reply) among the events of their
# millisecond: priority CHECKS + worker id, i.e. after every URGENT and NORMAL event due then (what those
# cause in the same millisecond included), the workers in id order. A fixed rule, not the order in which the
# steps were scheduled, so that a worker's checks are a sequence computable ahead (`checks.SweepCoordinator`).
CHECKS = 2


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


class Tick:
    """A reusable timer for a callback-driven process: `after(delay, callbacks)` puts this object on SimPy's
    event queue exactly as `env.timeout(delay)` would (same time, priority and place in the order, one id
    from the same counter), and SimPy's loop calls each of `callbacks` with it when it comes due. What it
    saves over a `Timeout` that resumes a generator is the event object and the generator round trip. It
    holds at most one pending call, so it must not be re-armed before that call ran; `callbacks` may be the
    same list every time (SimPy only iterates it)."""

    __slots__ = ("callbacks", "_ok", "_value", "_env", "_queue", "_eid")

    def __init__(self, env: simpy.Environment) -> None:
        self.callbacks: list[Callable[[Any], None]] | None = None
        self._ok = True
        self._value: Any = None
        self._env = env
        self._queue: list[Any] = env._queue
        self._eid = env._eid

    def after(self, delay: int, callbacks: list[Callable[[Any], None]], priority: int = NORMAL) -> None:
        """Call `callbacks` `delay` ms from now (`priority` URGENT stands for a process's start)."""
        self.callbacks = callbacks
        heappush(self._queue, (self._env._now + delay, priority, next(self._eid), self))
