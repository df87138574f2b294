"""Shared test settings, and the split into the quick suite and the slow one."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture
def need_redis() -> None:
    """Skip a test that needs redis-server when it is missing (fail instead with EMQSIM_REQUIRE_REDIS=1)."""
    from emqsim.live import redis_server_path
    from emqsim.live.server import INSTALL_HINT

    if redis_server_path() is None:
        if os.environ.get("EMQSIM_REQUIRE_REDIS") == "1":
            pytest.fail(f"EMQSIM_REQUIRE_REDIS=1 but {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)


@pytest.fixture(scope="session")
def need_bullmq() -> None:
    """Skip a test that runs real BullMQ when node, validation/bullmq's node_modules or redis-server are missing
    (fail instead with EMQSIM_REQUIRE_BULLMQ=1)."""
    import sys

    validation = str(Path(__file__).resolve().parents[1] / "validation")
    if validation not in sys.path:
        sys.path.insert(0, validation)
    import validate_bullmq

    reason = validate_bullmq.requirements_missing()
    if reason is None:
        return
    if os.environ.get("EMQSIM_REQUIRE_BULLMQ") == "1":
        pytest.fail(f"EMQSIM_REQUIRE_BULLMQ=1 but {reason}")
    pytest.skip(reason)


STEADY_ATTEMPTS = 3
# The live tests' timing margin: 150 ms real (MARGIN in test_live and test_live_outages).
STEADY_MARGIN_S = 0.15


@pytest.fixture
def steady_live():
    """`run_live`, run again (at most STEADY_ATTEMPTS times in all) while its ClockWatch saw the machine stall,
    or step its wall clock, by STEADY_MARGIN_S or more: the live tests' own timing margin (150 ms real), so such
    a run measures the machine, not the protocol, and is not judged. (`emqsim live` itself warns from half the
    shortest timer, LiveDisturbed; here that warning is kept as a warning.) Every run not judged is a NotJudged
    warning; a test whose every attempt was disturbed fails with what the watch saw. `before_each` (keyword)
    is called before every attempt: a test whose spies record what a run did clears them there."""
    import emqsim.live as live
    from emqsim.live import Disturbed, until_steady

    def run(*args, before_each=None, **kwargs):
        def attempt(k):
            if before_each is not None:
                before_each()
            runner = live.LiveRun(*args, **kwargs)
            result = runner.run()
            seen = runner.steadiness
            if seen is None or not seen.disturbed(STEADY_MARGIN_S):
                return result, None
            return result, f"live run not judged ({STEADY_MARGIN_S * 1000:.0f} ms margin): {seen.describe()}"

        try:
            result, _ = until_steady(attempt, lambda done: done[1], attempts=STEADY_ATTEMPTS)
        except Disturbed as exc:
            pytest.fail(str(exc))
        return result

    return run


# -- the quick suite and the slow one --------------------------------------------------------------------------
SLOW_ENV = "EMQSIM_SLOW"
# Whole files that belong to the slow suite: they start real servers, kernels, browsers, node processes or fresh
# virtual environments, or judge against wall-clock margins. Single slow tests elsewhere carry
# `@pytest.mark.slow`. The README's test command runs the quick suite; `EMQSIM_SLOW=1` (which `.ci/run` sets)
# runs everything.
SLOW_FILES = frozenset(
    {
        "test_assignments.py",
        "test_bullmq_real.py",
        "test_clockwatch.py",
        "test_grading_gaming.py",
        "test_grading_gaming_more.py",
        "test_grading_gaming_nbgrader.py",
        "test_install_paths.py",
        "test_interrupts.py",
        "test_live.py",
        "test_live_failures.py",
        "test_live_outages.py",
        "test_lessons_browser.py",
        "test_protocol_lua.py",
        "test_redis_conformance.py",
        "test_timeline_html.py",
    }
)
# Single tests of the slow suite, by file and name (parametrized cases included): each takes tens of seconds on
# 2 cores; the quick suite keeps a faster test of the same claim beside each (named in the comment).
SLOW_TESTS = frozenset(
    {
        # explore: the small spaces, the closed forms at 1 ms and the CLI stay quick through
        # test_default_options_give_bit_identical_runs, test_freeze_boundary_is_the_closed_form,
        # test_block_boundary_is_the_closed_form and test_cli_explore_bad_input_is_one_line_and_exit_2
        "test_explore.py::test_explore_equals_brute_force_on_small_spaces",
        "test_explore.py::test_parallel_equals_serial",
        "test_explore.py::test_reaper_detection_is_the_closed_form_to_the_millisecond",
        "test_explore.py::test_workers_sweeping_detection_against_the_closed_form",
        "test_explore.py::test_workers_sweeping_stays_within_the_bounds_when_the_sweeper_hands_over",
        "test_explore.py::test_explored_mean_agrees_with_a_big_sampled_run",
        "test_explore.py::test_unfenced_timeout_duplicate_completion_is_found",
        "test_explore.py::test_cli_explore_prints_the_report_and_draws_counterexamples",
        "test_explore.py::test_cli_explore_draws_a_counterexample_as_an_interactive_timeline",
        "test_explore.py::test_cli_explore_json",
        "test_explore.py::test_cli_explore_a_redis_restart",
        # tune: test_finds_the_lease_the_closed_form_decides and the CLI's bad-input tests stay quick
        "test_tune.py::test_work_is_bounded_and_counted",
        "test_tune.py::test_same_seed_same_answer_serial_or_parallel",
        "test_tune.py::test_tuned_settings_meet_the_limits_on_fresh_seeds",
        "test_tune.py::test_closed_form_prunes_what_cannot_meet_a_latency_limit",
        "test_tune.py::test_cli_json_plot_and_toml",
        "test_tune.py::test_a_race_whose_candidates_all_stay_undecided_ends",
        # figures: each figure's own test stays quick; this one regenerates them all byte for byte
        "test_figures.py::test_generate_all_writes_every_figure",
        # a local Dask cluster; test_dask's in-process equality tests stay quick
        "test_dask.py::test_cli_dask_local_equals_serial",
        # interval coverage over thousands of simulated runs (benchmarks/coverage.py's cases)
        "test_coverage.py::test_intervals_cover_the_known_truth",
        # each lesson in a real kernel (its static checks stay quick)
        "test_notebooks.py::test_notebook_runs",
        # real signals into a real sweep; test_interrupts (slow) covers the rest
        "test_cli.py::test_ctrl_c_keeps_finished_rows",
    }
)


def runs_slow_tests() -> bool:
    """Whether this session runs the slow suite too (EMQSIM_SLOW=1)."""
    return os.environ.get(SLOW_ENV) == "1"


def _test_name(item: pytest.Item) -> str:
    """`file.py::test` (its parametrized cases share it), or the file's name for an item that is no function."""
    name = Path(str(item.fspath)).name
    return f"{name}::{item.originalname}" if isinstance(item, pytest.Function) else name


