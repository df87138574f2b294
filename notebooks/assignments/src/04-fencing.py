# %% [markdown]
# # Assignment 4: stale finishes and fencing tokens
#
# **Expected time:** about 90 minutes. **Points:** 14 autograded + 4 graded by hand.
#
# Any detector that takes a job back from a worker it *believes* dead will sometimes be wrong: the worker was
# only paused (a long GC pause, a `SIGSTOP`) or its event loop was blocked. When it resumes, it carries on with a
# job that is no longer its own and reports it finished. If the queue accepts that **stale finish**, the job has
# completed twice.
#
# In this assignment one worker freezes for `FREEZE_FOR` seconds (your own value, between 70 and 90 s), 5 s into a
# 40-second job; a second worker is idle. You will
# see the stale finish under a fixed timeout, stop it with a **fencing token**, and show that a lease *without*
# the token check has the same problem (Kleppmann, *How to do distributed locking*, 2016). Then you follow the
# stale worker's result to a **downstream store** (a database the worker writes before it reports the finish),
# write the store's token check yourself, and see why a worker that checks its own lock first is not safe.
#
# Check your notebook with `python -m emqsim grade 04-fencing.ipynb`.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
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
    """One line per take of the job: who, when, and how it ended."""
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


# %% [markdown]
# ## Question 1 (2 points): the timeout's stale finish
#
# Run `FROZEN` under `TimeoutPolicy(timeout=60)` (no token check; that is the default) with `seed=SEED`, store the
# run in `unfenced_run`, and print it with `show_attempts`. Then set
#
# * `stale_worker`: the id of the worker whose completion was the duplicate one (`outcome == "duplicate_completion"`);
# * `stale_finish_at`: the time (s) at which Redis accepted that duplicate completion (`finish_applied_at`).

# %% nbgrader={"grade": false, "grade_id": "q1-timeout", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
unfenced_run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=SEED)
stale = [a for a in unfenced_run.attempts if a.outcome == "duplicate_completion"][0]
stale_worker, stale_finish_at = stale.worker, stale.finish_applied_at
### END SOLUTION
show_attempts(unfenced_run)
print(f"stale finish by worker {stale_worker} at {stale_finish_at} s")

# %% nbgrader={"grade": true, "grade_id": "q1-timeout-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q1-timeout-tests',
    ['unfenced_run', 'stale_worker', 'stale_finish_at'],
    r'''
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
''',
)

# %% [markdown]
# ## Question 2 (2 points): a fencing token stops it
#
# With `fenced=True` the queue gives each take a token (the lock's value) and accepts a finish only with the
# current token; the reaper deletes the token when it takes a job back. Run `FROZEN` under
# `TimeoutPolicy(timeout=60, fenced=True)` with `seed=SEED` into `fenced_run`, and set `rejection` to the error
# text Redis returned to the stale worker (`finish_result` of its attempt).

# %% nbgrader={"grade": false, "grade_id": "q2-fenced", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
fenced_run = simulate(FROZEN, TimeoutPolicy(timeout=60, fenced=True), seed=SEED)
rejection = [a for a in fenced_run.attempts if a.outcome == "finish_rejected"][0].finish_result
### END SOLUTION
show_attempts(fenced_run)
print(f"the stale worker was told: {rejection!r}")

# %% nbgrader={"grade": true, "grade_id": "q2-fenced-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q2-fenced-tests',
    ['fenced_run', 'rejection'],
    r'''
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
''',
)


# %% [markdown]
# ## Question 3 (2 points): a lease without the token check
#
# `LeasePolicy` checks the token on finish (BullMQ's `moveToFinished` does: "Missing lock for job ...").
# Write `LeaseWithoutToken`, a subclass of `LeasePolicy` whose `finish` skips that check: override
# `finish(self, queue, job_id, token, now_ms)` to return `queue.finish(job_id, token, check_token=False)`.
#
# Then run `FROZEN` with `seed=SEED` under `LeasePolicy(30, 10)` into `lease_run` and under
# `LeaseWithoutToken(30, 10)` into `bare_lease_run`. Finally set `lapsed_at` to the time at which the frozen
# worker's lock expired in `lease_run`: the `time` of the entry of `lease_run.lock_events` with
# `kind == "expired"`.

# %% nbgrader={"grade": false, "grade_id": "q3-lease", "locked": false, "schema_version": 3, "solution": true}
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

