"""Process pools owned by a command (sweep, explore, tune, figures): started so that the parent alone decides
what a Ctrl-C does, and stopped at once, leaving no process behind, when the work is being thrown away.

Pool workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group; a worker's traceback would
only clutter the screen) and die with their parent (Linux), so a parent killed by SIGKILL leaves no orphans
computing on. `stop_pool` kills the workers instead of waiting for the tasks they hold.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor


def _worker_init() -> None:
    """Pool workers ignore Ctrl-C (the parent decides what happens) and die with the parent (Linux)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG


def start_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool of `workers` processes that ignore Ctrl-C and die with this process."""
    return ProcessPoolExecutor(max_workers=workers, initializer=_worker_init)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a process pool now: kill its workers (their work is being thrown away) and reap them.

    A worker killed halfway through sending a result leaves the pool's manager thread reading a message that
    never ends: this process holds the result pipe's write end too, so the read would wait forever and the
    interpreter, which joins that thread at exit, would hang. Closing this process's write end (nothing here
    writes to it) lets the read see end-of-file once the killed workers are gone; the pool then reports
    itself broken and its thread ends."""
    handles = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(pool, "_result_queue", None)
    for proc in handles:
        with contextlib.suppress(Exception):
            proc.kill()
    with contextlib.suppress(Exception):
        results._writer.close()  # type: ignore[union-attr]
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in handles:
        with contextlib.suppress(Exception):
            proc.join(timeout=2)


@contextlib.contextmanager
def owned_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool for the `with` block: shut down when the block ends (tasks nobody waited for are cancelled),
    stopped at once (`stop_pool`) when it ends by an exception (a Ctrl-C, a failed task): nothing then waits
    for tasks whose results are lost."""
    pool = start_pool(workers)
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(cancel_futures=True)
