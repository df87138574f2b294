"""Build the assignment notebooks (nbgrader SOURCE versions, with solutions) from this one file.

    python notebooks/assignments/_build.py

Edit the cells here, rebuild, and commit both. Cell metadata follows nbgrader 0.9 (schema 3): `solution(...)`
cells hold `### BEGIN SOLUTION` regions, `tests(...)` cells are autograded (hidden tests between
`### BEGIN HIDDEN TESTS` / `### END HIDDEN TESTS`), `answer(...)` cells are graded by hand, `readonly(...)`
cells are locked (nbgrader restores them before autograding). tests/test_assignments.py grades every notebook.
"""

from __future__ import annotations

import sys
from pathlib import Path
from runpy import run_path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


# What every graded cell of assignment 03 needs: each runs alone in a fresh process, so each carries its own
# copy in the notebook (a student cannot shadow it), and the copies are written once here.
DETECTOR_CHECKS = """
import warnings
from emqsim import Freeze, LeasePolicy, ReclaimPolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
from emqsim.grading import as_number, written_in_notebook
from emqsim.stats import aggregate, summarize


def measure(policy, scenario, replications, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [simulate(scenario, policy, seed=seed, replication=r, record_locks=False) for r in range(replications)]
    return aggregate([summarize(run) for run in runs])


def detector():
    written_in_notebook(
        "AdaptiveDetector",
        kind="class",
        base="ReclaimPolicy",
        forbidden=("LeasePolicy", "TimeoutPolicy", "Detector", "PhiAccrual", "phi_accrual", "emqsim.examples",
                   "emqsim.policies"),
    )
    assert isinstance(AdaptiveDetector, type) and issubclass(AdaptiveDetector, ReclaimPolicy), (
        "AdaptiveDetector must be a class, a subclass of ReclaimPolicy"
    )
    assert not issubclass(AdaptiveDetector, (LeasePolicy, TimeoutPolicy)), (
        "AdaptiveDetector must be your own detector, not a LeasePolicy or TimeoutPolicy"
    )
    made = AdaptiveDetector()
    assert type(made) is AdaptiveDetector, "AdaptiveDetector() must build an AdaptiveDetector"
    return made


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)


def tolerated_silence(gaps_ms, seed):
    \"\"\"The shortest silence (s) after the last heartbeat at which the detector suspects a job, after it saw
    three jobs each send heartbeats `gaps_ms` apart, on the simulator's own queue and key store, at jittered
    times (what a run shows a detector).\"\"\"
    import numpy as np
    from emqsim.keys import QueueKeys
    from emqsim.protocol import Queue
    from emqsim.store.keystore import KeyStore

    rng = np.random.default_rng(seed)
    clock = [0]
    queue = Queue(KeyStore(lambda: clock[0], rng=rng), QueueKeys(f"q{int(rng.integers(100))}"))
    for index in range(3):
        queue.add(str(index))
    made, now = detector(), int(rng.integers(1_000, 100_000))
    for index in range(3):
        token = f"{int(rng.integers(10**6)):06d}:{index + 1}"
        clock[0] = now
        job = made.take(queue, token, now)
        assert job is not None, "take() found no job in the queue"
        for gap in [int(rng.integers(1_000, 3_000)), *gaps_ms]:
            now += gap + int(rng.integers(-40, 41))
            clock[0] = now
            assert made.renew(queue, [(job, token)], now) == [], "a heartbeat of the job's holder was refused"
    return next((s for s in range(1, 900) if made.suspect(job, now + s * 1000)), 900)


def adaptive(seed=0):
    \"\"\"The detector must learn: it tolerates a longer silence after irregular heartbeats than after regular
    ones.\"\"\"
    regular = tolerated_silence([10_000] * 15, seed)
    irregular = tolerated_silence([4_000, 28_000] * 8, seed + 1)
    assert regular <= 45, f"after regular 10 s heartbeats the detector waits {regular} s of silence"
    assert irregular >= regular + 15, (
        f"your detector tolerates {regular} s of silence after regular heartbeats and {irregular} s after "
        "irregular ones: it does not learn from the gaps (a fixed threshold)"
    )
"""


def _nbgrader(
    grade_id: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None
) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def md(text: str):
    return new_markdown_cell(text.strip("\n"))


def code(text: str):
    return new_code_cell(text.strip("\n"))


def readonly(grade_id: str, text: str):
    """A locked cell: students cannot edit it, and nbgrader restores it before grading."""
    cell = code(text)
    cell.metadata.update(_nbgrader(grade_id, grade=False, solution=False, locked=True))
    return cell


def solution(grade_id: str, text: str):
    """A cell the student completes; its `### BEGIN SOLUTION` regions become `raise NotImplementedError()`."""
    cell = code(text)
    cell.metadata.update(_nbgrader(grade_id, grade=False, solution=True, locked=False))
    return cell


def tests(grade_id: str, points: float, text: str):
    """An autograded test cell worth `points`: full points unless it raises (or writes to stderr)."""
    cell = code(text)
    cell.metadata.update(_nbgrader(grade_id, grade=True, solution=False, locked=True, points=points))
    return cell


def checked(notebook: str, grade_id: str, points: float, names: list[str], visible: str, hidden: str = ""):
    """An autograded test cell whose checks run in a fresh process on the student's saved answers
    (`emqsim.grading.check_answers`): the answers `names` are the only objects the checks take from the
    student; every helper the checks use is imported inside them, after a check that the answers left Python
    and emqsim unmodified."""
    body = visible.strip("\n")
    if hidden:
        body += "\n### BEGIN HIDDEN TESTS\n" + hidden.strip("\n") + "\n### END HIDDEN TESTS"
    assert "'''" not in body and "\\" not in body, "checks go in a raw '''-string: no ''' or backslashes"
    text = (
        "from emqsim.grading import check_answers as _check_answers\n\n"
        f"_check_answers(\n    {notebook!r},\n    {grade_id!r},\n    {names!r},\n    r'''\n{body}\n''',\n)"
    )
    return tests(grade_id, points, text)


def answer(grade_id: str, points: float, text: str):
    """A free-text answer graded by hand; the model answer sits in a solution region."""
    cell = md(text)
    cell.metadata.update(_nbgrader(grade_id, grade=True, solution=True, locked=False, points=points))
    return cell


