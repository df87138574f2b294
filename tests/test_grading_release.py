"""No solution in reach: the files students receive (`assignments release`) and the package they install (the
wheel, STUDENTS.md says how) hold no solution, no hidden test and no hidden seed of the source notebooks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from emqsim.cli import main  # noqa: E402
from emqsim.grading import BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, END_SOLUTION  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks" / "assignments"
SOURCES = sorted(FOLDER.glob("*.ipynb"))


def secrets() -> list[str]:
    """Every solution and hidden-test region of the source notebooks with two or more lines of content, as its
    non-blank lines stripped and joined (a one-line region, say `return last_token is None or token >
    last_token`, is also the body of the library's own `emqsim.fencing.fenced`, which the question forbids
    delegating to; it is no secret)."""
    regions = []
    for path in SOURCES:
        for cell in nbformat.read(path, as_version=4).cells:
            current: list[str] | None = None
            for line in cell.source.split("\n"):
                if BEGIN_SOLUTION in line or BEGIN_HIDDEN in line:
                    current = []
                elif END_SOLUTION in line or END_HIDDEN in line:
                    if current is not None and len(current) >= 2:
                        regions.append("\n".join(current))
                    current = None
                elif current is not None and line.strip():
                    current.append(line.strip())
    return regions


def _leaks(name: str, text: str, hidden: list[str]) -> list[str]:
    flat = "\n".join(line.strip() for line in text.splitlines() if line.strip())
    found = [region.split("\n")[0] for region in hidden if region in flat]
    found += [line.strip() for line in text.splitlines() if "HIDDEN_SEEDS =" in line]
    found += [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith(("### " + BEGIN_SOLUTION, "### " + BEGIN_HIDDEN))
    ]
    return [f"{name}: {x}" for x in found]


def test_released_files_hold_no_solution_or_hidden_test(tmp_path: Path, capsys):
    hidden = secrets()
    assert any("HIDDEN_SEEDS" in region for region in hidden) and len(hidden) > 30
    assert main(["assignments", "release", "--out", str(tmp_path / "release")]) == 0
    capsys.readouterr()
    files = [p for p in (tmp_path / "release").rglob("*") if p.is_file()]
    assert len(files) == len(SOURCES) + 1
    leaks = [x for p in files for x in _leaks(p.name, p.read_text(), hidden)]
    assert not leaks, leaks[:5]


@pytest.mark.slow
def test_the_wheel_holds_no_notebook_solution_or_hidden_test(tmp_path: Path):
    """The package STUDENTS.md tells students to install: built from a copy of the project (the checkout is not
    touched), it has no notebook and no line of a solution or hidden test."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "emqsim", src / "emqsim", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("emqsim-*.whl")
    hidden = secrets()
    leaks = []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert any(n.endswith("emqsim/grading/trusted.py") for n in names)
        assert not [n for n in names if n.endswith(".ipynb") or "notebooks/" in n], names
        for name in names:
            leaks += _leaks(name, archive.read(name).decode(errors="replace"), hidden)
    assert not leaks, leaks[:5]


def test_students_are_told_to_install_the_package_not_a_checkout():
    guide = (FOLDER / "STUDENTS.md").read_text()
    assert ".whl[notebooks]" in guide and "pip install -e" not in guide and "checkout" not in guide
    assert "git clone" not in guide
