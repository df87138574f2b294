"""Issue 28's first hour: what a newcomer tries in the README and the help works as written."""

import json
import re
from pathlib import Path

import pytest

from emqsim.cli import main
from emqsim.distributions import Empirical, parse_distribution, read_durations
from emqsim.errors import ConfigError

SHIPPED = Path(__file__).resolve().parent.parent / "emqsim" / "examples" / "durations.csv"


@pytest.fixture
def bullmq_export(tmp_path):
    path = tmp_path / "export.csv"
    path.write_text("processedOn,finishedOn\n1000,3500\n2000,\n0,60000\n5000,9000\n")
    return path


def test_one_reader_reads_every_layout(tmp_path, bullmq_export):
    assert read_durations(bullmq_export) == Empirical((2.5, 60.0, 4.0))
    col = tmp_path / "d.csv"
    col.write_text("id,duration\na,4\nb,5\n")
    assert read_durations(col) == Empirical((4.0, 5.0))
    assert read_durations(SHIPPED) == parse_distribution(f"file:{SHIPPED}")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="no `duration`"):
        read_durations(other)


def test_run_reads_a_bullmq_export(capsys, bullmq_export):
    """Issue 28: `run` refused the `processedOn,finishedOn` export that `tune` reads."""
    code = main(["run", "--scenario", "fast-dead", "--duration", f"file:{bullmq_export}", "--replications",
                 "2", "--json"])  # fmt: skip
    assert code == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["jobs_total"] == 2


def test_sweep_takes_measured_durations(capsys):
    """Issue 28: the README's sweep section offers `--duration file:durations.csv`; sweep refused it."""
    code = main(["sweep", "--scenario", "fast-dead", "--lease", "30", "--beat", "10", "--timeout", "600",
                 "--replications", "2", "--duration", f"file:{SHIPPED}", "--json", "--jobs", "1"])  # fmt: skip
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["policy"] for r in rows} == {"lease", "timeout"}


