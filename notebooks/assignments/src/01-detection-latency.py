# %% [markdown]
# # Assignment 1: how long does a dead worker hold its job?
#
# **Expected time:** about 60 minutes. **Points:** 6 autograded + 2 graded by hand.
#
# A job queue gives each job to one worker. When that worker dies, nobody tells the queue: the queue must notice
# on its own and give the job to someone else. The time from the crash until the job is back in the queue is the
# **detection latency** $T_D$ (Chen, Toueg and Aguilera call it the *detection time* of a failure detector).
#
# In this assignment you **predict** $T_D$ for a queue that uses a lease renewed by a heartbeat, on paper, and
# then **check your prediction** with the simulator `emqsim`.
#
# **What to hand in.** Fill in every cell that says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`
# line) and the cell that says `YOUR ANSWER HERE`. Run the test cell below each answer: a test that passes prints
# nothing or a short confirmation; a failing test raises an `AssertionError` saying what is wrong. Some tests are
# hidden: your instructor runs more checks of the same kind when grading, so make your functions work for *any*
# sensible input, not just the numbers used here. Check your whole notebook with
#
#     python -m emqsim grade 01-detection-latency.ipynb
#
# which runs it from the top and prints your points.

# %% [markdown]
# ## The model
#
# The queue (like BullMQ and its port EchoMQ) protects a job with a **lock that expires by itself**:
#
# 1. When a worker takes a job, Redis stores a lock key with a time-to-live of $L$ seconds (the **lease**).
# 2. While the worker is alive it renews the lock every $B$ seconds (the **heartbeat**); each renewal sets the
#    time-to-live back to $L$.
# 3. A separate **reaper** process looks at the jobs in progress every $S$ seconds (the **sweep**) and puts back
#    any job whose lock has disappeared.
#
# The timers run independently: the worker may crash at any moment between two renewals, and the reaper's sweeps
# are not synchronised with either. In this assignment the sweep is *single-phase*: one sweep that finds a lock
# missing takes the job back at once.
#
# Our queue runs with $L = 20$ s, $B = 4$ s, $S = 8$ s.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import math

import matplotlib.pyplot as plt
import numpy as np

from emqsim import LeasePolicy, Uniform, simulate, standard
from emqsim.grading import student_seed
from emqsim.stats import mean_ci, summarize

LEASE, BEAT, SCAN = 20.0, 4.0, 8.0  # seconds: our queue's settings
SEED = student_seed("01-detection-latency")  # your own seed: your numbers differ from your neighbour's


def crash_scenario(beat):
    """One job on two workers; the worker that takes it is killed at a uniformly random moment after its
    first heartbeat, so the crash falls anywhere between two renewals."""
    return standard("fast-dead", die_after=Uniform(beat, beat + 40.0), duration=beat + 60.0, workers=2)


# %% [markdown]
# ## Question 1 (2 points): predict the detection latency
#
# Think about one crash. Let $u$ be the time between the worker's last renewal and its crash.
#
# * Right after the crash the lock still has $L - u$ seconds to live. Since the crash can fall anywhere between two
#   renewals, $u$ is uniformly distributed on $(0, B)$.
# * Once the lock is gone, the job waits for the reaper's next sweep, which comes after a further time that is
#   uniformly distributed on $(0, S)$.
#
# Write `predict_detection(lease, beat, scan)` returning a tuple `(mean, lowest, highest)`: the expected detection
# latency and the smallest and largest values it can take, in seconds.

# %% nbgrader={"grade": false, "grade_id": "q1-predict", "locked": false, "schema_version": 3, "solution": true}
def predict_detection(lease, beat, scan):
    """(mean, lowest, highest) detection latency in seconds, for a lease renewed every `beat` seconds and a
    single-phase sweep run by a dedicated reaper every `scan` seconds."""
    ### BEGIN SOLUTION
    mean = lease - beat / 2 + scan / 2  # the lock lives L - u more seconds, u ~ U(0, B); then wait U(0, S)
    return mean, lease - beat, lease + scan
    ### END SOLUTION


predict_detection(LEASE, BEAT, SCAN)

# %% nbgrader={"grade": true, "grade_id": "q1-predict-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '01-detection-latency.ipynb',
    'q1-predict-tests',
    ['predict_detection'],
    r'''
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
### BEGIN HIDDEN TESTS
for lease, beat, scan in [(20.0, 4.0, 8.0), (45.0, 15.0, 10.0), (12.0, 3.0, 1.0), (60.0, 5.0, 30.0)]:
    mean, lowest, highest = (as_number(x, "each value") for x in predict_detection(lease, beat, scan))
    assert math.isclose(mean, lease - beat / 2 + scan / 2), (lease, beat, scan, mean)
    assert math.isclose(lowest, lease - beat), (lease, beat, scan, lowest)
    assert math.isclose(highest, lease + scan), (lease, beat, scan, highest)
### END HIDDEN TESTS
''',
)


# %% [markdown]
# ## Question 2 (2 points): measure it
#
# Now measure the same thing in the simulator. Write `detection_latencies(lease, beat, scan, replications, seed)`
# that returns a list with one detection latency per simulated crash:
#
# * the policy is `LeasePolicy(lease, beat, scan, two_phase=False, swept_by="reaper")` (single-phase sweep, run
#   by a dedicated reaper, as in our model);
# * the scenario is `crash_scenario(beat)` (defined above);
# * run `simulate(scenario, policy, seed=seed, replication=r)` for `r = 0, 1, ..., replications - 1`. The same
#   `(seed, replication)` always gives the same run, so your results are reproducible;
# * `summarize(run).detection_latencies` is the list of detection latencies in one run (here: one crash per run).