# =============================================================================================================
NB1 = [
    md("""
# Assignment 1: how long does a dead worker hold its job?

**Expected time:** about 60 minutes. **Points:** 6 autograded + 2 graded by hand.

A job queue gives each job to one worker. When that worker dies, nobody tells the queue: the queue must notice
on its own and give the job to someone else. The time from the crash until the job is back in the queue is the
**detection latency** $T_D$ (Chen, Toueg and Aguilera call it the *detection time* of a failure detector).

In this assignment you **predict** $T_D$ for a queue that uses a lease renewed by a heartbeat, on paper, and
then **check your prediction** with the simulator `emqsim`.

**What to hand in.** Fill in every cell that says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`
line) and the cell that says `YOUR ANSWER HERE`. Run the test cell below each answer: a test that passes prints
nothing or a short confirmation; a failing test raises an `AssertionError` saying what is wrong. Some tests are
hidden: your instructor runs more checks of the same kind when grading, so make your functions work for *any*
sensible input, not just the numbers used here. Check your whole notebook with

    python -m emqsim grade 01-detection-latency.ipynb

which runs it from the top and prints your points.
"""),
    md("""
## The model

The queue (like BullMQ and its port EchoMQ) protects a job with a **lock that expires by itself**:

1. When a worker takes a job, Redis stores a lock key with a time-to-live of $L$ seconds (the **lease**).
2. While the worker is alive it renews the lock every $B$ seconds (the **heartbeat**); each renewal sets the
   time-to-live back to $L$.
3. A separate **reaper** process looks at the jobs in progress every $S$ seconds (the **sweep**) and puts back
   any job whose lock has disappeared.

The timers run independently: the worker may crash at any moment between two renewals, and the reaper's sweeps
are not synchronised with either. In this assignment the sweep is *single-phase*: one sweep that finds a lock
missing takes the job back at once.

Our queue runs with $L = 20$ s, $B = 4$ s, $S = 8$ s.
"""),
    readonly(
        "setup",
        """
import math

import matplotlib.pyplot as plt
import numpy as np

from emqsim import LeasePolicy, Uniform, simulate, standard
from emqsim.grading import student_seed
from emqsim.stats import mean_ci, summarize

LEASE, BEAT, SCAN = 20.0, 4.0, 8.0  # seconds: our queue's settings
SEED = student_seed("01-detection-latency")  # your own seed: your numbers differ from your neighbour's


def crash_scenario(beat):
    \"\"\"One job on two workers; the worker that takes it is killed at a uniformly random moment after its
    first heartbeat, so the crash falls anywhere between two renewals.\"\"\"
    return standard("fast-dead", die_after=Uniform(beat, beat + 40.0), duration=beat + 60.0, workers=2)
""",
    ),
    md("""
## Question 1 (2 points): predict the detection latency

Think about one crash. Let $u$ be the time between the worker's last renewal and its crash.

* Right after the crash the lock still has $L - u$ seconds to live. Since the crash can fall anywhere between two
  renewals, $u$ is uniformly distributed on $(0, B)$.
* Once the lock is gone, the job waits for the reaper's next sweep, which comes after a further time that is
  uniformly distributed on $(0, S)$.

Write `predict_detection(lease, beat, scan)` returning a tuple `(mean, lowest, highest)`: the expected detection
latency and the smallest and largest values it can take, in seconds.
"""),
    solution(
        "q1-predict",
        """
def predict_detection(lease, beat, scan):
    \"\"\"(mean, lowest, highest) detection latency in seconds, for a lease renewed every `beat` seconds and a
    single-phase sweep run by a dedicated reaper every `scan` seconds.\"\"\"
    ### BEGIN SOLUTION
    mean = lease - beat / 2 + scan / 2  # the lock lives L - u more seconds, u ~ U(0, B); then wait U(0, S)
    return mean, lease - beat, lease + scan
    ### END SOLUTION


predict_detection(LEASE, BEAT, SCAN)
""",
    ),
    checked(
        "01-detection-latency.ipynb",
        "q1-predict-tests",
        2,
        ["predict_detection"],
        """
import math
from emqsim import LeasePolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import mean_ci, summarize

from emqsim.grading import written_in_notebook

written_in_notebook("predict_detection", forbidden=("analytic", "emqsim.analytic", "lease_detection"))
prediction = predict_detection(30.0, 10.0, 5.0)
assert len(prediction) == 3, "return a tuple (mean, lowest, highest)"
mean, lowest, highest = (as_number(x, "each value") for x in prediction)
assert lowest < mean < highest, "the mean must lie between the lowest and the highest value"
assert math.isclose(mean, 27.5), f"lease 30, beat 10, sweep 5: the mean is not {mean}"
assert math.isclose(lowest, 20.0) and math.isclose(highest, 35.0), "check the bounds for lease 30, beat 10, sweep 5"
""",
        """
for lease, beat, scan in [(20.0, 4.0, 8.0), (45.0, 15.0, 10.0), (12.0, 3.0, 1.0), (60.0, 5.0, 30.0)]:
    mean, lowest, highest = (as_number(x, "each value") for x in predict_detection(lease, beat, scan))
    assert math.isclose(mean, lease - beat / 2 + scan / 2), (lease, beat, scan, mean)
    assert math.isclose(lowest, lease - beat), (lease, beat, scan, lowest)
    assert math.isclose(highest, lease + scan), (lease, beat, scan, highest)
""",
    ),
    md("""
## Question 2 (2 points): measure it

Now measure the same thing in the simulator. Write `detection_latencies(lease, beat, scan, replications, seed)`
that returns a list with one detection latency per simulated crash:

* the policy is `LeasePolicy(lease, beat, scan, two_phase=False, swept_by="reaper")` (single-phase sweep, run
  by a dedicated reaper, as in our model);
* the scenario is `crash_scenario(beat)` (defined above);
* run `simulate(scenario, policy, seed=seed, replication=r)` for `r = 0, 1, ..., replications - 1`. The same
  `(seed, replication)` always gives the same run, so your results are reproducible;
* `summarize(run).detection_latencies` is the list of detection latencies in one run (here: one crash per run).
"""),
    solution(
        "q2-simulate",
        """
def detection_latencies(lease, beat, scan, replications=200, seed=0):
    \"\"\"One simulated detection latency (seconds) per crash, over `replications` runs.\"\"\"
    ### BEGIN SOLUTION
    policy = LeasePolicy(lease, beat, scan, two_phase=False, swept_by="reaper")
    scenario = crash_scenario(beat)
    latencies = []
    for r in range(replications):
        run = simulate(scenario, policy, seed=seed, replication=r)
        latencies.extend(summarize(run).detection_latencies)
    return latencies
    ### END SOLUTION
""",
    ),
    checked(
        "01-detection-latency.ipynb",
        "q2-simulate-tests",
        2,
        ["detection_latencies"],
        """
import math
from emqsim import LeasePolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import mean_ci, summarize

import numpy as np

lat = [as_number(x, "each latency") for x in detection_latencies(20.0, 4.0, 8.0, replications=200, seed=1)]
assert len(lat) == 200, f"expected one latency per run (200), got {len(lat)}"
slack = 0.05  # the simulated network adds a few milliseconds per round trip
assert all(16.0 - slack <= x <= 28.0 + slack for x in lat), "some latencies lie outside [L - B, L + S]"
assert abs(np.mean(lat) - 22.0) < 1.0, f"the simulated mean {np.mean(lat):.2f} is far from 22"
""",
        """
def reference(lease, beat, scan, replications, seed):
    policy = LeasePolicy(lease, beat, scan, two_phase=False, swept_by="reaper")
    scenario = standard("fast-dead", die_after=Uniform(beat, beat + 40.0), duration=beat + 60.0, workers=2)
    out = []
    for r in range(replications):
        out.extend(summarize(simulate(scenario, policy, seed=seed, replication=r)).detection_latencies)
    return out


seed = student_seed("01-detection-latency") + 7
got = [as_number(x, "each latency") for x in detection_latencies(45.0, 15.0, 10.0, replications=40, seed=seed)]
want = reference(45.0, 15.0, 10.0, 40, seed)
assert len(got) == 40 and all(abs(a - b) < 1e-9 for a, b in zip(got, want)), "not the simulated latencies"
""",
    ),
    md("""
### Look at the distribution

The cell below simulates 200 crashes and draws their detection latencies next to your prediction. The shape is
the sum of two uniform waits (the rest of the lease, and the wait for the sweep): a trapezoid.
"""),
    readonly(
        "explore",
        """
latencies = detection_latencies(LEASE, BEAT, SCAN, replications=200, seed=SEED)
mean, lowest, highest = predict_detection(LEASE, BEAT, SCAN)

fig, ax = plt.subplots(figsize=(7, 3))
ax.hist(latencies, bins=30, color="tab:blue", alpha=0.7, label="simulated crashes")
ax.axvline(mean, color="black", label=f"predicted mean {mean:g} s")
ax.axvspan(lowest, highest, color="tab:orange", alpha=0.15, label="predicted range")
ax.set_xlabel("detection latency (s)")
ax.set_ylabel("crashes")
ax.legend(loc="upper left", fontsize=8)
plt.show()
print(f"simulated mean {np.mean(latencies):.2f} s, min {min(latencies):.2f} s, max {max(latencies):.2f} s")
""",
    ),
    md("""
## Question 3 (1 point): is the difference just noise?

The simulated mean is never exactly the predicted one: 200 crashes are a sample. Use
`mean_ci(values)` (from `emqsim.stats`; it returns `(mean, low, high)`, a 95% confidence interval for the mean)
on `latencies` from the cell above. Set `ci_low` and `ci_high` to the interval's ends, and `prediction_inside`
to `True` if the predicted mean lies inside the interval, else `False`.
"""),
    solution(
        "q3-ci",
        """
### BEGIN SOLUTION
_, ci_low, ci_high = mean_ci(latencies)
prediction_inside = ci_low <= predict_detection(LEASE, BEAT, SCAN)[0] <= ci_high
### END SOLUTION
print(f"95% CI of the mean: [{ci_low:.2f}, {ci_high:.2f}] s; prediction inside: {prediction_inside}")
""",
    ),
    checked(
        "01-detection-latency.ipynb",
        "q3-ci-tests",
        1,
        ["ci_low", "ci_high", "prediction_inside"],
        """
import math
from emqsim import LeasePolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import mean_ci, summarize

assert prediction_inside in (True, False) and type(prediction_inside) in (bool, __import__("numpy").bool_), (
    "prediction_inside should be True or False"
)
low, high = as_number(ci_low, "ci_low"), as_number(ci_high, "ci_high")
policy = LeasePolicy(20.0, 4.0, 8.0, two_phase=False, swept_by="reaper")
scenario = standard("fast-dead", die_after=Uniform(4.0, 44.0), duration=64.0, workers=2)
seed = student_seed("01-detection-latency")
latencies = []
for r in range(200):
    latencies.extend(summarize(simulate(scenario, policy, seed=seed, replication=r)).detection_latencies)
_, want_low, want_high = mean_ci(latencies)
assert math.isclose(low, want_low) and math.isclose(high, want_high), "use mean_ci(latencies) on your own run"
assert bool(prediction_inside) == (low <= 22.0 <= high)
""",
    ),
    md("""
## Question 4 (1 point): size the lease for a target

The on-call team asks: *"after a worker dies, its job must be back in the queue within `worst_case` seconds,
always"*. The sweep period is fixed by the platform (`scan`). Write `largest_lease(worst_case, scan)` that returns
the longest lease meeting the target (ignore the few milliseconds the network adds). Longer leases are better
here: they tolerate longer hiccups of a live worker.

The test then runs 200 crashes with that lease, a heartbeat of a third of it, and the given sweep period.
"""),
    solution(
        "q4-size",
        """
def largest_lease(worst_case, scan):
    \"\"\"The longest lease (seconds) whose worst-case detection latency is at most `worst_case`.\"\"\"
    ### BEGIN SOLUTION
    return worst_case - scan  # the worst case is L + S, whatever the heartbeat
    ### END SOLUTION


largest_lease(20.0, 5.0)
""",
    ),
    checked(
        "01-detection-latency.ipynb",
        "q4-size-tests",
        1,
        ["largest_lease"],
        """
import math
from emqsim import LeasePolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import mean_ci, summarize

lease = as_number(largest_lease(20.0, 5.0), "largest_lease(20, 5)")
assert lease > 0, "the lease must be positive"
assert abs(lease - 15.0) < 0.1, f"a lease of {lease} s is not the longest one that meets a 20 s target"
policy = LeasePolicy(lease, lease / 3, 5.0, two_phase=False, swept_by="reaper")
scenario = standard("fast-dead", die_after=Uniform(lease / 3, lease / 3 + 40.0), duration=lease / 3 + 60.0, workers=2)
worst = max(
    x for r in range(100) for x in summarize(simulate(scenario, policy, seed=5, replication=r)).detection_latencies
)
assert worst <= 20.0 + 0.05, f"a crash took {worst:.2f} s to detect"
""",
        """
assert abs(as_number(largest_lease(60.0, 10.0), "largest_lease") - 50.0) < 0.1
assert abs(as_number(largest_lease(9.0, 1.5), "largest_lease") - 7.5) < 0.1
""",
    ),
    md("""
## Question 5 (2 points, graded by hand)

With our settings the mean detection latency ($L - B/2 + S/2 = 22$ s) is *longer* than the lease; with
$L = 30$, $B = 10$, $S = 5$ it is *shorter*. In three or four sentences: where do the $-B/2$ and the $+S/2$ come
from, and which of the three knobs would you turn to cut the **worst case** without sending more heartbeats
to Redis? Say what that costs.
"""),
    answer(
        "q5-explain",
        2,
        """
### BEGIN SOLUTION
*Model answer.* The last renewal happened on average $B/2$ before the crash (the crash is uniform between two
renewals), so the lock has already used $B/2$ of its lease when the worker dies: it vanishes $L - u$ after the
crash, $L - B/2$ on average. After that the job waits for the next sweep, uniform on $(0, S)$: $S/2$ on average.
The worst case is $L + S$ and does not involve $B$, so sweeping more often (smaller $S$) cuts it without any
extra heartbeats. A sweep is one scan of the `active` list for the whole queue every $S$ seconds, so the cost is
a little more Redis work per queue, not per job; shortening $L$ instead would force a shorter $B$ too (more
renewals per job) to keep $L/B \\ge 3$.

*Grading:* 1 point for explaining both terms (uniform position of the crash between renewals; uniform wait for
the sweep), 1 point for naming the sweep period with its cost.
### END SOLUTION
""",
    ),
]


