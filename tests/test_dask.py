"""Sweeps on Dask give the serial rows: through `Client.get_executor()` and through `sweep --dask local`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

distributed = pytest.importorskip(
    "dask.distributed", reason="dask[distributed] is not installed", exc_type=ImportError
)

from emqsim import LeasePolicy, TimeoutPolicy, standard  # noqa: E402
from emqsim.sweep import Cell, run_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REPS = 3


def cells() -> list[Cell]:
    scenarios = [standard("fast-dead"), standard("production", workers=4, jobs=20)]
    return [Cell(s, p) for s in scenarios for p in (LeasePolicy(30, 10, 5), TimeoutPolicy(60, 5))]


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    cluster = distributed.LocalCluster(
        processes=True,
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_dask_executor_gives_the_serial_rows(client: distributed.Client) -> None:
    serial = run_sweep(cells(), replications=REPS, jobs=1, progress=False)
    on_dask = run_sweep(cells(), replications=REPS, executor=client.get_executor(), progress=False)
    assert on_dask.complete
    assert on_dask.rows == serial.rows
    assert on_dask.summaries == serial.summaries


def test_dask_runs_on_the_cluster_workers(client: distributed.Client) -> None:
    """The batches really leave this process: the workers are separate processes."""
    pids = set(client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids


def sweep_cli(*extra: str, cwd: Path | None = None) -> dict:
    args = ["sweep", "--scenario", "fast-dead", "--scenario", "frozen", "--timeout", "60,600"]
    args += ["--replications", str(REPS), "--json", "--quiet", *extra]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "emqsim", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd or ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERROR" not in proc.stderr, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_cli_dask_local_equals_serial(tmp_path: Path) -> None:
    """... and leaves nothing behind: no dask-scratch-space/ in the current folder, no scratch folder of its
    own in the temporary one (issue 30)."""
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("emqsim-dask-*"))
    assert sweep_cli("--dask", "local", cwd=tmp_path) == sweep_cli("--jobs", "1")
    assert list(tmp_path.iterdir()) == []
    assert set(Path(tempfile.gettempdir()).glob("emqsim-dask-*")) <= before


# -- tune on Dask (issue 27): the same answer as serial, a user's detector rebuilt from its file on each worker --
TUNE_FLAGS = ["--workers", "2", "--jobs-per-run", "20", "--lease", "10,20", "--beat-ratio", "3", "--scan", "2,5",
              "--timeout", "120", "--min-replications", "2", "--max-replications", "4", "--max-false-reclaims",
              "0.5", "--max-detection", "30", "--verify", "2", "--quiet", "--json"]  # fmt: skip
PHI = ROOT / "emqsim" / "examples" / "phi_accrual.py"


def test_tune_on_dask_gives_the_serial_answer(client: distributed.Client) -> None:
    """The cluster's workers are spawned processes: the detector, named by its file, is imported there from
    the file (emqsim.user_code), and every run lands in the same place whatever the order it finishes in."""
    from emqsim.tune import Limits, SearchSpace, Workload, to_json_dict, tune
    from emqsim.user_code import detector

    work = Workload(jobs=20, workers=2)
    search = SearchSpace(leases=(10.0,), beat_ratios=(3.0,), scans=(5.0,), timeouts=(120.0,),
                         min_replications=2, max_replications=3)  # fmt: skip
    limits = Limits(false_reclaims=0.5, detection=30.0)
    phi = detector(f"{PHI}:PhiAccrual(threshold=8)")
    serial = tune(work, limits, search, seed=0, verify=2, verify_max=2, detector=phi)
    on_dask = tune(
        work, limits, search, seed=0, verify=2, verify_max=2, detector=phi, executor=client.get_executor()
    )
    assert json.dumps(to_json_dict(on_dask)) == json.dumps(to_json_dict(serial))
    assert serial.detector is not None and serial.detector.replications >= 2


@pytest.mark.slow  # a LocalCluster started by the command
def test_cli_tune_dask_local_equals_serial(tmp_path: Path) -> None:
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob("emqsim-dask-*"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    answers = []
    for extra in (["--dask", "local"], ["--jobs", "1"]):
        proc = subprocess.run(
            [sys.executable, "-m", "emqsim", "tune", *TUNE_FLAGS, "--policy", f"{PHI}:PhiAccrual", *extra],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        answers.append(json.loads(proc.stdout))
    assert answers[0] == answers[1] and answers[0]["detector"]["status"] in ("feasible", "fails", "open")
    # a detector that never answers, on a worker's thread: stopped there, one line here (issue 30)
    spin = tmp_path.parent / f"{tmp_path.name}-spinner.py"
    spin.write_text("from emqsim import Detector\n\n\nclass Spinner(Detector):\n    answer_within = 0.3\n\n"
                    "    def suspect(self, job, now):\n        while True:\n            pass\n")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "emqsim", "tune", *TUNE_FLAGS, "--policy", f"{spin}:Spinner", "--dask", "local"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    # (a warning from Dask itself, such as a busy port on a shared machine, may come before it)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("emqsim tune: error: "), proc.stderr[-2000:]
    assert all(line.startswith("emqsim: warning: ") for line in lines[:-1]), proc.stderr[-2000:]
    assert proc.stderr.count("error") == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "Spinner.suspect(" in proc.stderr and "must answer within 0.3 s" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    assert set(Path(tempfile.gettempdir()).glob("emqsim-dask-*")) <= before
