"""A user's detector in `explore`, `compare` and `tune` (issue 26): the same `--policy FILE.py:Class(k=v)` as
run, sweep and timeline, one line and exit status 2 for a bad one before any work, the detector rebuilt from
its file in every pool worker, and the same result serial or parallel."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_user_detector import run  # the CLI in-process: (exit status, stdout, stderr)

from emqsim.explore import FaultSpec, _metric_ms, explore, space
from emqsim.tune import Limits, SearchSpace, Workload, report, to_json_dict, tune
from emqsim.user_code import detector

PHI = Path(__file__).resolve().parent.parent / "emqsim" / "examples" / "phi_accrual.py"
SPEC = "my_detector.py:PhiAccrual(threshold=8)"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copy(PHI, tmp_path / "my_detector.py")
    return tmp_path


# -- explore ----------------------------------------------------------------------------------------------------
@pytest.mark.slow  # process pools, several seconds
def test_explore_searches_a_detector_exactly_serial_or_parallel(here):
    """No closed form is used for a detector: every run asks its suspect(). The bisection's result equals
    running every point (brute force) on a small space, and a process pool (each worker unpickles the
    detector from its file) gives the serial result."""
    phi = detector(SPEC)
    small = space(phi, [FaultSpec("crash", offset=(0, 300))], sweep_phases=False)
    result = explore(small, ties=False)
    latencies, held = [], dict.fromkeys((p.name for p in small.properties), 0)
    for x in range(small.dims[0].lo, small.dims[0].hi + 1):
        one = small.run((x,))
        for p in small.properties:
            held[p.name] += bool(p.check(one))
        latency = _metric_ms(one, small.fault_time_ms((x,)))
        if latency is not None:
            latencies.append(latency)
    assert result.counts == held
    assert np.repeat(result.latency_values, result.latency_weights).tolist() == sorted(latencies)
    two_dims = space(phi, [FaultSpec("crash", offset=(0, 500))], step=250)
    # cut in parts (the default would search this small space in one), so that the pool shares them
    one, two = explore(two_dims, jobs=1, parts=4), explore(two_dims, jobs=2, parts=4)
    assert one.counts == two.counts and one.points == two.points
    assert one.latency_values.tolist() == two.latency_values.tolist()
    assert one.latency_weights.tolist() == two.latency_weights.tolist()


def test_explore_takes_a_detector_from_the_command_line(here, capsys):
    argv = ["explore", "--policy", SPEC, "--fault", "crash,offset=0:4", "--pin-sweeps", "--quiet", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    policy = json.loads(out)["policy"]
    assert (policy["policy"], policy["threshold"], policy["beat"], policy["scan"]) == (
        "phi-accrual",
        8,
        2.0,
        1.0,
    )
    bad = {
        "--swept-by": ["--swept-by", "workers"],
        "--single-phase": ["--single-phase"],
        "--lease": ["--lease", "30"],
        "--preset": ["--preset", "bullmq"],
    }
    for flag, extra in bad.items():
        code, out, err = run(["explore", "--policy", SPEC, *extra], capsys)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and flag in err, (flag, err)


# -- compare ----------------------------------------------------------------------------------------------------
def test_compare_runs_a_detector_as_a_third_rule(here, capsys):
    code, out, err = run(
        ["compare", "--replications", "2", "--slow-duration", "100", "--quiet", "--policy", SPEC, "--json"],
        capsys,
    )
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [(r["world"], r["rule"]) for r in rows] == [
        (w, rule) for w in ("slow-but-alive", "fast-but-dead") for rule in ("timeout", "lease", "detector")
    ]
    mine = [r for r in rows if r["rule"] == "detector"]
    assert all(r["detector"].startswith("PhiAccrual(beat=2.0, threshold=8") for r in mine)
    assert mine[0]["reclaimed_fraction"] == 0 and mine[1]["reclaimed_fraction"] == 1
    code, out, err = run(
        ["compare", "--replications", "1", "--slow-duration", "100", "--quiet", "--policy", SPEC], capsys
    )
    assert code == 0 and "your detector: PhiAccrual(" in out and out.count("your detector ") == 2, err
    code, out, err = run(["compare", "--policy", "lease"], capsys)
    assert code == 2 and out == "" and "compare always runs the timeout and the lease" in err


# -- tune -------------------------------------------------------------------------------------------------------
WORK = Workload(jobs=20, workers=2)
SEARCH = SearchSpace(
    leases=(10.0,), beat_ratios=(3.0,), scans=(5.0,), timeouts=(), min_replications=2, max_replications=3
)
LIMITS = Limits(false_reclaims=0.5, detection=20.0)


@pytest.mark.slow  # process pools, several seconds
def test_tune_measures_a_detector_on_the_same_seeds_serial_or_parallel(here):
    phi = detector(SPEC)
    serial = tune(WORK, LIMITS, SEARCH, seed=0, verify=0, detector=phi)
    mine = serial.detector
    assert mine is not None and mine.kind == "detector" and mine.status == "feasible"
    assert mine.replications <= SEARCH.max_replications and mine.metrics["detection_mean"].value < 10
    assert serial.runs <= serial.max_runs
    parallel = tune(WORK, LIMITS, SEARCH, seed=0, verify=0, detector=phi, jobs=2)
    assert json.dumps(to_json_dict(parallel)) == json.dumps(to_json_dict(serial))
    assert (
        "your detector, PhiAccrual(beat=2.0, threshold=8, window=100, scan=1.0), on the same seeds"
        in report(serial)
    )
    assert to_json_dict(serial)["detector"]["detector"].startswith("PhiAccrual(beat=2.0, threshold=8")
    # the lease's answer is the same with or without the detector beside it (its runs are its own)
    alone = tune(WORK, LIMITS, SEARCH, seed=0, verify=0)
    assert to_json_dict(alone)["recommended"] == to_json_dict(serial)["recommended"]


@pytest.mark.slow  # process pools, several seconds
def test_tune_takes_a_detector_from_the_command_line(here, capsys):
    argv = ["tune", "--workers", "2", "--jobs-per-run", "20", "--lease", "10", "--beat-ratio", "3", "--scan",
            "5", "--timeout", "none", "--max-replications", "3", "--max-detection", "20", "--max-false-reclaims", "0.5", "--min-replications", "2", "--verify", "0",
            "--jobs", "1", "--quiet", "--json"]  # fmt: skip
    code, out, err = run([*argv, "--policy", SPEC], capsys)
    assert code == 0, err
    assert json.loads(out)["detector"]["status"] == "feasible"
    code, out, err = run([*argv, "--policy", "lease"], capsys)
    assert code == 2 and out == "" and "--policy: tune always searches the lease" in err


@pytest.mark.parametrize("command", [["explore"], ["compare"], ["tune", "--verify", "0"]])
def test_a_bad_detector_is_one_line_exit_2_in_every_new_command(command, here, capsys):
    for text, expected in (
        ("nope.py:X", "nope.py: no such file"),
        ("my_detector.py:PhiAccrual(thresh=8)", "has no parameter 'thresh'"),
        ("my_detector.py:PhiAccrual(window=len('ab'))", "is not a literal"),
    ):
        code, out, err = run([*command, "--policy", text], capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (command, err)
        assert expected in err and "Traceback" not in err, err
