"""Connections that never recover (issue 25 item 1): `Outage(recovers=False)` and the stuck-connection
scenario. The stuck worker stops fetching and renewing though Redis is back; the sweep takes its job back
from a worker that is alive (`disconnected`), and the workers that reconnected finish the queue."""

from __future__ import annotations

import subprocess
import sys

import pytest

from emqsim import simulate
from emqsim.errors import ConfigError
from emqsim.faults import NEVER_MS, Outage, never_recovers
from emqsim.presets import preset
from emqsim.scenario import standard


def test_never_recovers_ends_the_stuck_window_in_no_reconnect_and_drops_later_ones() -> None:
    windows = [(1000, 2000, 3000), (10_000, 12_000, 14_000), (20_000, 21_000, 22_000)]
    faults = [Outage(at=10, duration=2, worker=1, recovers=False)]
    assert never_recovers(windows, faults, 1, restarted=False) == [
        (1000, 2000, 3000),
        (10_000, 12_000, NEVER_MS),
    ]
    assert never_recovers(windows, faults, 0, restarted=False) == windows  # another worker's
    assert never_recovers(windows, faults, 1, restarted=True) == windows  # a replacement starts afresh
    with pytest.raises(Exception, match="recovers"):
        Outage(at=1, duration=1, recovers="no")  # type: ignore[arg-type]


def test_the_stuck_worker_stops_and_its_job_is_reclaimed_from_it_alive() -> None:
    run = simulate(standard("stuck-connection"), preset("bullmq"), seed=0)
    at = 30.0
    stuck = [e for e in run.worker_events if e.worker == 0]
    assert ("network_up", "the client never reconnects") in [(e.kind, e.detail) for e in stuck]
    assert not [e for e in stuck if e.kind == "reconnect"]
    assert not [a for a in run.attempts if a.worker == 0 and a.taken_at > at]  # it fetches no more
    reclaimed = [a for a in run.attempts if a.reclaimed_at is not None]
    assert reclaimed and all(a.worker == 0 and a.worker_state_at_reclaim == "disconnected" for a in reclaimed)
    assert all(a.finish_applied_at is None for a in reclaimed)  # its finish never reached Redis
    assert run.final_state["completed"] == 8  # the worker that reconnected did the rest
    # no worker recovers: nothing completes after the outage, the jobs are held to the horizon
    none = simulate(standard("stuck-connection", stuck_worker=None), preset("bullmq"), seed=0)
    assert none.ended_by == "horizon" and not [a for a in none.attempts if a.taken_at > at]


def test_recovers_from_toml_and_flags(tmp_path) -> None:
    from emqsim.config import load_config

    path = tmp_path / "s.toml"
    path.write_text(
        '[scenario]\nworkers = 2\n[[scenario.faults]]\nkind = "outage"\nat = 5\nduration = 1\nrecovers = false\n'
    )
    scenario, _ = load_config(path)
    assert scenario.faults[0].recovers is False
    path.write_text('[scenario]\n[[scenario.faults]]\nkind = "crash"\nworker = 0\nat = 1\nrecovers = false\n')
    with pytest.raises(ConfigError, match="only an outage has recovers"):
        load_config(path)
    bad = subprocess.run(
        [sys.executable, "-m", "emqsim", "run", "--scenario", "fast-dead", "--never-reconnect"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--outage-at" in bad.stderr
