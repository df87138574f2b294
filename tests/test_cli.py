"""The command line end to end: output contract, files, progress, parallel == serial, and bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emqsim.cli import main

FAST = ["--replications", "3", "--quiet", "--jobs", "1"]
ROW_KEYS = {
    "scenario",
    "policy",
    "lease",
    "beat",
    "scan",
    "timeout",
    "replications",
    "jobs",
    "false_reclaims",
    "false_reclaim_rate",
    "false_reclaim_rate_ci",
    "detection_latency_mean",
    "detection_latency_mean_ci",
    "detection_latency_p50",
    "detection_latency_p95",
    "detection_latency_max",
    "detection_latency_min",
    "undetected",
    "hostage_time",
    "duplicate_executions",
    "wasted_work",
    "finishes_rejected",
    "duplicate_completions",
    "redis_commands_per_s",
}  # fmt: skip  (the 0.2 names: deprecated aliases, still written in 0.3)
NEW_ROW_KEYS = {
    "jobs_total", "false_reclaims_total", "false_reclaims_per_job", "false_reclaims_per_job_ci",
    "crashes_total", "detections_total", "crashes_undetected_total", "detection_latency_censored",
    "detection_latency_mean_s", "detection_latency_mean_s_ci", "detection_latency_pooled_p95_s",
    "detection_latency_pooled_max_s", "hostage_s_per_run", "duplicate_executions_total",
    "wasted_work_s_per_run", "redis_requests_per_s",
}  # fmt: skip


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sweep_json_contract(capsys):
    code, out, _ = run_cli(capsys, "sweep", "--scenario", "fast-dead", "--timeout", "60,600", "--json", *FAST)
    assert code == 0
    data = json.loads(out)
    assert set(data) >= {"version", "seed", "rows"}
    assert [r["policy"] for r in data["rows"]] == ["lease", "timeout", "timeout"]
    for row in data["rows"]:
        assert set(row) >= ROW_KEYS | NEW_ROW_KEYS
        assert len(row["false_reclaims_per_job_ci"]) == 2
    lease, t60, t600 = data["rows"]
    assert lease["timeout"] is None and lease["lease"] == 30 and lease["beat"] == 10
    assert t600["lease"] is None and t600["timeout"] == 600
    assert lease["detection_latency_mean"] < t60["detection_latency_mean"] < t600["detection_latency_mean"]


def test_sweep_grid_syntax(capsys):
    code, out, _ = run_cli(
        capsys, "sweep", "--scenario", "fast-dead", "--lease", "10:30:10", "--beat", "5", "--timeout", "none",
        "--json", *FAST,
    )  # fmt: skip
    assert code == 0
    assert [(r["lease"], r["beat"]) for r in json.loads(out)["rows"]] == [(10, 5), (20, 5), (30, 5)]


def test_sweep_table_and_paired_line(capsys):
    code, out, _ = run_cli(capsys, "sweep", "--scenario", "fast-dead", "--timeout", "600", *FAST)
    assert code == 0
    header, scope = out.splitlines()[:2]
    assert "false reclaims" in header and "detection s" in header and "fast-dead" in out
    assert "per job [95% CI]" in scope and "mean/crash [95% CI]" in scope
    assert "total" in scope and "per run" in scope
    assert "python -m emqsim fields" in out
    assert "lease minus the 600 s timeout, paired on the same seeds" in out
    assert (
        "fast-dead      detection s per crash   -5" in out or "fast-dead  detection s per crash   -5" in out
    )


def test_sweep_writes_csv_and_json_atomically(tmp_path, capsys):
    for name in ("rows.csv", "rows.json"):
        target = tmp_path / name
        code, _, _ = run_cli(
            capsys, "sweep", "--scenario", "fast-dead", "--timeout", "600", "--out", str(target), *FAST
        )
        assert code == 0 and target.exists()
    csv_lines = (tmp_path / "rows.csv").read_text().splitlines()
    assert csv_lines[0].startswith("# emqsim provenance: {")  # version, seed, command, libraries
    assert csv_lines[1].startswith("scenario,policy,lease,beat,scan,timeout")
    assert json.loads((tmp_path / "rows.json").read_text())["rows"][0]["scenario"] == "fast-dead"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv", "rows.json"]  # no temp files left


def test_parallel_sweep_equals_serial(capsys):
    args = [
        "sweep",
        "--scenario",
        "production",
        "--timeout",
        "600",
        "--replications",
        "4",
        "--json",
        "--quiet",
    ]
    _, serial, _ = run_cli(capsys, *args, "--jobs", "1")
    _, parallel, _ = run_cli(capsys, *args, "--jobs", "2")
    assert json.loads(serial) == json.loads(parallel)


def test_resume_cache_reuses_finished_cells(tmp_path, capsys):
    args = ["sweep", "--scenario", "fast-dead", "--timeout", "600", "--json", "--cache", str(tmp_path), *FAST]
    _, first, _ = run_cli(capsys, *args)
    assert len(list(tmp_path.glob("*.json"))) == 2
    _, second, _ = run_cli(capsys, *args)
    assert first == second


def test_run_with_remove_on_complete_gives_the_same_row(capsys):
    argv = ["run", "--scenario", "production", "--job-count", "60", "--replications", "2", "--json"]
    code, kept, _ = run_cli(capsys, *argv)
    assert code == 0
    code, removed, _ = run_cli(capsys, *argv, "--remove-on-complete")
    assert code == 0 and json.loads(removed) == json.loads(kept)


def test_run_compare_presets_scenarios_timeline(capsys):
    code, out, _ = run_cli(
        capsys, "run", "--scenario", "frozen", "--freeze-after", "5", "--freeze-for", "40", "--json"
    )
    assert code == 0 and json.loads(out)["rows"][0]["false_reclaims_total"] == 10  # 10 replications
    code, out, _ = run_cli(
        capsys, "run", "--die-after", "1:2", "--workers", "2", "--job-count", "1", "--duration", "60"
    )
    assert code == 0 and "detection_latency_mean_s" in out and "10 replication(s)" in out
    code, out, _ = run_cli(capsys, "compare", "--replications", "3")
    assert code == 0
    assert "WRONG: reclaimed from a live worker" in out and "right: left alone" in out
    assert "held hostage" in out and "right: recovered" in out
    code, out, _ = run_cli(capsys, "presets")
    assert code == 0 and "bullmq" in out and "source:" in out
    code, out, _ = run_cli(capsys, "presets", "--json")
    assert {p["name"] for p in json.loads(out)} >= {"bullmq", "echomq", "celery-redis", "sqs", "faktory"}
    code, out, _ = run_cli(capsys, "scenarios")
    assert code == 0 and "flaky-network" in out
    code, out, _ = run_cli(capsys, "timeline", "--scenario", "fast-dead")
    assert code == 0 and "reclaimed from worker" in out and "right: its worker is dead" in out


def test_images_from_the_cli(tmp_path, capsys):
    png, svg = tmp_path / "t.png", tmp_path / "f.svg"
    assert run_cli(capsys, "timeline", "--scenario", "fast-dead", "--out", str(png))[0] == 0
    code, _, _ = run_cli(
        capsys, "sweep", "--scenario", "fast-dead", "--timeout", "60,600", "--plot", str(svg), *FAST
    )
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and svg.read_text().lstrip().startswith("<?xml")


def test_config_file_runs(capsys):
    example = Path(__file__).parent.parent / "emqsim" / "examples" / "gc-pauses.toml"
    code, out, _ = run_cli(capsys, "run", "--config", str(example), "--json")
    assert code == 0 and json.loads(out)["rows"][0]["scenario"] == "gc-pauses"


def test_version_and_help():
    out = subprocess.run([sys.executable, "-m", "emqsim", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("emqsim ")
    out = subprocess.run([sys.executable, "-m", "emqsim", "sweep", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "examples:" in out.stdout and "--lease" in out.stdout


def test_commands_start_without_scipys_heavy_subpackages():
    """Every command and pool worker starts by importing emqsim and the CLI: scipy.integrate, scipy.optimize
    and scipy.stats cost about half a second each and only a few functions use them, which import them
    themselves (a sweep with its defaults needs none of them)."""
    code = (
        "import sys, runpy\n"
        "sys.argv = ['emqsim', 'sweep', '--lease', '30', '--beat', '10', '--replications', '2', '--jobs', '1']\n"
        "try:\n    runpy.run_module('emqsim', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "heavy = ('scipy.integrate', 'scipy.optimize', 'scipy.stats')\n"
        "print(sorted(m for m in sys.modules if m in heavy), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "lease" in out.stdout, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == "[]", out.stderr[-2000:]


def test_progress_bar_only_on_a_terminal(capsys):
    code, _, err = run_cli(
        capsys, "sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "2", "--jobs", "1"
    )
    assert code == 0 and "simulating" not in err  # stderr is not a terminal here


def test_ctrl_c_keeps_finished_rows(tmp_path):
    out_file, cache = tmp_path / "rows.json", tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-m", "emqsim", "sweep", "--replications", "100", "--jobs", "1", "--quiet",
         "--out", str(out_file), "--json", "--cache", str(cache)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = (
        time.monotonic() + 300
    )  # a finished cell lands in the cache: interrupt after the first, however
    while not (cache.is_dir() and any(cache.glob("*.json"))):  # slow the machine
        assert proc.poll() is None and time.monotonic() < deadline, "the sweep finished no cell"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted: kept the" in err and "Traceback" not in err
    rows = json.loads(out_file.read_text())["rows"]
    assert rows and rows == json.loads(out)["rows"]


CONFIG_ERRORS = {
    "syntax.toml": ("[scenario\nworkers = 2\n", "not valid TOML"),
    "unknown.toml": ("[scenario]\nworkers = 2\nwrokers = 3\n", ":3: scenario.wrokers: unknown key"),
    "value.toml": (
        "[scenario]\njobs = 1\nworkers = 0\n",
        ":3: scenario.workers: must be a whole number >= 1",
    ),
    "dist.toml": (
        "[scenario]\nduration = 'lognormal:x'\n",
        ":2: scenario.duration: cannot read distribution",
    ),
    "fault.toml": (
        "[scenario]\n[[scenario.faults]]\nkind = 'explode'\n",
        ":3: scenario.faults[0].kind: must be",
    ),
    "policy.toml": (
        "[scenario]\n[policy]\nkind = 'lease'\nlease = 10\nbeat = 20\n",
        "must be shorter than the lease",
    ),
    "notable.toml": ("workers = 3\n", "unknown table"),
}

BAD = [
    (["sweep", "--lease", "-3"], "--lease"),
    (["sweep", "--lease", "0"], "--lease"),
    (["sweep", "--lease", "abc"], "--lease"),
    (["sweep", "--lease", "nan"], "--lease"),
    (["sweep", "--lease", "inf"], "--lease"),
    (["sweep", "--lease", "30", "--beat", "30"], "--beat"),
    (["sweep", "--lease", "10:5:1"], "stop < start"),
    (["sweep", "--lease", "10:60"], "start:stop:step"),
    (["sweep", "--lease", "10,,20"], "empty item"),
    (["sweep", "--lease", "1:100000:0.01"], "at most 1000"),
    (["sweep", "--scenario", "nope"], "choose one of: slow-alive"),
    (["sweep", "--preset", "nope"], "choose one of: bullmq"),
    (["sweep", "--preset", "bullmq", "--beat", "5"], "derives its heartbeat"),
    (["run", "--preset", "bullmq", "--beat", "5"], "derives its heartbeat"),  # one preset check for both
    (["run", "--preset", "bullmq", "--timeout", "5"], "has no timeout; it takes lease, scan"),
    (
        ["sweep", "--preset", "bullmq", "--timeout", "60", "--scan", "1", "--lease", "7", "--beat", "2"],
        "--beat",
    ),
    (["sweep", "--replications", "0"], "--replications"),
    (["sweep", "--jobs", "0"], "--jobs"),
    (["sweep", "--seed", "-1"], "--seed"),
    (["sweep", "--timeout", "-5"], "--timeout"),
    (["sweep", "--scan", "0"], "--scan"),
    (["sweep", "--out", "{tmp}/missing/rows.csv"], "does not exist"),
    (["sweep", "--out", "{tmp}/rows.txt"], ".csv or .json"),
    (["sweep", "--plot", "{tmp}/plot.pdf"], ".png or .svg"),
    (["sweep", "--config", "{tmp}/missing.toml"], "--config"),
    (["sweep", "--config", "{tmp}/unknown.toml", "--scenario", "fast-dead"], "not both"),
    (["run", "--loss", "1.5"], "--loss"),
    (["run", "--die-after", "5:1"], "B < A"),
    (["run", "--freeze-after", "5"], "--freeze-for"),
    (["run", "--duration", "lognormal:abc"], "--duration"),
    (["run", "--policy", "timeout", "--lease", "30"], "--lease"),
    (["run", "--rtt", "-1"], "--rtt"),
    (["run", "--workers", "0"], "--workers"),
    (["timeline", "--out", "{tmp}/x.gif"], ".png or .svg"),
    (["compare", "--replications", "0"], "--replications"),
    (["explode"], "invalid choice"),
] + [(["run", "--config", "{tmp}/" + name], needle) for name, (_, needle) in CONFIG_ERRORS.items()]


@pytest.mark.parametrize(("argv", "needle"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_gets_one_clear_line_and_status_2(argv, needle, tmp_path, capsys):
    for name, (text, _) in CONFIG_ERRORS.items():
        (tmp_path / name).write_text(text)
    before = set(os.listdir(tmp_path))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(argv))
    out, err = capsys.readouterr()
    assert exc.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "error:" in lines[0] and needle in lines[0], lines[0]
    assert "Traceback" not in err and out == ""
    assert set(os.listdir(tmp_path)) == before  # nothing written


def test_bad_input_through_the_real_entry_point(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "emqsim", "sweep", "--lease", "30", "--beat", "45", "--out", str(tmp_path / "r.csv")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--beat" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r.csv").exists()


def test_progress_bar_on_a_terminal():
    import fcntl
    import pty
    import struct
    import termios
    import threading

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "emqsim", "sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "20",
         "--jobs", "1", "--json"],
        stdout=subprocess.PIPE, stderr=follower, text=True,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    os.close(follower)
    reader.join(timeout=10)
    os.close(leader)
    shown = b"".join(chunks)
    assert proc.returncode == 0 and json.loads(out)["rows"]
    assert b"simulating:" in shown and b"/40 [" in shown  # a live bar over the 40 runs


# -- output that can be trusted: no zero-width intervals, headers that say what they count, 100 columns -----
def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_one_replication_prints_no_interval_anywhere(capsys):
    code, out, _ = run_cli(capsys, "run", "--scenario", "fast-dead", "--replications", "1")
    assert code == 0 and "[n/a]" in out and "1 replication(s)" in out and "none with one replication" in out
    code, out, _ = run_cli(capsys, "run", "--scenario", "fast-dead", "--replications", "1", "--json")
    row = json.loads(out)["rows"][0]
    assert all(row[k] is None for k in row if k.endswith("_ci"))
    code, out, _ = run_cli(
        capsys, "sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "1", "--quiet"
    )
    assert code == 0 and "[n/a]" in out
    code, out, _ = run_cli(capsys, "compare", "--replications", "1")
    assert code == 0 and "[n/a]" in out


def test_no_printed_interval_is_zero_width(capsys):
    """slow-alive's paired line used to read `-1.00 [-1.00, -1.00]`: every pair differs by exactly one."""
    import re

    code, out, _ = run_cli(capsys, "sweep", "--scenario", "slow-alive", "--scenario", "fast-dead", *FAST)
    assert code == 0
    assert "[n/a: the same in all 3 pairs]" in out
    for lo, hi in re.findall(r"\[([-+0-9.]+), ([-+0-9.]+)\]", out):
        assert lo != hi


