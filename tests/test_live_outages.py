"""Live mode reproduces connection outages: the same windows as the simulator (`emqsim.faults.outage_windows`),
emulated on the client side (requests sent while disconnected wait in an offline queue until the reconnect).

Settings: lease 3 s, beat 1 s, scan 1 s at time_scale 0.2, i.e. 600 / 200 / 200 ms real, as tests/test_live.py
runs lease 30 s at 0.02; each run takes a few seconds. Two workers with concurrency 1 each take one of the two
equal jobs at once; which job a worker takes is a race in the live mode, so the comparisons are by worker and by
count, never by job id. Timing assertions are bounds with test_live's margin (150 ms real).
"""

from __future__ import annotations

import re

import pytest

from emqsim import Fixed, LeasePolicy, Scenario, simulate
from emqsim.errors import ConfigError
from emqsim.faults import Outage, RandomFaults, reconnect_after_ms
from emqsim.live import LiveRun
from emqsim.live.cli import without_outages
from emqsim.stats import summarize

SCALE = 0.2  # 1 scenario second = 200 ms real
LEASE, BEAT, SCAN = 3.0, 1.0, 1.0  # 600 / 200 / 200 ms real
MARGIN = 0.75  # scenario seconds = 150 ms real, as test_live's
WORK = 10.0
LONG_BACK = 5 + reconnect_after_ms(12000) / 1000  # 23.179 s
BACK = 5 + reconnect_after_ms(8000) / 1000  # an outage at 5 s of 8 s: BullMQ's backoff reconnects at 15.076 s


def policy(lease: float = LEASE) -> LeasePolicy:
    return LeasePolicy(lease=lease, beat=BEAT, scan=SCAN)


def two_jobs(
    *faults: Outage, random_faults: RandomFaults | None = None, jobs: int = 2, work: float = WORK
) -> Scenario:
    return Scenario(
        name="outage",
        workers=2,
        jobs=jobs,
        duration=Fixed(work),
        faults=faults,
        random_faults=random_faults,
        horizon=300,
    )


def both(
    run_live, scenario: Scenario, seed: int = 0, lease: float = LEASE, scale: float = SCALE, before_each=None
):
    """`run_live` is the steady_live fixture (tests/conftest.py): a disturbed live run is run again."""
    live = run_live(scenario, policy(lease), time_scale=scale, seed=seed, before_each=before_each)
    return live, simulate(scenario, policy(lease), seed=seed)


def counts(run) -> tuple[int, int, int, int, int]:
    s = summarize(run)
    return (
        s.reclaims,
        s.false_reclaims,
        s.duplicate_executions,
        s.duplicate_completions,
        s.finishes_rejected,
    )


def without_duplicate_executions(run) -> tuple[int, int, int, int]:
    """`counts` less duplicate executions, which a reconnect can decide by a same-instant race (see the
    every-worker test)."""
    reclaims, false, _, completions, rejected = counts(run)
    return reclaims, false, completions, rejected


def connection_events(run) -> list[tuple[float, int, str]]:
    kinds = ("disconnect", "network_up", "reconnect")
    return [(round(e.time, 3), e.worker, e.kind) for e in run.worker_events if e.kind in kinds]


