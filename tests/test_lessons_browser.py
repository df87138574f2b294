"""The six lessons in a real JupyterLab, driven in Debian's Chromium through playwright (as a student would):
open each one, Run All at full size, wait until the kernel is idle, and check that no cell has an error output,
the browser logged no console error, and moving one of the explorer's sliders redraws its timeline (the image
changes).

A temporary copy of the lessons and of the package runs on a JupyterLab server of its own, on loopback, with a
random token and its own settings folders. This is each lesson's full-size run in the test suite: where this
test runs, tests/test_notebooks.py does not run the lessons again headless (tests/conftest.py); where no
browser is available, it does. Set EMQSIM_LESSON_SCREENSHOTS=DIR to keep a screenshot of each lesson after
Run All.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import lessons_browser_missing

from tests.test_timeline_html import CHROMIUM_FLAGS  # one set of flags for every browser test

pytestmark = pytest.mark.slow

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.name for p in (ROOT / "notebooks").glob("0*.ipynb"))

RUN_ALL_TIMEOUT_S = 300  # lesson 05's ten live runs take about 40 s alone
REDRAW_TIMEOUT_S = 30


def _browser():
    """(sync_playwright, chromium path, jupyter lab command), or skip with what is missing; under
    EMQSIM_REQUIRE_BROWSER=1 (CI) a missing piece is a failure instead."""
    problem = lessons_browser_missing()
    if problem:
        if os.environ.get("EMQSIM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"EMQSIM_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(f"lessons' browser test skipped: {problem}")
    from playwright.sync_api import sync_playwright

    return sync_playwright, next(p for p in map(shutil.which, ("chromium", "chromium-browser")) if p)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _copy(tmp: Path) -> Path:
    """The lessons and the package in `tmp`; returns the folder JupyterLab serves."""
    folder = tmp / "notebooks"
    folder.mkdir()
    shutil.copytree(ROOT / "emqsim", tmp / "emqsim", ignore=shutil.ignore_patterns("__pycache__"))
    for name in LESSONS:
        shutil.copy(ROOT / "notebooks" / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on loopback serving a copy of the lessons: (base url, token, process)."""
    _browser()
    tmp = tmp_path_factory.mktemp("lab")
    folder = _copy(tmp)
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]),
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
    }
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend
    # No "get notified about Jupyter news?" toast over the lesson, and no request for news or updates.
    notices = tmp / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notices.parent.mkdir(parents=True)
    notices.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        f"--port={port}",
        f"--ServerApp.token={token}",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.root_dir={folder}",
        "--ServerApp.open_browser=False",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run commands and read the cells' models
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append(
            "--allow-root"
        )  # containers and CI run as root; the server still listens on loopback only
    log = open(tmp / "lab.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp / "lab.log").read_text()[-2000:])
                time.sleep(0.5)
        yield base, token, tmp
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    sync_playwright, chromium = _browser()
    _, _, tmp = lab
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp / "profile"),
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


CELLS_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const cells = panel.content.widgets.map(c => c.model.toJSON());
    return {
        status: panel.sessionContext.session ? panel.sessionContext.session.kernel.status : 'none',
        cells: cells,
    };
}"""


def _run_all(page, name: str) -> dict:
    """Run All in the open lesson; wait until every code cell ran and the kernel is idle; the cells' JSON."""
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + RUN_ALL_TIMEOUT_S
    while True:
        state = page.evaluate(CELLS_JS)
        code = [c for c in state["cells"] if c["cell_type"] == "code"]
        if state["status"] == "idle" and all(c.get("execution_count") for c in code if c["source"].strip()):
            return state
        assert time.monotonic() < deadline, f"{name}: Run All did not finish in {RUN_ALL_TIMEOUT_S} s"
        page.wait_for_timeout(500)


def _explorer_image(page) -> str:
    """The explorer's timeline as its <img> data (its Output widget holds the figure)."""
    return page.locator(".widget-output img").first.get_attribute("src") or ""


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_in_jupyterlab_and_its_explorer_redraws(lab, browser, name):
    base, token, tmp = lab
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    try:
        page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
            timeout=60_000,
        )
        state = _run_all(page, name)
        errors = [
            f"cell {i}: {o.get('ename')}: {o.get('evalue')}"
            for i, c in enumerate(state["cells"])
            if c["cell_type"] == "code"
            for o in c.get("outputs", [])
            if o.get("output_type") == "error"
        ]
        assert not errors, f"{name}: error output\n" + "\n".join(errors)
        shots = os.environ.get("EMQSIM_LESSON_SCREENSHOTS")
        if shots:
            _screenshots(page, Path(shots), name)

        # Move one control of the explorer (the job-length slider, one step left: every lesson opens it above
        # its minimum, one at its maximum) and wait for the redraw.
        slider = page.locator(".widget-slider", has=page.get_by_text("job (s)", exact=True))
        slider.scroll_into_view_if_needed()
        page.wait_for_function("() => document.querySelector('.widget-output img') !== null", timeout=30_000)
        before = _explorer_image(page)
        handle = slider.locator(".noUi-handle").first
        handle.focus()
        page.keyboard.press("ArrowLeft")
        deadline = time.monotonic() + REDRAW_TIMEOUT_S
        while _explorer_image(page) == before:
            assert time.monotonic() < deadline, f"{name}: moving the job slider did not redraw the timeline"
            page.wait_for_timeout(250)
        assert _explorer_image(page).startswith("data:image/png")
        assert problems == [], f"{name}: browser console errors\n" + "\n".join(problems)
    finally:
        page.evaluate("() => window.jupyterapp && window.jupyterapp.commands.execute('kernelmenu:shutdown')")
        page.close()


def _screenshots(page, folder: Path, name: str) -> None:
    """Screenshots of the lesson from top to bottom, one per screenful (the notebook scrolls in its panel)."""
    folder.mkdir(parents=True, exist_ok=True)
    scroller = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer"
    height = page.evaluate(f"() => document.querySelector('{scroller}').scrollHeight")
    view = page.evaluate(f"() => document.querySelector('{scroller}').clientHeight")
    top, n = 0, 0
    while top < height and n < 40:
        page.evaluate(f"() => document.querySelector('{scroller}').scrollTo(0, {top})")
        page.wait_for_timeout(300)
        page.screenshot(path=str(folder / f"{Path(name).stem}-{n:02d}.png"))
        top, n = top + view - 50, n + 1
        height = page.evaluate(f"() => document.querySelector('{scroller}').scrollHeight")
