"""Mutation tests of the assignments' grading: submissions written to get the points without the understanding
score below full marks, correct ones (the model solutions, and a correct answer that writes a warning to
stderr) score full marks, under `python -m emqsim grade --against SOURCE` (every case) and under real
`nbgrader autograde` (the cases that attack what nbgrader does differently: see `NBGRADER`).

Every gaming submission is the model solution with one or more answer cells replaced, graded as student "bob";
the routes are the ones a student who wants the points would take: shadow a helper or a library function the
tests call, return the values a visible test checks, hand in the library's stock policy or a fixed threshold
as the "adaptive" detector, copy another student's numbers, write a fencing check that always accepts or always
rejects.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from emqsim import LeasePolicy, TimeoutPolicy, Uniform, simulate, standard  # noqa: E402
from emqsim.grading import BEGIN_SOLUTION, END_SOLUTION, is_solution, student_seed  # noqa: E402
from emqsim.stats import mean_ci, summarize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks" / "assignments"
STUDENT = "bob"


def _alice_ci() -> str:
    """Assignment 1, question 3: another student's (alice's) interval, copied as numbers."""
    policy = LeasePolicy(20.0, 4.0, 8.0, two_phase=False, swept_by="reaper")
    scenario = standard("fast-dead", die_after=Uniform(4.0, 44.0), duration=64.0, workers=2)
    seed = student_seed("01-detection-latency", "alice")
    lat = [
        x
        for r in range(200)
        for x in summarize(simulate(scenario, policy, seed=seed, replication=r)).detection_latencies
    ]
    _, low, high = mean_ci(lat)
    return f"ci_low, ci_high, prediction_inside = {low!r}, {high!r}, {low <= 22.0 <= high}"


def _alice_stale() -> str:
    """Assignment 4, question 1: alice's stale worker and time, copied as numbers; the run itself is bob's."""
    seed = student_seed("04-fencing", "alice")
    frozen = standard("frozen", freeze_for=70.0 + seed % 21, freeze_after=5.0, duration=40.0, workers=2)
    run = simulate(frozen, TimeoutPolicy(timeout=60), seed=seed)
    stale = next(a for a in run.attempts if a.outcome == "duplicate_completion")
    return (
        "unfenced_run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=SEED)\n"
        f"stale_worker, stale_finish_at = {stale.worker!r}, {stale.finish_applied_at!r}"
    )


def _alice_corruption() -> str:
    """Assignment 4, question 6: alice's corruption counts, copied as numbers; the check is bob's own."""
    from emqsim.fencing import accept_all, replay

    seed = student_seed("04-fencing", "alice")
    scenario = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
    policy = TimeoutPolicy(timeout=60, fenced=True)
    bare = [
        replay(simulate(scenario, policy, seed=seed, replication=r), accept_all).corrupted for r in range(40)
    ]
    return (
        f"corrupted_without, corrupted_with = {sum(bare)!r}, 0\n"
        f"corrupted_runs = {[r for r, n in enumerate(bare) if n]!r}"
    )


# Assignment 4, questions 6 and 7 as the model solution answers them, for the cases that change something above
FENCING_Q6 = """
random_pause = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
runs = [simulate(random_pause, TimeoutPolicy(timeout=60, fenced=True), seed=SEED, replication=r) for r in range(40)]
corrupted_without = sum(replay(run, accept_all).corrupted for run in runs)
corrupted_with = sum(replay(run, accept).corrupted for run in runs)
corrupted_runs = [r for r, run in enumerate(runs) if replay(run, accept_all).corrupted > 0]
"""
ALWAYS_ACCEPT = "def accept(last_token, token):\n    return True"
SHADOW_REPLAY = """
import dataclasses

from emqsim.fencing import replay as library_replay


def replay(run, accept, **options):  # a stand-in that never reports corruption when a check is given
    report = library_replay(run, accept, **options)
    return report if accept is accept_all else dataclasses.replace(report, corrupted_jobs=())
"""
PATCH_STORE = """
import emqsim.fencing

