"""Build the teaching notebooks from this one source: `python notebooks/_build.py`.

The notebooks are stored with their outputs cleared; tests/test_notebooks.py runs each one top to bottom.
Edit the cells here, rebuild, and commit both.
"""

from __future__ import annotations

import sys
from pathlib import Path
from runpy import run_path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def md(text: str):
    return new_markdown_cell(text.strip("\n"))


def code(text: str):
    return new_code_cell(text.strip("\n"))


SETUP = """
%matplotlib inline
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from emqsim import *
from emqsim import plots
from emqsim.stats import aggregate, summarize, to_frame

pd.set_option("display.width", 160)
pd.set_option("display.max_colwidth", 80)
SEED = 20240  # every run below is reproducible: same seed, same run, bit for bit

# The table fields the text below quotes, in one place: a renamed field in emqsim.stats is one edit here.
FIELDS = {
    "latency": "detection_latency_mean_s",
    "latency_ci": "detection_latency_mean_s_ci",
    "latency_min": "detection_latency_pooled_min_s",
    "latency_max": "detection_latency_pooled_max_s",
    "false_rate": "false_reclaims_per_job",
    "detections": "detections_total",
    "censored": "detection_latency_censored",
}


def field(row, name):
    return row[FIELDS[name]]


def say(text):
    \"\"\"Show `text` as Markdown: the numbers quoted in the prose come from this run's output.\"\"\"
    from IPython.display import Markdown, display

    display(Markdown(text))
"""

EXPLORE = """
import time

import ipywidgets as widgets
from IPython.display import display


def explorer(column="fast-dead", rule="lease", lease=30, beat=10, timeout=600, freeze=0, loss=0.0, job=60):
    \"\"\"Controls for one small run (two workers, one job) and its timeline, redrawn on every change.\"\"\"
    style = {"description_width": "80px"}
    w = {
        "column": widgets.ToggleButtons(
            options=[("slow but alive", "slow-alive"), ("fast but dead", "fast-dead")], value=column,
            description="worker",
        ),
        "rule": widgets.ToggleButtons(
            options=[("fixed timeout", "timeout"), ("lease + heartbeat", "lease")], value=rule, description="rule"
        ),
        "lease": widgets.IntSlider(value=lease, min=2, max=120, description="lease (s)", style=style),
        "beat": widgets.FloatSlider(value=beat, min=0.5, max=60, step=0.5, description="beat (s)", style=style),
        "timeout": widgets.IntSlider(value=timeout, min=30, max=1200, step=30, description="timeout (s)", style=style),
        "freeze": widgets.IntSlider(value=freeze, min=0, max=120, step=5, description="freeze (s)", style=style),
        "loss": widgets.FloatSlider(value=loss, min=0, max=0.9, step=0.05, description="loss rate", style=style),
        "job": widgets.IntSlider(value=job, min=10, max=900, step=10, description="job (s)", style=style),
    }
    out, status = widgets.Output(), widgets.Label()

    def redraw(_=None):
        started = time.perf_counter()
        length = float(w["job"].value)
        if w["column"].value == "slow-alive":
            scenario = standard("slow-alive", duration=length, horizon=3 * length + 300)
        else:
            scenario = standard("fast-dead", die_after=1.0, duration=length, horizon=3 * length + 1500)
        if w["freeze"].value:
            pause = Freeze(job=0, after=min(5.0, length / 2), duration=float(w["freeze"].value))
            scenario = scenario.with_(faults=scenario.faults + (pause,))
        scenario = scenario.with_(network=Network(loss=w["loss"].value))
        with out:
            out.clear_output(wait=True)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if w["rule"].value == "timeout":
                        policy = TimeoutPolicy(timeout=w["timeout"].value, scan=5)
                    else:
                        policy = LeasePolicy(lease=w["lease"].value, beat=w["beat"].value, scan=5)
                    run = simulate(scenario, policy, seed=SEED)
            except (ConfigError, ValueError) as exc:
                status.value = f"not a valid setting: {exc}"
                return
            ax = plots.timeline(run)
            ax.figure.set_dpi(72)  # a screen-sized image: the redraw stays fast
            display(ax.figure)
            plt.close(ax.figure)
        verdict = plots.verdict(run)
        status.value = f"{verdict.text} (redrawn in {1000 * (time.perf_counter() - started):.0f} ms)"

    for control in w.values():
        control.observe(redraw, "value")
    redraw()
    rows = [
        widgets.HBox([w["column"], w["rule"]]),
        widgets.HBox([w["lease"], w["beat"], w["timeout"]]),
        widgets.HBox([w["freeze"], w["loss"], w["job"]]),
        status,
        out,
    ]
    return widgets.VBox(rows)
"""


def tag(cell, *tags: str):
    """`cell` with metadata tags: `predict:NAME` (the student's guess), `reveal:NAME` (a cell whose text or
    output gives the answer away) and `answer:NAME` (the guess beside the result). tests/test_lessons.py checks
    that each prediction comes before its reveals, and its answer after them."""
    cell.metadata["tags"] = list(tags)
    return cell


def ask(name: str, question: str, predict: str) -> list:
    """The question and the cell where the student records a guess, before anything on the page answers it."""
    return [
        md("## The question\n\n" + question.strip("\n")),
        md(
            "**Predict before you run.** Write your answer in the cell below *before* you read on or run the "
            "rest; the notebook puts your guess beside the result once the runs have answered it."
        ),
        tag(code(predict), f"predict:{name}"),
    ]


def answer(name: str, text: str):
    """The cell that puts the guess beside the result (`emqsim.lessons`), after the runs that answer it. Its
    code is folded (JupyterLab shows its output and a "..." to unfold it): the student reads the answer, not
    the templating."""
    cell = tag(code("from emqsim import lessons\n\n" + text.strip("\n")), f"answer:{name}")
    cell.metadata["jupyter"] = {"source_hidden": True}
    return cell


def try_it(settings: str, look_for: str) -> list:
    """The controls, after the first answer (a control's default state may show an answer), and what to do."""
    return [
        md(
            "## Try it\n\nEvery control re-runs one small simulation (two workers, one job) and redraws its "
            "timeline; the line above the figure says what happened and how long the redraw took. *(Without "
            "widgets, in a static viewer, you see the first run only.)*"
        ),
        code(EXPLORE + "\n\n" + settings.strip("\n")),
        md("**What to look for.** " + look_for.strip("\n")),
    ]


def lesson(question: str, predict: str, settings: str, look_for: str, name: str = "question") -> list:
    """The question, the prediction and the controls in one block (a lesson whose controls answer nothing)."""
    return [*ask(name, question, predict), *try_it(settings, look_for)]


