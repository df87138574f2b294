"""Real signals on a real `python -m emqsim sweep --jobs 2`: Ctrl-C once, twice a second apart, twice at once,
SIGTERM, and Ctrl-C before any cell finished. Each must end (no hang), leave no process of its session behind
(pool workers included), write the finished rows, and never shrink an existing results file.

A cell has finished when its entry appears in the --cache folder, so the tests wait for that (not for a time).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HANG = 60  # seconds: only a hang takes this long; the tests never assert how fast anything is

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc for leftover processes")


def session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes in session `sid` (the sweep and every process it started)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            found.append(int(entry))
    return found


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`python ARGS` in tmp_path, in a session of its own (its processes are found by session id)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", *args],  # a hang can be made to show its threads' stacks
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def start_sweep(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return start(tmp_path, "-m", "emqsim", "sweep", "--jobs", "2", "--quiet", "--json",
                 "--out", str(tmp_path / "rows.json"), "--cache", str(tmp_path / "cache"), *extra)  # fmt: skip


def wait_for(condition, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + HANG
    while not condition():
        assert proc.poll() is None, f"the sweep ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the sweep made no progress"
        time.sleep(0.05)


def finished_cells(tmp_path: Path) -> int:
    folder = tmp_path / "cache"
    return len(list(folder.glob("*.json"))) if folder.is_dir() else 0


def hung(proc: subprocess.Popen[str], what: str) -> None:
    """Fail with the stacks of every thread of every process of the hung command: SIGABRT makes each one's
    fault handler (`-X faulthandler`) print them to the shared stderr before it dies."""
    for pid in session_processes(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"{what}; the stacks of its processes' threads:\n{err}")


def end(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        hung(proc, "the command hung after the signal")
    deadline = time.monotonic() + 10
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # killed pool workers are reaped by the kernel, not instantly
    leftover = session_processes(proc.pid)
    if leftover:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not leftover, f"processes left behind: {leftover}"
    return out, err


ARGS = ("--replications", "60")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signals",
    [
        [(signal.SIGINT, 0.0)],
        [(signal.SIGINT, 0.0), (signal.SIGINT, 1.0)],  # a second Ctrl-C about a second later
        [(signal.SIGINT, 0.0), (signal.SIGINT, 0.01), (signal.SIGINT, 0.01)],  # an impatient triple Ctrl-C
        [(signal.SIGTERM, 0.0)],
        [(signal.SIGTERM, 0.0), (signal.SIGINT, 0.2)],
        [(signal.SIGINT, 0.0)]
        + [(signal.SIGINT, 0.02)] * 150,  # Ctrl-C held down: hits every stage of exiting
    ],
    ids=[
        "ctrl-c",
        "ctrl-c-then-ctrl-c-1s-later",
        "quick-triple-ctrl-c",
        "sigterm",
        "sigterm-then-ctrl-c",
        "ctrl-c-held-down",
    ],  # fmt: skip
)
def test_signals_end_the_sweep_and_keep_the_finished_rows(tmp_path: Path, signals) -> None:
    proc = start_sweep(tmp_path, *ARGS)
    wait_for(lambda: finished_cells(tmp_path) >= 2, proc)
    done_before = finished_cells(tmp_path)
    for sig, delay in signals:
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(sig)
    out, err = end(proc)
    first = signals[0][0]
    assert proc.returncode == (143 if first == signal.SIGTERM else 130), err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert ("terminated" if first == signal.SIGTERM else "interrupted") + ": kept the" in lines[0]
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert len(rows) >= done_before and rows == json.loads(out)["rows"]
    assert len(rows) == finished_cells(tmp_path)  # every finished cell is both cached and written
    assert not list(tmp_path.glob(".emqsim-*"))  # no temporary file left


@pytest.mark.slow
def test_ctrl_c_before_any_cell_finishes_keeps_the_existing_results_file(tmp_path: Path) -> None:
    existing = tmp_path / "rows.json"
    existing.write_text(json.dumps({"rows": [{"scenario": "x"}] * 7}))
    before = existing.read_bytes()
    proc = start_sweep(tmp_path, "--scenario", "production", "--replications", "400")
    wait_for(lambda: len(session_processes(proc.pid)) >= 3, proc)  # the sweep and its two pool workers
    proc.send_signal(signal.SIGINT)
    out, err = end(proc)
    assert proc.returncode == 130 and "Traceback" not in err
    assert existing.read_bytes() == before
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_an_interrupted_sweep_never_shrinks_an_existing_results_file(tmp_path: Path) -> None:
    existing = tmp_path / "rows.json"
    existing.write_text(json.dumps({"rows": [{"scenario": "x"}] * 100}))
    before = existing.read_bytes()
    proc = start_sweep(tmp_path, *ARGS)
    wait_for(lambda: finished_cells(tmp_path) >= 1, proc)
    proc.send_signal(signal.SIGINT)
    out, err = end(proc)
    assert proc.returncode == 130
    assert existing.read_bytes() == before
    partial = json.loads((tmp_path / "rows.partial.json").read_text())["rows"]
    assert partial == json.loads(out)["rows"] and partial
    assert "rows.json kept (100 rows)" in err and "--force" in err


@pytest.mark.slow
def test_force_replaces_the_results_file_after_an_interrupt(tmp_path: Path) -> None:
    existing = tmp_path / "rows.json"
    existing.write_text(json.dumps({"rows": [{"scenario": "x"}] * 100}))
    proc = start_sweep(tmp_path, *ARGS, "--force")
    wait_for(lambda: finished_cells(tmp_path) >= 1, proc)
    proc.send_signal(signal.SIGINT)
    out, err = end(proc)
    assert proc.returncode == 130
    assert json.loads(existing.read_text())["rows"] == json.loads(out)["rows"]
    assert not (tmp_path / "rows.partial.json").exists()


@pytest.mark.slow
def test_ctrl_c_at_a_terminal_reaches_the_pool_workers_too_and_still_keeps_the_rows(tmp_path: Path) -> None:
    """A terminal sends Ctrl-C to the whole foreground process group: the pool workers get SIGINT as well."""
    proc = start_sweep(tmp_path, *ARGS)
    wait_for(lambda: finished_cells(tmp_path) >= 2, proc)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = end(proc)
    assert proc.returncode == 130 and "Traceback" not in err, err
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert len(rows) >= 2 and rows == json.loads(out)["rows"]


HALF_SENT = r"""
import os, struct, sys, time
from pathlib import Path

