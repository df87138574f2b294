# %% [markdown]
# # Where leases fail: freezes, lost heartbeats, blocked loops, outages, stale finishes and fencing
#
# A lease does not know whether a worker is alive. It knows whether the worker's **renewals arrive in time**.
# Anything that stops renewals without killing the worker can make the lease take a live worker's job: a
# stop-the-world pause (a long GC, `SIGSTOP`), a CPU-bound job blocking Node's event loop (the work goes on, the
# renewals do not), a network that drops renewals, or a connection outage. This notebook makes each of these
# happen, measures how often, compares with theory, and shows the **token check** that keeps the damage
# contained.

# %%
# %matplotlib inline

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from emqsim import (
    Fixed,
    LeasePolicy,
    Outage,
    RenewalRule,
    Scenario,
    TimeoutPolicy,
    Uniform,
    plots,
    simulate,
    standard,
)
from emqsim.stats import aggregate, summarize

pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", 80)
SEED = 20240  # every run below is reproducible: same seed, same run, bit for bit

# The summary fields the text below quotes, by short names (`field(row, "latency")`), and `say` for prose
# whose numbers come from this run: both in emqsim/lesson_widgets.py, written once for every lesson.
from emqsim import analytic
from emqsim.lesson_widgets import FIELDS, field, say  # noqa: E402, F401
from emqsim.presets import preset

# %% [markdown]
# ## The question
#
# A job holds a lease of 30 s, renewed every 10 s. Its worker freezes (a long GC pause) for 25 s at some moment,
# then resumes. Is its job taken away? What if, instead, nothing freezes but the network loses one renewal in
# five, at random, during a 5-minute job?

# %% [markdown]
# **Predict before you run.** Write your answer in the cell below *before* you read on or run the rest; the notebook puts your guess beside the result once the runs have answered it.

# %% tags=["predict:first"]
# Your predictions, before you run: True (always), False (never), "sometimes", or a probability from 0 to 1
freeze_25s_loses_the_job = None
loss_20_percent_loses_the_job = None

# %% [markdown]
# ## 1. A frozen worker
#
# `standard("frozen", freeze_for=45)`: the worker freezes 5 s into a 2-minute job and resumes 45 s later. While it
# is frozen it neither works nor renews. The lease is 30 s, renewed every 10 s.

# %%
frozen = simulate(standard("frozen", freeze_for=45.0), LeasePolicy(30, 10, 5), seed=SEED)
plots.timeline(frozen);

# %%
display(
    pd.DataFrame(frozen.attempts_table())[
        ["attempt", "worker", "taken_at", "reclaimed_at", "worker_state_at_reclaim", "finished_at", "finish_result",
         "work_done", "outcome"]
    ]
)
def times(n):
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


stale, fresh = frozen.attempts[0], frozen.attempts[1]
froze = next(e.time for e in frozen.worker_events if e.worker == stale.worker and e.kind == "freeze")
resumed = next(e.time for e in frozen.worker_events if e.worker == stale.worker and e.kind == "resume")
mine = [e for e in frozen.lock_events if e.token == stale.token]
last = [e for e in mine if e.kind in ("set", "renewed") and e.time <= froze][-1]
expired = next(e.time for e in mine if e.kind == "expired")
refused = next(e.time for e in mine if e.kind == "renew_failed")
say(
    "Step by step:\n\n"
    + (
        f"1. Worker {stale.worker} took the job at {stale.taken_at:.1f} s and froze (yellow) at {froze:.1f} s, "
        "before its first renewal: the lock it set at the take was the last one.\n"
        if last.kind == "set"
        else f"1. Worker {stale.worker} renewed its lock (black tick) at {last.time:.1f} s, {froze - last.time:.1f} s "
        f"before it froze (yellow) at {froze:.1f} s.\n"
    )
    + f"2. Frozen, it sent no more renewals; the lock expired at {expired:.1f} s, {expired - last.time:.1f} s after "
    "it was last set (the light blue band stops).\n"
    f"3. The sweep at {stale.reclaimed_at:.1f} s found the job without a lock and gave it to worker {fresh.worker} "
    "(orange cross: a live worker's job was taken, a **false reclaim**).\n"
    f"4. Worker {stale.worker} resumed at {resumed:.1f} s. Its first renewal, at {refused:.1f} s, was **refused** "
    "(orange x): BullMQ's `extendLock` only renews a lock that still holds the worker's own token, and this one "
    "is gone.\n"
    f"5. BullMQ does not stop the job when a renewal fails, so worker {stale.worker} went on working and finished "
    f"at {stale.finished_at:.1f} s. Its finish was **rejected** (pink square): `moveToFinished` checks the token "
    f"too and answers *{stale.finish_result}*. Only worker {fresh.worker}'s finish counts: the job ran "
    f"{times(len(frozen.attempts))}, but completed {times(sum(a.finish_result == 'accepted' for a in frozen.attempts))}."
)