# -------------------------------------------------------------------------------------------------------------
NB1 = [
    md("""
# Timeout or lease? How a job queue should notice a dead worker

A job queue hands each job to exactly one worker. Workers fail: a process is killed, a container is evicted, a
machine disappears. The job must then go back to the queue so that another worker can run it. Nobody tells the
queue that the worker died, so the queue has to *decide* it on its own.

There are two common ways to decide:

* **A fixed timeout.** The queue notes when a worker took the job. A *reaper* looks at the jobs in progress every
  few seconds and takes back any job that has been running longer than, say, 10 minutes.
* **A lease renewed by a heartbeat.** When a worker takes a job it also gets a *lock* that expires on its own,
  say after 30 seconds (in Redis: a key set with `PX 30000`). As long as the worker is alive it renews the lock,
  say every 10 seconds (the *heartbeat*). A *sweep* takes back jobs whose lock has disappeared.

This notebook runs both rules on two workers:

| worker | what really happens |
|---|---|
| **slow but alive** | a healthy worker runs a 15-minute job |
| **fast but dead** | a worker is killed 1 second into a 1-minute job |

Everything runs in **emqsim**, a deterministic simulator of a Redis job queue that follows the protocol of
BullMQ and of its Elixir port EchoMQ. The same seed always gives the same run, so every number below can be
reproduced exactly.
"""),
    code(SETUP),
    *ask(
        "four",
        """
Under a **10-minute timeout** (a reaper looks every 5 s), and under a **30 s lease renewed every 10 s** (a sweep
every 5 s): is the slow-but-alive worker's job taken away from it? And how long after the crash is the
fast-but-dead worker's job back in the queue, for another worker to run?
""",
        """
# Your predictions, before you run (replace None):
slow_alive_taken_by_timeout = None  # True: the queue takes the live worker's job; False: leaves it alone
slow_alive_taken_by_lease = None
fast_dead_wait_timeout = None  # seconds from the crash until the job is back in the queue, e.g. 42
fast_dead_wait_lease = None
""",
    ),
    md("""
## The four runs

* `standard("slow-alive")`: one 15-minute job on a worker that stays alive the whole time.
* `standard("fast-dead")`: one 60-second job whose worker dies 1 s after starting it.

In both scenarios a second worker sits idle, ready to pick up a job that comes back to the queue.
We run each scenario under both rules:

* `TimeoutPolicy(timeout=600, scan=5)`: every 5 s a reaper takes back any job older than 600 s.
* `LeasePolicy(lease=30, beat=10, scan=5)`: a 30 s lock renewed every 10 s; every 5 s a sweep takes back the
  jobs whose lock is gone.
"""),
    tag(
        code("""
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
"""),
        "reveal:four",
    ),
    answer(
        "four",
        """
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
""",
    ),
    md("""
## How to read a timeline

`plots.timeline(run)` draws one horizontal lane per worker, time in seconds from left to right:

* a **dark blue bar** is a job running on that worker; **grey hatching** means the job is still assigned to a
  worker that has already died (nobody is working on it); **yellow hatching** means the worker is frozen;
* the **light blue band** under a job is the life of its lock: it starts when the job is taken and ends when the
  lock is released or **expires**; each small **black tick** on it is a heartbeat renewal that pushed the expiry
  30 s further;
* for the timeout rule the **orange band** is the timeout's clock: it runs from the take until the job leaves the
  in-progress list or the 600 s are up;
* thin **grey vertical lines** are sweeps (too many to draw become a rug at the top); a **dashed line** is a
  sweep that took a job back;
* a **green circle** marks a job taken back from a dead worker (right), an **orange cross** a job taken back from
  a live worker (wrong); the **pink arrow** goes to the job's next run on another worker;
* at the end of a job, a **white triangle** is a finish the queue accepted, a **pink diamond** a second
  accepted finish of the same job (a duplicate), an **orange square** a late finish the queue rejected.
"""),
    code("""
plots.timeline(runs[("fast-dead", "lease")]);
"""),
    md("""
Worker 0 took job 0 and died 1 s later (black triangle; its lane turns grey). Nothing told the queue. But the
lock that worker 0 set when it took the job was only good for 30 s, and nobody was left to renew it: the light
blue band stops at its expiry. The sweeps kept looking at the job; the first sweep after the expiry (dashed line)
found a job in progress **without a lock**, moved it back to the waiting list, and worker 1 took it at once
(arrow) and finished it.

Here is the same story as a table of *attempts* (one column per time a worker took the job):
"""),
    code("""
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
"""),
    md("""
## All four at once

The static version of the same comparison. The panels in a row share their time axis, so lengths compare
directly.
"""),
    code("""
plots.two_columns(
    runs,
    title="A fixed timeout cannot tell slow from dead; a lease renewed by a heartbeat can",
);
"""),
    *try_it(
        'explorer(column="slow-alive", rule="timeout", timeout=600, job=900)',
        """
toggle the worker and the rule: the timeout takes the slow job back every 600 s (orange crosses) and leaves
the dead worker's job waiting 600 s; the lease leaves the slow job alone and recovers the dead one after about
one lease. Then shorten the job below the timeout, freeze the slow worker for longer than the lease, or raise
the loss rate: each of these makes the lease take a live worker's job (notebook 03 measures how often).
""",
    ),
    md("""
## What went wrong with the timeout

**Slow but alive.** Just after 10 minutes the reaper took back a job whose worker was perfectly healthy, and
worker 1 started it again from scratch. Both workers finished it, and the queue accepted *both* finishes: the timeout reaper's
usual design (a reliable queue that just removes the job id from its in-progress list) has no way to tell a
stale finish from a fresh one. The job ran twice and completed twice, with twice its side effects (two emails,
two charges, two writes).

**Fast but dead.** The job sat on a dead worker for 600 s, because the timeout only looks at the job's age, and
the job was young.

A timeout measures **how old a job is**, not **whether its worker is alive**. Whatever value you choose is wrong
for somebody: shorter than your longest job, and it takes live jobs away; longer, and dead workers hold their jobs
for that long.

A lease measures liveness directly. A live worker keeps renewing, however long its job is, so a 15-minute job
(or a 15-hour one) is never taken away. A dead worker stops renewing, so its lock is gone within `lease` seconds
and its job is back within about `lease + scan`.

## Does the moment of the crash matter?

For the timeout, yes: a worker that dies `d` seconds into a job holds it for about `timeout - d`. For the lease,
no. Here a 10-minute job's worker dies at different moments:
"""),
    code("""
moments = [1, 100, 200, 300, 400, 500, 590]
latency = {"timeout 600 s": [], "lease 30 s, beat 10 s": []}
for d in moments:
    scenario = standard("fast-dead", die_after=float(d), duration=600.0)
    for label, policy in zip(latency, rules.values()):
        run = simulate(scenario, policy, seed=SEED)
        latency[label].append(summarize(run).detection_latencies[0])

fig, ax = plt.subplots(figsize=(7, 3.6))
for (label, values), colour in zip(latency.items(), [plots.OKABE_ITO["orange"], plots.OKABE_ITO["blue"]]):
    ax.plot(moments, values, marker="o", color=colour, label=label)
ax.set_xlabel("worker dies this long into its 600 s job (s)")
ax.set_ylabel("crash → job back in the queue (s)")
ax.set_title("The timeout's delay depends on when the worker died; the lease's does not", loc="left")
ax.legend();
"""),
    md("""
## Summary

* A fixed timeout confuses *slow* with *dead*: it takes live jobs away (duplicate work, duplicate completions)
  and leaves dead workers' jobs waiting for up to the whole timeout.
* A lease renewed by a heartbeat asks the question that matters, "is the worker still renewing?": live jobs are
  never taken, dead ones come back after about one lease.

Next: **02-tuning** shows how to choose the lease, the heartbeat and the sweep period, and what each costs;
**03-where-leases-fail** shows the cases a lease gets wrong (frozen workers, lost heartbeats, blocked event
loops, connection outages) and the token check that keeps them from doing damage; **04-real-systems** runs the
defaults of BullMQ, Celery, SQS, Faktory, Oban and Kubernetes on the same workload.
"""),
]

