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
"""

from __future__ import annotations

import hashlib
import re
import subprocess
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


def _execute(nb: Any, folder: Path, timeout: float) -> tuple[dict[int, str], str | None]:
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
                    if cell.cell_type != "code":
                        continue
                    try:
                        client.execute_cell(cell, index)
                    except DeadKernelError:
                        stopped = f"the kernel died in cell {index}; the cells after it did not run"
                        break
                    except Exception as exc:  # anything nbclient raises for one cell fails that cell only
                        reply_errors[index] = _one_line(f"{type(exc).__name__}: {exc}")
            return reply_errors, stopped
        except Exception as exc:
            if started:  # the kernel died while shutting down: the cells ran
                return reply_errors, stopped
            failure = exc
    message = _one_line(f"{type(failure).__name__}: {failure}")
    raise ConfigError(f"cannot start a python3 kernel ({KERNEL_START_TRIES} tries): {message}")


def grade(path: Path | str, *, timeout: float = 600) -> GradeReport:
    """Execute the notebook at `path` in its own folder (cell timeout `timeout` s) and grade its test cells."""
    path = Path(path)
    if not (isinstance(timeout, int | float) and timeout > 0):
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    nb = _read(path)
    if not any(is_autograded(c) for c in nb.cells):
        raise ConfigError(
            f"{path.name} has no autograded test cells (nbgrader metadata grade: true); is it an assignment?"
        )
    reply_errors, stopped = _execute(nb, path.resolve().parent, timeout)
    cells: list[CellGrade] = []
    notes: list[str] = []
    for index, cell in enumerate(nb.cells):
        meta = _meta(cell)
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        if is_autograded(cell):
            max_points = float(meta["points"])
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
    if stopped:
        notes.append(stopped)
    return GradeReport(path.name, cells, notes)


def grade_notebook(path: Path | str, *, timeout: float = 600) -> int:
    """Grade a notebook for a student working alone: run it, print `question  points  status` per test cell,
    and return 0 if every autograded cell passes, else 1 (the exit status of `python -m emqsim grade`)."""
    report = grade(path, timeout=timeout)
    print(report.text(), flush=True)
    return 0 if report.passed else 1


__all__: list[str] = [
    "CODE_STUB",
    "TEXT_STUB",
    "CellGrade",
    "GradeReport",
    "compute_checksum",
    "generate_student_version",
    "grade",
    "grade_notebook",
    "is_autograded",
    "is_grade",
    "is_locked",
    "is_solution",
]