# =============================================================================================================
NB2 = [
    md("""
# Assignment 2: tune a lease for workers that pause

**Expected time:** about 90 minutes. **Points:** 8 autograded + 2 graded by hand.

Our workers run on a garbage-collected runtime. Now and then a worker **freezes** (a stop-the-world GC pause):
it neither works nor sends heartbeats, then resumes as if nothing happened. If a pause outlasts what is left of
the lease, the lock lapses, the reaper takes the job back, and another worker runs it again: a **false
reclaim** (the worker was not dead). Short leases find crashed workers fast but falsely reclaim paused ones;
long leases do the opposite.

Your job: pick a lease $L$ and a heartbeat period $B$ that keep false reclaims within the budget while finding
dead workers as fast as possible. The grader runs your choice on **seeds you do not see**.

**The facts** (set by the platform team, do not change them):

* pauses: about 120 per worker-hour, lengths log-normal with median 1 s and $\\sigma = 1$ (`PAUSES` below);
* jobs take 30 s each; workers crash too (and are restarted), so there are dead workers to detect;
* the reaper runs a single-phase sweep every `SCAN` = 2 s;
* Redis load: a worker may send at most one heartbeat every `MIN_BEAT` = 2 s, so $B \\ge 2$;
* **budget:** at most 1 false reclaim per 100 jobs, *with 95% confidence*: the upper end of the 95% confidence
  interval of the false-reclaim rate must be at most `BUDGET` = 0.01;
* **goal:** the mean detection latency (crash to reclaim) must be at most `TARGET_LATENCY` = 18 s.

Fill in every `# YOUR CODE HERE` and the `YOUR ANSWER HERE` cell; check everything with
`python -m emqsim grade 02-tuning-under-pauses.ipynb`.
"""),
    readonly(
        "setup",
        """
import math

import numpy as np

from emqsim import Exponential, Fixed, LeasePolicy, LogNormal, RandomFaults, Scenario, Uniform, simulate
from emqsim.stats import aggregate, summarize

PAUSES = LogNormal(median=1.0, sigma=1.0)  # GC pause lengths, seconds
FREEZE_RATE = 120.0  # pauses per worker-hour
JOB_SECONDS = 30.0
SCAN = 2.0  # the reaper's sweep period (s)
MIN_BEAT = 2.0  # at most one heartbeat every 2 s
BUDGET = 0.01  # false reclaims per job: upper end of the 95% CI
TARGET_LATENCY = 18.0  # seconds, mean detection latency
PRACTICE_SEEDS = [1]  # use these while exploring; the grader checks them and seeds you never see


def gc_scenario(jobs=200):
    \"\"\"Four workers and `jobs` 30-second jobs; workers pause (GC) and sometimes crash (restarted after 5 s).\"\"\"
    return Scenario(
        name="gc-pauses",
        workers=4,
        jobs=jobs,
        duration=Fixed(JOB_SECONDS),
        random_faults=RandomFaults(
            crash_rate=10.0, restart_after=5.0, freeze_rate=FREEZE_RATE, freeze_duration=PAUSES
        ),
    )


def lease_policy(lease, beat):
    \"\"\"Our queue's policy: your lease and heartbeat, the platform's sweep.\"\"\"
    return LeasePolicy(lease, beat, SCAN, two_phase=False, swept_by="reaper")


def evaluate(lease, beat, seeds, replications=8):
    \"\"\"Simulate `replications` runs of `gc_scenario()` per seed and pool them into one table row (a dict).
    Useful keys: false_reclaims_per_job, false_reclaims_per_job_ci ([low, high]), detection_latency_mean_s,
    detections_total.\"\"\"
    policy = lease_policy(lease, beat)
    scenario = gc_scenario()
    summaries = [
        summarize(simulate(scenario, policy, seed=seed, replication=r, record_locks=False))
        for seed in seeds
        for r in range(replications)
    ]
    return aggregate(summaries)


def show(row):
    low, high = row["false_reclaims_per_job_ci"]
    print(
        f"lease {row['lease']:5.2f} s  beat {row['beat']:4.2f} s | false reclaims {row['false_reclaims_total']:3d} "
        f"of {row['jobs_total']} jobs, rate {row['false_reclaims_per_job']:.4f} (95% CI {low:.4f}..{high:.4f}) | "
        f"mean detection {row['detection_latency_mean_s']:.2f} s over {row['detections_total']} crashes"
    )
""",
    ),
    md("""
## How a pause becomes a false reclaim

The renewal is *token-checked*: it only extends a lock that still exists and still holds the worker's token
(BullMQ's `extendLock`). So once a lock has lapsed it can never be renewed again, and the reaper will take the
job back at its next sweep, even if the worker resumed in the meantime.

A pause of length $P$ that starts $u$ seconds after the worker's last renewal lapses the lock if and only if
$u + P > L$. The pause starts at a random moment, so $u$ is uniform on $(0, B)$. Hence one pause lapses the
lease with probability

$$p(L, B) = \\frac{1}{B}\\int_0^B G(L - u)\\,du, \\qquad G(x) = P(\\text{pause} > x).$$

Every distribution in emqsim has a method `survival(x)` that returns $G(x)$, e.g. `PAUSES.survival(5.0)`.

## Question 1 (2 points): the lapse probability of one pause

Write `p_lapse(lease, beat, pauses)`: the probability that one pause drawn from `pauses` lapses a lease of
`lease` seconds renewed every `beat` seconds. Compute the integral numerically: `scipy.integrate.quad`, or the
average of $G(L - u)$ over a fine grid of $u$ values in $(0, B)$, both work (each `survival` call takes about a
millisecond, so a few hundred points is plenty).
"""),
    solution(
        "q1-p-lapse",
        """
from scipy import integrate


def p_lapse(lease, beat, pauses):
    \"\"\"P(one pause lapses the lease): the mean of G(lease - u) over u uniform on (0, beat).\"\"\"
    ### BEGIN SOLUTION
    value, _ = integrate.quad(lambda u: pauses.survival(lease - u), 0.0, beat)
    return value / beat
    ### END SOLUTION


print(f"p_lapse(10, 2) = {p_lapse(10.0, 2.0, PAUSES):.5f}")
""",
    ),
    checked(
        "02-tuning-under-pauses.ipynb",
        "q1-p-lapse-tests",
        2,
        ["p_lapse"],
        """
import math
import numpy as np
from emqsim import Exponential, LogNormal, Uniform
from emqsim.grading import as_number
PAUSES = LogNormal(median=1.0, sigma=1.0)


def reference(lease, beat, pauses, n=400):
    u = (np.arange(n) + 0.5) / n * beat
    return float(np.mean([pauses.survival(lease - x) for x in u]))


from emqsim.grading import written_in_notebook

written_in_notebook("p_lapse", forbidden=("analytic", "emqsim.analytic", "freeze_lapse_probability"))
p = as_number(p_lapse(10.0, 2.0, PAUSES), "p_lapse(10, 2, PAUSES)")
assert 0.0 < p < 1.0, "a probability lies between 0 and 1"
assert PAUSES.survival(10.0) <= p <= PAUSES.survival(8.0), "p must lie between G(L) and G(L - B)"
assert math.isclose(p, reference(10.0, 2.0, PAUSES), rel_tol=5e-3), f"p_lapse(10, 2) = {p} looks wrong"
assert as_number(p_lapse(20.0, 2.0, PAUSES), "p") < p < as_number(p_lapse(10.0, 5.0, PAUSES), "p"), (
    "longer leases lapse less, longer beats more"
)
""",
        """
for lease, beat, pauses in [
    (15.0, 2.0, PAUSES),
    (30.0, 10.0, PAUSES),
    (8.0, 3.0, Exponential(2.0)),
    (6.0, 2.0, Uniform(0.0, 7.0)),
    (12.0, 4.0, LogNormal(0.5, 1.5)),
]:
    got, want = as_number(p_lapse(lease, beat, pauses), "p_lapse"), reference(lease, beat, pauses)
    assert math.isclose(got, want, rel_tol=1e-2, abs_tol=1e-6), (lease, beat, pauses, got, want)
""",
    ),
    md("""
## Question 2 (2 points): from one pause to the whole fleet

1. Set `PAUSES_PER_JOB` to the expected number of pauses that hit a job while it runs. (Pauses arrive at
   `FREEZE_RATE` per worker-hour, and a worker runs one job at a time, for `JOB_SECONDS`.)
2. Write `predicted_false_rate(lease, beat)`: the expected number of false reclaims per job. (Pauses are rare
   and mostly short, so treat them as independent: each one lapses the lease with probability `p_lapse`.)
3. Write `predicted_latency(lease, beat)`: the mean detection latency of a crash, from Assignment 1, with this
   queue's sweep period `SCAN`.
"""),
    solution(
        "q2-predict",
        """
### BEGIN SOLUTION
PAUSES_PER_JOB = FREEZE_RATE / 3600 * JOB_SECONDS
### END SOLUTION


def predicted_false_rate(lease, beat):
    \"\"\"Expected false reclaims per job.\"\"\"
    ### BEGIN SOLUTION
    return PAUSES_PER_JOB * p_lapse(lease, beat, PAUSES)
    ### END SOLUTION


def predicted_latency(lease, beat):
    \"\"\"Mean detection latency (s) of a crash.\"\"\"
    ### BEGIN SOLUTION
    return lease - beat / 2 + SCAN / 2
    ### END SOLUTION


print(f"{PAUSES_PER_JOB = }")
for lease, beat in [(30.0, 10.0), (8.0, 2.0)]:
    print(
        f"lease {lease:g} s, beat {beat:g} s: {predicted_false_rate(lease, beat):.4f} false reclaims per job, "
        f"mean detection {predicted_latency(lease, beat):g} s"
    )
""",
    ),
    checked(
        "02-tuning-under-pauses.ipynb",
        "q2-predict-tests",
        2,
        ["PAUSES_PER_JOB", "predicted_false_rate", "predicted_latency"],
        """
import math
import numpy as np
from emqsim import Exponential, LogNormal, Uniform
from emqsim.grading import as_number
PAUSES = LogNormal(median=1.0, sigma=1.0)


def reference(lease, beat, n=400):
    u = (np.arange(n) + 0.5) / n * beat
    return float(np.mean([PAUSES.survival(lease - x) for x in u]))


per_job = as_number(PAUSES_PER_JOB, "PAUSES_PER_JOB")
assert math.isclose(per_job, 1.0), f"{per_job} pauses per job? count them per worker-second"
rate = as_number(predicted_false_rate(15.0, 2.0), "predicted_false_rate(15, 2)")
assert math.isclose(rate, reference(15.0, 2.0), rel_tol=1e-2), "one pause per job: the rate is p_lapse"
assert math.isclose(as_number(predicted_latency(30.0, 10.0), "latency"), 26.0), "mean detection: L - B/2 + S/2, S = SCAN"
""",
        """
assert math.isclose(as_number(predicted_latency(12.0, 3.0), "latency"), 11.5)
assert math.isclose(as_number(predicted_false_rate(30.0, 10.0), "rate"), reference(30.0, 10.0), rel_tol=1e-2)
assert math.isclose(as_number(predicted_false_rate(9.0, 4.0), "rate"), reference(9.0, 4.0), rel_tol=1e-2)
""",
    ),
    md("""
### Check the predictions against the simulator

The next cell simulates two settings on the practice seeds: the common default (lease 30 s, beat 10 s) and an
aggressive one (lease 8 s, beat 2 s). Compare each line with your predictions above. You may change this cell
and run more settings while you explore (each `evaluate` call simulates 1600 jobs and takes a few seconds).
"""),
    code("""
for lease, beat in [(30.0, 10.0), (8.0, 2.0)]:
    show(evaluate(lease, beat, PRACTICE_SEEDS))
"""),
    md("""
## Question 3 (4 points): choose the lease and the heartbeat

Set `LEASE` and `BEAT` (seconds). Requirements, checked by the grader on its own seeds (two seeds, 3200 jobs):

* `BEAT >= MIN_BEAT` and `BEAT < LEASE`;
* the upper end of the 95% confidence interval of the false-reclaim rate is at most `BUDGET`;
* the mean detection latency is at most `TARGET_LATENCY`.

Hints. The rate the grader *measures* is your predicted rate plus noise, and the confidence interval's upper
end sits above the measured rate: with 3200 jobs, a true rate of 0.5% gives an upper end around 0.8%, and an
unlucky set of seeds measures more than the true rate. So aim your *prediction* well below the budget (a third
of it is a sensible target). Which heartbeat is best? For a fixed mean detection latency
$L - B/2 + S/2$, compare $p(L, B)$ for a short and a long beat. Search with your formulas (fast), then confirm
with `evaluate` (slow).
"""),
    solution(
        "q3-choose",
        """
### BEGIN SOLUTION
def shortest_safe_lease(beat, target_rate, step=0.05):
    \"\"\"The shortest lease (on a `step` grid) whose predicted false-reclaim rate is at most `target_rate`.\"\"\"
    low, high = beat + step, 120.0  # bisection: the rate falls as the lease grows
    while high - low > step:
        middle = (low + high) / 2
        if predicted_false_rate(middle, beat) <= target_rate:
            high = middle
        else:
            low = middle
    return math.ceil(high / step) * step


TARGET_RATE = BUDGET / 3  # leaves room for noise and for the confidence interval
candidates = []
for beat in [2.0, 3.0, 4.0, 6.0]:
    lease = shortest_safe_lease(beat, TARGET_RATE)
    candidates.append((predicted_latency(lease, beat), lease, beat))
    print(f"beat {beat:g} s: shortest safe lease {lease:.2f} s, mean detection {candidates[-1][0]:.2f} s")
_, LEASE, BEAT = min(candidates)  # the shortest beat wins: a pause is likeliest to lapse the lease late
LEASE = round(LEASE, 2)
### END SOLUTION
print(f"chosen: lease {LEASE} s, beat {BEAT} s")
show(evaluate(LEASE, BEAT, PRACTICE_SEEDS))
""",
    ),
    checked(
        "02-tuning-under-pauses.ipynb",
        "q3-choose-tests",
        4,
        ["LEASE", "BEAT"],
        """
from emqsim import Fixed, LeasePolicy, LogNormal, RandomFaults, Scenario, simulate
from emqsim.grading import as_number
from emqsim.stats import aggregate, summarize

lease, beat = as_number(LEASE, "LEASE"), as_number(BEAT, "BEAT")
assert 2.0 <= beat < lease, "need MIN_BEAT <= BEAT < LEASE"


def evaluate(seeds, replications=8):
    scenario = Scenario(
        name="gc-pauses",
        workers=4,
        jobs=200,
        duration=Fixed(30.0),
        random_faults=RandomFaults(
            crash_rate=10.0, restart_after=5.0, freeze_rate=120.0, freeze_duration=LogNormal(1.0, 1.0)
        ),
    )
    policy = LeasePolicy(lease, beat, 2.0, two_phase=False, swept_by="reaper")
    runs = [simulate(scenario, policy, seed=s, replication=r, record_locks=False) for s in seeds for r in range(replications)]
    return aggregate([summarize(run) for run in runs])


def check(seeds):
    row = evaluate(seeds)
    high = row["false_reclaims_per_job_ci"][1]
    assert high <= 0.01, f"false reclaims over budget on seeds {seeds}: CI upper end {high:.4f} > 0.01"
    latency = row["detection_latency_mean_s"]
    assert row["detections_total"] > 0 and latency <= 18.0, f"mean detection {latency:.2f} s is too slow"


check([1])
""",
        """
HIDDEN_SEEDS = [9173, 40221]  # instructors: change these each term (see README.md)
check(HIDDEN_SEEDS)
""",
    ),
    md("""
## Question 4 (2 points, graded by hand)

(a) Why does the grader compare the *upper end of the confidence interval* with the budget, rather than the
false-reclaim rate it measured? (b) Suppose a new runtime version makes pauses heavier-tailed ($\\sigma = 1.5$,
same median). Would you change `LEASE`, `BEAT`, or both, and in which direction? What does the change cost?
"""),
    answer(
        "q4-explain",
        2,
        """
### BEGIN SOLUTION
*Model answer.* (a) The measured rate is a sample: with a few thousand jobs it can be well below the true rate by
chance, so a setting that looks compliant on one set of seeds may not be. Requiring the upper 95% bound to be
within budget means that the data would be unlikely if the true rate exceeded the budget: compliance is
demonstrated rather than hoped for (and fresh seeds cannot be fitted to). (b) Heavier tails make long pauses
more common, so $G(L - u)$ grows for every $L$: keep the shortest beat the budget allows (a short beat keeps
$u$ small, which is always better for a fixed latency) and lengthen the lease until $p(L, B)$ is back within
budget. The cost is slower detection of really dead workers: the mean detection latency grows one-for-one with
$L$ (and renewal traffic stays at its maximum).

*Grading:* 1 point for (a) (sampling noise / evidence of compliance), 1 point for (b) (longer lease, beat stays
short, cost = detection latency).
### END SOLUTION
""",
    ),
]