# %% [markdown] tags=["reveal:first"]
# ## 2. How long a freeze can a lease survive?
#
# A freeze of `P` seconds that starts `u` seconds after the last renewal lapses the lock if and only if
# `u + P > L`. With `u` uniform on `[0, B]`:
#
# $$ P(\text{lapse}) = \mathrm{clip}\left(\frac{P - (L - B)}{B},\ 0,\ 1\right) $$
#
# so a 30 s lease renewed every 10 s survives every freeze shorter than 20 s and loses every one longer than 30 s.
# With the token-checked renewal every lapse becomes a false reclaim: the worker can never get its lock back.
#
# **What if the renewal re-created a missing lock?** Then the resumed worker would get its lock back, and the job
# is lost only if a sweep happens to look while the lock is missing: a window of `u + P - L` seconds, hit by a
# sweep of period `S` with probability `min(1, window / S)`. `emqsim` can model that variant
# (`RenewalRule.every(beat, recreate_missing=True)`); BullMQ does not do it, because by the time the worker resumes
# its job may already be running elsewhere.

# %%
L, B, S = 30.0, 10.0, 5.0
variants = {
    "token-checked renewal": LeasePolicy(L, B, S),
    "renewal re-creates lock": LeasePolicy(L, B, S, renewal=RenewalRule.every(B, recreate_missing=True)),
}
freezes = [0, 15, 20, 22, 24, 25, 26, 28, 30, 32, 35, 40]
rows = []
for P in freezes:
    scenario = standard("frozen", freeze_for=float(P), freeze_after=Uniform(5.0, 60.0))
    for label, policy in variants.items():
        summaries = [summarize(simulate(scenario, policy, seed=SEED, replication=r)) for r in range(16)]
        rows.append(aggregate(summaries, freeze=float(P), label=label))
rows_by_freeze = rows

grid = np.linspace(0, 40, 200)
theory = {
    "token-checked renewal": (grid, [analytic.freeze_false_reclaim_probability(L, B, S, p) for p in grid]),
    "renewal re-creates lock": (
        grid, [analytic.freeze_false_reclaim_probability(L, B, S, p, recreate_missing=True) for p in grid]
    ),
}
plots.freeze_curve(
    rows, theory=theory, marks={"L − B": L - B, "L": L}, legend_loc="upper left",
    title="A 30 s lease renewed every 10 s survives freezes under 20 s and loses every one over 30 s",
);

# %% [markdown]
# Both variants are safe below `L - B` and both lose the job for long freezes; re-creating the lock only narrows
# the window in between. The real fix is to keep pauses shorter than `L - B`, or choose a longer lease. (A
# CPU-bound job that blocks Node's event loop stops the renewals in the same way, though not the work: section 4.)
#
# ## 3. Lost heartbeats
#
# `standard("flaky-network", loss=..., outage_at=None)` drops each renewal with probability `p`, independently
# (nobody dies here, so every reclaim is a false one; `outage_at=None` leaves out the scenario's connection outage,
# which section 5 treats on its own). With a fixed-rate heartbeat, a lock lapses when `k = floor(L / B)` renewals in a row are
# lost: 3 for 30/10, 6 for 30/5. For a job that lives through `n` renewals, the chance of such a run is computed
# exactly by `analytic.run_probability(n, k, p)` (and, tick by tick as the engine runs, by
# `analytic.lost_renewal_lapse_probability`).
#
# First, what it looks like:

# %%
lossy = simulate(
    standard("flaky-network", loss=0.4, jobs=2, duration=240.0, workers=3, outage_at=None),
    LeasePolicy(30, 10, 5),
    seed=SEED,
)
plots.timeline(lossy, title="40% of renewals lost: the lease lapses under a live worker");


# %% [markdown]
# Lost renewals never reach Redis, so they leave no tick: the gaps between ticks on worker 0's lock are the lost
# ones. Now the rate, for the first run of each 300 s job:

