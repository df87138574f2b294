# %% [markdown]
# # Timeout or lease? How a job queue should notice a dead worker
#
# A job queue hands each job to exactly one worker. Workers fail: a process is killed, a container is evicted, a
# machine disappears. The job must then go back to the queue so that another worker can run it. Nobody tells the
# queue that the worker died, so the queue has to *decide* it on its own.
#
# There are two common ways to decide:
#
# * **A fixed timeout.** The queue notes when a worker took the job. A *reaper* looks at the jobs in progress every
#   few seconds and takes back any job that has been running longer than, say, 10 minutes.
# * **A lease renewed by a heartbeat.** When a worker takes a job it also gets a *lock* that expires on its own,
#   say after 30 seconds (in Redis: a key set with `PX 30000`). As long as the worker is alive it renews the lock,
#   say every 10 seconds (the *heartbeat*). A *sweep* takes back jobs whose lock has disappeared.
#
# This notebook runs both rules on two workers:
#
# | worker | what really happens |
# |---|---|
# | **slow but alive** | a healthy worker runs a 15-minute job |
# | **fast but dead** | a worker is killed 1 second into a 1-minute job |
#
# Everything runs in **emqsim**, a deterministic simulator of a Redis job queue that follows the protocol of
# BullMQ and of its Elixir port EchoMQ. The same seed always gives the same run, so every number below can be
# reproduced exactly.

# %%
# %matplotlib inline

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from emqsim import LeasePolicy, TimeoutPolicy, plots, simulate, standard
from emqsim.stats import summarize

pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", 80)
SEED = 20240  # every run below is reproducible: same seed, same run, bit for bit

# The summary fields the text below quotes, by short names (`field(row, "latency")`), and `say` for prose
# whose numbers come from this run: both in emqsim/lesson_widgets.py, written once for every lesson.
from emqsim.lesson_widgets import FIELDS, field, say  # noqa: E402, F401

# %% [markdown]
# ## The question
#
# Under a **10-minute timeout** (a reaper looks every 5 s), and under a **30 s lease renewed every 10 s** (a sweep
# every 5 s): is the slow-but-alive worker's job taken away from it? And how long after the crash is the
# fast-but-dead worker's job back in the queue, for another worker to run?

# %% [markdown]
# **Predict before you run.** Write your answer in the cell below *before* you read on or run the rest; the notebook puts your guess beside the result once the runs have answered it.

# %% tags=["predict:four"]
# Your predictions, before you run (replace None):
slow_alive_taken_by_timeout = None  # True: the queue takes the live worker's job; False: leaves it alone
slow_alive_taken_by_lease = None
fast_dead_wait_timeout = None  # seconds from the crash until the job is back in the queue, e.g. 42
fast_dead_wait_lease = None

# %% [markdown]
# ## The four runs
#
# * `standard("slow-alive")`: one 15-minute job on a worker that stays alive the whole time.
# * `standard("fast-dead")`: one 60-second job whose worker dies 1 s after starting it.
#
# In both scenarios a second worker sits idle, ready to pick up a job that comes back to the queue.
# We run each scenario under both rules:
#
# * `TimeoutPolicy(timeout=600, scan=5)`: every 5 s a reaper takes back any job older than 600 s.
# * `LeasePolicy(lease=30, beat=10, scan=5)`: a 30 s lock renewed every 10 s; every 5 s a sweep takes back the
#   jobs whose lock is gone.

# %% tags=["reveal:four"]
rules = {
    "timeout": TimeoutPolicy(timeout=600, scan=5),
    "lease": LeasePolicy(lease=30, beat=10, scan=5),
}
runs = {
    (kind, rule): simulate(standard(kind), policy, seed=SEED)
    for kind in ("slow-alive", "fast-dead")
    for rule, policy in rules.items()
}

table = []
for (kind, rule), run in runs.items():
    s = summarize(run)
    table.append(
        {
            "worker": kind,
            "rule": rule,
            "runs of the job": s.attempts,
            "false reclaims": s.false_reclaims,
            "finishes accepted": s.completed_jobs + s.duplicate_completions,
            "Redis requests": s.requests,
            "what happened": plots.verdict(run).text,
        }
    )
display(pd.DataFrame(table).style.hide(axis="index").set_properties(subset=["what happened"], **{"white-space": "normal"}))

# %% jupyter={"source_hidden": true} tags=["answer:four"]
from emqsim import lessons

