"""What a notebook's own cells call: the student's id and seed, `as_number`, and `written_in_notebook` (which
names an answer cell defines and uses)."""

from __future__ import annotations

import ast
import getpass
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def _as_python(source: str) -> str:
    """A cell's source as plain Python (IPython magics and `!cmd` lines become calls of get_ipython())."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    return TransformerManager().transform_cell(source)