def is_slow(item: pytest.Item) -> bool:
    """In the slow suite: marked `slow`, or its file in SLOW_FILES, or its file and name in SLOW_TESTS."""
    name = Path(str(item.fspath)).name
    return item.get_closest_marker("slow") is not None or name in SLOW_FILES or _test_name(item) in SLOW_TESTS


# The files that take longest, longest first: pytest-xdist hands whole files to its workers in collection order
# (`--dist loadfile --no-loadscope-reorder` in pyproject.toml), so the longest start at once and the short ones
# fill in around them, instead of a long file starting last and running alone at the end.
LONGEST_FIRST = (
    "test_grading_gaming_more.py",
    "test_grading_gaming.py",
    "test_grading_gaming_nbgrader.py",
    "test_assignments.py",
    "test_bullmq_real.py",
    "test_install_paths.py",
    "test_lessons_browser.py",
    "test_explore.py",
    "test_notebooks.py",  # its lesson runs are skipped where the browser runs them (LESSON_RUNS)
    "test_bullmq_real_client.py",
    "test_bullmq_real_failover.py",
    "test_bullmq_real_eviction.py",
    "test_tune.py",
    "test_grading_gradebook.py",
    "test_live.py",
    "test_live_outages.py",
    "test_live_failures.py",
    "test_live_memory.py",
    "test_streaming.py",
    "test_fuzz.py",
)