def test_sweep_duration_is_checked_before_any_work(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--duration", f"file:{tmp_path / 'missing.csv'}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not exist" in err


def test_docs_tune_no_longer_says_the_shipped_header_is_refused():
    text = (Path(__file__).resolve().parent.parent / "docs" / "tune.md").read_text()
    assert "refused here" not in text


def test_examples_prints_the_whole_description_and_where_durations_csv_is(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    # the cpu-bound-workers description is two comment lines: both are printed
    assert "short connection outages and one 30 s Redis restart" in " ".join(out.split())
    assert str(SHIPPED) in out and "durations.csv" in out


def test_every_help_example_names_files_that_exist_or_are_placeholders():
    """The help's examples used `file:durations.csv`, which exists nowhere outside a checkout's examples."""
    from emqsim.cli.parser import EXAMPLES

    assert "file:durations.csv" not in EXAMPLES


def test_the_sweep_table_spells_out_its_abbreviations_and_fields_lists_the_headings(capsys):
    code = main(["sweep", "--scenario", "fast-dead", "--replications", "2", "--quiet", "--jobs", "1"])
    assert code == 0
    out = capsys.readouterr().out
    assert "L=30 B=10 S=5" in out and "T=600" in out and "undet." in out
    assert "L lease, B beat, S scan (sweep interval), T timeout, in s; undet.: crashes never detected" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert main(["fields"]) == 0
    fields = capsys.readouterr().out
    assert "undet. total: crashes_undetected_total" in fields
    assert "false reclaims per job [95% CI]: false_reclaims_per_job" in fields
    assert "L lease, B beat" in fields


def test_explore_reports_progress_run_by_run():
    """Issue 28: `explore` with its defaults ran for minutes with nothing on the screen; the CLI now shows a
    tqdm bar on stderr (a terminal's), fed by explore's progress callback, one call per run."""
    from emqsim import LeasePolicy
    from emqsim.explore import FaultSpec, explore, space

    sp = space(LeasePolicy(3, 1, 1, swept_by="reaper"), [FaultSpec("crash")], sweep_phases=False)
    seen = []
    result = explore(sp, ties=False, progress=seen.append)
    assert seen and set(seen) == {1} and len(seen) == result.runs


def test_explore_accepts_quiet(capsys):
    code = main(["explore", "--lease", "3", "--beat", "1", "--scan", "1", "--pin-sweeps", "--no-ties",
                 "--quiet", "--json"])  # fmt: skip
    assert code == 0
    assert json.loads(capsys.readouterr().out)


WIDTH_COMMANDS = [
    ["run", "--scenario", "production", "--replications", "2", "--quiet"],
    ["sweep", "--preset", "bullmq", "--scenario", "fast-dead", "--scenario", "production",
     "--replications", "2", "--quiet", "--jobs", "1"],
    ["compare", "--replications", "2", "--quiet"],
    ["timeline", "--scenario", "fast-dead"],
    ["explore", "--lease", "3", "--beat", "1", "--scan", "1", "--pin-sweeps", "--quiet"],
    ["explore", "--policy", "timeout", "--timeout", "6", "--fault", "freeze,length=2:4,offset=1",
     "--duration", "3", "--pin-sweeps", "--quiet"],
    ["presets"], ["scenarios"], ["fields"], ["examples"],
    ["tune", "--preset", "bullmq", "--max-requests", "4", "--quiet"],  # the README's (~60 s on 2 cores)
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("argv", WIDTH_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_default_output_fits_100_columns(capsys, argv):
    """Issue 28: explore printed lines up to 182 columns, `sweep --preset bullmq` 102, tune's tables 124
    (`--wide` keeps them)."""
    assert main(argv) == 0
    out = capsys.readouterr().out
    widest = max(out.splitlines(), key=len)
    assert len(widest) <= 100, widest


def test_assignments_check_outside_a_checkout_says_where_the_notebooks_are(monkeypatch, tmp_path):
    """Issue 28: an installed package's default folder (site-packages/../notebooks) can never exist; the
    message says the notebooks come with a checkout and how to point at them."""
    import emqsim.assignments as assignments

    monkeypatch.setattr(assignments, "default_source", lambda: tmp_path / "site-packages" / "nope")
    with pytest.raises(ConfigError) as exc:
        assignments.sources(None)
    message = str(exc.value)
    assert "checkout" in message and "--source DIR" in message and "nope" not in message
    with pytest.raises(ConfigError, match="no assignment folder"):
        assignments.sources(tmp_path / "missing")


# -- --help: wrapped at 100 columns, and `live --help` without redis-py ---------------------------------------------
def _parsers(parser, prefix=()):
    """(argv, parser) for the program and every subcommand, nested ones (`assignments check`) too."""
    import argparse

    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*prefix, name))


def test_every_help_fits_100_columns(monkeypatch, capsys):
    """Issue 28: `--help` texts were not wrapped (descriptions and examples up to 180 columns). On a terminal
    200 columns wide every command's --help still wraps at 100."""
    from emqsim.cli.parser import build_parser

    monkeypatch.setenv("COLUMNS", "200")
    commands = [argv for argv, _ in _parsers(build_parser())]
    assert len(commands) >= 16 and ("tune",) in commands and ("live",) in commands
    for argv in commands:
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--help"])
        assert stop.value.code == 0, argv
        out = capsys.readouterr().out
        assert out.startswith("usage:"), argv
        widest = max(out.splitlines(), key=len)
        assert len(widest) <= 100, (argv, widest)


NO_REDIS = """
import sys

class NoRedis:
    # As if redis-py were not installed: finding or importing it fails.
    def find_spec(self, name, path=None, target=None):
        if name == "redis" or name.startswith("redis."):
            raise ImportError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoRedis())
from emqsim.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_live_help_reads_without_the_live_extra():
    """Issue 28: `live --help` could not be read without redis-py. It prints the live flags and names the
    extra; running `live` still says, in one line, what to install."""
    import subprocess
    import sys

    def emqsim(*argv):
        return subprocess.run([sys.executable, "-c", NO_REDIS, *argv], capture_output=True, text=True)

    help_ = emqsim("live", "--help")
    assert help_.returncode == 0, help_.stderr
    assert "--time-scale" in help_.stdout and "--lease" in help_.stdout
    assert "pip install 'emqsim[live]'" in help_.stdout and "Traceback" not in help_.stderr
    run = emqsim("live", "--scenario", "fast-dead")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "pip install 'emqsim[live]'" in run.stderr


# -- progress on stderr for the commands that take longer than ~2 s at their defaults ---------------------------
def _stderr_on_a_terminal(*argv: str) -> tuple[int, str, bytes]:
    """Run `python -m emqsim ARGV` with stderr on a pseudo-terminal: (status, stdout, what the terminal got)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios
    import threading

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
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
        [sys.executable, "-m", "emqsim", *argv], stdout=subprocess.PIPE, stderr=follower, text=True
    )
    out, _ = proc.communicate(timeout=120)
    os.close(follower)
    reader.join(timeout=10)
    os.close(leader)
    return proc.returncode, out, b"".join(chunks)


@pytest.mark.slow
def test_compare_shows_a_bar_on_a_terminal():
    """Issue 28: `compare` ran ~8 s at its defaults with nothing on the screen. A bar over its 4 x
    replications runs on a terminal; --quiet hides it; the results are the same either way."""
    code, out, shown = _stderr_on_a_terminal("compare", "--replications", "3", "--json")
    assert code == 0 and b"simulating:" in shown and b"/12 [" in shown
    code, quiet_out, shown = _stderr_on_a_terminal("compare", "--replications", "3", "--json", "--quiet")
    assert code == 0 and shown == b"" and json.loads(quiet_out)["rows"] == json.loads(out)["rows"]


class _Terminal:
    """A text stream that says it is a terminal (what tqdm writes to when stderr is one)."""

    def __init__(self) -> None:
        import io

        self.buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_assignments_check_shows_a_bar_on_a_terminal(monkeypatch, tmp_path):
    """Issue 28: `assignments check` grades every notebook twice (minutes) with nothing on the screen. A bar
    over the gradings on a terminal, unless progress is off (--quiet). The grader is stubbed here: the bar is
    what is tested, not the grading (test_assignments runs the real check)."""
    import sys
    from types import SimpleNamespace

    import emqsim.assignments as assignments
    import emqsim.grading as grading

    notebooks = [tmp_path / "a.ipynb", tmp_path / "b.ipynb"]
    monkeypatch.setattr(assignments, "sources", lambda folder: notebooks)
    monkeypatch.setattr(assignments, "_require_notebook_tools", lambda: None)
    monkeypatch.setattr(grading, "generate_student_version", lambda src, dst: None)
    monkeypatch.setattr(
        grading,
        "grade",
        lambda path, **kw: SimpleNamespace(
            passed=True, autograded=[], notes=[], score=(0.0 if "release" in str(path) else 5.0, 5.0)
        ),
    )
    for progress, expect in ((True, True), (False, False)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        rows = assignments.check(progress=progress)
        assert [r.ok for r in rows] == [True, True]
        shown = terminal.buffer.getvalue()
        assert ("grading:" in shown and "/4 [" in shown) is expect, shown


def test_figures_shows_a_bar_on_a_terminal(monkeypatch, tmp_path):
    """Issue 28: `figures` runs about a minute with nothing on the screen. A bar over its six figure groups on
    a terminal, unless progress is off (`figures --quiet`). The figures are stubbed: the bar is what is tested
    (test_figures draws them)."""
    import sys

    import emqsim.figures as figures

    for step in ("_timelines", "_two_columns"):
        monkeypatch.setattr(figures, step, lambda out, *a: [out / "x.svg"])
    for step in ("_frontier", "_latency_cdf", "_heatmap", "_freeze_curve"):
        monkeypatch.setattr(figures, step, lambda out, quick, n: [out / "y.svg"])
    for progress, expect in ((True, True), (False, False)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert len(figures.generate_all(tmp_path, progress=progress)) == 6
        shown = terminal.buffer.getvalue()
        assert ("figures:" in shown and "/6 [" in shown) is expect, shown
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    assert main(["figures", "--out", str(tmp_path), "--quiet"]) == 0


def test_grade_shows_the_time_so_far_on_a_terminal(monkeypatch, capsys):
    """Issue 28: `grade` runs a notebook for tens of seconds (28 s for assignment 01's solution here) with
    nothing on the screen. While it runs, a line on a terminal's stderr shows the time so far (the kernel runs
    in another process: there is no count); --quiet hides it. The grader is stubbed (test_grading grades)."""
    import sys
    import time
    from types import SimpleNamespace

    import emqsim.grading as grading

    def slow_grade(path, **kw):
        time.sleep(1.2)
        return SimpleNamespace(text=lambda: "all checks pass", passed=True)

    monkeypatch.setattr(grading, "grade", slow_grade)
    for progress, expect in ((True, True), (False, False)):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert grading.grade_notebook("a.ipynb", progress=progress) == 0
        shown = terminal.buffer.getvalue()
        assert ("grading a.ipynb: 00:01" in shown) is expect, shown
        assert capsys.readouterr().out == "all checks pass\n"


def test_grading_several_notebooks_counts_them_and_keeps_what_finished(monkeypatch, capsys, tmp_path):
    """`grade A B C` on a terminal shows a bar counting the notebooks; Ctrl-C in the second keeps the first's
    report and prints the summary of what finished before the interrupt goes on. The notebooks are read for
    real (every one before any runs); the run of each is stubbed (test_assignments grades for real)."""
    import sys

    import nbformat

    import emqsim.grading as grading
    from emqsim.grading.report import CellGrade, GradeReport

    paths = []
    for name in ("a", "b", "c"):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("assert True")])
        nb.cells[0].metadata["nbgrader"] = {
            "grade": True, "solution": False, "locked": True, "grade_id": "t", "points": 1, "schema_version": 3,
        }  # fmt: skip
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        paths.append(tmp_path / f"{name}.ipynb")
    graded = []

    def run(submission, **kw):
        graded.append(submission.path)
        if len(graded) == 2:
            raise KeyboardInterrupt
        return GradeReport(submission.path.name, [CellGrade("t", 1.0, 1.0, "pass")])

    monkeypatch.setattr(grading, "grade_prepared", run)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with pytest.raises(KeyboardInterrupt):
        grading.grade_notebooks(paths, progress=True)
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    assert graded == paths[:2]
    assert "1/3" in terminal.buffer.getvalue() and "notebook" in terminal.buffer.getvalue()
    out = capsys.readouterr().out
    assert out.startswith(f"{paths[0]}\n") and str(paths[1]) not in out
    assert "1 of 3 notebooks graded" in out and re.search(
        rf"^{re.escape(str(paths[0]))}\s+1 / 1\s+all", out, re.M
    )
