"""The process around a command: Ctrl-C and SIGTERM during a sweep, and standard output whose write errors
are told apart from every other OSError."""

from __future__ import annotations

import io
import os
import signal
import sys
from typing import Any


def ignore_further_interrupts() -> None:
    """After a Ctrl-C the process only reports and exits: another Ctrl-C must not turn the exit status 130
    into death by signal."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM while a command runs: the first raises KeyboardInterrupt, so a sweep stops
    and keeps the cells that finished; any later one (a second, impatient Ctrl-C) is only noted, so it cannot
    cut short the bounded work of stopping and saving. After `defer()` no signal raises at all.

    The KeyboardInterrupt can land in a callback whose exceptions Python reports and ignores (an at-fork hook
    run while a process pool starts, a finalizer): the command would then run on to its end. Such a swallowed
    interrupt is raised again a few milliseconds later, by a one-shot SIGALRM timer, in whatever the main
    thread runs then (and again, should that land in such a callback too)."""

    RETRY_S = 0.005  # after a swallowed interrupt: long enough to leave the callback, too short to notice

    def __init__(self) -> None:
        self.signum: int | None = None
        self.deferred = False
        self._raise_again = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            if not self.deferred:
                raise KeyboardInterrupt

    def _retry(self, signum: int, frame: Any) -> None:
        if self._raise_again and not self.deferred:
            self._raise_again = False
            raise KeyboardInterrupt

    def requested(self) -> bool:
        """True once a signal came. For a caller that polls and stops on its own: a pending raise-again is
        called off, so it cannot land in the caller's stopping and saving."""
        if self.signum is not None and self._raise_again:
            self._raise_again = False
        return self.signum is not None

    def defer(self) -> None:
        self.deferred = True

    def installed(self):
        import contextlib

        @contextlib.contextmanager
        def scope():
            import threading

            if (
                threading.current_thread() is not threading.main_thread()
            ):  # signals reach the main thread only
                yield self
                return
            previous = {sig: signal.signal(sig, self) for sig in (signal.SIGINT, signal.SIGTERM)}
            can_retry = hasattr(signal, "SIGALRM")  # not on Windows: a swallowed interrupt stays swallowed
            previous_alarm = signal.signal(signal.SIGALRM, self._retry) if can_retry else None
            unraisable = sys.unraisablehook

            def swallowed_interrupts(info: Any) -> None:
                if isinstance(info.exc_value, KeyboardInterrupt) and self.signum is not None:
                    if not self.deferred and can_retry:  # not printed: raised again after the callback
                        self._raise_again = True
                        signal.setitimer(signal.ITIMER_REAL, self.RETRY_S)
                else:
                    unraisable(info)

            sys.unraisablehook = swallowed_interrupts
            try:
                yield self
            finally:
                sys.unraisablehook = unraisable
                if can_retry:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, previous_alarm)
                for sig, handler in previous.items():
                    # once stopping, the process only saves, reports and exits: a later Ctrl-C must not
                    # kill it by signal on the way out (the exit status says 130 or 143, not -2)
                    signal.signal(sig, signal.SIG_IGN if self.signum is not None else handler)

        return scope()


class StdoutError(OSError):
    """Writing standard output failed (a full disk, a closed pipe): reported in one line, not a traceback."""


class GuardedStdout:
    """Standard output whose write errors are told apart from every other OSError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def detach_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass
