"""`grade`: run a submission in the sandbox, restore its tests from the source, and score each autograded cell."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError
from emqsim.grading.answers import student_id
from emqsim.grading.execute import _execute_isolated
from emqsim.grading.notebooks import (
    _meta,
    _read,
    defer_iri_grammar,
    is_autograded,
    is_grade,
    is_solution,
    is_task,
)
from emqsim.grading.report import CellGrade, GradeReport, _error_of, _one_line, _partial
from emqsim.grading.sandbox import (
    GRADE_TIME_LIMIT,
    _copy_folder,
    _not_traceable,
    _seed_font_cache,
    sandbox_env,
)
from emqsim.grading.sources import _check_call, restore_from_source, shell_command


@dataclass(frozen=True)
class Submission:
    """A notebook read and made ready to grade (`prepare`): its cells with the source's tests restored, the
    student its seeds derive from, its checks' calls, the cells those replace, and its answer cells' source."""

    path: Path
    nb: Any
    student: str
    calls: tuple[tuple[str, list[str], str], ...]
    skip: frozenset[int]
    answers: dict[str, str]


def check_limits(timeout: float, time_limit: float, student: str | None) -> None:
    """One-line ConfigErrors for a bad cell timeout, time limit or student id."""
    for label, value in (("timeout", timeout), ("time limit", time_limit)):
        if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            raise ConfigError(f"{label} must be a positive number of seconds, got {value!r}")
    if student is not None and not re.fullmatch(r"[A-Za-z0-9_.@\-]{1,100}", student):
        raise ConfigError(f"student id {student!r}: use letters, digits and _ . @ - only")


def prepare(path: Path | str, *, student: str | None = None, source: Any = None) -> Submission:
    """Read the notebook at `path` and make it ready to grade, running nothing: `source` (the instructor's
    notebook, read) replaces its locked and test cells; a one-line ConfigError if it cannot be graded."""
    path = Path(path)
    nb = _read(path)
    if source is not None:  # a copy: the restored cells share nothing with another submission's
        nb = restore_from_source(nb, copy.deepcopy(source), path.name)
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
    return Submission(path, nb, who, tuple(calls), frozenset(skip), answers)


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
    check_limits(timeout, time_limit, student)
    source = _read(against) if against is not None else None
    return grade_prepared(
        prepare(path, student=student, source=source), timeout=timeout, time_limit=time_limit
    )


def grade_prepared(
    submission: Submission, *, timeout: float = 600, time_limit: float = GRADE_TIME_LIMIT
) -> GradeReport:
    """Grade a notebook `prepare` made ready (see `grade`); its report is named by the notebook's file name."""
    defer_iri_grammar()
    import nbformat

    from emqsim.grading.checks import run_trusted_checks
    from emqsim.grading.trusted import Channel

    calls, answers, who = list(submission.calls), submission.answers, submission.student

    def serve(connection: socket.socket, deadline: float, interrupt: Callable[[], bool]) -> dict[str, Any]:
        channel = Channel(connection, deadline=deadline, interrupt=interrupt)
        try:
            return run_trusted_checks(channel, calls, student=who, answers=answers)
        finally:
            channel.close()

    _not_traceable()
    path = submission.path
    with tempfile.TemporaryDirectory(prefix="emqsim-grade-") as tmp:
        work, home = Path(tmp) / "work", Path(tmp) / "home"
        _copy_folder(path.resolve().parent, work)
        home.mkdir()
        _seed_font_cache(home)
        target = work / path.name
        nbformat.write(submission.nb, str(target))
        executed, reply_errors, stopped, verdicts = _execute_isolated(
            target,
            timeout,
            time_limit,
            sandbox_env(home, who),
            skip=submission.skip,
            serve=serve if calls else None,
        )
        cells, notes = _score(executed, reply_errors, verdicts, submission.skip, stopped)
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