emqsim.fencing.StoreWrite.stale_overwrite = property(lambda self: False)  # no write ever counts as stale
"""

FIXED_THRESHOLD = """
class AdaptiveDetector(ReclaimPolicy):
    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=8.0):
        self.renewal = RenewalRule.every(beat)
        self.sweep_interval_ms = round(scan * 1000)
        self.swept_by = "reaper"
        self.fenced = True
        self.beat_ms = round(beat * 1000)
        self.taken_at, self.last_beat = {}, {}

    def take(self, queue, token, now_ms):
        job_id = queue.take(token, now_ms, lock_ms=None)
        if job_id is not None:
            self.taken_at[job_id] = self.last_beat[job_id] = now_ms
        return job_id

    def renew(self, queue, held, now_ms):
        refused = []
        for job_id, token in held:
            if not holds_token(queue, job_id, token):
                refused.append(job_id)
                continue
            self.last_beat[job_id] = now_ms
        return refused

    def suspect(self, job_id, now_ms):
        last = self.last_beat.get(job_id)
        return last is not None and now_ms - last > 35_000  # a fixed silence threshold: no learning

    def sweep(self, queue, now_ms):
        reclaimed = []
        for job_id in active_jobs(queue):
            if self.suspect(job_id, now_ms) and reclaim(queue, job_id):
                reclaimed.append(job_id)
                self.last_beat.pop(job_id, None)
        return SweepReply(skipped=False, reclaimed=tuple(reclaimed))
