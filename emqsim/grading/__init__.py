"""Assignment notebooks without nbgrader: make the student version of a source notebook, and grade a notebook.

The notebooks in `notebooks/assignments/` use nbgrader's source format (cell metadata `{"nbgrader": {...}}`,
`### BEGIN SOLUTION` / `### END SOLUTION` regions, `### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS` in test
cells), so instructors can run `nbgrader generate_assignment` / `nbgrader autograde` on them unchanged. This
module does the same two jobs for people without an nbgrader course:

* `generate_student_version(src, dst)` applies what `nbgrader generate_assignment` applies to one notebook:
  solution regions become `# YOUR CODE HERE` / `raise NotImplementedError()` (code) or `YOUR ANSWER HERE`
  (markdown), hidden tests are removed, outputs cleared, cells locked and checksummed as nbgrader does.
* `grade_notebook(path)` (`python -m emqsim grade NOTEBOOK`) runs the notebook in its own folder and scores each
  autograded test cell with nbgrader's rule: an error, or anything written to stderr, scores 0; a number as the
  cell's result is partial credit; anything else scores full points.

Grading executes the notebook's code, in a sandboxed kernel (`grade`: a session of its own, resource limits,
a private copy of the folder, a private HOME and TMPDIR, a scrubbed environment), and every process it started
is killed before `grade` returns; it cannot stop code from reading or writing files the grading user may
touch: run it as an unprivileged user or in a container for untrusted submissions.

The verdict is computed in the grading process, which never runs student code: the test cells' checks (from
the `--against` source) run there, on the answers handed over as plain data or called through proxies across
a socket (`emqsim.grading.trusted`, `emqsim.grading.agent`, `emqsim.grading.checks`). Inside a student's own
kernel, `check_answers` still runs the checks in a fresh process that re-runs the saved answer cells: that is
for the student's convenience, and its verdict counts for nothing.
"""

from __future__ import annotations

import ast
import contextlib
import getpass
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError

BEGIN_SOLUTION = "BEGIN SOLUTION"
END_SOLUTION = "END SOLUTION"
BEGIN_HIDDEN = "BEGIN HIDDEN TESTS"
END_HIDDEN = "END HIDDEN TESTS"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"
_GRADE_ID = re.compile(r"^[a-zA-Z0-9_\-]+$")
KERNEL_START_TRIES = 3


# -- reading ----------------------------------------------------------------------------------------------------
def _read(path: Path | str) -> Any:
    """The notebook at `path` (nbformat v4), or a one-line ConfigError saying why it cannot be read."""
    import nbformat

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"notebook {str(path)!r} not found; check the path")
    if not path.is_file():
        raise ConfigError(f"{str(path)!r} is not a notebook file (.ipynb)")
    try:
        nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    except Exception as exc:  # json errors, NotJSONError, validation errors, unreadable bytes
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{path.name} is not a readable notebook: {first[:160]}") from None
    if not isinstance(nb.get("cells"), list):
        raise ConfigError(f"{path.name} is not a readable notebook: it has no list of cells")
    _check_metadata(nb, path.name)
    return nb


def _meta(cell: Any) -> dict[str, Any]:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def is_grade(cell: Any) -> bool:
    """A cell that carries points (nbgrader `grade: true`)."""
    return bool(_meta(cell).get("grade", False))


def is_solution(cell: Any) -> bool:
    """A cell the student writes in (nbgrader `solution: true`)."""
    return bool(_meta(cell).get("solution", False))


def is_task(cell: Any) -> bool:
    return bool(_meta(cell).get("task", False))


def is_locked(cell: Any) -> bool:
    """nbgrader's rule: solution cells are never locked, grade cells always, others if marked `locked`."""
    if not _meta(cell) or is_solution(cell):
        return False
    return True if is_grade(cell) else bool(_meta(cell).get("locked", False))


def is_autograded(cell: Any) -> bool:
    """An autograder test cell: code, `grade: true`, `solution: false`."""
    return cell.get("cell_type") == "code" and is_grade(cell) and not is_solution(cell)


