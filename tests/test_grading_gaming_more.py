"""The second half of test_grading_gaming.py's `emqsim grade` battery (its module docstring says what the cases
are), in its own file so pytest's parallel workers grade the two halves at the same time; and a kernel that
replaces the checker."""

from __future__ import annotations

import subprocess
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from test_grading_gaming import (  # noqa: E402
    FOLDER,
    SECOND_HALF,
    STUDENT,
    _env,
    _statuses,
    _strip_markers,
    battery,
    grade_all,
    is_solution,
    judge,
)

HERE = battery(SECOND_HALF)


@pytest.fixture(scope="module")
def emqsim_grades(tmp_path_factory) -> dict[tuple[str, str], str]:
    return grade_all(HERE, tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("key", HERE, ids=[f"{a[:2]}-{c}" for a, c in HERE])
def test_emqsim_grade_scores_gaming_below_full(key, emqsim_grades):
    judge(key, emqsim_grades[key])


@pytest.mark.slow
def test_emqsim_grade_ignores_a_kernel_that_replaces_the_checker(tmp_path):
    """An answer that replaces `emqsim.grading.check_answers` inside the kernel makes every later test cell
    print whatever it likes. nbgrader scores the kernel's output, so it is fooled (the documented limit,
    notebooks/assignments/README.md); `python -m emqsim grade` runs the checks outside the kernel and is not."""
    nb = nbformat.read(FOLDER / "01-detection-latency.ipynb", as_version=4)
    for cell in nb.cells:
        if is_solution(cell):
            cell.source = _strip_markers(cell.source)
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "q1-predict":
            cell.source = (
                "import emqsim.grading\n"
                "emqsim.grading.check_answers = lambda *args, **kwargs: print('all checks pass')\n\n\n"
                "def predict_detection(lease, beat, scan):\n    return 1.0, 0.0, 2.0"
            )
    folder = tmp_path / "patched"
    folder.mkdir()
    nbformat.write(nb, folder / "01-detection-latency.ipynb")
    proc = subprocess.run(
        [sys.executable, "-m", "emqsim", "grade", str(folder / "01-detection-latency.ipynb"),
         "--against", str(FOLDER / "01-detection-latency.ipynb"), "--student", STUDENT],
        capture_output=True, text=True, env=_env(), timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert _statuses(proc.stdout)["q1-predict-tests"] == "fail", proc.stdout