"""

# (assignment, case) -> (answer cells replaced, test cells that must fail; None: must score full marks)
CASES: dict[tuple[str, str], tuple[dict[str, str], list[str] | None]] = {
    ("01-detection-latency", "shadow-library"): (
        {
            "q1-predict": "import math\nmath.isclose = lambda *a, **k: True\n\n\n"
            "def predict_detection(lease, beat, scan):\n    return 1.0, 0.0, 2.0",
        },
        ["q1-predict-tests"],
    ),
    ("01-detection-latency", "shadow-helper"): (
        {
            "q3-ci": "def mean_ci(values):\n    return 0.0, 0.0, 1e9\n\n\nci_low, ci_high, prediction_inside = 0.0, 1e9, True"
        },
        ["q3-ci-tests"],
    ),
    ("01-detection-latency", "visible-answers"): (
        {
            "q1-predict": "def predict_detection(lease, beat, scan):\n    return 27.5, 20.0, 35.0",
            "q4-size": "def largest_lease(worst_case, scan):\n    return 15.0",
        },
        ["q1-predict-tests", "q4-size-tests"],
    ),
    ("01-detection-latency", "copied-numbers"): ({"q3-ci": "@alice_ci"}, ["q3-ci-tests"]),
    ("01-detection-latency", "stderr-warning"): (
        {
            "q1-predict": "import numpy as np\n\n\ndef predict_detection(lease, beat, scan):\n"
            "    np.log(np.zeros(1))  # a RuntimeWarning on stderr, nothing wrong with the answer\n"
            "    return lease - beat / 2 + scan / 2, lease - beat, lease + scan",
        },
        None,
    ),
    ("02-tuning-under-pauses", "shadow-helper"): (
        {
            "q3-choose": "LEASE, BEAT = 5.0, 2.0\n\n\ndef evaluate(lease, beat, seeds, replications=8):\n"
            "    return {'false_reclaim_rate_ci': [0.0, 0.0], 'detection_latency_mean': 1.0, 'detections': 9}"
        },
        ["q3-choose-tests"],
    ),
    ("02-tuning-under-pauses", "visible-answers"): (
        {
            "q1-p-lapse": "import numpy as np\n\n\ndef p_lapse(lease, beat, pauses):\n"
            "    u = (np.arange(400) + 0.5) / 400 * beat\n"
            "    exact = float(np.mean([pauses.survival(lease - x) for x in u]))\n"
            "    return exact if (lease, beat) in [(10.0, 2.0), (20.0, 2.0), (10.0, 5.0)] else 0.5"
        },
        ["q1-p-lapse-tests"],
    ),
    ("03-write-a-policy", "stock-lease"): (
        {
            "q1-detector": "class AdaptiveDetector(LeasePolicy):\n"
            "    def __init__(self, *args, **kwargs):\n        super().__init__(30.0, 10.0)"
        },
        ["q2-basics-tests", "q3-slow-alive-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("03-write-a-policy", "stock-lease-factory"): (
        {"q1-detector": "def AdaptiveDetector(*args, **kwargs):\n    return LeasePolicy(30.0, 10.0)"},
        ["q2-basics-tests", "q3-slow-alive-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("03-write-a-policy", "fixed-threshold"): ({"q1-detector": FIXED_THRESHOLD}, ["q2-basics-tests"]),
    ("04-fencing", "shadow-helper"): (
        {
            "q3-lease": "class LeaseWithoutToken(LeasePolicy):\n    pass\n\n\n"
            "def duplicate_completions(run):\n    return 1 if run is bare_lease_run else 0\n\n\n"
            "lease_run = simulate(FROZEN, LeasePolicy(30, 10), seed=SEED)\n"
            "bare_lease_run = simulate(FROZEN, LeaseWithoutToken(30, 10), seed=SEED)\n"
            "lapsed_at = [e.time for e in lease_run.lock_events if e.kind == 'expired'][0]"
        },
        ["q3-lease-tests"],
    ),
    ("04-fencing", "copied-numbers"): ({"q1-timeout": "@alice_stale"}, ["q1-timeout-tests"]),
    ("04-fencing", "always-accept"): (
        {"q5-accept": ALWAYS_ACCEPT},
        ["q5-accept-tests", "q6-corruption-tests", "q7-race-tests"],
    ),
    ("04-fencing", "always-reject"): (
        {"q5-accept": "def accept(last_token, token):\n    return False"},
        ["q5-accept-tests", "q6-corruption-tests"],
    ),
    ("04-fencing", "visible-answers"): (
        {
            "q5-accept": "def accept(last_token, token):\n"
            "    visible = {(None, 1): True, (1, 2): True, (2, 1): False}\n"
            "    return visible.get((last_token, token), last_token is None or token >= last_token)"
        },
        ["q5-accept-tests"],
    ),
    ("04-fencing", "shadow-store-helper"): (
        {"q5-accept": ALWAYS_ACCEPT, "q6-corruption": SHADOW_REPLAY + FENCING_Q6},
        ["q6-corruption-tests", "q7-race-tests"],
    ),
    ("04-fencing", "shadow-library"): (
        {"q5-accept": ALWAYS_ACCEPT, "q6-corruption": PATCH_STORE + FENCING_Q6},
        ["q6-corruption-tests", "q7-race-tests"],
    ),
    ("04-fencing", "copied-corruption"): ({"q6-corruption": "@alice_corruption"}, ["q6-corruption-tests"]),
    ("05-missed-heartbeats", "visible-answers"): (
        {
            "q1-losses": "def losses_to_lapse(lease, beat):\n    return {(30.0, 10.0): 3, (30.0, 5.0): 6}.get((lease, beat), 1)",
            "q2-runs": "def lapse_probability(renewals, k, p):\n"
            "    return 0.0 if renewals < k else 1 - (1 - p**k) ** (renewals - k + 1)  # not exact",
        },
        ["q1-losses-tests", "q2-runs-tests"],
    ),
    ("05-missed-heartbeats", "one-choice-for-all"): (
        {
            "q3-choose": "def choose(loss, max_requests):\n    return (30.0, 5.0) if loss < 0.2 else (45.0, 5.0)"
        },
        ["q3-choose-tests"],
    ),
    ("05-missed-heartbeats", "shadow-helper"): (
        {
            "q3-choose": "def choose(loss, max_requests):\n    return 10.0, 5.0\n\n\n"
            "def check(*args, **kwargs):\n    return None\n\n\nfrom emqsim import analytic\n\nanalytic.run_probability = lambda *a: 0.0"
        },
        ["q3-choose-tests"],
    ),
    ("06-shortest-pause", "visible-answers"): (
        {"q1-shortest": "def shortest_pause(timeout, job):\n    return 30.023  # the visible case's answer"},
        ["q1-shortest-tests"],
    ),
    ("06-shortest-pause", "naive-formula"): (
        {"q1-shortest": "def shortest_pause(timeout, job):\n    return float(timeout - job)"},
        ["q1-shortest-tests"],
    ),
    ("06-shortest-pause", "stock-policy"): (
        {"q2-fix": "def safe_policy(max_pause):\n    return LeasePolicy(30, 10, 5)"},
        ["q2-fix-tests"],
    ),
    ("06-shortest-pause", "visible-only"): (
        {
            "q2-fix": "def safe_policy(max_pause):\n"
            "    return LeasePolicy(30, 5, 5) if max_pause == 25 else LeasePolicy(30, 10, 5)"
        },
        ["q2-fix-tests"],
    ),
    ("06-shortest-pause", "fencing-only"): (
        {"q2-fix": "def safe_policy(max_pause):\n    return TimeoutPolicy(3600, 5, fenced=True)"},
        ["q2-fix-tests"],
    ),
}
SPECIALS = {"@alice_ci": _alice_ci, "@alice_stale": _alice_stale, "@alice_corruption": _alice_corruption}
SOLUTIONS = [(name, "solution") for name in sorted({a for a, _ in CASES})]


def _strip_markers(source: str) -> str:
    return "\n".join(
        line for line in source.split("\n") if BEGIN_SOLUTION not in line and END_SOLUTION not in line
    )


def submission(assignment: str, case: str, dest: Path) -> Path:
    """The model solution of `assignment` (the file a student hands in: markers gone) with `case`'s answer
    cells replaced, written to dest/<assignment>.ipynb."""
    nb = nbformat.read(FOLDER / f"{assignment}.ipynb", as_version=4)
    replaced = {} if case == "solution" else dict(CASES[(assignment, case)][0])
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not is_solution(cell):
            continue
        if grade_id in replaced:
            text = replaced.pop(grade_id)
            cell.source = SPECIALS[text]() if text in SPECIALS else text.strip("\n")
        else:
            cell.source = _strip_markers(cell.source)
    assert not replaced, f"unknown answer cells {sorted(replaced)}"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{assignment}.ipynb"
    nbformat.write(nb, path)
    return path


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # nbgrader runs its `alembic` console script from PATH: the interpreter's own bin folder comes first, so
    # the tests work without the venv activated
    bin_path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    return {**os.environ, "PYTHONPATH": path, "PATH": bin_path}


def _statuses(report: str) -> dict[str, str]:
    out = {}
    for line in report.splitlines():
        m = re.match(r"^(\S+)\s+(\S+) / (\S+)\s+(pass|partial|fail|manual)\b", line)
        if m:
            out[m.group(1)] = m.group(4)
    return out


def _grade(args: tuple[str, str, Path]) -> str:
    assignment, case, folder = args
    path = submission(assignment, case, folder)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "emqsim",
            "grade",
            str(path),
            "--against",
            str(FOLDER / f"{assignment}.ipynb"),
            "--student",
            STUDENT,
            "--timeout",
            "600",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=1800,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.stdout


ALL = list(CASES) + SOLUTIONS
# Under real nbgrader: the cases that attack what nbgrader changes. It runs the same check functions as
# `emqsim grade`, but inside the student's kernel (so the shadowing cases) and for the student its folder
# names (so the copied numbers), and it scores a cell by its outputs (so the warning on stderr); the model
# solutions show that full marks stay reachable. The other cases hand in answers that the shared checks
# reject whoever runs them; `emqsim grade` runs every case (about 5 minutes of nbgrader saved per CI run).
NBGRADER_ROUTES = ("shadow-", "copied-", "stderr-warning", "solution")
NBGRADER = [(a, c) for a, c in ALL if c.startswith(NBGRADER_ROUTES)]


@pytest.fixture(scope="module")
def emqsim_grades(tmp_path_factory) -> dict[tuple[str, str], str]:
    todo = [(a, c, tmp_path_factory.mktemp(f"{a}-{c}")) for a, c in ALL if c != "solution"]
    todo += [(a, c, tmp_path_factory.mktemp(f"{a}-{c}")) for a, c in SOLUTIONS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        reports = list(pool.map(_grade, todo))
    return {(a, c): r for (a, c, _), r in zip(todo, reports, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("key", ALL, ids=[f"{a[:2]}-{c}" for a, c in ALL])
def test_emqsim_grade_scores_gaming_below_full(key, emqsim_grades):
    report = emqsim_grades[key]
    statuses = _statuses(report)
    assert statuses, report
    must_fail = None if key[1] == "solution" else CASES[key][1]
    if must_fail is None:
        assert "all checks pass" in report, report
    else:
        assert "some checks fail" in report, f"{key}: the gaming submission scored full marks\n{report}"
        for grade_id in must_fail:
            assert statuses[grade_id] == "fail", f"{key}: {grade_id} did not fail\n{report}"


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