@pytest.mark.redis
def test_a_long_outage_lapses_the_lease_as_the_simulator_says(need_redis, monkeypatch, steady_live):
    # Worker 0's connection is down from 5 s for 12 s; BullMQ's backoff reconnects it at 23.179 s. Its job's
    # work ends at 6 s, and the finish waits in the offline queue; so do its renewals: the lock lapses (by
    # 5 + lease), a sweep of worker 1 reclaims the job (7-10 s) and worker 1, idle since 6 s, takes it again at
    # once and completes it by 16 s; worker 0's finish reaches Redis at the reconnect and is rejected. (6 s jobs: the re-take never
    # ties with the end of worker 0's work, so whether the job ran twice at once does not hang on a race.)
    # At the disconnect Redis closes worker 0's connections for real (CLIENT KILL), and only worker 0's.
    dropped = []
    drop = LiveRun.drop_connections

    def spy(self, proc, wid):
        before = self.connections_dropped
        drop(self, proc, wid)
        dropped.append((wid, self.connections_dropped - before))

    monkeypatch.setattr(LiveRun, "drop_connections", spy)
    live, sim = both(
        steady_live, two_jobs(Outage(at=5, duration=12, worker=0), work=6.0), before_each=dropped.clear
    )
    assert len(dropped) == 1 and dropped[0][0] == 0 and dropped[0][1] >= 1
    for run in (live, sim):
        reclaimed = [a for a in run.attempts if a.reclaimed_at is not None]
        assert [(a.worker, a.worker_state_at_reclaim) for a in reclaimed] == [(0, "disconnected")]
        first = reclaimed[0]
        assert 5 + LEASE - BEAT - MARGIN <= first.reclaimed_at <= 5 + LEASE + 2 * SCAN + MARGIN
        assert (
            first.outcome == "finish_rejected" and first.finish_result == f"Missing lock for job {first.job}"
        )
        assert first.finish_applied_at >= LONG_BACK - MARGIN  # sent at the reconnect, not when the work ended
        again = [a for a in run.attempts if a.job == first.job and a.attempt == 2]
        assert [(a.worker, a.outcome) for a in again] == [(1, "completed")]
        assert run.ended_by == "done" and run.final_state["completed"] == 2
        assert connection_events(run) == [
            (5.0, 0, "disconnect"),
            (17.0, 0, "network_up"),
            (LONG_BACK, 0, "reconnect"),
        ]
    assert counts(live) == counts(sim)
    assert counts(live) == (1, 1, 0, 0, 1)


@pytest.mark.redis
def test_a_short_outage_loses_nothing(need_redis, steady_live):
    # Down 0.5 s (reconnected at 1 s): the queued renewal reaches Redis long before the lease lapses. A 5 s
    # lease here: the last renewal before the outage came after 4 s, so the lock holds until after 9 s, 3 s
    # (600 ms real) after the reconnect; with 3 s that margin was 1 s (200 ms real), which a loaded box missed.
    # At time scale 0.5 that margin is 1.5 s real.
    live, sim = both(steady_live, two_jobs(Outage(at=5, duration=0.5, worker=0)), lease=5.0, scale=0.5)
    for run in (live, sim):
        assert [a.outcome for a in run.attempts] == ["completed", "completed"]
        assert counts(run) == (0, 0, 0, 0, 0)
        lapsed = [e for e in run.lock_events if e.kind in ("renew_failed", "expired")]
        assert not lapsed, (lapsed, run.lock_events)
        assert connection_events(run) == [
            (5.0, 0, "disconnect"),
            (5.5, 0, "network_up"),
            (6.0, 0, "reconnect"),
        ]
        held_by_0 = {a.token for a in run.attempts if a.worker == 0}
        renewals = sorted(e.time for e in run.lock_events if e.kind == "renewed" and e.token in held_by_0)
        assert not [t for t in renewals if 5 < t < 6 - 0.01]  # none reached Redis while it was disconnected
        assert any(6 - 0.01 <= t <= 6 + MARGIN for t in renewals)  # the queued one, at the reconnect
    assert counts(live) == counts(sim)


