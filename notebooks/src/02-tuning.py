# %% [markdown]
# # Tuning a lease: lease, heartbeat and sweep
#
# A lease-based queue has three knobs, all in seconds:
#
# * the **lease** `L`: how long a lock lives without renewal;
# * the **heartbeat period** `B`: how often a live worker renews its locks (one batched round trip per worker per
#   beat, however many jobs it holds);
# * the **sweep period** `S`: how often the queue looks for jobs whose lock is gone.
#
# They trade three things against each other: how long a dead worker's job waits (**detection latency**), how
# often a live worker's job is taken by mistake (**false reclaims**), and how much work Redis does (**requests
# per second**).

# %%
# %matplotlib inline
import warnings

import pandas as pd
from IPython.display import display

from emqsim import LeasePolicy, LeaseWarning, LogNormal, TimeoutPolicy, plots, simulate, standard
from emqsim.stats import aggregate, summarize, to_frame

pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", 80)
SEED = 20240  # every run below is reproducible: same seed, same run, bit for bit

# The summary fields the text below quotes, by short names (`field(row, "latency")`), and `say` for prose
# whose numbers come from this run: both in emqsim/lesson_widgets.py, written once for every lesson.
from emqsim import analytic
from emqsim.figures import crash_scenario
from emqsim.lesson_widgets import FIELDS, field, say  # noqa: E402, F401

# %% [markdown]
# ## The question
#
# A dead worker's job waits about one lease (30 s here, renewed every 10 s, a sweep every 5 s). If you halve the
# heartbeat period (renew every 5 s), how does the wait for a crashed worker's job change, on average: how many
# seconds sooner is it back in the queue (a negative number if later)? And what does it cost: how many times as
# many Redis requests per second as before?

# %% [markdown]
# **Predict before you run.** Write your answer in the cell below *before* you read on or run the rest; the notebook puts your guess beside the result once the runs have answered it.

# %% tags=["predict:beat"]
# Your predictions, before you run (replace None):
seconds_sooner = None  # seconds sooner (negative: later), on average, with a 5 s heartbeat instead of 10 s
requests_factor = None  # Redis requests per second with the 5 s heartbeat / with the 10 s one, e.g. 1.5


# %% [markdown] tags=["reveal:beat"]
# ### The closed form
#
# Suppose a worker crashes at a random moment. Its last renewal was `u` seconds earlier, `u` uniform between 0 and
# `B`. The lock vanishes `L - u` after the crash, and the next sweep finds it after a further wait uniform between
# 0 and `S`. So the detection latency `T_D` is
#
# $$ E[T_D] = L - \frac{B}{2} + \frac{S}{2}, \qquad L - B \le T_D \le L + S. $$
#
# The module `emqsim.analytic` has the exact version for this simulator (millisecond clock, network round trips,
# the two-phase sweep, the worker that sweeps dying), which reduces to this formula when those details are zero.

# %%
def basic_mean(L, B, S):
    return L - B / 2 + S / 2


# %% [markdown]
# ## 1. Simulation against the closed form
#
# `crash_scenario()`: the first run of every job dies at a random moment between 0 and 50 s into it, and a
# replacement worker starts a second later. Each job gives one detection-latency sample; the replication (one
# run) is the unit of the confidence intervals.

# %% tags=["reveal:beat"]
settings = [(10, 3, 2), (20, 5, 5), (30, 10, 5), (30, 5, 5), (60, 20, 5), (30, 10, 15)]
scenario = crash_scenario()
REPLICATIONS = 20
say(
    f"{scenario.workers} workers and {scenario.jobs} jobs of {scenario.duration.mean():g} s per run, "
    f"{REPLICATIONS} runs per setting: {scenario.jobs * REPLICATIONS} crashes per setting."
)
rows, samples, stats_rows = [], {}, []
for L, B, S in settings:
    summaries = [
        summarize(simulate(scenario, LeasePolicy(L, B, S), seed=SEED, replication=r)) for r in range(REPLICATIONS)
    ]
    row = aggregate(summaries)
    stats_rows.append((row, analytic.lease_detection(L, B, S).mean, basic_mean(L, B, S)))
    exact = analytic.lease_detection(L, B, S)
    rows.append(
        {
            "lease": L, "beat": B, "scan": S,
            "simulated mean": round(field(row, "latency"), 2),
            "95% CI": [round(x, 2) for x in field(row, "latency_ci")],
            "L - B/2 + S/2": basic_mean(L, B, S),
            "analytic mean": round(exact.mean, 2),
            "simulated min..max": f"{field(row, 'latency_min'):.1f}..{field(row, 'latency_max'):.1f}",
            "analytic range": f"{exact.lo:.1f}..{exact.hi:.1f}",
        }
    )
    samples[f"lease {L}, beat {B}, sweep {S}"] = [x for s in summaries for x in s.detection_latencies]