# %% tags=["reveal:first"]
def first_run_false_reclaims(run):
    firsts = [a for a in run.attempts if a.attempt == 1]
    return sum(a.false_reclaim for a in firsts), len(firsts)


REPLICATIONS = 10
rows = []
for beat in (10.0, 5.0):
    k = analytic.losses_to_lapse(30.0, beat)
    for p in (0.1, 0.2, 0.3, 0.4):
        lost = total = 0
        for r in range(REPLICATIONS):
            scenario = standard("flaky-network", loss=p, outage_at=None)  # independent losses only (section 5: outages)
            run = simulate(scenario, LeasePolicy(30, beat, 5), seed=SEED, replication=r)
            f, n = first_run_false_reclaims(run)
            lost, total = lost + f, total + n
        rows.append(
            {
                "lease/beat": f"30/{beat:g}",
                "losses that lapse it (k)": k,
                "loss p": p,
                "simulated": lost / total,
                "jobs": total,
                "theory": round(analytic.lost_renewal_lapse_probability(30.0, beat, 300.0, p), 3),
                "run_probability(300/B, k, p)": round(analytic.run_probability(int(300 / beat), k, p), 3),
            }
        )
table = pd.DataFrame(rows)
table

# %%
at = {(r["lease/beat"], r["loss p"]): r for r in rows}
jobs = rows[0]["jobs"]
noise = 100 * 1.96 * (0.25 / jobs) ** 0.5
say(
    f"With a heartbeat every 10 s (`k = 3`), a network that loses 10% of renewals costs "
    f"{100 * at[('30/10', 0.1)]['simulated']:.0f}% of 5-minute jobs (theory {100 * at[('30/10', 0.1)]['theory']:.1f}%); "
    f"at 30% loss, {100 * at[('30/10', 0.3)]['simulated']:.0f}% (theory {100 * at[('30/10', 0.3)]['theory']:.0f}%). "
    f"Renewing every 5 s (`k = 6`) makes the same network far less harmful "
    f"({100 * at[('30/5', 0.3)]['simulated']:.0f}% at 30% loss), for twice the renewal traffic. "
    f"Each simulated fraction comes from {jobs} jobs, so expect noise of up to about {noise:.0f} percentage points."
)

# %% jupyter={"source_hidden": true} tags=["answer:first"]
from emqsim import lessons

freeze_rows = [r for r in rows_by_freeze if r["freeze"] == 25.0 and r["label"] == "token-checked renewal"]
freeze_p = analytic.freeze_false_reclaim_probability(30.0, 10.0, 5.0, 25.0)
loss_row = at[("30/10", 0.2)]
say(
    lessons.report(
        lessons.chance(
            "a 25 s freeze takes the job", "freeze_25s_loses_the_job", freeze_25s_loses_the_job, freeze_p,
            why=(
                f"the lock lapses iff the freeze outlasts what is left of the lease, u + 25 > 30 with u the time "
                f"since the last renewal (0 to 10 s): so it depends on when the freeze starts (simulated: "
                f"{field(freeze_rows[0], 'false_rate'):.2f} false reclaims per job over "
                f"{lessons.plural(freeze_rows[0]['replications'], 'run')})."
            ),
        ),
        lessons.chance(
            "20% of renewals lost, 5-minute job", "loss_20_percent_loses_the_job", loss_20_percent_loses_the_job,
            loss_row["theory"],
            why=(
                f"one lost renewal is harmless; the lock lapses only when {loss_row['losses that lapse it (k)']} in a "
                f"row are lost, and a 5-minute job gives that run of bad luck {loss_row['theory']:.0%} of the time "
                f"(simulated: {loss_row['simulated']:.0%} of {loss_row['jobs']} jobs)."
            ),
        ),
    )
)

# %% [markdown]
# ## Try it
#
# Every control re-runs one small simulation (two workers, one job) and redraws its timeline; the line above the figure says what happened and how long the redraw took. *(Without widgets, in a static viewer, you see the first run only.)*

# %%
from emqsim.lesson_widgets import explorer

explorer(column="slow-alive", rule="lease", lease=30, beat=10, freeze=25, job=120)

