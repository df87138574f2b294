# %% [markdown]
# # Assignment 6: the shortest pause that runs a job twice, and the fix
#
# **Expected time:** about 45 minutes. **Points:** 6 autograded + 2 graded by hand.
#
# A queue that takes a job back after a **fixed timeout** cannot tell a dead worker from a frozen one. If the
# worker only froze (a long GC pause, `SIGSTOP`, a blocked event loop) and resumes after the job was handed to
# someone else, both finish it and, without a token check, the job **completes twice**.
#
# Sampling random pause times tells you how *often* that happens. Here you find the **exact shortest** pause that
# does it, with `emqsim.explore`, which runs every pause length to the millisecond (docs/explore.md; notebook 06
# shows it at work). Then you fix the configuration: a lease renewed by a heartbeat that no pause up to a given
# length can break.
#
# Your configuration (the timeout, the job's length, the pause to survive) is your own: the setup cell computes it
# from your seed. The grader checks your answers on your configuration and on others you do not see.
#
# Check your notebook with `python -m emqsim grade 06-shortest-pause.ipynb` (save it first: the checks read the
# saved file).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
from emqsim import LeasePolicy, TimeoutPolicy
from emqsim.explore import FaultSpec, dead_reclaimed_within, explore, format_exploration, space
from emqsim.grading import student_seed

