"""The graded assignments in notebooks/assignments/: every source (solution) notebook passes its own checks, the
student version generated from it holds no solution and fails its checks, and grading is deterministic.

Grading runs `python -m emqsim grade` in subprocesses, two at a time, each notebook in its own temporary folder.
nbgrader is not needed (README.md there records the manual check against real nbgrader).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from test_grading_gaming import reports_by_path  # noqa: E402  # one parser of `grade`'s reports

from emqsim.cli import main as cli_main  # noqa: E402
from emqsim.errors import ConfigError  # noqa: E402
from emqsim.grading import (  # noqa: E402
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    END_HIDDEN,
    END_SOLUTION,
    compute_checksum,
    generate_student_version,
    grade,
    is_grade,
    is_solution,
)

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks" / "assignments"
SOURCES = sorted(FOLDER.glob("*.ipynb"))
NAMES = [
    "01-detection-latency.ipynb",
    "02-tuning-under-pauses.ipynb",
    "03-write-a-policy.ipynb",
    "04-fencing.ipynb",
    "05-missed-heartbeats.ipynb",
    "06-shortest-pause.ipynb",
]
CELL_TIMEOUT = 300  # generous: the machine may be busy with other tests; cells take seconds alone


def _env() -> dict[str, str]:
    """The kernel imports this checkout's emqsim whatever is installed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _grade_cli(paths: list[Path]) -> dict[Path, tuple[int, str, str]]:
    """`python -m emqsim grade` on several notebooks in one command: each notebook's exit status (read from the
    summary table: 0 all checks pass, 1 some fail), its report and the command's stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "emqsim", "grade", *map(str, paths), "--timeout", str(CELL_TIMEOUT)],
        capture_output=True,
        text=True,
        cwd=paths[0].parent,
        env=_env(),
        timeout=1800,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    blocks = reports_by_path(proc.stdout, paths)
    summary = proc.stdout.rsplit("\n\n", 1)[-1]
    out = {}
    for path in paths:
        row = next(line for line in summary.splitlines() if line.startswith(f"{path} "))
        code = 0 if row.endswith("all checks pass") else 1 if row.endswith("some checks fail") else 2
        # the report as `emqsim grade PATH` prints it: headed by the file's name
        out[path] = (code, blocks[str(path)].replace(str(path), path.name, 1), proc.stderr)
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[tuple[str, str], tuple[int, str, str]]:
    """Every grading the tests look at, run once: each source notebook twice (for determinism) and each student
    version once, in two commands of nine notebooks run side by side. Keys: (notebook name, "source-1" |
    "source-2" | "student")."""
    todo: dict[tuple[str, str], Path] = {}
    for src in SOURCES:
        for run in ("source-1", "source-2"):
            folder = tmp_path_factory.mktemp(f"{src.stem}-{run}")
            shutil.copy(src, folder / src.name)
            todo[(src.name, run)] = folder / src.name
        folder = tmp_path_factory.mktemp(f"{src.stem}-student")
        generate_student_version(src, folder / src.name)
        todo[(src.name, "student")] = folder / src.name
    paths = list(todo.values())
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = {k: v for part in pool.map(_grade_cli, (paths[0::2], paths[1::2])) for k, v in part.items()}
    return {key: results[path] for key, path in todo.items()}


def _status_lines(report: str) -> dict[str, str]:
    """grade_id -> status word, from a printed report."""
    out = {}
    for line in report.splitlines():
        m = re.match(r"^(\S+)\s+(\S+) / (\S+)\s+(pass|partial|fail|manual)\b", line)
        if m:
            out[m.group(1)] = m.group(4)
    return out


def _regions(source: str, begin: str, end: str) -> tuple[list[str], list[str]]:
    """(lines inside begin..end regions, lines outside them), markers excluded."""
    inside, outside, within = [], [], False
    for line in source.split("\n"):
        if begin in line:
            within = True
        elif end in line:
            within = False
        else:
            (inside if within else outside).append(line)
    return inside, outside


# -- the files ------------------------------------------------------------------------------------------------
def test_there_are_five_assignments():
    assert [p.name for p in SOURCES] == NAMES
    assert (FOLDER / "README.md").is_file()


def test_sources_match_their_build_script(capsys):
    """The notebooks are generated from their jupytext sources src/*.py by _build.py: rebuilding changes
    nothing, and the nbgrader metadata in the sources' cell headers reaches the notebooks unchanged."""
    pytest.importorskip("jupytext")
    spec = importlib.util.spec_from_file_location("assignments_build", FOLDER / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert sorted(build.sources()) == NAMES
    for name, source in build.sources().items():
        assert nbformat.writes(build.build(source)) + "\n" == (FOLDER / name).read_text(), f"rebuild {name}"
        headers = [line for line in source.read_text().splitlines() if line.startswith("# %%")]
        graded = [c for c in nbformat.read(FOLDER / name, as_version=4).cells if "nbgrader" in c.metadata]
        assert len(graded) == sum("nbgrader=" in h for h in headers) > 0, name
    assert build.main(["--check"]) == 0
    assert build.main(["--bad"]) == 2 and capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_source_is_a_valid_nbgrader_source(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3" and nb.metadata.kernelspec.language == "python"
    ids = []
    kinds = {"solution": 0, "tests": 0, "hidden": 0, "manual": 0}
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"
        meta = cell.metadata.get("nbgrader")
        has_solution = BEGIN_SOLUTION in cell.source
        has_hidden = BEGIN_HIDDEN in cell.source
        if meta is None:
            assert not has_solution and not has_hidden, f"{path.name}: a region in a cell without metadata"
            continue
        assert meta["schema_version"] == 3
        assert set(meta) <= {"grade", "grade_id", "locked", "points", "schema_version", "solution", "task"}
        ids.append(meta["grade_id"])
        if meta["solution"]:
            assert not meta["locked"] and has_solution, f"{meta['grade_id']}: solution cells hold a region"
            kinds["solution"] += cell.cell_type == "code"
            kinds["manual"] += meta["grade"]
        elif meta["grade"]:
            assert meta["locked"] and cell.cell_type == "code" and meta["points"] > 0
            kinds["tests"] += 1
            kinds["hidden"] += has_hidden
        else:
            assert meta["locked"] and not has_solution and not has_hidden
        assert cell.source.count(BEGIN_SOLUTION) == cell.source.count(END_SOLUTION)
        assert cell.source.count(BEGIN_HIDDEN) == cell.source.count(END_HIDDEN)
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate grade ids"
    assert kinds["solution"] and kinds["tests"] and kinds["hidden"] and kinds["manual"], kinds
    text = path.read_text()
    assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, "no absolute paths"


def test_hidden_seeds_are_in_a_hidden_region():
    """The instructor-changeable seeds of assignment 02 never reach students."""
    nb = nbformat.read(FOLDER / "02-tuning-under-pauses.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "q3-choose-tests")
    hidden, visible = _regions(cell.source, BEGIN_HIDDEN, END_HIDDEN)
    assert any(line.startswith("HIDDEN_SEEDS = [") for line in hidden)
    assert not any("HIDDEN_SEEDS" in line for line in visible)


# -- the student versions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_student_version_holds_no_solution(path: Path, tmp_path: Path):
    student_path = tmp_path / path.name
    generate_student_version(path, student_path)
    source = nbformat.read(path, as_version=4)
    student = nbformat.read(student_path, as_version=4)
    assert len(student.cells) == len(source.cells)

    secret, public = set(), set()
    for cell in source.cells:
        solved, rest = _regions(cell.source, BEGIN_SOLUTION, END_SOLUTION)
        hidden, rest = _regions("\n".join(rest), BEGIN_HIDDEN, END_HIDDEN)
        secret.update(line.strip() for line in solved + hidden if line.strip())
        public.update(line.strip() for line in rest if line.strip())
    secret -= public  # a line that also appears outside every region (say `)`) gives nothing away
    assert secret

    for before, after in zip(source.cells, student.cells, strict=True):
        assert after.cell_type == before.cell_type
        for marker in (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN):
            assert marker not in after.source
        leaked = [line for line in after.source.split("\n") if line.strip() in secret]
        assert not leaked, f"{path.name}: solution text in the student version: {leaked}"
        if after.cell_type == "code":
            assert after.outputs == [] and after.execution_count is None
        if is_solution(before):
            assert after.metadata["deletable"] is False
            expected = "raise NotImplementedError()" if after.cell_type == "code" else "YOUR ANSWER HERE"
            assert expected in after.source
        if is_grade(before) or is_solution(before) or before.metadata.get("nbgrader", {}).get("locked"):
            assert after.metadata.nbgrader["checksum"] == compute_checksum(after)
            assert after.metadata.nbgrader["cell_type"] == after.cell_type


# -- grading --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_source_passes_its_own_checks(name: str, graded):
    code, out, err = graded[(name, "source-1")]
    assert code == 0, f"{name}: the model solution fails its checks\n{out}\n{err[-2000:]}"
    statuses = _status_lines(out)
    assert statuses and set(statuses.values()) <= {"pass", "manual"}, out
    assert "pass" in statuses.values() and "all checks pass" in out
    assert "note:" not in out, f"{name}: an error outside the test cells\n{out}"


@pytest.mark.parametrize("name", NAMES)
def test_student_version_fails_its_checks(name: str, graded):
    code, out, err = graded[(name, "student")]
    assert code == 1, f"{name}: the unsolved starter should fail\n{out}\n{err[-2000:]}"
    statuses = _status_lines(out)
    auto = [s for s in statuses.values() if s != "manual"]
    assert auto and all(s == "fail" for s in auto), out
    assert "note:" in out and "NotImplementedError" in out, "the report should point at the unanswered code"


@pytest.mark.parametrize("name", NAMES)
def test_grading_is_deterministic(name: str, graded):
    first, second = graded[(name, "source-1")], graded[(name, "source-2")]
    assert first[:2] == second[:2], f"two gradings differ:\n{first[1]}\n---\n{second[1]}\n{second[2][-2000:]}"


def _notebook(cells: list) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    for index, cell in enumerate(nb.cells):
        cell.id = f"c{index}"
    return nb


def _cell(kind: str, source: str, grade_id: str | None = None, **meta):
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if grade_id is not None:
        cell.metadata["nbgrader"] = {
            "grade": False,
            "solution": False,
            "locked": False,
            "grade_id": grade_id,
            "schema_version": 3,
            **meta,
        }
    return cell


def test_generate_student_version_follows_nbgrader(tmp_path: Path):
    nb = _notebook(
        [
            _cell(
                "code",
                "def f(x):\n    '''Doc.'''\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n\n\nf(1)",
                "sol",
                solution=True,
            ),
            _cell("code", "y = 3", "whole", solution=True),
            _cell(
                "markdown",
                "Explain.\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION",
                "ans",
                solution=True,
                grade=True,
                points=2,
            ),
            _cell(
                "code",
                "assert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(5) == 10\n### END HIDDEN TESTS\nprint('ok')",
                "tests",
                grade=True,
                locked=True,
                points=1,
            ),
            _cell("code", "import math", "setup", locked=True),
            _cell("markdown", "Plain text."),
        ]
    )
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="old output\n")]
    nb.cells[0].execution_count = 4
    nb.metadata["celltoolbar"] = "Create Assignment"
    src, dst = tmp_path / "src.ipynb", tmp_path / "out" / "student.ipynb"
    nbformat.write(nb, src)
    generate_student_version(src, dst)
    out = nbformat.read(dst, as_version=4)
    assert out.cells[0].source == (
        "def f(x):\n    '''Doc.'''\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n\nf(1)"
    )
    assert out.cells[0].outputs == [] and out.cells[0].execution_count is None
    assert out.cells[1].source == "# YOUR CODE HERE\nraise NotImplementedError()"
    assert out.cells[2].source == "Explain.\nYOUR ANSWER HERE"
    assert out.cells[3].source == "assert f(1) == 2\nprint('ok')"
    assert out.cells[4].source == "import math" and out.cells[5].source == "Plain text."
    assert out.cells[0].metadata == {
        "deletable": False,
        "nbgrader": {
            **nb.cells[0].metadata["nbgrader"],
            "checksum": compute_checksum(out.cells[0]),
            "cell_type": "code",
        },
    }
    assert out.cells[3].metadata["editable"] is False and out.cells[3].metadata["deletable"] is False
    assert out.cells[4].metadata["editable"] is False and "nbgrader" in out.cells[4].metadata
    assert "checksum" not in out.cells[5].metadata.get("nbgrader", {})
    assert "celltoolbar" not in out.metadata


@pytest.mark.parametrize(
    "cell, message",
    [
        (_cell("code", "### BEGIN SOLUTION\nx = 1", "a", solution=True), "without a matching"),
        (_cell("code", "x = 1\n### END SOLUTION", "a", solution=True), "without a '"),
        (
            _cell("code", "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "a", solution=True),
            "nested",
        ),
        (_cell("code", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION"), "not marked as a solution"),
        (_cell("code", "### BEGIN HIDDEN TESTS\nx = 1\n### END HIDDEN TESTS", "a", locked=True), "grade"),
    ],
)
def test_generate_student_version_rejects_bad_regions(cell, message: str, tmp_path: Path):
    src = tmp_path / "bad.ipynb"
    nbformat.write(_notebook([cell]), src)
    with pytest.raises(ConfigError, match=message):
        generate_student_version(src, tmp_path / "out.ipynb")
    assert not (tmp_path / "out.ipynb").exists()


def test_bad_notebooks_are_one_line_config_errors(tmp_path: Path, capsys):
    with pytest.raises(ConfigError, match="not found"):
        grade(tmp_path / "missing.ipynb")
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [')
    with pytest.raises(ConfigError, match="not a readable notebook"):
        grade(broken)
    with pytest.raises(ConfigError, match="not found"):
        generate_student_version(tmp_path / "missing.ipynb", tmp_path / "out.ipynb")
    plain = tmp_path / "plain.ipynb"
    nbformat.write(_notebook([_cell("code", "x = 1")]), plain)
    with pytest.raises(ConfigError, match="no autograded test cells"):
        grade(plain)
    duplicate = tmp_path / "duplicate.ipynb"
    nbformat.write(
        _notebook([_cell("code", "x = 1", "a", locked=True), _cell("code", "y = 1", "a", locked=True)]),
        duplicate,
    )
    with pytest.raises(ConfigError, match="duplicate grade_id"):
        grade(duplicate)
    with pytest.raises(ConfigError, match="timeout"):
        grade(plain, timeout=0)
    # through the CLI: exit status 2 and ONE line on stderr
    assert cli_main(["grade", str(broken)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        "emqsim grade: error: broken.ipynb is not a readable"
    )


def test_grading_follows_nbgrader_rules(tmp_path: Path, monkeypatch, capsys):
    """Pass, error, stderr and partial credit; a manual answer is listed but not counted; the exit status."""
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    tests = {"points": 2, "grade": True, "locked": True}
    nb = _notebook(
        [
            _cell(
                "code",
                "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION",
                "q",
                solution=True,
            ),
            _cell("code", "assert answer() == 42", "passes", **tests),
            _cell("code", "assert answer() == 41, 'wrong at 0x7f00aa'", "raises", **tests),
            _cell("code", "import sys\nprint('careful', file=sys.stderr)", "stderr", **tests),
            _cell("code", "1.5", "partial", **tests),
            _cell("code", "with open('here.txt', 'w') as fh:\n    fh.write('x')", "writes", **tests),
            _cell("markdown", "YOUR ANSWER HERE", "essay", grade=True, solution=True, points=3),
        ]
    )
    path = tmp_path / "mini.ipynb"
    nbformat.write(nb, path)
    before = path.read_text()
    assert cli_main(["grade", str(path), "--timeout", "120"]) == 1
    report = capsys.readouterr().out
    assert _status_lines(report) == {
        "passes": "pass",
        "raises": "fail",
        "stderr": "fail",
        "partial": "partial",
        "writes": "pass",
        "essay": "manual",
    }
    assert "AssertionError: wrong at 0x..." in report and "wrote to stderr: careful" in report
    assert re.search(
        r"^autograded\s+5\.5 / 10\s+some checks fail \(3 more points graded by hand\)$", report, re.M
    )
    assert not (tmp_path / "here.txt").exists(), "the notebook runs in a private copy of its folder"
    assert path.read_text() == before, "grading never changes the notebook"


# -- grading runs the notebook's code: isolated, bounded, nothing left behind ------------------------------------
def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see whether a process survived")
def test_grading_leaves_no_process_behind(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    pids = tmp_path / "pids"
    spawn = (
        "import subprocess, sys\n"
        f"PIDS = {str(pids)!r}\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "subprocess.run(['sh', '-c', 'sleep 600 > /dev/null 2>&1 & echo $! >> ' + PIDS])\n"
        "with open(PIDS, 'a') as fh:\n    fh.write(f'{child.pid}\\n')"
    )
    nb = _notebook(
        [_cell("code", spawn), _cell("code", "assert True", "t", grade=True, locked=True, points=1)]
    )
    folder = tmp_path / "sub"
    folder.mkdir()
    nbformat.write(nb, folder / "spawn.ipynb")
    assert cli_main(["grade", str(folder / "spawn.ipynb"), "--timeout", "120"]) == 0, capsys.readouterr()
    started = [int(x) for x in pids.read_text().split()]
    assert len(started) == 2
    assert not [pid for pid in started if _alive(pid)], "a process the notebook started outlived grading"


def test_grading_stops_at_the_wall_clock_limit(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    nb = _notebook([_cell("code", "while True:\n    pass", "loop", grade=True, locked=True, points=1)])
    nbformat.write(nb, tmp_path / "loop.ipynb")
    code = cli_main(["grade", str(tmp_path / "loop.ipynb"), "--timeout", "600", "--time-limit", "20"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "longer than the 20 s limit (--time-limit)" in err


def test_grading_several_notebooks(tmp_path: Path, monkeypatch, capsys):
    """A class's submissions in one command: every notebook checked before any runs (a bad one stops the
    command with one line, nothing graded); then each report headed by its path as it finishes, a notebook that
    cannot be graded is one line on stderr and the others are graded, and a summary table; the exit status is
    the worst notebook's."""
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    tests = {"points": 1, "grade": True, "locked": True}
    paths = {}
    for student, body in (
        ("ann", "x = 1"),
        ("ben", "x = 2"),
        ("cat", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
    ):
        folder = tmp_path / "submitted" / student / "mini"
        folder.mkdir(parents=True)
        nb = _notebook([_cell("code", body), _cell("code", "assert x == 1", "x-test", **tests)])
        nbformat.write(nb, folder / "mini.ipynb")
        paths[student] = folder / "mini.ipynb"
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [')

    assert cli_main(["grade", str(paths["ann"]), str(broken)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", "a bad notebook stops the command before any notebook runs"
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        f"emqsim grade: error: {broken} is not a readable"
    ), err

    # cat's notebook kills the process that runs it: it cannot be graded, at once and on any machine (a time
    # limit would also stop a slow honest run on a loaded one; test_grading_stops_at_the_wall_clock_limit has it)
    code = cli_main(["grade", *map(str, paths.values()), "--timeout", "120"])
    captured = capsys.readouterr()
    assert code == 2, captured
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"emqsim grade: error: {paths['cat']}: "), err
    assert "running mini.ipynb failed" in err
    blocks = captured.out.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [
        str(paths["ann"]),
        str(paths["ben"]),
        "2 of 3 notebooks graded",
    ]
    assert _status_lines(blocks[0]) == {"x-test": "pass"} and _status_lines(blocks[1]) == {"x-test": "fail"}
    summary = blocks[2].splitlines()
    assert re.match(rf"^{re.escape(str(paths['ann']))}\s+1 / 1\s+all checks pass$", summary[2])
    assert re.match(rf"^{re.escape(str(paths['ben']))}\s+0 / 1\s+some checks fail$", summary[3])
    assert re.match(
        rf"^{re.escape(str(paths['cat']))}\s+-\s+not graded: running mini\.ipynb failed", summary[4]
    )

    # two that grade: the worst status is 1
    assert cli_main(["grade", str(paths["ann"]), str(paths["ben"]), "--timeout", "120"]) == 1
    assert capsys.readouterr().out.endswith("some checks fail\n")


def test_grading_runs_in_a_private_copy(tmp_path: Path, monkeypatch, capsys):
    """Relative writes land in the grader's private copy, one folder up in its private folder, two up beside
    it (in the grader's temporary folder, here under tmp_path: the kernel runs as the grading user, which
    README says to contain); the submission and its folders stay as they were."""
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    scratch = tmp_path / "grader-tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the grader's private folders, not the system's
    folder = tmp_path / "course" / "alice"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("input")
    writes = (
        "assert open('data.txt').read() == 'input'\n"
        "open('data.txt', 'w').write('changed')\n"
        "open('../escape.txt', 'w').write('x')\n"
        "open('../../escape.txt', 'w').write('x')"
    )
    nb = _notebook([_cell("code", writes, "w", grade=True, locked=True, points=1)])
    nbformat.write(nb, folder / "writes.ipynb")
    before = (folder / "writes.ipynb").read_bytes()
    assert cli_main(["grade", str(folder / "writes.ipynb"), "--timeout", "120"]) == 0, capsys.readouterr()
    assert (folder / "data.txt").read_text() == "input"
    assert not (tmp_path / "course" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    assert [p.name for p in scratch.iterdir()] == ["escape.txt"], "the private folder was not removed"
    assert sorted(p.name for p in folder.iterdir()) == ["data.txt", "writes.ipynb"]
    assert (folder / "writes.ipynb").read_bytes() == before


def test_shell_commands_in_test_cells_are_reported(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    tests = {"points": 1, "grade": True, "locked": True}
    nb = _notebook(
        [
            _cell("code", "import os\nos.system('true')", "system", **tests),
            _cell("code", "!true", "bang", **tests),
            _cell("code", "import subprocess\nsubprocess.run(['true'])", "sub", **tests),
            _cell("code", "assert 1 + 1 == 2", "plain", **tests),
        ]
    )
    nbformat.write(nb, tmp_path / "shell.ipynb")
    assert cli_main(["grade", str(tmp_path / "shell.ipynb"), "--timeout", "120"]) == 1
    report = capsys.readouterr().out
    assert _status_lines(report) == {"system": "fail", "bang": "fail", "sub": "fail", "plain": "pass"}
    assert (
        report.count("runs a shell command") >= 3
        and "note: system: a test cell runs a shell command" in report
    )


def test_grade_help_says_it_runs_the_code(capsys):
    with pytest.raises(SystemExit):
        cli_main(["grade", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "runs the notebook's code" in text and "unprivileged user or in a container" in text


# -- the instructor's guide, followed ---------------------------------------------------------------------------
def _guide_blocks() -> list[str]:
    text = (FOLDER / "README.md").read_text()
    return re.findall(r"^```sh\n(.*?)^```$", text, re.S | re.M)


def test_guide_installs_from_a_clone():
    install = _guide_blocks()[0]
    assert "git clone" in install and 'pip install -e ".[notebooks]" nbgrader' in install
    assert "python -m emqsim assignments check" in install


@pytest.mark.slow
def test_instructor_guide_works_when_followed(tmp_path: Path):
    """Steps 2 to 5 of README.md, run as written in a temporary folder (one assignment, for time): a course with
    released student versions, the model solution autograded by real nbgrader, grades exported."""
    pytest.importorskip("nbgrader")
    script = "set -euo pipefail\n" + "\n".join(_guide_blocks()[1:])
    env = {
        **_env(),
        "EMQSIM": str(ROOT),
        "ASSIGNMENTS": "01-detection-latency",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    proc = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    course = tmp_path / "queues-course"
    released = course / "release" / "01-detection-latency" / "01-detection-latency.ipynb"
    assert released.is_file() and (course / "release" / "STUDENTS.md").is_file()
    assert BEGIN_SOLUTION not in released.read_text() and BEGIN_HIDDEN not in released.read_text()
    import csv

    rows = list(csv.DictReader((course / "grades.csv").open()))
    demo = [r for r in rows if r["student_id"] == "demo-student"]
    assert len(demo) == 1 and float(demo[0]["raw_score"]) == 6.0, rows


def test_assignments_cli_release(tmp_path: Path, capsys):
    assert cli_main(["assignments", "release", "--out", str(tmp_path / "rel")]) == 0
    written = capsys.readouterr().out.split()
    assert len(written) == len(NAMES) + 1 and (tmp_path / "rel" / "STUDENTS.md").is_file()
    for name in NAMES:
        text = (tmp_path / "rel" / name.removesuffix(".ipynb") / name).read_text()
        assert (
            BEGIN_SOLUTION not in text and BEGIN_HIDDEN not in text and "raise NotImplementedError()" in text
        )
    (tmp_path / "file").write_text("x")
    assert cli_main(["assignments", "release", "--out", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_emqsim_imports_without_the_notebook_tools():
    """The package, its CLI and the assignments module import without nbformat; the command says what to
    install in one line."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('nbformat', 'nbclient', 'ipykernel'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import emqsim, emqsim.grading, emqsim.assignments\n"
        "from emqsim.cli import main\n"
        "sys.exit(main(['assignments', 'release', '--out', 'x']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "emqsim[notebooks]" in proc.stderr


def test_assignments_cli_check(tmp_path: Path, monkeypatch, capsys):
    """`assignments check` on a small source folder: the solution passes and the release scores 0 (exit 0);
    a solution that fails its own tests is reported (exit 1)."""
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])

    def assignment(answer: int) -> nbformat.NotebookNode:
        return _notebook(
            [
                _cell(
                    "code",
                    f"def f():\n    ### BEGIN SOLUTION\n    return {answer}\n    ### END SOLUTION",
                    "q",
                    solution=True,
                ),
                _cell(
                    "code",
                    "assert f() in (2, 3)\n### BEGIN HIDDEN TESTS\nassert f() == 2\n### END HIDDEN TESTS",
                    "t",
                    grade=True,
                    locked=True,
                    points=1,
                ),
            ]
        )

    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    nbformat.write(assignment(2), good / "a.ipynb")
    nbformat.write(assignment(3), bad / "a.ipynb")
    assert cli_main(["assignments", "check", "--source", str(good), "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^a\.ipynb\s+1 / 1\s+0 / 1\s+\d+ s\s+ok$", out, re.M), out
    assert cli_main(["assignments", "check", "--source", str(bad), "--timeout", "120"]) == 1
    assert "the solution fails t" in capsys.readouterr().out
    assert cli_main(["assignments", "check", "--source", str(tmp_path / "none")]) == 2


SWALLOW = """import contextlib


class Swallow:
    def __init__(self, target):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


contextlib.redirect_stdout = Swallow"""


def test_checks_in_one_process_give_the_verdicts_of_one_process_per_cell(tmp_path: Path):
    """`run_checks_in_order` (one process, a fork per test cell) gives every test cell the verdict `run_checks`
    (a fresh process re-running the cells above it) gives: passes, failures, an answer that raises, one that
    patches a library, names missing, a check that exits or hangs, and answers that try to forge a pass by
    replacing json.dumps, contextlib.redirect_stdout (to swallow the failed assertion) or the grader's own
    snapshot check."""
    from emqsim.grading import run_checks, run_checks_in_order

    answer = {"solution": True}
    cells = [
        _cell("code", "import math\nBASE = 40", "setup", locked=True),
        _cell("code", "def f():\n    return BASE + 2", "q1", **answer),
        _cell("code", "", "t1", grade=True, locked=True, points=1),
        _cell("code", "def g():\n    return 1", "q2", **answer),
        _cell("code", "", "t2", grade=True, locked=True, points=1),
        _cell(
            "code",
            'import json\njson.dumps = lambda *a, **k: \'{"ok": true, "message": "forged"}\'',
            "q3",
            **answer,
        ),
        _cell("code", "", "t3", grade=True, locked=True, points=1),
        _cell("code", "", "t4", grade=True, locked=True, points=1),
        _cell("code", "", "t5", grade=True, locked=True, points=1),
        _cell("code", SWALLOW, "q6", **answer),
        _cell("code", "", "t8", grade=True, locked=True, points=1),
        _cell("code", "import emqsim.grading\nemqsim.grading._changed = lambda snap: None", "q7", **answer),
        _cell("code", "", "t9", grade=True, locked=True, points=1),
        _cell("code", "import math\nmath.pi = 3", "q4", **answer),
        _cell("code", "", "t6", grade=True, locked=True, points=1),
        _cell("code", "raise ValueError('broken')", "q5", **answer),
        _cell("code", "", "t7", grade=True, locked=True, points=1),
    ]
    path = tmp_path / "mini.ipynb"
    nbformat.write(_notebook(cells), path)
    calls = [
        ("t1", ["f"], "assert f() == 42\nprint('fine')"),
        ("t2", ["g"], "assert g() == 2, 'g is wrong'"),
        ("t3", ["f"], "assert f() == 0, 'f is 42'"),
        ("t4", ["h"], "assert h()"),
        ("t5", ["f"], "import os\nos._exit(0)"),
        ("t8", ["f"], "assert f() == 0, 'f is 42'"),
        ("t9", ["f"], "assert f() == 42"),
        ("t6", ["f"], "assert f() == 42"),
        ("t7", ["f"], "assert f() == 42"),
    ]
    batch = run_checks_in_order(path, calls, timeout=60)
    for test_id, names, checks in calls:
        assert batch[test_id] == run_checks(path, test_id, names, checks, timeout=60), test_id
    assert batch["t1"].ok and "fine" in batch["t1"].message
    assert not batch["t3"].ok and batch["t3"].message == "t3: f is 42 (check line 1)"
    assert [batch[t].ok for t in ("t2", "t4", "t5", "t6", "t7", "t8", "t9")] == [False] * 7
    assert batch["t8"].message == "t8: f is 42 (check line 1)", "a swallowing redirect_stdout is not used"
    assert "emqsim.grading._changed" in batch["t9"].message
    assert "ValueError: broken" in batch["t7"].message and "math.pi" in batch["t6"].message
    hang = run_checks_in_order(
        path, [("t1", ["f"], "while True:\n    pass"), ("t2", ["g"], "assert g() == 1")], timeout=5
    )
    assert not hang["t1"].ok and "did not finish within 5 s" in hang["t1"].message
    assert hang["t2"].ok, "a hung check does not take the next test cell with it"
