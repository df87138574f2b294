"""The faults real queues hit: a blocked event loop, connection outages, takes after wake-up, the lock manager
keyed by job id, lazy maxStalledCount failure, sandboxed children's crashes; each against its closed form or
the behaviour BullMQ's source shows."""

import pytest

from emqsim import Fixed, LeasePolicy, RenewalRule, Scenario, TimeoutPolicy, simulate, standard
from emqsim.analytic import (
    block_lapse_probability,
    block_lapses,
    block_safe_limit,
    outage_lapses,
    reconnect_time,
)
from emqsim.distributions import Uniform
from emqsim.errors import ConfigError
from emqsim.faults import (
    Block,
    ChildCrash,
    Crash,
    Freeze,
    Outage,
    RandomFaults,
    reconnect_after_ms,
    reconnect_delay_ms,
)
from emqsim.presets import preset
from emqsim.stats import summarize, wilson_ci


# -- a blocked event loop --------------------------------------------------------------------------------------
@pytest.mark.parametrize("delta_ms", [-1, 0, 1, 2])
def test_block_lapses_exactly_when_u_plus_block_exceeds_the_lease(delta_ms):
    lease, after = 30, 15.0
    u = round(after + 0.002 - 10.0, 3)  # the renewal at 10 s (aligned ticks); the job started at 2 ms
    block = round(lease - u + delta_ms / 1000, 3)
    policy = LeasePolicy(lease, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=2,
        jobs=1,
        duration=Fixed(100),
        faults=(Block(job=0, after=after, duration=block),),
        phases="aligned",
    )
    run = simulate(sc, policy, seed=1)
    first = run.attempts[0]
    lapsed = any(e.kind == "renew_failed" for e in run.lock_events)
    assert lapsed == block_lapses(lease, u, block) == (delta_ms > 0)
    assert first.false_reclaim == lapsed and (first.outcome == "finish_rejected") == lapsed
    # unlike a freeze, the work went on during the block: the job ends on time
    assert first.finished_at == pytest.approx(100.002, abs=0.002)


def test_a_reclaim_during_a_block_finds_the_worker_blocked_and_the_job_runs_twice():
    run = simulate(standard("blocked-loop"), LeasePolicy(30, 10, 5), seed=0)
    first, second = run.attempts[:2]
    assert first.worker_state_at_reclaim == "blocked" and first.false_reclaim
    assert first.outcome == "finish_rejected" and second.outcome == "completed"
    assert summarize(run).duplicate_executions == 1
    kinds = [e.kind for e in run.worker_events if e.worker == first.worker]
    assert kinds[:3] == ["start", "block", "unblock"]


def test_block_lapse_probability_matches_the_simulator():
    lease, beat, block = 30.0, 10.0, 25.0  # L - B = 20 < X: lapses when u > 5, half the time
    policy = LeasePolicy(lease, beat, 5, swept_by="reaper")
    expected = block_lapse_probability(lease, beat, block)
    assert expected == pytest.approx(0.5, abs=0.01)
    sc = Scenario(
        workers=2, jobs=1, duration=Fixed(80), faults=(Block(job=0, after=Uniform(1, 31), duration=block),)
    )
    hits = sum(simulate(sc, policy, seed=s).attempts[0].false_reclaim for s in range(300))
    _, lo, hi = wilson_ci(hits, 300, 0.998)
    assert lo <= expected <= hi


def test_a_lease_longer_than_the_longest_block_plus_a_beat_never_lapses():
    lease = 30.0
    rule = RenewalRule.bullmq(lease)
    limit = block_safe_limit(lease, rule)
    assert limit == pytest.approx(lease - 7.5, abs=0.01)
    policy = preset("bullmq")
    for seed in range(40):
        sc = standard("blocked-loop", block_for=limit - 0.01, block_after=Uniform(1, 60))
        assert not simulate(sc, policy, seed=seed).attempts[0].false_reclaim
        sc = standard("blocked-loop", block_for=lease + 0.01, block_after=Uniform(1, 60))
        assert simulate(sc, policy, seed=seed).attempts[0].false_reclaim