def _check_metadata(nb: Any, name: str) -> None:
    """The parts of nbgrader's metadata validation that matter here (ids, points)."""
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
        if not meta or not (
            meta.get("grade") or meta.get("solution") or meta.get("locked") or meta.get("task")
        ):
            continue
        grade_id = meta.get("grade_id")
        if not isinstance(grade_id, str) or not _GRADE_ID.match(grade_id):
            raise ConfigError(f"{name}: cell {index} has nbgrader metadata without a valid grade_id")
        if grade_id in seen:
            raise ConfigError(f"{name}: duplicate grade_id {grade_id!r}; every graded cell needs its own")
        seen.add(grade_id)
        if meta.get("grade"):
            points = meta.get("points")
            if isinstance(points, bool) or not isinstance(points, int | float) or points < 0:
                raise ConfigError(f"{name}: grade cell {grade_id!r} has no valid points")


# -- the student version --------------------------------------------------------------------------------------
def _replace_regions(
    source: str, begin: str, end: str, stub: list[str] | None, where: str
) -> tuple[str, bool]:
    """Replace every begin..end region (the marker lines included) by `stub`, indented like the begin line, or
    drop it when `stub` is None. Returns the new source and whether any region was found."""
    out: list[str] = []
    inside = found = False
    for line in source.split("\n"):
        if begin in line:
            if inside:
                raise ConfigError(f"{where}: nested '{begin}' regions")
            inside = found = True
            indent = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
            out.extend(indent + s for s in stub or [])
        elif end in line:
            if not inside:
                raise ConfigError(f"{where}: '{end}' without a '{begin}' before it")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ConfigError(f"{where}: '{begin}' without a matching '{end}'")
    return "\n".join(out), found


def compute_checksum(cell: Any) -> str:
    """nbgrader's checksum of a graded/solution/locked cell (lets it tell an untouched answer from an edit)."""
    meta = _meta(cell)
    digest = hashlib.md5()
    for part in (
        cell.source,
        cell.cell_type,
        str(is_grade(cell)),
        str(is_solution(cell)),
        str(is_locked(cell)),
    ):
        digest.update(part.encode())
    digest.update(meta["grade_id"].encode())
    if is_grade(cell):
        digest.update(str(float(meta["points"])).encode())
    return digest.hexdigest()


def _checksum(cell: Any) -> None:
    if is_grade(cell) or is_solution(cell) or is_locked(cell):
        cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)
        cell.metadata["nbgrader"]["cell_type"] = cell.cell_type


def generate_student_version(src: Path, dst: Path) -> None:
    """Write the student version of the source notebook `src` to `dst`, as `nbgrader generate_assignment` does:
    solution regions replaced by stubs, hidden tests removed, outputs cleared, cells locked and checksummed."""
    import nbformat

    src, dst = Path(src), Path(dst)
    nb = _read(src)
    language = nb.metadata.get("kernelspec", {}).get("language", "python")
    if language != "python":
        raise ConfigError(f"{src.name}: kernel language {language!r}; only Python notebooks are supported")
    for index, cell in enumerate(nb.cells):
        where = f"{src.name}, cell {index}"
        # LockCells
        if is_solution(cell):
            cell.metadata["deletable"] = False
        elif is_grade(cell) or is_locked(cell):
            cell.metadata["deletable"] = False
            cell.metadata["editable"] = False
        # ClearSolutions
        stub = (CODE_STUB if cell.cell_type == "code" else TEXT_STUB).split("\n")
        cell.source, replaced = _replace_regions(cell.source, BEGIN_SOLUTION, END_SOLUTION, stub, where)
        if replaced and not is_solution(cell):
            raise ConfigError(f"{where}: a solution region in a cell not marked as a solution cell")
        if is_solution(cell) and not replaced:
            cell.source = "\n".join(stub)
        # ClearOutput
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("collapsed", None)
            cell.metadata.pop("scrolled", None)
        # ClearHiddenTests (checksums are computed on what the student receives)
        cell.source, removed = _replace_regions(cell.source, BEGIN_HIDDEN, END_HIDDEN, None, where)
        if removed and not is_grade(cell):
            raise ConfigError(f"{where}: hidden tests in a cell not marked as a grade (test) cell")
        _checksum(cell)
    nb.metadata.pop("celltoolbar", None)
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dst))


# -- who is working, and their seed ----------------------------------------------------------------------------
STUDENT_ENV = "EMQSIM_STUDENT_ID"
GRADING_ENV = "EMQSIM_GRADING"  # "external" in the kernels `grade` starts: the grader runs the checks itself


