"""Stops a user's detector whose `suspect()` does not return: a call that sleeps for an hour, waits on a lock
that never comes, or loops forever would hang the run (issue 30).

`Detector.sweep` calls `suspect` through `call`, which notes the thread and the start of the call. One watcher
thread per process (a daemon, started at the first call, started again in a forked child) looks every 0.1 s
(more often for limits under 0.4 s) and interrupts a call running longer than its limit (the detector's
`answer_within`, 5 real seconds by default): in the main thread with a SIGUSR1 sent to it (`signal.pthread_kill`,
which also wakes a `time.sleep` or a lock wait), whose handler raises `Blocked` there; in another thread (a Dask
worker's) with `PyThreadState_SetAsyncExc`, which stops Python code but not a blocking C call (that one is
caught when it returns, by `answer_within`'s check after the call). `call` turns `Blocked` into
`DetectorBlocked`, a `TimeoutError` and a `ConfigError` (the command line's one line, exit status 2) naming the
call. The watcher repeats the interrupt every second while the call is still running (a `suspect` that catches
everything). SIGALRM (the command line's interrupt retry) and SIGINT are left alone: Ctrl-C still stops the run.

The handler for SIGUSR1 is installed once, from the main thread, and passes a SIGUSR1 it did not send on to the
handler it replaced (if that was a Python function; the default action, ending the process, is no longer taken).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from emqsim.errors import ConfigError

PERIOD = 0.1  # seconds between the watcher's looks (limits under 4 x PERIOD are looked at 4 times per limit)
REPEAT = 1.0  # seconds between interrupts of a call that is still running
SIGNAL = getattr(signal, "SIGUSR1", None)  # None on Windows: the asynchronous exception only


class Blocked(BaseException):
    """Raised inside a `suspect()` call that ran over its limit (a BaseException, so a detector's own
    `except Exception` does not swallow it); `call` turns it into `DetectorBlocked`."""


class DetectorBlocked(TimeoutError, ConfigError):
    """A detector's `suspect()` ran longer than its `answer_within` real seconds: the run is stopped."""


class _State:
    """The process's watchdog state, in one object whose attributes change, never the module's own names: the
    grader's guard (emqsim.grading.guard) refuses answers that rebind emqsim's module attributes, and a
    student's detector run in an answer cell starts the watcher."""

    def __init__(self) -> None:
        # thread ident -> (monotonic start, limit, last interrupt or 0.0) of the suspect() call in that thread
        self.calls: dict[int, tuple[float, float, float]] = {}
        self.watcher: threading.Thread | None = None
        self.handler_installed = False
        self.previous_handler: Any = None
        self.lock = threading.Lock()


_state = _State()
_calls = _state.calls  # the same dict, for reading


def _after_fork() -> None:
    """A forked child has none of its parent's threads: its watcher starts again at its first call."""
    _state.watcher = None
    _state.calls.clear()
    _state.lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def call(suspect: Callable[[str, float], Any], job: str, now: float, limit: float, started: float) -> Any:
    """`suspect(job, now)`, interrupted if it runs longer than `limit` real seconds from `started` (monotonic)."""
    if _state.watcher is None:
        _start()
    ident = threading.get_ident()
    _calls[ident] = (started, limit, 0.0)
    try:
        return suspect(job, now)
    except Blocked:
        _calls.pop(ident, None)
        raise stopped(getattr(suspect, "__qualname__", repr(suspect)), job, now, limit) from None
    finally:
        _calls.pop(ident, None)


def stopped(name: str, job: str, now: float, limit: float) -> DetectorBlocked:
    """The error of a `suspect()` call (`name`: its qualified name) stopped at its limit: here, or in a
    student's kernel by the grader (emqsim.grading.trusted)."""
    return DetectorBlocked(
        f"{name}({job!r}, {now}) was stopped after {limit:g} s of real time without an answer; a detector "
        f"must answer within {limit:g} s (answer_within): does it wait, sleep or loop forever?"
    )


def _start() -> None:
    with _state.lock:
        if _state.watcher is not None:
            return
        if threading.current_thread() is threading.main_thread():
            _install_handler()
        thread = threading.Thread(target=_watch, name="emqsim-detector-watchdog", daemon=True)
        thread.start()
        _state.watcher = thread


def _install_handler() -> None:
    """SIGUSR1 raises `Blocked` in the main thread while one of its calls is over its limit (main thread only)."""
    if _state.handler_installed or SIGNAL is None:
        return
    try:
        _state.previous_handler = signal.signal(SIGNAL, _on_signal)
    except (ValueError, OSError):  # not the main thread after all, or an embedding that forbids it
        return
    _state.handler_installed = True


def _on_signal(signum: int, frame: Any) -> None:
    entry = _calls.get(threading.main_thread().ident or 0)
    if entry is not None and time.monotonic() - entry[0] > entry[1]:
        raise Blocked
    if callable(_state.previous_handler):  # a SIGUSR1 from elsewhere, for whoever handled it before
        _state.previous_handler(signum, frame)


def _watch() -> None:
    while True:
        limits = [entry[1] for entry in list(_calls.values())]
        time.sleep(min([PERIOD, *(max(0.005, x / 4) for x in limits)]))
        now = time.monotonic()
        for ident, (started, limit, last) in list(_calls.items()):
            if now - started > limit and now - last > REPEAT:
                if _calls.get(ident, (None,))[0] != started:
                    continue  # that call ended meanwhile
                _calls[ident] = (started, limit, now)
                _interrupt(ident)


def _interrupt(ident: int) -> None:
    """Raise `Blocked` in thread `ident`: by a signal in the main thread (it also ends a sleep), else by an
    asynchronous exception (Python code only)."""
    main = ident == threading.main_thread().ident
    if main and SIGNAL is not None and _state.handler_installed and signal.getsignal(SIGNAL) is _on_signal:
        signal.pthread_kill(ident, SIGNAL)
        return
    import ctypes  # here, not at import: most processes never need it

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Blocked))
    if ident not in _calls:  # the call ended meanwhile: take the exception back before it lands elsewhere
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
