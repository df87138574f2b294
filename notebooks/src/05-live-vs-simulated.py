# %% [markdown]
# # The simulator against the real thing: a lease on a real Redis
#
# Everything so far came from a simulation. Is the model right? `emqsim.live` runs **the same protocol** on a real
# `redis-server`: the take, the token-checked renewal, the finish and the two-phase sweep as Lua scripts
# (EVALSHA), real worker processes with one heartbeat timer each, and real faults: a crash is `SIGKILL`. Time is
# scaled down (by default 1 scenario second = 20 ms), and the records come back in the scenario's seconds, so the
# same statistics and plots work on both.
#
# Here we kill workers at random moments into their jobs, many times, in the simulator and on the real Redis, and
# overlay the two detection-latency distributions. The live part needs `redis-server`
# (`apt-get install redis-server`); without it the notebook shows the simulation only.

# %%
# %matplotlib inline

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from emqsim import Crash, Fixed, LeasePolicy, Scenario, Uniform, plots, simulate

pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", 80)
SEED = 20240  # every run below is reproducible: same seed, same run, bit for bit

# The summary fields the text below quotes, by short names (`field(row, "latency")`), and `say` for prose
# whose numbers come from this run: both in emqsim/lesson_widgets.py, written once for every lesson.
from emqsim.lesson_widgets import FIELDS, field, say  # noqa: E402, F401

# %% [markdown]
# ## The question
#
# The simulator says how long a crashed worker's job waits before it is back in the queue, with a 30 s lease
# renewed every 10 s (notebook 02 checked it against the closed form). Does a real Redis with real processes and
# `SIGKILL` agree, and how closely can we say so?

# %% [markdown]
# **Predict before you run.** Write your answer in the cell below *before* you read on or run the rest; the notebook puts your guess beside the result once the runs have answered it.

# %% tags=["predict:live"]
# Your prediction, before you run: the live mean detection latency minus the simulated one, in seconds
live_minus_simulated = None  # e.g. 0.5 (live slower) or -0.5 (live faster)

# %%
import shutil
import time

from scipy import stats as st

from emqsim.analytic import lease_detection

LEASE, BEAT, SCAN = 30.0, 10.0, 5.0
MARGIN = 1.0  # seconds: live and simulated "agree" if their mean detection latencies differ by less than this
JOBS = 12  # each run: this many workers take one job each and are killed 1 to 20 s into it
SPARE = 4  # and this many more stay alive: they sweep, and take the reclaimed jobs
LIVE_RUNS = 10  # each takes several seconds of wall time (the live cell prints how long)
SIM_RUNS = 100
policy = LeasePolicy(LEASE, BEAT, SCAN)
crashes = Scenario(
    name="crashes",
    workers=JOBS + SPARE,
    jobs=JOBS,
    duration=Fixed(25.0),
    faults=tuple(Crash(job=j, after=Uniform(1.0, 20.0)) for j in range(JOBS)),
    horizon=400.0,
)
have_redis = shutil.which("redis-server") is not None
print("redis-server found" if have_redis else "redis-server not found: simulation only (apt-get install redis-server)")


# %%
def latencies(runs):
    return np.array([a.detection_latency for r in runs for a in r.attempts if a.detection_latency is not None])


say(
    f"{JOBS} of {JOBS + SPARE} workers each take a {crashes.duration.mean():g} s job and die 1 to 20 s into "
    f"it; the {SPARE} others live on and run BullMQ's stalled sweep every {SCAN:g} s (as every worker does "
    f"while alive). First the simulation, {SIM_RUNS} replications:"
)
sim_runs = [simulate(crashes, policy, seed=SEED, replication=r) for r in range(SIM_RUNS)]
simulated = latencies(sim_runs)
theory = lease_detection(LEASE, BEAT, SCAN)
print(f"simulated: {len(simulated)} detections, mean {simulated.mean():.1f} s, range [{simulated.min():.1f}, {simulated.max():.1f}] s")
print(f"theory bounds for a live sweeper: [{theory.lo:.1f}, {theory.hi:.1f}] s")

# %%
say(
    f"Now the same scenario on a real Redis with real processes, {LIVE_RUNS} replications (the cell prints how "
    "long they took). Same seed, same jobs, same crash moments:"
)
if have_redis:
    from emqsim.live import run_live

    started = time.perf_counter()
    live_runs = [run_live(crashes, policy, seed=SEED, replication=r) for r in range(LIVE_RUNS)]
    live = latencies(live_runs)
    live_wall = time.perf_counter() - started
    print(f"{len(live_runs)} live runs in {live_wall:.0f} s of wall time")
    print(f"live: {len(live)} detections, mean {live.mean():.1f} s, range [{live.min():.1f}, {live.max():.1f}] s")
else:
    live_runs, live = [], np.array([])

# %% tags=["reveal:live"]
fig, ax = plt.subplots(figsize=(8, 4))
for sample, label, colour in ((simulated, "simulated", plots.OKABE_ITO["blue"]), (live, "live (real Redis, SIGKILL)", plots.OKABE_ITO["vermillion"])):
    if len(sample):
        xs = np.sort(sample)
        ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=f"{label}, n={len(xs)}", color=colour)