def student_id(folder: Path | str | None = None) -> str:
    """The id of the student whose notebook runs, in this order:

    1. under `nbgrader autograde` (NBGRADER_EXECUTION=autograde), the `<id>` of the folder
       `autograded/<id>/<assignment>/` the notebook runs in;
    2. the environment variable EMQSIM_STUDENT_ID (`python -m emqsim grade --student ID` sets it);
    3. JUPYTERHUB_USER (on JupyterHub, nbgrader's student id is the hub user name);
    4. the login name; "student" if there is none.
    """
    from emqsim.grading.checks import CONTEXT

    if CONTEXT.get("student"):  # the checks of `grade`, in the trusted process: the grader's id, nothing else
        return str(CONTEXT["student"])
    here = Path.cwd() if folder is None else Path(folder)
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        parts = here.resolve().parts
        if len(parts) >= 3 and parts[-3] == "autograded":
            return parts[-2]
    for name in (STUDENT_ENV, "JUPYTERHUB_USER"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    try:
        return getpass.getuser() or "student"
    except Exception:  # no login name (some containers)
        return "student"


def student_seed(assignment: str, student: str | None = None) -> int:
    """A seed of this student's own for `assignment` (0 <= seed < 10**6): numbers copied from another student's
    notebook do not match the numbers the grader recomputes for this one."""
    who = student_id() if student is None else student
    digest = hashlib.sha256(f"emqsim/{assignment}/{who}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 1_000_000


# -- checks that run outside the student's namespace ----------------------------------------------------------
CHECK_TIMEOUT = 900.0
_CHECK_CALLS = ("check_answers", "_check_answers")


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one test cell's checks: passed or not, and a short message for the student."""

    ok: bool
    message: str


def as_number(value: Any, what: str) -> float:
    """`value` as a plain float, or an AssertionError saying that `what` must be a number (not a bool, not an
    object that only claims to equal everything)."""
    import numbers

    assert isinstance(value, numbers.Real) and not isinstance(value, bool), (
        f"{what} must be a number, got {type(value).__name__}"
    )
    number = float(value)
    assert type(number) is float
    return number


_DYNAMIC = frozenset(
    {
        "__import__",
        "importlib",
        "getattr",
        "eval",
        "exec",
        "globals",
        "vars",
        "locals",
        "compile",
        "sys",
        "__builtins__",
        "builtins",
        "setattr",
        "__dict__",
        "__globals__",
        "modules",
    }
)


_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})


def written_in_notebook(
    name: str, *, kind: str = "def", base: str | None = None, forbidden: Sequence[str] = ()
) -> None:
    """AssertionError unless the answer cells write `name` themselves: its last top-level binding in the answer
    cells is a `def` (kind "def") or a `class` (kind "class", with exactly `base` as its base when given), and
    neither it nor any answer-cell name it uses refers to a name in `forbidden` (the library's ready-made
    answer), to a name imported from a module in `forbidden`, or to dynamic look-ups (`getattr`, `__import__`,
    `sys.modules`, ...) that could reach one. The grader reads the answer cells' source: nothing the student's
    process says is taken for it."""
    from emqsim.grading.checks import CONTEXT

    answers = CONTEXT.get("answers")
    assert isinstance(answers, dict), "the checks run without the answer cells' source"
    trees = []
    for source in answers.values():
        first, _, rest = source.lstrip().partition("\n")
        if first.startswith("%%") and first[2:].split(" ")[0] in _PYTHON_CELL_MAGICS:
            source = rest  # the cell's body is Python the magic runs (timed, captured)
        try:
            trees.append(ast.parse(_as_python(source)))
        except SyntaxError:
            continue
    banned = set(forbidden) | _DYNAMIC
    modules = tuple(m for m in forbidden if "." in m or m == "emqsim")
    last: ast.AST | None = None
    top: list[ast.stmt] = [stmt for tree in trees for stmt in tree.body]
    for stmt in top:  # names imported from a forbidden module are forbidden
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith(modules or ("\0",)):
            banned.update(a.asname or a.name for a in stmt.names)
        elif isinstance(stmt, ast.Import):
            banned.update(
                (a.asname or a.name).split(".")[0]
                for a in stmt.names
                if a.name.startswith(modules or ("\0",))
            )
    changed = True
    while changed:  # and so is every answer-cell name defined with one
        changed = False
        for stmt in top:
            bound = _bound_names(stmt)
            if bound and not bound <= banned and _uses(stmt) & banned:
                banned |= bound
                changed = True
    for stmt in top:
        if name in _bound_names(stmt):
            last = stmt
    word = "function" if kind == "def" else "class"
    assert last is not None, f"{name}: write it in your answer cell (no {word} {name} found there)"
    if kind == "def":
        assert isinstance(last, ast.FunctionDef), f"{name} must be a function you write: def {name}(...)"
    else:
        assert isinstance(last, ast.ClassDef), f"{name} must be a class you write: class {name}(...)"
        if base is not None:
            bases = [ast.unparse(b) for b in last.bases]
            assert bases == [base], (
                f"{name} must derive from {base} only (it derives from {', '.join(bases)})"
            )
    used = sorted(_uses(last) & (banned - {name}))
    dynamic = [x for x in used if x in _DYNAMIC and x not in forbidden]
    assert not dynamic, (
        f"{name} uses {dynamic[0]}: write it without dynamic look-ups (the checks read your code)"
    )
    assert not used, f"{name} must be your own code, not the library's: it uses {used[0]}"