# =============================================================================================================
NB3 = [
    md("""
# Assignment 3: write your own failure detector

**Expected time:** about 2 hours. **Points:** 9 autograded + 2 graded by hand.

A fixed timeout cannot tell a slow worker from a dead one. A lease renewed by a heartbeat can, because a live
worker keeps *saying* it is alive. In this assignment you build a third kind of detector: one that **learns**
how regular the heartbeats are and suspects a worker when its heartbeat is later than that history makes
plausible. This is the idea of the **phi accrual failure detector** (Hayashibara et al., 2004; used by
Cassandra and Akka):

$$\\varphi(t) = -\\log_{10}\\bigl(1 - F(t - t_{\\text{last}})\\bigr),$$

where $t_{\\text{last}}$ is the time of the last heartbeat and $F$ is the distribution of the gaps between
heartbeats, estimated from the gaps seen so far. A job is taken back when $\\varphi$ exceeds a threshold (8 in
Cassandra: a one-in-$10^8$ delay). A simpler variant, also accepted here: suspect when the silence exceeds
the mean gap plus a few standard deviations (a *timeout learned from the gaps*).

Your detector must beat the fixed timeouts on the standard scenarios:

* `slow-alive` (a 15-minute job on a healthy worker): **fewer false reclaims** than `TimeoutPolicy(60)`;
* `fast-dead` (the worker dies 1 s into its job): **lower detection latency** than `TimeoutPolicy(600)`;
* it must **adapt**: the grader feeds it a regular heartbeat history and an irregular one and asks `suspect`
  how long a silence it tolerates after each; a detector that tolerates the same silence after both is a fixed
  timeout, and scores 0 on questions 2, 4 and 5 (at most a third of the detector's points);
* and, in hidden tests, the same on other seeds and job lengths, no duplicate completions when a worker freezes
  (more than once per job, too), and no more false reclaims than the standard lease when the network loses
  heartbeats.

The tests run your class in a fresh Python process, from your **saved** notebook: save before you run them.

Check your notebook with `python -m emqsim grade 03-write-a-policy.ipynb`.
"""),
    md("""
## How emqsim talks to a policy

A policy is a subclass of `emqsim.ReclaimPolicy`. The simulator reads four attributes:

| attribute | meaning |
|---|---|
| `renewal` | the heartbeat rule workers follow while they hold a job, e.g. `RenewalRule.every(10.0)`, or `None` |
| `sweep_interval_ms` | how often the sweep runs (milliseconds) |
| `swept_by` | `"reaper"`: one dedicated process that never dies runs the sweep |
| `fenced` | `True`: a finish is accepted only from the current holder of the job's token |

and calls four methods, each running *inside Redis* at one instant (like a Lua script), with the Redis clock
`now_ms` in milliseconds:

| method | called when | returns |
|---|---|---|
| `take(queue, token, now_ms)` | a worker asks for a job | the job id, or `None` |
| `renew(queue, held, now_ms)` | a worker's heartbeat arrives; `held` is a list of `(job_id, token)` | the ids whose heartbeat was refused |
| `finish(queue, job_id, token, now_ms)` | a worker finished a job | (inherited; leave it) |
| `sweep(queue, now_ms)` | every `sweep_interval_ms` | a `SweepReply` listing the jobs taken back |

The simulator gives each run a fresh copy of the policy, so you can keep per-run state on `self`. The helper
cell below gives you the queue operations you need: the list of active jobs, the token check, and the reclaim.
"""),
    readonly(
        "setup",
        """
import math
import statistics
import warnings

from scipy import stats

from emqsim import LeasePolicy, ReclaimPolicy, RenewalRule, TimeoutPolicy, Uniform, simulate, standard
from emqsim.protocol import SweepReply
from emqsim.stats import aggregate, summarize


def active_jobs(queue):
    \"\"\"Ids of the jobs in progress (Redis list `active`).\"\"\"
    return queue.store.execute("LRANGE", queue.keys.active, 0, -1)


def holds_token(queue, job_id, token):
    \"\"\"True if `token` is still the job's current fencing token (the job was not taken back since).\"\"\"
    return queue.store.execute("GET", queue.keys.lock(job_id)) == token


def reclaim(queue, job_id):
    \"\"\"Take a job back: out of `active`, its token deleted (so the old holder's finish is refused), back to the
    front of `wait` for the next free worker. True if the job was active.\"\"\"
    x = queue.store.execute
    if not x("LREM", queue.keys.active, 1, job_id):
        return False
    x("DEL", queue.keys.lock(job_id))
    x("HINCRBY", queue.keys.job(job_id), "stc", 1)
    x("RPUSH", queue.keys.wait, job_id)
    return True


def measure(policy, scenario, replications, seed=0):
    \"\"\"Run `scenario` under `policy` `replications` times and pool the runs into one table row (a dict).\"\"\"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [
            simulate(scenario, policy, seed=seed, replication=r, record_locks=False)
            for r in range(replications)
        ]
    return aggregate([summarize(run) for run in runs])


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
""",
    ),
    md("""
## Question 1: the detector (graded by the tests of Questions 2 to 5)

Complete `AdaptiveDetector`. The parts that are given: the heartbeat rule (workers send one every `beat`
seconds), the fencing (each take sets a token without expiry; `holds_token` refuses heartbeats from a worker
whose job was taken back), and the sweep loop. You write:

* `__init__`: any state you need for learning (e.g. a list of recent gaps);
* `renew`: for each accepted heartbeat, learn from the gap since the job's previous heartbeat, and remember the
  time of this one in `self.last_beat`;
* `suspect(job_id, now_ms)`: `True` if the job's worker should now be presumed dead.

Tips. The first gap after a take (take to first heartbeat) is shorter than the others, because the worker's
timer was already running: learn only from gaps between two heartbeats (`self.taken_at` helps). Until you have
seen a handful of gaps (say 10), do not trust them: use the nominal period `self.beat_ms`. A perfectly regular
heartbeat has a standard deviation of 0, which makes $\\varphi$ jump from 0 to infinity: put a floor under it
(say a quarter of the mean gap). `scipy.stats.norm.logsf(x, mean, sd)` gives $\\ln(1 - F(x))$ without
underflow, so $\\varphi = -$`norm.logsf(...)`$/\\ln 10$.
"""),
    solution(
        "q1-detector",
        """
class AdaptiveDetector(ReclaimPolicy):
    \"\"\"Suspect a job when its heartbeat is later than the gaps seen so far make plausible.\"\"\"

    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=8.0):
        self.renewal = RenewalRule.every(beat)  # workers send a heartbeat every `beat` seconds
        self.sweep_interval_ms = round(scan * 1000)
        self.swept_by = "reaper"
        self.fenced = True
        self.beat_ms = round(beat * 1000)
        self.threshold = threshold
        self.taken_at = {}  # job id -> Redis time (ms) of its current take
        self.last_beat = {}  # job id -> Redis time (ms) of its last heartbeat, or of its take if none yet
        ### BEGIN SOLUTION
        self.gaps = []  # recent gaps between two heartbeats (ms), all jobs together
        self.window = 200
        self.min_gaps = 10  # trust the nominal period until this many gaps were seen
        ### END SOLUTION

    def take(self, queue, token, now_ms):
        job_id = queue.take(token, now_ms, lock_ms=None)  # a token without expiry: fencing only
        if job_id is not None:
            self.taken_at[job_id] = now_ms
            self.last_beat[job_id] = now_ms
        return job_id

    def renew(self, queue, held, now_ms):
        refused = []
        for job_id, token in held:
            if not holds_token(queue, job_id, token):
                refused.append(job_id)  # taken back already: this worker must not learn or renew
                continue
            ### BEGIN SOLUTION
            if self.last_beat[job_id] > self.taken_at[job_id]:  # skip the (shorter) take -> first beat gap
                self.gaps.append(now_ms - self.last_beat[job_id])
                del self.gaps[: -self.window]
            self.last_beat[job_id] = now_ms
            ### END SOLUTION
        return refused

    def suspect(self, job_id, now_ms):
        ### BEGIN SOLUTION
        last = self.last_beat.get(job_id)
        if last is None:
            return False
        if len(self.gaps) < self.min_gaps:
            mean, sd = self.beat_ms, self.beat_ms / 4
        else:
            mean = statistics.fmean(self.gaps)
            sd = max(statistics.pstdev(self.gaps), mean / 4)
        phi = -stats.norm.logsf(now_ms - last, mean, sd) / math.log(10)
        return phi > self.threshold
        ### END SOLUTION

    def sweep(self, queue, now_ms):
        reclaimed = []
        for job_id in active_jobs(queue):
            if self.suspect(job_id, now_ms) and reclaim(queue, job_id):
                reclaimed.append(job_id)
                self.last_beat.pop(job_id, None)
        return SweepReply(skipped=False, reclaimed=tuple(reclaimed))
""",
    ),
    md("""
Try it on one run of each scenario before running the tests. `run.attempts` lists every take of the job: who
took it, when, and how it ended.
"""),
    code("""
for scenario in (SLOW_ALIVE, FAST_DEAD):
    run = simulate(scenario, AdaptiveDetector(), seed=0)
    print(scenario.name)
    for a in run.attempts:
        print(
            f"  attempt {a.attempt} on worker {a.worker}: taken at {a.taken_at:.1f} s, outcome {a.outcome}, "
            f"detection latency {a.detection_latency}"
        )
"""),
    md("""
## Question 2 (1 point): it runs, and it is fenced

The test builds your detector with its default settings and runs each scenario once.
"""),
    checked(
        "03-write-a-policy.ipynb",
        "q2-basics-tests",
        1,
        ["AdaptiveDetector"],
        DETECTOR_CHECKS
        + """
made = detector()
assert made.renewal is not None and made.fenced, "keep the heartbeat and the fencing"
row = measure(made, SLOW_ALIVE, replications=1)
assert row["duplicate_completions_total"] == 0 and row["reclaims_total"] == 0, "a healthy worker's job was taken back"
row = measure(detector(), FAST_DEAD, replications=1)
assert row["detections_total"] == 1 and row["crashes_undetected_total"] == 0, "the dead worker's job was never taken back"
""",
        """
adaptive(seed=401)
""",
    ),
    md("""
## Question 3 (3 points): slow but alive

On `slow-alive` the fixed 60-second timeout takes the job away from a healthy worker again and again. Your
detector must do better (the hidden tests ask for no false reclaim at all, on other seeds and job lengths).
"""),
    checked(
        "03-write-a-policy.ipynb",
        "q3-slow-alive-tests",
        3,
        ["AdaptiveDetector"],
        DETECTOR_CHECKS
        + """
mine = measure(detector(), SLOW_ALIVE, replications=5)
timeout = measure(TimeoutPolicy(60.0), SLOW_ALIVE, replications=5)
print(f"false reclaims: yours {mine['false_reclaims_total']}, TimeoutPolicy(60) {timeout['false_reclaims_total']}")
assert mine["false_reclaims_total"] < timeout["false_reclaims_total"], "no fewer false reclaims than the 60 s timeout"
assert mine["duplicate_completions_total"] == 0
""",
        """
for duration, seed in [(1800.0, 101), (300.0, 102)]:
    row = measure(detector(), standard("slow-alive", duration=duration, workers=2), 3, seed=seed)
    assert row["false_reclaims_total"] == 0, (duration, seed, row["false_reclaims_total"])
""",
    ),
    md("""
## Question 4 (3 points): fast but dead

On `fast-dead` the 10-minute timeout leaves the dead worker's job untouched for almost 600 s. Your detector must
be faster on every seed the grader tries (hidden: crashes at other moments of the job, within 300 s on average).
"""),
    checked(
        "03-write-a-policy.ipynb",
        "q4-fast-dead-tests",
        3,
        ["AdaptiveDetector"],
        DETECTOR_CHECKS
        + """
mine = measure(detector(), FAST_DEAD, replications=10)
timeout = measure(TimeoutPolicy(600.0), FAST_DEAD, replications=10)
print(f"mean detection: yours {mine['detection_latency_mean_s']:.1f} s, TimeoutPolicy(600) {timeout['detection_latency_mean_s']:.1f} s")
assert mine["crashes_undetected_total"] == 0, "some dead worker's job was never taken back"
assert mine["detection_latency_mean_s"] < timeout["detection_latency_mean_s"], "not faster than the 600 s timeout"
""",
        """
scenario = standard("fast-dead", die_after=Uniform(1.0, 50.0), duration=60.0, workers=2)
mine = measure(detector(), scenario, 10, seed=202)
assert mine["crashes_undetected_total"] == 0
assert mine["detection_latency_mean_s"] < 300.0, mine["detection_latency_mean_s"]
scenario = standard("fast-dead", die_after=Uniform(1.0, 200.0), duration=240.0, workers=2)
mine = measure(detector(), scenario, 10, seed=203)
assert mine["crashes_undetected_total"] == 0 and mine["detection_latency_mean_s"] < 120.0, mine["detection_latency_mean_s"]
adaptive(seed=402)  # fast on a dead worker because it learned, not because of a short fixed timeout
""",
    ),
    md("""
## Question 5 (2 points): pauses and a lossy network

Two harder situations. A worker that freezes for 45 s looks dead to any detector, and may have its job taken
back; what must never happen is that the job then completes twice (your fencing must hold). And on
`flaky-network` (here without its connection outage), where each heartbeat is lost independently with
probability 0.2, an adaptive detector should learn that gaps are irregular: it may not falsely reclaim more jobs
than the standard lease (30 s, renewed every 10 s) does on the same seeds.
"""),
    checked(
        "03-write-a-policy.ipynb",
        "q5-robust-tests",
        2,
        ["AdaptiveDetector"],
        DETECTOR_CHECKS
        + """
frozen = standard("frozen", freeze_for=45.0, freeze_after=5.0, duration=120.0, workers=2)
row = measure(detector(), frozen, replications=3)
assert row["duplicate_completions_total"] == 0, "a frozen worker's job completed twice: is the finish still fenced?"
flaky = standard("flaky-network", loss=0.2, jobs=12, duration=300.0, workers=4, outage_at=None)
mine = measure(detector(), flaky, replications=2)
lease = measure(LeasePolicy(30.0, 10.0), flaky, replications=2)
print(f"flaky network, false reclaims: yours {mine['false_reclaims_total']}, lease {lease['false_reclaims_total']}")
assert mine["false_reclaims_total"] <= lease["false_reclaims_total"]
""",
        """
mine = measure(detector(), flaky, replications=3, seed=303)
lease = measure(LeasePolicy(30.0, 10.0), flaky, replications=3, seed=303)
assert mine["false_reclaims_total"] <= lease["false_reclaims_total"], (mine["false_reclaims_total"], lease["false_reclaims_total"])
twice = frozen.with_(faults=(Freeze(job=0, after=5.0, duration=45.0), Freeze(job=0, after=30.0, duration=60.0)))
row = measure(detector(), twice, replications=3, seed=304)
assert row["duplicate_completions_total"] == 0, "two pauses in one job: it completed twice"
adaptive(seed=403)
""",
    ),
    md("""
## Question 6 (2 points, graded by hand)

Your detector keeps its memory (the last heartbeat of each job, the recent gaps) in the reaper process, while
the lease keeps *all* of its state in Redis (the time-to-live of the lock key). What happens to your detector
when the reaper restarts? What would you store in Redis to make it survive, and what does the lease get for
free that your detector has to build?
"""),
    answer(
        "q6-explain",
        2,
        """
### BEGIN SOLUTION
*Model answer.* After a restart the detector has no `last_beat` entries and no gap history: jobs that were
active before the restart are never suspected (their last heartbeat is unknown) until they send a heartbeat
again, so a worker that died just before the restart holds its job forever, and the learned distribution
starts again from the nominal period. To survive, each heartbeat must write its timestamp to Redis (e.g. a
sorted set `job -> last heartbeat`, as the renewal script runs inside Redis anyway) and the gap statistics
(count, sum, sum of squares or a window) must be kept there too; the sweep then reads them. The lease gets this
for free: the lock's TTL *is* the "last heartbeat + allowance" state, Redis's own clock evaluates it, and any
process can run the sweep, so there is nothing to lose or rebuild. The detector's advantage is that its
allowance adapts to the observed gaps instead of being a fixed $L$.

*Grading:* 1 point for the restart failure (lost state: dead jobs not suspected / history relearned), 1 point
for what to persist and the comparison with the TTL held by Redis.
### END SOLUTION
""",
    ),
]


