# %% [markdown]
# # Assignment 3: write your own failure detector
#
# **Expected time:** about 2 hours. **Points:** 9 autograded + 2 graded by hand.
#
# A fixed timeout cannot tell a slow worker from a dead one. A lease renewed by a heartbeat can, because a live
# worker keeps *saying* it is alive. In this assignment you build a third kind of detector: one that **learns**
# how regular the heartbeats are and suspects a worker when its heartbeat is later than that history makes
# plausible. This is the idea of the **phi accrual failure detector** (Hayashibara et al., 2004; used by
# Cassandra and Akka):
#
# $$\varphi(t) = -\log_{10}\bigl(1 - F(t - t_{\text{last}})\bigr),$$
#
# where $t_{\text{last}}$ is the time of the last heartbeat and $F$ is the distribution of the gaps between
# heartbeats, estimated from the gaps seen so far. A job is taken back when $\varphi$ exceeds a threshold (8 in
# Cassandra: a one-in-$10^8$ delay). A simpler variant, also accepted here: suspect when the silence exceeds
# the mean gap plus a few standard deviations (a *timeout learned from the gaps*).
#
# Your detector must beat the fixed timeouts on the standard scenarios:
#
# * `slow-alive` (a 15-minute job on a healthy worker): **fewer false reclaims** than `TimeoutPolicy(60)`;
# * `fast-dead` (the worker dies 1 s into its job): **lower detection latency** than `TimeoutPolicy(600)`;
# * it must **adapt**: the grader runs it through a regular heartbeat history and an irregular one (a worker
#   that freezes now and then) and measures how long a silence it tolerates after each; a detector that tolerates the same silence after
#   both is a fixed timeout, and scores 0 on questions 2, 4 and 5 (at most a third of the detector's points);
# * and, in hidden tests, the same on other seeds and job lengths, no duplicate completions when a worker freezes
#   (more than once per job, too), and no more false reclaims than the standard lease when the network loses
#   heartbeats.
#
# The tests run your class in a fresh Python process, from your **saved** notebook: save before you run them.
#
# Check your notebook with `python -m emqsim grade 03-write-a-policy.ipynb`.

# %% [markdown]
# ## How emqsim talks to a detector
#
# A detector is a subclass of `emqsim.Detector` (docs/policies.md), all in seconds. Its constructor takes the
# heartbeat period and the sweep period, `super().__init__(beat=10.0, scan=5.0)`: workers send a heartbeat every
# `beat` seconds while they hold a job, and every `scan` seconds a reaper asks the detector about each job in
# progress. You write three methods; the simulator calls them with the Redis clock `now` in seconds:
#
# | method | called when | returns |
# |---|---|---|
# | `taken(job, now)` | a worker took `job` | nothing |
# | `heartbeat(job, now)` | a heartbeat of the job's current holder reached Redis | nothing |
# | `suspect(job, now)` | at every sweep, for each job in progress | `True` to take the job back |
#
# `Detector` does the rest on the queue, the same way for every detector: each take gives the job a fencing
# token without expiry, a heartbeat from a worker whose job was taken back is refused (and never reaches
# `heartbeat`), a job you suspect goes back to the queue for the next free worker, and a finish is accepted only
# from the job's current holder. The simulator gives each run a fresh copy of the detector, so you can keep
# per-run state on `self`.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import math
import statistics
import warnings

from scipy import stats

from emqsim import Detector, LeasePolicy, TimeoutPolicy, Uniform, simulate, standard
from emqsim.stats import aggregate, summarize


