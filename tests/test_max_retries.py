"""ioredis's `maxRetriesPerRequest` on the workers' main client (issue 25 item 1, its second form):
`Network.max_retries_per_request`. During an outage ioredis rejects the commands still waiting at every
(n+1)-th close (the disconnect and each failed reconnect attempt); a rejected finish makes BullMQ send
moveToFailed, which fails the job if it gets through and loses the finish if it is rejected too (the lock
lapses, the job runs again). The default (None: null) changes nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emqsim import Network, simulate, standard
from emqsim.cli import main
from emqsim.client import MAX_RETRIES_ERROR
from emqsim.distributions import Fixed, LogNormal
from emqsim.errors import ConfigError
from emqsim.faults import (
    Outage,
    Partition,
    RandomFaults,
    finish_fate,
    max_retries_flush_ms,
    reconnect_after_ms,
    reconnect_attempt_ms,
    reconnect_delay_ms,
)
from emqsim.presets import preset
from emqsim.records import COMPLETED, FAILED, FINISH_REJECTED
from emqsim.scenario import Scenario
from tests.test_event_elision import assert_same
from tests.test_invariants import assert_structures_hold_each_job_once, leases, run, scenarios


def _flushes(n: int, count: int) -> list[int]:
    out, after = [], -1
    for _ in range(count):
        after = max_retries_flush_ms(n, after)
        out.append(after)
    return out


def test_flush_times_follow_the_reconnect_backoff() -> None:
    """Close j (the disconnect is close 1) comes with attempt j - 1's failure; ioredis flushes when
    retryAttempts = j is a multiple of n + 1: at attempts n, 2n + 1, 3n + 2, ..."""
    total = 0
    for k in range(1, 16):
        total += reconnect_delay_ms(k)
        assert reconnect_attempt_ms(k) == total
        assert reconnect_after_ms(total) == total  # an attempt at the network's return connects
    for n in (0, 1, 2, 5, 20):
        assert _flushes(n, 5) == [reconnect_attempt_ms(m * (n + 1) - 1) for m in range(1, 6)]
    assert _flushes(0, 4) == [0, 1000, 2000, 3000]  # 0: the disconnect itself flushes (sent commands)
    assert _flushes(20, 2) == [238_179, 658_179]  # ioredis's default: the 20th failed attempt, then the 41st
    for n in (0, 3, 20):  # far out (past the 20 s cap) the attempt is found by arithmetic, not by steps
        for after in (-5, 0, 999, 1000, 38_179, 10**6 + 7, 10**9):
            flush = max_retries_flush_ms(n, after)
            k = (
                next(k for k in range(11) if reconnect_attempt_ms(k) == flush)
                if flush <= reconnect_attempt_ms(10)
                else 10 + (flush - reconnect_attempt_ms(10)) // 20_000
            )
            assert reconnect_attempt_ms(k) == flush and k % (n + 1) == n
            assert reconnect_attempt_ms(k) > after and (k < n + 1 or reconnect_attempt_ms(k - n - 1) <= after)


@pytest.mark.parametrize("attempts", [1, 2])
def test_the_simulated_finish_meets_the_closed_form(attempts: int) -> None:
    """Job 0's finish is sent 3 ms after worker 0's connection drops: for each n and outage length, what
    happens to it is `finish_fate`: it waits (completed once), fails with the error (retried if attempts
    are left), or is lost (finish_rejected; the lock lapses and the job runs again and completes)."""
    seen = set()
    for n in (0, 1, 2):
        for down in (0.5, 1.0, 1.5, 2.5, 3.5, 5.0, 9.0):
            run = simulate(
                standard("max-retries-outage", max_retries=n, outage_for=down, attempts=attempts),
                preset("bullmq"),
                seed=0,
            )
            first = next(a for a in run.attempts if a.job == "0")
            assert first.worker == 0
            sent_ms = round((first.finished_at - 20.0) * 1000)  # the finish is sent as the work ends
            fate = finish_fate(n, round(down * 1000), sent_ms)
            seen.add(fate)
            runs = [a for a in run.attempts if a.job == "0"]
            if fate == "waits":
                assert [a.outcome for a in runs] == [COMPLETED]
            elif fate == "failed":
                assert runs[0].outcome == FAILED
                assert [a.outcome for a in runs[1:]] == ([COMPLETED] if attempts == 2 else [])
            else:
                assert runs[0].outcome == FINISH_REJECTED
                assert runs[0].finish_result == MAX_RETRIES_ERROR.format(n=n)
                assert runs[0].reclaimed_at is not None and runs[0].worker_state_at_reclaim == "alive"
                assert [a.outcome for a in runs[1:]] == [COMPLETED]  # the completed work runs again
            assert run.final_state["completed"] + run.final_state["failed"] == 4
    assert seen == {"waits", "failed", "lost"}


def test_rejected_renewals_are_lost_and_the_records_agree_with_and_without_elision() -> None:
    """A job running through a 30 s outage of its worker with n = 0: each flush rejects the waiting
    renewal (`renew_lost`, at the tick that sent it); the lock lapses and the job is reclaimed. The
    callback-driven lock manager gives the records of the plain process."""
    scenario = Scenario(
        workers=2,
        jobs=2,
        duration=Fixed(60.0),
        faults=(Outage(at=20.0, duration=30.0, worker=0),),
        network=Network(max_retries_per_request=0),
    )
    run = simulate(scenario, preset("bullmq"), seed=1)
    held = next(a for a in run.attempts if a.worker == 0)
    lost = [e for e in run.lock_events if e.kind == "renew_lost" and e.job == held.job]
    assert lost and all(20.0 <= e.time < 58.2 for e in lost)
    assert held.reclaimed_at is not None
    assert_same(scenario, preset("bullmq"), 1)
    busy = Scenario(
        workers=3,
        concurrency=2,
        jobs=40,
        arrival_rate=0.5,
        duration=LogNormal(8.0, 1.0),
        random_faults=RandomFaults(outage_rate=60.0, outage_duration=LogNormal(4.0, 1.0)),
        network=Network(rtt=LogNormal(0.002, 0.5), max_retries_per_request=1),
        horizon=900.0,
    )
    assert_same(busy, preset("bullmq"), 3)
    assert any(
        a.finish_result == MAX_RETRIES_ERROR.format(n=1) for a in simulate(busy, preset("bullmq"), 3).attempts
    )


def test_none_and_a_limit_no_flush_reaches_change_nothing() -> None:
    """The default (None) is every earlier run; n = 20 (ioredis's default) first flushes 238.179 s into an
    outage, so runs whose outages are shorter are the same record for record (not `stuck-connection`: a
    client that never reconnects is flushed every 420 s from 238.179 s on)."""
    for name in ("flaky-network", "resent-finish", "max-retries-outage"):
        scenario = standard(name)
        base = replace(scenario.network, max_retries_per_request=None)
        none = simulate(scenario.with_(network=base), preset("bullmq"), seed=2)
        limit = replace(base, max_retries_per_request=20)
        assert simulate(scenario.with_(network=limit), preset("bullmq"), seed=2).digest() == none.digest()
    quiet = standard("max-retries-outage", max_retries=None)
    assert simulate(quiet, preset("bullmq"), seed=0).digest() == (
        simulate(replace(quiet, network=Network()), preset("bullmq"), seed=0).digest()
    )


def test_bad_values_are_one_line(tmp_path, capsys) -> None:
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(ConfigError, match="max_retries_per_request must be a whole number >= 0"):
            Network(max_retries_per_request=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not modelled with a Partition"):
        Scenario(workers=1, faults=(Partition(at=1, duration=1),), network=Network(max_retries_per_request=0))
    path = tmp_path / "s.toml"
    path.write_text("[scenario]\n[scenario.network]\nmax_retries_per_request = -2\n")
    runs = [
        ["run", "--scenario", "max-retries-outage", "--max-retries-per-request", "-1"],
        ["run", "--config", str(path)],
    ]  # (`emqsim live --scenario max-retries-outage` runs: tests/test_live_stalls.py)
    for argv in runs:
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, (argv, err)
    path.write_text("[scenario]\n[scenario.network]\nmax_retries_per_request = 3\n")
    from emqsim.config import load_config

    assert load_config(path)[0].network.max_retries_per_request == 3


@settings(max_examples=60, deadline=None)
@given(
    scenarios(loss=False),
    st.one_of(leases, st.just(preset("bullmq"))),
    st.sampled_from([0, 1, 3]),
    st.integers(0, 2**16),
)
def test_rejections_keep_every_job_in_one_structure_and_elision_changes_nothing(
    scenario: Scenario, policy, n: int, seed: int
) -> None:
    """Random faults (outages, Redis restarts, failovers, crashes, blocks, freezes) with a finish, a take or a
    renewal rejected anywhere: no job is lost or duplicated in the queue, a run that ended has nothing
    left waiting or active, and the callback-driven timers give the plain processes' records."""
    scenario = scenario.with_(network=replace(scenario.network, max_retries_per_request=n))
    sim, result = run(scenario, policy, seed)
    assert_structures_hold_each_job_once(sim, result)
    if result.ended_by == "done":
        assert result.final_state["wait"] == 0 and result.final_state["active"] == 0
    assert_same(scenario, policy, seed)


def test_a_finish_sent_in_a_flushs_millisecond_waits_for_the_next_flush() -> None:
    """maxRetriesPerRequest 0: the flushes come at the drop and every second after it. A finish sent exactly
    1 s after the drop comes after that second's flush (the simulator's event order): it waits for the next,
    at 2 s, but the client is back at 1.5 s, so the job completes once; `finish_fate` says the same."""
    scenario = Scenario(
        workers=2,
        jobs=1,
        duration=Fixed(20.0),
        faults=(Outage(at=19.004, duration=1.5, worker=0),),
        network=Network(max_retries_per_request=0),
    )
    run = simulate(scenario, preset("bullmq"), seed=0)
    first = next(a for a in run.attempts if a.job == "0")
    assert round((first.finished_at - 19.004) * 1000) == 1000
    assert [a.outcome for a in run.attempts] == [COMPLETED]
    assert finish_fate(0, 1500, 1000) == "waits" and finish_fate(0, 1500, 999) == "failed"
