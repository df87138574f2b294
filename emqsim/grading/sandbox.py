"""The sandbox a submission runs in: a private copy of its folder, resource limits, a scrubbed environment, a
socket folder of its own, and every process it started killed at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError
from emqsim.grading.answers import STUDENT_ENV

GRADE_TIME_LIMIT = 3600.0
FOLDER_LIMIT_BYTES = 200 * 1024 * 1024
_IGNORED = shutil.ignore_patterns(".git", ".ipynb_checkpoints", "__pycache__", ".venv", "node_modules")


def _copy_folder(folder: Path, dest: Path) -> None:
    """A private copy of the submission's folder (the notebook may read files next to it)."""
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not _IGNORED(root, [d])]
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
        if total > FOLDER_LIMIT_BYTES:
            raise ConfigError(
                f"the folder {folder.name!r} holds more than {FOLDER_LIMIT_BYTES >> 20} MB; put the notebook in a "
                "folder of its own and grade it there"
            )
    shutil.copytree(folder, dest, ignore=_IGNORED, symlinks=True)


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (empty where there is no /proc)."""
    tree: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read().decode(errors="replace")
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int, *, include_root: bool = True) -> None:
    """SIGKILL `pid`'s descendants (and `pid`), repeatedly until none are left: nothing outlives grading."""
    for _ in range(20):
        victims = _descendants(pid) + ([pid] if include_root else [])
        alive = False
        for victim in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGKILL)
                alive = True
        if not alive:
            return
        time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def _limit_resources(time_limit: float) -> None:
    """Resource limits for the executing process and the kernel it starts, where the OS has them."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    limits = {
        "RLIMIT_CORE": 0,
        "RLIMIT_FSIZE": 1 << 30,  # no single file above 1 GiB
        "RLIMIT_AS": 8 << 30,  # 8 GiB of address space
        "RLIMIT_CPU": int(time_limit) + 60,
    }
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        with contextlib.suppress(ValueError, OSError):
            _, hard = resource.getrlimit(which)
            resource.setrlimit(which, (value if hard == resource.RLIM_INFINITY else min(value, hard), hard))


SOCKET_PATH_MAX = 100  # bytes: an AF_UNIX path holds at most 107 on Linux and 103 on macOS


def _socket_folder(private: Path, cleanup: contextlib.ExitStack) -> Path:
    """A folder of the run's own (mode 700) for the grader's socket, whose path fits AF_UNIX's limit: inside
    the run's private folder when that is short enough, else a new one under /tmp or /var/tmp, removed with
    the run (a long TMPDIR, as under pytest, made `grade` fail with "AF_UNIX path too long")."""
    inside = private / "sock"
    if len(os.fsencode(inside / "grader")) <= SOCKET_PATH_MAX:
        inside.mkdir(mode=0o700)
        return inside
    for base in ("/tmp", "/var/tmp"):
        try:
            short = Path(tempfile.mkdtemp(prefix="emqsim-", dir=base))
        except OSError:
            continue
        cleanup.callback(shutil.rmtree, short, True)
        if len(os.fsencode(short / "grader")) <= SOCKET_PATH_MAX:
            return short
    raise ConfigError(
        f"the temporary folder's path is too long for the grader's socket ({private}); "
        "set TMPDIR to a short folder such as /tmp"
    )


def _accept(listener: socket.socket, proc: subprocess.Popen[Any], deadline: float, nonce: str) -> Any:
    """The kernel's connection and the pid it gave, once it said the nonce; None if the run ended (or the time
    ran out) first. The pid is only used after checking that it is one of the run's own processes."""
    listener.settimeout(0.2)
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        from emqsim.grading.wire import WireError, receive

        try:
            connection.settimeout(10)
            hello = receive(connection)
        except (OSError, EOFError, WireError):
            connection.close()
            continue
        if hello.get("hello") == nonce and type(hello.get("pid")) is int:
            return connection, hello["pid"]
        connection.close()
    return None


_SANDBOX_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "VIRTUAL_ENV", "SYSTEMROOT", "PYTHONPATH")


def sandbox_env(home: Path, student: str) -> dict[str, str]:
    """The environment of the student's kernel: a few system variables, a private HOME, and the student's own
    id (for the notebook's own seeds; the grader's checks take it from the grader, never from here). No grader
    variables, no credentials of the grading user."""
    env = {k: os.environ[k] for k in _SANDBOX_KEEP if k in os.environ}
    env.update(
        {
            "HOME": str(home),
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(home / ".matplotlib"),
            "IPYTHONDIR": str(home / ".ipython"),
            "JUPYTER_RUNTIME_DIR": str(home / ".jupyter-runtime"),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            STUDENT_ENV: student,
        }
    )
    return env


FONT_CACHE_MAX_BYTES = 16 * 1024 * 1024


def _font_cache_dir() -> Path:
    """Matplotlib's cache folder for this process (`matplotlib.get_cachedir()`'s rule), found without importing
    Matplotlib: MPLCONFIGDIR, else XDG_CACHE_HOME or ~/.cache, then matplotlib/."""
    configured = os.environ.get("MPLCONFIGDIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "matplotlib"


def _seed_font_cache(home: Path) -> None:
    """Copy the grader's Matplotlib font list (`fontlist-v*.json`: the system's font files and their
    properties) into the kernel's private MPLCONFIGDIR, so the kernel does not scan every font again (about
    0.2 s of CPU per graded notebook). It holds nothing of the grader's but font paths; the kernel's copy is its
    own. Without one, the kernel builds its own, as before."""
    with contextlib.suppress(OSError):
        found = sorted(_font_cache_dir().glob("fontlist-v*.json"))
        if not found:
            return
        folder = home / ".matplotlib"
        folder.mkdir(exist_ok=True)
        for cached in found:
            if cached.is_file() and cached.stat().st_size <= FONT_CACHE_MAX_BYTES:
                shutil.copyfile(cached, folder / cached.name)


def _not_traceable() -> None:
    """Other processes of the same user (the student's kernel) may not ptrace this one or read its memory."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