@pytest.mark.redis
def test_an_outage_of_every_worker_lapses_every_lease_as_the_simulator_says(need_redis, steady_live):
    # A network blip at Redis: every client is down 5 s -> 15.076 s. Nobody can sweep meanwhile (the sweeps are
    # the workers'), so both jobs are reclaimed after the reconnect, their workers alive again.
    live, sim = both(steady_live, two_jobs(Outage(at=5, duration=8)))
    for run in (live, sim):
        reclaimed = sorted((a.worker, a.worker_state_at_reclaim) for a in run.attempts if a.reclaimed_at)
        assert reclaimed == [(0, "alive"), (1, "alive")]
        assert all(
            BACK - 0.01 <= a.reclaimed_at <= BACK + 2 * SCAN + MARGIN for a in run.attempts if a.reclaimed_at
        )
        assert {(e.worker, e.kind) for e in run.worker_events if e.kind == "disconnect"} == {
            (0, "disconnect"),
            (1, "disconnect"),
        }
    # Both workers' queued finishes, renewals and sweeps are sent at the same reconnect instant: whether a
    # reclaimed job is taken again before its stale copy's finish is rejected (a duplicate execution of a few
    # ms) is the simulator's tie rule there and a race in the live mode, so that one count is not compared.
    assert without_duplicate_executions(live) == without_duplicate_executions(sim)


@pytest.mark.redis
def test_random_outages_are_the_simulators_windows(need_redis, steady_live):
    # Random outages come from the run's seeded fault stream: the live workers are cut off exactly when the
    # simulated ones are (nobody crashes, so no worker is replaced), with the same effect on the leases.
    scenario = two_jobs(
        random_faults=RandomFaults(outage_rate=300.0, outage_duration=Fixed(8.0)), jobs=4
    ).with_(horizon=60)
    live, sim = both(
        steady_live, scenario, seed=5
    )  # worker 1 is cut off 3.3 -> 13.4 s, worker 0 29.9 -> 40.0 s
    events = connection_events(sim)
    assert events and connection_events(live) == [e for e in events if e[0] <= live.end]
    assert without_duplicate_executions(live) == without_duplicate_executions(sim)  # see the test above
    live_states = sorted((a.worker, a.worker_state_at_reclaim) for a in live.attempts if a.reclaimed_at)
    sim_states = sorted((a.worker, a.worker_state_at_reclaim) for a in sim.attempts if a.reclaimed_at)
    assert live_states == sim_states