# %% nbgrader={"grade": false, "grade_id": "q2-simulate", "locked": false, "schema_version": 3, "solution": true}
def detection_latencies(lease, beat, scan, replications=200, seed=0):
    """One simulated detection latency (seconds) per crash, over `replications` runs."""
    ### BEGIN SOLUTION
    policy = LeasePolicy(lease, beat, scan, two_phase=False, swept_by="reaper")
    scenario = crash_scenario(beat)
    latencies = []
    for r in range(replications):
        run = simulate(scenario, policy, seed=seed, replication=r)
        latencies.extend(summarize(run).detection_latencies)
    return latencies
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "q2-simulate-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '01-detection-latency.ipynb',
    'q2-simulate-tests',
    ['detection_latencies'],
    r'''
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
### BEGIN HIDDEN TESTS
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
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ### Look at the distribution
#
# The cell below simulates 200 crashes and draws their detection latencies next to your prediction. The shape is
# the sum of two uniform waits (the rest of the lease, and the wait for the sweep): a trapezoid.

# %% nbgrader={"grade": false, "grade_id": "explore", "locked": true, "schema_version": 3, "solution": false}
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

# %% [markdown]
# ## Question 3 (1 point): is the difference just noise?
#
# The simulated mean is never exactly the predicted one: 200 crashes are a sample. Use
# `mean_ci(values)` (from `emqsim.stats`; it returns `(mean, low, high)`, a 95% confidence interval for the mean)
# on `latencies` from the cell above. Set `ci_low` and `ci_high` to the interval's ends, and `prediction_inside`
# to `True` if the predicted mean lies inside the interval, else `False`.

# %% nbgrader={"grade": false, "grade_id": "q3-ci", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
_, ci_low, ci_high = mean_ci(latencies)
prediction_inside = ci_low <= predict_detection(LEASE, BEAT, SCAN)[0] <= ci_high
### END SOLUTION
print(f"95% CI of the mean: [{ci_low:.2f}, {ci_high:.2f}] s; prediction inside: {prediction_inside}")

# %% nbgrader={"grade": true, "grade_id": "q3-ci-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '01-detection-latency.ipynb',
    'q3-ci-tests',
    ['ci_low', 'ci_high', 'prediction_inside'],
    r'''
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
''',
)


# %% [markdown]
# ## Question 4 (1 point): size the lease for a target
#
# The on-call team asks: *"after a worker dies, its job must be back in the queue within `worst_case` seconds,
# always"*. The sweep period is fixed by the platform (`scan`). Write `largest_lease(worst_case, scan)` that returns
# the longest lease meeting the target (ignore the few milliseconds the network adds). Longer leases are better
# here: they tolerate longer hiccups of a live worker.
#
# The test then runs 200 crashes with that lease, a heartbeat of a third of it, and the given sweep period.

# %% nbgrader={"grade": false, "grade_id": "q4-size", "locked": false, "schema_version": 3, "solution": true}
def largest_lease(worst_case, scan):
    """The longest lease (seconds) whose worst-case detection latency is at most `worst_case`."""
    ### BEGIN SOLUTION
    return worst_case - scan  # the worst case is L + S, whatever the heartbeat
    ### END SOLUTION


largest_lease(20.0, 5.0)

# %% nbgrader={"grade": true, "grade_id": "q4-size-tests", "locked": true, "points": 1, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '01-detection-latency.ipynb',
    'q4-size-tests',
    ['largest_lease'],
    r'''
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
### BEGIN HIDDEN TESTS
assert abs(as_number(largest_lease(60.0, 10.0), "largest_lease") - 50.0) < 0.1
assert abs(as_number(largest_lease(9.0, 1.5), "largest_lease") - 7.5) < 0.1
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 5 (2 points, graded by hand)
#
# With our settings the mean detection latency ($L - B/2 + S/2 = 22$ s) is *longer* than the lease; with
# $L = 30$, $B = 10$, $S = 5$ it is *shorter*. In three or four sentences: where do the $-B/2$ and the $+S/2$ come
# from, and which of the three knobs would you turn to cut the **worst case** without sending more heartbeats
# to Redis? Say what that costs.

# %% [markdown] nbgrader={"grade": true, "grade_id": "q5-explain", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# *Model answer.* The last renewal happened on average $B/2$ before the crash (the crash is uniform between two
# renewals), so the lock has already used $B/2$ of its lease when the worker dies: it vanishes $L - u$ after the
# crash, $L - B/2$ on average. After that the job waits for the next sweep, uniform on $(0, S)$: $S/2$ on average.
# The worst case is $L + S$ and does not involve $B$, so sweeping more often (smaller $S$) cuts it without any
# extra heartbeats. A sweep is one scan of the `active` list for the whole queue every $S$ seconds, so the cost is
# a little more Redis work per queue, not per job; shortening $L$ instead would force a shorter $B$ too (more
# renewals per job) to keep $L/B \ge 3$.
#
# *Grading:* 1 point for explaining both terms (uniform position of the crash between renewals; uniform wait for
# the sweep), 1 point for naming the sweep period with its cost.
# ### END SOLUTION