pd.DataFrame(rows)

# %%
above = sum(field(row, "latency") > closed for row, _, closed in stats_rows)
largest = max(abs(field(row, "latency") - closed) / closed for row, _, closed in stats_rows)
covered = sum(field(row, "latency_ci")[0] <= exact <= field(row, "latency_ci")[1] for row, exact, _ in stats_rows)
say(
    f"The simulated means sit close to the closed form: {above} of {len(stats_rows)} above it, "
    f"{len(stats_rows) - above} below, at most {100 * largest:.1f}% away. The exact analytic mean lies inside "
    f"the 95% interval for {covered} of {len(stats_rows)} settings."
)

# %% jupyter={"source_hidden": true} tags=["answer:beat"]
from emqsim import lessons

row_of = {setting: row for setting, (row, _, _) in zip(settings, stats_rows, strict=False)}
beat10, beat5 = row_of[(30, 10, 5)], row_of[(30, 5, 5)]
saved = field(beat10, "latency") - field(beat5, "latency")
rate10, rate5 = beat10["redis_requests_per_s"], beat5["redis_requests_per_s"]
factor = rate5 / rate10
say(
    lessons.report(
        lessons.number(
            "seconds sooner with a 5 s beat", "seconds_sooner", seconds_sooner, saved, tolerance=0.5,
            result=f"{saved:.1f} s (closed form {basic_mean(30, 10, 5) - basic_mean(30, 5, 5):g} s)",
            why=(
                f"the last renewal before a crash is on average half a beat old ({10 / 2:g} s with the 10 s beat, "
                f"{5 / 2:g} s with the 5 s one), and the lock lives one lease from it: "
                + (
                    f"a shorter beat leaves a fresher lock behind, so the job comes back {-saved:.1f} s *later*, "
                    "not sooner; only a shorter lease brings it back sooner."
                    if saved < 0
                    else f"a shorter beat brings it back {saved:.1f} s sooner."
                )
            ),
        ),
        lessons.number(
            "Redis requests per second, 5 s beat / 10 s beat", "requests_factor", requests_factor, factor,
            unit="", digits=2, tolerance=0.05, result=f"{factor:.2f} ({rate10:.2f} → {rate5:.2f} requests/s)",
            why=(
                "the renewals double, and they are nearly all of the traffic."
                if factor > 1.95
                else "the renewals double, but they are only part of the traffic: every worker also sweeps every "
                f"5 s and takes and finishes its jobs, so the total grows {factor:.2f} times, not 2."
            ),
        ),
    )
)

# %% [markdown]
# Two details separate the simulator from the basic formula (`analytic.lease_detection` includes both):
#
# * the lock is also set when the job is *taken*, so a crash early in a job finds a fresher lock than a random
#   moment would: slightly longer latencies;
# * the sweep is run by the workers themselves, one at a time (a `stalled-check` key rate-limits it, as in
#   BullMQ). If the worker that was sweeping is the one that dies, the next sweep comes from another worker, up to
#   one more `S` later. That is why `analytic.lease_detection` allows up to about `L + 2S`.
#
# The whole distributions, with the basic model's CDF dotted over them:

# %%
from emqsim.figures import lease_latency_cdf

show = ["lease 10, beat 3, sweep 2", "lease 30, beat 10, sweep 5", "lease 60, beat 20, sweep 5"]
bounds, means, theory = {}, {}, {}
for label in show:
    L, B, S = (float(x.split()[-1]) for x in label.split(","))
    exact = analytic.lease_detection(L, B, S)
    bounds[label], means[label], theory[label] = (exact.lo, exact.hi), exact.mean, lease_latency_cdf(L, B, S)
