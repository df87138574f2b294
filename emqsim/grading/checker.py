"""`check_answers` in a student's kernel: a test cell's checks run in a process that re-runs the saved answer
cells (a fresh one per cell, one for several cells that forks at each, or the kernel's checker session that runs
each saved cell once and forks at each check), its verdict after a nonce."""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError
from emqsim.grading.answers import GRADING_ENV, _as_python
from emqsim.grading.guard import _changed, _snapshot
from emqsim.grading.notebooks import _meta, _read, is_autograded, is_locked, is_solution
from emqsim.grading.report import _one_line
from emqsim.processes import kill_group

# -- checks that run outside the student's namespace ----------------------------------------------------------
CHECK_TIMEOUT = 900.0
_CHECK_CALLS = ("check_answers", "_check_answers")


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one test cell's checks: passed or not, and a short message for the student."""

    ok: bool
    message: str


def check_answers(
    notebook: str, test_id: str, names: Sequence[str], checks: str, *, timeout: float = CHECK_TIMEOUT
) -> None:
    """Run a test cell's `checks` (Python source) on the answers called `names`, in a process of its own that
    re-runs the notebook's locked and answer cells from the saved file `notebook`: this kernel's checker session
    (`_CheckerSessions`), which runs each saved cell once and forks at each check, so a check gives the verdict
    a fresh process re-running the cells above it would give without re-running them. Raises AssertionError
    with the first failed check; prints a confirmation otherwise. Under `python -m emqsim grade` the grader runs
    the same checks itself, outside this kernel, and this call only says so."""
    if os.environ.get(GRADING_ENV) == "external":
        print(f"{test_id}: checked by the grader, outside this kernel")
        return
    path = Path.cwd() / notebook
    if not path.is_file():
        raise AssertionError(
            f"{notebook} is not in this folder: the checks read your saved answers from it (keep its name)"
        )
    for note in _unsaved_answers(path, test_id):
        print(note)
    result = _SESSIONS.check(path, test_id, names, checks, timeout=timeout)
    if not result.ok:
        raise AssertionError(result.message)
    print(result.message)


def _unsaved_answers(path: Path, test_id: str) -> list[str]:
    """Answer cells whose saved text differs from everything this kernel ran (the student forgot to save)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        ran = {source.strip() for source in shell.history_manager.input_hist_raw} if shell else None
    except Exception:
        return []
    if not ran:
        return []
    try:
        cells = _cells_before(_read(path), test_id)
    except ConfigError:
        return []
    return [
        f"note: the saved {label} differs from what you ran; save the notebook (Ctrl-S): the checks read the file"
        for label, source, solution in cells
        if solution and source.strip() not in ran
    ]


def _cells_before(nb: Any, test_id: str) -> list[tuple[str, str, bool]]:
    """(label, source, is answer) of the code cells the checks of `test_id` re-run: the locked cells and the
    answer cells above it. Other test cells and unmarked scratch cells are left out."""
    out: list[tuple[str, str, bool]] = []
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
        if meta.get("grade_id") == test_id:
            return out
        if cell.get("cell_type") != "code" or is_autograded(cell):
            continue
        if is_solution(cell) or is_locked(cell):
            out.append((f"cell {meta.get('grade_id') or index}", cell.source, is_solution(cell)))
    raise ConfigError(f"no test cell {test_id!r} in the notebook")


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill `proc`'s whole process group (it was started in a session of its own)."""
    kill_group(proc, wait=10)


