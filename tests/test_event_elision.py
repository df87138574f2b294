"""The engine's event elision (issue 27) changes no result: every run with it equals the run without it.

`emqsim.client._ELISION` is the private switch: on, the stalled-check timers (and the lock managers) run as
callbacks on light queue entries (`emqsim._simpy_fast.Tick`) instead of SimPy processes; off, they run as the
plain processes they stand for. Both must give the same `Run.digest()` (every record), the same request and
Redis command counters, and the same final clock, on random scenarios with every kind of fault.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqsim import LeasePolicy, Network, Simulation, TimeoutPolicy, client, standard
from emqsim.distributions import Fixed
from emqsim.presets import preset
from emqsim.scenario import STANDARD
from emqsim.server import TieBreak
from tests.test_invariants import leases, scenarios, timeouts


def _run(elide: bool, scenario, policy, seed, **options):
    """The run and the (time, priority, id) of every queue entry SimPy processed, in order."""
    saved = client._ELISION
    client._ELISION = elide
    try:
        sim = Simulation(scenario, policy, seed=seed, **options)
        env = sim.env
        queue, step, order = env._queue, env.step, []

        def logged_step() -> None:
            if queue:
                order.append(queue[0][:3])
            step()

        env.step = logged_step  # type: ignore[method-assign]
        return sim.run(), order
    finally:
        client._ELISION = saved


def assert_same(scenario, policy, seed, **options):
    on, on_order = _run(True, scenario, policy, seed, **options)
    off, off_order = _run(False, scenario, policy, seed, **options)
    assert on.digest() == off.digest()
    assert on.requests == off.requests
    assert on.redis_commands == off.redis_commands
    assert on.end == off.end
    # every step at the same time, priority and id: the elided timers stand exactly where the processes were
    assert on_order == off_order


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.one_of(leases, timeouts, st.just(preset("bullmq"))), st.integers(0, 2**16))
def test_elision_changes_no_record_on_random_scenarios(scenario, policy, seed):
    """Crashes and restarts, freezes, blocked loops, child crashes, outages, failovers, Redis restarts,
    lost requests (on renewals or on every request), random round trips."""
    assert_same(scenario, policy, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), leases, st.integers(0, 2**16), st.sampled_from(["renewals", "all"]))
def test_elision_changes_no_record_with_fixed_round_trips_and_aligned_timers(scenario, policy, seed, loss_on):
    """Fixed round trips and aligned timers put many steps in the same millisecond: the order must hold."""
    network = Network(rtt=Fixed(0.002), loss=scenario.network.loss, loss_on=loss_on)
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
