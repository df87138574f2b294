"""Regenerate every figure from fixed seeds (`python -m emqsim figures`): timelines, the two columns, the
frontier, latency CDFs, the (lease, beat) heatmap and the freeze curve, as SVG (and PNG for the key ones).

Every number comes from `emqsim.simulate` and `emqsim.stats`; the same code and seeds give byte-identical
files. `quick=True` runs fewer replications on smaller grids (for tests).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from emqsim import analytic, plots
from emqsim.analytic import lease_latency_cdf, timeout_latency_cdf
from emqsim.distributions import Fixed, Uniform
from emqsim.engine import simulate
from emqsim.faults import Crash
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, RenewalRule, TimeoutPolicy
from emqsim.pools import batches, gather, owned_pool, submit_all
from emqsim.records import Run
from emqsim.scenario import Scenario, standard
from emqsim.stats import RunSummary, aggregate, summarize

__all__ = [
    "SEED",
    "crash_scenario",
    "generate_all",
    "lease_latency_cdf",
    "timeout_latency_cdf",
    "two_column_runs",
]

SEED = 20240
KEY_FIGURES = ("two-columns", "timeline-fast-dead-lease", "frontier", "latency-cdf", "freeze-curve")


# -- runs ---------------------------------------------------------------------------------------------------
def crash_scenario(
    jobs: int = 40, workers: int = 4, die_within: float = 50.0, duration: float = 60.0
) -> Scenario:
    """Every job's first run dies d ~ U(0, die_within) s in; a replacement worker starts 1 s later. Each job
    gives one detection-latency sample."""
    return Scenario(
        name="crashes",
        workers=workers,
        jobs=jobs,
        duration=Fixed(duration),
        faults=tuple(Crash(job=k, after=Uniform(0.0, die_within), restart_after=1.0) for k in range(jobs)),
        horizon=7200.0,
    )


def _summary(task: tuple[Scenario, ReclaimPolicy, int, int]) -> RunSummary:
    scenario, policy, seed, rep = task
    return summarize(simulate(scenario, policy, seed, rep, record_locks=False))


def _summaries(tasks: Sequence[tuple[Scenario, ReclaimPolicy, int, int]]) -> list[RunSummary]:
    return [_summary(t) for t in tasks]


def _map(tasks: Sequence[tuple[Scenario, ReclaimPolicy, int, int]], processes: int) -> list[RunSummary]:
    if processes <= 1 or len(tasks) < 8:
        return [_summary(t) for t in tasks]
    with owned_pool(processes) as pool:
        done = gather(submit_all(pool, _summaries, batches(tasks, parts=4 * processes)))
    return [summary for batch in done for summary in batch]


@dataclass
class _Cells:
    """A batch of (scenario, policy, extra) cells run over replications in one pool."""

    reps: int
    seed: int = SEED
    cells: list[tuple[Scenario, ReclaimPolicy, dict[str, Any]]] = field(default_factory=list)

    def add(self, scenario: Scenario, policy: ReclaimPolicy, **extra: Any) -> None:
        self.cells.append((scenario, policy, extra))

    def run(self, processes: int) -> list[tuple[dict[str, Any], list[RunSummary]]]:
        tasks = [(sc, pol, self.seed, r) for sc, pol, _ in self.cells for r in range(self.reps)]
        flat = _map(tasks, processes)
        out = []
        for i, (_, _, extra) in enumerate(self.cells):
            chunk = flat[i * self.reps : (i + 1) * self.reps]
            out.append((aggregate(chunk, **extra), chunk))
        return out


def two_column_runs(seed: int = SEED) -> dict[tuple[str, str], Run]:
    """The seed's story: a slow-but-alive and a fast-but-dead worker under a 10-minute timeout and a 30 s lease
    renewed every 10 s."""
    rules = {"timeout": TimeoutPolicy(600, 5), "lease": LeasePolicy(30, 10, 5)}
    return {
        (kind, rule): simulate(standard(kind), policy, seed=seed)
        for kind in ("slow-alive", "fast-dead")
        for rule, policy in rules.items()
    }


# -- figures ------------------------------------------------------------------------------------------------
def _save(fig: mpl.figure.Figure | mpl.figure.SubFigure, out: Path, name: str, png: bool) -> list[Path]:
    fig = fig if isinstance(fig, mpl.figure.Figure) else fig.figure
    paths = [plots.savefig(fig, out / f"{name}.svg")]
    if png:
        paths.append(plots.savefig(fig, out / f"{name}.png", dpi=110))
    plt.close(fig)
    return paths


def _timelines(out: Path, quick: bool) -> list[Path]:
    """Single-run timelines; each title states what happened (its verdict) in that run."""
    examples: list[tuple[str, Run, str]] = [
        (
            "timeline-fast-dead-lease",
            simulate(standard("fast-dead"), LeasePolicy(30, 10, 5), seed=SEED),
            "A dead worker's lease runs out, and its job comes back: {}",
        ),
        (
            "timeline-slow-alive-timeout",
            simulate(standard("slow-alive"), TimeoutPolicy(600, 5), seed=SEED),
            "A 10-minute timeout on a live 15-minute job: {}",
        ),
        (
            "timeline-frozen-lease",
            simulate(standard("frozen", freeze_for=45.0), LeasePolicy(30, 10, 5), seed=SEED),
            "Frozen 45 s under a 30 s lease: {}",
        ),
    ]
    if not quick:
        lossy = standard("flaky-network", loss=0.4, jobs=2, duration=240.0, workers=3)
        fleet = Scenario(
            name="fleet",
            workers=4,
            concurrency=2,
            jobs=14,
            duration=Uniform(40.0, 120.0),
            faults=(Crash(worker=1, at=60.0, restart_after=5.0),),
            arrival_rate=0.12,
            horizon=600.0,
        )
        examples += [
            (
                "timeline-lost-renewals",
                simulate(lossy, LeasePolicy(30, 10, 5), seed=SEED),
                "40% of renewals lost, nobody dead: {}",
            ),
            (
                "timeline-fleet",
                simulate(fleet, LeasePolicy(30, 10, 5), seed=SEED),
                "Four workers with two slots each; worker 1 crashes at 60 s: {}",
            ),
        ]
    paths: list[Path] = []
    for name, run, title in examples:
        ax = plots.timeline(run, title=title.format(plots.verdict(run).text))
        paths += _save(ax.figure, out, name, name in KEY_FIGURES)
    return paths


def _two_columns(out: Path) -> list[Path]:
    fig = plots.two_columns(
        two_column_runs(),
        title="A fixed timeout cannot tell slow from dead: it takes the live job and waits 10 minutes on the "
        "dead one.\nA lease renewed by a heartbeat gets both right.",
    )
    return _save(fig, out, "two-columns", True)


def _frontier(out: Path, quick: bool, processes: int) -> list[Path]:
    # The production scenario of the default sweep, its replications and seed (`python -m emqsim sweep`), so
    # the figure's points are the sweep's numbers; the caption is written from the rows drawn.
    scenario = standard("production", jobs=60) if quick else standard("production")
    timeouts = (30, 120, 600) if quick else (30, 60, 120, 300, 600, 1800)
    leases = ((30, 10, 5),) if quick else ((10, 3, 2), (30, 10, 5), (60, 20, 10))
    cells = _Cells(reps=1 if quick else 30, seed=0)
    for t in timeouts:
        cells.add(scenario, TimeoutPolicy(t, 5))
    for lease, beat, scan in leases:
        cells.add(scenario, LeasePolicy(lease, beat, scan))
    if not quick:
        from emqsim.presets import preset

        cells.add(scenario, preset("bullmq"), label="BullMQ defaults (lease 30 s, sweep 30 s)")
    rows = [row for row, _ in cells.run(processes)]
    fig, ax = plt.subplots(figsize=(8.5, 5.4), layout="constrained")
    plots.frontier(
        rows,
        ax=ax,
        title="Leases detect crashes in about one lease, with false reclaims only from the rare pause\n"
        "longer than the lease; a timeout trades one failure for the other",
    )
    ax.annotate(frontier_caption(rows, cells.seed), xy=(0, -0.13), xycoords="axes fraction", fontsize=7.5,
                color="#555555", va="top")  # fmt: skip
    return _save(fig, out, "frontier", True)


def frontier_caption(rows: list[dict[str, Any]], seed: int) -> str:
    """What the frontier figure's rows are, read from the rows themselves."""
    scenarios = sorted({r["scenario"] for r in rows})
    reps = sorted({r["replications"] for r in rows})
    jobs = sorted({r["jobs_total"] // r["replications"] for r in rows})
    if len(scenarios) != 1 or len(reps) != 1 or len(jobs) != 1:
        raise ValueError(f"frontier rows mix scenarios/replications/jobs: {scenarios} {reps} {jobs}")
    return (
        f"{scenarios[0]} workload: {jobs[0]} jobs per run, log-normal durations (median 20 s), crashes, GC "
        f"pauses, blocked event loops, connection outages;\n{reps[0]} replication{'s' if reps[0] != 1 else ''} per point, seed {seed}, 95% intervals"
    )


def _latency_cdf(out: Path, quick: bool, processes: int) -> list[Path]:
    die_within = 50.0
    scenario = crash_scenario(jobs=20 if quick else 40, die_within=die_within)
    setups: dict[str, tuple[str, float, Any, float]] = {
        "lease 10 s, beat 3 s, sweep 2 s": ("lease", 10, 3, 2),
        "lease 30 s, beat 10 s, sweep 5 s": ("lease", 30, 10, 5),
        "timeout 120 s, scan 5 s": ("timeout", 120, None, 5),
    }
    cells = _Cells(reps=1 if quick else 5)
    for kind, a, b, s in setups.values():
        cells.add(scenario, LeasePolicy(a, b, s) if kind == "lease" else TimeoutPolicy(a, s))
    results = cells.run(processes)
    samples, bounds, means, theory = {}, {}, {}, {}
    for label, (_, chunk), (kind, a, b, s) in zip(setups, results, setups.values(), strict=True):
        samples[label] = [x for summary in chunk for x in summary.detection_latencies]
        if kind == "lease":
            exact = analytic.lease_detection(a, b, s)
            bounds[label] = (round(exact.lo, 1), round(exact.hi, 1))
            means[label] = exact.mean
            theory[label] = lease_latency_cdf(a, b, s)
        else:
            late, early = analytic.timeout_detection(a, s, die_within), analytic.timeout_detection(a, s, 0.0)
            bounds[label] = (round(late.lo, 1), round(early.hi, 1))
            means[label] = analytic.timeout_detection(a, s, die_within / 2).mean
            theory[label] = timeout_latency_cdf(a, s, die_within)
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    plots.latency_cdf(
        samples,
        ax=ax,
        legend_loc="outside",
        bounds=bounds,
        means=means,
        theory=theory,
        title="A lease bounds detection to about one lease, whatever the job;\n"
        "a timeout's depends on how far into the job the worker died",
    )
    ax.annotate(
        f"each job's first run dies U(0, {die_within:g}) s into a 60 s job; "
        "shaded: range, mark: mean (emqsim.analytic);\n"
        "dotted: basic-model CDF L − U(0, B) + U(0, S) (timeout: T − d + U(0, S))",
        xy=(0, -0.14),
        xycoords="axes fraction",
        fontsize=7.5,
        color="#555555",
        va="top",
    )
    return _save(fig, out, "latency-cdf", True)


def _heatmap(out: Path, quick: bool, processes: int) -> list[Path]:
    scenario = crash_scenario(jobs=10 if quick else 40)
    leases = (5, 30) if quick else (5, 10, 20, 30, 60)
    beats = (1, 2) if quick else (1, 2, 5, 10, 20)
    cells = _Cells(reps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LeaseWarning)
        for lease in leases:
            for beat in beats:
                if lease / beat >= 2:
                    cells.add(scenario, LeasePolicy(lease, beat, 5))
    rows = [row for row, _ in cells.run(processes)]
    fig = plots.heatmap(
        rows,
        labels={"redis_requests_per_s": f"Redis requests per second ({scenario.workers} workers)"},
        title="The lease sets how long a dead worker's job waits; the heartbeat sets what it costs Redis"
        "\n(sweep every 5 s; hatched: beat too close to the lease)",
    )
    return _save(fig, out, "heatmap", False)


def _freeze_curve(out: Path, quick: bool, processes: int) -> list[Path]:
    lease, beat, scan, timeout, duration = 30.0, 10.0, 5.0, 180.0, 120.0
    freezes = (
        (0, 20, 25, 30, 40, 70)
        if quick
        else (0, 10, 18, 20, 22, 24, 26, 28, 30, 32, 35, 45, 60, 62, 64, 66, 70)
    )
    labels = {
        "token": "lease 30/10 s, token-checked renewal",
        "recreate": "lease 30/10 s, renewal re-creates lock",
        "timeout": "timeout 180 s (120 s job)",
    }
    policies = {
        "token": LeasePolicy(lease, beat, scan),
        "recreate": LeasePolicy(lease, beat, scan, renewal=RenewalRule.every(beat, recreate_missing=True)),
        "timeout": TimeoutPolicy(timeout, scan),
    }
    cells = _Cells(reps=4 if quick else 25)
    for p in freezes:
        scenario = standard("frozen", freeze_for=float(p), freeze_after=Uniform(5.0, 60.0), duration=duration)
        for key, policy in policies.items():
            cells.add(scenario, policy, freeze=float(p), label=labels[key])
    rows = [row for row, _ in cells.run(processes)]
    grid = np.linspace(0, max(freezes), 400)
    theory = {
        labels["token"]: (
            grid,
            [analytic.freeze_false_reclaim_probability(lease, beat, scan, f) for f in grid],
        ),
        labels["recreate"]: (
            grid,
            [
                analytic.freeze_false_reclaim_probability(lease, beat, scan, f, recreate_missing=True)
                for f in grid
            ],
        ),
        labels["timeout"]: (  # the frozen job is simply one that runs P seconds longer
            grid,
            [analytic.timeout_false_reclaim_probability(Fixed(duration + f), timeout, scan) for f in grid],
        ),
    }
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    plots.freeze_curve(
        rows,
        ax=ax,
        theory=theory,
        marks={"L − B": lease - beat, "L": lease, "T − D": timeout - duration},
        legend_loc="outside",
        title="A lease survives any freeze shorter than L − B and loses every one longer than L;\n"
        "re-creating a lapsed lock only narrows the window",
    )
    ax.annotate(
        f"one 120 s job frozen P seconds at U(5, 60) s into it; {cells.reps} runs per point, 95% Wilson intervals",
        xy=(0, -0.14),
        xycoords="axes fraction",
        fontsize=7.5,
        color="#555555",
        va="top",
    )
    return _save(fig, out, "freeze-curve", True)


def generate_all(
    outdir: str | os.PathLike = "figures",
    *,
    quick: bool = False,
    processes: int | None = None,
    progress: bool = False,
) -> list[Path]:
    """Regenerate every figure into `outdir` (SVG, plus PNG for the README's key ones); returns the paths.
    `processes` simulation processes (default: up to 2); `progress`: a bar on stderr over the figures when
    stderr is a terminal (all of them take about a minute)."""
    import sys

    from tqdm.auto import tqdm

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    if processes is None:
        processes = 1 if quick else min(2, os.cpu_count() or 1)
    n = processes
    steps = [
        ("timelines", lambda: _timelines(out, quick)),
        ("two columns", lambda: _two_columns(out)),
        ("frontier", lambda: _frontier(out, quick, n)),
        ("latency CDF", lambda: _latency_cdf(out, quick, n)),
        ("heatmap", lambda: _heatmap(out, quick, n)),
        ("freeze curve", lambda: _freeze_curve(out, quick, n)),
    ]
    paths: list[Path] = []
    enabled = progress and sys.stderr.isatty()
    with (
        mpl.rc_context(plots.RC),
        tqdm(total=len(steps), disable=not enabled, file=sys.stderr, desc="figures", leave=False) as bar,
    ):
        for name, step in steps:
            bar.set_postfix_str(name)
            paths += step()
            bar.update()
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="emqsim figures", description=generate_all.__doc__)
    parser.add_argument("outdir", nargs="?", default="figures")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args(argv)
    for path in generate_all(args.outdir, quick=args.quick, processes=args.processes):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