def measure(policy, scenario, replications, seed=0):
    """Run `scenario` under `policy` `replications` times and pool the runs into one table row (a dict)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [
            simulate(scenario, policy, seed=seed, replication=r, record_locks=False)
            for r in range(replications)
        ]
    return aggregate([summarize(run) for run in runs])


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)


# %% [markdown]
# ## Question 1: the detector (graded by the tests of Questions 2 to 5)
#
# Complete `AdaptiveDetector`. The parts that are given: the settings (`beat`, `scan`, the `threshold`), and
# `taken`, which notes when each job was taken. You write:
#
# * `__init__`: any state you need for learning (e.g. a list of recent gaps);
# * `heartbeat(job, now)`: learn from the gap since the job's previous heartbeat, and remember the time of this
#   one in `self.last_beat`;
# * `suspect(job, now)`: `True` if the job's worker should now be presumed dead.
#
# Tips. The first gap after a take (take to first heartbeat) is shorter than the others, because the worker's
# timer was already running: learn only from gaps between two heartbeats (`self.taken_at` helps). Until you have
# seen a handful of gaps (say 10), do not trust them: use the nominal period `self.beat`. A perfectly regular
# heartbeat has a standard deviation of 0, which makes $\varphi$ jump from 0 to infinity: put a floor under it
# (say a quarter of the mean gap). `scipy.stats.norm.logsf(x, mean, sd)` gives $\ln(1 - F(x))$ without
# underflow, so $\varphi = -$`norm.logsf(...)`$/\ln 10$. Leave the queue to `Detector`: the tests read your
# class and refuse one that overrides its steps (`take`, `renew`, `sweep`, `finish`).

# %% nbgrader={"grade": false, "grade_id": "q1-detector", "locked": false, "schema_version": 3, "solution": true}
class AdaptiveDetector(Detector):
    """Suspect a job when its heartbeat is later than the gaps seen so far make plausible."""

    name = "adaptive"

    def __init__(self, beat=10.0, scan=5.0, threshold=8.0):
        super().__init__(beat=beat, scan=scan)  # a heartbeat every `beat` s, a sweep every `scan` s
        self.threshold = threshold
        self.taken_at = {}  # job id -> time (s) of its current take
        self.last_beat = {}  # job id -> time (s) of its last heartbeat, or of its take if none yet
        ### BEGIN SOLUTION
        self.gaps = []  # recent gaps between two heartbeats (s), all jobs together
        self.window = 200
        self.min_gaps = 10  # trust the nominal period until this many gaps were seen
        ### END SOLUTION

    def taken(self, job, now):
        self.taken_at[job] = now
        self.last_beat[job] = now

    def heartbeat(self, job, now):
        ### BEGIN SOLUTION
        if self.last_beat[job] > self.taken_at[job]:  # skip the (shorter) take -> first beat gap
            self.gaps.append(now - self.last_beat[job])
            del self.gaps[: -self.window]
        self.last_beat[job] = now
        ### END SOLUTION

    def suspect(self, job, now):
        ### BEGIN SOLUTION
        last = self.last_beat.get(job)
        if last is None:
            return False
        if len(self.gaps) < self.min_gaps:
            mean, sd = self.beat, self.beat / 4
        else:
            mean = statistics.fmean(self.gaps)
            sd = max(statistics.pstdev(self.gaps), mean / 4)
        phi = -stats.norm.logsf(now - last, mean, sd) / math.log(10)
        return phi > self.threshold
        ### END SOLUTION


# %% [markdown]
# Try it on one run of each scenario before running the tests. `run.attempts` lists every take of the job: who
# took it, when, and how it ended.

# %%
for scenario in (SLOW_ALIVE, FAST_DEAD):
    run = simulate(scenario, AdaptiveDetector(), seed=0)
    print(scenario.name)
    for a in run.attempts:
        print(
            f"  attempt {a.attempt} on worker {a.worker}: taken at {a.taken_at:.1f} s, outcome {a.outcome}, "
            f"detection latency {a.detection_latency}"
        )

# %% [markdown]
# ## Question 2 (1 point): it runs, and it is fenced
#
# The test builds your detector with its default settings and runs each scenario once.

# %% nbgrader={"grade": true, "grade_id": "q2-basics-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '03-write-a-policy.ipynb',
    'q2-basics-tests',
    ['AdaptiveDetector'],
    r'''
import warnings
from emqsim import Detector, Freeze, LeasePolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
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
        base="Detector",
        forbidden=("LeasePolicy", "TimeoutPolicy", "ReclaimPolicy", "PhiAccrual", "phi_accrual", "emqsim.examples",
                   "emqsim.policies", "take", "renew", "sweep", "finish", "queue", "store"),
    )
    assert isinstance(AdaptiveDetector, type) and issubclass(AdaptiveDetector, Detector), (
        "AdaptiveDetector must be a class, a subclass of Detector"
    )
    made = AdaptiveDetector()
    assert type(made) is AdaptiveDetector, "AdaptiveDetector() must build an AdaptiveDetector"
    return made


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
# Freezes of the worker (seconds into the job, length): each delays a heartbeat, then the next one comes early, so
# the gaps grow irregular step by step (a learning detector keeps up and takes back no live job)
IRREGULAR = [(125.0 + 20 * i, d) for i, d in enumerate([8, 10, 12, 14, 16, 18, 20, 22, 24, *[26] * 9])]


def tolerated_silence(freezes, seed):
    """The silence (s) after its last heartbeat at which the detector takes a job back, in a run: one job on two
    workers, its worker frozen at `freezes` (seconds into the job, length), then dead 20 s after the last
    freeze ends (after 140 s without freezes)."""
    from emqsim import Crash, Fixed

    end = max([at + length for at, length in freezes], default=120.0) + 20.0
    faults = tuple(Freeze(job=0, after=at, duration=length) for at, length in freezes)
    world = Scenario(name="probe", workers=2, jobs=1, duration=Fixed(end + 3600.0),
                     faults=(*faults, Crash(job=0, after=end)), horizon=end + 1000.0)
    run = simulate(world, detector(), seed=seed)
    first = run.attempts[0]
    assert first.reclaimed_at is not None, "your detector never took back the job of a worker that died"
    beats = [e.time for e in run.lock_events
             if e.token == first.token and e.kind in ("set", "renewed") and e.time <= first.reclaimed_at]
    return first.reclaimed_at - max(beats)


def adaptive(seed=0):
    """The detector must learn: it tolerates a longer silence after irregular heartbeats than after regular
    ones."""
    regular = tolerated_silence([], seed)
    irregular = tolerated_silence(IRREGULAR, seed + 1)
    assert regular <= 45, f"after regular 10 s heartbeats the detector waits {regular:.0f} s of silence"
    assert irregular >= regular + 15, (
        f"your detector tolerates {regular:.0f} s of silence after regular heartbeats and {irregular:.0f} s after "
        "irregular ones: it does not learn from the gaps (a fixed threshold)"
    )

made = detector()
assert made.renewal is not None and made.fenced, "keep the heartbeat and the fencing"
row = measure(made, SLOW_ALIVE, replications=1)
assert row["duplicate_completions_total"] == 0 and row["reclaims_total"] == 0, "a healthy worker's job was taken back"
row = measure(detector(), FAST_DEAD, replications=1)
assert row["detections_total"] == 1 and row["crashes_undetected_total"] == 0, "the dead worker's job was never taken back"
### BEGIN HIDDEN TESTS
adaptive(seed=401)
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 3 (3 points): slow but alive
#
# On `slow-alive` the fixed 60-second timeout takes the job away from a healthy worker again and again. Your
# detector must do better (the hidden tests ask for no false reclaim at all, on other seeds and job lengths).

# %% nbgrader={"grade": true, "grade_id": "q3-slow-alive-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '03-write-a-policy.ipynb',
    'q3-slow-alive-tests',
    ['AdaptiveDetector'],
    r'''
import warnings
from emqsim import Detector, Freeze, LeasePolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
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
        base="Detector",
        forbidden=("LeasePolicy", "TimeoutPolicy", "ReclaimPolicy", "PhiAccrual", "phi_accrual", "emqsim.examples",
                   "emqsim.policies", "take", "renew", "sweep", "finish", "queue", "store"),
    )
    assert isinstance(AdaptiveDetector, type) and issubclass(AdaptiveDetector, Detector), (
        "AdaptiveDetector must be a class, a subclass of Detector"
    )
    made = AdaptiveDetector()
    assert type(made) is AdaptiveDetector, "AdaptiveDetector() must build an AdaptiveDetector"
    return made


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
# Freezes of the worker (seconds into the job, length): each delays a heartbeat, then the next one comes early, so
# the gaps grow irregular step by step (a learning detector keeps up and takes back no live job)
IRREGULAR = [(125.0 + 20 * i, d) for i, d in enumerate([8, 10, 12, 14, 16, 18, 20, 22, 24, *[26] * 9])]


def tolerated_silence(freezes, seed):
    """The silence (s) after its last heartbeat at which the detector takes a job back, in a run: one job on two
    workers, its worker frozen at `freezes` (seconds into the job, length), then dead 20 s after the last
    freeze ends (after 140 s without freezes)."""
    from emqsim import Crash, Fixed

    end = max([at + length for at, length in freezes], default=120.0) + 20.0
    faults = tuple(Freeze(job=0, after=at, duration=length) for at, length in freezes)
    world = Scenario(name="probe", workers=2, jobs=1, duration=Fixed(end + 3600.0),
                     faults=(*faults, Crash(job=0, after=end)), horizon=end + 1000.0)
    run = simulate(world, detector(), seed=seed)
    first = run.attempts[0]
    assert first.reclaimed_at is not None, "your detector never took back the job of a worker that died"
    beats = [e.time for e in run.lock_events
             if e.token == first.token and e.kind in ("set", "renewed") and e.time <= first.reclaimed_at]
    return first.reclaimed_at - max(beats)


def adaptive(seed=0):
    """The detector must learn: it tolerates a longer silence after irregular heartbeats than after regular
    ones."""
    regular = tolerated_silence([], seed)
    irregular = tolerated_silence(IRREGULAR, seed + 1)
    assert regular <= 45, f"after regular 10 s heartbeats the detector waits {regular:.0f} s of silence"
    assert irregular >= regular + 15, (
        f"your detector tolerates {regular:.0f} s of silence after regular heartbeats and {irregular:.0f} s after "
        "irregular ones: it does not learn from the gaps (a fixed threshold)"
    )

mine = measure(detector(), SLOW_ALIVE, replications=5)
timeout = measure(TimeoutPolicy(60.0), SLOW_ALIVE, replications=5)
print(f"false reclaims: yours {mine['false_reclaims_total']}, TimeoutPolicy(60) {timeout['false_reclaims_total']}")
assert mine["false_reclaims_total"] < timeout["false_reclaims_total"], "no fewer false reclaims than the 60 s timeout"
assert mine["duplicate_completions_total"] == 0
### BEGIN HIDDEN TESTS
for duration, seed in [(1800.0, 101), (300.0, 102)]:
    row = measure(detector(), standard("slow-alive", duration=duration, workers=2), 3, seed=seed)
    assert row["false_reclaims_total"] == 0, (duration, seed, row["false_reclaims_total"])
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 4 (3 points): fast but dead
#
# On `fast-dead` the 10-minute timeout leaves the dead worker's job untouched for almost 600 s. Your detector must
# be faster on every seed the grader tries (hidden: crashes at other moments of the job, within 300 s on average).

# %% nbgrader={"grade": true, "grade_id": "q4-fast-dead-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '03-write-a-policy.ipynb',
    'q4-fast-dead-tests',
    ['AdaptiveDetector'],
    r'''
import warnings
from emqsim import Detector, Freeze, LeasePolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
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
        base="Detector",
        forbidden=("LeasePolicy", "TimeoutPolicy", "ReclaimPolicy", "PhiAccrual", "phi_accrual", "emqsim.examples",
                   "emqsim.policies", "take", "renew", "sweep", "finish", "queue", "store"),
    )
    assert isinstance(AdaptiveDetector, type) and issubclass(AdaptiveDetector, Detector), (
        "AdaptiveDetector must be a class, a subclass of Detector"
    )
    made = AdaptiveDetector()
    assert type(made) is AdaptiveDetector, "AdaptiveDetector() must build an AdaptiveDetector"
    return made


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
# Freezes of the worker (seconds into the job, length): each delays a heartbeat, then the next one comes early, so
# the gaps grow irregular step by step (a learning detector keeps up and takes back no live job)
IRREGULAR = [(125.0 + 20 * i, d) for i, d in enumerate([8, 10, 12, 14, 16, 18, 20, 22, 24, *[26] * 9])]


def tolerated_silence(freezes, seed):
    """The silence (s) after its last heartbeat at which the detector takes a job back, in a run: one job on two
    workers, its worker frozen at `freezes` (seconds into the job, length), then dead 20 s after the last
    freeze ends (after 140 s without freezes)."""
    from emqsim import Crash, Fixed

    end = max([at + length for at, length in freezes], default=120.0) + 20.0
    faults = tuple(Freeze(job=0, after=at, duration=length) for at, length in freezes)
    world = Scenario(name="probe", workers=2, jobs=1, duration=Fixed(end + 3600.0),
                     faults=(*faults, Crash(job=0, after=end)), horizon=end + 1000.0)
    run = simulate(world, detector(), seed=seed)
    first = run.attempts[0]
    assert first.reclaimed_at is not None, "your detector never took back the job of a worker that died"
    beats = [e.time for e in run.lock_events
             if e.token == first.token and e.kind in ("set", "renewed") and e.time <= first.reclaimed_at]
    return first.reclaimed_at - max(beats)


def adaptive(seed=0):
    """The detector must learn: it tolerates a longer silence after irregular heartbeats than after regular
    ones."""
    regular = tolerated_silence([], seed)
    irregular = tolerated_silence(IRREGULAR, seed + 1)
    assert regular <= 45, f"after regular 10 s heartbeats the detector waits {regular:.0f} s of silence"
    assert irregular >= regular + 15, (
        f"your detector tolerates {regular:.0f} s of silence after regular heartbeats and {irregular:.0f} s after "
        "irregular ones: it does not learn from the gaps (a fixed threshold)"
    )

mine = measure(detector(), FAST_DEAD, replications=10)
timeout = measure(TimeoutPolicy(600.0), FAST_DEAD, replications=10)
print(f"mean detection: yours {mine['detection_latency_mean_s']:.1f} s, TimeoutPolicy(600) {timeout['detection_latency_mean_s']:.1f} s")
assert mine["crashes_undetected_total"] == 0, "some dead worker's job was never taken back"
assert mine["detection_latency_mean_s"] < timeout["detection_latency_mean_s"], "not faster than the 600 s timeout"
### BEGIN HIDDEN TESTS
scenario = standard("fast-dead", die_after=Uniform(1.0, 50.0), duration=60.0, workers=2)
mine = measure(detector(), scenario, 10, seed=202)
assert mine["crashes_undetected_total"] == 0
assert mine["detection_latency_mean_s"] < 300.0, mine["detection_latency_mean_s"]
scenario = standard("fast-dead", die_after=Uniform(1.0, 200.0), duration=240.0, workers=2)
mine = measure(detector(), scenario, 10, seed=203)
assert mine["crashes_undetected_total"] == 0 and mine["detection_latency_mean_s"] < 120.0, mine["detection_latency_mean_s"]
adaptive(seed=402)  # fast on a dead worker because it learned, not because of a short fixed timeout
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 5 (2 points): pauses and a lossy network
#
# Two harder situations. A worker that freezes for 45 s looks dead to any detector, and may have its job taken
# back; what must never happen is that the job then completes twice (your fencing must hold). And on
# `flaky-network` (here without its connection outage), where each heartbeat is lost independently with
# probability 0.2, an adaptive detector should learn that gaps are irregular: it may not falsely reclaim more jobs
# than the standard lease (30 s, renewed every 10 s) does on the same seeds.

# %% nbgrader={"grade": true, "grade_id": "q5-robust-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '03-write-a-policy.ipynb',
    'q5-robust-tests',
    ['AdaptiveDetector'],
    r'''
import warnings
from emqsim import Detector, Freeze, LeasePolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
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
        base="Detector",
        forbidden=("LeasePolicy", "TimeoutPolicy", "ReclaimPolicy", "PhiAccrual", "phi_accrual", "emqsim.examples",
                   "emqsim.policies", "take", "renew", "sweep", "finish", "queue", "store"),
    )
    assert isinstance(AdaptiveDetector, type) and issubclass(AdaptiveDetector, Detector), (
        "AdaptiveDetector must be a class, a subclass of Detector"
    )
    made = AdaptiveDetector()
    assert type(made) is AdaptiveDetector, "AdaptiveDetector() must build an AdaptiveDetector"
    return made


SLOW_ALIVE = standard("slow-alive", duration=900.0, workers=2)
FAST_DEAD = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
# Freezes of the worker (seconds into the job, length): each delays a heartbeat, then the next one comes early, so
# the gaps grow irregular step by step (a learning detector keeps up and takes back no live job)
IRREGULAR = [(125.0 + 20 * i, d) for i, d in enumerate([8, 10, 12, 14, 16, 18, 20, 22, 24, *[26] * 9])]


def tolerated_silence(freezes, seed):
    """The silence (s) after its last heartbeat at which the detector takes a job back, in a run: one job on two
    workers, its worker frozen at `freezes` (seconds into the job, length), then dead 20 s after the last
    freeze ends (after 140 s without freezes)."""
    from emqsim import Crash, Fixed

    end = max([at + length for at, length in freezes], default=120.0) + 20.0
    faults = tuple(Freeze(job=0, after=at, duration=length) for at, length in freezes)
    world = Scenario(name="probe", workers=2, jobs=1, duration=Fixed(end + 3600.0),
                     faults=(*faults, Crash(job=0, after=end)), horizon=end + 1000.0)
    run = simulate(world, detector(), seed=seed)
    first = run.attempts[0]
    assert first.reclaimed_at is not None, "your detector never took back the job of a worker that died"
    beats = [e.time for e in run.lock_events
             if e.token == first.token and e.kind in ("set", "renewed") and e.time <= first.reclaimed_at]
    return first.reclaimed_at - max(beats)


def adaptive(seed=0):
    """The detector must learn: it tolerates a longer silence after irregular heartbeats than after regular
    ones."""
    regular = tolerated_silence([], seed)
    irregular = tolerated_silence(IRREGULAR, seed + 1)
    assert regular <= 45, f"after regular 10 s heartbeats the detector waits {regular:.0f} s of silence"
    assert irregular >= regular + 15, (
        f"your detector tolerates {regular:.0f} s of silence after regular heartbeats and {irregular:.0f} s after "
        "irregular ones: it does not learn from the gaps (a fixed threshold)"
    )

frozen = standard("frozen", freeze_for=45.0, freeze_after=5.0, duration=120.0, workers=2)
row = measure(detector(), frozen, replications=3)
assert row["duplicate_completions_total"] == 0, "a frozen worker's job completed twice: is the finish still fenced?"
flaky = standard("flaky-network", loss=0.2, jobs=12, duration=300.0, workers=4, outage_at=None)
mine = measure(detector(), flaky, replications=2)
lease = measure(LeasePolicy(30.0, 10.0), flaky, replications=2)
print(f"flaky network, false reclaims: yours {mine['false_reclaims_total']}, lease {lease['false_reclaims_total']}")
assert mine["false_reclaims_total"] <= lease["false_reclaims_total"]
### BEGIN HIDDEN TESTS
mine = measure(detector(), flaky, replications=3, seed=303)
lease = measure(LeasePolicy(30.0, 10.0), flaky, replications=3, seed=303)
assert mine["false_reclaims_total"] <= lease["false_reclaims_total"], (mine["false_reclaims_total"], lease["false_reclaims_total"])
twice = frozen.with_(faults=(Freeze(job=0, after=5.0, duration=45.0), Freeze(job=0, after=30.0, duration=60.0)))
row = measure(detector(), twice, replications=3, seed=304)
assert row["duplicate_completions_total"] == 0, "two pauses in one job: it completed twice"
adaptive(seed=403)
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 6 (2 points, graded by hand)
#
# Your detector keeps its memory (the last heartbeat of each job, the recent gaps) in the reaper process, while
# the lease keeps *all* of its state in Redis (the time-to-live of the lock key). What happens to your detector
# when the reaper restarts? What would you store in Redis to make it survive, and what does the lease get for
# free that your detector has to build?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q6-explain", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# *Model answer.* After a restart the detector has no `last_beat` entries and no gap history: jobs that were
# active before the restart are never suspected (their last heartbeat is unknown) until they send a heartbeat
# again, so a worker that died just before the restart holds its job forever, and the learned distribution
# starts again from the nominal period. To survive, each heartbeat must write its timestamp to Redis (e.g. a
# sorted set `job -> last heartbeat`, as the renewal script runs inside Redis anyway) and the gap statistics
# (count, sum, sum of squares or a window) must be kept there too; the sweep then reads them. The lease gets this
# for free: the lock's TTL *is* the "last heartbeat + allowance" state, Redis's own clock evaluates it, and any
# process can run the sweep, so there is nothing to lose or rebuild. The detector's advantage is that its
# allowance adapts to the observed gaps instead of being a fixed $L$.
#
# *Grading:* 1 point for the restart failure (lost state: dead jobs not suspected / history relearned), 1 point
# for what to persist and the comparison with the TTL held by Redis.
# ### END SOLUTION
