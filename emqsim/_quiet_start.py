"""A Ctrl-C while the `emqsim` program is still importing (numpy, SimPy, matplotlib: up to a second or more)
prints one line, not a KeyboardInterrupt traceback from deep inside an import.

The handler goes in before anything slow: this module imports only what the interpreter has already loaded
when it starts (`sys`, `os` and the built-in `_signal`; `signal.py` would import `enum`, `typing` takes tens of
milliseconds on a busy machine), so the window where Python's own KeyboardInterrupt traceback can appear ends
at the first line of emqsim's code. Before that line the interpreter is still starting (its own modules, `site`
and `.pth` files, a console-script wrapper's `import re`): that part is Python's, not the program's."""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # the built-in behind signal.py (no stubs)
import os
import sys

_PROGRAM_MODULES = ("emqsim", "emqsim.cli")


def is_the_program() -> bool:
    """True in the `emqsim` program (`emqsim ...`, `python -m emqsim ...`, `python -m emqsim.cli ...`), never
    when emqsim is imported by other code (a notebook, a test, a script, a pool worker)."""
    argv = getattr(sys, "orig_argv", [])
    for flag, module in zip(argv, argv[1:], strict=False):
        if flag == "-m":
            return module in _PROGRAM_MODULES
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "emqsim"


def _interrupted(signum: int, frame: object) -> None:
    word = "terminated" if signum == _signal.SIGTERM else "interrupted"
    try:
        sys.stderr.write(f"emqsim: {word}\n")
        sys.stderr.flush()
    finally:
        os._exit(143 if signum == _signal.SIGTERM else 130)  # nothing has started: nothing to clean up


def quiet_interrupts_while_starting() -> None:
    """In the program, SIGINT and SIGTERM end it with one line until the command installs its own handlers
    (`emqsim.cli.main` does, before any work); elsewhere, nothing changes."""
    if not is_the_program():
        return
    for signum in (_signal.SIGINT, _signal.SIGTERM):
        try:
            if _signal.getsignal(signum) in (_signal.default_int_handler, _signal.SIG_DFL):
                _signal.signal(signum, _interrupted)
        except ValueError:  # not the main thread: only the main thread sets handlers
            return
