"""Running a submission: the notebook executed in a kernel (nbclient), in an isolated process that `grade` starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError
from emqsim.grading.checker import _kill_group
from emqsim.grading.notebooks import KERNEL_START_TRIES, defer_iri_grammar
from emqsim.grading.report import _one_line
from emqsim.grading.sandbox import _accept, _descendants, _limit_resources, _socket_folder, kill_tree


def _execute(
    nb: Any,
    folder: Path,
    timeout: float,
    skip: frozenset[int] = frozenset(),
    agent: dict[str, Any] | None = None,
) -> tuple[dict[int, str], str | None]:
    """Run every cell in a fresh python3 kernel started in `folder`; errors do not stop the run. Returns the
    reply error of each cell that failed without an error output (timeouts), and why the run stopped early."""
    defer_iri_grammar()
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    reply_errors: dict[int, str] = {}

    def on_executed(cell: Any, cell_index: int, execute_reply: dict[str, Any]) -> None:
        content = execute_reply.get("content", {})
        if content.get("status") == "error":
            reply_errors[cell_index] = _one_line(
                f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"
            )

    seconds = max(1, round(timeout))
    stopped = None
    failure: Exception | None = None
    # A kernel can fail to start on a busy machine (say, a port taken in the meantime): try again.
    for _ in range(KERNEL_START_TRIES):
        client = NotebookClient(
            nb,
            timeout=seconds,
            startup_timeout=120,
            kernel_name="python3",
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={
                "ename": "CellTimeoutError",
                "evalue": f"no reply within {seconds} s",
                "traceback": [],
            },
            record_timing=False,
            resources={"metadata": {"path": str(folder)}},
        )
        client.on_cell_executed = on_executed
        started = False
        try:
            # The kernel's own stderr (start-up warnings) is not the notebook's: cell output comes over iopub.
            with client.setup_kernel(stderr=subprocess.DEVNULL):
                started = True
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code" or index in skip:
                        continue
                    try:
                        client.execute_cell(cell, index)
                    except DeadKernelError:
                        stopped = f"the kernel died in cell {index}; the cells after it did not run"
                        break
                    except Exception as exc:  # anything nbclient raises for one cell fails that cell only
                        reply_errors[index] = _one_line(f"{type(exc).__name__}: {exc}")
                if agent is not None and stopped is None:
                    # the last cell: answer the trusted grader's requests until it is done
                    import nbformat

                    serve = nbformat.v4.new_code_cell(
                        "__import__('emqsim.grading.agent', fromlist=['serve']).serve("
                        f"{agent['socket']!r}, {agent['nonce']!r})"
                    )
                    client.timeout = max(1, round(agent["timeout"]))
                    with contextlib.suppress(Exception):
                        client.execute_cell(serve, len(nb.cells))
            return reply_errors, stopped
        except Exception as exc:
            if started:  # the kernel died while shutting down: the cells ran
                return reply_errors, stopped
            failure = exc
    message = _one_line(f"{type(failure).__name__}: {failure}")
    raise ConfigError(f"cannot start a python3 kernel ({KERNEL_START_TRIES} tries): {message}")


def _execute_main() -> None:
    """The executing process `grade` starts: adopt orphans, limit resources, run the notebook, write it back,
    kill every process the notebook left behind."""
    defer_iri_grammar()
    import nbformat

    request = json.loads(Path(sys.argv[1]).read_text())
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the kernel stay ours
    _limit_resources(request["time_limit"])
    nb = nbformat.read(request["notebook"], as_version=4)
    try:
        reply_errors, stopped = _execute(
            nb,
            Path(request["folder"]),
            request["timeout"],
            frozenset(request.get("skip", [])),
            request.get("agent"),
        )
        result = {"reply_errors": reply_errors, "stopped": stopped}
    except ConfigError as exc:
        result = {"error": str(exc)}
    finally:
        kill_tree(os.getpid(), include_root=False)
    nbformat.write(nb, request["out"])
    Path(request["result"]).write_text(json.dumps(result))


def _execute_isolated(
    target: Path,
    timeout: float,
    time_limit: float,
    env: dict[str, str],
    *,
    skip: frozenset[int] = frozenset(),
    serve: Callable[[socket.socket, float, Callable[[], bool]], Any] | None = None,
) -> tuple[Any, dict[int, str], str | None, Any]:
    """Run the notebook `target` (in its private folder) in a child process with a wall-clock limit. With
    `serve`, the kernel ends by connecting to a socket of ours; `serve(connection, deadline, interrupt)` then runs here,
    in this process, while the kernel answers it. Returns the executed notebook, the cells' reply errors, why
    the run stopped early, and what `serve` returned (None if the kernel never connected)."""
    defer_iri_grammar()
    import nbformat

    with tempfile.TemporaryDirectory(prefix="emqsim-run-") as private, contextlib.ExitStack() as cleanup:
        request = Path(private) / "request.json"
        out, result = Path(private) / "executed.ipynb", Path(private) / "result.json"
        deadline = time.monotonic() + time_limit
        listener = nonce = None
        payload: dict[str, Any] = {
            "notebook": str(target),
            "folder": str(target.parent),
            "timeout": timeout,
            "time_limit": time_limit,
            "out": str(out),
            "result": str(result),
            "skip": sorted(skip),
        }
        if serve is not None:
            sockets = _socket_folder(Path(private), cleanup)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(sockets / "grader"))
            listener.listen(1)
            nonce = os.urandom(16).hex()
            payload["agent"] = {"socket": str(sockets / "grader"), "nonce": nonce, "timeout": time_limit}
        request.write_text(json.dumps(payload))
        served = None
        scratch = Path(private) / "tmp"
        scratch.mkdir()
        with open(Path(private) / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-P",
                    "-c",
                    "from emqsim.grading.execute import _execute_main; _execute_main()",
                    str(request),
                ],
                cwd=target.parent,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                # temporary files (the kernel's connection file, the notebook's own) go in the private folder,
                # removed with it even when the process is killed before it could remove them
                env={**env, "TMPDIR": str(scratch)},
                start_new_session=True,
            )
            try:
                if listener is not None and serve is not None:
                    accepted = _accept(listener, proc, deadline, str(nonce))
                    if accepted is not None:
                        connection, kernel = accepted

                        def interrupt() -> bool:
                            """SIGINT to the kernel, if it still is one of the run's processes."""
                            if kernel not in _descendants(proc.pid):
                                return False
                            with contextlib.suppress(OSError):
                                os.kill(kernel, signal.SIGINT)
                                return True
                            return False

                        with connection:
                            served = serve(connection, deadline, interrupt)
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise ConfigError(
                    f"{target.name} ran longer than the {time_limit:g} s limit (--time-limit); nothing was graded"
                ) from None
            finally:
                if listener is not None:
                    listener.close()
                kill_tree(proc.pid)
                _kill_group(proc)
        if not result.exists():
            lines = (Path(private) / "stderr.txt").read_text(errors="replace").strip().splitlines()
            why = _one_line(lines[-1]) if lines else f"exit status {proc.returncode}"
            raise ConfigError(f"running {target.name} failed: {why}")
        outcome = json.loads(result.read_text())
        if "error" in outcome:
            raise ConfigError(outcome["error"])
        nb = nbformat.read(out, as_version=4)
    return nb, {int(k): v for k, v in outcome["reply_errors"].items()}, outcome["stopped"], served
