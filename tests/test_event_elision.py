"""The engine's event elision (issue 27) changes no result: every run with it equals the run without it.

`emqsim.client._ELISION` is the private switch. On: the lock managers and the reaper's timer run as callbacks
on light queue entries (`emqsim._simpy_fast.Tick`), and the workers' stalled checks are planned ahead by one
`checks.SweepCoordinator` that sends only the checks the rate limit does not refuse and counts the refused
ones arithmetically. Off: the timers run as the plain processes they stand for, and every stalled check is
simulated one by one (`checks.CheckTimer`, on the same rule: the checks' own round-trip stream, each step at
priority CHECKS + wid). Both must give the same `Run.digest()` (every record), the same request and Redis
command counters (each command's count too), the same final clock, and the same sequence of every other
queue entry (time, priority), on random scenarios with every kind of fault.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqsim import LeasePolicy, Network, Simulation, TimeoutPolicy, client, standard
from emqsim._simpy_fast import CHECKS
from emqsim.distributions import Fixed
from emqsim.faults import Crash, Freeze, MemoryPressure, Partition
from emqsim.presets import preset
from emqsim.scenario import STANDARD
from emqsim.server import TieBreak
from tests.test_invariants import leases, scenarios, timeouts


def _run(elide: bool, scenario, policy, seed, **options):
    """The run, its command counts, the (time, priority) of every queue entry SimPy processed that is
    not a stalled-check step (priority below CHECKS), and how many entries it processed in all."""
    saved = client._ELISION
    client._ELISION = elide
    try:
        sim = Simulation(scenario, policy, seed=seed, **options)
        env = sim.env
        queue, step, order, counted = env._queue, env.step, [], [0]

        def logged_step() -> None:
            if queue:
                counted[0] += 1
                when, priority = queue[0][:2]
                if priority < CHECKS:
                    order.append((when, priority))
            step()

        env.step = logged_step  # type: ignore[method-assign]
        run = sim.run()
        return run, dict(sim.server.store.command_counts), order, counted[0]
    finally:
        client._ELISION = saved


def assert_same(scenario, policy, seed, **options):
    """Both paths agree; returns the entries processed with and without the elision."""
    on, on_counts, on_order, on_steps = _run(True, scenario, policy, seed, **options)
    off, off_counts, off_order, off_steps = _run(False, scenario, policy, seed, **options)
    assert on.digest() == off.digest()
    assert on.requests == off.requests
    assert on.redis_commands == off.redis_commands
    assert on_counts == off_counts
    assert on.end == off.end
    # every other step at the same time and priority: the checks leave the rest of the run where it was
    assert on_order == off_order
    return on_steps, off_steps


@st.composite
def pressed_scenarios(draw):
    """`scenarios()` plus what can change the stalled-check key or a checker behind the coordinator's back:
    maxmemory evicting keys with a TTL (the key itself among them), a silent partition, a crash or a freeze
    of a worker at a moment that may be its next check's."""
    scenario = draw(scenarios())
    extra = []
    if draw(st.booleans()):
        extra.append(
            MemoryPressure(
                maxmemory=draw(st.sampled_from([20_000, 60_000])),
                policy=draw(st.sampled_from(["volatile-lru", "volatile-ttl", "allkeys-random"])),
                cache_rate=draw(st.sampled_from([0.0, 5.0])),
                cache_bytes=500,
                cache_ttl=30.0,
            )
        )
    if draw(st.booleans()):
        extra.append(
            Partition(
                at=draw(st.floats(0, 200)),
                duration=draw(st.floats(0.1, 60)),
                worker=draw(st.sampled_from([None, 0])),
                give_up=draw(st.sampled_from([5.0, 924.6])),
            )
        )
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.sampled_from([0.0, 5.0, 10.0, 15.0])) + draw(st.sampled_from([0.0, 0.001, 0.002]))
        worker = draw(st.integers(0, scenario.workers - 1))
        if draw(st.booleans()):
            extra.append(Crash(at=at, worker=worker, restart_after=draw(st.sampled_from([None, 0.0, 1.0]))))
        else:
            extra.append(Freeze(at=at, worker=worker, duration=draw(st.sampled_from([0.001, 1.0, 7.0]))))
    return scenario.with_(faults=scenario.faults + tuple(extra))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.one_of(leases, timeouts, st.just(preset("bullmq"))), st.integers(0, 2**16))
def test_elision_changes_no_record_on_random_scenarios(scenario, policy, seed):
    """Crashes and restarts, freezes, blocked loops, child crashes, outages, failovers, Redis restarts,
    lost requests (on renewals or on every request), random round trips."""
    assert_same(scenario, policy, seed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pressed_scenarios(), st.one_of(leases, st.just(preset("bullmq"))), st.integers(0, 2**16))
def test_coordinator_changes_no_record_under_memory_pressure_partitions_and_timed_faults(
    scenario, policy, seed
):
    """maxmemory evictions (of the stalled-check key too), partitions, crashes and freezes at the moments
    checks are due, on top of the random faults."""
    assert_same(scenario, policy, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), leases, st.integers(0, 2**16), st.sampled_from(["renewals", "all"]))
def test_elision_changes_no_record_with_fixed_round_trips_and_aligned_timers(scenario, policy, seed, loss_on):
    """Fixed round trips and aligned timers put many steps in the same millisecond: the order must hold."""
    network = Network(rtt=Fixed(0.002), loss=scenario.network.loss, loss_on=loss_on)
    assert_same(scenario.with_(network=network, phases="aligned"), policy, seed)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(loss=False), st.integers(0, 2**16), st.sampled_from([0.001, 0.002]))
