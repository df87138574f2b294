"""What the grader takes from the source notebook rather than the submission: its test and locked cells (restored),
and the shell commands a cell may not run."""

from __future__ import annotations

import ast
import re
from typing import Any

from emqsim.errors import ConfigError
from emqsim.grading.checker import _CHECK_CALLS
from emqsim.grading.notebooks import _meta, is_autograded, is_grade, is_locked, is_solution

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
