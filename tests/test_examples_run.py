"""Examples that run: every Python block of README.md and docs/*.md runs (the blocks of one page in order, in
one namespace, as a reader would paste them), or says why not in a `<!-- not-run: reason -->` comment just
before it (and still parses); `benchmarks/bench.py --quick` runs every one of its sections."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!--\s*not-run:(?P<why>[^>]*?)-->\s*\n)?```python\n(?P<code>.*?)\n```", re.S)
# Pages whose blocks take more than a few seconds (30 replications, an exploration, a real Redis):
# they run in the slow suite (EMQSIM_SLOW=1, CI).
SLOW_PAGES = {"README.md", "explore.md", "live.md"}


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, reason it is not run or None) of each Python block of `page`."""
    text = page.read_text()
    return [
        (
            text[: m.start("code")].count("\n") + 1,
            m["code"],
            m["why"].strip() if m["why"] is not None else None,
        )
        for m in BLOCK.finditer(text)
    ]


RUNNABLE = [p for p in PAGES if any(why is None for _, _, why in blocks(p))]


def test_every_python_block_runs_or_says_why_not():
    for page in PAGES:
        for line, code, why in blocks(page):
            ast.parse(code, filename=f"{page.name}:{line}")  # a block not run still parses
            if why is not None:
                assert len(why) > 10, f"{page.name}:{line}: a not-run marker must give its reason"
    text = "\n".join(p.read_text() for p in PAGES)
    assert text.count("```python") == sum(len(blocks(p)) for p in PAGES), "a ```python block was not found"


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=[pytest.mark.slow] if p.name in SLOW_PAGES else []) for p in RUNNABLE],
    ids=[p.name for p in RUNNABLE],
)
def test_the_python_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    """The page's runnable blocks, in order, in one fresh interpreter started in an empty folder (with the
    shipped example durations.csv that docs/tune.md reads)."""
    shutil.copy(ROOT / "emqsim" / "examples" / "durations.csv", tmp_path / "durations.csv")
    script = []
    for line, code, why in blocks(page):
        if why is None:
            script.append(f"# --- {page.name}:{line}\n{code}\n")
    path = tmp_path / "blocks.py"
    path.write_text("\n".join(script))
    done = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=900,
        env={**__import__("os").environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert done.returncode == 0, f"{page.name}: a block failed:\n{done.stderr[-3000:]}"


@pytest.mark.slow
def test_bench_quick_runs_every_section(tmp_path: Path) -> None:
    """`--quick` alone skips explore, tune and breakdown (no small version of their CLI commands): named, they
    run too, so every section is exercised. The script exits 0 even when a command it times fails (it reports
    FAILED), so the report is read. Its FAIL lines are targets missed at the small sizes, not errors."""
    sections = "bare,model,sweep,heartbeat,big,explore,tune,breakdown"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick", "--repeat", "1", "--only", sections],
        cwd=tmp_path, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    report = done.stdout
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "FAILED" not in report, report
    for head in ("model (records):", "bare SimPy:", "sweep:", "heartbeat:", "big:", "explore:", "tune:",
                 "breakdown ("):  # fmt: skip
        assert any(line.startswith(head) for line in report.splitlines()), f"no {head!r} section:\n{report}"


def test_the_package_docstrings_example_runs():
    """`emqsim.__doc__`'s example (what `help(emqsim)` shows first) runs as written."""
    import doctest

    import emqsim

    test = doctest.DocTestParser().get_doctest(emqsim.__doc__ or "", {}, "emqsim", "emqsim/__init__.py", 0)
    assert test.examples, "emqsim's docstring has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
