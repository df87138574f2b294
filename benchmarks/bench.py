"""emqsim performance benchmark: one run measures everything the performance issue asks for.

    python benchmarks/bench.py                      # all sections, PASS/FAIL per target
    python benchmarks/bench.py --json bench.json    # also write every number as JSON
    python benchmarks/bench.py --only bare,model    # some sections: bare, model, sweep, heartbeat, big
    python benchmarks/bench.py --quick              # small sizes, a smoke test of the script itself
                                                    # (explore and tune on small worlds; tests run it)

Sections
  bare       a bare SimPy loop doing as many timeout events as the standard workload: the engine's limit
  model      the standard workload (production scenario, 64 workers x concurrency 4, 10,000 jobs, Poisson
             arrivals at 3/s, crashes and freezes, LeasePolicy(30, 10, 5)): events/s, overhead vs bare
             SimPy, peak RSS, Redis requests and commands, the run's digest
  sweep      `python -m emqsim sweep --lease 30 --beat 10` wall time (default --jobs), and --jobs 1 vs
             --jobs 2 on the same sweep: speed-up and parallel efficiency
  heartbeat  renew requests over a fixed horizon vs (workers, concurrency, jobs): one timer per worker
             (batched) against one timer per job (RenewalRule.every(10, per_job=True))
  big        peak RSS of a large run (default 100,000 jobs, extrapolated linearly to 1,000,000), with the
             default records, with record_locks=False, and streaming (`simulate_summary`'s job sink, no
             records, with remove_on_complete)
  explore    `python -m emqsim explore` with its defaults: wall time
  tune       the README's `python -m emqsim tune --preset bullmq --max-requests 4 --plot frontier.png`
             (the plot written to a temporary directory): wall time
  breakdown  (only when asked for) the default sweep's cost per cell and the best 2-process schedule

Issue 27's targets are reported as their own PASS/FAIL rows ("issue 27: ..."): the standard workload
streaming against bare SimPy doing the same number of events in the same run, the default sweep, explore,
tune, and a 1,000,000-job streaming run (time and peak RSS; measured with `--only big --big-jobs 1000000
--big-modes streaming`, else extrapolated). The test-suite row is not a benchmark and is not reported here.

Every measurement runs in a fresh interpreter (`--child`), so peak RSS (ru_maxrss) is the run's own, and the
code measured is the checkout this file lives in. Timings on a shared machine are noisy: the timing sections
repeat (`--repeat`) and report min and median of wall and CPU time; ratios use the minima. Benchmarks never
run in the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTIONS = ("bare", "model", "sweep", "heartbeat", "big", "explore", "tune")
SWEEP_ARGS = ("sweep", "--lease", "30", "--beat", "10", "--quiet", "--json")
TARGETS = {
    "overhead_ratio": 2.5,  # model time per event / bare SimPy time per event
    "default_sweep_s": 5.0,  # default sweep wall time on 2 cores
    "parallel_efficiency": 0.85,  # speed-up(--jobs 2 over --jobs 1) / 2
    "rss_1m_mb": 500.0,  # peak RSS of a 1,000,000-job run
}
# issue 27 ("the same answers in a fraction of the events"): each row is reported PASS/FAIL
ISSUE27_TARGETS = {
    "streaming_vs_bare_same_events": 2.0,  # standard workload streaming / bare SimPy doing as many events
    "default_sweep_s": 1.5,  # `sweep --lease 30 --beat 10`, 2 cores
    "explore_s": 20.0,  # `explore` with its defaults
    "tune_s": 8.0,  # the README's tune example
    "big_streaming_s": 60.0,  # 1,000,000 jobs streaming: wall time
    "big_streaming_mb": 200.0,  # and peak RSS
}
EXPLORE_ARGS = ("explore",)
TUNE_ARGS = ("tune", "--preset", "bullmq", "--max-requests", "4", "--plot", "frontier.png")
# --quick's small versions (about 1 and 3 s of CPU): the same code paths, not the targets' sizes
QUICK_EXPLORE_ARGS = ("explore", "--fault", "crash", "--pin-sweeps")
QUICK_TUNE_ARGS = (
    "tune", "--preset", "bullmq", "--max-requests", "4", "--max-false-reclaims", "0.5", "--lease", "30",
    "--scan", "30", "--timeout", "none", "--min-replications", "2", "--max-replications", "2", "--verify", "0",
    "--jobs-per-run", "20", "--plot", "frontier.png",
)  # fmt: skip
MB = 1024 * 1024
BIG_MODES: dict[str, dict[str, Any]] = {
    "default": {},  # every record
    "record_locks=False": {"record_locks": False},
    "streaming": {"streaming": True},  # simulate_summary's job sink (no records) + remove_on_complete
}
REFERENCE_EVENTS = 476_316  # events of the standard workload at commit 56d4a19


# -- the workloads (run inside a child interpreter) ------------------------------------------------------------
def standard_workload(jobs: int, arrival_rate: float = 3.0):
    """The benchmark's standard scenario: the `production` scenario scaled to 64 workers x concurrency 4.

    64 x 4 slots with LogNormal(median 20 s, sigma 1.5) work (mean ~62 s) serve ~4.2 jobs/s; arrivals at 3/s
    keep the fleet ~70% busy. Crashes (2/worker-hour, restart after 5 s) and GC-style freezes (6/worker-hour)
    come from `RandomFaults`. The horizon leaves room for the heavy tail, so the run ends with every job done.
    """
    from emqsim import standard

    return standard(
        "production",
        workers=64,
        concurrency=4,
        jobs=jobs,
        arrival_rate=arrival_rate,
        horizon=jobs / arrival_rate * 1.5 + 7200.0,
    )


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def child_model(jobs: int, options: dict[str, Any], digest: bool) -> dict[str, Any]:
    """One standard-workload run; time, events, memory, Redis traffic."""
    from emqsim import LeasePolicy
    from emqsim.engine import Simulation

    scenario = standard_workload(jobs)
    shown = {k: repr(v) for k, v in options.items()}
    options = dict(options)
    builder = None
    if options.pop("streaming", False):
        # what `simulate_summary` does, plus BullMQ's removeOnComplete so Redis keeps only jobs in flight
        from emqsim.stats import SummaryBuilder

        scenario = scenario.with_(remove_on_complete=True)
        builder = SummaryBuilder(jobs)
        options["job_sink"] = builder.add_job
    base_rss = _maxrss_bytes()
    sim = Simulation(scenario, LeasePolicy(30, 10, 5), 0, 0, **options)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    run = sim.run()
    summary = builder.result(run) if builder is not None else None
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    out = {
        "jobs": jobs,
        "options": shown,
        "wall_s": wall,
        "cpu_s": cpu,
        "events": next(sim.env._eid),  # SimPy numbers every scheduled event; the next id is the count
        "sim_end_s": run.end,
        "ended_by": run.ended_by,
        "attempts": len(run.attempts) if summary is None else summary.attempts,
        "requests": dict(run.requests),
        "total_requests": run.total_requests,
        "redis_commands": run.redis_commands,
        "records": {
            "attempts": len(run.attempts),
            "lock_events": len(run.lock_events),
            "sweeps": len(run.sweeps),
            "worker_events": len(run.worker_events),
        },
        "rss_base_mb": base_rss / MB,
        "rss_peak_mb": _maxrss_bytes() / MB,
    }
    if digest:
        out["digest"] = run.digest()
    return out


def child_bare(events: int, processes: int) -> dict[str, Any]:
    """A bare SimPy loop: `processes` generators each yielding `env.timeout(d)` until `events` timeouts ran.

    Integer millisecond delays drawn up front (1 ms .. 10 s), so the loop does nothing but SimPy's own work:
    create a Timeout, push it on the heap, pop it, resume the generator. This is the floor for any model built
    on SimPy processes.
    """
    import numpy as np
    import simpy

    env = simpy.Environment()
    delays = np.random.default_rng(0).integers(1, 10_000, size=events).tolist()
    per = -(-events // processes)

    def proc(ds: list[int]):
        timeout = env.timeout
        for d in ds:
            yield timeout(d)

    for i in range(processes):
        env.process(proc(delays[i * per : (i + 1) * per]))
    wall0, cpu0 = time.perf_counter(), time.process_time()
    env.run()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"events": next(env._eid), "timeouts": events, "wall_s": wall, "cpu_s": cpu}


def child_heartbeat(
    workers: int, concurrency: int, jobs: int, per_job: bool, horizon: float
) -> dict[str, Any]:
    """Every slot holds one long job for the whole horizon; extra jobs wait in the queue. Count renewals."""
    from emqsim import Fixed, LeasePolicy, RenewalRule, Scenario
    from emqsim.engine import Simulation

    scenario = Scenario(
        name="heartbeat",
        workers=workers,
        concurrency=concurrency,
        jobs=jobs,
        duration=Fixed(horizon * 4),
        horizon=horizon,
    )
    renewal = RenewalRule.every(10, per_job=True) if per_job else None
    policy = LeasePolicy(30, 10, 5, renewal=renewal)
    sim = Simulation(scenario, policy, 0, 0, record_locks=False)
    run = sim.run()
    return {
        "workers": workers,
        "concurrency": concurrency,
        "jobs": jobs,
        "per_job": per_job,
        "horizon_s": horizon,
        "renew_requests": run.requests.get("renew", 0),
        "requests": dict(run.requests),
        "redis_commands": run.redis_commands,
        "events": next(sim.env._eid),
    }


def child_breakdown(replications: int) -> dict[str, Any]:
    """CPU time of every (cell, replication) task of the default sweep, run serially here."""
    from emqsim.cli import DEFAULT_SCENARIOS, DEFAULT_TIMEOUTS
    from emqsim.policies import LeasePolicy, TimeoutPolicy
    from emqsim.scenario import standard
    from emqsim.sweep import run_batch

    policies = [LeasePolicy(30.0, 10.0, 5.0)] + [TimeoutPolicy(t, 5.0) for t in DEFAULT_TIMEOUTS]
    cells = []
    for name in DEFAULT_SCENARIOS:
        for policy in policies:
            times = []
            for rep in range(replications):
                t0 = time.process_time()
                run_batch([(0, standard(name), policy, 0, rep)])
                times.append(time.process_time() - t0)
            shown = ", ".join(f"{k} {v:g}" for k, v in policy.table_settings().items() if k != "policy" and v)
            cells.append({"scenario": name, "policy": f"{policy.name}: {shown}", "cpu_s": times})
    return {"replications": replications, "cells": cells}


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {
    "model": child_model,
    "bare": child_bare,
    "heartbeat": child_heartbeat,
    "breakdown": child_breakdown,
}


# -- running children ----------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def run_child(kind: str, **kwargs: Any) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--child-args", json.dumps(kwargs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"child {kind} {kwargs} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def timed_cli(args: Sequence[str], cwd: Path = ROOT) -> dict[str, Any]:
    """Run `python -m emqsim ARGS` with stdout to /dev/null; wall time and the children's CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = _load()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "emqsim", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=cwd,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out: dict[str, Any] = {"args": list(args), "wall_s": wall, "cpu_s": cpu, "exit": proc.returncode}
    out["loadavg_before"] = load
    if proc.returncode != 0:
        out["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return out


# -- sections ------------------------------------------------------------------------------------------------
MODEL_MODES: dict[str, dict[str, Any]] = {
    "records": BIG_MODES["default"],  # simulate(): every record kept (what notebooks and `timeline` use)
    "streaming": BIG_MODES["streaming"],  # what sweeps run
}


def section_model(cfg: argparse.Namespace, report: Report, mode: str = "records") -> dict[str, Any]:
    options = MODEL_MODES[mode]
    runs = [
        run_child("model", jobs=cfg.model_jobs, options=options, digest=(i == 0 and not options))
        for i in range(cfg.repeat)
    ]
    first = runs[0]
    wall = _stats([r["wall_s"] for r in runs])
    cpu = _stats([r["cpu_s"] for r in runs])
    events = first["events"]
    res = {
        "jobs": cfg.model_jobs,
        "events": events,
        "wall_s": wall,
        "cpu_s": cpu,
        "events_per_s": events / wall["min"],
        "events_per_cpu_s": events / cpu["min"],
        "us_per_job": wall["min"] / cfg.model_jobs * 1e6,
        "sim_end_s": first["sim_end_s"],
        "ended_by": first["ended_by"],
        "requests": first["requests"],
        "total_requests": first["total_requests"],
        "redis_commands": first["redis_commands"],
        "records": first["records"],
        "rss_peak_mb": max(r["rss_peak_mb"] for r in runs),
        "rss_base_mb": first["rss_base_mb"],
        "digest": first.get("digest"),
        "deterministic": len({r["events"] for r in runs}) == 1,
    }
    report.line(
        f"model ({mode}): {cfg.model_jobs:,} jobs, {events:,} events, wall min {wall['min']:.2f} s / median "
        f"{wall['median']:.2f} s (cpu min {cpu['min']:.2f} s) -> {res['events_per_s']:,.0f} events/s "
        f"({res['events_per_cpu_s']:,.0f}/cpu-s), {res['us_per_job']:.0f} us/job"
    )
    report.line(
        f"       simulated {res['sim_end_s']:,.0f} s (ended by {res['ended_by']}); Redis requests "
        f"{res['total_requests']:,} {res['requests']}, commands {res['redis_commands']:,}"
    )
    report.line(
        f"       peak RSS {res['rss_peak_mb']:.0f} MB (after imports {res['rss_base_mb']:.0f} MB: the run "
        f"added {res['rss_peak_mb'] - res['rss_base_mb']:.0f} MB); records {res['records']}"
    )
    if res["digest"]:
        report.line(f"       digest {res['digest']}")
    return res


def section_bare(cfg: argparse.Namespace, report: Report, events: int) -> dict[str, Any]:
    runs = [run_child("bare", events=events, processes=256) for _ in range(cfg.repeat)]
    wall = _stats([r["wall_s"] for r in runs])
    cpu = _stats([r["cpu_s"] for r in runs])
    res = {
        "timeouts": events,
        "events": runs[0]["events"],
        "wall_s": wall,
        "cpu_s": cpu,
        "events_per_s": runs[0]["events"] / wall["min"],
        "events_per_cpu_s": runs[0]["events"] / cpu["min"],
    }
    report.line(
        f"bare SimPy: {events:,} timeouts in 256 processes, wall min {wall['min']:.2f} s / median "
        f"{wall['median']:.2f} s -> {res['events_per_s']:,.0f} events/s ({res['events_per_cpu_s']:,.0f}/cpu-s)"
    )
    return res


def section_sweep(cfg: argparse.Namespace, report: Report) -> dict[str, Any]:
    base = list(SWEEP_ARGS) + list(cfg.sweep_extra)
    res: dict[str, Any] = {"command": "python -m emqsim " + " ".join(base), "cpu_count": os.cpu_count()}
    runs: dict[str, list[dict[str, Any]]] = {"default": [], "jobs1": [], "jobs2": []}
    for _ in range(cfg.sweep_repeat):
        runs["default"].append(timed_cli(base))
        runs["jobs1"].append(timed_cli(base + ["--jobs", "1"]))
        runs["jobs2"].append(timed_cli(base + ["--jobs", "2"]))
    res["runs"] = runs
    failed = [r for rs in runs.values() for r in rs if r["exit"] != 0]
    if failed:
        res["error"] = failed[0].get("error", f"exit {failed[0]['exit']}")
        report.line(f"sweep: FAILED ({len(failed)} run(s)): {res['error']}")
    for name, rs in runs.items():
        ok = [r for r in rs if r["exit"] == 0] or rs
        res[name] = {"wall_s": _stats([r["wall_s"] for r in ok]), "cpu_s": _stats([r["cpu_s"] for r in ok])}
    d, s, p = res["default"]["wall_s"], res["jobs1"]["wall_s"], res["jobs2"]["wall_s"]
    res["speedup"] = s["min"] / p["min"]
    res["efficiency"] = res["speedup"] / 2
    report.line(
        f"sweep: `{res['command']}`: wall min {d['min']:.1f} s / median {d['median']:.1f} s "
        f"(default --jobs = {os.cpu_count()} cores)"
    )
    report.line(
        f"       --jobs 1 min {s['min']:.1f} s, --jobs 2 min {p['min']:.1f} s: speed-up {res['speedup']:.2f}, "
        f"efficiency {res['efficiency']:.0%}; cpu --jobs 1 {res['jobs1']['cpu_s']['min']:.1f} s, --jobs 2 "
        f"{res['jobs2']['cpu_s']['min']:.1f} s; load average before: "
        + ", ".join(str(r["loadavg_before"][0]) for rs in runs.values() for r in rs)
    )
    return res


def section_cli(cfg: argparse.Namespace, report: Report, name: str, args: Sequence[str]) -> dict[str, Any]:
    """Wall time of one CLI command (`--sweep-repeat` times), run in a temporary directory so files it
    writes (the tune example's plot) land there."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix=f"emqsim-bench-{name}-") as tmp:
        runs = [timed_cli(args, cwd=Path(tmp)) for _ in range(cfg.sweep_repeat)]
    ok = [r for r in runs if r["exit"] == 0]
    res: dict[str, Any] = {"command": "python -m emqsim " + " ".join(args), "runs": runs}
    if len(ok) < len(runs):
        res["error"] = next(r for r in runs if r["exit"] != 0).get("error", "failed")
    res["wall_s"] = _stats([r["wall_s"] for r in (ok or runs)])
    res["cpu_s"] = _stats([r["cpu_s"] for r in (ok or runs)])
    report.line(
        f"{name}: `{res['command']}`: wall min {res['wall_s']['min']:.1f} s / median "
        f"{res['wall_s']['median']:.1f} s (cpu min {res['cpu_s']['min']:.1f} s)"
        + (f"; FAILED: {res['error']}" if "error" in res else "")
    )
    return res


def section_heartbeat(cfg: argparse.Namespace, report: Report) -> dict[str, Any]:
    horizon = cfg.heartbeat_horizon
    beats = horizon / 10  # ticks per timer over the horizon (beat 10 s)
    grid = [(8, 1, 1), (8, 4, 1), (8, 16, 1), (8, 16, 4), (32, 4, 1), (64, 1, 1), (64, 4, 1), (64, 4, 4)]
    if cfg.quick:
        grid = [(8, 1, 1), (8, 4, 1), (8, 4, 4), (16, 4, 1)]
    rows = []
    report.line(f"heartbeat: renew requests over {horizon:g} s, every slot busy (beat 10 s, lease 30 s)")
    report.line(
        "       workers  conc  jobs   batched  /(workers x beats)   per-job  /(slots x (beats-1))  cmds batched/per-job"
    )
    for workers, conc, backlog in grid:
        jobs = workers * conc * backlog
        b = run_child(
            "heartbeat", workers=workers, concurrency=conc, jobs=jobs, per_job=False, horizon=horizon
        )
        n = run_child(
            "heartbeat", workers=workers, concurrency=conc, jobs=jobs, per_job=True, horizon=horizon
        )
        row = {
            "workers": workers,
            "concurrency": conc,
            "jobs": jobs,
            "batched_renew": b["renew_requests"],
            "per_job_renew": n["renew_requests"],
            "batched_per_worker_beat": b["renew_requests"] / (workers * beats),
            # a job's own timer first fires one beat after the job starts: beats - 1 ticks before the horizon
            "per_job_per_slot_beat": n["renew_requests"] / (workers * conc * (beats - 1)),
            "batched_commands": b["redis_commands"],
            "per_job_commands": n["redis_commands"],
            "batched_requests": b["requests"],
        }
        rows.append(row)
        report.line(
            f"       {workers:7d} {conc:5d} {jobs:5d} {row['batched_renew']:9,d} {row['batched_per_worker_beat']:20.2f}"
            f" {row['per_job_renew']:9,d} {row['per_job_per_slot_beat']:21.2f}  {b['redis_commands']:,}/{n['redis_commands']:,}"
        )
    ok_batched = all(0.9 <= r["batched_per_worker_beat"] <= 1.1 for r in rows)
    ok_naive = all(0.9 <= r["per_job_per_slot_beat"] <= 1.1 for r in rows)
    passed = ok_batched and ok_naive
    report.verdict(
        "heartbeat renew requests scale with workers, flat in concurrency and jobs",
        passed,
        "batched renew/(workers x beats) within 0.9..1.1 in every row"
        + ("" if ok_batched else " NOT MET")
        + "; per-job variant renew/(slots x (beats - 1)) within 0.9..1.1"
        + ("" if ok_naive else " NOT MET"),
    )
    return {"horizon_s": horizon, "beat_s": 10, "rows": rows, "pass": passed}


def section_big(cfg: argparse.Namespace, report: Report) -> dict[str, Any]:
    """Peak RSS at a few sizes, a straight line through them, and its value at `--extrapolate-to` jobs."""
    sizes = sorted(set(cfg.big_jobs))
    target = cfg.extrapolate_to
    modes = {mode: BIG_MODES[mode] for mode in cfg.big_modes}
    for option in cfg.sim_option:
        key, _, value = option.partition("=")
        modes[option] = {key: json.loads(value.lower() if value in ("True", "False") else value)}
    res: dict[str, Any] = {"sizes": sizes, "extrapolate_to": target, "modes": {}}
    for mode, options in modes.items():
        points = []
        for jobs in sizes:
            r = run_child("model", jobs=jobs, options=options, digest=False)
            points.append(r)
            report.line(
                f"big: {jobs:,} jobs ({mode}): peak RSS {r['rss_peak_mb']:.0f} MB (after imports "
                f"{r['rss_base_mb']:.0f} MB), wall {r['wall_s']:.1f} s, {r['events']:,} events"
            )
        measured = next((p for p in points if p["jobs"] == target), None)
        if measured is not None:
            estimate, how = measured["rss_peak_mb"], "measured"
        else:
            estimate, how = (
                _extrapolate([(p["jobs"], p["rss_peak_mb"]) for p in points], target),
                "extrapolated",
            )
            if len(points) == 1:
                how += " from one size (base = RSS after imports)"
                p = points[0]
                estimate = p["rss_base_mb"] + (p["rss_peak_mb"] - p["rss_base_mb"]) * target / p["jobs"]
        wall = _extrapolate([(p["jobs"], p["wall_s"]) for p in points], target) if measured is None else None
        res["modes"][mode] = {"points": points, "rss_mb": estimate, "how": how, "wall_s_estimate": wall}
        report.line(
            f"big: {target:,} jobs ({mode}): peak RSS {estimate:.0f} MB ({how})"
            + (f", wall ~{wall:.0f} s" if wall else "")
        )
    return res


def _extrapolate(points: list[tuple[float, float]], x: float) -> float:
    """Least-squares line through (x, y) points, evaluated at x (with one point: proportional)."""
    if len(points) == 1:
        (x0, y0) = points[0]
        return y0 * x / x0
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sum((p[0] - mx) ** 2 for p in points)
    return my + slope * (x - mx)


def section_breakdown(cfg: argparse.Namespace, report: Report) -> dict[str, Any]:
    """Where the default sweep's time goes, and the best the 2-process pool could do with its batching."""
    from emqsim.pools import batches  # the sweep's batching (emqsim.sweep.run_sweep)

    data = run_child("breakdown", replications=cfg.breakdown_replications)
    reps = data["replications"]
    tasks = [t for cell in data["cells"] for t in cell["cpu_s"]]
    total = sum(tasks)
    by_scenario: dict[str, float] = {}
    for cell in data["cells"]:
        by_scenario[cell["scenario"]] = by_scenario.get(cell["scenario"], 0.0) + sum(cell["cpu_s"])
    scale = 30 / reps  # the default sweep runs 30 replications
    cut = batches(list(range(len(tasks))), parts=64 * 2)  # as run_sweep cuts them for 2 processes
    finish = _greedy([sum(tasks[i] for i in b) for b in cut], workers=2)
    lpt = _greedy(sorted(tasks, reverse=True), workers=2)
    res = {
        "replications": reps,
        "cells": data["cells"],
        "total_cpu_s": total,
        "by_scenario_cpu_s": by_scenario,
        "makespan_2_current_batching_s": finish,
        "makespan_2_lpt_s": lpt,
        "schedule_efficiency_current": total / 2 / finish,
        "schedule_efficiency_lpt": total / 2 / lpt,
        "estimate_30_reps_total_cpu_s": total * scale,
    }
    report.line(
        f"breakdown ({reps} replications per cell, serial CPU): total {total:.1f} s (x{scale:g} for 30 reps: "
        f"{total * scale:.0f} s)"
    )
    for name, t in sorted(by_scenario.items(), key=lambda kv: -kv[1]):
        report.line(f"       {name:14} {t:7.1f} s  {t / total:5.1%}")
    for cell in sorted(data["cells"], key=lambda c: -sum(c["cpu_s"]))[:8]:
        report.line(f"       {cell['scenario']:14} {cell['policy']:52} {sum(cell['cpu_s']):6.1f} s")
    report.line(
        f"       2 processes, current batching ({len(cut)} batches in cell order): makespan {finish:.1f} s, "
        f"schedule efficiency {res['schedule_efficiency_current']:.0%}; longest-first per task: "
        f"{res['schedule_efficiency_lpt']:.0%}"
    )
    return res


def _greedy(durations: Sequence[float], workers: int) -> float:
    """Makespan of list scheduling: each job in order goes to the worker that frees up first."""
    free = [0.0] * workers
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free)


