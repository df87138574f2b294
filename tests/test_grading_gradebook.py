"""nbgrader with the same trust: `nbgrader autograde` scores a submission from the student's own kernel, so an
answer cell that walks the frames of the in-kernel checker forges its verdict; `emqsim assignments record`
then writes the trusted grader's scores into the gradebook in their place, and `nbgrader export` exports those
(the route notebooks/assignments/README.md recommends for credit)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbgrader")
import test_grading_gaming  # noqa: E402
from test_grading_gaming import FOLDER, FRAME_WALK, UNANSWERED, _env, submission  # noqa: E402

ASSIGNMENT = "01-detection-latency"


@pytest.mark.slow
def test_record_replaces_nbgraders_scores_by_the_trusted_ones(tmp_path: Path):
    course = tmp_path / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "queues"\nc.ExecutePreprocessor.timeout = 600\n'
    )
    shutil.copy(FOLDER / f"{ASSIGNMENT}.ipynb", course / "source" / ASSIGNMENT)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *args],
            cwd=course,
            capture_output=True,
            text=True,
            env=_env(),
            timeout=3600,
        )

    assert run("nbgrader", "generate_assignment", ASSIGNMENT, "--force").returncode == 0
    test_grading_gaming.CASES[(ASSIGNMENT, "gradebook-frame-walk")] = (
        {"*": UNANSWERED, "q1-predict": FRAME_WALK},
        None,
    )
    try:
        submission(ASSIGNMENT, "solution", course / "submitted" / "demo" / ASSIGNMENT)
        submission(ASSIGNMENT, "gradebook-frame-walk", course / "submitted" / "mallory" / ASSIGNMENT)
    finally:
        del test_grading_gaming.CASES[(ASSIGNMENT, "gradebook-frame-walk")]
    proc = run("nbgrader", "autograde", ASSIGNMENT, "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    from nbgrader.api import Gradebook

    def scores() -> dict[str, float]:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "queues") as gb:
            return {
                s: sum(g.auto_score or 0.0 for g in gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, s).grades
                       if g.cell.cell_type == "code")
                for s in ("demo", "mallory")
            }  # fmt: skip

    untrusted = scores()
    proc = run("emqsim", "assignments", "record", ASSIGNMENT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    trusted = scores()
    assert trusted == {"demo": 6.0, "mallory": 0.0}, (untrusted, trusted, proc.stdout)
    # the limit the guide states: under plain nbgrader autograde the frame walk forges the verdict
    assert untrusted["mallory"] > 0, untrusted
    proc = run("nbgrader", "export")
    assert proc.returncode == 0
    rows = {line.split(",")[0]: line for line in (course / "grades.csv").read_text().splitlines()}
    assert rows, rows


def test_record_says_what_is_missing_in_one_line(tmp_path: Path, capsys):
    from emqsim.cli import main

    assert main(["assignments", "record", ASSIGNMENT, "--course", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gradebook.db" in err[0] and "nbgrader autograde" in err[0], err