# =============================================================================================================
NB4 = [
    md("""
# Assignment 4: stale finishes and fencing tokens

**Expected time:** about 90 minutes. **Points:** 14 autograded + 4 graded by hand.

Any detector that takes a job back from a worker it *believes* dead will sometimes be wrong: the worker was
only paused (a long GC pause, a `SIGSTOP`) or its event loop was blocked. When it resumes, it carries on with a
job that is no longer its own and reports it finished. If the queue accepts that **stale finish**, the job has
completed twice.

In this assignment one worker freezes for `FREEZE_FOR` seconds (your own value, between 70 and 90 s), 5 s into a
40-second job; a second worker is idle. You will
see the stale finish under a fixed timeout, stop it with a **fencing token**, and show that a lease *without*
the token check has the same problem (Kleppmann, *How to do distributed locking*, 2016). Then you follow the
stale worker's result to a **downstream store** (a database the worker writes before it reports the finish),
write the store's token check yourself, and see why a worker that checks its own lock first is not safe.

Check your notebook with `python -m emqsim grade 04-fencing.ipynb`.
"""),
    readonly(
        "setup",
        """
from emqsim import LeasePolicy, TimeoutPolicy, Uniform, simulate, standard
from emqsim.fencing import DownstreamStore, accept_all, replay
from emqsim.grading import student_seed
from emqsim.plots import race_timeline
from emqsim.stats import summarize

SEED = student_seed("04-fencing")  # your own seed: your numbers differ from your neighbour's
FREEZE_FOR = 70.0 + SEED % 21  # your own pause, 70 to 90 s
FROZEN = standard("frozen", freeze_for=FREEZE_FOR, freeze_after=5.0, duration=40.0, workers=2)
# question 7: a pause 39 s into a 40-second job, 80 to 100 s long
RACE = standard("frozen", freeze_for=80.0 + SEED % 21, freeze_after=39.0, duration=40.0, workers=2)
CHECK_GAP = 2.0  # seconds of the worker's own time between its lock check and its write


def show_attempts(run):
    \"\"\"One line per take of the job: who, when, and how it ended.\"\"\"
    print(f"{run.scenario} under {run.policy['policy']}:")
    for a in run.attempts:
        finish = "-" if a.finish_applied_at is None else f"{a.finish_applied_at:.1f} s ({a.finish_result})"
        reclaimed = "-" if a.reclaimed_at is None else f"{a.reclaimed_at:.1f} s ({a.worker_state_at_reclaim})"
        print(
            f"  attempt {a.attempt}: worker {a.worker}, token {a.token}, taken {a.taken_at:.1f} s, "
            f"reclaimed {reclaimed}, finish {finish} -> {a.outcome}"
        )
    for e in run.worker_events:
        if e.kind in ("freeze", "resume"):
            print(f"  worker {e.worker} {e.kind} at {e.time:.1f} s {e.detail}")


def duplicate_completions(run):
    return summarize(run).duplicate_completions
""",
    ),
    md("""
## Question 1 (2 points): the timeout's stale finish

Run `FROZEN` under `TimeoutPolicy(timeout=60)` (no token check; that is the default) with `seed=SEED`, store the
run in `unfenced_run`, and print it with `show_attempts`. Then set

* `stale_worker`: the id of the worker whose completion was the duplicate one (`outcome == "duplicate_completion"`);
* `stale_finish_at`: the time (s) at which Redis accepted that duplicate completion (`finish_applied_at`).
"""),
    solution(
        "q1-timeout",
        """
### BEGIN SOLUTION
unfenced_run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=SEED)
stale = [a for a in unfenced_run.attempts if a.outcome == "duplicate_completion"][0]
stale_worker, stale_finish_at = stale.worker, stale.finish_applied_at
### END SOLUTION
show_attempts(unfenced_run)
print(f"stale finish by worker {stale_worker} at {stale_finish_at} s")
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q1-timeout-tests",
        2,
        ["unfenced_run", "stale_worker", "stale_finish_at"],
        """
from emqsim import LeasePolicy, Run, TimeoutPolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import summarize

SEED = student_seed("04-fencing")
FROZEN = standard("frozen", freeze_for=70.0 + SEED % 21, freeze_after=5.0, duration=40.0, workers=2)


def duplicates(run):
    return summarize(run).duplicate_completions

assert type(unfenced_run) is Run, "unfenced_run must be the Run that simulate() returned"
assert unfenced_run.policy["timeout"] == 60 and unfenced_run.policy["policy"] == "timeout"
run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=SEED)
dups = [a for a in run.attempts if a.outcome == "duplicate_completion"]
assert len(dups) == 1, "expected exactly one duplicate completion"
assert unfenced_run.attempts == run.attempts, "unfenced_run is not FROZEN under TimeoutPolicy(timeout=60) with SEED"
assert stale_worker == dups[0].worker, f"the stale worker is not {stale_worker}"
assert as_number(stale_finish_at, "stale_finish_at") == dups[0].finish_applied_at, "check stale_finish_at"
""",
    ),
    md("""
## Question 2 (2 points): a fencing token stops it

With `fenced=True` the queue gives each take a token (the lock's value) and accepts a finish only with the
current token; the reaper deletes the token when it takes a job back. Run `FROZEN` under
`TimeoutPolicy(timeout=60, fenced=True)` with `seed=SEED` into `fenced_run`, and set `rejection` to the error
text Redis returned to the stale worker (`finish_result` of its attempt).
"""),
    solution(
        "q2-fenced",
        """
### BEGIN SOLUTION
fenced_run = simulate(FROZEN, TimeoutPolicy(timeout=60, fenced=True), seed=SEED)
rejection = [a for a in fenced_run.attempts if a.outcome == "finish_rejected"][0].finish_result
### END SOLUTION
show_attempts(fenced_run)
print(f"the stale worker was told: {rejection!r}")
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q2-fenced-tests",
        2,
        ["fenced_run", "rejection"],
        """
from emqsim import LeasePolicy, Run, TimeoutPolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import summarize

SEED = student_seed("04-fencing")
FROZEN = standard("frozen", freeze_for=70.0 + SEED % 21, freeze_after=5.0, duration=40.0, workers=2)


def duplicates(run):
    return summarize(run).duplicate_completions

assert type(fenced_run) is Run, "fenced_run must be the Run that simulate() returned"
run = simulate(FROZEN, TimeoutPolicy(timeout=60, fenced=True), seed=SEED)
assert fenced_run.attempts == run.attempts, "fenced_run is not FROZEN under the fenced timeout with SEED"
assert duplicates(run) == 0
rejected = [a for a in run.attempts if a.finish_result not in (None, "accepted")]
assert len(rejected) == 1 and type(rejection) is str and rejection == rejected[0].finish_result, (
    "rejection is not what Redis told the stale worker"
)
""",
    ),
    md("""
## Question 3 (2 points): a lease without the token check

`LeasePolicy` checks the token on finish (BullMQ's `moveToFinished` does: "Missing lock for job ...").
Write `LeaseWithoutToken`, a subclass of `LeasePolicy` whose `finish` skips that check: override
`finish(self, queue, job_id, token, now_ms)` to return `queue.finish(job_id, token, check_token=False)`.

Then run `FROZEN` with `seed=SEED` under `LeasePolicy(30, 10)` into `lease_run` and under
`LeaseWithoutToken(30, 10)` into `bare_lease_run`. Finally set `lapsed_at` to the time at which the frozen
worker's lock expired in `lease_run`: the `time` of the entry of `lease_run.lock_events` with
`kind == "expired"`.
"""),
    solution(
        "q3-lease",
        """
### BEGIN SOLUTION
class LeaseWithoutToken(LeasePolicy):
    def finish(self, queue, job_id, token, now_ms):
        return queue.finish(job_id, token, check_token=False)


lease_run = simulate(FROZEN, LeasePolicy(30, 10), seed=SEED)
bare_lease_run = simulate(FROZEN, LeaseWithoutToken(30, 10), seed=SEED)
lapsed_at = [e.time for e in lease_run.lock_events if e.kind == "expired"][0]
### END SOLUTION
show_attempts(lease_run)
show_attempts(bare_lease_run)
print(f"the frozen worker's lease lapsed at {lapsed_at} s")
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q3-lease-tests",
        2,
        ["LeaseWithoutToken", "lease_run", "bare_lease_run", "lapsed_at"],
        """
from emqsim import LeasePolicy, Run, TimeoutPolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import summarize

SEED = student_seed("04-fencing")
FROZEN = standard("frozen", freeze_for=70.0 + SEED % 21, freeze_after=5.0, duration=40.0, workers=2)


def duplicates(run):
    return summarize(run).duplicate_completions

assert isinstance(LeaseWithoutToken, type) and issubclass(LeaseWithoutToken, LeasePolicy), (
    "LeaseWithoutToken must subclass LeasePolicy"
)
assert type(lease_run) is Run and type(bare_lease_run) is Run, "store the Runs simulate() returned"
lease = simulate(FROZEN, LeasePolicy(30, 10), seed=SEED)
bare = simulate(FROZEN, LeaseWithoutToken(30, 10), seed=SEED)
assert lease_run.attempts == lease.attempts, "lease_run is not FROZEN under LeasePolicy(30, 10) with SEED"
assert bare_lease_run.attempts == bare.attempts, "bare_lease_run is not FROZEN under LeaseWithoutToken(30, 10)"
assert duplicates(lease) == 0, "the lease with its token check should not complete twice"
assert duplicates(bare) == 1, "without the token check the stale finish is accepted"
expired = [e.time for e in lease.lock_events if e.kind == "expired"]
assert as_number(lapsed_at, "lapsed_at") == expired[0], "lapsed_at should be the time of the 'expired' lock event"
""",
        """
other = standard("frozen", freeze_for=50.0, freeze_after=8.0, duration=30.0, workers=3)
for seed in (SEED + 1, SEED + 2):
    assert duplicates(simulate(other, LeaseWithoutToken(20, 5), seed=seed)) == 1, "held out: no stale finish"
""",
    ),
    md("""
## Question 4 (2 points): over many pauses

One run is an anecdote. Replace the fixed pause with a random one, uniform between 0 and 90 s:
`standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)`. For each of the
four policies below, run replications `r = 0, ..., 39` with `seed=SEED` and count the share of runs with at
least one duplicate completion. Store the shares in a dict `duplicate_share` with exactly these keys:

* `"timeout"`: `TimeoutPolicy(timeout=60)`
* `"timeout+token"`: `TimeoutPolicy(timeout=60, fenced=True)`
* `"lease"`: `LeasePolicy(30, 10)`
* `"lease without token"`: `LeaseWithoutToken(30, 10)`
"""),
    solution(
        "q4-many",
        """
### BEGIN SOLUTION
random_pause = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
policies = {
    "timeout": TimeoutPolicy(timeout=60),
    "timeout+token": TimeoutPolicy(timeout=60, fenced=True),
    "lease": LeasePolicy(30, 10),
    "lease without token": LeaseWithoutToken(30, 10),
}
duplicate_share = {}
for name, policy in policies.items():
    runs = [simulate(random_pause, policy, seed=SEED, replication=r) for r in range(40)]
    duplicate_share[name] = sum(duplicate_completions(run) > 0 for run in runs) / len(runs)
### END SOLUTION
for name, share in duplicate_share.items():
    print(f"{name:>20}: {share:.0%} of runs completed the job twice")
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q4-many-tests",
        2,
        ["duplicate_share", "LeaseWithoutToken"],
        """
from emqsim import LeasePolicy, Run, TimeoutPolicy, Uniform, simulate, standard
from emqsim.grading import as_number, student_seed
from emqsim.stats import summarize

SEED = student_seed("04-fencing")
FROZEN = standard("frozen", freeze_for=70.0 + SEED % 21, freeze_after=5.0, duration=40.0, workers=2)


def duplicates(run):
    return summarize(run).duplicate_completions

assert type(duplicate_share) is dict, "duplicate_share must be a dict"
assert set(duplicate_share) == {"timeout", "timeout+token", "lease", "lease without token"}
shares = {name: as_number(share, name) for name, share in duplicate_share.items()}
assert shares["timeout+token"] == 0 and shares["lease"] == 0, "token-checked finishes"
assert shares["timeout"] > 0 and shares["lease without token"] > 0
""",
        """
scenario = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
for name, policy in [("timeout", TimeoutPolicy(timeout=60)), ("lease without token", LeaseWithoutToken(30, 10))]:
    runs = [simulate(scenario, policy, seed=SEED, replication=r) for r in range(40)]
    expected = sum(duplicates(run) > 0 for run in runs) / 40
    assert abs(shares[name] - expected) < 1e-9, (name, shares[name], expected)
""",
    ),
    md("""
## A downstream store

The queue's token check protects the queue: it refuses the stale *finish*. But a worker usually does something
with the job before it reports the finish: it writes the result somewhere else, a database row, a file, an
account balance. In this model each worker that finishes its work **writes its result to a downstream store
first**, at the moment its work ends (`finished_at`), and tells the queue after that. The store keeps one key
per job: the result it holds and the token of the write that put it there.

* **The token** of a write is the take's number, `Attempt.attempt`: the first take of a job carries 1, the take
  after a reclaim 2, and so on (BullMQ counts takes in the job's `attemptsStarted`). A newer take always has a
  larger token.
* **The store's check** is a function `accept(last_token, token)`: `last_token` is the token of the last write
  the store accepted for this job (`None` if it accepted none yet), `token` is the new write's; the store
  keeps the new value only if `accept` returns `True`. `accept_all` is a store without any check.
* **Corruption:** a job is *corrupted* when the store accepted a write whose token is *lower* than the token of
  the value it replaced: a stale worker overwrote the newer take's result.

`replay(run, accept)` feeds the writes of a run's workers, in time order, to `DownstreamStore(accept)` and
returns a report: `writes`, `accepted`, `rejected`, `corrupted` (the number of corrupted jobs),
`corrupted_jobs`, `final` (what the store holds at the end, as `(job, token, value)`) and `log` (every write
and what the store did with it).
"""),
    md("""
## Question 5 (2 points): the store's check

Write `accept(last_token, token)`, returning `True` or `False`: accept a write only if it is **newer** than
everything the store accepted for the job. Think about the first write of a job, and about a write carrying
the *same* token as the last one. Do not import a ready-made check: write it.
"""),
    solution(
        "q5-accept",
        """
def accept(last_token, token):
    \"\"\"True if the store should keep a write carrying `token`, when the last write it accepted for the same
    job carried `last_token` (None: it accepted none yet).\"\"\"
    ### BEGIN SOLUTION
    return last_token is None or token > last_token
    ### END SOLUTION


store = DownstreamStore(accept)
for token, value in [(1, "take 1"), (2, "take 2"), (1, "take 1, late")]:
    print(f"write {value!r} with token {token}: {'accepted' if store.write('job', token, value, 0.0) else 'rejected'}")
print("the store holds", store.values["job"])
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q5-accept-tests",
        2,
        ["accept"],
        """
from emqsim.grading import written_in_notebook

written_in_notebook("accept", forbidden=("fenced", "emqsim.fencing"))
assert callable(accept), "accept must be a function you define: def accept(last_token, token)"
for last, token, expected in [(None, 1, True), (1, 2, True), (2, 1, False)]:
    got = accept(last, token)
    assert type(got) is bool, f"accept({last}, {token}) must return True or False, not {got!r}"
    assert got == expected, f"accept({last}, {token}) should be {expected}"
""",
        """
import random

from emqsim.fencing import DownstreamStore as _Store
from emqsim.grading import student_seed as _seed

for last, token, expected in [
    (None, 0, True), (None, 7, True), (3, 3, False), (1, 1, False), (7, 3, False), (0, 1, True),
    (41, 42, True), (42, 42, False), (42, 41, False), (10**9, 10**9 + 1, True), (5, 50, True), (50, 5, False),
]:
    got = accept(last, token)
    assert type(got) is bool and got == expected, f"held out: accept({last}, {token}) should be {expected}"
rng = random.Random(_seed("04-fencing"))
for _ in range(20):
    tokens = [rng.randint(1, 9) for _ in range(rng.randint(1, 12))]
    store = _Store(accept)
    for index, token in enumerate(tokens):
        store.write("job", token, f"write {index}", float(index))
    kept = [w.token for w in store.log if w.accepted]
    assert all(a < b for a, b in zip(kept, kept[1:])), f"held out: tokens {tokens}: accepted {kept}"
    assert store.tokens["job"] == max(tokens), f"held out: tokens {tokens}: the store should end with the highest"
""",
    ),
    md("""
## Question 6 (2 points): corruption, with and without your check

Take the random pauses of question 4 (uniform between 0 and 90 s), 40 replications `r = 0, ..., 39` with
`seed=SEED`, under `TimeoutPolicy(timeout=60, fenced=True)`: the queue itself refuses every stale finish.
Replay each run through a store without the check (`accept_all`) and through a store with yours (`accept`), and
set

* `corrupted_without`: the total number of corrupted jobs over the 40 runs without the check;
* `corrupted_with`: the same with your check;
* `corrupted_runs`: the sorted list of replication numbers `r` whose run has a corrupted job without the check.
"""),
    solution(
        "q6-corruption",
        """
### BEGIN SOLUTION
random_pause = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
runs = [simulate(random_pause, TimeoutPolicy(timeout=60, fenced=True), seed=SEED, replication=r) for r in range(40)]
corrupted_without = sum(replay(run, accept_all).corrupted for run in runs)
corrupted_with = sum(replay(run, accept).corrupted for run in runs)
corrupted_runs = [r for r, run in enumerate(runs) if replay(run, accept_all).corrupted > 0]
### END SOLUTION
print(f"corrupted jobs: {corrupted_without} without the store's check, {corrupted_with} with it")
print(f"runs with a corrupted job: {corrupted_runs}")
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q6-corruption-tests",
        2,
        ["accept", "corrupted_without", "corrupted_with", "corrupted_runs"],
        """
from emqsim.grading import as_number

without, with_ = as_number(corrupted_without, "corrupted_without"), as_number(corrupted_with, "corrupted_with")
assert with_ == 0, "with the store's check no job should be corrupted"
assert without > 0, "without the check some stale writes overwrite newer results"
assert type(corrupted_runs) is list and all(type(r) is int for r in corrupted_runs), "corrupted_runs: a list of ints"
assert corrupted_runs == sorted(set(corrupted_runs)) and len(corrupted_runs) <= without
""",
        """
from emqsim import Freeze, Scenario, TimeoutPolicy, Uniform, simulate, standard
from emqsim.distributions import Fixed
from emqsim.fencing import accept_all as _all, replay as _replay
from emqsim.grading import student_seed as _seed

SEED = _seed("04-fencing")
scenario = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
runs = [simulate(scenario, TimeoutPolicy(timeout=60, fenced=True), seed=SEED, replication=r) for r in range(40)]
bare = [_replay(run, _all).corrupted for run in runs]
assert without == sum(bare), f"corrupted_without should be {sum(bare)} for your seed"
assert corrupted_runs == [r for r, n in enumerate(bare) if n], "corrupted_runs is not what your seed gives"
assert sum(_replay(run, accept).corrupted for run in runs) == 0, "your check lets a stale write through"
many = Scenario(
    name="pauses", workers=3, jobs=12, duration=Fixed(20.0), horizon=3600.0,
    faults=tuple(Freeze(job=j, after=2.0, duration=Uniform(0, 90)) for j in range(0, 12, 3)),
)
for seed in (SEED + 1, SEED + 2):
    run = simulate(many, TimeoutPolicy(timeout=30), seed=seed)
    report = _replay(run, accept)
    newest = {}
    for a in run.attempts:
        if a.finished_at is not None:
            newest[a.job] = max(newest.get(a.job, 0), a.attempt)
    assert report.corrupted == 0, "held out: your check lets a stale write through"
    assert {job: token for job, token, _ in report.final} == newest, (
        "held out: the store should end with the newest take's result for every job"
    )
""",
    ),
    md("""
## Question 7 (2 points): check, then act

Could the worker protect the store itself, by checking that it still holds the job's lock (a `GET` of the
lock key) just before it writes? `replay(run, accept, check_gap=CHECK_GAP)` models such a worker: it checks its
lock `CHECK_GAP` seconds of its own running time before its write, and skips the write if the lock is no
longer its own. `report.checks` lists every write with `checked_at` (when the worker checked), `lock_ok` (what
the check said) and `at` (when it wrote).

`RACE` freezes the worker 39 s into a 40-second job, between its lock check and its write. Run `RACE` under
`LeasePolicy(30, 10)` with `seed=SEED` into `race_run`, replay it with `check_gap=CHECK_GAP` without the
store's check and with yours, and set `race_corrupted_without` and `race_corrupted_with` (the reports'
`corrupted`), and `stale_check_at`, `stale_write_at`: when the worker of take 1 checked its lock and when it
wrote. The cell then draws the run's timeline.
"""),
    solution(
        "q7-race",
        """
### BEGIN SOLUTION
race_run = simulate(RACE, LeasePolicy(30, 10), seed=SEED)
race_without = replay(race_run, accept_all, check_gap=CHECK_GAP)
race_corrupted_without = race_without.corrupted
race_corrupted_with = replay(race_run, accept, check_gap=CHECK_GAP).corrupted
stale = [w for w in race_without.checks if w.token == 1][0]
stale_check_at, stale_write_at = stale.checked_at, stale.at
### END SOLUTION
show_attempts(race_run)
print(f"take 1 checked its lock at {stale_check_at} s and wrote at {stale_write_at} s")
race_timeline(race_run, CHECK_GAP);
""",
    ),
    checked(
        "04-fencing.ipynb",
        "q7-race-tests",
        2,
        [
            "accept",
            "race_run",
            "race_corrupted_without",
            "race_corrupted_with",
            "stale_check_at",
            "stale_write_at",
        ],
        """
from emqsim import LeasePolicy, Run, simulate, standard
from emqsim.grading import as_number, student_seed

SEED = student_seed("04-fencing")
RACE = standard("frozen", freeze_for=80.0 + SEED % 21, freeze_after=39.0, duration=40.0, workers=2)
assert type(race_run) is Run, "race_run must be the Run that simulate() returned"
assert race_run.attempts == simulate(RACE, LeasePolicy(30, 10), seed=SEED).attempts, (
    "race_run is not RACE under LeasePolicy(30, 10) with SEED"
)
assert as_number(race_corrupted_without, "race_corrupted_without") == 1, "the stale write gets past the lock check"
assert as_number(race_corrupted_with, "race_corrupted_with") == 0, "the store's check should refuse it"
""",
        """
from emqsim.fencing import accept_all as _all, holds_lock as _holds, replay as _replay

run = simulate(RACE, LeasePolicy(30, 10), seed=SEED)
stale = [w for w in _replay(run, _all, check_gap=2.0).checks if w.token == 1][0]
assert as_number(stale_check_at, "stale_check_at") == stale.checked_at, "check stale_check_at"
assert as_number(stale_write_at, "stale_write_at") == stale.at, "check stale_write_at"
events = sorted(run.lock_events, key=lambda e: e.time)
assert _holds(events, "0", run.attempts[0].token, stale.checked_at)
assert not _holds(events, "0", run.attempts[0].token, stale.at)
held_out = standard("frozen", freeze_for=70.0, freeze_after=29.5, duration=30.0, workers=3)
run = simulate(held_out, LeasePolicy(20, 5), seed=SEED + 3)
assert _replay(run, _all, check_gap=1.0).corrupted == 1
assert _replay(run, accept, check_gap=1.0).corrupted == 0, "held out: your check lets the stale write through"
""",
    ),
    md("""
## Question 8 (4 points, graded by hand)

Explain, in your own words (about 150 words), **why a lease alone is not enough when a worker can freeze**.
Your answer should cover: what the frozen worker knows when it resumes; why checking "do I still hold the
lease?" just before finishing does not fix it; what the fencing token adds and *where* it must be checked; and
what the token does not protect (think of side effects outside the queue).
"""),
    answer(
        "q8-explain",
        4,
        """
### BEGIN SOLUTION
*Model answer.* A frozen process does not experience the pause: when it resumes, its next instruction runs as
if no time had passed, so it still believes it holds the lease even though the lease expired and the job now
belongs to another worker. The lease bounds how long a *dead* holder blocks the job; it cannot stop a *live*
holder that has silently lost it from acting. Checking the lease first does not help: the pause can happen
between the check and the finish (or the write), and the check's answer is stale by then; no client-side
clock or check closes that window. A fencing token is a number that increases with every grant (here: a new
token per take); the resource that receives the action must compare it with the newest token it has seen and
refuse older ones. The check must happen at the store, atomically with the write (BullMQ's `moveToFinished`
script), not in the worker. The token protects only what checks it: the queue's completion here. Side effects
the stale worker already made elsewhere (an e-mail sent, a payment, a row written to a database that ignores
the token) still happen twice, so those need idempotent operations or must check the token too.

*Grading (4 points):* 1: the resumed worker does not know it lost the lease (no notion of elapsed time);
1: check-then-act race (a pause between the check and the action); 1: monotonic token verified by the store,
atomically with the write; 1: limits: external side effects must check the token or be idempotent.
### END SOLUTION
""",
    ),
]


