"""A newcomer's first hour: missing extras named in one line, shipped examples findable, help that tells the
truth, job durations from a file, results that carry their provenance, packaging metadata, plain figure
labels, and a type-checked package."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

import emqsim
from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.cli import (
    CSV_PROVENANCE_PREFIX,
    build_parser,
    example_files,
    main,
    scenario_summary,
)
from emqsim.config import load_config
from emqsim.distributions import Empirical, parse_distribution, read_durations
from emqsim.errors import ConfigError
from emqsim.scenario import STANDARD
from emqsim.verdict import HOSTAGE_AFTER

ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- missing extras -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["live", "--scenario", "fast-dead"], ["live"]])
def test_live_without_redis_names_the_extra(monkeypatch, capsys, argv):
    """Running `live` without redis-py is one line naming the extra (its --help reads: test_first_hour.py)."""
    monkeypatch.setitem(sys.modules, "redis", None)  # as if redis-py were not installed
    assert "live" in subcommands(build_parser())  # the subcommand never disappears
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "pip install 'emqsim[live]'" in err and "Traceback" not in err
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "live" in out and "emqsim[live]" in out


def test_grade_without_nbformat_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "nbformat", None)
    notebook = tmp_path / "X.ipynb"
    notebook.write_text("{}")
    code, out, err = run_cli(capsys, "grade", str(notebook))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "pip install 'emqsim[notebooks]'" in err and "nbformat" in err


def test_notebooks_extra_carries_what_the_notebooks_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    notebooks = {re.split(r"[<>=\[]", d)[0] for d in project["optional-dependencies"]["notebooks"]}
    assert {"redis", "nbformat", "nbclient", "ipykernel", "ipywidgets", "pandas"} <= notebooks
    nb05 = (ROOT / "notebooks" / "05-live-vs-simulated.ipynb").read_text()
    assert "emqsim.live" in nb05 or "import redis" in nb05  # it needs redis-py


# -- examples -----------------------------------------------------------------------------------------------------
def test_examples_listed_with_their_paths(capsys):
    code, out, _ = run_cli(capsys, "examples")
    assert code == 0
    files = example_files()
    assert set(files) == {p.stem for p in (ROOT / "emqsim" / "examples").glob("*.toml")}
    for name, path in files.items():
        assert name in out and str(path) in out and path.is_file()
    assert "--config NAME" in out


@pytest.mark.parametrize("given", ["gc-pauses", "gc-pauses.toml", "no/such/folder/examples/gc-pauses.toml"])
def test_config_takes_an_example_by_name(capsys, tmp_path, monkeypatch, given):
    monkeypatch.chdir(tmp_path)  # outside the checkout
    code, out, err = run_cli(capsys, "run", "--config", given, "--job-count", "5", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["scenario"] == "gc-pauses"


def test_shipped_durations_example(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its durations.csv is found beside the TOML file, not in the current folder
    code, out, err = run_cli(capsys, "run", "--config", "measured-durations", "--job-count", "30", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["scenario"] == "measured-durations"
    scenario, _ = load_config(example_files()["measured-durations"])
    assert isinstance(scenario.duration, Empirical) and len(scenario.duration.values) == 200


def test_config_unknown_name_lists_the_examples(capsys):
    code, _, err = run_cli(capsys, "run", "--config", "gc-pause")
    assert code == 2 and err.count("\n") == 1
    assert "gc-pauses" in err and "emqsim examples" in err


# -- help texts ---------------------------------------------------------------------------------------------------
def test_every_flag_has_help():
    for name, sub in subcommands(build_parser()).items():
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("command", ["run", "timeline", "compare"])
def test_single_value_commands_do_not_offer_grids(capsys, command):
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0 and "grid" not in out and "10:60:10" not in out
    code, _, err = run_cli(capsys, command, "--lease", "10,20")
    assert code == 2 and "--lease" in err


def test_sweep_help_says_95_percent(capsys):
    code, out, _ = run_cli(capsys, "sweep", "--help")
    assert code == 0 and "95%" in out and "%%" not in out
    assert "a grid: 10,20,30 or 10:60:10" in out  # sweep does take grids


def test_scenarios_descriptions_are_whole(capsys):
    code, out, _ = run_cli(capsys, "scenarios")
    assert code == 0
    flat = " ".join(out.split())
    for factory in STANDARD.values():
        summary = scenario_summary(factory)
        assert summary.endswith(".") and summary in flat
    assert "network jitter: where both failure modes of the timeout meet." in flat  # production, not cut
    assert max(len(line) for line in out.splitlines()) <= 100


def test_compare_agrees_with_the_figure(capsys):
    from emqsim.plots import verdict

    code, out, _ = run_cli(capsys, "compare", "--replications", "2")
    assert code == 0
    worlds = out.split("\n\n")[1:]  # one block per world: its name, then a line per rule
    rows = {block.splitlines()[0]: block for block in worlds}
    assert "WRONG: held hostage" in rows["fast-but-dead"] and "right: recovered" in rows["fast-but-dead"]
    held = simulate(standard("fast-dead", die_after=1.0), TimeoutPolicy(600, 5), seed=0)
    assert held.attempts[0].detection_latency > HOSTAGE_AFTER and not verdict(held).good  # the figure: wrong
    quick = simulate(standard("fast-dead", die_after=1.0), LeasePolicy(30, 10, 5), seed=0)
    assert quick.attempts[0].detection_latency <= HOSTAGE_AFTER and verdict(quick).good


# -- job durations from a file ---------------------------------------------------------------------------------
def test_durations_file_with_header_comments_and_blank_lines(tmp_path):
    path = tmp_path / "durations.csv"
    path.write_text("duration_s\n# measured on prod, 2026-11\n12.5\n\n30\n0\n400\n", encoding="utf-8")
    dist = parse_distribution(f"file:{path}")
    assert dist == Empirical((12.5, 30.0, 0.0, 400.0)) == read_durations(path)
    assert dist.mean() == pytest.approx(110.625)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("", "has no values"),
        ("duration_s\n# nothing\n", "has no values"),
        ("1\nabc\n", ":2: 'abc' is not a number"),
        ("1\n-2\n", ":2: '-2' is negative"),
        ("1\nnan\n", ":2: 'nan' is not a finite number"),
        ("1\ninf\n", ":2: 'inf' is not a finite number"),
        ("1,2\n3,4\n", ":1: '1,2' has several columns"),
        ("a\nb\n", ":2: 'b' is not a number"),
    ],
)
def test_durations_file_errors_are_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "d.csv"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_distribution(f"file:{path}")
    code, out, err = run_cli(capsys, "run", "--scenario", "fast-dead", "--duration", f"file:{path}")
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_durations_file_from_cli_and_toml_is_deterministic(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.csv").write_text("seconds\n5\n45\n600\n", encoding="utf-8")
    config = tmp_path / "scenario.toml"
    config.write_text('[scenario]\nname = "mine"\nworkers = 2\njobs = 12\nduration = "file:data/d.csv"\n')
    scenario, _ = load_config(config)  # the path is taken beside the TOML file
    assert scenario.duration == Empirical((5.0, 45.0, 600.0))
    a = simulate(scenario, LeasePolicy(30, 10), seed=3)
    b = simulate(load_config(config)[0], LeasePolicy(30, 10), seed=3)
    assert a.digest() == b.digest() and {x.work for x in a.attempts} <= {5.0, 45.0, 600.0}
    outputs = []
    for _ in range(2):
        code, out, err = run_cli(
            capsys, "run", "--scenario", "production", "--job-count", "10",
            "--duration", f"file:{tmp_path / 'data' / 'd.csv'}", "--json",
        )  # fmt: skip
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1]
    bad = tmp_path / "bad.toml"
    bad.write_text('[scenario]\nname = "bad"\nduration = "file:missing.csv"\n')
    with pytest.raises(ConfigError, match=r"bad.toml:3: scenario.duration: durations file .* does not exist"):
        load_config(bad)


def test_durations_documented():
    doc = (ROOT / "docs" / "durations.md").read_text()
    assert "file:durations.csv" in doc and "empirical:" in doc and "header" in doc
    assert "docs/durations.md" in (ROOT / "README.md").read_text()


# -- provenance ---------------------------------------------------------------------------------------------------
def test_csv_carries_provenance(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    argv = ["sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "2", "--quiet"]
    code, _, _ = run_cli(capsys, *argv, "--seed", "7", "--out", str(out))
    assert code == 0
    first, header = out.read_text().splitlines()[:2]
    assert first.startswith(CSV_PROVENANCE_PREFIX) and header.startswith("scenario,")
    meta = json.loads(first.removeprefix(CSV_PROVENANCE_PREFIX))
    assert meta["version"] == emqsim.__version__ and meta["seed"] == 7 and meta["replications"] == 2
    assert meta["command"] == "emqsim " + " ".join([*argv, "--seed", "7", "--out", str(out)])
    assert set(meta["libraries"]) >= {"numpy", "simpy", "scipy", "matplotlib"} and meta["python"]
    pandas = pytest.importorskip("pandas")
    assert len(pandas.read_csv(out, comment="#")) == 2
    js = tmp_path / "rows.json"
    run_cli(capsys, *argv, "--seed", "7", "--out", str(js))
    assert {"version", "seed", "command", "libraries", "python", "rows"} <= set(json.loads(js.read_text()))


# -- packaging ----------------------------------------------------------------------------------------------------
def test_packaging_metadata():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert project["license"] == "MIT" and "LICENSE" in project["license-files"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "version" not in project and "version" in project["dynamic"]  # one source: emqsim.__version__
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "emqsim.__version__"}
    assert any(r.startswith("setuptools>=77") for r in pyproject["build-system"]["requires"])
    assert "Typing :: Typed" in project["classifiers"]
    assert project["urls"] and all(url.startswith("https://") for url in project["urls"].values())
    assert project["scripts"]["emqsim"] == "emqsim.cli:main"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{emqsim.__version__}]" in changelog and "## [0.1.0]" in changelog


def test_installed_metadata_matches():
    from importlib.metadata import metadata

    meta = metadata("emqsim")
    assert meta["Version"] == emqsim.__version__
    assert meta["License-Expression"] == "MIT"


def test_readme_tells_newcomers():
    readme = (ROOT / "README.md").read_text()
    for text in (
        "npm ci --prefix validation/bullmq",
        "EMQSIM_REQUIRE_BULLMQ",
        "emqsim sweep --lease 30 --beat 10",  # the console script
        'pip install "emqsim[notebooks]"',
        "python -m emqsim examples",
        "--config gc-pauses",
        "timeline --scenario fast-dead --out run.html",
        "file:durations.csv",
        "CHANGELOG.md",
    ):
        assert text in readme, text


# -- figures --------------------------------------------------------------------------------------------------
def _frontier_rows(scenarios: list[str]) -> list[dict]:
    from emqsim.presets import preset
    from emqsim.stats import aggregate
    from emqsim.summaries import simulate_summary

    rows = []
    for name in scenarios:
        for policy in (preset("bullmq"), TimeoutPolicy(60, 5), TimeoutPolicy(600, 5)):
            rows.append(aggregate([simulate_summary(standard(name), policy, 0, r) for r in range(2)]))
    return rows


def test_frontier_legend_has_no_duplicates_and_plain_ticks():
    from emqsim.plots import frontier

    ax = frontier(_frontier_rows(["fast-dead", "production"]))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == len(set(labels)) == 4  # per scenario: the timeout curve and the bullmq point
    assert all(label.startswith(("fast-dead: ", "production: ")) for label in labels)
    ax.figure.canvas.draw()
    ticks = [t.get_text() for t in ax.xaxis.get_ticklabels(which="both") if t.get_text()]
    assert ticks and all(re.fullmatch(r"[0-9.]+", t) for t in ticks), ticks  # 40, not 4x10^1


def test_frontier_caption_from_its_rows():
    from emqsim.figures import frontier_caption

    rows = _frontier_rows(["production"])
    caption = frontier_caption(rows, 0)
    assert "100 jobs per run" in caption and "2 replications per point" in caption and "seed 0" in caption
    with pytest.raises(ValueError):
        frontier_caption(_frontier_rows(["fast-dead", "production"]), 0)


# -- types ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_mypy_is_clean():
    if shutil.which("mypy") is None and not _has_module("mypy"):
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "emqsim"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_tree_is_ruff_clean(command):
    """`ruff check .` and `ruff format --check .` (Python in Markdown code blocks too) pass on the tree."""
    if not _has_module("ruff"):
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def _has_module(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None
