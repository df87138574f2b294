"""Shared test settings."""

import os

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