from emqsim.pools import start_pool, stop_pool

MARK = Path(sys.argv[1])


def send_half_a_result() -> None:
    # Inside a pool worker: write the head of a 1 MB result message and 10 bytes of it to the pool's result
    # pipe, then stop, as a worker killed in the middle of sending a large batch of summaries would.
    frame = sys._getframe()
    while "result_queue" not in frame.f_locals:
        frame = frame.f_back
    writer = frame.f_locals["result_queue"]._writer
    os.write(writer.fileno(), struct.pack("!i", 1_000_000) + b"x" * 10)
    MARK.write_text("sent")
    time.sleep(3600)


if __name__ == "__main__":
    pool = start_pool(1)
    pool.submit(send_half_a_result)
    while not MARK.exists():
        time.sleep(0.01)
    stop_pool(pool)
    print("stopped")
    # the interpreter now joins the pool's manager thread: it must not be left reading the half message
"""


def test_killing_a_worker_halfway_through_sending_a_result_does_not_hang_the_exit(tmp_path: Path) -> None:
    """A Ctrl-C can kill a pool worker while it writes a result to the pool's pipe (a CI run hung here after
    printing its rows): the sweep's process must still exit."""
    script = tmp_path / "half_sent.py"
    script.write_text(HALF_SENT)
    proc = start(tmp_path, str(script), str(tmp_path / "mark"))
    out, err = end(proc)
    assert proc.returncode == 0 and out.strip() == "stopped", err


INSIDE_THE_EXECUTOR = r"""
import os, signal, sys

from emqsim.cli.app import main

seen = 0


def interrupt_inside_the_executor(frame, event, arg):
    # `concurrent.futures.wait` takes every future's lock, one by one (_AcquireFutures.__enter__): a Ctrl-C
    # sent after it has taken some of them is the worst moment there is (a CI run hung after one such)
    global seen
    if frame.f_code.co_name == "__enter__" and type(frame.f_locals.get("self")).__name__ == "_AcquireFutures":
        def per_line(frame, event, arg):
            global seen
            if event == "line":
                seen += 1
                if seen == 4:
                    os.kill(os.getpid(), signal.SIGINT)
            return per_line
        return per_line
    return None


sys.settrace(interrupt_inside_the_executor)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sweep", "explore", "tune", "figures"])
def test_a_ctrl_c_that_comes_while_the_executor_holds_its_locks_still_ends_the_command(
    tmp_path: Path, command: str
) -> None:
    """A Ctrl-C raised inside `concurrent.futures.wait`, after it has taken some futures' locks, used to leave
    one taken: the pool's manager thread then waited for it forever and the command hung at exit after
    printing everything. Signals are now held while the main thread is inside the executor (emqsim.pools)."""
    script = tmp_path / "inside.py"
    script.write_text(INSIDE_THE_EXECUTOR)
    args = {
        "sweep": ["sweep", "--jobs", "2", "--quiet", "--json", "--replications", "60"],
        **POOLED_COMMANDS,
    }[command]
    proc = start(tmp_path, str(script), *args)
    out, err = end(proc)
    assert "Traceback" not in err, err
    assert proc.returncode == 130, err


POOLED_COMMANDS = {
    "explore": ["explore", "--fault", "freeze,length=1:60", "--jobs", "2", "--yes"],
    "tune": ["tune", "--jobs", "2", "--quiet"],
    "figures": ["figures", "--out", "figs"],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(POOLED_COMMANDS))
@pytest.mark.parametrize(
    "signum, to_group",
    [(signal.SIGINT, True), (signal.SIGINT, False), (signal.SIGTERM, False)],
    ids=["ctrl-c-at-a-terminal", "kill-INT", "kill-TERM"],
)
def test_signals_end_the_other_pooled_commands_and_leave_no_worker(
    tmp_path: Path, command: str, signum: int, to_group: bool
) -> None:
    """explore, tune and figures run a process pool too: Ctrl-C at a terminal (the whole process group), a
    SIGINT to the command alone and a SIGTERM each end it promptly, in one line, with no worker left computing
    (a SIGTERM used to kill the command and orphan its workers; a SIGINT to it alone waited for their tasks)."""
    proc = start(tmp_path, "-m", "emqsim", *POOLED_COMMANDS[command])
    wait_for(lambda: len(session_processes(proc.pid)) >= 3, proc)  # the command and its two pool workers
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    out, err = end(proc)
    assert "Traceback" not in err, err
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    assert (proc.returncode, err.strip().splitlines()) == (
        143 if signum == signal.SIGTERM else 130,
        [f"emqsim: {word}"],
    ), out[-300:]


def main_thread_only() -> None:
    """Signal handlers are installed from the main thread only: elsewhere the tests' own signals would end the
    test process."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed in the main thread")