def _bound_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


def _uses(stmt: ast.AST) -> set[str]:
    """Every name and attribute name a statement mentions."""
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out.add(node.value)
    return out


def check_answers(
    notebook: str, test_id: str, names: Sequence[str], checks: str, *, timeout: float = CHECK_TIMEOUT
) -> None:
    """Run a test cell's `checks` (Python source) on the answers called `names`, in a fresh Python process that
    re-runs the notebook's locked and answer cells from the saved file `notebook`. Raises AssertionError with
    the first failed check; prints a confirmation otherwise. Under `python -m emqsim grade` the grader runs
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
    result = run_checks(path, test_id, names, checks, timeout=timeout)
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
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def _run_checker(
    entry: str, request: dict[str, Any], cwd: Path, timeout: float
) -> tuple[list[Any], str, bool]:
    """Run `entry` (a function of this module) in a fresh process in its own process group (killed at the
    end), started in `cwd`, with `request` on stdin and a fresh nonce in it: (the verdicts it printed after
    the nonce, in order; ": <last stderr line>" or ""; whether it ran out of `timeout` s)."""
    nonce = os.urandom(16).hex()
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
    env.pop(GRADING_ENV, None)
    timed_out = False
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-c", f"from emqsim.grading import {entry}; {entry}()"],
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


def _snapshot() -> dict[tuple[str, str], Any]:
    """What the answers must leave alone: the attributes of Python's builtins, math, statistics, NumPy and every
    loaded emqsim module, the contents of emqsim's classes and dicts, and the code of emqsim's functions."""
    import builtins
    import math
    import statistics
    import types

    import numpy

    import emqsim
    import emqsim.analytic
    import emqsim.fencing
    import emqsim.grading
    import emqsim.protocol
    import emqsim.stats  # noqa: F401

    snap: dict[tuple[str, str], Any] = {}
    for module in (builtins, math, statistics, numpy):
        for key, value in list(vars(module).items()):
            snap[(module.__name__, key)] = value
    for name, module in sorted(sys.modules.items()):
        if not (name == "emqsim" or name.startswith("emqsim.")) or module is None:
            continue
        for key, value in list(vars(module).items()):
            where = f"{name}.{key}"
            snap[(name, key)] = value
            if isinstance(value, type) and value.__module__ == name:
                snap[(where, "*keys*")] = _own_keys(value)
                for attr, member in vars(value).items():
                    snap[(where, attr)] = member
                    if isinstance(member, types.FunctionType):
                        snap[(f"{where}.{attr}", "*code*")] = (member.__code__, member.__defaults__)
            elif isinstance(value, types.FunctionType) and value.__module__ == name:
                snap[(where, "*code*")] = (value.__code__, value.__defaults__, value.__kwdefaults__)
            elif isinstance(value, dict):
                snap[(where, "*items*")] = list(value.items())
    return snap


def _changed(snap: dict[tuple[str, str], Any]) -> str | None:
    """The first thing in `snap` that is no longer as it was, or None."""
    import types

    for (where, key), before in snap.items():
        if key == "*keys*":
            module, _, cls = where.rpartition(".")
            now: Any = _own_keys(getattr(sys.modules[module], cls))
            if now != before:
                return f"{where} (attributes {sorted(now ^ before)[:3]})"
            continue
        if key == "*code*":
            owner, _, name = where.rpartition(".")
            holder = sys.modules.get(owner)
            if holder is None:
                module, _, cls = owner.rpartition(".")
                holder = getattr(sys.modules[module], cls)
            fn = vars(holder).get(name)
            if isinstance(fn, types.FunctionType):
                now = (
                    (fn.__code__, fn.__defaults__)
                    if len(before) == 2
                    else (fn.__code__, fn.__defaults__, fn.__kwdefaults__)
                )
                if any(a is not b for a, b in zip(now, before, strict=True)):
                    return f"{where} (its code)"
            continue
        if key == "*items*":
            owner, _, name = where.rpartition(".")
            value = vars(sys.modules[owner]).get(name)
            if (
                not isinstance(value, dict)
                or len(value) != len(before)
                or any(value.get(k, _MISSING) is not v for k, v in before)
            ):
                return f"{where} (its contents)"
            continue
        holder = sys.modules.get(where)
        if holder is None:
            module, _, cls = where.rpartition(".")
            holder = getattr(sys.modules[module], cls)
        if vars(holder).get(key, _MISSING) is not before:
            return f"{where}.{key}"
    return None


_MISSING = object()
_CACHES = frozenset({"__slotnames__"})  # copyreg caches this on a class the first time it is deep-copied


def _own_keys(cls: type) -> frozenset[str]:
    """The names a class defines, less what Python adds to it by itself: copyreg's cache, and the empty
    `__annotations__` that reading it creates on a class without annotations (Python 3.10+), as the
    library's own argument checks may do while the checks run."""
    return frozenset(
        name
        for name, value in vars(cls).items()
        if name not in _CACHES and not (name == "__annotations__" and value == {})
    )