@pytest.mark.redis
@pytest.mark.parametrize("policy_kind", ["lease", "timeout"])
def test_a_redis_restart_is_a_real_one_and_agrees_with_the_simulator(
    need_redis, monkeypatch, policy_kind, steady_live
):
    # The private redis-server is shut down (SHUTDOWN SAVE) at 5 s and started again on its data at 13 s;
    # every client reconnects at 15.076 s. Jobs arrive at 2.7, 6.9, 8.5, 10.4, 16.3 and 20.5 s (seed 1): the
    # three made while Redis is down wait in the producer's queue and are taken only after the reconnect.
    from emqsim import TimeoutPolicy
    from emqsim.live.server import PrivateRedis

    # Just before the shutdown: (pid, keys without an expiry, locks). Just after the start, from the new server's log
    # (the workers may already be sending again, so a read would race them): (pid, keys loaded, keys expired).
    before, after = [], []
    shut_down, start_again = PrivateRedis.shut_down, PrivateRedis.start_again

    def spy_shut_down(self, *args, **kwargs):
        x = self.client()
        locks = list(x.scan_iter(match="*:lock"))
        kept = [k for k in x.scan_iter() if x.pttl(k) == -1]
        before.append((self.proc.pid, len(kept), len(locks)))
        x.close()
        return shut_down(self, *args, **kwargs)

    def spy_start_again(self, *args, **kwargs):
        started = start_again(self, *args, **kwargs)
        log = (self.workdir / "redis.log").read_text()
        loaded, expired = re.findall(r"Done loading RDB, keys loaded: (\d+), keys expired: (\d+)", log)[-1]
        after.append((self.proc.pid, int(loaded), int(expired)))
        return started

    monkeypatch.setattr(PrivateRedis, "shut_down", spy_shut_down)
    monkeypatch.setattr(PrivateRedis, "start_again", spy_start_again)
    scenario = Scenario(
        name="restart",
        workers=2,
        jobs=6,
        duration=Fixed(WORK),
        arrival_rate=0.5,
        faults=(Outage(at=5, duration=8, redis_restart=True),),
        horizon=300,
    )
    chosen = policy() if policy_kind == "lease" else TimeoutPolicy(timeout=12, scan=SCAN)
    live = steady_live(
        scenario, chosen, time_scale=SCALE, seed=1, before_each=lambda: (before.clear(), after.clear())
    )
    sim = simulate(scenario, chosen, seed=1)
    # a real restart: a new process that loaded the data saved at the shutdown. (On a loaded box the parent's restart can come
    # late and a worker's queued finish reach the new server at once, so the state after the start is read
    # from the server's own log, not with a client: twice in CI such a read found the active job gone.)
    ((old_pid, keys_before, locks_before),) = before
    ((new_pid, loaded, _),) = after
    assert new_pid != old_pid
    # every key without an expiry came back (a key with one may expire before the save: not counted)
    assert loaded >= keys_before, (before, after)
    assert policy_kind == "lease" or locks_before == 0  # the timeout takes no locks
    assert [round(a, 3) for a in sim.arrivals] == [2.702, 6.923, 8.545, 10.385, 16.283, 20.45]
    # a job made while Redis was down keeps the time it was made as its arrival, exactly (the others are
    # recorded when the live add ran, late by however busy the machine is)
    made_while_down = [k for k, a in enumerate(sim.arrivals) if 5 <= a < BACK]
    assert made_while_down == [1, 2, 3]
    assert [round(live.arrivals[k], 3) for k in made_while_down] == [
        round(sim.arrivals[k], 3) for k in made_while_down
    ]
    for run in (live, sim):
        made_while_down = [a for a in run.attempts if 5 <= sim.arrivals[int(a.job)] < BACK]
        assert made_while_down and all(a.started_at >= BACK - MARGIN for a in made_while_down)
        assert not [s.time for s in run.sweeps if 5 + MARGIN < s.time < BACK - MARGIN]
        assert {(e.worker, e.kind) for e in run.worker_events if e.kind == "disconnect"} == {
            (0, "disconnect"),
            (1, "disconnect"),
        }
    if policy_kind == "lease":
        # the reclaims and their counts as the simulator's (duplicate executions: a reconnect race, as above)
        assert without_duplicate_executions(live) == without_duplicate_executions(sim)
        assert sorted(a.worker_state_at_reclaim for a in live.attempts if a.reclaimed_at) == sorted(
            a.worker_state_at_reclaim for a in sim.attempts if a.reclaimed_at
        )


@pytest.mark.redis
def test_random_freezes_and_blocks_are_the_simulators(need_redis, steady_live):
    # Random freezes and blocked loops come from the run's seeded fault streams, each next one counted from
    # the end of the last (or from a fault that found its worker already frozen or blocked, and did not
    # happen): the live workers are frozen and blocked when the simulated ones are, to the margin.
    from emqsim.distributions import Uniform

    faults = RandomFaults(
        freeze_rate=400.0,
        freeze_duration=Uniform(0.5, 3.0),
        block_rate=400.0,
        block_duration=Uniform(0.5, 3.0),
    )
    scenario = two_jobs(random_faults=faults, jobs=4, work=25.0).with_(horizon=60)
    live, sim = both(steady_live, scenario, seed=3)
    kinds = ("freeze", "resume", "block", "unblock")
    simulated = [
        (e.time, e.worker, e.kind) for e in sim.worker_events if e.kind in kinds and e.time <= live.end
    ]
    lived = [(e.time, e.worker, e.kind) for e in live.worker_events if e.kind in kinds and e.time <= live.end]
    assert len(simulated) >= 30
    assert [e[1:] for e in lived] == [e[1:] for e in simulated]
    assert max(abs(a[0] - b[0]) for a, b in zip(lived, simulated, strict=True)) <= MARGIN