plots.latency_cdf(
    {k: samples[k] for k in show}, bounds=bounds, means=means, theory=theory, legend_loc="outside",
    title="Detection latency is about one lease: the heartbeat and the sweep only shift it by B/2 and S/2",
);

# %% [markdown]
# ## 2. The sweep period and the two-phase sweep
#
# BullMQ's sweep works in two phases: each pass first moves back the jobs that were *marked* at the previous pass
# and whose lock is now gone, then marks every job in progress. A job is therefore recovered only if a sweep marked
# it *before* its lock vanished and a later sweep finds the lock gone. When `S` is short compared with the lease,
# that changes nothing. When `S` approaches `L` (BullMQ's defaults: lock 30 s, stalled interval 30 s) it can add up
# to one more `S`.

# %%
rows = []
for S in (1, 5, 15, 30):
    for two_phase in (False, True):
        policy = LeasePolicy(30, 10, S, two_phase=two_phase)
        summaries = [summarize(simulate(scenario, policy, seed=SEED, replication=r)) for r in range(REPLICATIONS)]
        row = aggregate(summaries)
        rows.append(
            {
                "scan S": S,
                "sweep": "two-phase" if two_phase else "single pass",
                "simulated mean": round(row["detection_latency_mean_s"], 1),
                "L - B/2 + S/2": basic_mean(30, 10, S),
                "analytic mean": round(analytic.lease_detection(30, 10, S, two_phase=two_phase).mean, 1),
                "simulated max": round(row["detection_latency_pooled_max_s"], 1),
            }
        )
sweep_table = pd.DataFrame(rows)
display(sweep_table)
by = {(r["scan S"], r["sweep"]): r for r in rows}
short = max(abs(by[(S, "two-phase")]["simulated mean"] - by[(S, "single pass")]["simulated mean"]) for S in (1, 5))
say(
    f"With `S` = 1 or 5 s the two phases change the mean by {short:.1f} s at most. With `S = 30` the two-phase "
    f"sweep recovers {by[(30, 'two-phase')]['simulated mean'] - by[(30, 'single pass')]['simulated mean']:.1f} s "
    f"later on average than a single pass, and its slowest recovery, {by[(30, 'two-phase')]['simulated max']:g} s "
    f"(single pass {by[(30, 'single pass')]['simulated max']:g} s), grows towards `L + 2S` = {30 + 2 * 30} s."
)

# %% [markdown]
# (The analytic mean is a lower bound when the sweeping worker can die; see `analytic.lease_detection`.)
#
# ## 3. What a heartbeat costs Redis
#
# Each worker sends one renewal per beat (a batched `extendLocks`, whatever the number of jobs it holds) and one
# sweep request per sweep period. So with `W` workers, Redis sees about `W / B + W / S` requests per second on top
# of the jobs' own takes and finishes. The lease itself costs nothing: it only decides how long a dead worker's job
# waits.

# %%
rows = []
small = crash_scenario(jobs=16)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", LeaseWarning)
    for L in (10, 30, 60):
        for B in (1, 2, 5, 10, 20):
            if L / B >= 2:
                rows.append(aggregate([summarize(simulate(small, LeasePolicy(L, B, 5), seed=SEED))]))
plots.heatmap(
    rows,
    values=("detection_latency_mean_s", "redis_requests_per_s"),
    labels={
        "detection_latency_mean_s": "mean detection latency (s)",
        "redis_requests_per_s": f"Redis requests per second ({small.workers} workers)",
    },
    title="The lease sets the wait for a dead worker's job; the heartbeat sets the bill",
);

# %% [markdown]
# Read the left panel down a column: the mean latency follows the lease. Read the right panel along a row: the
# request rate follows `1 / B` and hardly depends on the lease. A shorter heartbeat also buys safety: with a 30 s
# lease renewed every 10 s, two lost renewals in a row are harmless and three lapse the lock; renewed every 5 s, it
# takes six (notebook 03 measures this).