# -- connection outages -----------------------------------------------------------------------------------------
def test_reconnect_follows_bullmqs_retry_strategy():
    assert [reconnect_delay_ms(n) for n in range(1, 11)] == [1000] * 6 + [1096, 2980, 8103, 20000]
    assert reconnect_time(0.5) == 1.0 and reconnect_time(6.0) == 6.0 and reconnect_time(15.0) == 18.179
    sc = Scenario(workers=2, jobs=1, duration=Fixed(100), faults=(Outage(at=20, duration=15),))
    run = simulate(sc, LeasePolicy(30, 10, 5), seed=3)
    for worker in (0, 1):
        times = {e.kind: e.time for e in run.worker_events if e.worker == worker}
        assert (times["disconnect"], times["network_up"], times["reconnect"]) == (20.0, 35.0, 38.179)


@pytest.mark.parametrize("delta_ms", [-1, 0, 1, 2])
def test_outage_lapses_exactly_when_u_plus_the_reconnect_time_exceeds_the_lease(delta_ms):
    lease, outage = 25, 15.0  # R(15 s) = 18.179 s; the last renewal before it is sent at 20 s
    at = round(20 + lease - reconnect_time(outage) + delta_ms / 1000, 3)
    policy = LeasePolicy(lease, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=1, jobs=1, duration=Fixed(100), faults=(Outage(at=at, duration=outage),), phases="aligned"
    )
    run = simulate(sc, policy, seed=1)
    lapsed = any(e.kind == "renew_failed" for e in run.lock_events)
    assert lapsed == outage_lapses(lease, at - 20, outage) == (delta_ms > 0)


def test_an_outage_is_not_a_run_of_independent_lost_beats():
    # 20 s without Redis is two lost beats, which a 30 s lease renewed every 10 s survives; but the client is
    # back only at the reconnect attempt 38.179 s after the drop, so the lease lapses on a live worker.
    policy = LeasePolicy(30, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=2, jobs=1, duration=Fixed(100), faults=(Outage(at=21.0, duration=20.0),), phases="aligned"
    )
    run = simulate(sc, policy, seed=0)
    first = run.attempts[0]
    assert reconnect_time(20.0) == 38.179 and outage_lapses(30, 1.0, 20.0)
    assert first.false_reclaim and first.worker_state_at_reclaim in ("alive", "disconnected")
    renewals = [e.time for e in run.lock_events if e.kind in ("renewed", "renew_failed")]
    assert not [t for t in renewals if 21.0 < t < 21.0 + 38.179]  # nothing reached Redis while it was away


def test_a_sweep_during_an_outage_reports_the_worker_disconnected():
    policy = LeasePolicy(10, 3, 1, swept_by="reaper")
    sc = Scenario(workers=2, jobs=1, duration=Fixed(100), faults=(Outage(at=5, duration=60, worker=0),))
    first = simulate(sc, policy, seed=0).attempts[0]
    assert first.worker == 0 and first.worker_state_at_reclaim == "disconnected" and first.false_reclaim


@pytest.mark.parametrize("lag", [0.0, 1.0])
def test_a_failover_to_a_lagging_replica_loses_the_add_and_the_take(lag):
    # Redis fails over at 0.5 s (every worker away 0.5 s); a replica 1 s behind never got the add at 0 ms nor
    # the take (and its lock) at 1 ms: the job is gone. Its worker works on, its renewals and its finish are
    # refused (the lock is missing), and nothing runs it again. (Until schema 6 only the lock was lost and the
    # job was reclaimed from its live worker.)
    policy = LeasePolicy(30, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=2,
        jobs=1,
        duration=Fixed(100),
        faults=(Outage(at=0.5, duration=0.5, lost_writes=lag),),
        phases="aligned",
    )
    run = simulate(sc, policy, seed=0)
    first = run.attempts[0]
    lost = [e for e in run.lock_events if e.kind == "lost_in_failover"]
    if lag:
        assert [(e.time, e.token, e.expires_at) for e in lost] == [(0.5, first.token, None)]
        assert run.attempts == [first] and first.outcome == "finish_rejected" and first.reclaimed_at is None
        assert run.final_state == {"wait": 0, "active": 0, "completed": 0, "failed": 0}
        assert run.ended_by == "done"  # the lost job counts as settled for the end of the run
    else:
        assert not lost and first.outcome == "completed"


def test_a_failover_undoes_a_recent_renewal_back_to_the_earlier_expiry():
    # renewals at 10 and 20 s (aligned); a failover at 20.5 s with 1 s of lag undoes the one at 20 s: the lock
    # is back to expiring at 40.001 s, and the renewal at 30 s (after the reconnect) still saves it.
    policy = LeasePolicy(30, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=2,
        jobs=1,
        duration=Fixed(100),
        faults=(Outage(at=20.5, duration=0.5, lost_writes=1.0),),
        phases="aligned",
    )
    run = simulate(sc, policy, seed=0)
    (lost,) = [e for e in run.lock_events if e.kind == "lost_in_failover"]
    assert lost.expires_at == pytest.approx(40.001)
    assert run.attempts[0].outcome == "completed" and not any(e.kind == "expired" for e in run.lock_events)


