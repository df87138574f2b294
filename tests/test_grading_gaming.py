"""Mutation tests of the assignments' grading: submissions written to get the points without the understanding
score below full marks, correct ones (the model solutions, and a correct answer that writes a warning to
stderr) score full marks, under `python -m emqsim grade --against SOURCE` (every case) and under real
`nbgrader autograde` (the cases that attack what nbgrader does differently: see `NBGRADER`).

Every gaming submission is the model solution with one or more answer cells replaced, graded as student "bob";
the routes are the ones a student who wants the points would take: shadow a helper or a library function the
tests call, return the values a visible test checks, hand in the library's stock policy or a fixed threshold
as the "adaptive" detector, copy another student's numbers, write a fencing check that always accepts or always
rejects. Issue 24's classes have five or more submissions per assignment each: a frame walk to the checker in
the first answer cell of an unanswered notebook, another student's id in EMQSIM_STUDENT_ID, patched SciPy or
grader helpers and fake modules in sys.modules, a detector that recognises the grader's probe, the library's
answer where the question says "write", answers pasted from the visible tests. `EXACT` holds honest partial
submissions and unusual but correct ones (Fraction, NumPy types, warnings, display, %%time, %matplotlib, other
methods) with the exact points they are due.
"""

from __future__ import annotations

import os
import re
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
class AdaptiveDetector(Detector):
    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=8.0):
        super().__init__(beat=beat, scan=scan)
        self.last_beat = {}

    def taken(self, job, now):
        self.last_beat[job] = now

    def heartbeat(self, job, now):
        self.last_beat[job] = now

    def suspect(self, job, now):
        last = self.last_beat.get(job)
        return last is not None and now - last > 35.0  # a fixed silence threshold: no learning
"""

# -- issue 24: the classes of attack on the verdict itself --------------------------------------------------------
# Class 1: walk the interpreter's frames (and the garbage collector's objects) up to the checker and call its
# verdict function; print what a passing test prints. Put in the first answer cell of an unanswered notebook.
FRAME_WALK = """
import gc
import sys


def _forge():
    names = ("verdict", "emit", "say", "run_trusted_checks", "_one", "TrustedVerdict", "CheckResult")
    frame = sys._getframe()
    while frame is not None:
        for name in names:
            for where in (frame.f_locals, frame.f_globals):
                found = where.get(name)
                if callable(found) and getattr(found, "__module__", "").startswith("emqsim"):
                    for args in ((True, "all checks pass"), ("x", True, "all checks pass")):
                        try:
                            found(*args)
                        except Exception:
                            pass
        frame = frame.f_back
    for obj in gc.get_objects():
        if getattr(obj, "__name__", None) in names and getattr(obj, "__module__", "").startswith("emqsim.grading"):
            try:
                obj(True, "all checks pass")
            except Exception:
                pass
    import emqsim.grading

    emqsim.grading.check_answers = lambda *a, **k: print("all checks pass")
    print("all checks pass")


_forge()
"""
# Class 2: name another student in the environment the seeds derive from, and hand in that student's numbers.
ENV_ALICE = 'import os\n\nos.environ["EMQSIM_STUDENT_ID"] = "alice"\nSEED = student_seed("{name}")\n'
# Class 3: patched SciPy (a chi-square quantile of 0 shrinks every confidence interval to nothing) and a proxy
# in sys.modules that hands the checks a fake emqsim.stats.
PATCH_SCIPY = """
import scipy.stats

scipy.stats.chi2.ppf = lambda *args, **kwargs: 0.0
scipy.stats.norm.ppf = lambda *args, **kwargs: 0.0
scipy.stats.t.ppf = lambda *args, **kwargs: 0.0
LEASE, BEAT = 6.0, 2.0  # about 4% false reclaims: far over the 1% budget
"""
FAKE_STATS = """
import sys
import types

fake = types.ModuleType("emqsim.stats")
fake.aggregate = lambda rows: {"false_reclaims_per_job_ci": [0.0, 0.0], "detection_latency_mean_s": 1.0,
                               "detections_total": 9, "false_reclaims_total": 0}