# -------------------------------------------------------------------------------------------------------------
NB2 = [
    md("""
# Tuning a lease: lease, heartbeat and sweep

A lease-based queue has three knobs, all in seconds:

* the **lease** `L`: how long a lock lives without renewal;
* the **heartbeat period** `B`: how often a live worker renews its locks (one batched round trip per worker per
  beat, however many jobs it holds);
* the **sweep period** `S`: how often the queue looks for jobs whose lock is gone.

They trade three things against each other: how long a dead worker's job waits (**detection latency**), how
often a live worker's job is taken by mistake (**false reclaims**), and how much work Redis does (**requests
per second**).
"""),
    code(
        SETUP
        + """
from emqsim import analytic
from emqsim.figures import crash_scenario
"""
    ),
    *ask(
        "beat",
        """
A dead worker's job waits about one lease (30 s here, renewed every 10 s, a sweep every 5 s). If you halve the
heartbeat period (renew every 5 s), how does the wait for a crashed worker's job change, on average: how many
seconds sooner is it back in the queue (a negative number if later)? And what does it cost: how many times as
many Redis requests per second as before?
""",
        """
# Your predictions, before you run (replace None):
seconds_sooner = None  # seconds sooner (negative: later), on average, with a 5 s heartbeat instead of 10 s
requests_factor = None  # Redis requests per second with the 5 s heartbeat / with the 10 s one, e.g. 1.5
""",
    ),
    tag(
        md("""
### The closed form

Suppose a worker crashes at a random moment. Its last renewal was `u` seconds earlier, `u` uniform between 0 and
`B`. The lock vanishes `L - u` after the crash, and the next sweep finds it after a further wait uniform between
0 and `S`. So the detection latency `T_D` is

$$ E[T_D] = L - \\frac{B}{2} + \\frac{S}{2}, \\qquad L - B \\le T_D \\le L + S. $$

The module `emqsim.analytic` has the exact version for this simulator (millisecond clock, network round trips,
the two-phase sweep, the worker that sweeps dying), which reduces to this formula when those details are zero.
"""),
        "reveal:beat",
    ),
    code("""
def basic_mean(L, B, S):
    return L - B / 2 + S / 2
"""),
    md("""
## 1. Simulation against the closed form

`crash_scenario()`: the first run of every job dies at a random moment between 0 and 50 s into it, and a
replacement worker starts a second later. Each job gives one detection-latency sample; the replication (one
run) is the unit of the confidence intervals.
"""),
    tag(
        code("""
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
"""),
        "reveal:beat",
    ),
    code("""
above = sum(field(row, "latency") > closed for row, _, closed in stats_rows)
largest = max(abs(field(row, "latency") - closed) / closed for row, _, closed in stats_rows)
covered = sum(field(row, "latency_ci")[0] <= exact <= field(row, "latency_ci")[1] for row, exact, _ in stats_rows)
say(
    f"The simulated means sit close to the closed form: {above} of {len(stats_rows)} above it, "
    f"{len(stats_rows) - above} below, at most {100 * largest:.1f}% away. The exact analytic mean lies inside "
    f"the 95% interval for {covered} of {len(stats_rows)} settings."
)
"""),
    answer(
        "beat",
        """
row_of = {setting: row for setting, (row, _, _) in zip(settings, stats_rows)}
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
""",
    ),
    md("""
Two details separate the simulator from the basic formula (`analytic.lease_detection` includes both):

* the lock is also set when the job is *taken*, so a crash early in a job finds a fresher lock than a random
  moment would: slightly longer latencies;
* the sweep is run by the workers themselves, one at a time (a `stalled-check` key rate-limits it, as in
  BullMQ). If the worker that was sweeping is the one that dies, the next sweep comes from another worker, up to
  one more `S` later. That is why `analytic.lease_detection` allows up to about `L + 2S`.

The whole distributions, with the basic model's CDF dotted over them:
"""),
    code("""
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
"""),
    md("""
## 2. The sweep period and the two-phase sweep

BullMQ's sweep works in two phases: each pass first moves back the jobs that were *marked* at the previous pass
and whose lock is now gone, then marks every job in progress. A job is therefore recovered only if a sweep marked
it *before* its lock vanished and a later sweep finds the lock gone. When `S` is short compared with the lease,
that changes nothing. When `S` approaches `L` (BullMQ's defaults: lock 30 s, stalled interval 30 s) it can add up
to one more `S`.
"""),
    code("""
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
"""),
    md("""
(The analytic mean is a lower bound when the sweeping worker can die; see `analytic.lease_detection`.)

## 3. What a heartbeat costs Redis

Each worker sends one renewal per beat (a batched `extendLocks`, whatever the number of jobs it holds) and one
sweep request per sweep period. So with `W` workers, Redis sees about `W / B + W / S` requests per second on top
of the jobs' own takes and finishes. The lease itself costs nothing: it only decides how long a dead worker's job
waits.
"""),
    code("""
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
"""),
    md("""
Read the left panel down a column: the mean latency follows the lease. Read the right panel along a row: the
request rate follows `1 / B` and hardly depends on the lease. A shorter heartbeat also buys safety: with a 30 s
lease renewed every 10 s, two lost renewals in a row are harmless and three lapse the lock; renewed every 5 s, it
takes six (notebook 03 measures this).
"""),
    *try_it(
        'explorer(column="fast-dead", rule="lease", lease=30, beat=10)',
        """
with the fast-but-dead worker, move the beat from 10 s to 5 s: the recovery moves by a few seconds only, and
later, not sooner (B/2 on average, section 1); move the lease and it moves one-for-one. The cost of a short beat is Redis
traffic (section 3); a long beat risks the lease when heartbeats are lost (raise the loss rate).
""",
    ),
    md("""
## 4. Against the timeout, on a realistic workload

The `production` scenario: several workers with a few slots each (the numbers are printed below), job durations
with a heavy tail (a few take many minutes), random crashes with restarts, short GC-like pauses, event loops
blocked for a few seconds now and then, and short connection outages. Each timeout value is one point on the
orange curve; each lease is one point.
"""),
    code("""
workload = standard("production", jobs=100, horizon=3600.0)
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
"""),
    md("""
The leases sit in the corner the timeout cannot reach.

## Rules of thumb

* **Lease `L`**: the longest time you accept a dead worker's job waiting, but longer than any pause your workers
  can have (GC, a blocked event loop): a frozen or blocked worker loses its job once a pause exceeds `L - B`, and
  a connection outage counts as long as the client takes to reconnect (notebook 03).
* **Heartbeat `B`**: `L / 3` or shorter, so that two lost renewals in a row are harmless. Halving `B` doubles
  the renewal traffic.
* **Sweep `S`**: short compared with `L - B`, or the two-phase sweep adds up to one more `S`.
* Expected detection latency: `L - B/2 + S/2`.
"""),
]

