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