# %% [markdown]
# **What to look for.** with a 25 s freeze, whether the lock lapses depends on when the pause starts relative to the last renewal
# (it lapses when u + P > L, section 2): move the freeze between 15 s and 35 s and watch the orange cross appear.
# Set the freeze to 0 and the loss rate to 0.2: a lapse needs three renewals in a row lost (k = floor(L/B) = 3,
# section 3); a 5 s beat needs six. And a job that is taken from a live worker still completes once: the finish
# of the resumed worker is rejected (pink square).

# %% [markdown]
# ## 4. A blocked event loop: alive, working, and still reclaimed
#
# A freeze stops the work and the heartbeat together. The most common real cause of BullMQ's "job stalled more
# than allowable limit" is different: a CPU-bound job blocks Node's event loop. The job's own work goes on (it *is*
# the CPU-bound section), but the lock manager's timer cannot fire until the loop frees, so no renewal leaves.
# `standard("blocked-loop", block_for=45)`: the job blocks the loop 5 s into its 2 minutes, for 45 s; the lease is
# 30 s, renewed every 10 s.

# %% [markdown]
# **Predict before you look.** The worker never stops working, and nothing dies. Does the job finish once, twice,
# or never? Which finish counts?

# %% tags=["predict:blocked"]
# Your prediction:
blocked_runs_of_the_job = None  # how many times the job runs
blocked_finish_that_counts = None  # "the blocked worker's", "the other worker's", "both" or "neither"

# %% tags=["reveal:blocked"]
blocked = simulate(standard("blocked-loop", block_for=45.0), LeasePolicy(30, 10, 5), seed=SEED)
plots.timeline(blocked);

# %% tags=["reveal:blocked"]
attempts = pd.DataFrame(blocked.attempts_table())
display(attempts[["attempt", "worker", "taken_at", "reclaimed_at", "worker_state_at_reclaim", "finished_at",
                  "finish_result", "work_done", "outcome"]])
first, second = attempts.iloc[0], attempts.iloc[1]
say(
    f"Worker {first['worker']}'s job was taken back at {first['reclaimed_at']:.1f} s while the worker was "
    f"*{first['worker_state_at_reclaim']}* (alive, its event loop busy), and it went on working: it did "
    f"{first['work_done']:g} s of work and "
    f"finished at {first['finished_at']:.1f} s, but its finish was rejected (*{first['finish_result']}*). "
    f"Worker {second['worker']} ran the job a second time from {second['taken_at']:.1f} s, and only its finish "
    f"counts: the job ran {times(len(attempts))} and completed "
    f"{times(int((attempts['finish_result'] == 'accepted').sum()))} (`{plots.verdict(blocked).text}`)."
)

# %% jupyter={"source_hidden": true} tags=["answer:blocked"]
from emqsim import lessons

accepted = [a for a in blocked.attempts if a.finish_result == "accepted"]
blocked_worker = blocked.attempts[0].worker
counts = (
    "neither" if not accepted
    else "both" if len(accepted) > 1
    else "the blocked worker's" if accepted[0].worker == blocked_worker
    else "the other worker's"
)
say(
    lessons.report(
        lessons.count(
            "runs of the job", "blocked_runs_of_the_job", blocked_runs_of_the_job, len(blocked.attempts),
            word="run",
            why=(
                "the lock manager could not renew while the loop was blocked, so the lock expired and the sweep "
                f"gave the job to worker {blocked.attempts[-1].worker} while worker {blocked_worker} kept working on it."
                if len(blocked.attempts) > 1
                else "the lock outlived the block, so nobody else ran the job."
            ),
        ),
        lessons.choice(
            "the finish that counts", "blocked_finish_that_counts", blocked_finish_that_counts, counts,
            options={o: o for o in ("the blocked worker's", "the other worker's", "both", "neither")},
            why=(
                "`moveToFinished` accepts a finish only from the worker whose token is in the lock; the blocked "
                "worker's token was gone with its expired lock."
                if counts == "the other worker's"
                else f"the token check let {counts} through."
            ),
        ),
    )
)

# %% [markdown]
# **Predict before you read on.** BullMQ's defaults: a 30 s lock, and its lock manager's rule
# (`RenewalRule.bullmq(30)`: its timer ticks every quarter of the lock and renews a lock older than one tick).
# What is the longest CPU-bound section a job can have without being stalled?

# %% tags=["predict:safe-block"]
# Your prediction, in seconds:
longest_safe_block = None

