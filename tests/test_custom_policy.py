"""A third detector written outside the engine, through the documented ReclaimPolicy interface."""

from emqsim import Fixed, LeasePolicy, ReclaimPolicy, RenewalRule, Scenario, simulate, standard
from emqsim.protocol import Queue, SweepReply


class HeartbeatAge(ReclaimPolicy):
    """Reclaim a job when its last heartbeat is older than `k` heartbeat periods (no lock TTL at all).

    The heartbeat arrival times live on `self`: server-side state, fresh in every run (the engine copies
    the policy)."""

    name = "heartbeat-age"
    swept_by = "reaper"
    fenced = True

    def __init__(self, beat: float = 2.0, k: float = 3.0, scan: float = 1.0) -> None:
        self.renewal = RenewalRule.every(beat)
        self.sweep_interval_ms = int(scan * 1000)
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
            if queue.store.execute("GET", queue.keys.lock(job)) == token:
                self.last_beat[job] = now_ms
            else:
                failed.append(job)
        return failed

    def sweep(self, queue: Queue, now_ms: int) -> SweepReply:
        x = queue.store.execute
        reclaimed = []
        for job in x("LRANGE", queue.keys.active, 0, -1):
            if now_ms - self.last_beat.get(job, now_ms) > self.limit_ms and x(
                "LREM", queue.keys.active, 1, job
            ):
                x("DEL", queue.keys.lock(job))
                x("RPUSH", queue.keys.wait, job)
                reclaimed.append(job)
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