slow = {rule: runs[("slow-alive", rule)] for rule in rules}
dead = {rule: runs[("fast-dead", rule)] for rule in rules}
taken = {rule: any(a.false_reclaim for a in run.attempts) for rule, run in slow.items()}
wait = {rule: summarize(run).detection_latencies[0] for rule, run in dead.items()}
first_taken = next((a.reclaimed_at for a in slow["timeout"].attempts if a.false_reclaim), None)
renewals = sum(e.kind == "renewed" for e in slow["lease"].lock_events)
died = dead["timeout"].attempts[0].died_at - dead["timeout"].attempts[0].taken_at
lease_first = dead["lease"].attempts[0]
lease_expired = next(e.time for e in dead["lease"].lock_events if e.token == lease_first.token and e.kind == "expired")
yes_no = {True: "taken back", False: "left alone"}
say(
    lessons.report(
        lessons.choice(
            "slow but alive, 10-minute timeout", "slow_alive_taken_by_timeout", slow_alive_taken_by_timeout,
            taken["timeout"], options=yes_no,
            why=(
                f"the reaper takes any job older than 600 s and cannot see that the worker is alive, so it took the "
                f"{slow['timeout'].attempts[0].work / 60:.0f}-minute job at {first_taken:.0f} s."
                if taken["timeout"]
                else "no run of the job grew older than the timeout before it finished."
            ),
        ),
        lessons.choice(
            "slow but alive, 30 s lease", "slow_alive_taken_by_lease", slow_alive_taken_by_lease, taken["lease"],
            options=yes_no,
            why=(
                f"the live worker renewed its lock every 10 s ({lessons.plural(renewals, 'renewal')} in all), so the "
                "lock never expired, however long the job ran."
                if not taken["lease"]
                else "a renewal came too late and the lock expired under the live worker."
            ),
        ),
        lessons.number(
            "fast but dead, 10-minute timeout: crash to job back", "fast_dead_wait_timeout",
            fast_dead_wait_timeout, wait["timeout"], tolerance=5.0,
            why=(
                f"the timeout counts from the take, not from the crash: the worker died {died:.0f} s into the job, so "
                f"the job waited the rest of the 600 s and then for the next sweep."
            ),
        ),
        lessons.number(
            "fast but dead, 30 s lease: crash to job back", "fast_dead_wait_lease", fast_dead_wait_lease,
            wait["lease"], tolerance=5.0,
            why=(
                f"nobody renewed the lock after the crash, so it expired {lease_expired - lease_first.died_at:.1f} s "
                f"after it (one lease after it was last set), and the sweep {lease_first.reclaimed_at - lease_expired:.1f}"
                " s later found the job without a lock."
            ),
        ),
    )
)

# %% [markdown]
# ## How to read a timeline
#
# `plots.timeline(run)` draws one horizontal lane per worker, time in seconds from left to right:
#
# * a **dark blue bar** is a job running on that worker; **grey hatching** means the job is still assigned to a
#   worker that has already died (nobody is working on it); **yellow hatching** means the worker is frozen;
# * the **light blue band** under a job is the life of its lock: it starts when the job is taken and ends when the
#   lock is released or **expires**; each small **black tick** on it is a heartbeat renewal that pushed the expiry
#   30 s further;
# * for the timeout rule the **orange band** is the timeout's clock: it runs from the take until the job leaves the
#   in-progress list or the 600 s are up;
# * thin **grey vertical lines** are sweeps (too many to draw become a rug at the top); a **dashed line** is a
#   sweep that took a job back;
# * a **green circle** marks a job taken back from a dead worker (right), an **orange cross** a job taken back from
#   a live worker (wrong); the **pink arrow** goes to the job's next run on another worker;
# * at the end of a job, a **white triangle** is a finish the queue accepted, a **pink diamond** a second
#   accepted finish of the same job (a duplicate), an **orange square** a late finish the queue rejected.

# %%
plots.timeline(runs[("fast-dead", "lease")]);

# %% [markdown]
# Worker 0 took job 0 and died 1 s later (black triangle; its lane turns grey). Nothing told the queue. But the
# lock that worker 0 set when it took the job was only good for 30 s, and nobody was left to renew it: the light
# blue band stops at its expiry. The sweeps kept looking at the job; the first sweep after the expiry (dashed line)
# found a job in progress **without a lock**, moved it back to the waiting list, and worker 1 took it at once
# (arrow) and finished it.
#
# Here is the same story as a table of *attempts* (one column per time a worker took the job):

# %%
columns = ["attempt", "worker", "taken_at", "died_at", "reclaimed_at", "worker_state_at_reclaim",
           "finish_applied_at", "finish_result", "outcome"]