def _checker_env() -> dict[str, str]:
    """The environment a checker process starts in: this process's, less the grading switch."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
    env.pop(GRADING_ENV, None)
    return env


def _run_checker(
    entry: str, request: dict[str, Any], cwd: Path, timeout: float
) -> tuple[list[Any], str, bool]:
    """Run `entry` (a function of this module) in a fresh process in its own process group (killed at the
    end), started in `cwd`, with `request` on stdin and a fresh nonce in it: (the verdicts it printed after
    the nonce, in order; ": <last stderr line>" or ""; whether it ran out of `timeout` s)."""
    nonce = os.urandom(16).hex()
    env = _checker_env()
    timed_out = False
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-c", f"from emqsim.grading.checker import {entry}; {entry}()"],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=True,
        )
        try:
            proc.stdin.write(json.dumps({**request, "nonce": nonce}).encode())  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
        out.seek(0)
        lines = out.read().decode(errors="replace").splitlines()
        verdicts = [json.loads(line[len(nonce) :]) for line in lines if line.startswith(nonce)]
        err.seek(0)
        errors = err.read().decode(errors="replace").strip().splitlines()
    return verdicts, (f": {_one_line(errors[-1])}" if errors else ""), timed_out


def run_checks(
    path: Path | str, test_id: str, names: Sequence[str], checks: str, *, timeout: float = CHECK_TIMEOUT
) -> CheckResult:
    """The verdict of `checks` on the answers `names` of the notebook file `path`, from a fresh process (in its
    own process group, killed at the end) started in the notebook's folder."""
    path = Path(path).resolve()
    request = {"notebook": str(path), "test_id": test_id, "names": list(names), "checks": checks}
    verdicts, tail, timed_out = _run_checker("_check_main", request, path.parent, timeout)
    if timed_out:
        return CheckResult(False, f"{test_id}: the checks did not finish within {timeout:g} s")
    if verdicts:
        return CheckResult(bool(verdicts[-1]["ok"]), str(verdicts[-1]["message"]))
    return CheckResult(False, f"{test_id}: the checks stopped without a verdict (did an answer exit?){tail}")


# -- the kernel's checker session: each saved cell run once, a fork per check ------------------------------------
_END = "end"  # a session's last line for a request: nothing more comes for it
_SESSION_GRACE = 5.0  # s a session has, past a request's time, to stop a hung check itself and say so
_RESTART = "restart"  # the saved cells above the test cell are not the ones the session ran: start a new one


class _CheckerSession:
    """One `_session_main` process for one notebook file, in a session of its own: requests go to its stdin,
    one JSON line each with a fresh nonce; its verdicts and end marks come back on its stdout after the nonce."""

    def __init__(self, path: Path) -> None:
        self.env = env = _checker_env()
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the session
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", "from emqsim.grading.checker import _session_main; _session_main()"],
            cwd=path.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=env,
            start_new_session=True,
        )
        self.pending = b""

    def ask(self, request: dict[str, Any], timeout: float) -> tuple[list[dict[str, Any]], str, str]:
        """Send `request`; (its verdicts, ": <last stderr line>" or "", how it ended: "end", "restart", "exit"
        (the process is gone) or "timeout" (no end within `timeout` s))."""
        nonce = os.urandom(16).hex()
        self.err.seek(0, os.SEEK_END)
        err_at = self.err.tell()
        found: list[dict[str, Any]] = []
        ended = "exit"
        try:
            self.proc.stdin.write((json.dumps({**request, "nonce": nonce}) + "\n").encode())  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            return found, "", ended
        out = self.proc.stdout.fileno()  # type: ignore[union-attr]
        limit = time.monotonic() + timeout + _SESSION_GRACE  # a hung check is the session's to stop
        while ended == "exit":
            *lines, self.pending = self.pending.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if line.startswith(nonce):
                    said = json.loads(line[len(nonce) :])
                    if _END in said or _RESTART in said:
                        ended = _RESTART if _RESTART in said else _END
                        break
                    found.append(said)
            else:
                left = limit - time.monotonic()
                if left <= 0:
                    ended = "timeout"
                elif select.select([out], [], [], left)[0]:
                    chunk = os.read(out, 65536)
                    if not chunk:
                        break  # the process is gone
                    self.pending += chunk
        self.err.seek(err_at)
        errors = self.err.read().decode(errors="replace").strip().splitlines()
        return found, (f": {_one_line(errors[-1])}" if errors else ""), ended

    def close(self) -> None:
        """Kill the session's whole process group."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        kill_group(self.proc, wait=10)
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.err.close()


class _CheckerSessions:
    """This kernel's checker sessions, one per notebook file, started on the first check and killed when the
    kernel exits (a session also ends by itself when this process is gone: its stdin closes). A session that
    ran out of time, exited or ran other saved cells is replaced by a new one."""

    def __init__(self) -> None:
        self.sessions: dict[Path, _CheckerSession] = {}
        self.lock = threading.Lock()
        self.closing = False

    def check(
        self,
        path: Path | str,
        test_id: str,
        names: Sequence[str],
        checks: str,
        *,
        timeout: float = CHECK_TIMEOUT,
    ) -> CheckResult:
        """`run_checks`'s verdict, from the session of the notebook file `path`."""
        path = Path(path).resolve()
        request = {
            "notebook": str(path),
            "test_id": test_id,
            "names": list(names),
            "checks": checks,
            "timeout": timeout,
        }
        with self.lock:
            for _ in range(2):  # a second time only after a restart, in a new session
                session = self.sessions.get(path)
                if session is not None and session.env != _checker_env():
                    # the kernel's environment changed since the session started (a fresh process would
                    # start in the new one): start over in it
                    self.sessions.pop(path).close()
                    session = None
                if session is None:
                    if not self.closing:
                        import atexit

                        atexit.register(self.close_all)
                        self.closing = True
                    session = self.sessions[path] = _CheckerSession(path)
                verdicts, tail, ended = session.ask(request, timeout)
                if ended != _END:
                    self.sessions.pop(path).close()
                if ended != _RESTART:
                    break
        if ended == "timeout":
            return CheckResult(False, f"{test_id}: the checks did not finish within {timeout:g} s")
        if verdicts:
            return CheckResult(bool(verdicts[-1]["ok"]), str(verdicts[-1]["message"]))
        return CheckResult(
            False, f"{test_id}: the checks stopped without a verdict (did an answer exit?){tail}"
        )

    def close_all(self) -> None:
        """Kill every session (at the kernel's exit)."""
        with self.lock:
            while self.sessions:
                self.sessions.popitem()[1].close()