# %% [markdown]
# ## Try it
#
# Every control re-runs one small simulation (two workers, one job) and redraws its timeline; the line above the figure says what happened and how long the redraw took. *(Without widgets, in a static viewer, you see the first run only.)*

# %%
from emqsim.lesson_widgets import explorer

explorer(column="fast-dead", rule="lease", lease=30, beat=10)

# %% [markdown]
# **What to look for.** with the fast-but-dead worker, move the beat from 10 s to 5 s: the recovery moves by a few seconds only, and
# later, not sooner (B/2 on average, section 1); move the lease and it moves one-for-one. The cost of a short beat is Redis
# traffic (section 3); a long beat risks the lease when heartbeats are lost (raise the loss rate).

# %% [markdown]
# ## 4. Against the timeout, on a realistic workload
#
# The `production` scenario: several workers with a few slots each (the numbers are printed below), job durations
# with a heavy tail (a few take many minutes), random crashes with restarts, short GC-like pauses, event loops
# blocked for a few seconds now and then, and short connection outages. Each timeout value is one point on the
# orange curve; each lease is one point.

# %%
workload = standard("production", jobs=100, horizon=3600.0)
assert isinstance(workload.duration, LogNormal)  # heavy-tailed job lengths, given by their median
say(
    f"`production`: {workload.workers} workers with {workload.concurrency} slots each, {workload.jobs} jobs "
    f"(median {workload.duration.median:g} s)."
)
policies = [TimeoutPolicy(t, 5) for t in (60, 300, 1200)] + [LeasePolicy(10, 3, 2), LeasePolicy(30, 10, 5)]
frontier_rows = []
for policy in policies:
    summaries = [summarize(simulate(workload, policy, seed=SEED, replication=r)) for r in range(3)]
    frontier_rows.append(aggregate(summaries))
plots.frontier(
    frontier_rows,
    title="Every timeout trades slow recovery for false reclaims; leases get both low",
)
display(
    to_frame(frontier_rows)[
        ["policy", "timeout", "lease", "beat", "false_reclaims_per_job", "detection_latency_mean_s",
         "redis_requests_per_s"]
    ]
)
timeouts = [r for r in frontier_rows if r["policy"] == "timeout"]
leases = [r for r in frontier_rows if r["policy"] == "lease"]
fast, slow = min(timeouts, key=lambda r: r["timeout"]), max(timeouts, key=lambda r: r["timeout"])
say(
    f"A {fast['timeout']:g} s timeout recovers crashed jobs in {field(fast, 'latency'):.0f} s on average but takes "
    f"{field(fast, 'false_rate'):.2f} live jobs away per job (the long jobs in the tail: a job longer than the "
    f"timeout is taken again and again). A {slow['timeout']:g} s timeout takes {field(slow, 'false_rate'):.3f} "
    f"per job and leaves crashed jobs waiting {field(slow, 'latency') / 60:.0f} minutes on average. The leases "
    f"recover in {min(field(r, 'latency') for r in leases):.0f} to {max(field(r, 'latency') for r in leases):.0f} s "
    + (
        "with no false reclaims"
        if not any(field(r, "false_rate") for r in leases)
        else f"with {max(field(r, 'false_rate') for r in leases):.3f} false reclaims per job at most"
    )
    + ", for "
    f"{min(r['redis_requests_per_s'] for r in leases):.1f} to {max(r['redis_requests_per_s'] for r in leases):.1f} "
    f"Redis requests per second ({frontier_rows[0]['replications']} runs each)."
)

# %% [markdown]
# The leases sit in the corner the timeout cannot reach.
#
# ## Rules of thumb
#
# * **Lease `L`**: the longest time you accept a dead worker's job waiting, but longer than any pause your workers
#   can have (GC, a blocked event loop): a frozen or blocked worker loses its job once a pause exceeds `L - B`, and
#   a connection outage counts as long as the client takes to reconnect (notebook 03).
# * **Heartbeat `B`**: `L / 3` or shorter, so that two lost renewals in a row are harmless. Halving `B` doubles
#   the renewal traffic.
# * **Sweep `S`**: short compared with `L - B`, or the two-phase sweep adds up to one more `S`.
# * Expected detection latency: `L - B/2 + S/2`.