dead_run = runs[("fast-dead", "lease")]
attempts = pd.DataFrame(dead_run.attempts_table())[columns]
attempts.index = [f"attempt {n}" for n in attempts.pop("attempt")]
display(attempts.T)  # one column per attempt: the table fits the page
first = dead_run.attempts[0]
expired = next(e.time for e in dead_run.lock_events if e.token == first.token and e.kind == "expired")
say(
    f"The lock expired at {expired:.1f} s, {expired - first.died_at:.1f} s after the crash; the sweep at "
    f"{first.reclaimed_at:.1f} s took the job back. Recovery took {first.detection_latency:.1f} s: one lease, "
    "less the time since the last renewal, plus the wait for the next sweep."
)

# %% [markdown]
# ## All four at once
#
# The static version of the same comparison. The panels in a row share their time axis, so lengths compare
# directly.

# %%
plots.two_columns(
    runs,
    title="A fixed timeout cannot tell slow from dead; a lease renewed by a heartbeat can",
);

# %% [markdown]
# ## Try it
#
# Every control re-runs one small simulation (two workers, one job) and redraws its timeline; the line above the figure says what happened and how long the redraw took. *(Without widgets, in a static viewer, you see the first run only.)*

# %%
from emqsim.lesson_widgets import explorer

explorer(column="slow-alive", rule="timeout", timeout=600, job=900)

# %% [markdown]
# **What to look for.** toggle the worker and the rule: the timeout takes the slow job back every 600 s (orange crosses) and leaves
# the dead worker's job waiting 600 s; the lease leaves the slow job alone and recovers the dead one after about
# one lease. Then shorten the job below the timeout, freeze the slow worker for longer than the lease, or raise
# the loss rate: each of these makes the lease take a live worker's job (notebook 03 measures how often).

# %% [markdown]
# ## What went wrong with the timeout
#
# **Slow but alive.** Just after 10 minutes the reaper took back a job whose worker was perfectly healthy, and
# worker 1 started it again from scratch. Both workers finished it, and the queue accepted *both* finishes: the timeout reaper's
# usual design (a reliable queue that just removes the job id from its in-progress list) has no way to tell a
# stale finish from a fresh one. The job ran twice and completed twice, with twice its side effects (two emails,
# two charges, two writes).
#
# **Fast but dead.** The job sat on a dead worker for 600 s, because the timeout only looks at the job's age, and
# the job was young.
#
# A timeout measures **how old a job is**, not **whether its worker is alive**. Whatever value you choose is wrong
# for somebody: shorter than your longest job, and it takes live jobs away; longer, and dead workers hold their jobs
# for that long.
#
# A lease measures liveness directly. A live worker keeps renewing, however long its job is, so a 15-minute job
# (or a 15-hour one) is never taken away. A dead worker stops renewing, so its lock is gone within `lease` seconds
# and its job is back within about `lease + scan`.
#
# ## Does the moment of the crash matter?
#
# For the timeout, yes: a worker that dies `d` seconds into a job holds it for about `timeout - d`. For the lease,
# no. Here a 10-minute job's worker dies at different moments:

# %%
moments = [1, 100, 200, 300, 400, 500, 590]
latency: dict[str, list[float]] = {"timeout 600 s": [], "lease 30 s, beat 10 s": []}
for d in moments:
    scenario = standard("fast-dead", die_after=float(d), duration=600.0)
    for label, policy in zip(latency, rules.values(), strict=False):
        run = simulate(scenario, policy, seed=SEED)
        latency[label].append(summarize(run).detection_latencies[0])

fig, ax = plt.subplots(figsize=(7, 3.6))
for (label, values), colour in zip(latency.items(), [plots.OKABE_ITO["orange"], plots.OKABE_ITO["blue"]], strict=False):
    ax.plot(moments, values, marker="o", color=colour, label=label)
ax.set_xlabel("worker dies this long into its 600 s job (s)")
ax.set_ylabel("crash → job back in the queue (s)")
ax.set_title("The timeout's delay depends on when the worker died; the lease's does not", loc="left")
ax.legend();

# %% [markdown]
# ## Summary
#
# * A fixed timeout confuses *slow* with *dead*: it takes live jobs away (duplicate work, duplicate completions)
#   and leaves dead workers' jobs waiting for up to the whole timeout.
# * A lease renewed by a heartbeat asks the question that matters, "is the worker still renewing?": live jobs are
#   never taken, dead ones come back after about one lease.
#
# Next: **02-tuning** shows how to choose the lease, the heartbeat and the sweep period, and what each costs;
# **03-where-leases-fail** shows the cases a lease gets wrong (frozen workers, lost heartbeats, blocked event
# loops, connection outages) and the token check that keeps them from doing damage; **04-real-systems** runs the
# defaults of BullMQ, Celery, SQS, Faktory, Oban and Kubernetes on the same workload.
