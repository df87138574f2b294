"""A user's detector runs from its file in every simulating command that takes --policy (run, sweep,
timeline) and from a scenario file's [policy] table, with its own parameters read as literals (never
evaluated); every bad file, class or parameter is one line, exit status 2, before any work; and a sweep's
cache key covers the detector's file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from emqsim import standard
from emqsim.cli import main
from emqsim.config import load_config
from emqsim.errors import ConfigError
from emqsim.sweep import Cell, user_code_digest
from emqsim.user_code import detector, parse_detector

PHI = Path(__file__).resolve().parent.parent / "emqsim" / "examples" / "phi_accrual.py"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    shutil.copy(PHI, tmp_path / "my_detector.py")
    (tmp_path / "other.py").write_text("class NotOne:\n    pass\n")
    (tmp_path / "broken.py").write_text("x = (\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('no database here')\n")
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def test_parameters_are_literals_and_nothing_is_evaluated():
    spec = parse_detector("d.py:Phi(threshold=8, window=50, name='x', extra=[1, 2], on=True)")
    assert spec.name == "Phi" and dict(spec.params) == {
        "threshold": 8, "window": 50, "name": "x", "extra": [1, 2], "on": True,
    }  # fmt: skip
    assert parse_detector("d.py:Phi").params == () and parse_detector("d.py:Phi()").params == ()
    with pytest.raises(ConfigError, match="is not a literal"):
        parse_detector("d.py:Phi(threshold=__import__('os').getpid())")
    with pytest.raises(ConfigError, match="by name"):
        parse_detector("d.py:Phi(8)")


def test_run_and_timeline_take_a_detector_with_its_parameters(here, capsys):
    code, out, err = run(["run", "--scenario", "fast-dead", "--replications", "1",
                          "--policy", "my_detector.py:PhiAccrual(threshold=4)"], capsys)  # fmt: skip
    assert code == 0, err
    assert out.startswith("fast-dead under PhiAccrual(beat=2.0, threshold=4, window=100, scan=1.0)")
    assert "phi-accrual" in out and "threshold                       4" in out
    code, out, err = run(
        ["timeline", "--scenario", "fast-dead", "--policy", "my_detector.py:PhiAccrual"], capsys
    )
    assert code == 0, err
    assert out.startswith("fast-dead under phi-accrual") and "reclaimed from worker 0 by reaper" in out


def test_sweep_runs_a_detector_beside_the_timeouts_asked_for(here, capsys):
    code, out, err = run(["sweep", "--scenario", "fast-dead", "--replications", "2", "--jobs", "1", "--quiet",
                          "--policy", "my_detector.py:PhiAccrual", "--timeout", "600", "--json"], capsys)  # fmt: skip
    assert code == 0, err
    assert '"policy": "phi-accrual"' in out and '"policy": "timeout"' in out and '"threshold": 8.0' in out
    code, out, err = run(["sweep", "--scenario", "fast-dead", "--replications", "2", "--jobs", "1", "--quiet",
                          "--policy", "my_detector.py:PhiAccrual", "--timeout", "600"], capsys)  # fmt: skip
    assert code == 0 and "phi-accrual minus the 600 s timeout, paired on the same seeds" in out, err


def test_a_scenario_file_names_a_detector_beside_it_with_its_parameters(here, capsys):
    folder = here / "files"
    folder.mkdir()
    shutil.copy(PHI, folder / "phi.py")
    toml = folder / "phi.toml"
    toml.write_text('[scenario]\nworkers = 2\n[[scenario.faults]]\nkind = "crash"\njob = 0\nafter = 1\n'
                    '[policy]\nkind = "phi.py:PhiAccrual"\nthreshold = 4\nwindow = 50\n')  # fmt: skip
    _, policy = load_config(toml)
    assert type(policy).__name__ == "PhiAccrual" and (policy.threshold, policy.window) == (4, 50)
    code, out, err = run(["timeline", "--config", str(toml)], capsys)
    assert code == 0 and out.startswith("custom under phi-accrual"), err
    (folder / "bad.toml").write_text('[scenario]\n[policy]\nkind = "phi.py:PhiAccrual"\nthresh = 4\n')
    with pytest.raises(ConfigError, match=r"bad.toml:3: policy.kind: PhiAccrual has no parameter 'thresh'"):
        load_config(folder / "bad.toml")


BAD = {
    "no file": ("nope.py:X", "nope.py: no such file"),
    "no class": ("my_detector.py:Phi", "my_detector.py has no class Phi; it defines PhiAccrual"),
    "not a detector": ("other.py:NotOne", "other.py:NotOne is not a Detector subclass"),
    "not python": ("broken.py:X", "broken.py:1: not valid Python"),
    "import fails": ("raises.py:X", "raises.py: importing it failed: RuntimeError: no database here"),
    "unknown parameter": ("my_detector.py:PhiAccrual(thresh=8)", "has no parameter 'thresh'; it takes: beat, scan"),
    "refused parameter": ("my_detector.py:PhiAccrual(beat=-1)", "the parameters were refused: beat must be"),
    "not a literal": ("my_detector.py:PhiAccrual(window=len('ab'))", "is not a literal"),
    "not a policy": ("phi", "is not a policy; choose lease or timeout"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_a_bad_detector_is_one_line_exit_2_before_any_work(case, here, capsys):
    text, expected = BAD[case]
    for command in (["run", "--replications", "1"], ["timeline"], ["sweep", "--scenario", "fast-dead"]):
        code, out, err = run([*command, "--policy", text], capsys)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (command, err)
        assert expected in err and "Traceback" not in err, err


def test_a_detector_rejects_the_lease_flags(here, capsys):
    code, _, err = run(["run", "--policy", "my_detector.py:PhiAccrual", "--lease", "30"], capsys)
    assert code == 2 and "--lease: a detector takes its own settings" in err


def test_the_cache_key_covers_the_detectors_file(here):
    scenario = standard("fast-dead")
    first = detector("my_detector.py:PhiAccrual")
    key = Cell(scenario, first).key(0, 2, "x")
    assert user_code_digest(Cell(scenario, first)) is not None
    assert Cell(scenario, detector("my_detector.py:PhiAccrual(threshold=4)")).key(0, 2, "x") != key
    path = here / "my_detector.py"
    path.write_text(path.read_text() + "\n# an edit\n")
    assert Cell(scenario, first).key(0, 2, "x") != key


def test_a_detector_unpickles_in_a_fresh_process_from_its_file(here):
    """A Dask worker is a spawned process that never imported the file: the module name spells the file's path,
    so unpickling imports it there (a --dask local sweep with a detector hung before)."""
    import pickle
    import subprocess
    import sys

    made = detector("my_detector.py:PhiAccrual(threshold=4)")
    assert type(made).__module__.startswith("emqsim.user_code.file_")
    code = "import pickle, sys; d = pickle.loads(sys.stdin.buffer.read()); print(repr(d), type(d).__module__)"
    done = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(made), capture_output=True, cwd="/", check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == [
        repr(made).split()[0],
        *repr(made).split()[1:],
        type(made).__module__,
    ]
