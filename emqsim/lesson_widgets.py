"""The lessons' explorer: controls for one small run and its timeline, written once for every notebook.

Each lesson in notebooks/ ends with `explorer(...)` (its "Try it" section): two workers, one job, the rule
(fixed timeout or lease + heartbeat) and its settings, a freeze, a loss rate and the job's length; every change
re-runs the simulation and redraws its timeline. This is a front end (like `emqsim.lessons` and
`emqsim.plots`): nothing in the simulator or the features imports it. ipywidgets and IPython come with the
`notebooks` extra, so they are imported only when a lesson draws the controls.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Literal, cast

from matplotlib.figure import Figure

from emqsim import plots
from emqsim.engine import simulate
from emqsim.errors import ConfigError
from emqsim.faults import Freeze, Network
from emqsim.policies import LeasePolicy, ReclaimPolicy, TimeoutPolicy
from emqsim.scenario import Scenario, standard

SEED = 20240  # the lessons' seed: the explorer's runs are reproducible, like every other run in them

# The summary fields the lessons' prose quotes, by short names: a renamed field in emqsim.stats is one edit here.
FIELDS = {
    "latency": "detection_latency_mean_s",
    "latency_ci": "detection_latency_mean_s_ci",
    "latency_min": "detection_latency_pooled_min_s",
    "latency_max": "detection_latency_pooled_max_s",
    "false_rate": "false_reclaims_per_job",
    "detections": "detections_total",
    "censored": "detection_latency_censored",
}


def field(row: Any, name: str) -> Any:
    """`row`'s value of the summary field a lesson calls `name` (FIELDS)."""
    return row[FIELDS[name]]


def say(text: str) -> None:
    """Show `text` as Markdown: the numbers quoted in a lesson's prose come from its run's output."""
    from IPython.display import Markdown, display

    display(Markdown(text))


def small_run(column: str, rule: str, *, lease: float, beat: float, timeout: float, freeze: float, loss: float,
              job: float) -> tuple[Scenario, ReclaimPolicy]:  # fmt: skip
    """The explorer's world for one setting of its controls: the scenario (two workers, one job of `job`
    seconds, optionally frozen for `freeze` seconds 5 s into it, heartbeats lost at rate `loss`) and the
    policy. Raises ConfigError or ValueError for a setting the policy refuses (say a beat longer than the
    lease)."""
    if column == "slow-alive":
        scenario = standard("slow-alive", duration=job, horizon=3 * job + 300)
    else:
        scenario = standard("fast-dead", die_after=1.0, duration=job, horizon=3 * job + 1500)
    if freeze:
        pause = Freeze(job=0, after=min(5.0, job / 2), duration=float(freeze))
        scenario = scenario.with_(faults=scenario.faults + (pause,))
    scenario = scenario.with_(network=Network(loss=loss))
    policy: ReclaimPolicy
    if rule == "timeout":
        policy = TimeoutPolicy(timeout=timeout, scan=5)
    else:
        policy = LeasePolicy(lease=lease, beat=beat, scan=5)
    return scenario, policy


def explorer(
    column: Literal["slow-alive", "fast-dead"] = "fast-dead",
    rule: Literal["timeout", "lease"] = "lease",
    lease: int = 30,
    beat: float = 10,
    timeout: int = 600,
    freeze: int = 0,
    loss: float = 0.0,
    job: int = 60,
    seed: int = SEED,
) -> Any:
    """Controls for one small run (two workers, one job) and its timeline, redrawn on every change: the
    widget every lesson ends with. The arguments are the controls' first values; the result is an ipywidgets
    VBox (a notebook shows it when it is a cell's last value)."""
    import ipywidgets as widgets  # type: ignore[import-untyped]  # no type hints
    import matplotlib.pyplot as plt
    from IPython.display import display

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
    }  # fmt: skip
    out, status = widgets.Output(), widgets.Label()

    def redraw(_: object = None) -> None:
        started = time.perf_counter()
        with out:
            out.clear_output(wait=True)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    scenario, policy = small_run(
                        w["column"].value, w["rule"].value, lease=w["lease"].value, beat=w["beat"].value,
                        timeout=w["timeout"].value, freeze=w["freeze"].value, loss=w["loss"].value,
                        job=float(w["job"].value),
                    )  # fmt: skip
                    run = simulate(scenario, policy, seed=seed)
            except (ConfigError, ValueError) as exc:
                status.value = f"not a valid setting: {exc}"
                return
            figure = cast(Figure, plots.timeline(run).figure)
            figure.set_dpi(72)  # a screen-sized image: the redraw stays fast
            display(figure)
            plt.close(figure)
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
