"""The kernel's checker session (`check_answers` in a student's kernel or under real nbgrader): one process per
notebook file runs each saved cell once and forks at each check, and every verdict is the one `run_checks` (a
fresh process re-running the cells above the test cell) gives: passes, failures, an answer that raises, one
that patches a library or the checks' context, names missing, a check that exits or hangs, forged passes, an
edited cell, a check of an earlier cell, an answer that hangs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from test_assignments import SWALLOW, _cell, _notebook  # noqa: E402

from emqsim.grading import run_checks, run_checks_in_order  # noqa: E402
from emqsim.grading.checker import _CheckerSessions  # noqa: E402

ANSWER = {"solution": True}
TEST = {"grade": True, "locked": True, "points": 1}
HANG = "import time\nwhile True:\n    time.sleep(0.05)"  # hangs without taking a core
WRITTEN = 'from emqsim.grading import written_in_notebook\nwritten_in_notebook("f")\nassert f() == 42'


def _mini(path: Path, q1: str = "def f():\n    return BASE + 2") -> Path:
    cells = [
        _cell("code", "import math\nBASE = 40", "setup", locked=True),
        _cell("code", q1, "q1", **ANSWER),
        _cell("code", "", "t1", **TEST),
        _cell("code", "def g():\n    return 1", "q2", **ANSWER),
        _cell("code", "", "t2", **TEST),
        _cell("code", "", "t10", **TEST),
        _cell(
            "code",
            'import json\njson.dumps = lambda *a, **k: \'{"ok": true, "message": "forged"}\'',
            "q3",
            **ANSWER,
        ),
        _cell("code", "", "t3", **TEST),
        _cell("code", "", "t4", **TEST),
        _cell("code", "", "t5", **TEST),
        _cell("code", SWALLOW, "q6", **ANSWER),
        _cell("code", "", "t8", **TEST),
        _cell(
            "code", "from emqsim.grading.checks import CONTEXT\nCONTEXT['student'] = 'alice'", "q8", **ANSWER
        ),
        _cell("code", "", "t11", **TEST),
        _cell("code", "import emqsim.grading\nemqsim.grading._changed = lambda snap: None", "q7", **ANSWER),
        _cell("code", "", "t9", **TEST),
        _cell("code", "import math\nmath.pi = 3", "q4", **ANSWER),
        _cell("code", "", "t6", **TEST),
        _cell("code", "raise ValueError('broken')", "q5", **ANSWER),
        _cell("code", "", "t7", **TEST),
        _cell("code", "", "t12", **TEST),
    ]
    nbformat.write(_notebook(cells), path)
    return path


CALLS = [
    ("t1", ["f"], "assert f() == 42\nprint('fine')"),
    ("t2", ["g"], "assert g() == 2, 'g is wrong'"),
    ("t10", ["f"], WRITTEN),
    ("t3", ["f"], "assert f() == 0, 'f is 42'"),
    ("t4", ["h"], "assert h()"),
    ("t5", ["f"], "import os, sys\nprint('leaving', file=sys.stderr)\nos._exit(0)"),
    ("t8", ["f"], "assert f() == 0, 'f is 42'"),
    ("t11", ["f"], WRITTEN),
    ("t9", ["f"], "assert f() == 42"),
    ("t6", ["f"], "assert f() == 42"),
    ("t7", ["f"], "assert f() == 42"),
    ("t12", ["f"], "assert f() == 42"),
]


@pytest.mark.slow
def test_a_session_gives_every_verdict_a_fresh_process_gives(tmp_path: Path):
    path = _mini(tmp_path / "mini.ipynb")
    sessions = _CheckerSessions()
    try:
        got = {}
        pids = set()
        for test_id, names, checks in CALLS:
            got[test_id] = sessions.check(path, test_id, names, checks, timeout=60)
            pids.add(sessions.sessions[path.resolve()].proc.pid)
        assert len(pids) == 1, "one session ran every check"
    finally:
        sessions.close_all()
    for test_id, names, checks in CALLS:
        assert got[test_id] == run_checks(path, test_id, names, checks, timeout=60), test_id
    assert got["t1"].ok and "fine" in got["t1"].message and got["t10"].ok
    assert not got["t3"].ok and got["t3"].message == "t3: f is 42 (check line 1)"
    assert got["t8"].message == "t8: f is 42 (check line 1)", "a swallowing redirect_stdout is not used"
    assert "CONTEXT" in got["t11"].message and "emqsim.grading._changed" in got["t9"].message
    assert "ValueError: broken" in got["t7"].message and "math.pi" in got["t6"].message
    assert got["t5"].message.endswith("did an answer exit?): leaving")


def test_run_checks_in_order_shows_the_checks_the_answer_cells(tmp_path: Path):
    """The one-process-for-several-cells route gives written_in_notebook the answer cells too."""
    path = _mini(tmp_path / "mini.ipynb")
    calls = [c for c in CALLS if c[0] in ("t1", "t10", "t11")]
    batch = run_checks_in_order(path, calls, timeout=60)
    for test_id, names, checks in calls:
        assert batch[test_id] == run_checks(path, test_id, names, checks, timeout=60), test_id
    assert batch["t10"].ok and not batch["t11"].ok


def test_an_edited_cell_or_an_earlier_check_starts_a_new_session(tmp_path: Path):
    path = _mini(tmp_path / "mini.ipynb")
    sessions = _CheckerSessions()
    try:
        assert sessions.check(path, "t2", ["f"], "assert f() == 42", timeout=60).ok
        first = sessions.sessions[path.resolve()].proc
        _mini(path, q1="def f():\n    return BASE")  # the student edits q1 and saves
        edited = sessions.check(path, "t2", ["f"], "assert f() == 42, 'f is not 42'", timeout=60)
        assert edited == run_checks(path, "t2", ["f"], "assert f() == 42, 'f is not 42'", timeout=60)
        assert not edited.ok and first.poll() is not None, "the old session is gone"
        second = sessions.sessions[path.resolve()].proc
        earlier = sessions.check(path, "t1", ["f"], "assert f() == 40", timeout=60)
        assert earlier.ok and second.poll() is not None, "a check above the last one starts over"
    finally:
        sessions.close_all()
    assert first.returncode is not None and second.returncode is not None


@pytest.mark.slow
def test_a_hung_check_or_answer_ends_within_its_time(tmp_path: Path):
    path = _mini(tmp_path / "mini.ipynb")
    sessions = _CheckerSessions()
    try:
        hung = sessions.check(path, "t1", ["f"], HANG, timeout=3)
        assert not hung.ok and "did not finish within 3 s" in hung.message
        session = sessions.sessions[path.resolve()]
        assert sessions.check(path, "t2", ["g"], "assert g() == 1", timeout=60).ok
        assert sessions.sessions[path.resolve()] is session, "a hung check does not take its session with it"

        _mini(path, q1=HANG)
        start = time.monotonic()
        looping = sessions.check(path, "t1", ["f"], "assert f()", timeout=3)
        assert not looping.ok and "did not finish within 3 s" in looping.message
        assert time.monotonic() - start < 30
        assert path.resolve() not in sessions.sessions, "a session that ran out of time is killed"
        assert session.proc.poll() is not None
    finally:
        sessions.close_all()


def test_a_session_ends_when_its_kernel_is_gone(tmp_path: Path):
    """A kernel killed without its exit handlers closes the session's stdin: the session exits by itself."""
    path = _mini(tmp_path / "mini.ipynb")
    sessions = _CheckerSessions()
    assert sessions.check(path, "t1", ["f"], "assert f() == 42", timeout=60).ok
    session = sessions.sessions.pop(path.resolve())
    session.proc.stdin.close()
    assert session.proc.wait(timeout=30) == 0
    session.close()
    assert not os.path.exists(f"/proc/{session.proc.pid}") or session.proc.returncode == 0


def test_a_changed_environment_starts_a_new_session(tmp_path: Path, monkeypatch):
    """A fresh process would start in the kernel's environment as it is at the check: so does the session."""
    path = _mini(tmp_path / "mini.ipynb")
    sessions = _CheckerSessions()
    reads = (
        "import os\nassert os.environ.get('EMQSIM_CHECK_PROBE') == {!r}, os.environ.get('EMQSIM_CHECK_PROBE')"
    )
    try:
        monkeypatch.setenv("EMQSIM_CHECK_PROBE", "one")
        assert sessions.check(path, "t1", ["f"], reads.format("one"), timeout=60).ok
        first = sessions.sessions[path.resolve()].proc
        monkeypatch.setenv("EMQSIM_CHECK_PROBE", "two")
        assert sessions.check(path, "t2", ["f"], reads.format("two"), timeout=60).ok
        assert first.poll() is not None
    finally:
        sessions.close_all()