def test_coordinator_orders_the_checks_of_one_millisecond(scenario, seed, rtt):
    """Round trips of 1 ms reach Redis in the millisecond they are sent (out leg 0): a check sent early in a
    millisecond sets the key before a later worker's check of that millisecond is decided; aligned timers
    put every worker's check in the same millisecond."""
    network = Network(rtt=Fixed(rtt))
    policy = LeasePolicy(15, 5, 1.0)
    assert_same(scenario.with_(network=network, phases="aligned"), policy, seed)


@pytest.mark.parametrize("name", sorted(STANDARD))
def test_elision_changes_no_record_on_the_standard_scenarios(name):
    knobs = {"jobs": 60, "workers": 4} if name == "production" else {}
    scenario = standard(name, **knobs)
    for policy in (LeasePolicy(30, 10, 5), TimeoutPolicy(30, 5), preset("bullmq")):
        assert_same(scenario, policy, 5)


def test_elision_changes_no_record_under_explore_options():
    """`explore`'s pinned timer phases and reordering tie-breaks."""
    scenario = standard("frozen")
    policy = LeasePolicy(30, 10, 5)
    phases = {("renew", 0): 1, ("sweep", 0): 0, ("sweep", 1): 1}
    for tie in (TieBreak(), TieBreak(arrivals="reversed", expiry="before", fault_last=True)):
        assert_same(scenario, policy, 3, timer_phases=phases, tie_break=tie)


def test_coordinator_simulates_only_the_checks_that_are_sent():
    """The point of it: with many workers nearly every check is refused, and is no event at all."""
    scenario = standard("production", jobs=200, workers=16)
    on_steps, off_steps = assert_same(scenario, LeasePolicy(30, 10, 5), 0)
    run = Simulation(scenario, LeasePolicy(30, 10, 5), seed=0).run()
    sent = len(run.sweeps)
    assert run.requests["sweep"] > 5 * sent
    # the checks one by one take two entries each (send, reading the reply); planned, the refused ones none
    assert off_steps - on_steps > run.requests["sweep"]


@pytest.mark.parametrize("elide", [True, False])
def test_the_checks_of_one_millisecond_go_in_worker_id_order_after_everything_else(elide):
    """The tie rule: aligned timers send every worker's first check at 0 ms; with 1 ms round trips worker 0's
    reaches Redis in that millisecond, before worker 1's check is decided, so worker 0 holds the rate limit and
    worker 1's check is refused without being sent. A freeze of worker 0 at 0 ms comes first, so worker 1 checks."""
    scenario = standard("frozen").with_(network=Network(rtt=Fixed(0.001)), phases="aligned", workers=2)
    saved = client._ELISION
    client._ELISION = elide
    try:
        run = Simulation(scenario, LeasePolicy(30, 10, 5), seed=0).run()
        frozen = scenario.with_(faults=(Freeze(at=0.0, worker=0, duration=1.0),))
        run_frozen = Simulation(frozen, LeasePolicy(30, 10, 5), seed=0).run()
    finally:
        client._ELISION = saved
    assert (run.sweeps[0].time, run.sweeps[0].by) == (0.0, "worker 0")
    assert (run_frozen.sweeps[0].time, run_frozen.sweeps[0].by) == (0.0, "worker 1")


def test_a_renewal_whose_reply_a_drop_caught_runs_twice_either_way():
    """`Network(resend_twice)`: a lock-manager renewal whose reply a drop catches on its way back (sent at
    0.360 s, the drop at its last ms in flight) runs again when ioredis resends it, with the callback lock
    manager as with the step-by-step one (the callback one used not to resend it)."""
    from emqsim import Scenario
    from emqsim.faults import Outage

    for worker_rtt, drop_at in ((0.002, 0.362), (0.004, 0.363), (0.004, 0.364)):
        scenario = Scenario(
            workers=1,
            jobs=1,
            duration=Fixed(3.0),
            faults=(Outage(at=drop_at, duration=0.3, worker=0),),
            network=Network(rtt=Fixed(worker_rtt), resend_twice=True),
            horizon=20.0,
        )
        policy = LeasePolicy(lease=2.0, beat=0.5, scan=1.0)
        assert_same(scenario, policy, 0)
        on = _run(True, scenario, policy, 0)[0]
        once = _run(True, scenario.with_(network=Network(rtt=Fixed(worker_rtt))), policy, 0)[0]
        assert on.requests["renew"] == once.requests["renew"] + 1, "the caught renewal ran twice"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenarios(loss=False),
    st.one_of(leases, st.just(preset("bullmq"))),
    st.integers(0, 2**16),
    st.booleans(),
    st.sampled_from([None, 0, 1]),
    st.sampled_from([0.0, 0.2]),
)
def test_elision_changes_no_record_with_resends_rejections_and_skipped_ticks(
    scenario, policy, seed, resend, max_retries, skipped
):
    """The network options whose requests take other paths: resent commands, ioredis's rejections at its
    queue flushes, skipped renewal ticks, on top of the random faults (outages among them)."""
    network = Network(
        rtt=scenario.network.rtt,
        resend_twice=resend,
        max_retries_per_request=max_retries,
        skipped_ticks=skipped,
    )
    assert_same(scenario.with_(network=network), policy, seed)
