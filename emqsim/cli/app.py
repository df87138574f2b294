"""`emqsim` (`python -m emqsim`): parse, dispatch to the command, and turn every expected failure into one
line on stderr and an exit status (2 for bad input, 130/143 when interrupted)."""

from __future__ import annotations

import contextlib
import errno
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from emqsim.cli.commands import COMMANDS
from emqsim.cli.parser import build_parser
from emqsim.cli.process import (
    GuardedStdout,
    StdoutError,
    StopSignals,
    detach_stdout,
    ignore_further_interrupts,
)
from emqsim.errors import ConfigError

# SIGTERM ends every command as Ctrl-C does, through its cleanup (a process pool stopped with no worker left
# computing; live mode's workers, private redis-server and temporary folders gone; a graded notebook's
# processes killed and its private copy removed; exit status 143) instead of killing this process and leaving
# those behind. `sweep` handles both signals itself, to keep the cells that finished.
OWN_SIGNALS = frozenset({"sweep"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit status.

    Without `argv` this is the `emqsim` program (arguments from sys.argv): once interrupted, it ignores any
    further Ctrl-C or SIGTERM on its way out, so the status stays 130 or 143. Called with `argv` from Python (a
    notebook, a script) it leaves SIGINT and SIGTERM handled as it found them: a notebook's interrupt button
    still works afterwards."""
    parser = build_parser()
    if sys.stdout is None:  # started with standard output closed (`>&-`)
        print(
            "emqsim: error: standard output is closed; redirect it instead, e.g. > /dev/null", file=sys.stderr
        )
        return 2
    argv_given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command line, for the provenance written with results
    if args.command == "live":
        from emqsim.live.cli import main_live

        handler = main_live
    else:
        handler = COMMANDS[args.command]
    stdout = sys.stdout
    sys.stdout = GuardedStdout(stdout)  # type: ignore[assignment]
    stop = StopSignals()
    previous_handlers = _handlers() if argv_given else {}
    try:
        with (
            stop.installed() if args.command not in OWN_SIGNALS else contextlib.nullcontext(),
            warnings.catch_warnings(),
        ):
            warnings.showwarning = _one_line_warning  # a LeaseWarning is one line, not Python's two
            code = handler(args)
        sys.stdout.flush()  # a full disk or closed pipe shows here, not as a traceback at exit
        return code
    except ConfigError as exc:
        message = " ".join(str(exc).splitlines())  # one line, whatever a value held
        print(f"emqsim {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        ignore_further_interrupts()
        if stop.signum == signal.SIGTERM:
            print("emqsim: terminated", file=sys.stderr)
            return 143
        print("emqsim: interrupted", file=sys.stderr)
        return 130
    except StdoutError as exc:
        detach_stdout()
        if exc.errno == errno.EPIPE:  # `emqsim ... | head`: the reader has all it wanted
            return 0
        print(
            f"emqsim {args.command}: error: cannot write to standard output ({exc.strerror})", file=sys.stderr
        )
        return 2
    except BrokenPipeError:
        detach_stdout()
        return 0
    except OSError as exc:  # a failing disk or folder: one line, no traceback
        print(f"emqsim {args.command}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.stdout = stdout
        for signum, previous in previous_handlers.items():
            signal.signal(signum, previous)


def _one_line_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """A warning as one line on stderr (`emqsim: warning: lease/beat = 1.67 < 2: ...`), without Python's
    source path and code line; a warning from outside emqsim keeps its category's name."""
    text = " ".join(str(message).split())
    if not category.__module__.startswith("emqsim"):
        text = f"{category.__name__}: {text}"
    print(f"emqsim: warning: {text}", file=sys.stderr)


def _handlers() -> dict[int, Any]:
    """SIGINT's and SIGTERM's handlers, to put back after a command run from Python (main thread only; a
    handler not set from Python cannot be put back)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    return {s: h for s, h in handlers.items() if h is not None}