# -------------------------------------------------------------------------------------------------------------
NB3 = [
    md("""
# Where leases fail: freezes, lost heartbeats, blocked loops, outages, stale finishes and fencing

A lease does not know whether a worker is alive. It knows whether the worker's **renewals arrive in time**.
Anything that stops renewals without killing the worker can make the lease take a live worker's job: a
stop-the-world pause (a long GC, `SIGSTOP`), a CPU-bound job blocking Node's event loop (the work goes on, the
renewals do not), a network that drops renewals, or a connection outage. This notebook makes each of these
happen, measures how often, compares with theory, and shows the **token check** that keeps the damage
contained.
"""),
    code(
        SETUP
        + """
from emqsim import analytic
from emqsim.presets import preset
"""
    ),
    *ask(
        "first",
        """
A job holds a lease of 30 s, renewed every 10 s. Its worker freezes (a long GC pause) for 25 s at some moment,
then resumes. Is its job taken away? What if, instead, nothing freezes but the network loses one renewal in
five, at random, during a 5-minute job?
""",
        """
# Your predictions, before you run: True (always), False (never), "sometimes", or a probability from 0 to 1
freeze_25s_loses_the_job = None
loss_20_percent_loses_the_job = None
""",
    ),
    md("""
## 1. A frozen worker

`standard("frozen", freeze_for=45)`: the worker freezes 5 s into a 2-minute job and resumes 45 s later. While it
is frozen it neither works nor renews. The lease is 30 s, renewed every 10 s.
"""),
    code("""
frozen = simulate(standard("frozen", freeze_for=45.0), LeasePolicy(30, 10, 5), seed=SEED)
plots.timeline(frozen);
"""),
    code("""
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
    "Step by step:\\n\\n"
    + (
        f"1. Worker {stale.worker} took the job at {stale.taken_at:.1f} s and froze (yellow) at {froze:.1f} s, "
        "before its first renewal: the lock it set at the take was the last one.\\n"
        if last.kind == "set"
        else f"1. Worker {stale.worker} renewed its lock (black tick) at {last.time:.1f} s, {froze - last.time:.1f} s "
        f"before it froze (yellow) at {froze:.1f} s.\\n"
    )
    + f"2. Frozen, it sent no more renewals; the lock expired at {expired:.1f} s, {expired - last.time:.1f} s after "
    "it was last set (the light blue band stops).\\n"
    f"3. The sweep at {stale.reclaimed_at:.1f} s found the job without a lock and gave it to worker {fresh.worker} "
    "(orange cross: a live worker's job was taken, a **false reclaim**).\\n"
    f"4. Worker {stale.worker} resumed at {resumed:.1f} s. Its first renewal, at {refused:.1f} s, was **refused** "
    "(orange x): BullMQ's `extendLock` only renews a lock that still holds the worker's own token, and this one "
    "is gone.\\n"
    f"5. BullMQ does not stop the job when a renewal fails, so worker {stale.worker} went on working and finished "
    f"at {stale.finished_at:.1f} s. Its finish was **rejected** (pink square): `moveToFinished` checks the token "
    f"too and answers *{stale.finish_result}*. Only worker {fresh.worker}'s finish counts: the job ran "
    f"{times(len(frozen.attempts))}, but completed {times(sum(a.finish_result == 'accepted' for a in frozen.attempts))}."
)
"""),
    tag(
        md("""
## 2. How long a freeze can a lease survive?

A freeze of `P` seconds that starts `u` seconds after the last renewal lapses the lock if and only if
`u + P > L`. With `u` uniform on `[0, B]`:

$$ P(\\text{lapse}) = \\mathrm{clip}\\left(\\frac{P - (L - B)}{B},\\ 0,\\ 1\\right) $$

so a 30 s lease renewed every 10 s survives every freeze shorter than 20 s and loses every one longer than 30 s.
With the token-checked renewal every lapse becomes a false reclaim: the worker can never get its lock back.

**What if the renewal re-created a missing lock?** Then the resumed worker would get its lock back, and the job
is lost only if a sweep happens to look while the lock is missing: a window of `u + P - L` seconds, hit by a
sweep of period `S` with probability `min(1, window / S)`. `emqsim` can model that variant
(`RenewalRule.every(beat, recreate_missing=True)`); BullMQ does not do it, because by the time the worker resumes
its job may already be running elsewhere.
"""),
        "reveal:first",
    ),
    code("""
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
"""),
    md("""
Both variants are safe below `L - B` and both lose the job for long freezes; re-creating the lock only narrows
the window in between. The real fix is to keep pauses shorter than `L - B`, or choose a longer lease. (A
CPU-bound job that blocks Node's event loop stops the renewals in the same way, though not the work: section 4.)

## 3. Lost heartbeats

`standard("flaky-network", loss=..., outage_at=None)` drops each renewal with probability `p`, independently
(nobody dies here, so every reclaim is a false one; `outage_at=None` leaves out the scenario's connection outage,
which section 5 treats on its own). With a fixed-rate heartbeat, a lock lapses when `k = floor(L / B)` renewals in a row are
lost: 3 for 30/10, 6 for 30/5. For a job that lives through `n` renewals, the chance of such a run is computed
exactly by `analytic.run_probability(n, k, p)` (and, tick by tick as the engine runs, by
`analytic.lost_renewal_lapse_probability`).

First, what it looks like:
"""),
    code("""
lossy = simulate(
    standard("flaky-network", loss=0.4, jobs=2, duration=240.0, workers=3, outage_at=None),
    LeasePolicy(30, 10, 5),
    seed=SEED,
)
plots.timeline(lossy, title="40% of renewals lost: the lease lapses under a live worker");
"""),
    md("""
Lost renewals never reach Redis, so they leave no tick: the gaps between ticks on worker 0's lock are the lost
ones. Now the rate, for the first run of each 300 s job:
"""),
    tag(
        code("""
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
"""),
        "reveal:first",
    ),
    code("""
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
"""),
    answer(
        "first",
        """
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
""",
    ),
    *try_it(
        'explorer(column="slow-alive", rule="lease", lease=30, beat=10, freeze=25, job=120)',
        """
with a 25 s freeze, whether the lock lapses depends on when the pause starts relative to the last renewal
(it lapses when u + P > L, section 2): move the freeze between 15 s and 35 s and watch the orange cross appear.
Set the freeze to 0 and the loss rate to 0.2: a lapse needs three renewals in a row lost (k = floor(L/B) = 3,
section 3); a 5 s beat needs six. And a job that is taken from a live worker still completes once: the finish
of the resumed worker is rejected (pink square).
""",
    ),
    md("""
## 4. A blocked event loop: alive, working, and still reclaimed

A freeze stops the work and the heartbeat together. The most common real cause of BullMQ's "job stalled more
than allowable limit" is different: a CPU-bound job blocks Node's event loop. The job's own work goes on (it *is*
the CPU-bound section), but the lock manager's timer cannot fire until the loop frees, so no renewal leaves.
`standard("blocked-loop", block_for=45)`: the job blocks the loop 5 s into its 2 minutes, for 45 s; the lease is
30 s, renewed every 10 s.
"""),
    md("""
**Predict before you look.** The worker never stops working, and nothing dies. Does the job finish once, twice,
or never? Which finish counts?
"""),
    tag(
        code("""
# Your prediction:
blocked_runs_of_the_job = None  # how many times the job runs
blocked_finish_that_counts = None  # "the blocked worker's", "the other worker's", "both" or "neither"
"""),
        "predict:blocked",
    ),
    tag(
        code("""
blocked = simulate(standard("blocked-loop", block_for=45.0), LeasePolicy(30, 10, 5), seed=SEED)
plots.timeline(blocked);
"""),
        "reveal:blocked",
    ),
    tag(
        code("""
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
"""),
        "reveal:blocked",
    ),
    answer(
        "blocked",
        """
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
""",
    ),
    md("""
**Predict before you read on.** BullMQ's defaults: a 30 s lock, and its lock manager's rule
(`RenewalRule.bullmq(30)`: its timer ticks every quarter of the lock and renews a lock older than one tick).
What is the longest CPU-bound section a job can have without being stalled?
"""),
    tag(
        code("""
# Your prediction, in seconds:
longest_safe_block = None
"""),
        "predict:safe-block",
    ),
    tag(
        md("""
The lease did what it is built to do, and that is the problem: from Redis's side a worker that sends no renewal
looks exactly like a dead one. The rule is the freeze's: a block of `X` seconds starting `u` after the last
renewal lapses the lock iff `u + X > L`, so with `u` uniform over one renewal period `B`,
`analytic.block_lapse_probability` is `clip((X - (L - B)) / B, 0, 1)`, and `analytic.block_safe_limit` is the
longest block that never lapses it, `L - B`.
"""),
        "reveal:safe-block",
    ),
    code("""
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
"""),
    code("""
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
"""),
    answer(
        "safe-block",
        """
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
                    f"one tick of its timer, a quarter of the 30 s lock, not the 10 s beat of the lessons above"
                    if abs(30 - safe - tick) < 1e-9
                    else f"its timer ticks every {tick:g} s and renews only a lock older than one tick"
                )
                + f"): 30 - {30 - safe:.2f} = {safe:.2f} s."
            ),
        ),
    )
)
""",
    ),
    md("""
**The tuning answer.** A job that blocks for up to `X` seconds needs `L - B > X`, that is a lease of at least
`X + B` (for BullMQ's rule, `B = L/4`, so `lockDuration > 4X/3`). Or take the block off the event loop: a
sandboxed processor (a child process) or a worker thread keeps the lock manager's timer free, and yielding
(`await` in the loop) lets it fire. Here is a 40 s block under BullMQ's rule with a 30, 45 and 60 s lock, once for
a block anywhere in the first minute of the job and once for a block that starts after the job's first renewals:
"""),
    code("""
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
"""),
    code("""
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
"""),
    md("""
## 5. A connection outage is not a run of lost heartbeats

Section 3 dropped renewals one at a time, independently. Real outages are correlated: the connection to Redis
is gone for a while, for every command.

**Predict before you run.** A 30 s lease renewed every 10 s survives two lost beats in a row (section 3). The
connection is down for 20 s, 21 s into a job, which is two beats. Does the job survive?
"""),
    tag(
        code("""
# Your prediction:
survives_a_20s_outage = None  # True or False
"""),
        "predict:outage",
    ),
    tag(
        md("""
BullMQ's client (ioredis with `maxRetriesPerRequest: null`) does not drop the renewals: it queues them and
resends them once it has reconnected, and it reconnects on a backoff (BullMQ's retry strategy:
`max(min(e^n, 20000), 1000)` ms before attempt `n`). So the question is not how many beats were lost but
**when the client is back**.
"""),
        "reveal:outage",
    ),
    code("""
outage = Scenario(
    name="outage",
    workers=2,
    jobs=1,
    duration=Fixed(120.0),
    faults=(Outage(at=21.0, duration=20.0),),
    phases="aligned",
)
outage_run = simulate(outage, LeasePolicy(30, 10, 5), seed=SEED)
plots.timeline(outage_run, title="A 20 s outage of every connection, 21 s into a job");
"""),
    code("""
from emqsim.faults import reconnect_delay_ms

back = 21.0 + analytic.reconnect_time(20.0)
attempts_at, n = [], 0  # the client's reconnect attempts, seconds after the disconnect
while not attempts_at or attempts_at[-1] < 20.0:
    n += 1
    attempts_at.append((attempts_at[-1] if attempts_at else 0.0) + reconnect_delay_ms(n) / 1000)
events = [e for e in outage_run.lock_events if e.job == "0" and e.token == outage_run.attempts[0].token]
expired = next(e.time for e in events if e.kind == "expired")
say(
    f"The last renewal before the outage kept the lock until {expired:.1f} s. The network was back at "
    f"{outage.faults[0].at + outage.faults[0].duration:g} s, but "
    f"the client's reconnect attempts come {', '.join(f'{x:g}' for x in attempts_at)} s after the disconnect, "
    f"so it was connected again only at {back:.1f} s (`reconnect_time(20) = {analytic.reconnect_time(20.0):g}`), "
    f"and its queued renewal came too late: `{plots.verdict(outage_run).text}`."
)
"""),
    answer(
        "outage",
        """
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
""",
    ),
    md("""
So an outage of `D` seconds acts like a freeze of `R(D) = analytic.reconnect_time(D)`: the lock lapses iff
`u + R(D) > L`, and `analytic.outage_lapse_probability` is the freeze formula at `R(D)`. Because the backoff grows,
`R(D)` jumps: the table compares it with the naive count of lost beats, and checks the formula against runs of
the same scenario with the outage starting at `OUTAGE_STARTS` moments spread evenly over one beat:
"""),
    code("""
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
"""),
    code("""
row = {r["outage D (s)"]: r for r in rows}
longest_safe = max(D for D, r in row.items() if r["P(lapse) 30/10"] == 0)
say(
    f"Counting beats, an outage of {longest_safe:g} s loses {row[longest_safe]['beats lost (naive)']} and one "
    f"of 20 s {row[20.0]['beats lost (naive)']}, both fewer than the {k} that lapse a 30/10 lease. The "
    f"reconnect backoff tells another story: after the {longest_safe:g} s outage the client is back at "
    f"{row[longest_safe]['reconnect_time(D)']:g} s, and the lease survives "
    f"(P(lapse) {row[longest_safe]['P(lapse) 30/10']:g}, simulated {row[longest_safe]['simulated 30/10']:g}); "
    f"after a 20 s outage it is back only at {row[20.0]['reconnect_time(D)']:g} s, longer than the lease: "
    f"P(lapse) {row[20.0]['P(lapse) 30/10']:g} for 30/10 and {row[20.0]['P(lapse) BullMQ 30']:g} for BullMQ's "
    f"rule (simulated {row[20.0]['simulated 30/10']:g}). Against that outage a shorter beat does not help (the "
    "reconnect alone outlasts the lease); only a lease longer than the reconnect time does."
)
"""),
    md("""

## 6. The token check and fencing

When a live worker's job is taken, two workers run it. What stops both results from counting is the **token**:
each take writes a fresh token into the lock, and `moveToFinished` only accepts a finish from the worker whose
token is still there. The timeout reaper's usual design has no such check. `TimeoutPolicy(fenced=True)` adds
one (the take sets a lock with no expiry; the reaper deletes it), so we can compare the three:
"""),
    code("""
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
"""),
    md("""
* **Timeout, no token check**: the stale finish is accepted, and the job **completes twice**.
* **Timeout with a token check**: now the 15-minute job **never completes**. Every run is taken back at
  10 minutes, before it can finish, and every late finish is rejected; the job goes round until the run stops
  after an hour. The token makes the timeout's mistake safe, but cannot make it right: only a timeout longer
  than the job, or a lease, lets it finish.
* **Lease, frozen worker**: the stale finish is rejected and the job completes **once**.

But look at the last column: the workers whose job was taken still did the work. If that work had effects
outside the queue (a row written, an email sent, a card charged), a token check on the *queue* comes too late to
stop them. That is Kleppmann's point about locks: a lease alone cannot stop a paused holder from acting on stale
ownership. The fix is a **fencing token**: a number that grows with every take, passed along with each write,
which the *downstream* system checks, refusing writes that carry an older number than one it has seen. The queue
can supply the number (the job's attempt count `ats`); the systems the job writes to must check it.

## 7. When the port is wrong

Two bugs that real ports have had, written as five-line policies. A wrong key prefix in the renewal call makes
every renewal fail; a sweep that never runs leaves dead workers' jobs hostage.
"""),
    code("""
from emqsim.protocol import SweepReply


class BrokenRenewal(LeasePolicy):
    \"\"\"Every renewal fails (e.g. it renews `bull:{q}:<id>:lock` while the lock is `emq:{q}:<id>:lock`).\"\"\"

    def renew(self, queue, held, now_ms):
        return [job for job, _ in held]


class BrokenSweep(LeasePolicy):
    \"\"\"The sweep never does anything.\"\"\"

    def sweep(self, queue, now_ms):
        return SweepReply(skipped=True)


broken = {
    "broken renewal, slow-alive": simulate(standard("slow-alive", duration=300.0), BrokenRenewal(30, 10, 5), seed=SEED),
    "broken sweep, fast-dead": simulate(standard("fast-dead", horizon=600.0), BrokenSweep(30, 10, 5), seed=SEED),
}
fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), layout="constrained")
for ax, (label, run) in zip(axes, broken.items()):
    plots.timeline(run, ax=ax, legend=False, title=f"{label}: {plots.verdict(run).text}")
"""),
    md("""
With broken renewals every job longer than one lease is taken from its live worker (and, past `max_stalled`,
failed). With a broken sweep the dead worker's job is never recovered. Both look fine on short jobs and healthy
workers, which is why tests need the slow-alive and fast-dead cases.

## Summary

| failure | what the lease does | mitigation |
|---|---|---|
| freeze longer than `L - B` | takes the live worker's job | keep pauses short (renew off the main loop), longer `L` |
| `k = floor(L/B)` renewals lost in a row | takes the live worker's job | shorter `B` (larger `k`) |
| event loop blocked longer than `L - B` | takes a live, *working* worker's job; it runs twice | lease > block + `B`, sandboxed processor or worker thread, yield |
| connection outage of `D` s | lapses iff the reconnect `R(D)` outlasts the lease, not after `k` beats | lease longer than `R(D)` |
| stale worker finishes late | token check rejects the finish | keep the token check in `moveToFinished` |
| stale worker writes elsewhere | nothing: a lease cannot stop it | fencing token checked downstream |
| renewal or sweep broken | false reclaims / hostages | test slow-alive and fast-dead cases |
"""),
]

