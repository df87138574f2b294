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

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError
from emqsim.grading.answers import (
    GRADING_ENV,
    STUDENT_ENV,
    as_number,
    student_id,
    student_seed,
    written_in_notebook,
)
from emqsim.grading.checker import CHECK_TIMEOUT, CheckResult, check_answers, run_checks, run_checks_in_order
from emqsim.grading.grader import check_limits, folder_student, grade, grade_prepared, prepare
from emqsim.grading.guard import _changed as _changed  # the library's checks and tests use them
from emqsim.grading.guard import _snapshot as _snapshot
from emqsim.grading.notebooks import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    CODE_STUB,
    END_HIDDEN,
    END_SOLUTION,
    KERNEL_START_TRIES,
    TEXT_STUB,
    _read,
    compute_checksum,
    generate_student_version,
    is_autograded,
    is_grade,
    is_locked,
    is_solution,
    is_task,
)
from emqsim.grading.report import CellGrade, GradeReport
from emqsim.grading.sandbox import (
    FOLDER_LIMIT_BYTES,
    GRADE_TIME_LIMIT,
    SOCKET_PATH_MAX,
    kill_tree,
    sandbox_env,
)
from emqsim.grading.sources import restore_from_source, shell_command


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


def grade_notebooks(
    paths: Sequence[Path | str],
    *,
    timeout: float = 600,
    time_limit: float = GRADE_TIME_LIMIT,
    student: str | None = None,
    against: Path | str | None = None,
    progress: bool = False,
) -> int:
    """Grade several notebooks in turn, each in a sandbox of its own (`python -m emqsim grade A B ...`): every
    one is read and checked first, so a path or notebook that cannot be graded stops the command before any
    runs (a ConfigError naming it). Then each report is printed as its notebook finishes, headed by its path,
    and a summary table follows. `student` applies to every notebook (default: each one's nbgrader folder,
    else `student_id()`). A notebook that could not be graded (its time limit, a kernel that would not start)
    is one line on stderr and a row of the summary; the others are graded. Returns 0 if every notebook passes
    every autograded check, 1 if one does not, 2 if one could not be graded. One path: `grade_notebook`."""
    if len(paths) == 1:
        return grade_notebook(
            paths[0],
            timeout=timeout,
            time_limit=time_limit,
            student=student,
            against=against,
            progress=progress,
        )
    check_limits(timeout, time_limit, student)
    source = _read(against) if against is not None else None
    ready = []
    for path in paths:
        try:
            ready.append(prepare(path, student=student, source=source))
        except ConfigError as exc:
            message, name = str(exc), Path(path).name
            # the same file name recurs in a class's folders: name the notebook by its path
            raise ConfigError(
                f"{path}{message[len(name) :]}" if message.startswith(name) else f"{path}: {message}"
            ) from None
    rows: list[tuple[str, str, str]] = []
    status = 0
    bar = _progress_bar(len(ready), progress and sys.stderr.isatty())
    try:
        for submission in ready:
            shown = str(submission.path)
            if bar is not None:
                bar.set_description(f"grading {shown}")
            try:
                report = grade_prepared(submission, timeout=timeout, time_limit=time_limit)
            except ConfigError as exc:
                why = " ".join(str(exc).splitlines())
                print(f"emqsim grade: error: {shown}: {why}", file=sys.stderr, flush=True)
                rows.append((shown, "-", f"not graded: {why}"))
                status = 2
            else:
                print(report.text().replace(report.notebook, shown, 1) + "\n", flush=True)
                got, total = report.score
                rows.append(
                    (
                        shown,
                        f"{got:g} / {total:g}",
                        "all checks pass" if report.passed else "some checks fail",
                    )
                )
                status = max(status, 0 if report.passed else 1)
            if bar is not None:
                bar.update()
    except KeyboardInterrupt:
        print(_summary(rows, len(paths)), flush=True)  # the notebooks that finished; then the interrupt
        raise
    finally:
        if bar is not None:
            bar.close()
    print(_summary(rows, len(paths)), flush=True)
    return status


def _progress_bar(total: int, enabled: bool) -> Any:
    """A tqdm bar on stderr counting the notebooks graded, or None."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="notebook", file=sys.stderr, leave=False)


def _summary(rows: list[tuple[str, str, str]], total: int) -> str:
    """One row per notebook: its path, its autograded points and its status."""
    width = max(len("notebook"), *(len(r[0]) for r in rows))
    graded = sum(1 for row in rows if not row[2].startswith("not graded"))
    lines = [f"{graded} of {total} notebooks graded", f"{'notebook':<{width}}  {'autograded':>10}  status"]
    lines += [f"{path:<{width}}  {points:>10}  {status}" for path, points, status in rows]
    return "\n".join(lines)


__all__: list[str] = [
    "BEGIN_HIDDEN",
    "BEGIN_SOLUTION",
    "CHECK_TIMEOUT",
    "CODE_STUB",
    "END_HIDDEN",
    "END_SOLUTION",
    "FOLDER_LIMIT_BYTES",
    "GRADE_TIME_LIMIT",
    "GRADING_ENV",
    "KERNEL_START_TRIES",
    "SOCKET_PATH_MAX",
    "STUDENT_ENV",
    "TEXT_STUB",
    "CellGrade",
    "CheckResult",
    "GradeReport",
    "as_number",
    "check_answers",
    "compute_checksum",
    "folder_student",
    "generate_student_version",
    "grade",
    "grade_notebook",
    "grade_notebooks",
    "is_autograded",
    "is_grade",
    "is_locked",
    "is_solution",
    "is_task",
    "kill_tree",
    "restore_from_source",
    "run_checks",
    "run_checks_in_order",
    "sandbox_env",
    "shell_command",
    "student_id",
    "student_seed",
    "written_in_notebook",
]
