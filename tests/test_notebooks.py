"""Every teaching notebook runs top to bottom without an error, in a scratch copy of the working tree, and is
stored with its outputs cleared."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))  # not notebooks/assignments/
CELL_TIMEOUT = 180


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of the notebooks and the package, so a notebook that writes files cannot touch the checkout."""
    tmp = tmp_path_factory.mktemp("work")
    shutil.copytree(
        ROOT / "notebooks", tmp / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints")
    )
    shutil.copytree(ROOT / "emqsim", tmp / "emqsim", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def test_there_are_notebooks():
    names = [p.name for p in NOTEBOOKS]
    assert names[:4] == [
        "01-timeout-vs-lease.ipynb",
        "02-tuning.ipynb",
        "03-where-leases-fail.ipynb",
        "04-real-systems.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path: Path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"
    text = path.read_text()
    assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, "no absolute paths"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, workdir: Path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(workdir), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(workdir / "notebooks" / path.name, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir / "notebooks")}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell (run time: benchmarks/, not here)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_a_lesson(path: Path):
    """A question, a cell for the reader's prediction before any answer, the controls (the two columns, the
    rule, lease, beat, timeout, freeze length, loss rate and job length), and what to look for."""
    nb = nbformat.read(path, as_version=4)
    sources = [c.source for c in nb.cells]
    where = {
        name: next(i for i, s in enumerate(sources) if name in s)
        for name in ("## The question", "Predict before you run", "explorer(", "What to look for")
    }
    assert (
        where["## The question"]
        < where["Predict before you run"]
        < where["explorer("]
        < where["What to look for"]
    )
    assert "from emqsim.lesson_widgets import explorer" in sources[where["explorer("]]
    controls = (ROOT / "emqsim" / "lesson_widgets.py").read_text()  # the one explorer every lesson imports
    for control in ('"column"', '"rule"', '"lease"', '"beat"', '"timeout"', '"freeze"', '"loss"', '"job"'):
        assert control in controls, f"{path.name}: no {control} control"
    assert "slow-alive" in controls and "fast-dead" in controls


def test_quoted_numbers_come_from_the_run():
    """The sentences the old text got wrong are now computed from the run (rendered with say(...))."""
    text = "\n".join(
        c.source for p in NOTEBOOKS for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown"
    )
    for stale in (
        "a few percent above",
        "8 workers with 4 slots",
        "comes from 40 jobs",
        "lie on top of each other",
        "KS p-value",
    ):
        assert stale not in text, stale
