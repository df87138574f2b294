"""Each plot function draws the artists it promises, on small runs and tables; savefig is byte-stable."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.collections import LineCollection, PatchCollection
from matplotlib.text import Annotation

from emqsim import Crash, LeasePolicy, Scenario, TimeoutPolicy, Uniform, plots, simulate, standard
from emqsim.stats import aggregate, summarize


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def runs():
    return {
        ("slow-alive", "timeout"): simulate(standard("slow-alive"), TimeoutPolicy(600, 5), seed=1),
        ("slow-alive", "lease"): simulate(
            standard("slow-alive", duration=120.0), LeasePolicy(30, 10), seed=1
        ),
        ("fast-dead", "timeout"): simulate(standard("fast-dead"), TimeoutPolicy(600, 5), seed=1),
        ("fast-dead", "lease"): simulate(standard("fast-dead"), LeasePolicy(30, 10), seed=1),
    }


def legend_labels(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def test_timeline_dead_worker_under_a_lease(runs):
    ax = plots.timeline(runs[("fast-dead", "lease")])
    labels = legend_labels(ax)
    for expected in (
        "job running",
        "job held by a dead worker",
        "worker dead",
        "lock alive (ends at expiry)",
        "heartbeat renewal",
        "sweep",
        "worker crashes",
        "reclaimed: worker was dead (right)",
        "job runs again elsewhere",
        "finish accepted",
    ):
        assert expected in labels
    assert "reclaimed: worker was alive (wrong)" not in labels
    assert any(isinstance(c, PatchCollection) for c in ax.collections)
    ticks = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert ticks and len(ticks[0].get_segments()) >= 5  # heartbeat renewals of the second run
    assert any(isinstance(t, Annotation) for t in ax.texts)  # the arrow to the job's next run
    assert [t.get_text() for t in ax.get_yticklabels()] == ["worker 0", "worker 1"]
    assert ax.get_xlabel() == "time (s)"
    assert re.search(r"recovered \d+ s after the crash$", ax.get_title(loc="left"))


def test_timeline_slow_worker_under_a_timeout(runs):
    ax = plots.timeline(runs[("slow-alive", "timeout")])
    labels = legend_labels(ax)
    assert "reclaimed: worker was alive (wrong)" in labels
    assert "finish accepted again (duplicate)" in labels
    assert "timeout clock running" in labels
    assert "heartbeat renewal" not in labels


def test_timeline_frozen_worker_shows_refused_renewal_and_rejected_finish():
    run = simulate(standard("frozen"), LeasePolicy(30, 10), seed=1)
    ax = plots.timeline(run, legend=True, title="frozen")
    labels = legend_labels(ax)
    for expected in ("frozen", "renewal refused", "late finish rejected (token check)"):
        assert expected in labels
    assert ax.get_title(loc="left") == "frozen"


def test_timeline_many_workers_window_and_job_filter():
    scenario = Scenario(
        workers=8,
        concurrency=2,
        jobs=30,
        duration=Uniform(20, 60),
        arrival_rate=0.5,
        faults=(Crash(worker=3, at=30.0, restart_after=2.0),),
        horizon=400.0,
    )
    run = simulate(scenario, LeasePolicy(10, 3, 2), seed=3)
    ax = plots.timeline(run)
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert names[:8] == [f"worker {i}" for i in range(8)]
    assert "worker 8 (restart)" in names
    ax2 = plots.timeline(run, window=(20.0, 80.0), jobs=["0", "1", "2"], legend=False)
    assert ax2.get_xlim()[0] == 20.0
    assert ax2.get_legend() is None
    assert len(ax2.get_yticklabels()) <= 8


def test_verdicts(runs):
    v = plots.verdict(runs[("slow-alive", "timeout")])
    assert not v.good and re.match(r"wrongly reclaimed at 10:\d\d, ran twice", v.text)
    assert "completed twice" in v.text
    v = plots.verdict(runs[("fast-dead", "lease")])
    assert v.good and re.fullmatch(r"recovered (29|30|31|32) s after the crash", v.text)
    v = plots.verdict(runs[("fast-dead", "timeout")])
    assert not v.good and v.text.startswith("recovered 60")
    v = plots.verdict(runs[("slow-alive", "lease")])
    assert v.good and v.text.startswith("never reclaimed, finished once at 2:00")
    assert plots.clock(602.6) == "10:03" and plots.clock(3725) == "1:02:05"


def test_two_columns(runs):
    fig = plots.two_columns(runs, title="finding")
    axes = fig.get_axes()
    assert len(axes) == 4
    titles = [ax.get_title(loc="left") for ax in axes]
    assert titles[0].startswith("✗ wrongly reclaimed")
    assert re.fullmatch(r"✓ recovered \d\d s after the crash", titles[3])
    assert fig.legends and len(fig.legends[0].get_texts()) >= 8
    assert fig._suptitle.get_text() == "finding"


def _rows():
    scenario = standard("fast-dead", die_after=Uniform(0, 30), duration=60.0)
    rows = []
    for policy in (TimeoutPolicy(30, 5), TimeoutPolicy(90, 5), LeasePolicy(30, 10, 5), LeasePolicy(10, 3, 2)):
        rows.append(
            aggregate([summarize(simulate(scenario, policy, seed=5, replication=r)) for r in range(3)])
        )
    return rows


def test_frontier():
    rows = _rows()
    ax = plots.frontier(rows, title="finding")
    labels = legend_labels(ax)
    assert labels[0].startswith("fixed timeout")
    assert "lease 30 s, beat 10 s, scan 5 s" in labels and "lease 10 s, beat 3 s, scan 2 s" in labels
    curve = ax.lines[0]
    assert len(curve.get_xdata()) == 2  # two timeouts on one curve
    assert ax.get_xscale() == "log" and ax.get_yscale() == "symlog"
    assert "(s)" in ax.get_xlabel()
    assert ax.get_title(loc="left") == "finding"


def test_latency_cdf_with_bounds_and_theory():
    samples = {"lease": [21.0, 25.0, 30.0, 33.0], "timeout": [80.0, 100.0]}
    ax = plots.latency_cdf(
        samples,
        bounds={"lease": (20, 35)},
        means={"lease": 27.5},
        theory={"lease": lambda x: (x > 27.5).astype(float)},
    )
    labels = legend_labels(ax)
    assert "lease (n=4)" in labels and "timeout (n=2)" in labels
    assert {"theoretical range", "theoretical CDF", "theoretical mean"} <= set(labels)
    vlines = [ln for ln in ax.lines if list(ln.get_xdata()) in ([20, 20], [35, 35])]
    assert len(vlines) == 2
    assert ax.get_ylim() == (0.0, 1.0)


def test_heatmap_marks_missing_cells():
    rows = [
        {"lease": 10.0, "beat": 2.0, "detection_latency_mean_s": 11.0, "redis_requests_per_s": 2.0},
        {"lease": 30.0, "beat": 2.0, "detection_latency_mean_s": 31.0, "redis_requests_per_s": 2.1},
        {"lease": 30.0, "beat": 10.0, "detection_latency_mean_s": 27.0, "redis_requests_per_s": 0.5},
    ]
    fig = plots.heatmap(rows, title="finding")
    panels = [ax for ax in fig.get_axes() if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    assert len(fig.get_axes()) == 4  # two colour bars
    cell_texts = [t.get_text() for t in panels[0].texts]
    assert cell_texts == ["11", "31", "27"]
    assert panels[0].get_xlabel() == "beat period (s)" and panels[0].get_ylabel() == "lease (s)"


def test_freeze_curve_groups_and_theory():
    rows = [
        {
            "label": "a",
            "freeze": f,
            "false_reclaims_per_job": r,
            "false_reclaims_per_job_ci": [0, min(1, r + 0.1)],
        }
        for f, r in ((0, 0.0), (20, 0.0), (30, 1.0))
    ] + [
        {"label": "b", "freeze": f, "false_reclaims_per_job": r, "false_reclaims_per_job_ci": [0, 0.2]}
        for f, r in ((0, 0.0), (30, 0.1))
    ]
    ax = plots.freeze_curve(rows, theory={"a": ([0, 20, 30], [0, 0, 1])}, marks={"L": 30})
    labels = legend_labels(ax)
    assert labels == ["a", "b", "theory"]
    assert ax.get_xlabel() == "freeze length (s)"


def test_savefig_is_deterministic_and_leaves_unchanged_files_alone(tmp_path, runs):
    ax = plots.timeline(runs[("fast-dead", "lease")])
    fig = ax.figure
    paths = [plots.savefig(fig, tmp_path / "a.svg"), plots.savefig(fig, tmp_path / "a.png")]
    first = [p.read_bytes() for p in paths]
    mtimes = [p.stat().st_mtime_ns for p in paths]
    again = [plots.savefig(fig, tmp_path / "b.svg"), plots.savefig(fig, tmp_path / "b.png")]
    assert [p.read_bytes() for p in again] == first
    plots.savefig(fig, tmp_path / "a.svg")
    assert paths[0].stat().st_mtime_ns == mtimes[0]
    svg = first[0].decode()
    assert "<dc:date>" not in svg and "Matplotlib v" not in svg
    with pytest.raises(ValueError):
        plots.savefig(fig, tmp_path / "a.jpg")


def test_rows_under_deprecated_names_still_plot_during_0_3():
    """A row that gives a metric only under its 0.2 name (hand-written, or from a 0.2 file) draws the same."""
    from emqsim.plots.common import metric
    from emqsim.stats import DEPRECATED_KEYS

    current = {"lease": 30.0, "beat": 10.0, "detection_latency_mean_s": 27.0, "redis_requests_per_s": 0.5}
    old = {next((o for o, n in DEPRECATED_KEYS.items() if n == k), k): v for k, v in current.items()}
    assert "detection_latency_mean" in old and "redis_commands_per_s" in old
    assert metric(old, "detection_latency_mean_s") == metric(current, "detection_latency_mean_s") == 27.0
    texts = []
    for rows, labels in (
        ([current], {"redis_requests_per_s": "req/s"}),
        ([old], {"redis_commands_per_s": "req/s"}),
    ):
        fig = plots.heatmap(rows, labels=labels)
        texts.append(
            [t.get_text() for ax in fig.get_axes() for t in ax.texts]
            + [a.get_title(loc="left") for a in fig.get_axes()]
        )
    assert texts[0] == texts[1] and "req/s" in texts[0] and "27" in texts[0]