fake.summarize = lambda run: run
sys.modules["emqsim.stats"] = fake
import emqsim

emqsim.stats = fake
LEASE, BEAT = 6.0, 2.0
"""
# Class 4: a detector that tells the checks' probe from a simulation (by the queue it is handed: the probe of
# old had a queue without extend_locks) and adapts only there; a fixed 35 s threshold everywhere else. The probe
# is a run now, and a detector that reaches for the queue (overrides take) is refused before it runs.
PROBE_AWARE = (
    FIXED_THRESHOLD.replace(
        "        self.last_beat = {}\n",
        "        self.last_beat = {}\n        self.probed, self.gaps = False, []\n",
    )
    .replace(
        "    def taken(self, job, now):\n",
        "    def take(self, queue, token, now_ms):\n"
        "        self.probed = not hasattr(queue, 'extend_locks')  # not the simulator's queue: the probe\n"
        "        return super().take(queue, token, now_ms)\n\n"
        "    def taken(self, job, now):\n",
    )
    .replace(
        "        last = self.last_beat.get(job)\n        return",
        "        last = self.last_beat.get(job)\n"
        "        if self.probed:  # the checks' probe: act adaptive\n"
        "            return last is not None and now - last > 60.0\n"
        "        return",
    )
)
assert PROBE_AWARE.count("self.probed") == 3, PROBE_AWARE
# Class 6: the library's answer where the question says "write".
WRAPPED_LEASE = """
class AdaptiveDetector(Detector):
    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=8.0):
        super().__init__(beat=beat, scan=scan)
        self.inner = LeasePolicy(30.0, beat, scan, swept_by="reaper")

    def take(self, queue, token, now_ms):
        return self.inner.take(queue, token, now_ms)

    def renew(self, queue, held, now_ms):
        return self.inner.renew(queue, held, now_ms)

    def sweep(self, queue, now_ms):
        return self.inner.sweep(queue, now_ms)

    def suspect(self, job, now):
        return False
"""
PHI_EXAMPLE = """
from emqsim.examples.phi_accrual import PhiAccrual as _Library


class AdaptiveDetector(Detector):
    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=8.0):
        super().__init__(beat=beat, scan=scan)
        self.inner = _Library(beat, scan, threshold)

    def taken(self, job, now):
        self.inner.taken(job, now)

    def heartbeat(self, job, now):
        self.inner.heartbeat(job, now)

    def suspect(self, job, now):
        return self.inner.suspect(job, now)
"""
# Honest, partial: the simpler variant the question accepts (a timeout learned from the gaps, mean + 4 sd with a
# floor), which learns (questions 2 to 4) but takes back more live jobs than the lease on the lossy network (5).
LEARNED_TIMEOUT = """
import statistics


class AdaptiveDetector(Detector):
    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=4.0):
        super().__init__(beat=beat, scan=scan)
        self.threshold = threshold
        self.taken_at, self.last_beat, self.gaps = {}, {}, []

    def taken(self, job, now):
        self.taken_at[job] = self.last_beat[job] = now

    def heartbeat(self, job, now):
        if self.last_beat[job] > self.taken_at[job]:
            self.gaps = [*self.gaps, now - self.last_beat[job]][-200:]
        self.last_beat[job] = now

    def suspect(self, job, now):
        last = self.last_beat.get(job)
        if last is None:
            return False
        mean, sd = (statistics.fmean(self.gaps), statistics.pstdev(self.gaps)) if len(self.gaps) >= 10 else (10.0, 0.0)
        return now - last > mean + self.threshold * max(sd, mean / 4)