# %% [markdown] tags=["reveal:safe-block"]
# The lease did what it is built to do, and that is the problem: from Redis's side a worker that sends no renewal
# looks exactly like a dead one. The rule is the freeze's: a block of `X` seconds starting `u` after the last
# renewal lapses the lock iff `u + X > L`, so with `u` uniform over one renewal period `B`,
# `analytic.block_lapse_probability` is `clip((X - (L - B)) / B, 0, 1)`, and `analytic.block_safe_limit` is the
# longest block that never lapses it, `L - B`.

# %%
bullmq = preset("bullmq")
safe = analytic.block_safe_limit(30.0, bullmq.renewal)
BLOCK_REPLICATIONS = 40
blocks = list(range(15, 33))
rows = []
for X in blocks:
    # The block starts 20..80 s into the job: after the job's first renewal, at a random point of the cycle.
    scenario = standard("blocked-loop", block_for=float(X), block_after=Uniform(20.0, 80.0))
    runs = [
        simulate(scenario, bullmq, seed=SEED, replication=r, record_locks=False) for r in range(BLOCK_REPLICATIONS)
    ]
    rows.append(
        {
            "block X (s)": X,
            "simulated lapse fraction": sum(any(a.false_reclaim for a in run.attempts) for run in runs) / len(runs),
            "block_lapse_probability": analytic.block_lapse_probability(30.0, bullmq.renewal, float(X)),
        }
    )
block_table = pd.DataFrame(rows)
fig, ax = plt.subplots(figsize=(7, 3.6))
ax.plot(block_table["block X (s)"], block_table["block_lapse_probability"], color=plots.OKABE_ITO["blue"],
        label="analytic.block_lapse_probability")
ax.plot(block_table["block X (s)"], block_table["simulated lapse fraction"], "o", color=plots.OKABE_ITO["orange"],
        label=f"simulated, {BLOCK_REPLICATIONS} runs per point")
ax.axvline(safe, color="grey", linestyle=":")
ax.set_xlabel("event loop blocked for X seconds")
ax.set_ylabel("fraction of jobs stalled")
ax.set_title("BullMQ's defaults (30 s lock): blocks longer than L - B stall the job", loc="left")
ax.legend(loc="upper left");

# %%
gap = (block_table["simulated lapse fraction"] - block_table["block_lapse_probability"]).abs()
never = block_table[block_table["simulated lapse fraction"] == 0]["block X (s)"].max()
always = block_table[block_table["simulated lapse fraction"] == 1]["block X (s)"].min()
noise = 100 * 1.96 * (0.25 / BLOCK_REPLICATIONS) ** 0.5
say(
    f"`block_safe_limit(30, RenewalRule.bullmq(30))` = {safe:.3f} s: with BullMQ's defaults a job may block "
    f"its event loop for up to about {safe:.1f} s. In the simulation no block up to {never} s stalled a job and "
    f"every block from {always} s on did; in between the simulated fraction stays within "
    f"{100 * gap.max():.0f} percentage points of the formula ({BLOCK_REPLICATIONS} runs per point: noise up to "
    f"about {noise:.0f} points)."
)

# %% jupyter={"source_hidden": true} tags=["answer:safe-block"]
from emqsim import lessons

tick = bullmq.renewal.tick_ms / 1000
say(
    lessons.report(
        lessons.number(
            "longest safe block, BullMQ's defaults", "longest_safe_block", longest_safe_block, safe,
            tolerance=0.5, digits=2,
            why=(
                f"a block is safe while the lock outlives it from its last renewal, and with BullMQ's rule that "
                f"renewal can be {30 - safe:.2f} s old when the block starts ("
                + (
                    "one tick of its timer, a quarter of the 30 s lock, not the 10 s beat of the lessons above"
                    if abs(30 - safe - tick) < 1e-9
                    else f"its timer ticks every {tick:g} s and renews only a lock older than one tick"
                )
                + f"): 30 - {30 - safe:.2f} = {safe:.2f} s."
            ),
        ),
    )
)

# %% [markdown]
# **The tuning answer.** A job that blocks for up to `X` seconds needs `L - B > X`, that is a lease of at least
# `X + B` (for BullMQ's rule, `B = L/4`, so `lockDuration > 4X/3`). Or take the block off the event loop: a
# sandboxed processor (a child process) or a worker thread keeps the lock manager's timer free, and yielding
# (`await` in the loop) lets it fire. Here is a 40 s block under BullMQ's rule with a 30, 45 and 60 s lock, once for
# a block anywhere in the first minute of the job and once for a block that starts after the job's first renewals:

# %%
TUNE_REPLICATIONS = 40
rows = []
for lease in (30.0, 45.0, 60.0):
    policy = preset("bullmq", lease=lease)
    for where, after in (("5..60 s into the job", Uniform(5.0, 60.0)), ("35..60 s into the job", Uniform(35.0, 60.0))):
        scenario = standard("blocked-loop", block_for=40.0, block_after=after)
        summaries = [
            summarize(simulate(scenario, policy, seed=SEED, replication=r, record_locks=False))
            for r in range(TUNE_REPLICATIONS)
        ]
        row = aggregate(summaries)
        rows.append(
            {
                "lock (s)": lease,
                "block starts": where,
                "block_safe_limit (s)": round(analytic.block_safe_limit(lease, policy.renewal), 3),
                "false reclaims": row["false_reclaims_total"],
                "duplicate executions": row["duplicate_executions_total"],
                "jobs": row["jobs_total"],
            }
        )
tuning = pd.DataFrame(rows)
tuning

# %%
at = {(r["lock (s)"], r["block starts"]): r for r in rows}
early, late = "5..60 s into the job", "35..60 s into the job"
tick = preset("bullmq", lease=60.0).renewal.tick_ms / 1000
say(
    f"A 40 s block costs a 30 s lock {at[(30.0, early)]['false reclaims']} false reclaims in "
    f"{at[(30.0, early)]['jobs']} jobs, and a 45 s lock {at[(45.0, early)]['false reclaims']}. "
    f"A 60 s lock (safe limit {at[(60.0, late)]['block_safe_limit (s)']:g} s) loses "
    f"{at[(60.0, late)]['false reclaims']} of {at[(60.0, late)]['jobs']} once the job has renewed, but "
    f"{at[(60.0, early)]['false reclaims']} when the block may start early: BullMQ renews a lock only when it is "
    f"older than one tick ({tick:g} s), checked once per tick, so the first renewal can come up to two ticks "
    "after the take, and a block that starts before it has only the take's lock to live on. "
    "The safe limit holds from the first renewal on; a CPU-bound section at the very start of a job "
    "(parsing its input, say) needs the extra margin."
)

# %% [markdown]
# ## 5. A connection outage is not a run of lost heartbeats
#
# Section 3 dropped renewals one at a time, independently. Real outages are correlated: the connection to Redis
# is gone for a while, for every command.
#
# **Predict before you run.** A 30 s lease renewed every 10 s survives two lost beats in a row (section 3). The
# connection is down for 20 s, 21 s into a job, which is two beats. Does the job survive?

# %% tags=["predict:outage"]
# Your prediction:
survives_a_20s_outage = None  # True or False

# %% [markdown] tags=["reveal:outage"]
# BullMQ's client (ioredis with `maxRetriesPerRequest: null`) does not drop the renewals: it queues them and
# resends them once it has reconnected, and it reconnects on a backoff (BullMQ's retry strategy:
# `max(min(e^n, 20000), 1000)` ms before attempt `n`). So the question is not how many beats were lost but
# **when the client is back**.

# %%
down = Outage(at=21.0, duration=20.0)
outage = Scenario(
    name="outage",
    workers=2,
    jobs=1,
    duration=Fixed(120.0),
    faults=(down,),
    phases="aligned",
)
outage_run = simulate(outage, LeasePolicy(30, 10, 5), seed=SEED)
plots.timeline(outage_run, title="A 20 s outage of every connection, 21 s into a job");

# %%
from emqsim.faults import reconnect_delay_ms

back = 21.0 + analytic.reconnect_time(20.0)
attempts_at: list[float] = []  # the client's reconnect attempts, seconds after the disconnect
n = 0
while not attempts_at or attempts_at[-1] < 20.0:
    n += 1
    attempts_at.append((attempts_at[-1] if attempts_at else 0.0) + reconnect_delay_ms(n) / 1000)
events = [e for e in outage_run.lock_events if e.job == "0" and e.token == outage_run.attempts[0].token]
expired = next(e.time for e in events if e.kind == "expired")
say(
    f"The last renewal before the outage kept the lock until {expired:.1f} s. The network was back at "
    f"{down.at + down.duration:g} s, but "
    f"the client's reconnect attempts come {', '.join(f'{x:g}' for x in attempts_at)} s after the disconnect, "
    f"so it was connected again only at {back:.1f} s (`reconnect_time(20) = {analytic.reconnect_time(20.0):g}`), "
    f"and its queued renewal came too late: `{plots.verdict(outage_run).text}`."
)