# -- report --------------------------------------------------------------------------------------------------
class Report:
    def __init__(self) -> None:
        self.verdicts: list[dict[str, Any]] = []

    def line(self, text: str) -> None:
        print(text, flush=True)

    def verdict(self, name: str, passed: bool | None, detail: str) -> None:
        word = "PASS" if passed else ("FAIL" if passed is not None else "N/A ")
        self.verdicts.append({"target": name, "result": word.strip(), "detail": detail})
        print(f"{word}  {name}: {detail}", flush=True)


def _provenance() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return ""

    import simpy

    from emqsim import __version__

    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "emqsim")
    return {
        "emqsim": __version__,
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "emqsim_modified": bool(dirty),
        "python": platform.python_version(),
        "simpy": simpy.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "loadavg": _load(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path, metavar="FILE", help="write every number to FILE")
    p.add_argument("--only", help=f"comma-separated sections ({', '.join(SECTIONS)}, breakdown)")
    p.add_argument("--quick", action="store_true", help="small sizes: checks the script, not the targets")
    p.add_argument("--repeat", type=int, default=3, help="timing repeats for bare and model (default 3)")
    p.add_argument("--model-jobs", type=int, default=10_000, help="standard workload size (default 10,000)")
    p.add_argument("--sweep-repeat", type=int, default=1, help="repeats of each sweep command (default 1)")
    p.add_argument(
        "--sweep-extra", default="", help="extra sweep flags, e.g. '--replications 5' (default: none)"
    )
    p.add_argument("--heartbeat-horizon", type=float, default=300.0, help="seconds (default 300)")
    p.add_argument(
        "--big-jobs",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[10_000, 30_000, 100_000],
        help="sizes for the memory line (default 10000,30000,100000)",
    )
    p.add_argument(
        "--big-modes",
        type=lambda s: s.split(","),
        default=list(BIG_MODES),
        help=f"which runs the memory line measures (default {','.join(BIG_MODES)})",
    )
    p.add_argument("--extrapolate-to", type=int, default=1_000_000, help="(default 1,000,000 jobs)")
    p.add_argument(
        "--sim-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also measure the big run with Simulation(..., KEY=VALUE), e.g. a streaming mode; repeatable",
    )
    p.add_argument("--breakdown-replications", type=int, default=5, help="for --only breakdown (default 5)")
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    cfg = p.parse_args(argv)
    if cfg.child:
        print(json.dumps(CHILDREN[cfg.child](**json.loads(cfg.child_args))))
        return 0

    cfg.sweep_extra = cfg.sweep_extra.split()
    if cfg.quick:
        cfg.repeat = min(cfg.repeat, 2)
        cfg.model_jobs = min(cfg.model_jobs, 1000)
        cfg.sweep_extra = cfg.sweep_extra or ["--replications", "2", "--scenario", "fast-dead"]
        cfg.heartbeat_horizon = min(cfg.heartbeat_horizon, 60.0)
        cfg.big_jobs = [1000, 2000]
        cfg.extrapolate_to = 10_000
        cfg.breakdown_replications = 1
    unknown_modes = sorted(set(cfg.big_modes) - set(BIG_MODES))
    if unknown_modes:
        p.error(f"unknown --big-modes {', '.join(unknown_modes)}; choose from {', '.join(BIG_MODES)}")
    sections = [s.strip() for s in cfg.only.split(",")] if cfg.only else list(SECTIONS)
    unknown = set(sections) - set(SECTIONS) - {"breakdown"}
    if unknown:
        p.error(f"unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}, breakdown")

    report = Report()
    results: dict[str, Any] = {"provenance": _provenance(), "targets": TARGETS, "config": {}}
    prov = results["provenance"]
    report.line(
        f"emqsim {prov['emqsim']} at {prov['commit']}{' (emqsim/ modified)' if prov['emqsim_modified'] else ''}, "
        f"Python {prov['python']}, SimPy {prov['simpy']}, {prov['cpu_count']} cores, load average {prov['loadavg']}"
    )
    results["config"] = {k: v for k, v in vars(cfg).items() if k not in ("json", "child", "child_args")}

    if "model" in sections or "bare" in sections:
        models = {}
        if "model" in sections:
            for mode in MODEL_MODES:
                models[mode] = results[f"model_{mode}" if mode != "records" else "model"] = section_model(
                    cfg, report, mode
                )
        if "bare" in sections:
            events = models["records"]["events"] if models else REFERENCE_EVENTS
            results["bare"] = bare = section_bare(cfg, report, events)
            results["overhead_ratio"] = {}
            for mode, model in models.items():
                # time per event of the model over time per event of bare SimPy (minima of the repeats)
                ratio = bare["events_per_s"] / model["events_per_s"]
                ratio_cpu = bare["events_per_cpu_s"] / model["events_per_cpu_s"]
                # the whole workload against bare SimPy doing a fixed number of events, so that an
                # optimisation that removes events shows as a gain (the per-event ratio rises instead)
                same_work = model["wall_s"]["min"] / (
                    bare["wall_s"]["min"] / bare["events"] * REFERENCE_EVENTS
                )
                results["overhead_ratio"][mode] = {
                    "wall": ratio,
                    "cpu": ratio_cpu,
                    "vs_reference_events": same_work,
                }
                report.verdict(
                    f"model overhead per event <= 2.5x bare SimPy ({mode})",
                    ratio <= TARGETS["overhead_ratio"],
                    f"{ratio:.2f}x by wall (cpu {ratio_cpu:.2f}x): {model['events_per_s']:,.0f} vs "
                    f"{bare['events_per_s']:,.0f} events/s",
                )
                report.line(
                    f"       whole workload vs bare SimPy doing {REFERENCE_EVENTS:,} events (the standard "
                    f"workload's count at 56d4a19): {same_work:.2f}x"
                )
            streaming = models.get("streaming")
            if streaming is not None:
                # issue 27: the streaming run against bare SimPy doing the streaming run's own event count
                bare_same = bare["wall_s"]["min"] / bare["events"] * streaming["events"]
                same = streaming["wall_s"]["min"] / bare_same
                bare_same_cpu = bare["cpu_s"]["min"] / bare["events"] * streaming["events"]
                results["issue27_streaming_vs_bare"] = {
                    "wall": same,
                    "cpu": streaming["cpu_s"]["min"] / bare_same_cpu,
                }
                report.verdict(
                    "issue 27: standard workload, streaming, vs bare SimPy doing the same events <= 2.0x",
                    same <= ISSUE27_TARGETS["streaming_vs_bare_same_events"],
                    f"{same:.2f}x by wall (cpu {results['issue27_streaming_vs_bare']['cpu']:.2f}x): "
                    f"{streaming['wall_s']['min']:.2f} s against {bare_same:.2f} s for "
                    f"{streaming['events']:,} bare events",
                )
    if "sweep" in sections:
        results["sweep"] = sw = section_sweep(cfg, report)
        broken = " (the sweep FAILED: " + sw["error"] + ")" if "error" in sw else ""
        report.verdict(
            "default sweep < 5 s on 2 cores",
            sw["default"]["wall_s"]["min"] < TARGETS["default_sweep_s"] and not broken,
            f"{sw['default']['wall_s']['min']:.1f} s (min of {cfg.sweep_repeat}){broken}",
        )
        report.verdict(
            "parallel efficiency >= 85% on 2 cores",
            sw["efficiency"] >= TARGETS["parallel_efficiency"] and not broken,
            f"{sw['efficiency']:.0%} (speed-up {sw['speedup']:.2f}: --jobs 1 {sw['jobs1']['wall_s']['min']:.1f} s, "
            f"--jobs 2 {sw['jobs2']['wall_s']['min']:.1f} s){broken}",
        )
        report.verdict(
            "issue 27: default sweep --lease 30 --beat 10 <= 1.5 s on 2 cores",
            sw["default"]["wall_s"]["min"] <= ISSUE27_TARGETS["default_sweep_s"] and not broken,
            f"{sw['default']['wall_s']['min']:.1f} s (min of {cfg.sweep_repeat}){broken}",
        )
    cli_sections = (
        ("explore", QUICK_EXPLORE_ARGS if cfg.quick else EXPLORE_ARGS, "explore_s"),
        ("tune", QUICK_TUNE_ARGS if cfg.quick else TUNE_ARGS, "tune_s"),
    )
    for name, args, key in cli_sections:
        if name in sections:
            results[name] = r = section_cli(cfg, report, name, args)
            limit = ISSUE27_TARGETS[key]
            report.verdict(
                f"issue 27: `{r['command']}` <= {limit:g} s",
                r["wall_s"]["min"] <= limit and "error" not in r,
                f"{r['wall_s']['min']:.1f} s (min of {cfg.sweep_repeat})"
                + (f" (FAILED: {r['error']})" if "error" in r else ""),
            )
    if "heartbeat" in sections:
        results["heartbeat"] = section_heartbeat(cfg, report)
    if "big" in sections:
        results["big"] = big = section_big(cfg, report)
        for mode, m in big["modes"].items():
            report.verdict(
                f"{cfg.extrapolate_to:,}-job run peak RSS < 500 MB ({mode})",
                m["rss_mb"] < TARGETS["rss_1m_mb"],
                f"{m['rss_mb']:.0f} MB ({m['how']})",
            )
        streaming = big["modes"].get("streaming")
        if streaming is not None and cfg.extrapolate_to == 1_000_000:
            measured = next((p for p in streaming["points"] if p["jobs"] == 1_000_000), None)
            wall = measured["wall_s"] if measured is not None else streaming["wall_s_estimate"]
            how = "measured" if measured is not None else "extrapolated"
            report.verdict(
                "issue 27: 1,000,000 jobs streaming <= 60 s and <= 200 MB",
                wall <= ISSUE27_TARGETS["big_streaming_s"]
                and streaming["rss_mb"] <= ISSUE27_TARGETS["big_streaming_mb"],
                f"{wall:.0f} s ({how}), {streaming['rss_mb']:.0f} MB ({streaming['how']})",
            )
    if "breakdown" in sections:
        results["breakdown"] = section_breakdown(cfg, report)
    results["verdicts"] = report.verdicts
    results["provenance"]["loadavg_end"] = _load()
    if cfg.json:
        cfg.json.write_text(json.dumps(results, indent=2) + "\n")
        report.line(f"wrote {cfg.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