# %% nbgrader={"grade": true, "grade_id": "q3-lease-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q3-lease-tests',
    ['LeaseWithoutToken', 'lease_run', 'bare_lease_run', 'lapsed_at'],
    r'''
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
### BEGIN HIDDEN TESTS
other = standard("frozen", freeze_for=50.0, freeze_after=8.0, duration=30.0, workers=3)
for seed in (SEED + 1, SEED + 2):
    assert duplicates(simulate(other, LeaseWithoutToken(20, 5), seed=seed)) == 1, "held out: no stale finish"
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 4 (2 points): over many pauses
#
# One run is an anecdote. Replace the fixed pause with a random one, uniform between 0 and 90 s:
# `standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)`. For each of the
# four policies below, run replications `r = 0, ..., 39` with `seed=SEED` and count the share of runs with at
# least one duplicate completion. Store the shares in a dict `duplicate_share` with exactly these keys:
#
# * `"timeout"`: `TimeoutPolicy(timeout=60)`
# * `"timeout+token"`: `TimeoutPolicy(timeout=60, fenced=True)`
# * `"lease"`: `LeasePolicy(30, 10)`
# * `"lease without token"`: `LeaseWithoutToken(30, 10)`

# %% nbgrader={"grade": false, "grade_id": "q4-many", "locked": false, "schema_version": 3, "solution": true}
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

# %% nbgrader={"grade": true, "grade_id": "q4-many-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q4-many-tests',
    ['duplicate_share', 'LeaseWithoutToken'],
    r'''
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
### BEGIN HIDDEN TESTS
scenario = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
for name, policy in [("timeout", TimeoutPolicy(timeout=60)), ("lease without token", LeaseWithoutToken(30, 10))]:
    runs = [simulate(scenario, policy, seed=SEED, replication=r) for r in range(40)]
    expected = sum(duplicates(run) > 0 for run in runs) / 40
    assert abs(shares[name] - expected) < 1e-9, (name, shares[name], expected)
### END HIDDEN TESTS
''',
)


# %% [markdown]
# ## A downstream store
#
# The queue's token check protects the queue: it refuses the stale *finish*. But a worker usually does something
# with the job before it reports the finish: it writes the result somewhere else, a database row, a file, an
# account balance. In this model each worker that finishes its work **writes its result to a downstream store
# first**, at the moment its work ends (`finished_at`), and tells the queue after that. The store keeps one key
# per job: the result it holds and the token of the write that put it there.
#
# * **The token** of a write is the take's number, `Attempt.attempt`: the first take of a job carries 1, the take
#   after a reclaim 2, and so on (BullMQ counts takes in the job's `attemptsStarted`). A newer take always has a
#   larger token.
# * **The store's check** is a function `accept(last_token, token)`: `last_token` is the token of the last write
#   the store accepted for this job (`None` if it accepted none yet), `token` is the new write's; the store
#   keeps the new value only if `accept` returns `True`. `accept_all` is a store without any check.
# * **Corruption:** a job is *corrupted* when the store accepted a write whose token is *lower* than the token of
#   the value it replaced: a stale worker overwrote the newer take's result.
#
# `replay(run, accept)` feeds the writes of a run's workers, in time order, to `DownstreamStore(accept)` and
# returns a report: `writes`, `accepted`, `rejected`, `corrupted` (the number of corrupted jobs),
# `corrupted_jobs`, `final` (what the store holds at the end, as `(job, token, value)`) and `log` (every write
# and what the store did with it).

# %% [markdown]
# ## Question 5 (2 points): the store's check
#
# Write `accept(last_token, token)`, returning `True` or `False`: accept a write only if it is **newer** than
# everything the store accepted for the job. Think about the first write of a job, and about a write carrying
# the *same* token as the last one. Do not import a ready-made check: write it.

# %% nbgrader={"grade": false, "grade_id": "q5-accept", "locked": false, "schema_version": 3, "solution": true}
def accept(last_token, token):
    """True if the store should keep a write carrying `token`, when the last write it accepted for the same
    job carried `last_token` (None: it accepted none yet)."""
    ### BEGIN SOLUTION
    return last_token is None or token > last_token
    ### END SOLUTION


store = DownstreamStore(accept)
for token, value in [(1, "take 1"), (2, "take 2"), (1, "take 1, late")]:
    print(f"write {value!r} with token {token}: {'accepted' if store.write('job', token, value, 0.0) else 'rejected'}")
print("the store holds", store.values["job"])

# %% nbgrader={"grade": true, "grade_id": "q5-accept-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q5-accept-tests',
    ['accept'],
    r'''
from emqsim.grading import written_in_notebook

written_in_notebook("accept", forbidden=("fenced", "emqsim.fencing"))
assert callable(accept), "accept must be a function you define: def accept(last_token, token)"
for last, token, expected in [(None, 1, True), (1, 2, True), (2, 1, False)]:
    got = accept(last, token)
    assert type(got) is bool, f"accept({last}, {token}) must return True or False, not {got!r}"
    assert got == expected, f"accept({last}, {token}) should be {expected}"
### BEGIN HIDDEN TESTS
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
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 6 (2 points): corruption, with and without your check
#
# Take the random pauses of question 4 (uniform between 0 and 90 s), 40 replications `r = 0, ..., 39` with
# `seed=SEED`, under `TimeoutPolicy(timeout=60, fenced=True)`: the queue itself refuses every stale finish.
# Replay each run through a store without the check (`accept_all`) and through a store with yours (`accept`), and
# set
#
# * `corrupted_without`: the total number of corrupted jobs over the 40 runs without the check;
# * `corrupted_with`: the same with your check;
# * `corrupted_runs`: the sorted list of replication numbers `r` whose run has a corrupted job without the check.