def test_an_interrupt_swallowed_by_a_callback_is_raised_again() -> None:
    """A signal's KeyboardInterrupt raised inside a finalizer (or an at-fork hook while a pool starts) is
    reported and ignored by Python; the command must still stop, so StopSignals raises it again."""
    from emqsim.cli.process import StopSignals

    main_thread_only()

    class Finalized:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the finalizer

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    stop = StopSignals()
    try:
        with pytest.raises(KeyboardInterrupt), stop.installed():
            Finalized()  # dropped at once: the KeyboardInterrupt from its __del__ is swallowed
            for _ in range(1000):  # at most 10 s; the retry comes after 5 ms
                time.sleep(0.01)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert stop.signum == signal.SIGTERM


def test_a_caller_that_polls_calls_off_the_raise_again() -> None:
    """A sweep polls `requested()` and stops on its own; the raise-again must not then land in its stopping
    and saving."""
    from emqsim.cli.process import StopSignals

    main_thread_only()

    class Finalized:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    stop = StopSignals()
    try:
        with stop.installed():
            Finalized()
            assert stop.requested()
            for _ in range(20):  # four times the retry's delay: nothing is raised
                time.sleep(0.005)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert stop.signum == signal.SIGINT


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_signals_end_grading_and_leave_no_process_or_private_copy(tmp_path: Path, signum: int) -> None:
    """`grade` runs the notebook in a private copy, in processes of its own: a SIGTERM used to kill the grader
    alone, leaving the notebook's processes running and the copy on disk."""
    from tests.test_live_failures import descendants, processes

    temp = tmp_path / "tmp"
    temp.mkdir()
    notebook = ROOT / "notebooks" / "assignments" / "01-detection-latency.ipynb"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "emqsim", "grade", str(notebook)],
        cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + HANG
        while not (list(temp.iterdir()) and len(descendants(proc.pid)) >= 2):  # the copy and its processes
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "grading did not start"
            time.sleep(0.05)
        time.sleep(1.0)  # grading is under way
        family = descendants(proc.pid)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    word = "terminated" if signum == signal.SIGTERM else "interrupted"
    assert (proc.returncode, err.strip().splitlines()) == (
        143 if word == "terminated" else 130,
        [f"emqsim: {word}"],
    )
    time.sleep(0.2)
    assert not (family & set(processes())), "the notebook's processes outlived grading"
    assert list(temp.iterdir()) == [], "the private copy was left behind"


@pytest.mark.parametrize("command", ["sweep", "explore"])
def test_a_command_run_from_python_leaves_the_signal_handlers_as_it_found_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`emqsim.cli.main([...])` from a notebook: an interrupted command used to leave SIGINT and SIGTERM
    ignored, so the kernel's interrupt button no longer worked. (The `emqsim` program, main() without
    arguments, still ignores them on its way out: test_signals_end_the_sweep_and_keep_the_finished_rows.)"""
    import threading

    from emqsim.cli import main

    main_thread_only()
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    args = {
        "sweep": ["sweep", "--jobs", "2", "--replications", "200", "--quiet", "--json"],
        "explore": POOLED_COMMANDS["explore"],
    }[command]
    started = threading.Event()
    stop = threading.Event()

    def interrupt_once_the_command_holds_sigint() -> None:
        # A fixed delay raced the command's imports on a loaded machine (the SIGINT came before the command
        # had installed its handler, so pytest itself was interrupted): wait for the handler, then interrupt.
        while not stop.wait(0.01):
            if signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]:
                started.set()
                if not stop.wait(0.5):
                    os.kill(os.getpid(), signal.SIGINT)
                return

    watcher = threading.Thread(target=interrupt_once_the_command_holds_sigint, daemon=True)
    watcher.start()
    try:
        code = main(args)
    finally:
        stop.set()
        watcher.join()
    assert started.is_set(), "the command never installed a SIGINT handler"
    assert code == 130, capsys.readouterr().err
    assert {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} == before
    assert main(["fields"]) == 0
    assert {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} == before
