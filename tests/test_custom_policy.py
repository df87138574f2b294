"""Detectors written outside the engine, through the documented interfaces only (docs/policies.md): the
queue's public operations, never raw Redis keys."""

import re
from pathlib import Path

import pytest

from emqsim import (
    Detector,
    Fixed,
    LeasePolicy,
    ReclaimPolicy,
    RenewalRule,
    Scenario,
    TimeoutPolicy,
    simulate,
    standard,
)
from emqsim.examples.phi_accrual import PhiAccrual
from emqsim.protocol import Queue, SweepReply

ROOT = Path(__file__).resolve().parent.parent


class HeartbeatAge(ReclaimPolicy):
    """Reclaim a job when its last heartbeat is older than `k` heartbeat periods (no lock TTL at all), written
    against the full ReclaimPolicy interface (the engine's milliseconds).

    The heartbeat arrival times live on `self`: server-side state, fresh in every run (the engine copies
    the policy)."""

    name = "heartbeat-age"
    swept_by = "reaper"
    fenced = True

    def __init__(self, beat: float = 2.0, k: float = 3.0, scan: float = 1.0) -> None:
        self.renewal = RenewalRule.every(beat)
        self.scan = scan
        self.limit_ms = int(k * beat * 1000)
        self.last_beat: dict[str, int] = {}

    def take(self, queue: Queue, token: str, now_ms: int) -> str | None:
        job = queue.take(token, now_ms, lock_ms=None)  # a fencing token without expiry
        if job is not None:
            self.last_beat[job] = now_ms
        return job

    def renew(self, queue: Queue, held: list[tuple[str, str]], now_ms: int) -> list[str]:
        failed = []
        for job, token in held:
            if queue.holds(job, token):
                self.last_beat[job] = now_ms
            else:
                failed.append(job)
        return failed

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        reclaimed = [
            job
            for job in queue.active_jobs()
            if now_ms - self.last_beat.get(job, now_ms) > self.limit_ms and queue.reclaim(job)
        ]
        return SweepReply(False, tuple(reclaimed))


def test_a_custom_detector_runs_without_touching_the_engine():
    slow = simulate(standard("slow-alive"), HeartbeatAge(), seed=1)
    assert all(a.reclaimed_at is None for a in slow.attempts)  # alive: heartbeats keep coming
    dead = simulate(standard("fast-dead"), HeartbeatAge(), seed=1)
    latency = dead.attempts[0].detection_latency
    assert 4.0 <= latency <= 8.0 + 1.0  # k * beat after the last beat, plus a scan
    assert dead.attempts[-1].outcome == "completed"


def test_custom_policy_state_does_not_leak_between_runs():
    policy = HeartbeatAge()
    simulate(Scenario(workers=2, duration=Fixed(5)), policy, seed=0)
    assert policy.last_beat == {}  # the engine worked on its own copy
    assert LeasePolicy().name == "lease"


def test_reclaim_counts_a_stall_and_fails_a_job_past_max_stalled():
    from emqsim.engine import Simulation

    queue = Simulation(Scenario(), LeasePolicy(), seed=0).server.queue
    queue.add("7")
    assert queue.take("w:1", 0, lock_ms=None) == "7" and queue.holds("7", "w:1")
    assert queue.active_jobs() == ["7"]
    assert queue.reclaim("7", max_stalled=1) == "reclaimed"
    assert not queue.holds("7", "w:1") and queue.state_of("7") == ["wait"]
    assert queue.store.hget(queue.keys.job("7"), "stc") == "1"
    assert queue.reclaim("7") is None  # not active: nothing to take back
    queue.take("w:2", 1, lock_ms=None)
    assert queue.reclaim("7", max_stalled=1) == "failed" and queue.state_of("7") == ["failed"]


def test_the_phi_accrual_example_recovers_a_dead_workers_job_and_leaves_a_slow_one_alone():
    dead = simulate(standard("fast-dead"), PhiAccrual(), seed=1)
    first, last = dead.attempts[0], dead.attempts[-1]
    assert first.outcome == "reclaimed" and not first.false_reclaim
    assert 0 < first.detection_latency < 10  # a few beats of silence, plus a scan
    assert last.outcome == "completed"
    slow = simulate(standard("slow-alive"), PhiAccrual(), seed=1)
    assert [a.outcome for a in slow.attempts] == ["completed"]  # alive and beating: never suspected


def test_a_detector_shows_its_parameters_in_seconds():
    phi = PhiAccrual(beat=2, scan=0.5, threshold=6)
    assert phi.params() == {"beat": 2, "scan": 0.5, "threshold": 6, "window": 100}
    assert phi.settings()["policy"] == "phi-accrual" and phi.settings()["threshold"] == 6
    assert phi.sweep_interval_ms == 500 and phi.renewal.tick == 2.0
    lease = LeasePolicy(30, 10, 5)
    assert (lease.lease, lease.beat, lease.scan) == (30, 10, 5)
    assert lease.params() == {"lease": 30, "beat": 10, "scan": 5}
    assert TimeoutPolicy(600, 5).params() == {"scan": 5, "timeout": 600}


def test_a_detector_must_say_what_it_suspects():
    with pytest.raises(NotImplementedError, match="suspect"):
        simulate(standard("fast-dead"), Detector(), seed=1)


def test_the_docs_show_the_example_that_runs():
    doc = (ROOT / "docs" / "policies.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    example = (ROOT / "emqsim" / "examples" / "phi_accrual.py").read_text()
    assert example in blocks, "docs/policies.md must show emqsim/examples/phi_accrual.py verbatim"
    assert len(example.splitlines()) <= 35


def test_the_docs_numbers_are_the_codes():
    doc = (ROOT / "docs" / "policies.md").read_text()
    shown = float(re.search(r"# \('reclaimed', ([0-9.]+)\)", doc).group(1))
    run = simulate(standard("fast-dead"), PhiAccrual(threshold=8), seed=1)
    assert (run.attempts[0].outcome, run.attempts[0].detection_latency) == ("reclaimed", shown)
