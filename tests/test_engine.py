"""The seed's claims and the model's details, as tests on whole simulated runs."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emqsim import (
    ConfigError,
    Crash,
    Fixed,
    Freeze,
    LeasePolicy,
    LeaseWarning,
    Network,
    RenewalRule,
    Scenario,
    Simulation,
    TimeoutPolicy,
    simulate,
    standard,
)
from emqsim.records import FINISH_REJECTED, HELD

SEEDS = range(12)
LEASE = LeasePolicy(lease=30, beat=10, scan=5)
TEN_MINUTES = TimeoutPolicy(timeout=600, scan=5)


def only_attempts(run, job="0"):
    return [a for a in run.attempts if a.job == job]


@pytest.mark.parametrize("seed", SEEDS)
def test_slow_but_alive_job_is_falsely_reclaimed_by_the_timeout(seed):
    run = simulate(standard("slow-alive", duration=900), TEN_MINUTES, seed=seed)
    first = only_attempts(run)[0]
    assert first.reclaimed_at is not None and first.worker_state_at_reclaim == "alive"
    assert 600 < first.reclaimed_at - first.taken_at <= 605.01
    assert len(only_attempts(run)) == 2  # it ran twice
    assert sum(a.finish_result == "accepted" for a in run.attempts) == 2  # and completed twice


@pytest.mark.parametrize("seed", SEEDS)
def test_slow_but_alive_job_is_never_reclaimed_under_the_lease(seed):
    run = simulate(standard("slow-alive", duration=900), LEASE, seed=seed)
    (attempt,) = run.attempts
    assert attempt.reclaimed_at is None and attempt.outcome == "completed"
    renewals = [e for e in run.lock_events if e.kind == "renewed"]
    assert len(renewals) in (89, 90)  # every 10 s for 900 s, whatever the timer's phase


@pytest.mark.parametrize("seed", SEEDS)
def test_worker_dying_one_second_in_holds_the_job_for_the_rest_of_the_timeout(seed):
    run = simulate(standard("fast-dead", die_after=1.0), TEN_MINUTES, seed=seed)
    first = only_attempts(run)[0]
    assert first.died_at is not None
    assert 599 <= first.detection_latency <= 599 + 5 + 0.01  # "about 599 s", plus the wait for a scan


@pytest.mark.parametrize("seed", SEEDS)
def test_worker_dying_one_second_in_is_detected_within_the_lease_bounds(seed):
    run = simulate(standard("fast-dead", die_after=1.0), LEASE, seed=seed)
    first = only_attempts(run)[0]
    assert first.worker_state_at_reclaim == "dead"
    assert 30 - 10 <= first.detection_latency <= 30 + 2 * 5
    assert run.attempts[-1].outcome == "completed"


def freeze_run(pause, seed=0, scan=5, **policy):
    scenario = Scenario(
        name="frozen",
        workers=2,
        duration=Fixed(120),
        faults=(Freeze(job=0, after=15.0, duration=pause),),
        phases="aligned",
    )
    return simulate(scenario, LeasePolicy(30, 10, scan, **policy), seed=seed)


def test_frozen_past_its_lease_loses_the_job_even_after_resuming():
    # Aligned timers: renewals at 10, 20, ...; sweeps every 7 s (+ the round trip). The pause runs from 15 s
    # to 41 s; the lock, last renewed at 10 s, lapses at 40 s; the sweep at 42 s finds the job marked.
    run = freeze_run(pause=26, scan=7)
    first = only_attempts(run)[0]
    resume = next(e.time for e in run.worker_events if e.kind == "resume")
    failed = [e for e in run.lock_events if e.kind == "renew_failed" and e.token == first.token]
    assert failed and failed[0].time >= resume  # its next renewal fails the token check
    assert first.reclaimed_at > resume  # and the sweep takes the job although the worker is running again
    assert first.worker_state_at_reclaim == "alive"
    assert first.outcome == FINISH_REJECTED
    assert first.finish_result in ("Missing lock for job 0", "Lock mismatch for job 0")
    second = only_attempts(run)[1]
    assert second.outcome == "completed"


def test_frozen_shorter_than_its_remaining_lease_keeps_the_job():
    run = freeze_run(pause=20)
    (attempt,) = run.attempts
    assert attempt.reclaimed_at is None and attempt.outcome == "completed"


def test_freeze_threshold_is_exact_to_the_millisecond():
    # Round trip 2 ms (1 ms each way), aligned timers. The job starts at 0.002 s (take reply); the renewal
    # tick at 10 s reaches Redis at 10.001 s, so the lock is visible through 40.001 s (strict now > expiry).
    # The freeze starts 15 s into the job (15.002 s); on resume the overdue tick fires at once and reaches
    # Redis 1 ms later: it finds the lock iff 15.002 + pause + 0.001 <= 40.001, i.e. pause <= 24.998 s.
    kept = freeze_run(pause=24.998)
    lost = freeze_run(pause=24.999)
    assert kept.attempts[0].reclaimed_at is None
    assert [e.kind for e in kept.lock_events if e.kind.startswith("renew")][:3] == ["renewed"] * 3
    assert lost.attempts[0].reclaimed_at is not None
    assert [e.time for e in lost.lock_events if e.kind == "renew_failed"] == [40.002]


def test_late_finish_of_a_worker_that_lost_its_job_is_rejected_by_the_token():
    run = freeze_run(pause=60)
    first = only_attempts(run)[0]
    assert first.finish_result.startswith(("Missing lock", "Lock mismatch"))
    assert sum(a.finish_result == "accepted" for a in run.attempts) == 1


def test_recreating_renewal_saves_a_lapsed_job_unless_a_sweep_lands_in_the_gap():
    rule = RenewalRule.every(10, recreate_missing=True)
    run = freeze_run(pause=40, renewal=rule)
    first = only_attempts(run)[0]
    # A sweep every 5 s always lands in a lapse window this long: the job is still reclaimed.
    assert first.reclaimed_at is not None


def test_unfenced_timeout_accepts_the_stale_finish_as_a_duplicate():
    run = simulate(standard("slow-alive", duration=900), TEN_MINUTES, seed=3)
    outcomes = sorted(a.outcome for a in run.attempts)
    assert outcomes == ["completed", "duplicate_completion"]


def test_fenced_timeout_rejects_the_stale_finish():
    run = simulate(standard("slow-alive", duration=900), TimeoutPolicy(600, 5, fenced=True), seed=3)
    first = only_attempts(run)[0]
    # the reaper deleted its fencing lock and the job's second attempt holds a new one
    assert first.outcome == FINISH_REJECTED and first.finish_result == "Lock mismatch for job 0"


def test_nothing_is_reclaimed_when_every_worker_is_dead_and_nobody_sweeps():
    scenario = Scenario(workers=1, duration=Fixed(60), faults=(Crash(job=0, after=1.0),), horizon=600)
    run = simulate(scenario, LEASE, seed=0)
    (attempt,) = run.attempts
    assert attempt.outcome == HELD and attempt.reclaimed_at is None
    assert run.ended_by == "horizon" and run.final_state["active"] == 1
    assert all(s.by != "worker 0" or s.time <= attempt.died_at for s in run.sweeps)


def test_a_dedicated_reaper_recovers_jobs_when_every_worker_is_dead():
    scenario = Scenario(
        workers=1, jobs=1, duration=Fixed(60), faults=(Crash(job=0, after=1.0, restart_after=100.0),)
    )
    run = simulate(scenario, LeasePolicy(30, 10, 5, swept_by="reaper"), seed=0)
    assert run.attempts[0].reclaimed_by == "reaper"
    assert run.attempts[-1].outcome == "completed"


def test_a_restarted_worker_sweeps_and_recovers():
    scenario = Scenario(
        workers=1, jobs=1, duration=Fixed(60), faults=(Crash(job=0, after=1.0, restart_after=100.0),)
    )
    run = simulate(scenario, LEASE, seed=0)
    assert [e.kind for e in run.worker_events] == ["start", "crash", "restart"]
    assert run.attempts[0].reclaimed_by == "worker 1" and run.attempts[-1].outcome == "completed"


def test_lost_renewals_do_not_extend_the_lock():
    scenario = Scenario(workers=2, duration=Fixed(600), network=Network(loss=0.999))
    run = simulate(scenario, LEASE, seed=0)
    assert run.attempts[0].reclaimed_at is not None and run.attempts[0].worker_state_at_reclaim == "alive"


def test_one_timer_per_worker_batches_renewals_the_naive_variant_does_not():
    scenario = Scenario(workers=1, concurrency=8, jobs=8, duration=Fixed(300), phases="aligned")
    batched = simulate(scenario, LEASE, seed=0)
    naive = simulate(scenario, LeasePolicy(30, 10, 5, renewal=RenewalRule.every(10, per_job=True)), seed=0)
    assert naive.requests["renew"] >= 7 * batched.requests["renew"]
    assert sum(e.kind == "renewed" for e in batched.lock_events) == pytest.approx(
        sum(e.kind == "renewed" for e in naive.lock_events), abs=8
    )


def test_bullmq_rule_renews_every_tick_with_latency_and_every_other_tick_without():
    rule = RenewalRule.bullmq(30)
    assert (rule.tick_ms, rule.min_age_ms) == (7500, 7500)
    scenario = Scenario(workers=1, duration=Fixed(300), phases="aligned")
    run = simulate(scenario, LeasePolicy(30, 7.5, 30, renewal=rule), seed=0)
    renewals = [e.time for e in run.lock_events if e.kind == "renewed"]
    gaps = {round(b - a) for a, b in zip(renewals, renewals[1:], strict=False)}
    assert gaps == {8}  # 7.5 s tick + the round trip: every tick renews


def test_same_millisecond_requests_run_in_the_order_they_were_sent():
    sim = Simulation(Scenario(), LEASE, seed=0)
    server = sim.server
    order = []
    server.send("a", lambda now: order.append(("a", now)), rtt_ms=4, lost=False)
    server.send("b", lambda now: order.append(("b", now)), rtt_ms=4, lost=False)
    server.send("c", lambda now: order.append(("c", now)), rtt_ms=2, lost=False)  # sent last, arrives first
    sim.env.run(until=10)
    assert order == [("c", 1), ("a", 2), ("b", 2)]


def test_policy_settings_are_validated():
    with pytest.raises(ConfigError, match="beat .* must be shorter than the lease"):
        LeasePolicy(lease=10, beat=10)
    with pytest.raises(ConfigError, match="lease must be a positive"):
        LeasePolicy(lease=0, beat=1)
    with pytest.raises(ConfigError, match="timeout must be a positive"):
        TimeoutPolicy(timeout=-1)
    with pytest.raises(ConfigError, match="scan must be a positive"):
        TimeoutPolicy(timeout=1, scan=float("nan"))
    with pytest.warns(LeaseWarning, match="single late or lost heartbeat"):
        LeasePolicy(lease=15, beat=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LeasePolicy(lease=30, beat=10)


def test_scenario_settings_are_validated():
    with pytest.raises(ConfigError, match="workers must be a whole number"):
        Scenario(workers=0)
    with pytest.raises(ConfigError, match="targets worker 3"):
        Scenario(workers=2, faults=(Crash(worker=3, at=1.0),))
    with pytest.raises(ConfigError, match="either worker= and at="):
        Crash()
    with pytest.raises(ConfigError, match="unknown scenario"):
        standard("nope")


def test_one_worker_can_hold_the_same_job_twice_stale_and_new():
    # Regression (found by Hypothesis): a slot's stale attempt and another slot's new attempt of the same job
    # on ONE worker are tracked by token, so the stale finish does not drop the new attempt.
    scenario = Scenario(workers=1, concurrency=2, jobs=1, duration=Fixed(25), horizon=600)
    run = simulate(scenario, TimeoutPolicy(10, 1, fenced=True), seed=0)
    first, second = run.attempts[:2]
    assert first.worker == second.worker == 0 and first.token != second.token
    assert first.finish_result == "Missing lock for job 0"  # both were reaped; the lock was deleted
    assert (
        second.started_at is not None and second.finish_result == "Lock mismatch for job 0"
    )  # a third holds it


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.floats(-1e7, 1e7, allow_nan=False) | st.sampled_from([0.0005, 0.0015, -0.0025, 2.5e-4]),
        max_size=50,
    )
)
def test_vectorised_to_ms_rounds_exactly_like_to_ms(values):
    from emqsim.units import to_ms, to_ms_array

    assert to_ms_array(np.array(values, dtype=float)).tolist() == [to_ms(v) for v in values]


class LeaseWithoutShortcut(LeasePolicy):
    """The same policy with every sweep sent over the network (no `sweep_refused` shortcut)."""

    def sweep_refused(self, queue, arrival_ms):
        return False


@pytest.mark.parametrize("name", ["production", "frozen", "fast-dead"])
def test_the_refused_sweep_shortcut_changes_nothing_but_the_event_count(name):
    """Workers' sweeps turned away by the `stalled-check` rate limit are answered without network events; the
    runs are bit-identical to sending every sweep (records, request and command counts)."""
    scenario = standard(name, workers=8) if name == "production" else standard(name)
    for replication in range(3):
        short = Simulation(scenario, LeasePolicy(30, 10, 5), 5, replication)
        full = Simulation(scenario, LeaseWithoutShortcut(30, 10, 5), 5, replication)
        short_run, full_run = short.run(), full.run()
        assert short_run.digest() == full_run.digest()
        events, events_without = next(short.env._eid), next(full.env._eid)
        # one sweeper alone is never rate-limited; eight are, most of the time
        assert events < events_without if name == "production" else events <= events_without
