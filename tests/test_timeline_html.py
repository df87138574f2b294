"""The interactive HTML timeline: one self-contained file, the records behind its marks, and (in a real
headless Chromium) no console errors and a hover that shows a reclaim's attempt."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys

import pytest

from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.cli import main
from emqsim.records import WorkerEvent
from emqsim.timeline_html import timeline_data, timeline_html, write_timeline_html

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def fast_dead_run():
    return simulate(standard("fast-dead"), LeasePolicy(30, 10, 5), seed=0)


def with_new_fault_kinds(run):
    """A run with worker events of kinds the page does not know (as new fault models may add)."""
    extra = [WorkerEvent(5.0, 1, "blocked", "a long GIL-holding call"), WorkerEvent(9.0, 1, "disconnected")]
    return dataclasses.replace(run, worker_events=[*run.worker_events, *extra])


def test_marks_carry_their_records():
    run = fast_dead_run()
    data = timeline_data(run)
    assert [w["id"] for w in data["workers"]] == [0, 1]
    (reclaim,) = data["reclaims"]
    first = run.attempts[0]
    assert reclaim["time"] == first.reclaimed_at and reclaim["record"]["attempt"] == first.attempt == 1
    assert (
        reclaim["record"]["worker_state_at_reclaim"] == "dead" and reclaim["record"]["false_reclaim"] is False
    )
    lock = next(lock for lock in data["locks"] if lock["record"]["token"] == first.token)
    assert lock["start"] == first.taken_at and lock["end"] < first.reclaimed_at  # lapsed before the sweep
    assert lock["record"]["ended_by"].startswith("expired")
    assert any(t["kind"] == "renewed" for t in data["ticks"])
    assert [f["kind"] for f in data["faults"]] == ["crash"]
    assert data["spans"][0]["state"] == "dead" and data["spans"][0]["start"] == first.died_at
    assert len(data["sweeps"]) == len(run.sweeps)


def test_unknown_worker_event_kinds_still_appear():
    data = timeline_data(with_new_fault_kinds(fast_dead_run()))
    assert {"blocked", "disconnected"} <= {f["kind"] for f in data["faults"]}
    blocked = next(f for f in data["faults"] if f["kind"] == "blocked")
    assert blocked["record"]["detail"] == "a long GIL-holding call"


def test_page_is_self_contained_and_deterministic():
    run = fast_dead_run()
    page = timeline_html(run)
    assert page == timeline_html(fast_dead_run())  # same run, same bytes
    assert page.startswith("<!DOCTYPE html>") and page.count("<script") == 2
    # Nothing fetched at view time: no external scripts, styles, images, fonts or imports.
    assert not re.search(r"""(src|href)\s*=|@import|url\((?!#)|<link|<iframe|fetch\(|XMLHttpRequest""", page)
    assert re.findall(r"https?://[^\s\"'<>]+", page) == ["http://www.w3.org/2000/svg"]  # an XML namespace
    payload = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(payload)["summary"]["reclaims"] == 1


def test_record_text_cannot_break_out_of_the_page():
    run = with_new_fault_kinds(fast_dead_run())
    run.worker_events.append(WorkerEvent(7.0, 0, "</script><script>alert(1)</script>"))
    page = timeline_html(run)
    assert page.count("</script>") == 2 and "alert(1)</script>" not in page


def test_cli_writes_one_html_file(tmp_path, capsys):
    out = tmp_path / "run.html"
    assert main(["timeline", "--scenario", "fast-dead", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["run.html"]
    assert out.read_text(encoding="utf-8") == timeline_html(fast_dead_run())


# -- in a real browser ----------------------------------------------------------------------------------------
def _browser():
    """(playwright's sync_playwright, chromium path), or skip with what is missing; under
    EMQSIM_REQUIRE_BROWSER=1 (CI) a missing browser or driver is a failure instead."""
    required = os.environ.get("EMQSIM_REQUIRE_BROWSER") == "1"
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    problem = None
    if chromium is None:
        problem = "no chromium on PATH (Debian: apt-get install chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = problem or "the playwright package is missing (pip install -e '.[test]')"
        sync_playwright = None
    if problem:
        if required:
            pytest.fail(f"EMQSIM_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(f"browser test skipped: {problem}")
    return sync_playwright, chromium


@pytest.fixture(scope="module")
def page_in_browser(tmp_path_factory):
    sync_playwright, chromium = _browser()
    folder = tmp_path_factory.mktemp("browser")
    path = folder / "run.html"
    write_timeline_html(with_new_fault_kinds(fast_dead_run()), path)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(folder / "profile"),  # a fresh profile
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 720},
        )
        try:
            page = context.new_page()
            problems: list[str] = []
            requests: list[str] = []
            page.on(
                "console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error" else None
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            page.wait_for_selector('[data-kind="reclaim"]', state="attached")
            yield page, problems, requests, folder
        finally:
            context.close()


def test_browser_loads_without_errors_or_network(page_in_browser):
    page, problems, requests, folder = page_in_browser
    assert problems == []
    assert all(url.startswith("file://") for url in requests), requests
    assert page.locator('[data-kind="attempt"]').count() == 2
    assert page.locator('[data-kind="sweep"]').count() > 10
    page.screenshot(path=str(folder / "timeline.png"), full_page=True)
    assert (folder / "timeline.png").stat().st_size > 10_000


def test_browser_hover_on_a_reclaim_shows_its_attempt(page_in_browser):
    page, problems, _, _ = page_in_browser
    page.locator('[data-kind="reclaim"]').first.hover()
    tip = page.locator("#tip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert "reclaim of job 0, attempt 1: right, its worker was dead" in text
    assert re.search(r"attempt\s+1", text) and re.search(r"worker_state_at_reclaim\s+dead", text)
    assert problems == []


def test_browser_unknown_fault_kind_and_zoom(page_in_browser):
    page, problems, _, _ = page_in_browser
    faults = page.locator('[data-kind="fault"]')
    seen = []
    for i in range(faults.count()):
        faults.nth(i).hover()
        seen.append(page.locator("#tip").inner_text().splitlines()[0])
    assert "worker 1: blocked" in seen and "worker 1: disconnected" in seen

    def axis() -> list[str]:
        return page.eval_on_selector_all("svg text", "nodes => nodes.map(n => n.textContent)")

    before = axis()
    page.click("#zoom-in")
    page.click("#zoom-in")
    assert axis() != before  # the axis relabelled for the narrower window
    page.click("#reset")
    assert axis() == before
    assert problems == []


if __name__ == "__main__":  # python tests/test_timeline_html.py OUT.html: write the test page to look at
    write_timeline_html(
        with_new_fault_kinds(simulate(standard("production"), TimeoutPolicy(60, 5), 0)), sys.argv[1]
    )


def test_browser_legend_lists_only_what_the_run_draws_and_counts_agree(page_in_browser):
    """Issue 28: the legend listed "held by a dead worker" though nothing was held, and the summary said
    "1 jobs". The fast-dead run has one job, a reclaimed attempt and a completed one."""
    page, problems, _, _ = page_in_browser
    legend = page.locator("#legend").inner_text()
    assert "attempt reclaimed" in legend and "attempt, completed" in legend
    assert "held by a dead worker" not in legend and "duplicate completion" not in legend
    summary = page.locator("#summary").inner_text()
    assert summary.startswith("1 job, 2 attempts, 1 reclaim ")
    assert problems == []


LABEL_BOXES = """() => {
  const boxes = [];
  for (const t of document.querySelectorAll("#chart svg text")) {
    const r = t.getBoundingClientRect();
    if (getComputedStyle(t).display === "none" || r.width === 0) continue;
    boxes.push({ text: t.textContent, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom });
  }
  return boxes;
}"""


def _overlaps(boxes: list[dict]) -> list[tuple[str, str]]:
    """Pairs of drawn labels whose boxes intersect (by more than half a pixel either way)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if (
                min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > 0.5
                and min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > 0.5
            ):
                out.append((a["text"], b["text"]))
    return out


@pytest.mark.slow
def test_browser_labels_do_not_overlap(page_in_browser):
    """Issue 28: the HTML timeline's labels overlapped. Every drawn label's box (lanes, axis, attempts,
    unknown faults) is clear of every other, at full view, zoomed in and on a narrow window; an attempt's
    label stays inside its bar."""
    page, problems, _, _ = page_in_browser
    try:
        for width, zooms in ((1280, 0), (1280, 2), (1280, 5), (700, 0), (420, 0)):
            page.set_viewport_size({"width": width, "height": 720})
            page.click("#reset")
            for _ in range(zooms):
                page.click("#zoom-in")
            boxes = page.evaluate(LABEL_BOXES)
            assert any(b["text"].startswith("worker ") for b in boxes)
            assert _overlaps(boxes) == [], (width, zooms)
            inside = page.evaluate(
                """() => [...document.querySelectorAll("#chart svg text.attempt-label")]
                .filter(t => getComputedStyle(t).display !== "none")
                .map(t => { const r = t.getBoundingClientRect(), b = t.previousSibling.getBoundingClientRect();
                            return r.left >= b.left - 0.5 && r.right <= b.right + 0.5; })"""
            )
            assert all(inside), (width, zooms)
            assert inside or width < 1280, "no attempt label drawn on a wide window"
    finally:
        page.set_viewport_size({"width": 1280, "height": 720})
        page.click("#reset")
    assert problems == []


def test_html_and_png_draw_a_finish_in_the_same_colour():
    """Issue 28: the HTML page and the PNG used opposite colours for a duplicate completion and a rejected
    (stale) finish. Both now read one table, emqsim.palette.FINISH_COLOURS."""
    from matplotlib.colors import to_hex

    from emqsim.palette import FINISH_COLOURS
    from emqsim.plots.marks import LEGEND

    png = {
        "duplicate_completion": to_hex(LEGEND["finish_dup"]().get_color()),
        "finish_rejected": to_hex(LEGEND["finish_rejected"]().get_color()),
    }
    assert png == {k: to_hex(v) for k, v in FINISH_COLOURS.items()}
    assert png["duplicate_completion"] != png["finish_rejected"]
    page = timeline_html(fast_dead_run())
    assert f"...{json.dumps(FINISH_COLOURS)}," in page  # the page's outcome colours take the table whole
    assert "duplicate_completion:" not in page and "finish_rejected:" not in page  # and define neither again
