"""A Ctrl-C while the `emqsim` program is still importing (numpy, SimPy, matplotlib: up to a second or more)
prints one line, not a KeyboardInterrupt traceback from deep inside an import."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

_PROGRAM_MODULES = ("emqsim", "emqsim.cli")


def is_the_program() -> bool:
    """True in the `emqsim` program (`emqsim ...`, `python -m emqsim ...`, `python -m emqsim.cli ...`), never
    when emqsim is imported by other code (a notebook, a test, a script, a pool worker)."""
    argv = getattr(sys, "orig_argv", [])
    for flag, module in zip(argv, argv[1:], strict=False):
        if flag == "-m":
            return module in _PROGRAM_MODULES
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "emqsim"


def _interrupted(signum: int, frame: Any) -> None:
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    try:
        sys.stderr.write(f"emqsim: {word}\n")
        sys.stderr.flush()
    finally:
        os._exit(143 if signum == signal.SIGTERM else 130)  # nothing has started: nothing to clean up


def quiet_interrupts_while_starting() -> None:
    """In the program, SIGINT and SIGTERM end it with one line until the command installs its own handlers
    (`emqsim.cli.main` does, before any work); elsewhere, nothing changes."""
    if not is_the_program():
        return
    import threading

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
                signal.signal(signum, _interrupted)