def _restart_vs_blip(policy, **scenario):
    """The same every-client outage (5 s -> 13 s, reconnect at 15.076 s) as a network blip on the workers'
    side and as Redis restarting; jobs keep arriving meanwhile."""
    runs = {}
    for restart in (False, True):
        sc = Scenario(
            workers=2,
            jobs=6,
            duration=Fixed(10.0),
            arrival_rate=0.5,
            faults=(Outage(at=5, duration=8, redis_restart=restart),),
            horizon=300,
            **scenario,
        )
        runs[restart] = simulate(sc, policy, seed=1)
    return runs


def test_a_redis_restart_holds_the_producers_adds_until_it_is_back():
    # A blip cuts off only the workers: a job added at 6.9 s is handed to a parked take, its lock set while
    # its worker cannot renew, and it lapses (a false reclaim). While Redis restarts the add waits in the
    # producer's offline queue and reaches Redis at the reconnect (15.076 s): nothing lapses.
    runs = _restart_vs_blip(LeasePolicy(lease=3, beat=1, scan=1))
    back = 5 + reconnect_after_ms(8000) / 1000
    for run in runs.values():
        assert (
            run.arrivals
            == simulate(
                Scenario(workers=2, jobs=6, duration=Fixed(10.0), arrival_rate=0.5, horizon=300),
                LeasePolicy(lease=3, beat=1, scan=1),
                seed=1,
            ).arrivals
        )  # arrival times are when the producer made the job, whatever Redis was doing
    during = [a for a in runs[True].attempts if 5 <= runs[True].arrivals[int(a.job)] < back]
    assert during and all(a.started_at >= back for a in during)
    assert summarize(runs[False]).false_reclaims > summarize(runs[True]).false_reclaims == 1


def test_a_redis_restart_cuts_off_the_timeout_reaper_too():
    # A blip on the workers' side leaves the reaper connected: it sweeps every second throughout. While Redis
    # restarts, the reaper's sweeps wait for the reconnect like everyone's requests; its queued sweep reaches
    # Redis at the reconnect, just before worker 0's queued finish of a job now 12.4 s old, and reclaims it.
    runs = _restart_vs_blip(TimeoutPolicy(timeout=12, scan=1))
    back = 5 + reconnect_after_ms(8000) / 1000
    inside = {r: [s.time for s in run.sweeps if 5 < s.time < back] for r, run in runs.items()}
    assert len(inside[False]) >= 9 and inside[True] == []
    (reclaim,) = [a for a in runs[True].attempts if a.reclaimed_at]
    assert reclaim.job == "0" and back <= reclaim.reclaimed_at <= back + 0.002 and reclaim.false_reclaim
    assert not [a for a in runs[False].attempts if a.job == "0" and a.reclaimed_at]


def test_outages_are_checked():
    with pytest.raises(ConfigError, match="Outage.duration"):
        Outage(at=1, duration=0)
    with pytest.raises(ConfigError, match="worker 5"):
        Scenario(workers=2, faults=(Outage(at=1, duration=1, worker=5),))
    with pytest.raises(ConfigError, match="block_rate"):
        RandomFaults(block_rate=-1)
    with pytest.raises(ConfigError, match="every worker"):
        Outage(at=1, duration=1, worker=0, lost_writes=1)
    for bad in ({"worker": 0}, {"lost_writes": 1.0}):
        with pytest.raises(ConfigError, match="redis_restart"):
            Outage(at=1, duration=1, redis_restart=True, **bad)


# -- takes after wake-up ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("take", ["atomic", "after-wakeup"])
def test_a_frozen_worker_is_handed_a_job_only_by_the_atomic_take(take):
    policy = LeasePolicy(30, 10, 5, take_mode=take)
    sc = Scenario(
        workers=2,
        jobs=1,
        arrival_rate=0.1,
        duration=Fixed(20),
        faults=(Freeze(worker=0, at=0.0, duration=500),),
    )
    run = simulate(sc, policy, seed=2)
    first = run.attempts[0]
    if take == "atomic":  # BLMOVE served at Redis for the parked, frozen client
        assert first.worker == 0 and first.false_reclaim and first.worker_state_at_reclaim == "frozen"
    else:  # the frozen client swallows the wake-up; the other wakes by drainDelay and takes it
        assert first.worker == 1 and not first.false_reclaim and first.outcome == "completed"
        assert first.taken_at - run.arrivals[0] <= 5.0 + 0.01