_SESSIONS = _CheckerSessions()


def _session_main() -> None:
    """A checker session's process: for each request on stdin, run the saved locked and answer cells above the
    test cell that it has not run yet (in one namespace, in order, each cell once), then fork a child that does
    what `_check_main` does once those cells have run, and print its verdict and an end mark after the request's
    nonce. If the saved cells above the test cell are not, as a prefix, the ones it already ran (the student
    edited one, or checks a cell above the last one checked), it says so and exits: the kernel starts a new
    session. Everything a verdict rests on is taken before any answer runs, as in `_checks_in_order_main`."""
    import warnings

    from emqsim.grading.checks import CONTEXT

    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    verdict_fd = os.dup(1)
    sink = open(os.devnull, "r+")  # noqa: SIM115 - the answers' own input and output: nowhere
    os.dup2(sink.fileno(), 0)
    os.dup2(sink.fileno(), 1)
    sys.stdin = sys.stdout = sink
    write, dumps, loads, readline = os.write, json.dumps, json.loads, requests.readline
    leave, fork, waitpid, kill = os._exit, os.fork, os.waitpid, os.kill
    monotonic, sleep, nohang, sigkill = time.monotonic, time.sleep, os.WNOHANG, signal.SIGKILL
    tools = _check_tools()
    context_before = list(CONTEXT.items())
    snap: dict[tuple[str, str], Any] | None = None
    namespace: dict[str, Any] = {"__name__": "__main__", "get_ipython": _NoShell}
    ran: list[tuple[str, str]] = []  # (label, source) of every cell run, in order
    answers: dict[str, str] = {}
    raised: tuple[str, BaseException] | None = None  # the first locked or answer cell that raised
    warnings.simplefilter("ignore")
    while True:
        line = readline()
        if not line:
            leave(0)
        request = loads(line)
        limit = monotonic() + float(request["timeout"])  # the cells this request runs and its checks
        nonce = request["nonce"]

        def say(verdict: dict[str, Any], nonce: str = nonce) -> None:
            write(verdict_fd, (nonce + dumps(verdict) + "\n").encode())

        test_id = request["test_id"]
        try:
            cells = _cells_before(_read(request["notebook"]), test_id)
            if snap is None:
                snap = _snapshot()
        except Exception as exc:
            say(
                {
                    "ok": False,
                    "message": _one_line(
                        f"{test_id}: cannot prepare the checks: {type(exc).__name__}: {exc}", 300
                    ),
                }
            )
            say({_END: True})
            continue
        if [(label, source) for label, source, _ in cells[: len(ran)]] != ran:
            say({_RESTART: True})
            leave(0)
        for label, source, answer in cells[len(ran) :]:
            if raised is not None:
                break
            ran.append((label, source))
            if answer:
                answers[label] = source
            try:
                exec(compile(_as_python(source), f"<{label}>", "exec"), namespace)
            except BaseException as exc:  # SystemExit too: an answer may not end the checks
                raised = (label, exc)
        if raised is not None:
            label, error = raised
            say(
                {
                    "ok": False,
                    "message": _one_line(f"{test_id}: {label} raises {type(error).__name__}: {error}", 300),
                }
            )
            say({_END: True})
            continue
        pid = fork()
        if pid == 0:  # the child: its verdict, then out (never back into this loop)
            try:
                expected = tools.show_answers(snap, CONTEXT, context_before, answers)
                tools.child(
                    request,
                    namespace,
                    expected,
                    lambda ok, message: say({"ok": ok, "message": message}),
                    tools,
                )
            finally:
                leave(0)
        while waitpid(pid, nohang) == (0, 0):
            if monotonic() > limit:
                kill(pid, sigkill)
                waitpid(pid, 0)
                say(
                    {
                        "ok": False,
                        "message": f"{test_id}: the checks did not finish within {request['timeout']:g} s",
                    }
                )
                break
            sleep(0.002)
        say({_END: True})