# %% nbgrader={"grade": false, "grade_id": "q6-corruption", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
random_pause = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
runs = [simulate(random_pause, TimeoutPolicy(timeout=60, fenced=True), seed=SEED, replication=r) for r in range(40)]
corrupted_without = sum(replay(run, accept_all).corrupted for run in runs)
corrupted_with = sum(replay(run, accept).corrupted for run in runs)
corrupted_runs = [r for r, run in enumerate(runs) if replay(run, accept_all).corrupted > 0]
### END SOLUTION
print(f"corrupted jobs: {corrupted_without} without the store's check, {corrupted_with} with it")
print(f"runs with a corrupted job: {corrupted_runs}")

# %% nbgrader={"grade": true, "grade_id": "q6-corruption-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q6-corruption-tests',
    ['accept', 'corrupted_without', 'corrupted_with', 'corrupted_runs'],
    r'''
from emqsim.grading import as_number

without, with_ = as_number(corrupted_without, "corrupted_without"), as_number(corrupted_with, "corrupted_with")
assert with_ == 0, "with the store's check no job should be corrupted"
assert without > 0, "without the check some stale writes overwrite newer results"
assert type(corrupted_runs) is list and all(type(r) is int for r in corrupted_runs), "corrupted_runs: a list of ints"
assert corrupted_runs == sorted(set(corrupted_runs)) and len(corrupted_runs) <= without
### BEGIN HIDDEN TESTS
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
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 7 (2 points): check, then act
#
# Could the worker protect the store itself, by checking that it still holds the job's lock (a `GET` of the
# lock key) just before it writes? `replay(run, accept, check_gap=CHECK_GAP)` models such a worker: it checks its
# lock `CHECK_GAP` seconds of its own running time before its write, and skips the write if the lock is no
# longer its own. `report.checks` lists every write with `checked_at` (when the worker checked), `lock_ok` (what
# the check said) and `at` (when it wrote).
#
# `RACE` freezes the worker 39 s into a 40-second job, between its lock check and its write. Run `RACE` under
# `LeasePolicy(30, 10)` with `seed=SEED` into `race_run`, replay it with `check_gap=CHECK_GAP` without the
# store's check and with yours, and set `race_corrupted_without` and `race_corrupted_with` (the reports'
# `corrupted`), and `stale_check_at`, `stale_write_at`: when the worker of take 1 checked its lock and when it
# wrote. The cell then draws the run's timeline.

# %% nbgrader={"grade": false, "grade_id": "q7-race", "locked": false, "schema_version": 3, "solution": true}
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

# %% nbgrader={"grade": true, "grade_id": "q7-race-tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from emqsim.grading import check_answers as _check_answers

_check_answers(
    '04-fencing.ipynb',
    'q7-race-tests',
    ['accept', 'race_run', 'race_corrupted_without', 'race_corrupted_with', 'stale_check_at', 'stale_write_at'],
    r'''
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
### BEGIN HIDDEN TESTS
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
### END HIDDEN TESTS
''',
)

# %% [markdown]
# ## Question 8 (4 points, graded by hand)
#
# Explain, in your own words (about 150 words), **why a lease alone is not enough when a worker can freeze**.
# Your answer should cover: what the frozen worker knows when it resumes; why checking "do I still hold the
# lease?" just before finishing does not fix it; what the fencing token adds and *where* it must be checked; and
# what the token does not protect (think of side effects outside the queue).

# %% [markdown] nbgrader={"grade": true, "grade_id": "q8-explain", "locked": false, "points": 4, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# *Model answer.* A frozen process does not experience the pause: when it resumes, its next instruction runs as
# if no time had passed, so it still believes it holds the lease even though the lease expired and the job now
# belongs to another worker. The lease bounds how long a *dead* holder blocks the job; it cannot stop a *live*
# holder that has silently lost it from acting. Checking the lease first does not help: the pause can happen
# between the check and the finish (or the write), and the check's answer is stale by then; no client-side
# clock or check closes that window. A fencing token is a number that increases with every grant (here: a new
# token per take); the resource that receives the action must compare it with the newest token it has seen and
# refuse older ones. The check must happen at the store, atomically with the write (BullMQ's `moveToFinished`
# script), not in the worker. The token protects only what checks it: the queue's completion here. Side effects
# the stale worker already made elsewhere (an e-mail sent, a payment, a row written to a database that ignores
# the token) still happen twice, so those need idempotent operations or must check the token too.
#
# *Grading (4 points):* 1: the resumed worker does not know it lost the lease (no notion of elapsed time);
# 1: check-then-act race (a pause between the check and the action); 1: monotonic token verified by the store,
# atomically with the write; 1: limits: external side effects must check the token or be idempotent.
# ### END SOLUTION
