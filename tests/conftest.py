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


@pytest.fixture
def steady_live():
    """`run_live`, run again (at most STEADY_ATTEMPTS times in all) while its ClockWatch says the machine
    stalled or stepped its wall clock by the run's timing margin (a LiveDisturbed warning): such a run measures
    the machine, not the protocol, and is not judged. Every disturbance is printed (`pytest -s`); a test whose
    every attempt was disturbed fails with what the watch saw. `before_each` (keyword) is called before every
    attempt: a test whose spies record what a run did clears them there."""
    import warnings

    import emqsim.live as live
    from emqsim.live import Disturbed, LiveDisturbed, until_steady

    def run(*args, before_each=None, **kwargs):
        def attempt(k):
            if before_each is not None:
                before_each()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", LiveDisturbed)
                result = live.run_live(*args, **kwargs)
            disturbed = [str(w.message) for w in caught if issubclass(w.category, LiveDisturbed)]
            for w in caught:
                if not issubclass(w.category, LiveDisturbed):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            return result, (f"live run not judged: {disturbed[0]}" if disturbed else None)

        try:
            result, _ = until_steady(attempt, lambda done: done[1], attempts=STEADY_ATTEMPTS)
        except Disturbed as exc:
            pytest.fail(str(exc))
        return result

    return run