_GONE = object()


class _NoShell:
    """`get_ipython()` inside the checks: magics and shell commands in answer cells do nothing there."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _checker_start() -> tuple[dict[str, Any], Callable[[dict[str, Any]], None]]:
    """A checker process's first steps, before any answer runs: read the request from stdin, send the answers'
    own output nowhere, and return the request with the function that prints a verdict after the nonce (its
    tools taken now, so an answer that replaces `json.dumps` or `os.write` cannot forge one)."""
    request = json.loads(sys.stdin.read())
    nonce = request.pop("nonce")
    verdict_fd = os.dup(1)
    sink = open(os.devnull, "w")  # noqa: SIM115 - the answers' own output goes nowhere
    os.dup2(sink.fileno(), 1)
    sys.stdout = sink
    write, dumps = os.write, json.dumps

    def say(verdict: dict[str, Any]) -> None:
        write(verdict_fd, (nonce + dumps(verdict) + "\n").encode())

    return request, say


def _check_main() -> None:
    """The checks' process: read the request from stdin, re-run the locked and answer cells, check that they
    left the libraries alone, run the checks on the named answers, and print the verdict after the nonce."""
    import warnings

    request, say = _checker_start()
    test_id = request["test_id"]
    leave = os._exit  # taken before any answer can replace it
    tools = _check_tools()

    def verdict(ok: bool, message: str) -> None:
        say({"ok": ok, "message": message})
        leave(0)

    try:
        cells = _cells_before(_read(request["notebook"]), test_id)
        from emqsim.grading.checks import CONTEXT

        CONTEXT["answers"] = {
            label: source for label, source, answer in cells if answer
        }  # before the snapshot
        snap = _snapshot()
    except Exception as exc:
        verdict(False, _one_line(f"{test_id}: cannot prepare the checks: {type(exc).__name__}: {exc}", 300))
    warnings.simplefilter("ignore")
    namespace: dict[str, Any] = {"__name__": "__main__", "get_ipython": _NoShell}
    for label, source, _ in cells:
        try:
            exec(compile(_as_python(source), f"<{label}>", "exec"), namespace)
        except BaseException as exc:  # SystemExit too: an answer may not end the checks
            verdict(False, _one_line(f"{test_id}: {label} raises {type(exc).__name__}: {exc}", 300))
    tools.child(request, namespace, snap, verdict, tools)


def run_checks_in_order(
    path: Path | str, calls: Sequence[tuple[str, Sequence[str], str]], *, timeout: float = CHECK_TIMEOUT
) -> dict[str, CheckResult]:
    """The verdicts of several test cells' checks (test id, answer names, checks), like `run_checks` for each,
    from one fresh process: it runs the locked and answer cells once, top to bottom, and at each test cell
    forks a child that runs that cell's checks. A child starts from exactly the state a fresh process re-running
    the cells above the test cell would reach, so the verdicts are `run_checks`'s, without re-running the cells
    (and re-importing the libraries) once per test cell. `timeout` bounds each test cell's checks."""
    path = Path(path).resolve()
    if not calls:
        return {}
    tests = [{"test_id": t, "names": list(n), "checks": c} for t, n, c in calls]
    request = {"notebook": str(path), "tests": tests, "timeout": timeout}
    # each test cell's checks, and the cells once
    found, tail, timed_out = _run_checker(
        "_checks_in_order_main", request, path.parent, timeout * (len(calls) + 1)
    )
    verdicts: dict[str, CheckResult] = {}
    for v in found:
        verdicts.setdefault(str(v["test_id"]), CheckResult(bool(v["ok"]), str(v["message"])))
    for test_id, _, _ in calls:
        if test_id not in verdicts:
            verdicts[test_id] = CheckResult(
                False,
                f"{test_id}: the checks did not finish within {timeout:g} s"
                if timed_out
                else f"{test_id}: the checks stopped without a verdict (did an answer exit?){tail}",
            )
    return verdicts


