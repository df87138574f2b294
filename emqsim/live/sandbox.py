"""A sandboxed processor's child process for one job (BullMQ's `sandbox.js`), in a live worker process.

Standard library only: emqsim/live/worker.py, run as a file, loads it by path (as `lua.py`).
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any


class Sandbox:
    """A sandboxed processor's child process for one job (BullMQ's `sandbox.js`): a real process started with
    the job (`sleep`, standing for the processor; the worker thread still times the job's work, so a freeze
    of the worker's process group stops both) and ended when the job's work is done. The worker reports its
    pid (`child`), so that the parent can kill it (a `ChildCrash`); a thread waits for its exit."""

    def __init__(self, worker: Any, job: str, token: str) -> None:
        self.worker, self.job, self.token = worker, job, token
        self.exited = threading.Event()
        self.proc = subprocess.Popen(
            ["sleep", "86400"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        worker.emit("child", job=job, token=token, pid=self.proc.pid)
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.proc.wait()
        self.exited.set()

    def died(self, worked: float) -> bool:
        """Whether the child exited before the job's work was done (reported as `child_exit`, with the real
        seconds of work done); otherwise it is ended now, its job done."""
        if self.exited.is_set():
            self.worker.emit(
                "child_exit", job=self.job, token=self.token, t=time.time(), worked=worked,
                code=self.proc.returncode,
            )  # fmt: skip
            return True
        self.proc.kill()
        self.proc.wait()
        return False
