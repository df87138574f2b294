"""The command names real BullMQ makes Redis run are the `bullmq` preset's `redis_commands`.

Under maxmemory each command name Redis has run holds a latency histogram (24,688 bytes on redis-server 7.0,
`emqsim.store.eviction`), so the preset's memory depends on BullMQ's vocabulary, not on the names of emqsim's
own steps. validation/bullmq/vocabulary.mjs runs a Queue and a Worker on a private redis-server (three jobs:
one completed, one failed and retried, one failed); the names `INFO latencystats` gains are the preset's.

Marked slow and redis (run by `.ci/run`); skipped like the sibling tests when node, the node_modules or
redis-server are missing (EMQSIM_REQUIRE_BULLMQ=1 turns the skip into a failure).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))  # beside its node scripts
import validate_bullmq as vb  # noqa: E402

from emqsim.live.server import PrivateRedis  # noqa: E402
from emqsim.presets import BULLMQ_REDIS_COMMANDS, preset  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def histograms(client) -> set[str]:
    return {name.removeprefix("latency_percentiles_usec_") for name in client.info("latencystats")}


def test_real_bullmq_runs_the_presets_redis_commands(need_bullmq: None) -> None:
    with vb.one_session_at_a_time():  # real-BullMQ sessions run one at a time (their timing tests)
        ran = _session()
    missing, extra = sorted(BULLMQ_REDIS_COMMANDS - ran), sorted(ran - BULLMQ_REDIS_COMMANDS)
    assert not missing and not extra, f"the preset lacks {extra}, BullMQ did not run {missing}"
    assert set(preset("bullmq").redis_commands) == BULLMQ_REDIS_COMMANDS


def _session() -> set[str]:
    """The command names a BullMQ session made a fresh redis-server run."""
    server = PrivateRedis().start()
    try:
        client = server.client()
        before = histograms(client)
        done = subprocess.run(
            ["node", str(vb.SCRIPTS_DIR / "vocabulary.mjs"), "--socket", server.socket_path],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and '"done"' in done.stdout, done.stderr[-2000:]
        return histograms(client) - before
    finally:
        server.stop()