def _checks_in_order_main() -> None:
    """`run_checks_in_order`'s process: run the locked and answer cells once, in order, and fork a child at each
    requested test cell that does what `_check_main` does once the cells above it have run."""
    import warnings

    request, say = _checker_start()
    # taken before any answer can replace them
    leave, fork, waitpid, kill = os._exit, os.fork, os.waitpid, os.kill
    monotonic, sleep, nohang, sigkill = time.monotonic, time.sleep, os.WNOHANG, signal.SIGKILL
    tools = _check_tools()
    timeout = float(request["timeout"])

    def emit(test_id: str, ok: bool, message: str) -> None:
        say({"test_id": test_id, "ok": ok, "message": message})

    todo = {t["test_id"]: t for t in request["tests"]}
    from emqsim.grading.checks import CONTEXT

    context_before = list(CONTEXT.items())
    answers: dict[str, str] = {}  # the answer cells run so far, as the checks' CONTEXT shows them
    try:
        nb = _read(request["notebook"])
        snap = _snapshot()
    except Exception as problem:
        for name in todo:
            why = f"{type(problem).__name__}: {problem}"
            emit(name, False, _one_line(f"{name}: cannot prepare the checks: {why}", 300))
        leave(0)
    warnings.simplefilter("ignore")
    namespace: dict[str, Any] = {"__name__": "__main__", "get_ipython": _NoShell}
    raised: tuple[str, BaseException] | None = None  # the first locked or answer cell that raised
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
        test_id = str(meta.get("grade_id") or "")
        if test_id in todo:
            test = todo.pop(test_id)
            if raised is not None:
                label, error = raised
                why = f"{type(error).__name__}: {error}"
                emit(test_id, False, _one_line(f"{test_id}: {label} raises {why}", 300))
            else:
                pid = fork()
                if pid == 0:  # the child: its verdict, then out (never back into this loop)

                    def verdict(ok: bool, message: str, name: str = test_id) -> None:
                        emit(name, ok, message)

                    try:
                        expected = tools.show_answers(snap, CONTEXT, context_before, answers)
                        tools.child(test, namespace, expected, verdict, tools)
                    finally:
                        leave(0)
                limit = monotonic() + timeout
                while waitpid(pid, nohang) == (0, 0):
                    if monotonic() > limit:
                        kill(pid, sigkill)
                        waitpid(pid, 0)
                        emit(test_id, False, f"{test_id}: the checks did not finish within {timeout:g} s")
                        break
                    sleep(0.005)
            if not todo:
                break
            continue
        if raised is not None or cell.get("cell_type") != "code" or is_autograded(cell):
            continue
        if is_solution(cell) or is_locked(cell):
            label = f"cell {test_id or index}"
            if is_solution(cell):
                answers[label] = cell.source
            try:
                exec(compile(_as_python(cell.source), f"<{label}>", "exec"), namespace)
            except BaseException as exc:  # SystemExit too: an answer may not end the checks
                raised = (label, exc)
    for test_id in todo:
        emit(test_id, False, f"{test_id}: no such test cell in the notebook")
    leave(0)