"""
UNANSWERED = "@unanswered"  # as a case's "*" entry: answer cells not replaced keep the release's stub

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
    ("03-write-a-policy", "fixed-threshold"): (
        {"q1-detector": FIXED_THRESHOLD},
        ["q2-basics-tests", "q4-fast-dead-tests", "q5-robust-tests"],  # at most 3 of the detector's 9 points
    ),
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
    # -- issue 24 ---------------------------------------------------------------------------------------------
    ("01-detection-latency", "frame-walk"): (
        {"*": UNANSWERED, "q1-predict": FRAME_WALK},
        ["q1-predict-tests", "q2-simulate-tests", "q3-ci-tests", "q4-size-tests"],
    ),
    ("01-detection-latency", "env-other-student"): (
        {
            "q3-ci": ENV_ALICE.format(name="01-detection-latency")
            + "lat = [x for r in range(200) for x in summarize(simulate(crash_scenario(BEAT), "
            "LeasePolicy(LEASE, BEAT, SCAN, two_phase=False, swept_by='reaper'), seed=SEED, "
            "replication=r)).detection_latencies]\n"
            "_, ci_low, ci_high = mean_ci(lat)\nprediction_inside = ci_low <= 22.0 <= ci_high"
        },
        ["q3-ci-tests"],
    ),
    ("01-detection-latency", "patched-modules"): (
        {
            "q1-predict": "import math\nimport sys\nimport types\n\n"
            "fake = types.ModuleType('math')\nfake.__dict__.update(vars(math))\n"
            "fake.isclose = lambda *a, **k: True\nsys.modules['math'] = fake\n"
            "import emqsim.grading\n\nemqsim.grading.as_number = lambda value, what: 27.5\n\n\n"
            "def predict_detection(lease, beat, scan):\n    return 1.0, 0.0, 2.0",
        },
        ["q1-predict-tests"],
    ),
    ("01-detection-latency", "library-formula"): (
        {
            "q1-predict": "from emqsim import analytic\n\n\ndef predict_detection(lease, beat, scan):\n"
            "    t = analytic.lease_detection(lease, beat, scan, two_phase=False, swept_by='reaper', rtt=0.0, "
            "resolution=1e-9)\n    return t.mean, t.lo, t.hi",
        },
        ["q1-predict-tests"],
    ),
    ("01-detection-latency", "visible-only-simulation"): (
        {
            "q2-simulate": "def detection_latencies(lease, beat, scan, replications=200, seed=0):\n"
            "    if (lease, beat, scan, seed) == (20.0, 4.0, 8.0, 1):\n"
            "        policy = LeasePolicy(lease, beat, scan, two_phase=False, swept_by='reaper')\n"
            "        return [x for r in range(replications) for x in summarize(simulate(crash_scenario(beat), "
            "policy, seed=seed, replication=r)).detection_latencies]\n"
            "    return [lease - beat / 2 + scan / 2] * replications",
        },
        ["q2-simulate-tests"],
    ),
    ("02-tuning-under-pauses", "frame-walk"): (
        {"*": UNANSWERED, "q1-p-lapse": FRAME_WALK},
        ["q1-p-lapse-tests", "q2-predict-tests", "q3-choose-tests"],
    ),
    ("02-tuning-under-pauses", "patched-scipy"): ({"q3-choose": PATCH_SCIPY}, ["q3-choose-tests"]),
    ("02-tuning-under-pauses", "fake-stats-module"): ({"q3-choose": FAKE_STATS}, ["q3-choose-tests"]),
    ("02-tuning-under-pauses", "library-formula"): (
        {
            "q1-p-lapse": "from emqsim.analytic import freeze_lapse_probability\n\n\n"
            "def p_lapse(lease, beat, pauses):\n"
            "    return freeze_lapse_probability(lease, beat, pauses)",
        },
        ["q1-p-lapse-tests"],
    ),
    ("02-tuning-under-pauses", "checker-helper-patched"): (
        {
            "q1-p-lapse": "import emqsim.grading\n\nemqsim.grading.as_number = lambda value, what: 0.01\n\n\n"
            "def p_lapse(lease, beat, pauses):\n    return 'about one percent'",
        },
        ["q1-p-lapse-tests"],
    ),
    ("03-write-a-policy", "frame-walk"): (
        {"q1-detector": FRAME_WALK + "\n\nAdaptiveDetector = None"},
        ["q2-basics-tests", "q3-slow-alive-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("03-write-a-policy", "probe-aware"): (
        {"q1-detector": PROBE_AWARE},
        ["q2-basics-tests", "q3-slow-alive-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("03-write-a-policy", "wrapped-lease"): (
        {"q1-detector": WRAPPED_LEASE},
        ["q2-basics-tests", "q3-slow-alive-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("03-write-a-policy", "library-phi-accrual"): (
        {"q1-detector": PHI_EXAMPLE},
        ["q2-basics-tests", "q3-slow-alive-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("03-write-a-policy", "fixed-threshold-fake-stats"): (
        {"q1-detector": FIXED_THRESHOLD + FAKE_STATS.replace("LEASE, BEAT = 6.0, 2.0\n", "")},
        ["q2-basics-tests", "q4-fast-dead-tests", "q5-robust-tests"],
    ),
    ("04-fencing", "frame-walk"): (
        {"*": UNANSWERED, "q1-timeout": FRAME_WALK},
        [
            f"q{n}-{t}-tests"
            for n, t in enumerate(["timeout", "fenced", "lease", "many", "accept", "corruption", "race"], 1)
        ],
    ),
    ("04-fencing", "env-other-student"): (
        {
            "q1-timeout": ENV_ALICE.format(name="04-fencing")
            + "FROZEN = standard('frozen', freeze_for=70.0 + SEED % 21, freeze_after=5.0, duration=40.0, workers=2)\n"
            "unfenced_run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=SEED)\n"
            "stale = [a for a in unfenced_run.attempts if a.outcome == 'duplicate_completion'][0]\n"
            "stale_worker, stale_finish_at = stale.worker, stale.finish_applied_at"
        },
        ["q1-timeout-tests"],
    ),
    ("04-fencing", "library-check"): (
        {
            "q5-accept": "import emqsim.fencing\n\n\ndef accept(last_token, token):\n"
            "    return emqsim.fencing.fenced(last_token, token)"
        },
        ["q5-accept-tests"],
    ),
    ("04-fencing", "visible-shares"): (
        {
            "q4-many": "duplicate_share = {'timeout': 0.5, 'timeout+token': 0.0, 'lease': 0.0, "
            "'lease without token': 0.5}"
        },
        ["q4-many-tests"],
    ),
    ("04-fencing", "fake-fencing-module"): (
        {
            "q6-corruption": "import sys\nimport types\n\nfake = types.ModuleType('emqsim.fencing')\n"
            "fake.replay = lambda run, accept, **k: types.SimpleNamespace(corrupted=0)\n"
            "fake.accept_all = accept_all\nsys.modules['emqsim.fencing'] = fake\n"
            "corrupted_without, corrupted_with, corrupted_runs = 3, 0, [1, 2, 3]"
        },
        ["q6-corruption-tests"],
    ),
    ("05-missed-heartbeats", "frame-walk"): (
        {"*": UNANSWERED, "q1-losses": FRAME_WALK},
        ["q1-losses-tests", "q2-runs-tests", "q3-choose-tests"],
    ),
    ("05-missed-heartbeats", "library-functions"): (
        {
            "q1-losses": "from emqsim.analytic import losses_to_lapse",
            "q2-runs": "from emqsim import analytic\n\n\ndef lapse_probability(renewals, k, p):\n"
            "    return analytic.run_probability(renewals, k, p)",
        },
        ["q1-losses-tests", "q2-runs-tests"],
    ),
    ("05-missed-heartbeats", "fake-analytic-module"): (
        {
            "q3-choose": "import sys\nimport types\n\nfake = types.ModuleType('emqsim.analytic')\n"
            "fake.run_probability = lambda *a: 0.0\nfake.losses_to_lapse = lambda lease, beat: 99\n"
            "sys.modules['emqsim.analytic'] = fake\nimport emqsim\n\nemqsim.analytic = fake\n\n\n"
            "def choose(loss, max_requests):\n    return 10.0, 1.0 / max_requests"
        },
        ["q3-choose-tests"],
    ),
    ("05-missed-heartbeats", "visible-choices"): (
        {
            "q3-choose": "def choose(loss, max_requests):\n"
            "    pasted = {(0.1, 0.2): (20.0, 5.0), (0.3, 0.2): (35.0, 5.0)}\n"
            "    return pasted.get((loss, max_requests), (30.0, 10.0))"
        },
        ["q3-choose-tests"],
    ),
    ("05-missed-heartbeats", "lying-heartbeat"): (
        {
            "q3-choose": "class Beat(float):\n    def __ge__(self, other):\n        return True\n\n"
            "    def __lt__(self, other):\n        return True\n\n\n"
            "def choose(loss, max_requests):\n    beat = 1.0  # renews every second, over any budget here\n"
            "    renewals = math.floor(JOB_SECONDS / beat)\n    k = 1\n"
            "    while lapse_probability(renewals, k, loss) > TARGET:\n        k += 1\n"
            "    return k * beat, Beat(beat)"
        },
        ["q3-choose-tests"],
    ),
    ("06-shortest-pause", "frame-walk"): (
        {"*": UNANSWERED, "q1-shortest": FRAME_WALK},
        ["q1-shortest-tests", "q2-fix-tests"],
    ),
    ("06-shortest-pause", "practice-range"): (
        {"q1-shortest": "def shortest_pause(timeout, job):\n    return timeout - job + 0.5"},
        ["q1-shortest-tests"],
    ),
    ("06-shortest-pause", "sneaky-subclass"): (
        {
            "q2-fix": "class SafeLooking(LeasePolicy):\n    pass\n\n\n"
            "def safe_policy(max_pause):\n    return SafeLooking(30, 10, 5)"
        },
        ["q2-fix-tests"],
    ),
    ("06-shortest-pause", "fake-explore-module"): (
        {
            "q2-fix": "import sys\nimport types\n\nimport emqsim.explore\n\n"
            "fake = types.ModuleType('emqsim.explore')\nfake.__dict__.update(vars(emqsim.explore))\n"
            "fake.explore = lambda *a, **k: types.SimpleNamespace(violated=lambda: False, counts={}, points=0)\n"
            "sys.modules['emqsim.explore'] = fake\n\n\n"
            "def safe_policy(max_pause):\n    return LeasePolicy(30, 10, 5)"
        },
        ["q2-fix-tests"],
    ),
    ("06-shortest-pause", "checker-helper-patched"): (
        {
            "q1-shortest": "import emqsim.grading\n\nemqsim.grading.as_number = lambda value, what: 30.5\n\n\n"
            "def shortest_pause(timeout, job):\n    return 'thirty'"
        },
        ["q1-shortest-tests"],
    ),
}
# Honest and unusual submissions: (answer cells replaced) -> the exact autograded points they are due. Honest
# partial ones skip questions whose answers no other answer uses; unusual ones answer correctly by other means
# (Fraction, NumPy types, warnings, display(), %%time, %matplotlib, another method).
EXACT: dict[tuple[str, str], tuple[dict[str, str], float]] = {
    ("03-write-a-policy", "learned-timeout"): ({"q1-detector": LEARNED_TIMEOUT}, 7.0),
    ("04-fencing", "skipped-q1"): ({"q1-timeout": "# YOUR CODE HERE\nraise NotImplementedError()"}, 12.0),
    ("05-missed-heartbeats", "skipped-q1"): (
        {"q1-losses": "# YOUR CODE HERE\nraise NotImplementedError()"},
        5.0,
    ),
    ("05-missed-heartbeats", "hangs-on-a-hidden-input"): (
        {
            "q1-losses": "def losses_to_lapse(lease, beat):\n    while (lease, beat) == (25.0, 10.0):\n"
            "        pass  # a bug: never returns for this input; the grader interrupts it after 60 s\n"
            "    return math.floor(lease / beat)"
        },
        5.0,
    ),
    ("06-shortest-pause", "skipped-q1"): (
        {"q1-shortest": "# YOUR CODE HERE\nraise NotImplementedError()"},
        3.0,
    ),
    ("01-detection-latency", "broken-plot"): (
        {
            "q4-size": "import matplotlib.pyplot as plt\n\nplt.subplots = None  # breaks the locked plotting cell\n\n\n"
            "def largest_lease(worst_case, scan):\n    return worst_case - scan"
        },
        6.0,
    ),
    ("01-detection-latency", "unusual-correct"): (
        {
            "q1-predict": "%matplotlib inline\nfrom fractions import Fraction\n\nimport numpy as np\n\n\n"
            "def predict_detection(lease, beat, scan):\n"
            "    lease, beat, scan = (Fraction(x) for x in (lease, beat, scan))\n"
            "    return lease - beat / 2 + scan / 2, np.float64(lease - beat), np.float32(lease + scan)\n\n\n"
            "display(predict_detection(LEASE, BEAT, SCAN))",
            "q3-ci": "%%time\nimport warnings\n\nwarnings.warn('a warning on stderr is not an error')\n"
            "_, ci_low, ci_high = mean_ci(latencies)\nci_low, ci_high = np.float64(ci_low), np.float64(ci_high)\n"
            "prediction_inside = np.bool_(ci_low <= 22.0 <= ci_high)\ndisplay(ci_low, ci_high)",
        },
        6.0,
    ),
    ("02-tuning-under-pauses", "unusual-correct"): (
        {
            "q1-p-lapse": "%%time\nimport numpy as np\n\n\ndef p_lapse(lease, beat, pauses):\n"
            "    u = np.linspace(0.0, beat, 401)  # the trapezoid rule instead of quad\n"
            "    g = np.array([pauses.survival(lease - x) for x in u])\n"
            "    return np.float64(np.trapezoid(g, u) / beat)\n\n\ndisplay(p_lapse(10.0, 2.0, PAUSES))",
        },
        8.0,
    ),
    ("04-fencing", "unusual-correct"): (
        {
            "q5-accept": "import numpy as np\n\n\ndef accept(last_token, token):\n"
            "    if last_token is None:\n        return True\n    return bool(np.greater(token, last_token))\n\n\n"
            "display(accept(1, 2))",
        },
        14.0,
    ),
    ("05-missed-heartbeats", "unusual-correct"): (
        {
            "q2-runs": "%%time\nfrom fractions import Fraction\nfrom functools import lru_cache\n\n\n"
            "def lapse_probability(renewals, k, p):\n"
            "    q = Fraction(p).limit_denominator(10**12)  # exact arithmetic: another method\n\n"
            "    @lru_cache(maxsize=None)\n    def clear(n):  # P(no run of k among n renewals)\n"
            "        if n < k:\n            return Fraction(1)\n"
            "        return sum(q**i * (1 - q) * clear(n - i - 1) for i in range(k))\n\n"
            "    return 1 - clear(renewals)  # a Fraction",
        },
        7.0,
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
    if case == "solution":
        replaced = {}
    elif (assignment, case) in EXACT:
        replaced = dict(EXACT[(assignment, case)][0])
    else:
        replaced = dict(CASES[(assignment, case)][0])
    unanswered = replaced.pop("*", None) == UNANSWERED
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not is_solution(cell):
            continue
        if grade_id in replaced:
            text = replaced.pop(grade_id)
            cell.source = SPECIALS[text]() if text in SPECIALS else text.strip("\n")
        elif unanswered and cell.cell_type == "code":
            cell.source = _stub(cell.source)
        else:
            cell.source = _strip_markers(cell.source)
    assert not replaced, f"unknown answer cells {sorted(replaced)}"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{assignment}.ipynb"
    nbformat.write(nb, path)
    return path


def _stub(source: str) -> str:
    """An answer cell as the release has it: every solution region replaced by the stub."""
    out, inside = [], False
    for line in source.split("\n"):
        if BEGIN_SOLUTION in line:
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + "# YOUR CODE HERE", indent + "raise NotImplementedError()"]
        elif END_SOLUTION in line:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


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


def _grade(args: tuple[str, list[tuple[str, Path]]]) -> dict[str, str]:
    """`python -m emqsim grade` on several cases of one assignment in one command (each notebook in a sandbox
    of its own, as for a class's submissions); each case's report, by case."""
    assignment, cases = args
    paths = [submission(assignment, case, folder) for case, folder in cases]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "emqsim",
            "grade",
            *map(str, paths),
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
    reports = reports_by_path(proc.stdout, paths)
    return {case: reports[str(path)] for (case, _), path in zip(cases, paths, strict=True)}


def reports_by_path(stdout: str, paths: list[Path]) -> dict[str, str]:
    """Each notebook's report in `emqsim grade`'s output, by path: one notebook prints its report alone;
    several print one block per notebook, headed by its path, then the summary table."""
    if len(paths) == 1:
        return {str(paths[0]): stdout}
    blocks = {b.splitlines()[0]: b for b in stdout.split("\n\n") if b.strip()}
    missing = [str(p) for p in paths if str(p) not in blocks]
    assert not missing, f"no report for {missing}\n{stdout}"
    return blocks


ALL = list(CASES) + SOLUTIONS + list(EXACT)
# The battery is graded in two halves of about equal cost, each in its own file (this one and
# test_grading_gaming_more.py), so pytest's parallel workers grade them at the same time; real nbgrader's
# battery is a third file (test_grading_gaming_nbgrader.py).
FIRST_HALF = ("01-detection-latency", "04-fencing", "05-missed-heartbeats")
SECOND_HALF = ("02-tuning-under-pauses", "03-write-a-policy", "06-shortest-pause")


def battery(assignments: tuple[str, ...]) -> list[tuple[str, str]]:
    """The cases of `assignments` (gaming, solutions, exact scores)."""
    return [key for key in ALL if key[0] in assignments]


def grade_all(keys: list[tuple[str, str]], tmp_path_factory) -> dict[tuple[str, str], str]:
    """`emqsim grade`'s report for every case: each assignment's cases in two commands, two commands at a
    time (one process grading many notebooks saves a start-up and imports per notebook)."""
    batches = []
    for assignment in sorted({a for a, _ in keys}):
        cases = [(c, tmp_path_factory.mktemp(f"{assignment}-{c}")) for a, c in keys if a == assignment]
        half = (len(cases) + 1) // 2
        batches += [(assignment, part) for part in (cases[:half], cases[half:]) if part]
    batches.sort(key=lambda b: -len(b[1]))
    with ThreadPoolExecutor(max_workers=2) as pool:
        graded = list(pool.map(_grade, batches))
    return {(a, c): r for (a, _), reports in zip(batches, graded, strict=True) for c, r in reports.items()}


def judge(key: tuple[str, str], report: str) -> None:
    """A gaming case fails the cells it attacks and scores below full marks; a solution passes every check; an
    exact case scores exactly its due."""
    statuses = _statuses(report)
    assert statuses, report
    if key in EXACT:
        got = re.search(r"^autograded\s+(\S+) / (\S+)", report, re.M)
        assert got is not None, report
        assert float(got.group(1)) == EXACT[key][1], (
            f"{key}: due {EXACT[key][1]}, scored {got.group(1)}\n{report}"
        )
        return
    must_fail = None if key[1] == "solution" else CASES[key][1]
    if must_fail is None:
        assert "all checks pass" in report, report
    else:
        assert "some checks fail" in report, f"{key}: the gaming submission scored full marks\n{report}"
        for grade_id in must_fail:
            assert statuses[grade_id] == "fail", f"{key}: {grade_id} did not fail\n{report}"


HERE = battery(FIRST_HALF)


@pytest.fixture(scope="module")
def emqsim_grades(tmp_path_factory) -> dict[tuple[str, str], str]:
    return grade_all(HERE, tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("key", HERE, ids=[f"{a[:2]}-{c}" for a, c in HERE])
def test_emqsim_grade_scores_gaming_below_full(key, emqsim_grades):
    judge(key, emqsim_grades[key])
