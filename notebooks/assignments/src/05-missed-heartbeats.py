# %% [markdown]
# # Assignment 5: missed heartbeats and the Redis request budget
#
# **Expected time:** about 60 minutes. **Points:** 7 autograded + 2 graded by hand.
#
# A heartbeat that never reaches Redis (a dropped packet, a timed-out request) does not renew the lock. One lost
# renewal is harmless while the lease has time left; a **run** of lost renewals lapses the lock, and the reaper
# takes the job from a worker that is alive: a **false reclaim**. Renewing more often makes a run of losses less
# likely to matter, but every renewal is a request to Redis, and Redis has a budget.
#
# You will count the lost renewals that lapse a lease, compute how likely a job is to meet such a run, and write
# a function that chooses the lease and the heartbeat for a loss rate and a request budget. The grader runs it
# on **loss rates you do not see**.
#
# Check your notebook with `python -m emqsim grade 05-missed-heartbeats.ipynb` (save it first: the checks read the
# saved file).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import math

import numpy as np

from emqsim import LeasePolicy, simulate, standard
from emqsim.grading import student_seed
from emqsim.stats import aggregate, summarize

SEED = student_seed("05-missed-heartbeats")  # your own seed
JOB_SECONDS = 300.0  # every job runs 5 minutes
TARGET = 0.01  # at most 1% of jobs may lose their lease


def flaky(loss, jobs=12):
    """Four live workers, `jobs` 5-minute jobs; each renewal is lost with probability `loss`, independently
    (`outage_at=None`: without the scenario's connection outage, which is not a run of independent losses)."""
    return standard("flaky-network", loss=loss, jobs=jobs, duration=JOB_SECONDS, workers=4, outage_at=None)


def measure(lease, beat, loss, replications=10, seed=SEED):
    """Simulate `replications` runs of `flaky(loss)` under a lease renewed every `beat` s; one table row."""
    policy = LeasePolicy(lease, beat, 5.0)
    runs = [simulate(flaky(loss), policy, seed=seed, replication=r, record_locks=False) for r in range(replications)]
    return aggregate([summarize(run) for run in runs])


# %% [markdown]
# ## Question 1 (2 points): how many lost renewals lapse a lease?
#
# A worker renews every $B$ seconds; each successful renewal sets the lock's time-to-live back to $L$. After a
# success, $k$ lost renewals in a row put the next successful renewal $(k + 1) B$ after it; the lock is still
# there if $(k+1) B \le L$ (a renewal that arrives at the very millisecond of the expiry still finds
# the lock), so with $L = 30$, $B = 10$ two losses are survived and the **third** lapses it.
#
# Write `losses_to_lapse(lease, beat)`: the fewest consecutive lost renewals that lapse the lock.

# %% nbgrader={"grade": false, "grade_id": "q1-losses", "locked": false, "schema_version": 3, "solution": true}
def losses_to_lapse(lease, beat):
    """The fewest consecutive lost renewals that lapse a lease of `lease` s renewed every `beat` s."""
    ### BEGIN SOLUTION
    return math.floor(lease / beat)
    ### END SOLUTION


losses_to_lapse(30.0, 10.0)

# %% nbgrader={"grade": true, "grade_id": "q1-losses-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '05-missed-heartbeats.ipynb',
    'q1-losses-tests',
    ['losses_to_lapse'],
    r'''
import math
from emqsim import analytic
from emqsim.grading import as_number
from emqsim.grading import written_in_notebook

written_in_notebook("losses_to_lapse", forbidden=("analytic", "emqsim.analytic"))
assert as_number(losses_to_lapse(30.0, 10.0), "losses_to_lapse(30, 10)") == 3, "30/10: the third loss lapses it"
assert as_number(losses_to_lapse(30.0, 5.0), "losses_to_lapse(30, 5)") == 6
### BEGIN HIDDEN TESTS
for lease, beat in [(25.0, 10.0), (45.0, 15.0), (31.0, 10.0), (20.0, 3.0), (8.0, 2.0), (60.0, 7.0)]:
    got = as_number(losses_to_lapse(lease, beat), "losses_to_lapse")
    assert got == analytic.losses_to_lapse(lease, beat), (lease, beat, got)
### END HIDDEN TESTS
''',
)


# %% [markdown]
# ## Question 2 (2 points): how likely is a job to meet such a run?
#
# A 5-minute job sends $n = \lfloor 300 / B \rfloor$ renewals; each is lost independently with probability
# $p$. Write `lapse_probability(renewals, k, p)`: the probability that among `renewals` renewals there is at least
# one run of `k` or more consecutive losses. (A dynamic programme over the length of the current run of losses
# is exact and fast; so is a recursion. Do not simulate: the grader compares with the exact value.)

# %% nbgrader={"grade": false, "grade_id": "q2-runs", "locked": false, "schema_version": 3, "solution": true}
def lapse_probability(renewals, k, p):
    """P(at least one run of >= k consecutive losses among `renewals` independent renewals)."""
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

