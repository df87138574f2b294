"""Live mode fails over its real redis-servers (emqsim.live.failover): a replica that lags, its promotion, the
clients moving to it; what the lag window wrote is lost, as in the simulator.

One worker, three 1 s jobs, lease 2 s / beat 0.5 s / scan 1 s at time_scale 0.5 (1 s, 250 ms, 500 ms real);
the failover at 1.5 s with 0.8 s of lag, the workers away 1 s: job 0's finish (at 1.0 s) and the take of job 1
that follows it fall in the lag window. On the new primary job 0 is active again with its old lock (it runs
again: a duplicate completion) and job 1 is back in `wait` (its worker's finish is refused; it runs again),
exactly the attempts and outcomes emqsim gives; adds that fall in the window are lost and the run still ends.
"""

from __future__ import annotations

import pytest

from emqsim import Fixed, LeasePolicy, Scenario, simulate
from emqsim.faults import Outage

SCALE = 0.5


def scenario() -> Scenario:
    return Scenario(
        workers=1,
        jobs=3,
        duration=Fixed(1.0),
        faults=(Outage(at=1.5, duration=1.0, lost_writes=0.8),),
        phases="aligned",
        horizon=30.0,
    )


def outcomes(run) -> list[tuple[str, int, str]]:
    return sorted((a.job, a.attempt, a.outcome) for a in run.attempts)


@pytest.mark.slow
def test_a_live_failover_loses_the_lag_windows_finish_and_take_as_the_simulator_does(
    need_redis, steady_live, monkeypatch
) -> None:
    import emqsim.live.failover as failover

    seen: list[list[str]] = []
    fail_over = failover.Failover.fail_over

    def spy(self) -> None:
        fail_over(self)
        assert self.replica is not None
        demoted = self.replica.client()  # after the swap: the old primary, under the replica's old path
        promoted = self.run.client
        assert promoted is not None
        seen.append([promoted.info("replication")["role"], demoted.info("replication")["role"]])
        demoted.close()

    monkeypatch.setattr(failover.Failover, "fail_over", spy)
    policy = LeasePolicy(2.0, 0.5, 1.0)
    live = steady_live(scenario(), policy, time_scale=SCALE, seed=1, before_each=seen.clear)
    sim = simulate(scenario(), policy, seed=1)
    assert seen == [["master", "master"]]  # the run's address leads to the promoted replica
    assert (
        outcomes(live)
        == outcomes(sim)
        == [
            ("0", 1, "completed"),
            ("0", 2, "duplicate_completion"),
            ("1", 1, "finish_rejected"),
            ("1", 2, "completed"),
            ("2", 1, "completed"),
        ]
    )


@pytest.mark.slow
def test_a_live_failover_loses_the_lag_windows_adds_and_the_run_still_ends(need_redis, steady_live) -> None:
    """Jobs arriving at 1 a second (seed 21: jobs 0 and 1 arrive inside the lag window): on the new primary
    neither exists; job 0, taken before the failover, has its finish refused, job 1 never runs, and the run
    ends when job 2 is done, not at its horizon, as in the simulator."""
    sc = Scenario(
        workers=1,
        jobs=3,
        arrival_rate=1.0,
        duration=Fixed(0.5),
        faults=(Outage(at=1.5, duration=1.0, lost_writes=0.8),),
        phases="aligned",
        horizon=30.0,
    )
    policy = LeasePolicy(2.0, 0.5, 1.0)
    live = steady_live(sc, policy, time_scale=SCALE, seed=21)
    sim = simulate(sc, policy, seed=21)
    assert outcomes(live) == outcomes(sim) == [("0", 1, "finish_rejected"), ("2", 1, "completed")]
    assert live.ended_by == sim.ended_by == "done"
