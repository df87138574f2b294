"""Bounded work and robust output: the estimate before work (and --yes), grids counted without being built,
--jobs clamped to the cores, standard output closed or full, and the resume cache from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import emqsim.cli as cli
import emqsim.cli.building
import emqsim.cli.work
from emqsim.cli import main
from emqsim.scenario import standard

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--scenario", "fast-dead", "--timeout", "600", "--replications", "2", "--jobs", "1", "--quiet"]


def test_the_estimate_refuses_before_any_work_and_yes_overrides_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import emqsim.sweep

    monkeypatch.setattr(emqsim.cli.work, "MAX_COMMANDS", 10.0)
    ran: list[int] = []
    real = emqsim.sweep.run_sweep

    def counting(cells, **kw):
        ran.append(len(cells))
        return real(cells, **kw)

    monkeypatch.setattr(emqsim.sweep, "run_sweep", counting)
    assert main(["sweep", *FAST]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--yes" in err and "estimated at up to" in err and not ran
    assert main(["sweep", *FAST, "--yes"]) == 0 and ran == [2]
    assert main(["run", "--scenario", "fast-dead"]) == 2
    assert main(["run", "--scenario", "fast-dead", "--yes"]) == 0
    assert main(["compare", "--replications", "1"]) == 2
    assert main(["timeline", "--scenario", "fast-dead"]) == 2


def test_a_billion_policies_are_counted_not_built(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[int] = []

    def no_building(*args, **kwargs):
        built.append(1)
        raise AssertionError("policies were built before the estimate")

    monkeypatch.setattr(emqsim.cli.building, "LeasePolicy", no_building)
    monkeypatch.setattr(emqsim.cli.building, "TimeoutPolicy", no_building)
    code = main(["sweep", "--lease", "1001:2000:1", "--beat", "1:1000:1", "--scan", "1:1000:1"])
    err = capsys.readouterr().err
    assert code == 2 and not built and "5,000,020,000 cells" in err and "--yes" in err


def test_the_estimate_covers_the_default_sweep() -> None:
    """The default sweep (5 scenarios x 5 policies x 30 replications) is well inside the limit."""
    args = cli.build_parser().parse_args(["sweep"])
    count, beat, scan = cli.policy_grid(args, None)
    total = sum(cli.commands_per_run(standard(n), beat, scan) for n in cli.DEFAULT_SCENARIOS) * count * 30
    assert count == 5 and total < cli.MAX_COMMANDS / 10


def test_jobs_above_the_cores_are_clamped_with_a_notice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(emqsim.cli.work, "usable_cores", lambda: 1)
    assert main(["sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "2", "--jobs", "500",
                 "--quiet", "--json"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert err.splitlines() == ["emqsim: note: --jobs 500 is more than the 1 usable core(s); using 1"]


def run_cli(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "emqsim", *argv], env=env, text=True, timeout=300, **kw)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_standard_output_is_one_line_and_the_results_file_is_still_written(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    with open("/dev/full", "w") as full:
        proc = run_cli("sweep", *FAST, "--out", str(out), stdout=full, stderr=subprocess.PIPE)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "emqsim sweep: error: cannot write to standard output (No space left on device)"
    ]
    assert json.loads(out.read_text())["rows"]
    with open("/dev/full", "w") as full:
        proc = run_cli("presets", stdout=full, stderr=subprocess.PIPE)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_a_closed_standard_output_is_refused_before_any_work(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        ["sh", "-c", f'exec "{sys.executable}" -m emqsim sweep --out rows.csv >&-'],
        cwd=tmp_path, env=env, text=True, capture_output=False, stderr=subprocess.PIPE, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "standard output is closed" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m emqsim scenarios | head -c 10 > /dev/null'],
        env=env, text=True, stderr=subprocess.PIPE, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_a_damaged_cache_entry_is_one_notice_line_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sweep", *FAST, "--json", "--cache", str(tmp_path)]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)["rows"]
    entry = sorted(tmp_path.glob("*.json"))[0]
    from emqsim.sweep import CACHE_FORMAT

    entry.write_text(json.dumps({"format": CACHE_FORMAT, "identity": {}, "summaries": []}))
    assert main(args) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rows"] == first
    assert captured.err.splitlines() == [
        f"emqsim: note: cache entry {entry} is not usable (it belongs to another cell); recomputing that cell"
    ]