class _NoShell:
    """`get_ipython()` inside the checks: magics and shell commands in answer cells do nothing there."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _as_python(source: str) -> str:
    """A cell's source as plain Python (IPython magics and `!cmd` lines become calls of get_ipython())."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)


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
                        tools.child(test, namespace, snap, verdict, tools)
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
    looked up under (`emqsim.grading._changed`, `contextlib.redirect_stdout`, ...). `changed` runs first and
    refuses every change to the snapshot; the others are not in it, so the checks use the originals."""

    changed: Callable[[dict[tuple[str, str], Any]], str | None]
    one_line: Callable[..., str]
    string_io: type[io.StringIO]
    redirect_stdout: Callable[[Any], Any]
    extract_tb: Callable[[Any], Any]
    child: Callable[..., None]


def _check_tools() -> _CheckTools:
    import traceback

    return _CheckTools(
        _changed, _one_line, io.StringIO, contextlib.redirect_stdout, traceback.extract_tb, _checks_child
    )


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


# -- grading --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellGrade:
    """One graded cell: its id, points earned (None: graded by hand) out of `max_points`, a status and why."""

    grade_id: str
    points: float | None
    max_points: float
    status: str  # pass, partial, fail, manual
    detail: str = ""


@dataclass(frozen=True)
class GradeReport:
    """Every graded cell of one notebook, in order, plus errors raised outside the test cells."""

    notebook: str
    cells: list[CellGrade]
    notes: list[str] = field(default_factory=list)

    @property
    def autograded(self) -> list[CellGrade]:
        return [c for c in self.cells if c.status != "manual"]

    @property
    def passed(self) -> bool:
        return all(c.status == "pass" for c in self.autograded)

    @property
    def score(self) -> tuple[float, float]:
        auto = self.autograded
        return sum(c.points or 0.0 for c in auto), sum(c.max_points for c in auto)

    def text(self) -> str:
        """The report `python -m emqsim grade` prints (no times or paths: same notebook, same text)."""
        width = max([len("question")] + [len(c.grade_id) for c in self.cells])
        lines = [f"{self.notebook}", f"{'question':<{width}}  {'points':>9}  status"]
        for c in self.cells:
            shown = "-" if c.points is None else f"{c.points:g}"
            detail = f"  {c.detail}" if c.detail else ""
            lines.append(
                f"{c.grade_id:<{width}}  {shown + ' / ' + format(c.max_points, 'g'):>9}  {c.status}{detail}"
            )
        got, total = self.score
        manual = sum(c.max_points for c in self.cells if c.status == "manual")
        summary = f"{'autograded':<{width}}  {format(got, 'g') + ' / ' + format(total, 'g'):>9}"
        summary += "  all checks pass" if self.passed else "  some checks fail"
        if manual:
            summary += f" ({manual:g} more points graded by hand)"
        lines.append(summary)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(text: str, limit: int = 100) -> str:
    text = _HEX.sub("0x...", _ANSI.sub("", text)).strip()
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _error_of(outputs: list[Any], reply_error: str | None) -> str | None:
    """What made a cell fail by nbgrader's rule (an error output or anything on stderr), or None."""
    for out in outputs:
        if out.get("output_type") == "error":
            return _one_line(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": "))
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return _one_line(f"wrote to stderr: {out.get('text', '')}")
    return reply_error