# -- the lock manager keyed by job id ----------------------------------------------------------------------------
@pytest.mark.parametrize("track_by", ["token", "job"])
def test_a_stale_copys_end_untracks_the_fresh_copy_when_tracked_by_job_id(track_by):
    policy = LeasePolicy(30, 10, 5, swept_by="reaper", track_by=track_by, max_stalled=None)
    sc = Scenario(
        workers=1, concurrency=2, jobs=1, duration=Fixed(60), faults=(Freeze(job=0, after=50, duration=40),)
    )
    run = simulate(sc, policy, seed=0)
    stale, fresh = run.attempts[:2]
    assert stale.worker == fresh.worker == 0 and stale.outcome == "finish_rejected"
    if track_by == "token":
        assert fresh.outcome == "completed" and len(run.attempts) == 2
    else:  # untrackJob(job.id) after the stale finish: the fresh lock lapses on a live worker
        assert fresh.false_reclaim and fresh.worker_state_at_reclaim == "alive" and len(run.attempts) >= 3


def test_renewal_rule_track_by_is_checked():
    with pytest.raises(ConfigError, match="track_by"):
        RenewalRule.every(10, track_by="id")


# -- lazy maxStalledCount failure ---------------------------------------------------------------------------------
@pytest.mark.parametrize("lazy", [False, True])
def test_a_job_past_max_stalled_is_failed_by_its_next_taker_when_lazy(lazy):
    policy = LeasePolicy(30, 10, 5, max_stalled=0, lazy_fail=lazy)
    run = simulate(standard("fast-dead"), policy, seed=0)
    assert run.final_state["failed"] == 1
    first = run.attempts[0]
    if lazy:
        second = run.attempts[1]
        assert first.reclaimed_at is not None and first.failed_at is None
        assert (
            second.outcome == "failed" and second.failed_at - second.taken_at < 0.01 and second.work_done == 0
        )
        assert summarize(run).reclaims == 1
    else:
        assert len(run.attempts) == 1 and first.failed_at is not None and first.outcome == "failed"
    assert first.detection_latency is not None


# -- sandboxed processors -----------------------------------------------------------------------------------------
def test_a_sandboxed_childs_exit_fails_the_job_at_once():
    policy = LeasePolicy(30, 10, 5)
    sc = Scenario(workers=2, jobs=2, duration=Fixed(60), faults=(ChildCrash(job=0, after=3),))
    run = simulate(sc, policy, seed=0)
    failed = run.attempts[0]
    assert failed.outcome == "failed" and failed.failed_at == pytest.approx(
        failed.started_at + 3.001, abs=0.003
    )
    assert failed.reclaimed_at is None and failed.died_at is None  # no lease wait, no dead worker
    assert run.final_state == {"wait": 0, "active": 0, "completed": 1, "failed": 1}
    assert summarize(run).reclaims == 0
    # a worker crash still waits for the lease
    crashed = simulate(sc.with_(faults=(Crash(job=0, after=3),)), policy, seed=0).attempts[0]
    assert crashed.detection_latency > 15


def test_the_bullmq_preset_models_bullmqs_fetch_lock_manager_and_lazy_failure():
    policy = preset("bullmq")
    assert policy.take_after_wakeup and policy.renewal.track_by == "job" and policy.lazy_fail
    assert policy.drain_delay_ms == 5000


