"""Every install path, as a newcomer takes it, in fresh virtual environments under a temporary folder:

* the README's quick start, verbatim, in a copy of the checkout;
* `pip install <checkout>` (not editable) used from another folder: the base install alone, then adding the
  `notebooks`, `live` and `dask` extras one at a time (notebooks first, so it is checked without `live`).

Each missing extra must be named in one line (exit status 2, no traceback). These build environments, so they
run only when EMQSIM_TEST_INSTALL=1 (CI sets it in .ci/run); pip reuses its local cache, so each takes seconds
to a minute.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("EMQSIM_TEST_INSTALL") != "1",
        reason="install paths build fresh venvs: run with EMQSIM_TEST_INSTALL=1 (CI does)",
    ),
]
IGNORE = shutil.ignore_patterns(
    ".venv", ".git", "__pycache__", "*.egg-info", "node_modules", ".pytest_cache", ".hypothesis",
    ".ruff_cache", ".mypy_cache", ".emqsim-cache", "build", "dist",
)  # fmt: skip


def sh(command: str | list[str], cwd: Path, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    # as on a user's machine: no venv, no PYTHONPATH, and pip's defaults (.ci/run sets PIP_COMPILE=0 for its own
    # install only)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_COMPILE")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    return subprocess.run(
        command,
        cwd=cwd,
        shell=isinstance(command, str),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        executable="/bin/bash" if isinstance(command, str) else None,
        **kw,
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess, extra: str) -> None:
    """Exit status 2, one line on stderr naming `pip install 'emqsim[extra]'`, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"pip install 'emqsim[{extra}]'" in lines[0] and "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("clone") / "emqsim"
    shutil.copytree(ROOT, copy, ignore=IGNORE)
    return copy


def readme_quick_start() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return next(c for c in re.findall(r"```bash\n(.*?)\n```", text, re.S) if "emqsim sweep" in c)


def test_readme_quick_start_verbatim(checkout):
    command = readme_quick_start()
    out = ok(sh(command, cwd=checkout))
    assert "lease minus the 600 s timeout" in out and "production" in out
    # the command upgrades pip first: pip before 25.1 shows no licence for PEP 639 metadata (License-Expression)
    shown = ok(sh([str(checkout / ".venv" / "bin" / "pip"), "show", "emqsim"], cwd=checkout))
    assert "License-Expression: MIT" in shown.splitlines(), shown


@pytest.fixture(scope="module")
def installed(checkout, tmp_path_factory):
    """A venv with `pip install <checkout>` (base only), and a folder outside the checkout to run in."""
    where = tmp_path_factory.mktemp("user")
    venv = where / "venv"
    ok(sh([sys.executable, "-m", "venv", str(venv)], cwd=where))
    python = str(venv / "bin" / "python")
    # --no-compile: pip's byte-compiling of every installed file is half an install's CPU, and what these tests
    # check does not depend on it (the README's own command, above, runs verbatim)
    ok(sh([python, "-m", "pip", "install", "-q", "--no-compile", str(checkout)], cwd=where))
    return python, where, checkout


def test_base_install(installed):
    python, where, _ = installed
    version = ok(sh([python, "-c", "import emqsim; print(emqsim.__version__)"], cwd=where)).strip()
    meta = json.loads(
        ok(
            sh(
                [python, "-c", "import json, importlib.metadata as m; d = m.metadata('emqsim'); "
                 "print(json.dumps({k: d[k] for k in ('Version', 'License-Expression')}))"],
                cwd=where,
            )
        )
    )  # fmt: skip
    assert meta == {"Version": version, "License-Expression": "MIT"}
    script = str(Path(python).parent / "emqsim")
    assert ok(sh([script, "--version"], cwd=where)).strip() == f"emqsim {version}"  # the console script

    live_help = sh([python, "-m", "emqsim", "live", "--help"], cwd=where)  # readable without the extra
    assert live_help.returncode == 0 and "usage: emqsim live" in live_help.stdout, live_help
    assert "pip install 'emqsim[live]'" in " ".join(live_help.stdout.split()), live_help.stdout
    one_line_error(sh([python, "-m", "emqsim", "live", "--scenario", "fast-dead"], cwd=where), "live")
    assert "live" in ok(sh([python, "-m", "emqsim", "--help"], cwd=where))
    (where / "X.ipynb").write_text("{}")
    one_line_error(sh([python, "-m", "emqsim", "grade", "X.ipynb"], cwd=where), "notebooks")
    dask = sh(
        [python, "-m", "emqsim", "sweep", "--scenario", "fast-dead", "--dask", "local", "--quiet"], cwd=where
    )
    one_line_error(dask, "dask")

    listing = ok(sh([python, "-m", "emqsim", "examples"], cwd=where))
    paths = [Path(line.strip()) for line in listing.splitlines() if line.strip().endswith(".toml")]
    assert {p.name for p in paths} >= {"gc-pauses.toml", "dying-fleet.toml", "celery-long-tasks.toml"}
    assert all(p.is_file() and "site-packages" in p.parts for p in paths)
    for config in (
        "gc-pauses",
        "emqsim/examples/gc-pauses.toml",
        "measured-durations",
    ):  # + its durations.csv
        run = sh(
            [python, "-m", "emqsim", "run", "--config", config, "--job-count", "20", "--json"], cwd=where
        )
        assert json.loads(ok(run))["rows"][0]["scenario"] == Path(config).name.removesuffix(".toml")


def notebook_imports(path: Path) -> set[str]:
    """Modules the notebook's code cells import (dotted names, as written)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    modules: set[str] = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module)
    return modules


def test_extras_one_at_a_time(installed):
    python, where, checkout = installed

    def add(extra: str) -> None:
        ok(sh([python, "-m", "pip", "install", "-q", "--no-compile", f"{checkout}[{extra}]"], cwd=where))

    add("notebooks")  # first, so the notebooks extra alone must carry what the notebooks import
    notebooks = sorted((checkout / "notebooks").rglob("*.ipynb"))
    modules = sorted(set().union(*(notebook_imports(p) for p in notebooks)))
    assert "emqsim.live" in notebook_imports(
        checkout / "notebooks" / "05-live-vs-simulated.ipynb"
    )  # redis-py
    ok(sh([python, "-c", "import " + ", ".join(modules)], cwd=where))
    assert "usage" in ok(sh([python, "-m", "emqsim", "grade", "--help"], cwd=where))

    add("live")
    assert "--time-scale" in ok(sh([python, "-m", "emqsim", "live", "--help"], cwd=where))

    add("dask")
    out = ok(
        sh(
            [python, "-m", "emqsim", "sweep", "--scenario", "fast-dead", "--timeout", "600",
             "--replications", "2", "--dask", "local", "--quiet", "--json"],
            cwd=where,
        )
    )  # fmt: skip
    assert len(json.loads(out)["rows"]) == 2
