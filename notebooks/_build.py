"""Build the lessons, notebooks/NN-*.ipynb, from their sources notebooks/src/NN-*.py: `python notebooks/_build.py`.

A source is a jupytext `py:percent` file: `# %%` starts a code cell, `# %% [markdown]` a Markdown cell (its
lines commented out), and the cell's metadata sits in its header, e.g. `# %% tags=["predict:four"]` (the
lessons' predict/reveal/answer tags, checked by tests/test_lessons.py) or `# %% jupyter={"source_hidden": true}`.
The sources are what you edit, review, lint (`ruff check notebooks`) and type-check; the notebooks are built
from them with stable cell ids and their outputs cleared, so an unchanged source rebuilds to the same bytes
(tests/test_lessons.py checks it). Edit a source, rebuild, and commit both.

    python notebooks/_build.py            # rebuild every lesson in place
    python notebooks/_build.py DIR        # write them to DIR instead
    python notebooks/_build.py --check    # exit 1, naming them, if a notebook differs from its source

notebooks/assignments/_build.py builds the assignments the same way, with this file's `read_source`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"


def read_source(path: Path) -> list[nbformat.NotebookNode]:
    """The cells of the py:percent source `path`: their type, text and metadata, nothing else (no outputs,
    no execution counts, no ids: the builders give stable ones)."""
    parsed = jupytext.read(path, fmt="py:percent")
    cells = []
    for cell in parsed.cells:
        if cell.cell_type not in ("code", "markdown"):
            raise ValueError(
                f"{path.name}: a {cell.cell_type} cell; the notebooks hold code and Markdown only"
            )
        make = new_code_cell if cell.cell_type == "code" else new_markdown_cell
        cells.append(make(cell.source, metadata=dict(cell.metadata)))
    return cells


def lesson(path: Path) -> nbformat.NotebookNode:
    """The lesson notebook built from the source `path` (notebooks/src/NN-name.py)."""
    nb = new_notebook(cells=read_source(path))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell.id = f"{path.name[:2]}-{i:02d}"  # stable ids: rebuilding an unchanged notebook changes no bytes
    return nb


def sources() -> list[Path]:
    """The lessons' sources, in order."""
    return sorted(SOURCES.glob("[0-9][0-9]-*.py"))


def build(folder: Path = HERE) -> list[Path]:
    """Write every lesson to `folder` (the notebooks/ folder itself by default); returns the paths written."""
    paths = []
    for source in sources():
        path = folder / f"{source.stem}.ipynb"
        nbformat.write(lesson(source), path)
        paths.append(path)
    return paths


def stale(folder: Path = HERE) -> list[str]:
    """The lessons in `folder` that differ from what their sources build (or are missing)."""
    out = []
    for source in sources():
        path = folder / f"{source.stem}.ipynb"
        if not path.is_file() or path.read_text() != nbformat.writes(lesson(source)) + "\n":
            out.append(path.name)
    return out


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        differ = stale()
        for name in differ:
            print(
                f"{name} differs from its source; rebuild with: python notebooks/_build.py", file=sys.stderr
            )
        return 1 if differ else 0
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python notebooks/_build.py [DIR | --check]", file=sys.stderr)
        return 2
    for p in build(Path(argv[0]) if argv else HERE):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