def test_tables_fit_100_columns_and_wide_has_more(capsys):
    code, out, _ = run_cli(capsys, "sweep", "--scenario", "fast-dead", "--scenario", "production", *FAST)
    assert code == 0 and _widest(out) <= 100
    code, wide, _ = run_cli(
        capsys, "sweep", "--scenario", "fast-dead", "--scenario", "production", "--wide", *FAST
    )
    assert code == 0 and "redis req/s" in wide and "p95 s" in wide and "redis req/s" not in out
    for argv in (["presets"], ["scenarios"], ["compare", "--replications", "2"], ["fields"]):
        code, text, _ = run_cli(capsys, *argv)
        assert code == 0 and _widest(text) <= 100, argv


def test_fields_command_lists_every_row_field_and_the_old_names(capsys):
    from emqsim.stats import DEPRECATED_KEYS

    code, out, _ = run_cli(capsys, "fields")
    assert code == 0
    for new in ("false_reclaims_per_job", "detection_latency_mean_s", "hostage_s_per_run"):
        assert new in out
    for old in DEPRECATED_KEYS:
        assert old in out, old
    code, out, _ = run_cli(capsys, "fields", "--json")
    assert code == 0 and any(f["name"] == "redis_requests_per_s" for f in json.loads(out))


def test_run_prints_rounded_numbers_not_raw_floats(capsys):
    import re

    code, out, _ = run_cli(capsys, "run", "--scenario", "fast-dead", "--replications", "3")
    assert code == 0
    assert not re.search(r"\d\.\d{6,}", out)


def test_the_docs_field_reference_is_the_fields_command():
    from emqsim.fields import markdown_table

    docs = (Path(__file__).parents[1] / "docs" / "statistics.md").read_text()
    assert markdown_table() in docs, "regenerate the table in docs/statistics.md from emqsim.fields"