SEED = student_seed("06-shortest-pause")  # your own seed: your configuration differs from your neighbour's
TIMEOUT = 45 + SEED % 31  # seconds: your queue's fixed timeout (45 to 75 s)
JOB = 20 + (SEED // 31) % 11  # seconds: how long the job runs (20 to 30 s)
MAX_PAUSE = 21 + (SEED // 341) % 14  # seconds: the longest pause your fixed queue must survive (21 to 34 s)


def pause_world(policy, job, lengths_ms, offset_ms=None):
    """One `job`-second job on two workers under `policy`; its worker freezes for every length in
    `lengths_ms` (low, high: whole ms, inclusive), `offset_ms` ms into the job (None: at every moment of one
    renewal period); the sweeps run on a fixed phase."""
    offset = None if offset_ms is None else (offset_ms, offset_ms)
    fault = FaultSpec("freeze", offset=offset, params={"length": lengths_ms})
    return space(policy, [fault], duration=job, sweep_phases=False)


def crash_world(policy, job, bound):
    """The same job; its worker crashes at every moment of one renewal period; checks that the job is back
    within `bound` seconds."""
    return space(policy, [FaultSpec("crash")], duration=job, sweep_phases=False, bound=bound)


print(f"TIMEOUT = {TIMEOUT} s, JOB = {JOB} s, MAX_PAUSE = {MAX_PAUSE} s")


# %% [markdown]
# ## Question 1 (3 points): the shortest pause that completes the job twice
#
# The queue runs `TimeoutPolicy(timeout, scan=5)`: every 5 s a reaper takes back any job older than `timeout`.
# A job of `job` seconds starts on worker 0; **5 s into it** worker 0 freezes, then resumes and finishes the job.
# Worker 1 is idle and takes any job that comes back.
#
# Write `shortest_pause(timeout, job)`: the shortest freeze, in seconds to the millisecond, after which the job
# completes twice. `pause_world(TimeoutPolicy(timeout, scan=5), job, (low_ms, high_ms), offset_ms=5000)`
# describes every freeze length from `low_ms` to `high_ms`; `explore(world)` runs them all, and its
# `boundaries` say where each property starts failing (`format_exploration` prints a report). Reasoning alone
# gets you close ("timeout minus job"), but the grader wants the millisecond: when does the sweep that notices
# come, and when does the late finish reach Redis?

# %% nbgrader={"grade": false, "grade_id": "q1-shortest", "locked": false, "schema_version": 3, "solution": true}
def shortest_pause(timeout, job):
    """The shortest freeze (s, to the ms), 5 s into a `job`-second job, after which TimeoutPolicy(timeout,
    scan=5) lets the job complete twice."""
    ### BEGIN SOLUTION
    world = pause_world(TimeoutPolicy(timeout, scan=5), job, (1, round((timeout + job) * 1000)), offset_ms=5000)
    result = explore(world, ties=False)  # ties=True also reports same-millisecond orders; slower
    (boundary,) = [b for b in result.boundaries if b.property == "no_duplicate_completion"]
    return boundary.first / 1000
    ### END SOLUTION


print(f"your configuration: a freeze of {shortest_pause(TIMEOUT, JOB):.3f} s or longer completes the job twice")

# %% nbgrader={"grade": true, "grade_id": "q1-shortest-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '06-shortest-pause.ipynb',
    'q1-shortest-tests',
    ['shortest_pause'],
    r'''
from emqsim import LeasePolicy, TimeoutPolicy
from emqsim.explore import FaultSpec, dead_reclaimed_within, explore, format_exploration, space
from emqsim.grading import student_seed

SEED = student_seed("06-shortest-pause")  # your own seed: your configuration differs from your neighbour's
TIMEOUT = 45 + SEED % 31  # seconds: your queue's fixed timeout (45 to 75 s)
JOB = 20 + (SEED // 31) % 11  # seconds: how long the job runs (20 to 30 s)
MAX_PAUSE = 21 + (SEED // 341) % 14  # seconds: the longest pause your fixed queue must survive (21 to 34 s)


def pause_world(policy, job, lengths_ms, offset_ms=None):
    """One `job`-second job on two workers under `policy`; its worker freezes for every length in
    `lengths_ms` (low, high: whole ms, inclusive), `offset_ms` ms into the job (None: at every moment of one
    renewal period); the sweeps run on a fixed phase."""
    offset = None if offset_ms is None else (offset_ms, offset_ms)
    fault = FaultSpec("freeze", offset=offset, params={"length": lengths_ms})
    return space(policy, [fault], duration=job, sweep_phases=False)


def crash_world(policy, job, bound):
    """The same job; its worker crashes at every moment of one renewal period; checks that the job is back
    within `bound` seconds."""
    return space(policy, [FaultSpec("crash")], duration=job, sweep_phases=False, bound=bound)

from emqsim.grading import as_number, written_in_notebook

written_in_notebook("shortest_pause", forbidden=())


def practice(timeout, job):
    got = as_number(shortest_pause(timeout, job), f"shortest_pause({timeout}, {job})")
    assert timeout - job < got < timeout - job + 10, (
        f"shortest_pause({timeout}, {job}) = {got}: the job completes twice after a freeze a little longer than "
        "timeout - job (a few seconds at most)"
    )

practice(60, 30)
### BEGIN HIDDEN TESTS
def reference(timeout, job):
    sp = pause_world(TimeoutPolicy(timeout, scan=5), job, (1, round((timeout + job) * 1000)), offset_ms=5000)
    result = explore(sp, ties=False)
    (b,) = [b for b in result.boundaries if b.property == "no_duplicate_completion"]
    return b.first / 1000


def check(timeout, job):
    got = as_number(shortest_pause(timeout, job), f"shortest_pause({timeout}, {job})")
    want = reference(timeout, job)
    assert abs(got - want) < 0.0005, (
        f"shortest_pause({timeout}, {job}) = {got}: not the shortest freeze that completes the job twice "
        "(explore every length, to the millisecond)"
    )

check(60, 30)
check(TIMEOUT, JOB)
check(50, 24)
### END HIDDEN TESTS
''',
)


# %% [markdown]
# ## Question 2 (3 points): fix the configuration
#
# Replace the timeout by a lease renewed by a heartbeat. A freeze of `F` seconds that starts `u` seconds after the
# last renewal was sent lapses the lock if and only if `u + F > L` (docs/theory.md); once the lock lapses, a sweep
# hands the job to worker 1 while worker 0 still runs it.
#
# Write `safe_policy(max_pause)` returning a `LeasePolicy` such that, for a `JOB`-second job:
#
# * no freeze of up to `max_pause` seconds, starting at **any** moment, takes the job from its (frozen but live)
#   worker or completes it twice;
# * a crashed worker's job is back in the queue within `max_pause + 20` seconds, whatever the moment of the crash;
# * the heartbeat is at least 2 s (the Redis request budget).
#
# The grader explores your policy with `pause_world(policy, JOB, ...)` and `crash_world(policy, JOB, ...)` for
# your own `MAX_PAUSE` and for pauses you do not see. A fencing token alone (`fenced=True`) is not a fix: it stops
# the second completion, not the second run.

# %% nbgrader={"grade": false, "grade_id": "q2-fix", "locked": false, "schema_version": 3, "solution": true}
def safe_policy(max_pause):
    """A LeasePolicy that survives every freeze up to `max_pause` s and detects a crash within max_pause + 20 s."""
    ### BEGIN SOLUTION
    beat = 5.0  # >= 2 s; short, so the lease (and the detection) need not be much longer than the pause
    return LeasePolicy(max_pause + beat, beat, 5.0)  # u <= beat, so u + F <= lease for every F <= max_pause
    ### END SOLUTION


policy = safe_policy(MAX_PAUSE)
print(policy)

# %% nbgrader={"grade": true, "grade_id": "q2-fix-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '06-shortest-pause.ipynb',
    'q2-fix-tests',
    ['safe_policy'],
    r'''
from emqsim import LeasePolicy, TimeoutPolicy
from emqsim.explore import FaultSpec, dead_reclaimed_within, explore, format_exploration, space
from emqsim.grading import student_seed

SEED = student_seed("06-shortest-pause")  # your own seed: your configuration differs from your neighbour's
TIMEOUT = 45 + SEED % 31  # seconds: your queue's fixed timeout (45 to 75 s)
JOB = 20 + (SEED // 31) % 11  # seconds: how long the job runs (20 to 30 s)
MAX_PAUSE = 21 + (SEED // 341) % 14  # seconds: the longest pause your fixed queue must survive (21 to 34 s)


def pause_world(policy, job, lengths_ms, offset_ms=None):
    """One `job`-second job on two workers under `policy`; its worker freezes for every length in
    `lengths_ms` (low, high: whole ms, inclusive), `offset_ms` ms into the job (None: at every moment of one
    renewal period); the sweeps run on a fixed phase."""
    offset = None if offset_ms is None else (offset_ms, offset_ms)
    fault = FaultSpec("freeze", offset=offset, params={"length": lengths_ms})
    return space(policy, [fault], duration=job, sweep_phases=False)


def crash_world(policy, job, bound):
    """The same job; its worker crashes at every moment of one renewal period; checks that the job is back
    within `bound` seconds."""
    return space(policy, [FaultSpec("crash")], duration=job, sweep_phases=False, bound=bound)

def check(max_pause):
    policy = safe_policy(max_pause)
    assert type(policy) is LeasePolicy, f"safe_policy({max_pause}) must return a LeasePolicy"
    assert policy.renewal.tick_ms >= 2000, f"safe_policy({max_pause}): the heartbeat must be at least 2 s"
    top = round(max_pause * 1000)
    every_start = explore(pause_world(policy, JOB, (top, top)), ties=False)
    for prop in ("live_never_reclaimed", "no_duplicate_completion"):
        assert every_start.counts[prop] == every_start.points, (
            f"safe_policy({max_pause}): a {max_pause} s freeze breaks {prop}, e.g. at "
            f"{[c.point for c in every_start.counterexamples if c.property == prop][0]}"
        )
    worst_start = every_start.space.dims[0].hi
    every_length = explore(pause_world(policy, JOB, (1, top), offset_ms=worst_start), ties=False)
    assert not every_length.violated(), f"safe_policy({max_pause}): a shorter freeze breaks it"
    crashes = explore(crash_world(policy, JOB, max_pause + 20), ties=False)
    assert not crashes.violated(), (
        f"safe_policy({max_pause}): a crash is not always detected within {max_pause + 20} s "
        f"(worst {crashes.latency_max / 1000:.3f} s)"
    )


check(25.0)
### BEGIN HIDDEN TESTS
check(float(MAX_PAUSE))
check(33.0)
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 3 (2 points, graded by hand)
#
# (a) Your answer to question 1 is a little more than `TIMEOUT - JOB`. Where do the extra milliseconds come from,
# and why would a sampled simulation with random pause lengths be a poor way to find this number?
# (b) Why does a lease with `L - B >= max_pause` survive every such pause while the timeout cannot be made to,
# whatever its value, if jobs may be longer than `JOB`? What does a fencing token add, and what does it not fix?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q3-explain", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# *Model answer.* (a) The job is reclaimed by the first sweep that finds it older than the timeout, not at the
# timeout itself: sweeps come every 5 s plus a round trip, so the reclaim lands a few ms to one sweep period after
# `taken_at + timeout`; the frozen worker's finish is applied half a round trip after it resumes and runs the rest
# of the job; the job completes twice when that finish reaches Redis after the reclaim. A random sample of pause
# lengths hits the exact boundary with probability near zero and only brackets it; the explorer runs every length
# and bisects to the millisecond (and reports the same-millisecond tie at the edge).
# (b) A lease is renewed while the worker lives, so only the time since the last renewal plus the pause counts:
# `u <= B` makes `u + F <= L` for every `F <= L - B`, whatever the job's length. A timeout counts from the start of
# the job, so any pause pushes a job near the timeout over it; a longer timeout only moves the problem (and slows
# detection of real crashes). A fencing token rejects the stale finish (the job completes once) but the job still
# ran twice: side effects outside the queue happen twice.
#
# *Grading:* 1 point for (a) (sweep timing + finish latency; sampling cannot pin the boundary), 1 point for (b)
# (time since last renewal vs time since start; fencing stops the duplicate completion, not the duplicate run).
# ### END SOLUTION