for x in (theory.lo, theory.hi):
    ax.axvline(x, color="grey", linestyle=":")
ax.set_xlabel("detection latency: crash -> job reclaimed (s)")
ax.set_ylabel("fraction of crashes detected")
ax.set_title("Detection latency: the live protocol on a real Redis and the simulator")
ax.legend(loc="lower right")
plt.show()


def per_run_means(runs):
    """One mean detection latency per run: the run, not the crash, is the independent unit."""
    return np.array([latencies([r]).mean() for r in runs if len(latencies([r]))])


def half_width(n, sd_live, var_sim, n_sim):
    """The 90% interval's half-width for `n` live runs of spread `sd_live` (Welch's t)."""
    v1 = sd_live**2 / n
    df = (v1 + var_sim) ** 2 / (v1**2 / (n - 1) + var_sim**2 / (n_sim - 1))
    return st.t.ppf(0.95, df) * (v1 + var_sim) ** 0.5


diff = None
if len(live):
    sim_means, live_means = per_run_means(sim_runs), per_run_means(live_runs)
    diff = live_means.mean() - sim_means.mean()
    var_sim = sim_means.var(ddof=1) / len(sim_means)
    hw = half_width(len(live_means), live_means.std(ddof=1), var_sim, len(sim_means))
    low, high = diff - hw, diff + hw  # a 90% interval inside the margin = equivalence by two one-sided tests at 5%
    agree = low > -MARGIN and high < MARGIN
    needed = next(
        (n for n in range(2, 1001) if abs(diff) + half_width(n, live_means.std(ddof=1), var_sim, len(sim_means)) < MARGIN),
        None,
    )
    say(
        f"Live minus simulated mean detection latency: **{diff:+.2f} s**, 90% confidence interval "
        f"[{low:+.2f}, {high:+.2f}] s ({len(live_means)} live runs, {len(sim_means)} simulated). "
        + (
            f"The whole interval lies within ±{MARGIN:g} s, so the two agree to within {MARGIN:g} s "
            "(two one-sided tests, 5% each)."
            if agree
            else f"The interval is not inside ±{MARGIN:g} s, so these runs do **not** show agreement to within "
            f"{MARGIN:g} s. "
            + (
                f"With the spread and the difference seen here, about {needed} live runs would (set `LIVE_RUNS`; "
                f"each took {live_wall / len(live_runs):.0f} s here), unless the difference is real."
                if needed
                else f"More live runs alone would not: the difference ({diff:+.2f} s) and the uncertainty of the "
                f"{len(sim_means)} simulated runs already come close to ±{MARGIN:g} s. Run more simulated "
                "replications too (`SIM_RUNS`), or the difference is real."
            )
        )
    )
else:
    say("No live runs (no redis-server): no comparison.")

# %% jupyter={"source_hidden": true} tags=["answer:live"]
from emqsim import lessons

if diff is None:
    say("No live runs, so there is no result to put beside your guess.")
else:
    say(
        lessons.report(
            lessons.number(
                "live minus simulated mean detection latency", "live_minus_simulated", live_minus_simulated, diff,
                digits=2, tolerance=0.25, result=f"{diff:+.2f} s (90% CI {low:+.2f} to {high:+.2f} s)",
                why=(
                    "the live run follows the same protocol with the same timers, so it can only add what real "
                    f"processes add: timer jitter and round trips of a few ms, times the time scale; the interval, "
                    f"{high - low:.2f} s wide, is what {lessons.plural(len(live_means), 'live run')} can resolve."
                ),
            ),
        )
    )

# %% [markdown]
# **Reading it.** Agreement is a claim that needs evidence of its own: a test that fails to find a difference
# says nothing when the samples are small. So the comparison above asks whether the difference of the means is
# *shown* to be small: its 90% confidence interval must lie inside a margin of ±1 s chosen in advance (an
# equivalence test, TOST). The run is the unit (crashes within one run share the sweep timers). Where the two
# curves differ, the live run can only add what real processes add: a few milliseconds of timer jitter and round
# trips, scaled up by the time scale (1 ms real = 0.05 scenario seconds). The live part uses real time, so its
# numbers change from one execution to the next.
#
# To point the live mode at your own Redis: `python -m emqsim live --redis redis://host:6379/0 --scenario fast-dead`
# (it refuses a database that holds keys outside its own prefix unless you pass `--allow-foreign-keys`). See
# `docs/live.md`.

# %% [markdown]
# ## Try it
#
# Every control re-runs one small simulation (two workers, one job) and redraws its timeline; the line above the figure says what happened and how long the redraw took. *(Without widgets, in a static viewer, you see the first run only.)*

# %%
from emqsim.lesson_widgets import explorer

explorer(column="fast-dead", rule="lease", lease=30, beat=10)

# %% [markdown]
# **What to look for.** in the simulator the recovery comes one lease after the last heartbeat plus the wait for the next sweep; move
# the beat and the lease and see the range [L - B, L + S] move. The live run above checked that real processes
# land in the same place.
