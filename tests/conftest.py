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
        "test_install_paths.py",
        "test_interrupts.py",
        "test_live.py",
        "test_live_failures.py",
        "test_live_outages.py",
        "test_notebooks.py",
        "test_timeline_html.py",
    }
)


def runs_slow_tests() -> bool:
    """Whether this session runs the slow suite too (EMQSIM_SLOW=1)."""
    return os.environ.get(SLOW_ENV) == "1"


def is_slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None or Path(str(item.fspath)).name in SLOW_FILES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without EMQSIM_SLOW=1, deselect the slow suite (pytest's closing line counts it as deselected)."""
    if runs_slow_tests():
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