# -------------------------------------------------------------------------------------------------------------
NB4 = [
    md("""
# Real systems on the same workload

Job systems differ mainly in which rule they use to find dead workers and in their defaults.
`emqsim.presets` encodes the defaults of several real systems, each with the source it comes from, as ready-made
policies. This notebook runs them all on the same workloads.

A caveat: a preset models the *reclaim rule* of a system on emqsim's Redis queue, not the whole system. SQS and
Pub/Sub, for instance, keep their timers on the server; here they become a reaper that scans every second.
"""),
    code(
        SETUP
        + """
from emqsim import lessons
from emqsim.presets import PRESETS, preset, presets_table
"""
    ),
    md("""
The presets, with their rule and the defaults each one models (in seconds):
"""),
    code("""
pd.DataFrame(presets_table())[["name", "system", "mechanism", "lease", "beat", "timeout", "scan", "source"]]
"""),
    *ask(
        "both",
        """
Real job systems ship with defaults: SQS a 30 s visibility timeout, Celery an hour, BullMQ a 30 s lock renewed
every 15 s. Which of the presets above handle **both** the slow-but-alive worker (a 15-minute job) and the
fast-but-dead one (killed 1 s into a one-minute job)?
""",
        """
# Your prediction, before you run: the names (column "name" above) of the presets that get both cases right
both_right = None  # e.g. ["bullmq", "sqs"], or [] for none
""",
    ),
    md("""
## The two test cases

The slow-but-alive worker (a 15-minute job) and the fast-but-dead worker (killed 1 s into a 60 s job) from
notebook 01, under each system's defaults:
"""),
    tag(
        code("""
rows = []
for name, p in PRESETS.items():
    row = {"preset": name, "rule": p.mechanism}
    for kind in ("slow-alive", "fast-dead"):
        run = simulate(standard(kind), p.policy(), seed=SEED)
        verdict = plots.verdict(run)
        row[kind] = ("ok: " if verdict.good else "WRONG: ") + verdict.text
        row[kind + " ok"] = verdict.good
    rows.append(row)
cases = pd.DataFrame(rows)
display(cases[["preset", "rule", "slow-alive", "fast-dead"]])
both = [r["preset"] for r in rows if r["slow-alive ok"] and r["fast-dead ok"]]
slow_wrong = [r["preset"] for r in rows if not r["slow-alive ok"]]
dead_wrong = [r["preset"] for r in rows if not r["fast-dead ok"]]
lease_based = [name for name, p in PRESETS.items() if isinstance(p.policy(), LeasePolicy)]
say(
    f"Both cases right: {', '.join(both)}. The live 15-minute job taken away: {', '.join(slow_wrong) or 'none'}. "
    f"The dead worker's job recovered late or never: {', '.join(dead_wrong) or 'none'}. "
    f"Of the lease-based presets ({', '.join(lease_based)}), "
    f"{', '.join(n for n in lease_based if n not in both) or 'none'} "
    "got a case wrong: a lease is only as good as the sweep that acts on it."
)
"""),
        "reveal:both",
    ),
    answer(
        "both",
        """
wrong_because = {
    r["preset"]: lessons.join(kind for kind in ("slow-alive", "fast-dead") if not r[kind + " ok"])
    for r in rows
}
guessed = both_right if isinstance(both_right, list | tuple | set) else []
named_wrong = [n for n in guessed if n in wrong_because and n not in both]
say(
    lessons.report(
        lessons.names(
            "presets right in both cases", "both_right", both_right, both,
            why=(
                f"no fixed timeout passes both: one short enough for the dead worker takes the live 15-minute job "
                f"back, one long enough for that job leaves the dead worker's job waiting"
                + (
                    "; " + "; ".join(f"{n} got {wrong_because[n]} wrong (table above)" for n in named_wrong) + "."
                    if named_wrong
                    else "."
                )
            ),
        ),
    )
)
""",
    ),
    *try_it(
        'explorer(column="slow-alive", rule="timeout", timeout=30, job=900)',
        """
a 30 s timeout (SQS's default) takes the 15-minute job back again and again; an hour (Celery's) leaves a dead
worker's job waiting that long (switch to the fast-but-dead worker and raise the timeout). No single timeout
gets both; the lease does (switch the rule). The tables below run each system's real defaults.
""",
    ),
    md("""
`echomq-code` is EchoMQ's Elixir code as written: its lease and renewal are BullMQ's, but its stalled-sweep call
passes the script arguments that do not match the script, so the sweep never recovers a job (docs/presets.md).
SQS's 30 s visibility timeout takes the live job again and again (and even the 60 s job of the fast-dead case,
once it runs on the surviving worker); Celery, Faktory and Oban wait for the dead one as long as their timeout.

Note that the timeout-based systems *could* pass the slow-alive case with a longer timeout, and the fast-dead one
with a shorter timeout, but not both: SQS's answer is `ChangeMessageVisibility`, which turns its timeout into a
lease if the worker calls it as a heartbeat.

## A realistic workload

The `production` scenario (its size is printed below): heavy-tailed job durations, random crashes with
restarts, short GC-like pauses, event loops blocked for a few seconds now and then, short connection outages.
Every preset sees the same jobs and the same faults (common random numbers).
"""),
    code("""
workload = standard("production", jobs=120)
REPLICATIONS = 2
say(
    f"`production`: {workload.workers} workers with {workload.concurrency} slots each, {workload.jobs} jobs "
    f"(median {workload.duration.median:g} s), {REPLICATIONS} replications per preset."
)
rows = []
for name, p in PRESETS.items():
    summaries = [summarize(simulate(workload, p.policy(), seed=SEED, replication=r)) for r in range(REPLICATIONS)]
    rows.append(aggregate(summaries, label=name))
table = to_frame(rows)
table[["label", "false_reclaims_per_job", "detection_latency_mean_s", "detection_latency_pooled_max_s",
       "crashes_undetected_total", "duplicate_completions_total", "redis_requests_per_s"]].round(3)
"""),
    code("""
import math

from emqsim.stats import DEPRECATED_KEYS

NEVER = workload.horizon  # a system that never detected a crash within the run is drawn at this ceiling
# A crash still undetected when the run stops counts with its time so far, so a mean over crashes some of which
# were never detected is only a lower bound; a system that detected none has no latency to draw at all.
never = [r["label"] for r in rows if not field(r, "detections")]
bounded = [r["label"] for r in rows if field(r, "censored") and r["label"] not in never]
# The ceiling replaces the latency under its name and under its older alias (which the plot may still read).
ceiling = {FIELDS["latency"]: NEVER, FIELDS["latency_ci"]: None}
ceiling |= {old: ceiling[new] for old, new in DEPRECATED_KEYS.items() if new in ceiling}
drawn = [{**r, **ceiling} if r["label"] in never else r for r in rows]
ax = plots.frontier(
    drawn,
    annotate_points=True,
    title="Real defaults on one workload: false reclaims against detection latency",
)
ax.axvline(NEVER, color="grey", linestyle="--")
ax.text(NEVER, 0.98, " never detected ", transform=ax.get_xaxis_transform(), ha="right", va="top", color="grey")
ax.figure.set_size_inches(9, 5.5)
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # beside the axes: it covers no point or label
lessons.spread_labels(ax)  # systems at the same spot get a stack of names, not one smudge
say(
    "Drawn at the never-detected ceiling (no crash recovered within the run): "
    + (", ".join(never) if never else "none")
    + ". Some crashes still undetected at the end, so the point is a lower bound: "
    + (", ".join(bounded) if bounded else "none")
    + "."
)
"""),
    md("""
(Every preset is a point here: the orange timeout *curve* only appears for plain `TimeoutPolicy` rows. A system
that never recovered a crashed worker's job within the run has no mean latency: it sits on the dashed ceiling.)
"""),
    code("""
by_label = {r["label"]: r for r in rows}
working = [n for n in both if n in by_label]
taking = [n for n in working if field(by_label[n], "false_rate") > 0]
taken = ", ".join(f"{n} {field(by_label[n], 'false_rate'):.3f}" for n in taking)
say(
    f"On this workload the presets that got both test cases right recover a crash in "
    f"{min(field(by_label[n], 'latency') for n in working):.0f} to "
    f"{max(field(by_label[n], 'latency') for n in working):.0f} s on average. "
    + (
        f"Even they take a live job now and then: {taken} "
        "false reclaims per job: a lease takes a live job whenever its renewals stop for longer than it allows "
        "(a freeze, a blocked event loop, an outage: notebook 03). "
        if taking
        else "None of them took a live job. "
    )
    + f"SQS takes {field(by_label['sqs'], 'false_rate'):.2f} live jobs per job."
)
"""),
    md("""
## What if you change the defaults?

`preset(name, **overrides)` keeps a system's derived rules: `preset("bullmq", lease=10)` also shortens the
LockManager's tick to a quarter of the lease. Two experiments:

* Celery with a 10-minute visibility timeout instead of an hour;
* BullMQ with a 10 s lock and a 10 s stalled interval.
"""),
    code("""
variants = {
    "celery-redis (1 h)": preset("celery-redis"),
    "celery-redis, 10 min": preset("celery-redis", timeout=600),
    "bullmq (30 s lock, 30 s sweep)": preset("bullmq"),
    "bullmq, 10 s lock, 10 s sweep": preset("bullmq", lease=10, scan=10),
}
rows = []
for label, policy in variants.items():
    summaries = [summarize(simulate(workload, policy, seed=SEED, replication=r)) for r in range(REPLICATIONS)]
    rows.append(aggregate(summaries, label=label))
display(
    to_frame(rows)[["label", "false_reclaims_per_job", "detection_latency_mean_s", "duplicate_completions_total",
                    "redis_requests_per_s"]].round(3)
)
v = {r["label"]: r for r in rows}
c1, c10 = v["celery-redis (1 h)"], v["celery-redis, 10 min"]
b30, b10 = v["bullmq (30 s lock, 30 s sweep)"], v["bullmq, 10 s lock, 10 s sweep"]
say(
    f"Celery at 10 minutes recovers in {field(c10, 'latency'):.0f} s on average instead of "
    f"{field(c1, 'latency'):.0f} s" + (" (a lower bound: some crashes were never recovered)" if field(c1, "censored") else "")
    + f", but the long jobs now run twice: {c10['duplicate_completions_total']} duplicate completions, "
    f"{field(c10, 'false_rate'):.3f} false "
    f"reclaims per job. BullMQ with a 10 s lock recovers in {field(b10, 'latency'):.0f} s instead of "
    f"{field(b30, 'latency'):.0f} s, for {b10['redis_requests_per_s']:.1f} Redis requests per second instead of "
    f"{b30['redis_requests_per_s']:.1f}, with {field(b10, 'false_rate'):.3f} false reclaims per job "
    f"(30 s lock: {field(b30, 'false_rate'):.3f})."
)
"""),
    md("""
## Summary

* On the same workload, the lease-and-heartbeat systems with a working sweep are the only ones that leave
  neither live jobs taken nor dead workers' jobs waiting for long; the lease still takes a live job whose event
  loop blocks longer than it allows (notebook 03).
* The timeout-based defaults are tuned for one side of the trade-off: SQS for quick recovery (and it takes long
  jobs away unless the worker extends the visibility timeout), Celery, Faktory and Oban for long jobs (and a
  crashed worker's job waits 30 to 60 minutes).
* Any of them can be re-tuned with `preset(name, **overrides)` and compared with the same seeds.
"""),
]