def test_a_restart_of_someone_elses_redis_is_refused():
    restart = two_jobs(Outage(at=5, duration=8, redis_restart=True))
    with pytest.raises(ConfigError, match="only its own private redis-server") as info:
        LiveRun(restart, policy(), time_scale=SCALE, redis_url="redis://localhost:6379/15")
    assert "\n" not in str(info.value)


def test_a_failover_is_refused_with_one_line_naming_without_outages():
    """Refused on someone else's Redis; on its own servers a failover runs, whether its clients come back to
    the new primary (tests/test_live_failover.py) or stay on the demoted one (readonly > 0,
    tests/test_live_stalls.py)."""
    failover = two_jobs(Outage(at=5, duration=8, lost_writes=2, readonly=3))
    with pytest.raises(ConfigError, match="--without-outages") as info:
        LiveRun(failover, policy(), time_scale=SCALE, redis_url="redis://localhost:6379/15")
    assert "\n" not in str(info.value) and "failover" in str(info.value)
    LiveRun(failover, policy(), time_scale=SCALE)  # accepted on its own servers
    LiveRun(without_outages(failover), policy(), time_scale=SCALE)  # and once stripped
    LiveRun(two_jobs(Outage(at=5, duration=8)), policy(), time_scale=SCALE)  # a plain outage is accepted
    LiveRun(two_jobs(Outage(at=5, duration=8, lost_writes=2)), policy(), time_scale=SCALE)  # so is a failover
    with pytest.raises(ConfigError, match="only its own private redis-servers") as info:
        LiveRun(two_jobs(Outage(at=5, duration=8, lost_writes=2)), policy(), time_scale=SCALE,
                redis_url="redis://localhost:6379/15")  # fmt: skip
    assert "\n" not in str(info.value)


def test_the_cli_refuses_a_failover_with_exit_2_and_one_line(monkeypatch, capsys):
    import emqsim.live.cli as live_cli
    from emqsim.cli.app import main

    failover = two_jobs(Outage(at=5, duration=8, lost_writes=2, readonly=3))
    monkeypatch.setattr(live_cli, "standard", lambda name: failover)
    argv = ["live", "--scenario", "flaky-network", "--lease", "3", "--scan", "1", "--time-scale", "0.2"]
    assert main([*argv, "--redis", "redis://localhost:6379/15"]) == 2  # a failover of someone else's Redis
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--without-outages" in err and "failover" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--redis-restart-for", "3"], "--redis-restart-for: needs --redis-restart-at"),
        (["--redis-restart-at", "5", "--redis", "redis://localhost:6379/15"], "only its own private"),
        (["--redis-restart-at", "-1"], "--redis-restart-at"),
    ],
)
def test_the_live_cli_checks_its_restart_flags(argv, needle, capsys):
    from emqsim.cli.app import main

    try:
        code = main(["live", "--lease", "3", "--scan", "1", *argv])
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


@pytest.mark.redis
def test_the_live_cli_restarts_redis(need_redis, capsys):
    from emqsim.cli.app import main

    argv = ["live", "--redis-restart-at", "2", "--redis-restart-for", "8", "--time-scale", "0.05", "--json"]
    assert main(argv) == 0
    import json

    report = json.loads(capsys.readouterr().out)
    # fast-dead: the worker that took the job (a race, live) dies at about 1 s; the other one is cut off while
    # Redis restarts, 2 s -> 12.076 s
    every = report["run"]["worker_events"]
    (dead,) = {e["worker"] for e in every if e["kind"] == "crash"}
    events = [e for e in every if e["worker"] == 1 - dead and e["kind"] != "start"]
    assert [(e["kind"], e["detail"]) for e in events] == [
        ("disconnect", "Redis restarting back in 8 s"),
        ("network_up", "reconnect in 2.076 s"),
        ("reconnect", "resending queued commands"),
    ]
