"""Process pools owned by a command (sweep, explore, tune, figures): started so that the parent alone decides
what a Ctrl-C does, and stopped at once, leaving no process behind, when the work is being thrown away.

Pool workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group; a worker's traceback would
only clutter the screen) and die with their parent (Linux), so a parent killed by SIGKILL leaves no orphans
computing on. `stop_pool` kills the workers instead of waiting for the tasks they hold.

A Ctrl-C raises KeyboardInterrupt wherever the main thread is, and inside the executor's own code that can
leave one of its locks held: a future's lock taken by `wait` and never given back makes the pool's manager
thread wait for it forever, and the interpreter, which joins that thread at exit, hangs after the command has
written everything. So the main thread talks to an executor only through this module (`submit_all`,
`wait_some`, `gather`, `result_of`, `start_pool`), which holds SIGINT, SIGTERM and SIGALRM (`SignalsHeld`)
for each short call and delivers one that came right after it: the interrupt lands in the caller's code.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from emqsim.processes import set_parent_death_signal

T = TypeVar("T")

# SIGALRM raises a swallowed Ctrl-C again (emqsim.cli.process); Windows has neither it nor signal masks
HELD = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGALRM") if hasattr(signal, name))
CAN_BLOCK = hasattr(signal, "pthread_sigmask")  # POSIX: held signals are blocked, not only noted
POLL_S = 0.25  # the longest a held wait lasts, so the longest a Ctrl-C waits to be delivered


class SignalsHeld:
    """While inside: SIGINT, SIGTERM and SIGALRM are only noted, by this thread's handlers and at the OS level
    (so threads and processes started inside inherit them blocked); on leaving, the previous handlers are back
    and a noted signal is delivered to them, now. Main thread only (elsewhere it does nothing: signals reach
    the main thread alone). Nests."""

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._noted: list[int] = []
        self._mask: set[int] | None = None
        self._active = False

    def _note(self, signum: int, frame: Any) -> None:
        if signum not in self._noted:
            self._noted.append(signum)

    def __enter__(self) -> SignalsHeld:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._active = True
        if CAN_BLOCK:
            self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        try:
            for signum in HELD:
                self._previous[signum] = signal.getsignal(signum)  # kept before replacing: nothing lost
                signal.signal(signum, self._note)  # may first run a handler for a signal that came before
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._active:
            return
        self._active = False
        if self._mask is not None:
            # unblocked while the noting handlers are still in place: a signal pending at the OS level is noted
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            self._mask = None
        raised: BaseException | None = None
        for signum, handler in self._previous.items():
            for _ in range(3):  # signal.signal() runs pending handlers first: one already restored may raise
                try:
                    signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
                    break
                except BaseException as error:
                    raised = raised or error
        if raised is not None:
            raise raised
        for signum in self._noted:
            signal.raise_signal(signum)


def batches(items: Sequence[T], parts: int) -> list[Sequence[T]]:
    """`items` in order, cut into at most `parts` batches of equal size (the last may be shorter): one task
    per batch keeps a pool's per-task overhead small while leaving enough tasks to share the work out."""
    size = max(1, -(-len(items) // max(1, parts)))
    return [items[k : k + size] for k in range(0, len(items), size)]


def submit_all(executor: Executor, fn: Callable[[Any], T], arguments: Iterable[Any]) -> list[Future[T]]:
    """`fn(a)` for each argument, submitted with signals held (a process pool forks its workers here)."""
    with SignalsHeld():
        return [executor.submit(fn, a) for a in arguments]


def wait_some(pending: Iterable[Future[T]], timeout: float = POLL_S) -> tuple[set[Future[T]], set[Future[T]]]:
    """(done, not done): waits with signals held until one is done or `timeout` passed; a loop around it
    stays interruptible (a signal is delivered between two waits)."""
    with SignalsHeld():
        return wait(pending, timeout=min(timeout, POLL_S), return_when=FIRST_COMPLETED)


def result_of(future: Future[T]) -> T:
    """The result of a future that is done (its exception raised), read with signals held."""
    with SignalsHeld():
        return future.result(timeout=0)


def gather(futures: Sequence[Future[T]], between: Callable[[], None] | None = None) -> list[T]:
    """Every future's result, in order, once all are done; a Ctrl-C while waiting stops the waiting.
    `between()` runs after each short wait (e.g. to read the workers' progress)."""
    pending: set[Future[T]] = set(futures)
    while pending:
        _, pending = wait_some(pending)
        if between is not None:
            between()
    return [result_of(f) for f in futures]


def _worker_init(setup: Callable[..., None] | None = None, setup_args: tuple[Any, ...] = ()) -> None:
    """Pool workers ignore Ctrl-C (the parent decides what happens), end on SIGTERM and die with the parent
    (Linux). They start with the parent's held signals blocked; one that came meanwhile is handled now. Then
    the pool's own `setup`, if any."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in HELD:
        if signum != signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)
    if CAN_BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
    set_parent_death_signal(signal.SIGKILL)
    if setup is not None:
        setup(*setup_args)


def start_pool(
    workers: int, setup: Callable[..., None] | None = None, setup_args: tuple[Any, ...] = ()
) -> ProcessPoolExecutor:
    """A process pool of `workers` processes that ignore Ctrl-C and die with this process, started now with
    signals held: a Ctrl-C at a terminal, which reaches the whole process group, cannot land in a worker that
    has just been forked and is not yet ignoring it (it would run on as a copy of the command). Each worker
    then runs `setup(*setup_args)` (e.g. to be handed a shared counter, which only process creation can pass)."""
    with SignalsHeld():
        pool = ProcessPoolExecutor(
            max_workers=workers, initializer=_worker_init, initargs=(setup, setup_args)
        )
        pool.submit(int)  # forks the workers and starts the pool's threads (they keep the signals blocked)
    return pool


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a process pool now: kill its workers (their work is being thrown away) and reap them.

    A worker killed halfway through sending a result leaves the pool's manager thread reading a message that
    never ends: this process holds the result pipe's write end too, so the read would wait forever and the
    interpreter, which joins that thread at exit, would hang. Closing this process's write end (nothing here
    writes to it) lets the read see end-of-file once the killed workers are gone; the pool then reports
    itself broken and its thread ends."""
    handles = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(pool, "_result_queue", None)
    with SignalsHeld():
        for proc in handles:
            with contextlib.suppress(Exception):
                proc.kill()
        with contextlib.suppress(Exception):
            results._writer.close()  # type: ignore[union-attr]
        pool.shutdown(wait=False, cancel_futures=True)
    for proc in handles:
        with contextlib.suppress(Exception):
            proc.join(timeout=2)
    # The pool's manager thread, woken by the end-of-file above, closes its wake-up pipe as it ends. Wait for
    # it: concurrent.futures' exit hook wakes every pool it knows, and if the thread closes that pipe between
    # the hook's check and its write, Python 3.11 prints an OSError (Bad file descriptor) traceback at exit
    # (CI saw it after a Ctrl-C mid-sweep).
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        with contextlib.suppress(Exception):
            manager.join(timeout=5)
        # On a loaded machine the thread may outlive that wait: take it off the exit hook's list, so the hook
        # never writes to a pipe the thread is closing (the thread itself still ends on the end-of-file above).
        with contextlib.suppress(Exception):
            from concurrent.futures import process as futures_process

            futures_process._threads_wakeups.pop(manager, None)  # type: ignore[attr-defined]


@contextlib.contextmanager
def owned_pool(
    workers: int, setup: Callable[..., None] | None = None, setup_args: tuple[Any, ...] = ()
) -> Iterator[ProcessPoolExecutor]:
    """A pool for the `with` block: shut down when the block ends (tasks nobody waited for are cancelled),
    stopped at once (`stop_pool`) when it ends by an exception (a Ctrl-C, a failed task): nothing then waits
    for tasks whose results are lost. `setup`: as `start_pool`'s."""
    pool = start_pool(workers, setup, setup_args)
    try:
        yield pool
        pool.shutdown(cancel_futures=True)
    except BaseException:
        stop_pool(pool)
        raise