def _file_rank(item: pytest.Item) -> int:
    name = Path(str(item.fspath)).name
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def lessons_browser_missing() -> str | None:
    """Why tests/test_lessons_browser.py cannot run the lessons here (None: it can): Chromium on PATH, the
    playwright package, JupyterLab (looked up, not imported)."""
    import importlib.util
    import shutil

    if not any(map(shutil.which, ("chromium", "chromium-browser"))):
        return "no chromium on PATH (Debian: apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing (pip install -e '.[test]')"
    if importlib.util.find_spec("jupyterlab") is None:
        return "jupyterlab is missing (pip install -e '.[test]')"
    return None


# Each lesson's full-size run: in JupyterLab (test_lessons_browser.py) when that test runs in the session and a
# browser is there, else headless (test_notebooks.py), never both.
LESSON_RUNS = (
    "test_lessons_browser.py::test_lesson_runs_in_jupyterlab_and_its_explorer_redraws",
    "test_notebooks.py::test_notebook_runs",
)


def _lessons_run_in_the_browser(items: list[pytest.Item]) -> None:
    """Skip the headless lesson runs when the browser test runs every lesson at full size in this session."""
    names = {_test_name(item) for item in items}
    if LESSON_RUNS[0] not in names or LESSON_RUNS[1] not in names or lessons_browser_missing() is not None:
        return
    skip = pytest.mark.skip(
        reason="run at full size in JupyterLab by test_lessons_browser.py in this session"
    )
    for item in items:
        if _test_name(item) == LESSON_RUNS[1]:
            item.add_marker(skip)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (LONGEST_FIRST; the order within a file stays). Without EMQSIM_SLOW=1, deselect
    the slow suite (pytest's closing line counts it as deselected). Each lesson's full-size run happens once
    (`_lessons_run_in_the_browser`)."""
    items.sort(key=_file_rank)  # stable
    if runs_slow_tests():
        _lessons_run_in_the_browser(items)
        return
    slow = [item for item in items if is_slow(item)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not is_slow(item)]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not runs_slow_tests():
        terminalreporter.write_line(
            "the quick suite: slow tests were deselected; EMQSIM_SLOW=1 python -m pytest -q runs them too (CI does)"
        )


# -- where the CPU goes --------------------------------------------------------------------------------------------
CPU_REPORT_ENV = (
    "EMQSIM_TEST_CPU"  # a file name: each test's CPU seconds (its own process and the children it
)
# waited for: kernels, servers, commands) are appended to it, one line per test, for keeping CI within its budget


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    target = os.environ.get(CPU_REPORT_ENV)
    if not target:
        yield
        return
    import time

    before, start = os.times(), time.monotonic()
    yield
    after = os.times()
    cpu = sum(b - a for a, b in zip(before[:4], after[:4], strict=True))
    failed = "failed" if getattr(item, "_emqsim_failed", False) else "ok"
    with open(target, "a", encoding="utf-8") as out:  # one short line per write: appends do not interleave
        out.write(f"{cpu:.2f}\t{time.monotonic() - start:.2f}\t{failed}\t{item.nodeid}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    if os.environ.get(CPU_REPORT_ENV) and outcome.get_result().failed:
        item._emqsim_failed = True  # type: ignore[attr-defined]  # read by pytest_runtest_protocol above