# =============================================================================================================
NB5 = [
    md("""
# Assignment 5: missed heartbeats and the Redis request budget

**Expected time:** about 60 minutes. **Points:** 7 autograded + 2 graded by hand.

A heartbeat that never reaches Redis (a dropped packet, a timed-out request) does not renew the lock. One lost
renewal is harmless while the lease has time left; a **run** of lost renewals lapses the lock, and the reaper
takes the job from a worker that is alive: a **false reclaim**. Renewing more often makes a run of losses less
likely to matter, but every renewal is a request to Redis, and Redis has a budget.

You will count the lost renewals that lapse a lease, compute how likely a job is to meet such a run, and write
a function that chooses the lease and the heartbeat for a loss rate and a request budget. The grader runs it
on **loss rates you do not see**.

Check your notebook with `python -m emqsim grade 05-missed-heartbeats.ipynb` (save it first: the checks read the
saved file).
"""),
    readonly(
        "setup",
        """
import math

import numpy as np

from emqsim import LeasePolicy, simulate, standard
from emqsim.grading import student_seed
from emqsim.stats import aggregate, summarize

SEED = student_seed("05-missed-heartbeats")  # your own seed
JOB_SECONDS = 300.0  # every job runs 5 minutes
TARGET = 0.01  # at most 1% of jobs may lose their lease


def flaky(loss, jobs=12):
    \"\"\"Four live workers, `jobs` 5-minute jobs; each renewal is lost with probability `loss`, independently
    (`outage_at=None`: without the scenario's connection outage, which is not a run of independent losses).\"\"\"
    return standard("flaky-network", loss=loss, jobs=jobs, duration=JOB_SECONDS, workers=4, outage_at=None)


def measure(lease, beat, loss, replications=10, seed=SEED):
    \"\"\"Simulate `replications` runs of `flaky(loss)` under a lease renewed every `beat` s; one table row.\"\"\"
    policy = LeasePolicy(lease, beat, 5.0)
    runs = [simulate(flaky(loss), policy, seed=seed, replication=r, record_locks=False) for r in range(replications)]
    return aggregate([summarize(run) for run in runs])
""",
    ),
    md("""
## Question 1 (2 points): how many lost renewals lapse a lease?

A worker renews every $B$ seconds; each successful renewal sets the lock's time-to-live back to $L$. After a
success, $k$ lost renewals in a row put the next successful renewal $(k + 1) B$ after it; the lock is still
there if $(k+1) B \\le L$ (a renewal that arrives at the very millisecond of the expiry still finds
the lock), so with $L = 30$, $B = 10$ two losses are survived and the **third** lapses it.

Write `losses_to_lapse(lease, beat)`: the fewest consecutive lost renewals that lapse the lock.
"""),
    solution(
        "q1-losses",
        """
def losses_to_lapse(lease, beat):
    \"\"\"The fewest consecutive lost renewals that lapse a lease of `lease` s renewed every `beat` s.\"\"\"
    ### BEGIN SOLUTION
    return math.floor(lease / beat)
    ### END SOLUTION


losses_to_lapse(30.0, 10.0)
""",
    ),
    checked(
        "05-missed-heartbeats.ipynb",
        "q1-losses-tests",
        2,
        ["losses_to_lapse"],
        """
import math
from emqsim import analytic
from emqsim.grading import as_number
from emqsim.grading import written_in_notebook

written_in_notebook("losses_to_lapse", forbidden=("analytic", "emqsim.analytic"))
assert as_number(losses_to_lapse(30.0, 10.0), "losses_to_lapse(30, 10)") == 3, "30/10: the third loss lapses it"
assert as_number(losses_to_lapse(30.0, 5.0), "losses_to_lapse(30, 5)") == 6
""",
        """
for lease, beat in [(25.0, 10.0), (45.0, 15.0), (31.0, 10.0), (20.0, 3.0), (8.0, 2.0), (60.0, 7.0)]:
    got = as_number(losses_to_lapse(lease, beat), "losses_to_lapse")
    assert got == analytic.losses_to_lapse(lease, beat), (lease, beat, got)
""",
    ),
    md("""
## Question 2 (2 points): how likely is a job to meet such a run?

A 5-minute job sends $n = \\lfloor 300 / B \\rfloor$ renewals; each is lost independently with probability
$p$. Write `lapse_probability(renewals, k, p)`: the probability that among `renewals` renewals there is at least
one run of `k` or more consecutive losses. (A dynamic programme over the length of the current run of losses
is exact and fast; so is a recursion. Do not simulate: the grader compares with the exact value.)
"""),
    solution(
        "q2-runs",
        """
def lapse_probability(renewals, k, p):
    \"\"\"P(at least one run of >= k consecutive losses among `renewals` independent renewals).\"\"\"
    ### BEGIN SOLUTION
    if k <= 0:
        return 1.0
    state = [1.0] + [0.0] * (k - 1)  # state[i]: no run of k yet, the current run of losses has length i
    hit = 0.0
    for _ in range(renewals):
        new = [0.0] * k
        new[0] = (1 - p) * sum(state)
        for i in range(k - 1):
            new[i + 1] = p * state[i]
        hit += p * state[k - 1]
        state = new
    return hit
    ### END SOLUTION


lapse_probability(30, 3, 0.1)
""",
    ),
    checked(
        "05-missed-heartbeats.ipynb",
        "q2-runs-tests",
        2,
        ["lapse_probability"],
        """
import math
from emqsim import analytic
from emqsim.grading import as_number
from emqsim.grading import written_in_notebook

written_in_notebook("lapse_probability", forbidden=("analytic", "emqsim.analytic", "run_probability"))
got = as_number(lapse_probability(30, 3, 0.1), "lapse_probability(30, 3, 0.1)")
assert math.isclose(got, analytic.run_probability(30, 3, 0.1), rel_tol=1e-6), f"{got} is not the exact value"
assert as_number(lapse_probability(2, 3, 0.5), "p") == 0.0, "two renewals cannot hold a run of three"
""",
        """
for n, k, p in [(60, 6, 0.2), (150, 4, 0.05), (10, 1, 0.3), (75, 9, 0.4), (30, 3, 0.0)]:
    got = as_number(lapse_probability(n, k, p), "lapse_probability")
    assert math.isclose(got, analytic.run_probability(n, k, p), rel_tol=1e-6, abs_tol=1e-12), (n, k, p, got)
""",
    ),
    md("""
## Question 3 (3 points): choose the lease and the heartbeat

Each worker sends one renewal request per heartbeat, so a budget of `max_requests` renewal requests per second
per worker means $B \\ge 1 / $ `max_requests`. Write `choose(loss, max_requests)` returning `(lease, beat)`:

* `beat` within the budget;
* the probability that a 5-minute job meets a run of `losses_to_lapse(lease, beat)` lost renewals (your
  `lapse_probability` with $n = \\lfloor 300 / B \\rfloor$) is at most `TARGET`;
* the **shortest** such lease (a dead worker's job waits about one lease), within 10%.

The grader calls `choose` for loss rates and budgets you do not see, checks the rules above with its own exact
formulas, and simulates your choice on a lossy network. Which beat is best: the shortest the budget allows, or a
longer one?
"""),
    solution(
        "q3-choose",
        """
def choose(loss, max_requests):
    \"\"\"(lease, beat) in seconds: the shortest lease whose heartbeat fits the request budget and whose
    5-minute jobs lose their lease with probability at most TARGET when renewals are lost at rate `loss`.\"\"\"
    ### BEGIN SOLUTION
    beat = 1.0 / max_requests  # the shortest beat allowed: more renewals per lease, longer runs needed
    renewals = math.floor(JOB_SECONDS / beat)
    k = 1
    while lapse_probability(renewals, k, loss) > TARGET:
        k += 1
    return k * beat, beat
    ### END SOLUTION


for loss, budget in [(0.1, 0.2), (0.3, 0.2)]:
    lease, beat = choose(loss, budget)
    row = measure(lease, beat, loss)
    print(
        f"loss {loss:.0%}, budget {budget} req/s: lease {lease:g} s, beat {beat:g} s; simulated "
        f"{row['false_reclaims_total']} false reclaims in {row['jobs_total']} jobs"
    )
""",
    ),
    checked(
        "05-missed-heartbeats.ipynb",
        "q3-choose-tests",
        3,
        ["choose"],
        """
import math
from emqsim import analytic
from emqsim.grading import as_number
from emqsim import LeasePolicy, simulate, standard
from emqsim.grading import student_seed
from emqsim.stats import aggregate, summarize


def check(loss, budget, simulate_it=False):
    choice = choose(loss, budget)
    assert len(choice) == 2, "return (lease, beat)"
    lease, beat = (as_number(x, "lease and beat") for x in choice)
    assert 0 < beat < lease, f"need 0 < beat < lease, got {choice}"
    assert beat >= 1.0 / budget - 1e-9, f"beat {beat} s sends more than {budget} requests per second"
    k = analytic.losses_to_lapse(lease, beat)
    risk = analytic.run_probability(math.floor(300.0 / beat), k, loss)
    assert risk <= 0.01 + 1e-12, f"loss {loss}: {risk:.4f} of jobs would lose their lease (target 0.01)"
    assert lease <= 120.0, f"loss {loss}: lease {lease} s is far longer than needed"
    if simulate_it:
        scenario = standard("flaky-network", loss=loss, jobs=12, duration=300.0, workers=4, outage_at=None)
        runs = [
            simulate(scenario, LeasePolicy(lease, beat, 5.0), seed=student_seed("05-missed-heartbeats"), replication=r)
            for r in range(10)
        ]
        row = aggregate([summarize(run) for run in runs])
        assert row["false_reclaims_per_job"] <= 0.05, f"loss {loss}: simulated false-reclaim rate {row['false_reclaims_per_job']:.3f}"


check(0.1, 0.2)
check(0.3, 0.2)
""",
        """
def best_lease(loss, budget):
    beat = 1.0 / budget
    n = math.floor(300.0 / beat)
    return next(k for k in range(1, 400) if analytic.run_probability(n, k, loss) <= 0.01) * beat


for loss, budget in [(0.1, 0.2), (0.3, 0.2), (0.05, 0.5), (0.25, 0.25), (0.4, 0.2), (0.15, 1.0)]:
    check(loss, budget)
    lease = as_number(choose(loss, budget)[0], "lease")
    assert lease <= 1.1 * best_lease(loss, budget) + 1e-9, f"loss {loss}: lease {lease} s is longer than needed"
check(0.35, 0.25, simulate_it=True)
""",
    ),
    md("""
## Question 4 (2 points, graded by hand)

(a) Why is the number of losses that lapse a lease $\\lfloor L/B \\rfloor$, whatever the loss rate, and why does
a **shorter beat with the same lease** protect a job better even though it sends more renewals that can be lost?
(b) Your budget is halved. What happens to the lease `choose` returns, and to the detection latency of a dead
worker?
"""),
    answer(
        "q4-explain",
        2,
        """
### BEGIN SOLUTION
*Model answer.* (a) After a successful renewal the lock lives $L$ more seconds; the next renewals are sent $B,
2B, \\dots$ later, so the lock survives while some renewal arrives by time $L$: $k$ losses push the next success
to $(k+1)B$, which must be at most $L$ (the renewal at exactly $L$ still finds the lock), so the first $k$ that
lapses is $\\lfloor L/B \\rfloor$: a property of the timer, not of the network. With the lease fixed, a shorter
beat raises $k = \\lfloor L/B \\rfloor$; the chance of a run of $k$ losses falls like $p^k$ while the number of
renewals per job (chances to start a run) only grows like $1/B$, so the run probability falls. (b) A halved
budget doubles the shortest allowed beat; each renewal covers twice the time, so fewer consecutive losses fit in
a lease of the same length and `choose` needs a longer lease (roughly twice as long for the same $k$, a bit
less since a job sends fewer renewals). A dead worker's job waits about $L - B/2 + S/2$, so detection gets
slower by about the added lease.

*Grading:* 1 point for (a) (timer argument; p^k against 1/B), 1 point for (b) (longer lease, slower detection).
### END SOLUTION
""",
    ),
]


NOTEBOOKS = {
    "01-detection-latency.ipynb": NB1,
    "02-tuning-under-pauses.ipynb": NB2,
    "03-write-a-policy.ipynb": NB3,
    "04-fencing.ipynb": NB4,
    "05-missed-heartbeats.ipynb": NB5,
    "06-shortest-pause.ipynb": run_path(str(HERE / "_build_06.py"))["cells"](globals()),
}


def build(cells: list) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, cell in enumerate(nb.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"cell-{index:02d}"  # stable ids: a rebuild changes nothing it need not
    return nb


def main() -> int:
    for name, cells in NOTEBOOKS.items():
        nb = build(cells)
        nbformat.validate(nb)
        nbformat.write(nb, HERE / name)
        print(HERE / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