@dataclass(frozen=True)
class _CheckTools:
    """What a verdict rests on, taken before any answer runs: an answer may replace the attributes these are
    looked up under (`emqsim.grading.guard._changed`, `contextlib.redirect_stdout`, ...). `changed` runs first and
    refuses every change to the snapshot; the others are not in it, so the checks use the originals."""

    changed: Callable[[dict[tuple[str, str], Any]], str | None]
    one_line: Callable[..., str]
    string_io: type[io.StringIO]
    redirect_stdout: Callable[[Any], Any]
    extract_tb: Callable[[Any], Any]
    child: Callable[..., None]
    show_answers: Callable[..., dict[tuple[str, str], Any]]


def _check_tools() -> _CheckTools:
    import traceback

    return _CheckTools(
        _changed,
        _one_line,
        io.StringIO,
        contextlib.redirect_stdout,
        traceback.extract_tb,
        _checks_child,
        _show_answers,
    )


def _show_answers(
    snap: dict[tuple[str, str], Any],
    context: dict[str, Any],
    before: list[tuple[str, Any]],
    answers: dict[str, str],
) -> dict[tuple[str, str], Any]:
    """In a check's child of a process that took its snapshot before the answer cells ran: put the answer cells
    above the test cell in the checks' `context` (what `_check_main` does before its snapshot) and return the
    snapshot with them in it; if the answers changed `context` (`before`: its items then), leave both as they
    are, so the guard reports the change."""
    if len(context) != len(before) or any(context.get(key, _GONE) is not value for key, value in before):
        return snap
    context["answers"] = dict(answers)
    return {**snap, ("emqsim.grading.checks.CONTEXT", "*items*"): list(context.items())}


def _checks_child(
    test: dict[str, Any],
    namespace: dict[str, Any],
    snap: dict[tuple[str, str], Any],
    verdict: Callable[[bool, str], None],
    tools: _CheckTools,
) -> None:
    """Once the cells above a test cell ran: check that the answers left the libraries alone and define the
    names, then run the checks on them, and give the verdict (with `tools` only, see `_CheckTools`)."""
    test_id = test["test_id"]
    changed = tools.changed(snap)
    if changed is not None:
        return verdict(
            False, f"{test_id}: your answer cells change {changed}; answers may not modify Python or emqsim"
        )
    missing = [name for name in test["names"] if name not in namespace]
    if missing:
        return verdict(
            False, f"{test_id}: {', '.join(missing)} not defined by the answer cells (run top to bottom)"
        )
    scope = {"__name__": "__checks__", **{name: namespace[name] for name in test["names"]}}
    printed = tools.string_io()
    try:
        with tools.redirect_stdout(printed):
            exec(compile(test["checks"], f"<{test_id} checks>", "exec"), scope)
    except BaseException as exc:
        frames = [f for f in tools.extract_tb(exc.__traceback__) if f.filename.endswith("checks>")]
        where = f" (check line {frames[-1].lineno})" if frames else ""
        text = str(exc) if isinstance(exc, AssertionError) and str(exc) else f"{type(exc).__name__}: {exc}"
        return verdict(False, tools.one_line(f"{test_id}: {text}{where}", 400))
    shown = printed.getvalue().strip().splitlines()[:12]
    return verdict(True, "\n".join([*shown, f"{test_id}: all checks pass"]))
