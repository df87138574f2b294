"""`explore` places issue 25's faults where a timing matters: a silent partition of a worker's link, and a Redis
failover (lost writes, then READONLY on the demoted primary) hitting every client."""

from __future__ import annotations

import pytest

from emqsim import LeasePolicy
from emqsim.analytic_stalls import partition_lapses
from emqsim.cli.app import main
from emqsim.errors import ConfigError
from emqsim.explore import OTHER, FaultSpec, explore, space


def _boundary(fault: FaultSpec, policy: LeasePolicy) -> tuple[int, int]:
    result = explore(space(policy, [fault], sweep_phases=False), ties=False)
    (boundary,) = [b for b in result.boundaries if b.property == "live_never_reclaimed"]
    return boundary.first, boundary.last


def test_partition_boundary_is_the_closed_form():
    # renewals every 5 s from 5 s; a partition 2 s after a send: held renewals flow at the first TCP
    # retransmission after its end (12.6 s, then 25.4 s from its start), so the lock lapses iff 2 + R_P(D) > 20:
    # the shortest partition that lapses it is 12.601 s (an outage's is 10.077 s: tests/test_explore.py)
    policy = LeasePolicy(20.0, 5.0, 1.0, swept_by="reaper")
    fault = FaultSpec("partition", offset=(6998, 6998), params={"length": (1, 25_000)})
    first, last = _boundary(fault, policy)
    assert first == last == 12_601
    assert partition_lapses(20.0, 2.0, first / 1000) and not partition_lapses(20.0, 2.0, (first - 1) / 1000)


def test_a_failovers_readonly_window_that_catches_the_resent_renewal_loses_the_lease():
    # a failover at 7 s (1 s of lag, the clients away 1 s): they reconnect at 8 s and resend the renewal the
    # outage held; a READONLY window of 1 ms ends before it reaches Redis (half a round trip later), one of
    # 2 ms refuses it, and this lease policy stops renewing a lock it could not renew: the job is reclaimed
    policy = LeasePolicy(20.0, 5.0, 1.0, swept_by="reaper")
    fault = FaultSpec(
        "failover",
        offset=(6998, 6998),
        params={"length": (1000, 1000), "lag": (1000, 1000), "readonly": (1, 5)},
    )
    assert _boundary(fault, policy) == (2, 2)


def test_a_failover_hits_every_client_and_takes_its_three_sizes():
    with pytest.raises(ConfigError, match="hits every worker at once"):
        FaultSpec("failover", target=OTHER, params={"length": (1, 1), "lag": (1, 1), "readonly": (1, 1)})
    with pytest.raises(ConfigError, match="takes length, lag, readonly"):
        FaultSpec("failover", params={"length": (1, 1)})


def test_cli_explore_a_failover(capsys):
    code = main(
        ["explore", "--lease", "20", "--beat", "5", "--scan", "1", "--swept-by", "reaper",
         "--fault", "failover,length=1,lag=1,readonly=0.001:0.005,offset=6.998", "--no-ties"]
    )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    assert "timings of failover (every client)" in out
    assert "smallest counterexample of live_never_reclaimed:" in out and "fault0.readonly 0.002 s" in out


def test_a_freeze_right_after_a_finish_that_took_the_next_job_is_the_closed_form():
    # issue 25 item 5: a backlog (three jobs, two workers), the worker that finished job 0 freezes 1 ms after
    # sending the finish, its reply still on the way (rtt 2 ms). With fetch_next that finish already locked
    # job 2 to it: the lock lapses iff u + X > L (`fetched_lock_lapses`), so the shortest freeze that has the
    # reaper take job 2 from the frozen worker is 20.000 s. A take in its own round trip hands it nothing.
    from emqsim.analytic_stalls import fetched_lock_lapses

    fault = FaultSpec("finish-freeze", offset=(1, 1), params={"length": (19_000, 21_000)})
    policy = LeasePolicy(20.0, 5.0, 1.0, swept_by="reaper", fetch_next=True)
    first, last = _boundary(fault, policy)
    assert first == last == 20_000
    assert fetched_lock_lapses(20.0, 0.001, first / 1000)
    assert not fetched_lock_lapses(20.0, 0.001, (first - 1) / 1000)
    plain = LeasePolicy(20.0, 5.0, 1.0, swept_by="reaper")
    assert not explore(space(plain, [fault], sweep_phases=False), ties=False).boundaries


def test_a_finish_freeze_strikes_the_worker_that_finished_and_is_on_the_command_line(capsys):
    with pytest.raises(ConfigError, match="leave its target out"):
        FaultSpec("finish-freeze", target=OTHER, params={"length": (1, 1)})
    code = main(
        ["explore", "--lease", "20", "--beat", "5", "--scan", "1", "--swept-by", "reaper",
         "--fault", "finish-freeze,length=19.99:20.01,offset=0.001", "--no-ties"]
    )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    assert "timings of finish-freeze (the job's worker)" in out