def _partial(outputs: list[Any], max_points: float) -> float | None:
    """nbgrader's partial credit: a test cell whose result is a number in [0, max] scores that number."""
    for out in outputs:
        if out.get("output_type") == "execute_result":
            text = out.get("data", {}).get("text/plain", "")
            if isinstance(text, list):
                if len(text) != 1:
                    return None
                text = text[0]
            try:
                value = float(text)
            except (TypeError, ValueError):
                return None
            return value if 0 <= value <= max_points else None
    return None


def _execute(
    nb: Any,
    folder: Path,
    timeout: float,
    skip: frozenset[int] = frozenset(),
    agent: dict[str, Any] | None = None,
) -> tuple[dict[int, str], str | None]:
    """Run every cell in a fresh python3 kernel started in `folder`; errors do not stop the run. Returns the
    reply error of each cell that failed without an error output (timeouts), and why the run stopped early."""
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


GRADE_TIME_LIMIT = 3600.0
FOLDER_LIMIT_BYTES = 200 * 1024 * 1024
_IGNORED = shutil.ignore_patterns(".git", ".ipynb_checkpoints", "__pycache__", ".venv", "node_modules")
_SHELL = re.compile(
    r"(^\s*!|^\s*%%?(?:sx|system|bash|sh|script)\b|\bos\s*\.\s*(?:system|popen|exec\w*|spawn\w*|fork)\b|"
    r"\bsubprocess\b|\bpty\b|\bgetoutput\b|\bcommands\b)",
    re.M,
)


def shell_command(source: str) -> str | None:
    """The first shell-command call in a cell's source (`os.system`, `subprocess`, `!cmd`, `%%bash`, ...)."""
    match = _SHELL.search(source)
    return None if match is None else " ".join(match.group(0).split())


def _check_call(source: str) -> tuple[str, list[str], str] | None:
    """(test id, answer names, checks) of a test cell that calls check_answers with literal arguments."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name not in _CHECK_CALLS or len(node.args) < 4:
            continue
        try:
            _, test_id, names, checks = (ast.literal_eval(arg) for arg in node.args[:4])
        except ValueError:
            return None
        if isinstance(test_id, str) and isinstance(checks, str) and isinstance(names, list | tuple):
            return test_id, [str(n) for n in names], checks
    return None


def restore_from_source(nb: Any, source: Any, name: str) -> Any:
    """What nbgrader's autograde does before running a submission: the locked and test cells come back from the
    instructor's source notebook (hidden tests included), matched by grade_id; the answer cells stay."""
    wanted = {
        _meta(c)["grade_id"]: c
        for c in source.cells
        if _meta(c).get("grade_id") and not is_solution(c) and (is_locked(c) or is_grade(c))
    }
    seen = set()
    for index, cell in enumerate(nb.cells):
        grade_id = _meta(cell).get("grade_id")
        if grade_id in wanted:
            original = wanted[grade_id]
            nb.cells[index] = type(original)(
                {k: v for k, v in original.items() if k not in ("outputs", "execution_count")}
            )
            if original.cell_type == "code":
                nb.cells[index]["outputs"], nb.cells[index]["execution_count"] = [], None
            seen.add(grade_id)
        elif is_autograded(cell):
            raise ConfigError(
                f"{name}: test cell {grade_id!r} is not in the source notebook; wrong assignment?"
            )
    missing = sorted(set(wanted) - seen)
    if missing:
        raise ConfigError(
            f"{name}: cell {missing[0]!r} of the assignment was deleted; restore it and grade again"
        )
    return nb


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