# -- the command line and scenario files ---------------------------------------------------------------------------
def _cli(capsys, *argv):
    from emqsim.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_fault_flags_reach_the_scenario_and_the_policy():
    from emqsim.cli import build_parser, run_scenario, single_policy, with_model_options

    args = build_parser().parse_args(
        ["run", "--scenario", "fast-dead", "--block-for", "40", "--block-after", "2:4", "--outage-at", "10",
         "--outage-for", "15", "--outage-rate", "2", "--block-rate", "3", "--child-crash-after", "1",
         "--take", "after-wakeup", "--track-by", "job", "--lazy-fail"]
    )  # fmt: skip
    scenario = run_scenario(args)
    kinds = sorted(type(f).__name__ for f in scenario.faults)
    assert kinds == ["Block", "ChildCrash", "Crash", "Outage"]
    assert scenario.random_faults.block_rate == 3 and scenario.random_faults.outage_rate == 2
    policy = with_model_options(single_policy(args), args)
    assert policy.take_after_wakeup and policy.lazy_fail and policy.renewal.track_by == "job"
    args = build_parser().parse_args(["run", "--outage-at", "5", "--outage-for", "2", "--failover-lag", "1"])
    assert [f.lost_writes for f in run_scenario(args).faults if isinstance(f, Outage)] == [1.0]
    args = build_parser().parse_args(["run", "--outage-at", "5", "--outage-for", "2", "--redis-restart"])
    assert [f.redis_restart for f in run_scenario(args).faults if isinstance(f, Outage)] == [True]
    # --block-for replaces blocked-loop's own block instead of adding a second one
    args = build_parser().parse_args(["run", "--scenario", "blocked-loop", "--block-for", "10"])
    (block,) = run_scenario(args).faults
    assert block.duration == 10


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--block-after", "3"], "--block-after: needs --block-for"),
        (["run", "--outage-at", "3"], "give both --outage-at T and --outage-for X"),
        (["run", "--failover-lag", "1"], "--failover-lag: needs --outage-at"),
        (["run", "--redis-restart"], "--redis-restart: needs --outage-at"),
        (
            ["run", "--outage-at", "1", "--outage-for", "2", "--failover-lag", "1", "--redis-restart"],
            "--redis-restart: a restart keeps its data",
        ),
        (["run", "--policy", "timeout", "--lazy-fail"], "apply to lease policies only"),
        (["run", "--block-rate", "-1"], "must be a rate >= 0"),
        (["sweep", "--take", "sometimes"], "invalid choice"),
    ],
)
def test_bad_fault_flags_get_one_line_and_status_2(argv, needle, capsys):
    from emqsim.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_sweep_adds_the_fault_flags_to_every_scenario(capsys):
    code, out, _ = _cli(
        capsys, "sweep", "--scenario", "fast-dead", "--outage-at", "5", "--outage-for", "20", "--timeout", "600",
        "--replications", "2", "--jobs", "1", "--quiet", "--json",
    )  # fmt: skip
    assert code == 0
    import json

    lease = json.loads(out)["rows"][0]
    plain = simulate(standard("fast-dead"), LeasePolicy(30, 10, 5), seed=0)
    assert (
        lease["detection_latency_mean"] > plain.attempts[0].detection_latency
    )  # the outage delays the sweeps


def test_the_toml_example_and_fault_keys(tmp_path):
    from pathlib import Path

    from emqsim.config import load_config

    example = Path(__file__).parent.parent / "emqsim" / "examples" / "cpu-bound-workers.toml"
    scenario, policy = load_config(example)
    assert {type(f).__name__ for f in scenario.faults} == {"Block", "Outage"}
    assert scenario.random_faults.block_rate == 2 and scenario.random_faults.outage_rate == 1
    assert policy.take_after_wakeup and policy.lazy_fail and policy.renewal.track_by == "job"
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[scenario]\njobs = 2\n[[scenario.faults]]\nkind = "outage"\nat = 1\nafter = 2\nduration = 3\n'
    )
    with pytest.raises(
        ConfigError, match="bad.toml:6: scenario.faults\\[0\\].after: an outage starts at an absolute"
    ):
        load_config(bad)
    bad.write_text('[scenario]\njobs = 2\n[[scenario.faults]]\nkind = "child_crash"\nworker = 0\nat = 1\n')
    with pytest.raises(ConfigError, match="a child_crash hits a job"):
        load_config(bad)
    bad.write_text(
        '[scenario]\n[[scenario.faults]]\nkind = "outage"\nat = 1\nduration = 3\nredis_restart = 1\n'
    )
    with pytest.raises(ConfigError, match="redis_restart: must be true or false"):
        load_config(bad)
    bad.write_text(
        '[scenario]\n[[scenario.faults]]\nkind = "crash"\nworker = 0\nat = 1\nredis_restart = true\n'
    )
    with pytest.raises(ConfigError, match="only an outage has redis_restart"):
        load_config(bad)
    good = tmp_path / "good.toml"
    good.write_text(
        '[scenario]\n[[scenario.faults]]\nkind = "outage"\nat = 1\nduration = 3\nredis_restart = true\n'
    )
    assert load_config(good)[0].faults == (Outage(at=1, duration=3, redis_restart=True),)
    bad.write_text("[scenario]\n[scenario.random_faults]\nblock_rate = -2\n")
    with pytest.raises(ConfigError, match="block_rate"):
        load_config(bad)
