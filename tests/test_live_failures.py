"""Live mode when Redis fails mid-run: the private redis-server is stopped (SIGSTOP) or killed (SIGKILL).

The run must end with one line on stderr saying what happened (no traceback, no hang: every Redis call has a
socket timeout), and leave nothing behind: no redis-server, no worker process, no temporary folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HANG = 90  # seconds: only a hang reaches it; nothing here asserts how fast anything is

pytestmark = [pytest.mark.redis, pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")]


def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command name) for every live process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            found[int(entry)] = (int(fields[1]), fields[0], name)
    return found


def descendants(root: int) -> set[int]:
    table = processes()
    family, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in family} - family
        family |= more
        grew = bool(more)
    return family - {root}


def private_redis(root: int) -> int | None:
    table = processes()
    for pid in descendants(root):
        if pid in table and table[pid][2].startswith("redis-server"):
            return pid
    return None


def start_live(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """`emqsim live` on slow-alive (45 s real at this scale), its temporary folders in tmp_path; returns it
    and its private redis-server's pid once that and the worker processes run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "emqsim", "live", "--scenario", "slow-alive", "--time-scale", "0.05"],
        env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + HANG
        server = None
        while server is None or len(descendants(proc.pid)) < 3:  # redis-server and the worker processes
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the live run did not start"
            server = private_redis(proc.pid)
            time.sleep(0.1)
        time.sleep(1.0)  # the run is under way
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc, server


def ended_in_one_line_leaving_nothing(
    proc: subprocess.Popen[str], family: set[int], tmp_path: Path, code: int
) -> str:
    """Wait for the run to end; check its exit status, its one line on stderr and that nothing is left."""
    try:
        out, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    time.sleep(0.2)
    alive = set(processes())
    assert not (family & alive), f"left behind: {family & alive}"
    assert list(tmp_path.iterdir()) == [], "a temporary folder was left behind"
    return lines[0]


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["redis-stopped", "redis-killed"])
def test_a_redis_failure_mid_run_ends_in_one_line_and_leaves_nothing(
    need_redis, tmp_path: Path, fault
) -> None:
    proc, server = start_live(tmp_path)
    family = descendants(proc.pid)
    os.kill(server, fault)
    line = ended_in_one_line_leaving_nothing(proc, family, tmp_path, 1)
    assert ("stopped answering" if fault == signal.SIGSTOP else "died") in line


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_mid_run_ends_in_one_line_and_leaves_nothing(
    need_redis, tmp_path: Path, signum
) -> None:
    """A SIGTERM used to kill the live run outright: its temporary folders stayed behind."""
    proc, _ = start_live(tmp_path)
    family = descendants(proc.pid)
    proc.send_signal(signum)
    code, word = (143, "terminated") if signum == signal.SIGTERM else (130, "interrupted")
    assert ended_in_one_line_leaving_nothing(proc, family, tmp_path, code) == f"emqsim: {word}"


def test_a_write_redis_refuses_is_one_line_with_redis_s_words(need_redis, capsys):
    """A worker whose command Redis refuses (here READONLY: the server is a replica, as a demoted primary is
    after a failover; under maxmemory it would be OOM) ends the run with one line that says what Redis said,
    not a bare "worker N failed"."""
    from emqsim.cli import main
    from emqsim.live.server import PrivateRedis

    server = PrivateRedis().start()
    try:
        server.client().execute_command("REPLICAOF", "127.0.0.1", "1")  # read-only from now on
        code = main(["live", "--scenario", "fast-dead", "--redis", server.url])
    finally:
        server.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert "Redis refused its command" in err[0] and "read only replica" in err[0], err
