"""Issue 30, "a user detector that blocks is stopped with a clear error": a `suspect()` that never returns
(sleeps, spins, catches Exception around its loop), serial, in a thread, in a process pool and in every
simulating command, ends with one `DetectorBlocked` (a TimeoutError and a ConfigError: one line, exit status 2),
nothing written; Ctrl-C still stops a run blocked in a detector (emqsim/watchdog.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from emqsim import Detector, standard
from emqsim.cli import main
from emqsim.engine import simulate
from emqsim.errors import ConfigError
from emqsim.watchdog import DetectorBlocked

ROOT = Path(__file__).resolve().parent.parent
BLOCKING = """
import time
from emqsim import Detector


class Sleeper(Detector):
    answer_within = 0.3

    def suspect(self, job, now):
        time.sleep(1e9)
        return False


class Spinner(Detector):
    answer_within = 0.3

    def suspect(self, job, now):
        try:
            while True:
                pass
        except Exception:  # a detector's own handler does not swallow the stop
            return False


class Patient(Detector):
    answer_within = 600.0

    def suspect(self, job, now):
        time.sleep(1e9)
        return False
"""


class Sleeper(Detector):
    answer_within = 0.2

    def suspect(self, job: str, now: float) -> bool:
        time.sleep(1e9)
        return False


class Spinner(Detector):
    answer_within = 0.2

    def suspect(self, job: str, now: float) -> bool:
        while True:
            try:
                while True:
                    pass
            except Exception:
                continue


def test_a_blocked_suspect_is_stopped_in_the_main_thread_and_in_another():
    """Main thread: a SIGUSR1 from the watcher ends even a sleep. Another thread (a Dask worker's): a spin is
    stopped by an asynchronous exception; a sleep is named when it returns (answer_within's check)."""
    ctrl_c = signal.getsignal(signal.SIGINT)  # Python's own, or SIG_IGN when started in the background
    for detector in (Sleeper(), Spinner()):
        started = time.monotonic()
        with pytest.raises(DetectorBlocked, match=r"\.suspect\('0', .*must answer within 0\.2 s") as caught:
            simulate(standard("fast-dead"), detector)
        assert time.monotonic() - started < 5
        assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, ConfigError)
    assert signal.getsignal(signal.SIGINT) is ctrl_c  # Ctrl-C's handler is left alone

    class ShortSleeper(Detector):
        answer_within = 0.2

        def suspect(self, job: str, now: float) -> bool:
            time.sleep(0.6)
            return False

    errors: list[BaseException] = []

    def in_thread(detector: Detector) -> None:
        try:
            simulate(standard("fast-dead"), detector)
        except BaseException as exc:  # noqa: BLE001 - what the thread ended with is the result
            errors.append(exc)

    threads = [
        threading.Thread(target=in_thread, args=(d,), daemon=True) for d in (Spinner(), ShortSleeper())
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not any(t.is_alive() for t in threads)
    assert [type(e) for e in errors] == [DetectorBlocked, DetectorBlocked], errors


def test_a_blocked_detector_is_one_line_and_exit_2_from_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blocking.py").write_text(BLOCKING)
    for command in (["run", "--replications", "1"], ["timeline"], ["compare", "--replications", "1"]):
        for name in ("Sleeper", "Spinner"):
            code = main([*command, "--quiet", "--policy", f"blocking.py:{name}"] if command[0] != "timeline"
                        else [*command, "--policy", f"blocking.py:{name}"])  # fmt: skip
            out, err = capsys.readouterr()
            assert code == 2 and len(err.strip().splitlines()) == 1, (command, name, err)
            assert (
                f"error: {name}.suspect(" in err
                and "must answer within 0.3 s" in err
                and "Traceback" not in err
            )


@pytest.mark.slow  # process pools in five commands, and a subprocess interrupted
def test_a_blocked_detector_in_pool_workers_and_ctrl_c(tmp_path):
    """sweep, explore and tune on a process pool (the worker's watcher stops the call; the error comes back as
    the command's one line), nothing written; and a Ctrl-C to a run blocked in a detector is `interrupted`."""
    (tmp_path / "blocking.py").write_text(BLOCKING)
    (tmp_path / "old.csv").write_text("kept\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    tune = ["tune", "--lease", "10", "--scan", "5", "--beat-ratio", "3", "--timeout", "none", "--verify", "0",
            "--max-false-reclaims", "0.5", "--min-replications", "2", "--max-replications", "3", "--jobs", "2"]  # fmt: skip
    commands = [
        ["sweep", "--scenario", "fast-dead", "--replications", "4", "--jobs", "2", "--out", "old.csv"],
        ["explore", "--fault", "crash,offset=0:1", "--jobs", "2"],
        tune,
    ]
    for command in commands:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "emqsim", *command, "--quiet", "--policy", "blocking.py:Spinner"],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (command, done.stderr)
        assert "Spinner.suspect(" in done.stderr and "must answer within 0.3 s" in done.stderr
        assert time.monotonic() - started < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocking.py", "old.csv"]
    assert (tmp_path / "old.csv").read_text() == "kept\n"
    proc = subprocess.Popen(
        [sys.executable, "-m", "emqsim", "run", "--scenario", "fast-dead", "--replications", "1", "--policy",
         "blocking.py:Patient"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    time.sleep(3)  # imported, and inside the sleeping suspect()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip() == "emqsim: interrupted", err
