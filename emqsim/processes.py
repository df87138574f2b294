"""Child processes' two safety nets, written once: signal a whole process group, and die with the parent.

Used by the live runner (worker processes, the private redis-server), the process pools and the grader. The
standard library and ctypes only, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1
_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # not glibc/Linux: children are still stopped by try/finally, just not on a parent crash
    _LIBC = None
_PRCTL = _LIBC.prctl if _LIBC is not None else None  # resolved now: a forked child (preexec_fn) only calls it


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """This process receives `sig` when its parent dies (Linux `PR_SET_PDEATHSIG`; elsewhere nothing), so a
    killed parent leaves no child behind."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn` for `subprocess.Popen`: the child receives `sig` when its parent dies."""

    def preexec() -> None:
        set_parent_death_signal(sig)

    return preexec


def signal_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the process group `pid` leads (a child started with `start_new_session=True`); a group
    that is already gone, or not ours, is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_group(proc: subprocess.Popen[Any], wait: float | None = 10.0) -> None:
    """SIGKILL `proc`'s whole process group, then reap `proc` (waiting at most `wait` seconds; None: no limit)."""
    signal_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=wait)