# %% nbgrader={"grade": true, "grade_id": "q2-runs-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '05-missed-heartbeats.ipynb',
    'q2-runs-tests',
    ['lapse_probability'],
    r'''
import math
from emqsim import analytic
from emqsim.grading import as_number
from emqsim.grading import written_in_notebook

written_in_notebook("lapse_probability", forbidden=("analytic", "emqsim.analytic", "run_probability"))
got = as_number(lapse_probability(30, 3, 0.1), "lapse_probability(30, 3, 0.1)")
assert math.isclose(got, analytic.run_probability(30, 3, 0.1), rel_tol=1e-6), f"{got} is not the exact value"
assert as_number(lapse_probability(2, 3, 0.5), "p") == 0.0, "two renewals cannot hold a run of three"
### BEGIN HIDDEN TESTS
for n, k, p in [(60, 6, 0.2), (150, 4, 0.05), (10, 1, 0.3), (75, 9, 0.4), (30, 3, 0.0)]:
    got = as_number(lapse_probability(n, k, p), "lapse_probability")
    assert math.isclose(got, analytic.run_probability(n, k, p), rel_tol=1e-6, abs_tol=1e-12), (n, k, p, got)
### END HIDDEN TESTS
''',
)


# %% [markdown]
# ## Question 3 (3 points): choose the lease and the heartbeat
#
# Each worker sends one renewal request per heartbeat, so a budget of `max_requests` renewal requests per second
# per worker means $B \ge 1 / $ `max_requests`. Write `choose(loss, max_requests)` returning `(lease, beat)`:
#
# * `beat` within the budget;
# * the probability that a 5-minute job meets a run of `losses_to_lapse(lease, beat)` lost renewals (your
#   `lapse_probability` with $n = \lfloor 300 / B \rfloor$) is at most `TARGET`;
# * the **shortest** such lease (a dead worker's job waits about one lease), within 10%.
#
# The grader calls `choose` for loss rates and budgets you do not see, checks the rules above with its own exact
# formulas, and simulates your choice on a lossy network. Which beat is best: the shortest the budget allows, or a
# longer one?

# %% nbgrader={"grade": false, "grade_id": "q3-choose", "locked": false, "schema_version": 3, "solution": true}
def choose(loss, max_requests):
    """(lease, beat) in seconds: the shortest lease whose heartbeat fits the request budget and whose
    5-minute jobs lose their lease with probability at most TARGET when renewals are lost at rate `loss`."""
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

# %% nbgrader={"grade": true, "grade_id": "q3-choose-tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '05-missed-heartbeats.ipynb',
    'q3-choose-tests',
    ['choose'],
    r'''
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
### BEGIN HIDDEN TESTS
def best_lease(loss, budget):
    beat = 1.0 / budget
    n = math.floor(300.0 / beat)
    return next(k for k in range(1, 400) if analytic.run_probability(n, k, loss) <= 0.01) * beat


for loss, budget in [(0.1, 0.2), (0.3, 0.2), (0.05, 0.5), (0.25, 0.25), (0.4, 0.2), (0.15, 1.0)]:
    check(loss, budget)
    lease = as_number(choose(loss, budget)[0], "lease")
    assert lease <= 1.1 * best_lease(loss, budget) + 1e-9, f"loss {loss}: lease {lease} s is longer than needed"
check(0.35, 0.25, simulate_it=True)
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 4 (2 points, graded by hand)
#
# (a) Why is the number of losses that lapse a lease $\lfloor L/B \rfloor$, whatever the loss rate, and why does
# a **shorter beat with the same lease** protect a job better even though it sends more renewals that can be lost?
# (b) Your budget is halved. What happens to the lease `choose` returns, and to the detection latency of a dead
# worker?

# %% [markdown] nbgrader={"grade": true, "grade_id": "q4-explain", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# *Model answer.* (a) After a successful renewal the lock lives $L$ more seconds; the next renewals are sent $B,
# 2B, \dots$ later, so the lock survives while some renewal arrives by time $L$: $k$ losses push the next success
# to $(k+1)B$, which must be at most $L$ (the renewal at exactly $L$ still finds the lock), so the first $k$ that
# lapses is $\lfloor L/B \rfloor$: a property of the timer, not of the network. With the lease fixed, a shorter
# beat raises $k = \lfloor L/B \rfloor$; the chance of a run of $k$ losses falls like $p^k$ while the number of
# renewals per job (chances to start a run) only grows like $1/B$, so the run probability falls. (b) A halved
# budget doubles the shortest allowed beat; each renewal covers twice the time, so fewer consecutive losses fit in
# a lease of the same length and `choose` needs a longer lease (roughly twice as long for the same $k$, a bit
# less since a job sends fewer renewals). A dead worker's job waits about $L - B/2 + S/2$, so detection gets
# slower by about the added lease.
#
# *Grading:* 1 point for (a) (timer argument; p^k against 1/B), 1 point for (b) (longer lease, slower detection).
# ### END SOLUTION