def _execute_main() -> None:
    """The executing process `grade` starts: adopt orphans, limit resources, run the notebook, write it back,
    kill every process the notebook left behind."""
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
                    "from emqsim.grading import _execute_main; _execute_main()",
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


def _not_traceable() -> None:
    """Other processes of the same user (the student's kernel) may not ptrace this one or read its memory."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0


def grade(
    path: Path | str,
    *,
    timeout: float = 600,
    time_limit: float = GRADE_TIME_LIMIT,
    student: str | None = None,
    against: Path | str | None = None,
) -> GradeReport:
    """Grade the notebook at `path`: run it in a sandboxed kernel in a private copy of its folder (cell timeout
    `timeout` s, the whole run within `time_limit` s), then score its test cells. The checks of the test cells
    run in THIS process, which never runs the student's code: they see the answers as plain data, or as
    proxies whose every call goes to the kernel and whose replies are checked. `against`: the instructor's
    source notebook, whose locked and test cells (hidden tests included) replace the submission's, as
    nbgrader's autograde does; the checks come from it. `student`: the id the per-student seeds derive from
    (default: nbgrader's `autograded/<id>/` folder, else see `student_id`)."""
    import nbformat

    from emqsim.grading.checks import run_trusted_checks
    from emqsim.grading.trusted import Channel

    path = Path(path)
    for label, value in (("timeout", timeout), ("time limit", time_limit)):
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
    if student is not None and not re.fullmatch(r"[A-Za-z0-9_.@\-]{1,100}", student):
        raise ConfigError(f"student id {student!r}: use letters, digits and _ . @ - only")
    nb = _read(path)
    if against is not None:
        nb = restore_from_source(nb, _read(against), path.name)
    if not any(is_autograded(c) for c in nb.cells):
        raise ConfigError(
            f"{path.name} has no autograded test cells (nbgrader metadata grade: true); is it an assignment?"
        )
    who = student if student is not None else (folder_student(path) or student_id())
    calls: list[tuple[str, list[str], str]] = []
    skip: set[int] = set()
    for index, cell in enumerate(nb.cells):
        if is_autograded(cell) and shell_command(cell.source) is None:
            call = _check_call(cell.source)
            if call is not None:
                calls.append(call)
                skip.add(index)
    answers = {
        str(_meta(c).get("grade_id") or i): c.source
        for i, c in enumerate(nb.cells)
        if c.get("cell_type") == "code" and is_solution(c)
    }

    def serve(connection: socket.socket, deadline: float, interrupt: Callable[[], bool]) -> dict[str, Any]:
        channel = Channel(connection, deadline=deadline, interrupt=interrupt)
        try:
            return run_trusted_checks(channel, calls, student=who, answers=answers)
        finally:
            channel.close()

    _not_traceable()
    with tempfile.TemporaryDirectory(prefix="emqsim-grade-") as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        _copy_folder(path.resolve().parent, work)
        home.mkdir()
        target = work / path.name
        nbformat.write(nb, str(target))
        executed, reply_errors, stopped, verdicts = _execute_isolated(
            target,
            timeout,
            time_limit,
            sandbox_env(home, who),
            skip=frozenset(skip),
            serve=serve if calls else None,
        )
        cells, notes = _score(executed, reply_errors, verdicts, frozenset(skip), stopped)
    if stopped:
        notes.append(stopped)
    return GradeReport(path.name, cells, notes)


def folder_student(path: Path) -> str | None:
    """The `<id>` of nbgrader's layout `autograded/<id>/<assignment>/<notebook>` (or `submitted/...`), if the
    notebook sits in one."""
    parts = path.resolve().parts
    if (
        len(parts) >= 4
        and parts[-4] in ("autograded", "submitted")
        and re.fullmatch(r"[A-Za-z0-9_.@\-]{1,100}", parts[-3])
    ):
        return parts[-3]
    return None


def _score(
    nb: Any,
    reply_errors: dict[int, str],
    verdicts: dict[str, Any] | None,
    checked: frozenset[int],
    stopped: str | None,
) -> tuple[list[CellGrade], list[str]]:
    """The grade of every graded cell, and notes on errors outside the test cells. Test cells with checks take
    the trusted verdict only; other test cells follow nbgrader's rule on what the kernel reported."""
    cells: list[CellGrade] = []
    notes: list[str] = []
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        if is_autograded(cell):
            max_points = float(meta["points"])
            shell = shell_command(cell.source)
            if shell is not None:
                cells.append(
                    CellGrade(meta["grade_id"], 0.0, max_points, "fail", f"runs a shell command ({shell})")
                )
                notes.append(f"{meta['grade_id']}: a test cell runs a shell command ({shell}); it scores 0")
                continue
            if index in checked:
                call = _check_call(cell.source)
                assert call is not None
                found = None if verdicts is None else verdicts.get(call[0])
                if found is None:
                    why = stopped or "the notebook's kernel never reached its end (did a cell exit or hang?)"
                    cells.append(CellGrade(meta["grade_id"], 0.0, max_points, "fail", _one_line(why, 160)))
                elif found.ok:
                    cells.append(CellGrade(meta["grade_id"], max_points, max_points, "pass"))
                else:
                    cells.append(
                        CellGrade(meta["grade_id"], 0.0, max_points, "fail", _one_line(found.message, 160))
                    )
                continue
            ran = cell.get("execution_count") is not None or outputs or index in reply_errors
            error = _error_of(outputs, reply_errors.get(index)) if ran else "did not run"
            if error is not None:
                cells.append(CellGrade(meta["grade_id"], 0.0, max_points, "fail", error))
                continue
            got = _partial(outputs, max_points)
            got = max_points if got is None else got
            status = "pass" if got == max_points else ("fail" if got == 0 else "partial")
            cells.append(CellGrade(meta["grade_id"], got, max_points, status))
        elif is_grade(cell) or is_task(cell):
            cells.append(CellGrade(meta["grade_id"], None, float(meta.get("points", 0)), "manual"))
        elif cell.cell_type == "code":
            error = _error_of(
                [o for o in outputs if o.get("output_type") == "error"], reply_errors.get(index)
            )
            if error is not None:
                label = meta.get("grade_id") or f"cell {index}"
                if error == "NotImplementedError" and is_solution(cell):
                    notes.append(f"{label}: not answered yet (still raises NotImplementedError)")
                elif error == "NotImplementedError":
                    notes.append(f"{label}: NotImplementedError (it calls an answer not written yet)")
                else:
                    notes.append(f"{label}: {error}")
    return cells, notes


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Any:
    """os.environ replaced by `env` for the duration (the checks' process inherits it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _elapsed(desc: str, enabled: bool) -> Any:
    """A tqdm line on stderr showing the time so far, redrawn every half second (the kernel runs in another
    process, so there is no count to show); gone when the block ends."""
    if not enabled:
        yield
        return
    import threading

    from tqdm.auto import tqdm

    bar = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()


def grade_notebook(
    path: Path | str,
    *,
    timeout: float = 600,
    time_limit: float = GRADE_TIME_LIMIT,
    student: str | None = None,
    against: Path | str | None = None,
    progress: bool = False,
) -> int:
    """Grade a notebook: run it, print `question  points  status` per test cell, and return 0 if every
    autograded cell passes, else 1 (the exit status of `python -m emqsim grade`). `progress`: while the
    notebook runs (tens of seconds), a line on stderr with the time so far, when stderr is a terminal."""
    with _elapsed(f"grading {Path(path).name}", progress and sys.stderr.isatty()):
        report = grade(path, timeout=timeout, time_limit=time_limit, student=student, against=against)
    print(report.text(), flush=True)
    return 0 if report.passed else 1


__all__: list[str] = [
    "CODE_STUB",
    "TEXT_STUB",
    "CellGrade",
    "CheckResult",
    "GradeReport",
    "as_number",
    "check_answers",
    "compute_checksum",
    "generate_student_version",
    "grade",
    "grade_notebook",
    "is_autograded",
    "is_grade",
    "is_locked",
    "is_solution",
    "kill_tree",
    "restore_from_source",
    "run_checks",
    "shell_command",
    "student_id",
    "student_seed",
    "written_in_notebook",
]
