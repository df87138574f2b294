"""nbgrader's source format, read and written: the cells' metadata and kinds, solution and hidden-test regions,
nbgrader's checksums, and the student version of a source notebook."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import types
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
def defer_iri_grammar() -> None:
    """Put off building the IRI grammar that importing nbformat builds: call before the first import of nbformat
    or nbclient in a process (every function here that reads or runs a notebook does).

    nbformat validates with jsonschema, which imports `rfc3987_syntax` when it is installed (jupyter-events
    asks for it), and that package builds its grammar's Earley parsers on import: about 2 s of CPU in every
    process that reads a notebook (jsonschema issue 1428), most of a grading process's start. No notebook
    schema uses the `iri` formats, so a stand-in takes the package's place: the same functions, which load the
    real module the first time one is called."""
    if "rfc3987_syntax" in sys.modules or "jsonschema" in sys.modules:
        return
    spec = importlib.util.find_spec("rfc3987_syntax")
    if spec is None or spec.submodule_search_locations is None:
        return

    def real(name: str) -> Any:
        helpers = importlib.import_module("rfc3987_syntax.syntax_helpers")  # the grammar is built here
        try:
            return getattr(helpers, name)
        except AttributeError:
            raise AttributeError(f"module 'rfc3987_syntax' has no attribute {name!r}") from None

    def is_valid_syntax(term: str, value: str) -> Any:
        return real("is_valid_syntax")(term, value)

    stand_in = types.ModuleType("rfc3987_syntax", "rfc3987_syntax, loaded on first use (emqsim.grading)")
    stand_in.__spec__ = spec
    stand_in.__path__ = list(spec.submodule_search_locations)  # its submodules load from the real package
    setattr(stand_in, "is_valid_syntax", is_valid_syntax)  # what jsonschema imports  # noqa: B010
    setattr(stand_in, "__getattr__", real)  # any other name: the real one  # noqa: B010
    sys.modules["rfc3987_syntax"] = stand_in


def _read(path: Path | str) -> Any:
    """The notebook at `path` (nbformat v4), or a one-line ConfigError saying why it cannot be read."""
    defer_iri_grammar()
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
    defer_iri_grammar()
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
