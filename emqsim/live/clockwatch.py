"""How steady this machine's clocks and scheduling were during a real-time run.

A live run (and the real-BullMQ validation) times leases in real milliseconds, so its numbers mean what the
simulator's mean only while the machine keeps time: a process that is not scheduled for a while (a paused
virtual machine, a starved CPU) renews late, and a step of the wall clock (which Redis expires keys by) moves
every expiry at once. `ClockWatch` measures both from a thread that wakes every `period` seconds: the worst
lateness of a wake-up (monotonic clock) and the worst step of the wall clock against the monotonic one. A run
whose watch saw more than its timing margin was disturbed, and its timings are not evidence about the protocol.

By default the thread runs in a small process of its own (this file, run as a script: standard library only),
so that what it measures is the machine's scheduling, not how busy the watching program's own threads keep
its interpreter lock: a harness reading 64 node processes' output kept an in-process watch waiting for up to
0.9 s while the machine itself was steady.

`until_steady` is the one rule for what to do with a disturbed run: not judge it, say so, and run it again,
a bounded number of times.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Steadiness:
    """What a `ClockWatch` saw, in seconds: `stall` the worst wake-up lateness, `clock_step` the largest change
    of (wall - monotonic) between two wake-ups, `watched` how long it watched."""

    stall: float
    clock_step: float
    watched: float

    def disturbed(self, margin: float) -> bool:
        """Whether a stall or a clock step reached `margin` seconds."""
        return max(self.stall, self.clock_step) >= margin

    def describe(self) -> str:
        return (
            f"the machine stalled for up to {self.stall * 1000:.0f} ms and its wall clock stepped by up to "
            f"{self.clock_step * 1000:.0f} ms during the {self.watched:.1f} s watched"
        )


class Disturbed(RuntimeError):
    """Every attempt `until_steady` made was disturbed."""


class NotJudged(UserWarning):
    """A run the machine disturbed, not judged and run again: a warning, so that a test log (pytest's warnings
    summary) says how often it happened."""


def not_judged(text: str) -> None:
    """`until_steady`'s default notice: a NotJudged warning."""
    warnings.warn(text, NotJudged, stacklevel=3)


def until_steady(
    attempt: Callable[[int], T],
    disturbance: Callable[[T], str | None],
    *,
    attempts: int = 3,
    notice: Callable[[str], None] = not_judged,
) -> T:
    """`attempt(k)` for k = 0, 1, ... until one is steady: the first result whose `disturbance` is None is
    returned; a disturbed one (its disturbance says how) goes to `notice` and is not judged. Disturbed when
    all `attempts` were."""
    if not (isinstance(attempts, int) and attempts >= 1):
        raise ValueError(f"attempts must be a whole number >= 1, got {attempts!r}")
    last = ""
    for k in range(attempts):
        result = attempt(k)
        seen = disturbance(result)
        if seen is None:
            return result
        notice(seen)
        last = seen
    raise Disturbed(f"all {attempts} attempts were disturbed; the last: {last}")


class ClockWatch:
    """A context manager: `with ClockWatch() as watch: ...`, then `watch.result()`. `in_process=True` watches
    from a thread of this process instead of a child process."""

    def __init__(self, period: float = 0.01, *, in_process: bool = False) -> None:
        if not (isinstance(period, int | float) and 0 < period <= 1):
            raise ValueError(f"period must be in (0, 1] seconds, got {period!r}")
        self.period = float(period)
        self.in_process = in_process
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None
        self._stall = 0.0
        self._step = 0.0
        self._last: tuple[float, float] | None = None  # the previous reading: (monotonic, wall - monotonic)
        self._began: float | None = None
        self._ended: float | None = None
        self._seen: Steadiness | None = None

    @property
    def pid(self) -> int | None:
        """The watching process's id (None when watching in process)."""
        return None if self._child is None else self._child.pid

    def __enter__(self) -> ClockWatch:
        if self.in_process:
            self.observe(time.monotonic(), time.time())
            self._thread = threading.Thread(target=self._watch, name="emqsim-clockwatch", daemon=True)
            self._thread.start()
            return self
        self._child = subprocess.Popen(
            [sys.executable, "-S", "-E", "-P", __file__, repr(self.period)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._child.stdout is not None
        if self._child.stdout.readline().strip() != "watching":  # the watch runs before the block does
            self._child.kill()
            self._child.wait()
            raise RuntimeError("the clock watch process did not start")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._child is None:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            self._ended = time.monotonic()
            return
        child = self._child
        try:
            out, _ = child.communicate(timeout=10)  # closing its stdin ends the watch; it prints what it saw
            self._seen = Steadiness(**json.loads(out))
        except (subprocess.TimeoutExpired, ValueError, TypeError):
            self._seen = None
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()

    def _watch(self) -> None:
        while not self._stop.wait(self.period):
            self.observe(time.monotonic(), time.time())

    def observe(self, monotonic: float, wall: float) -> None:
        """One reading of both clocks, `period` after the previous one was due (the watch's thread takes one
        per wake-up; the first only sets the start)."""
        offset = wall - monotonic
        if self._last is None:
            self._began = monotonic
        else:
            last_mono, last_offset = self._last
            self._stall = max(self._stall, monotonic - last_mono - self.period)
            self._step = max(self._step, abs(offset - last_offset))
        self._last = (monotonic, offset)

    def result(self) -> Steadiness:
        """What was seen: in process, so far (or in all once the `with` block ended); from a child process,
        once the block ended. RuntimeError if the child's report was lost."""
        if self._child is not None:
            if self._seen is None:
                raise RuntimeError("the clock watch process did not report what it saw")
            return self._seen
        began = self._began if self._began is not None else time.monotonic()
        end = self._ended if self._ended is not None else time.monotonic()
        return Steadiness(stall=self._stall, clock_step=self._step, watched=end - began)


def _serve(period: float) -> None:
    """The watching process: watch until stdin closes, then print what was seen as JSON. A Ctrl-C meant for
    the program that started it is not its business."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with ClockWatch(period, in_process=True) as watch:
        print("watching", flush=True)
        sys.stdin.read()
    print(json.dumps(asdict(watch.result())), flush=True)


if __name__ == "__main__":
    _serve(float(sys.argv[1]))