# %% jupyter={"source_hidden": true} tags=["answer:outage"]
from emqsim import lessons

survived = not any(a.false_reclaim for a in outage_run.attempts)
say(
    lessons.report(
        lessons.choice(
            "the job survives a 20 s outage", "survives_a_20s_outage", survives_a_20s_outage, survived,
            options={True: "survives", False: "taken from its live worker"},
            why=(
                f"the client is back only {analytic.reconnect_time(20.0):.1f} s after the disconnect: the lock, last "
                f"renewed before the outage, expired at {expired:.1f} s, and the queued renewal arrived at {back:.1f} s."
                if not survived
                else f"the client was back at {back:.1f} s, before the lock expired at {expired:.1f} s."
            ),
        ),
    )
)

# %% [markdown]
# So an outage of `D` seconds acts like a freeze of `R(D) = analytic.reconnect_time(D)`: the lock lapses iff
# `u + R(D) > L`, and `analytic.outage_lapse_probability` is the freeze formula at `R(D)`. Because the backoff grows,
# `R(D)` jumps: the table compares it with the naive count of lost beats, and checks the formula against runs of
# the same scenario with the outage starting at `OUTAGE_STARTS` moments spread evenly over one beat:

# %%
OUTAGE_STARTS = 20
k = analytic.losses_to_lapse(30.0, 10.0)
rows = []
for D in (2.0, 5.0, 7.0, 10.0, 15.0, 18.0, 19.0, 20.0, 30.0):
    lapsed = 0
    for i in range(OUTAGE_STARTS):
        start = 20.0 + 10.0 * (i + 0.5) / OUTAGE_STARTS
        run = simulate(outage.with_(faults=(Outage(at=start, duration=D),)), LeasePolicy(30, 10, 5), seed=SEED,
                       record_locks=False)
        lapsed += any(a.false_reclaim for a in run.attempts)
    rows.append(
        {
            "outage D (s)": D,
            "beats lost (naive)": int(D // 10),
            "naive: lapses": int(D // 10) >= k,
            "reconnect_time(D)": analytic.reconnect_time(D),
            "P(lapse) 30/10": analytic.outage_lapse_probability(30.0, 10.0, D),
            "simulated 30/10": lapsed / OUTAGE_STARTS,
            "P(lapse) BullMQ 30": analytic.outage_lapse_probability(30.0, RenewalRule.bullmq(30.0), D),
        }
    )
outage_table = pd.DataFrame(rows)
outage_table

# %%
by_outage = {r["outage D (s)"]: r for r in rows}
longest_safe = max(D for D, r in by_outage.items() if r["P(lapse) 30/10"] == 0)
say(
    f"Counting beats, an outage of {longest_safe:g} s loses {by_outage[longest_safe]['beats lost (naive)']} and one "
    f"of 20 s {by_outage[20.0]['beats lost (naive)']}, both fewer than the {k} that lapse a 30/10 lease. The "
    f"reconnect backoff tells another story: after the {longest_safe:g} s outage the client is back at "
    f"{by_outage[longest_safe]['reconnect_time(D)']:g} s, and the lease survives "
    f"(P(lapse) {by_outage[longest_safe]['P(lapse) 30/10']:g}, simulated {by_outage[longest_safe]['simulated 30/10']:g}); "
    f"after a 20 s outage it is back only at {by_outage[20.0]['reconnect_time(D)']:g} s, longer than the lease: "
    f"P(lapse) {by_outage[20.0]['P(lapse) 30/10']:g} for 30/10 and {by_outage[20.0]['P(lapse) BullMQ 30']:g} for BullMQ's "
    f"rule (simulated {by_outage[20.0]['simulated 30/10']:g}). Against that outage a shorter beat does not help (the "
    "reconnect alone outlasts the lease); only a lease longer than the reconnect time does."
)

# %% [markdown]
# ## 6. The token check and fencing
#
# When a live worker's job is taken, two workers run it. What stops both results from counting is the **token**:
# each take writes a fresh token into the lock, and `moveToFinished` only accepts a finish from the worker whose
# token is still there. The timeout reaper's usual design has no such check. `TimeoutPolicy(fenced=True)` adds
# one (the take sets a lock with no expiry; the reaper deletes it), so we can compare the three:

# %%
cases = {
    "timeout, no token check": (standard("slow-alive", horizon=3600.0), TimeoutPolicy(600, 5)),
    "timeout + token check": (standard("slow-alive", horizon=3600.0), TimeoutPolicy(600, 5, fenced=True)),
    "lease, frozen 45 s": (standard("frozen", freeze_for=45.0), LeasePolicy(30, 10, 5)),
}
rows = []
for label, (scenario, policy) in cases.items():
    run = simulate(scenario, policy, seed=SEED)
    s = summarize(run)
    stale = [a for a in run.attempts if a.reclaimed_at is not None or a.failed_at is not None]
    rows.append(
        {
            "case": label,
            "runs of the job": s.attempts,
            "finishes accepted": sum(a.finish_result == "accepted" for a in run.attempts),
            "finishes rejected": s.finishes_rejected,
            "job completed": s.completed_jobs == 1,
            "work by workers whose job was taken (s)": sum(a.work_done for a in stale),
        }
    )
pd.DataFrame(rows)

# %% [markdown]
# * **Timeout, no token check**: the stale finish is accepted, and the job **completes twice**.
# * **Timeout with a token check**: now the 15-minute job **never completes**. Every run is taken back at
#   10 minutes, before it can finish, and every late finish is rejected; the job goes round until the run stops
#   after an hour. The token makes the timeout's mistake safe, but cannot make it right: only a timeout longer
#   than the job, or a lease, lets it finish.
# * **Lease, frozen worker**: the stale finish is rejected and the job completes **once**.
#
# But look at the last column: the workers whose job was taken still did the work. If that work had effects
# outside the queue (a row written, an email sent, a card charged), a token check on the *queue* comes too late to
# stop them. That is Kleppmann's point about locks: a lease alone cannot stop a paused holder from acting on stale
# ownership. The fix is a **fencing token**: a number that grows with every take, passed along with each write,
# which the *downstream* system checks, refusing writes that carry an older number than one it has seen. The queue
# can supply the number (the job's attempt count `ats`); the systems the job writes to must check it.
#
# ## 7. When the port is wrong
#
# Two bugs that real ports have had, written as five-line policies. A wrong key prefix in the renewal call makes
# every renewal fail; a sweep that never runs leaves dead workers' jobs hostage.

# %%
from emqsim.protocol import SweepReply


class BrokenRenewal(LeasePolicy):
    """Every renewal fails (e.g. it renews `bull:{q}:<id>:lock` while the lock is `emq:{q}:<id>:lock`)."""

    def renew(self, queue, held, now_ms):
        return [job for job, _ in held]


class BrokenSweep(LeasePolicy):
    """The sweep never does anything."""

    def sweep(self, queue, now_ms):
        return SweepReply(skipped=True)


broken = {
    "broken renewal, slow-alive": simulate(standard("slow-alive", duration=300.0), BrokenRenewal(30, 10, 5), seed=SEED),
    "broken sweep, fast-dead": simulate(standard("fast-dead", horizon=600.0), BrokenSweep(30, 10, 5), seed=SEED),
}
fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), layout="constrained")
for ax, (label, run) in zip(axes, broken.items(), strict=False):
    plots.timeline(run, ax=ax, legend=False, title=f"{label}: {plots.verdict(run).text}")

# %% [markdown]
# With broken renewals every job longer than one lease is taken from its live worker (and, past `max_stalled`,
# failed). With a broken sweep the dead worker's job is never recovered. Both look fine on short jobs and healthy
# workers, which is why tests need the slow-alive and fast-dead cases.
#
# ## Summary
#
# | failure | what the lease does | mitigation |
# |---|---|---|
# | freeze longer than `L - B` | takes the live worker's job | keep pauses short (renew off the main loop), longer `L` |
# | `k = floor(L/B)` renewals lost in a row | takes the live worker's job | shorter `B` (larger `k`) |
# | event loop blocked longer than `L - B` | takes a live, *working* worker's job; it runs twice | lease > block + `B`, sandboxed processor or worker thread, yield |
# | connection outage of `D` s | lapses iff the reconnect `R(D)` outlasts the lease, not after `k` beats | lease longer than `R(D)` |
# | stale worker finishes late | token check rejects the finish | keep the token check in `moveToFinished` |
# | stale worker writes elsewhere | nothing: a lease cannot stop it | fencing token checked downstream |
# | renewal or sweep broken | false reclaims / hostages | test slow-alive and fast-dead cases |
