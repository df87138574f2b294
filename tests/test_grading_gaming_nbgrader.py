"""Real `nbgrader autograde` on the gaming cases that attack what nbgrader does differently from `emqsim grade`
(test_grading_gaming.py holds the cases and grades every one of them with `emqsim grade`; this file is on its
own so pytest's parallel workers run the two batteries at the same time)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from test_grading_gaming import CASES, FOLDER, SOLUTIONS, STUDENT, _env, submission  # noqa: E402

# Under real nbgrader: the cases that attack what nbgrader changes. It runs the same check functions as
# `emqsim grade`, but inside the student's kernel (so the shadowing cases) and for the student its folder
# names (so the copied numbers), and it scores a cell by its outputs (so the warning on stderr); the model
# solutions show that full marks stay reachable. The other cases hand in answers that the shared checks
# reject whoever runs them; `emqsim grade` runs every case (about 5 minutes of nbgrader saved per CI run).
NBGRADER_ROUTES = ("shadow-", "copied-", "stderr-warning", "solution")
NBGRADER = [(a, c) for a, c in list(CASES) + SOLUTIONS if c.startswith(NBGRADER_ROUTES)]


# -- real nbgrader ----------------------------------------------------------------------------------------------
def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=3600,
    )


@pytest.fixture(scope="module")
def nbgrader_scores(tmp_path_factory) -> dict[tuple[str, str], dict[str, float]]:
    """Autograde every case with real nbgrader: one course, one student per case."""
    pytest.importorskip("nbgrader")
    course = tmp_path_factory.mktemp("course")
    (course / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "queues"\nc.ExecutePreprocessor.timeout = 600\n'
    )
    assignments = sorted({a for a, _ in NBGRADER})
    for assignment in assignments:
        (course / "source" / assignment).mkdir(parents=True)
        shutil.copy(FOLDER / f"{assignment}.ipynb", course / "source" / assignment)
        proc = _nbgrader(course, "generate_assignment", assignment, "--force")
        assert proc.returncode == 0, proc.stderr[-3000:]
    students = {}
    for index, (assignment, case) in enumerate(NBGRADER):
        student = f"{STUDENT}{index:02d}" if case != "copied-numbers" else STUDENT
        # copied numbers must be graded as bob exactly: alice's numbers, bob's seed
        students[(assignment, case)] = student
        submission(assignment, case, course / "submitted" / student / assignment)

    def autograde(assignment: str) -> subprocess.CompletedProcess[str]:
        return _nbgrader(course, "autograde", assignment, "--force")

    with ThreadPoolExecutor(max_workers=2) as pool:
        for proc in pool.map(autograde, assignments):
            assert proc.returncode == 0, proc.stderr[-3000:]
    from nbgrader.api import Gradebook

    scores: dict[tuple[str, str], dict[str, float]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "queues") as gb:
        for (assignment, case), student in students.items():
            nb = gb.find_submission_notebook(assignment, assignment, student)
            scores[(assignment, case)] = {
                g.name: (g.auto_score or 0.0) / g.max_score for g in nb.grades if g.cell.cell_type == "code"
            }
    return scores


@pytest.mark.slow
@pytest.mark.parametrize("key", NBGRADER, ids=[f"{a[:2]}-{c}" for a, c in NBGRADER])
def test_nbgrader_autograde_scores_gaming_below_full(key, nbgrader_scores):
    scores = nbgrader_scores[key]
    assert scores
    must_fail = None if key[1] == "solution" else CASES[key][1]
    if must_fail is None:
        assert all(s == 1.0 for s in scores.values()), f"{key}: {scores}"
    else:
        for grade_id in must_fail:
            assert scores[grade_id] == 0.0, f"{key}: {grade_id} scored under nbgrader: {scores}"