# -------------------------------------------------------------------------------------------------------------
NB5 = [
    md("""
# The simulator against the real thing: a lease on a real Redis

Everything so far came from a simulation. Is the model right? `emqsim.live` runs **the same protocol** on a real
`redis-server`: the take, the token-checked renewal, the finish and the two-phase sweep as Lua scripts
(EVALSHA), real worker processes with one heartbeat timer each, and real faults: a crash is `SIGKILL`. Time is
scaled down (by default 1 scenario second = 20 ms), and the records come back in the scenario's seconds, so the
same statistics and plots work on both.

Here we kill workers at random moments into their jobs, many times, in the simulator and on the real Redis, and
overlay the two detection-latency distributions. The live part needs `redis-server`
(`apt-get install redis-server`); without it the notebook shows the simulation only.
"""),
    code(SETUP),
    *ask(
        "live",
        """
The simulator says how long a crashed worker's job waits before it is back in the queue, with a 30 s lease
renewed every 10 s (notebook 02 checked it against the closed form). Does a real Redis with real processes and
`SIGKILL` agree, and how closely can we say so?
""",
        """
# Your prediction, before you run: the live mean detection latency minus the simulated one, in seconds
live_minus_simulated = None  # e.g. 0.5 (live slower) or -0.5 (live faster)
""",
    ),
    code("""
import shutil
import time

from scipy import stats as st

from emqsim.analytic import lease_detection

LEASE, BEAT, SCAN = 30.0, 10.0, 5.0
MARGIN = 1.0  # seconds: live and simulated "agree" if their mean detection latencies differ by less than this
WORKERS = 12  # each run: this many workers take one job each and are killed 1 to 20 s into it
LIVE_RUNS = 10  # each takes several seconds of wall time (the live cell prints how long)
SIM_RUNS = 100
policy = LeasePolicy(LEASE, BEAT, SCAN)
crashes = Scenario(
    name="crashes",
    workers=WORKERS,
    jobs=WORKERS,
    duration=Fixed(60.0),
    faults=tuple(Crash(job=j, after=Uniform(1.0, 20.0), restart_after=2.0) for j in range(WORKERS)),
    horizon=400.0,
)
have_redis = shutil.which("redis-server") is not None
print("redis-server found" if have_redis else "redis-server not found: simulation only (apt-get install redis-server)")
"""),
    code("""
def latencies(runs):
    return np.array([a.detection_latency for r in runs for a in r.attempts if a.detection_latency is not None])


say(
    f"{WORKERS} workers each take a {crashes.duration.mean():g} s job and die 1 to 20 s into it; each is "
    "replaced 2 s later. The surviving and replacement workers run BullMQ's stalled sweep every "
    f"{SCAN:g} s. First the simulation, {SIM_RUNS} replications:"
)
sim_runs = [simulate(crashes, policy, seed=SEED, replication=r) for r in range(SIM_RUNS)]
simulated = latencies(sim_runs)
theory = lease_detection(LEASE, BEAT, SCAN)
print(f"simulated: {len(simulated)} detections, mean {simulated.mean():.1f} s, range [{simulated.min():.1f}, {simulated.max():.1f}] s")
print(f"theory bounds for a live sweeper: [{theory.lo:.1f}, {theory.hi:.1f}] s")
"""),
    code("""
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
"""),
    tag(
        code("""
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
    \"\"\"One mean detection latency per run: the run, not the crash, is the independent unit.\"\"\"
    return np.array([latencies([r]).mean() for r in runs if len(latencies([r]))])


def half_width(n, sd_live, var_sim, n_sim):
    \"\"\"The 90% interval's half-width for `n` live runs of spread `sd_live` (Welch's t).\"\"\"
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
    agree = -MARGIN < low and high < MARGIN
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
"""),
        "reveal:live",
    ),
    answer(
        "live",
        """
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
""",
    ),
    md("""
**Reading it.** Agreement is a claim that needs evidence of its own: a test that fails to find a difference
says nothing when the samples are small. So the comparison above asks whether the difference of the means is
*shown* to be small: its 90% confidence interval must lie inside a margin of ±1 s chosen in advance (an
equivalence test, TOST). The run is the unit (crashes within one run share the sweep timers). Where the two
curves differ, the live run can only add what real processes add: a few milliseconds of timer jitter and round
trips, scaled up by the time scale (1 ms real = 0.05 scenario seconds). The live part uses real time, so its
numbers change from one execution to the next.

To point the live mode at your own Redis: `python -m emqsim live --redis redis://host:6379/0 --scenario fast-dead`
(it refuses a database that holds keys outside its own prefix unless you pass `--allow-foreign-keys`). See
`docs/live.md`.
"""),
    *try_it(
        'explorer(column="fast-dead", rule="lease", lease=30, beat=10)',
        """
in the simulator the recovery comes one lease after the last heartbeat plus the wait for the next sweep; move
the beat and the lease and see the range [L - B, L + S] move. The live run above checked that real processes
land in the same place.
""",
    ),
]


NOTEBOOKS = {
    "01-timeout-vs-lease.ipynb": NB1,
    "02-tuning.ipynb": NB2,
    "03-where-leases-fail.ipynb": NB3,
    "04-real-systems.ipynb": NB4,
    "05-live-vs-simulated.ipynb": NB5,
    "06-exact-worst-cases-and-tuning.ipynb": run_path(str(HERE / "_build_06.py"))["cells"](globals()),
}


def build(folder: Path = HERE) -> list[Path]:
    paths = []
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        for i, cell in enumerate(nb.cells):
            cell.id = f"{name[:2]}-{i:02d}"  # stable ids: rebuilding an unchanged notebook changes no bytes
        path = folder / name
        nbformat.write(nb, path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
