"""Build the assignment notebooks (nbgrader SOURCE versions, with solutions) from their sources in src/.

    python notebooks/assignments/_build.py            # rebuild every assignment in place
    python notebooks/assignments/_build.py --check    # exit 1, naming them, if a notebook differs from its source

Each source `src/NN-name.py` is a jupytext `py:percent` file (read by notebooks/_build.py's `read_source`). Its
cell headers carry the nbgrader 0.9 metadata (schema 3) verbatim, e.g.
`# %% nbgrader={"grade": true, "grade_id": "q1-tests", "locked": true, "points": 2, ...}`, so the built notebook
holds exactly what nbgrader reads: `solution` cells hold `### BEGIN SOLUTION` regions, `grade` code cells are
autograded (hidden tests between `### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`), `grade` Markdown cells
are graded by hand, `locked` cells are restored by nbgrader before autograding. An autograded cell runs its
checks in a fresh process on the student's saved answers (`emqsim.grading.check_answers`), so its checks sit in
a raw string in the cell. Edit a source, rebuild, and commit both; tests/test_assignments.py checks that a
rebuild changes nothing and grades every notebook.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_notebook

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"


def _read_source():
    """notebooks/_build.py's `read_source` (one reader for the lessons and the assignments)."""
    spec = importlib.util.spec_from_file_location("notebooks_build", HERE.parent / "_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.read_source


def sources() -> dict[str, Path]:
    """Each assignment's notebook name and its source, in order."""
    return {f"{p.stem}.ipynb": p for p in sorted(SOURCES.glob("[0-9][0-9]-*.py"))}


def build(source: Path) -> nbformat.NotebookNode:
    """The nbgrader source notebook built from `source`, with stable cell ids (a grade id, else its index)."""
    nb = new_notebook(cells=_read_source()(source))
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{index:02d}"  # stable ids: a rebuild changes nothing it need not
    nbformat.validate(nb)
    return nb


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: python notebooks/assignments/_build.py [--check]", file=sys.stderr)
        return 2
    stale = []
    for name, source in sources().items():
        text = nbformat.writes(build(source)) + "\n"
        if argv:
            if not (HERE / name).is_file() or (HERE / name).read_text() != text:
                stale.append(name)
                print(f"{name} differs from src/{source.name}; rebuild: python notebooks/assignments/_build.py",
                      file=sys.stderr)  # fmt: skip
            continue
        (HERE / name).write_text(text)
        print(HERE / name)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
