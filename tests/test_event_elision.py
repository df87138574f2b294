"""The engine's event elision (issue 27) changes no result: every run with it equals the run without it.

`emqsim.client._ELISION` is the private switch. On: the lock managers and the reaper's timer run as callbacks
on light queue entries (`emqsim._simpy_fast.Tick`), the workers' stalled checks are planned ahead by one
`checks.SweepCoordinator` that sends only the checks the rate limit does not refuse and counts the refused
ones arithmetically, and the timeout reaper's reaps that can only read are counted, not run
(`Server.idle_reap`). Off: the timers run as the plain processes they stand for, and every stalled check is
simulated one by one (`checks.CheckTimer`, on the same rule: the checks' own round-trip stream, each step at
priority CHECKS + wid). Both must give the same `Run.digest()` (every record), the same request and Redis
command counters (each command's count too), the same final clock, and the same sequence of every other
queue entry (time, priority; under a `TimeoutPolicy`, whose runs schedule the same entries either way, the
id too), on random scenarios with every kind of fault.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqsim import LeasePolicy, Network, Simulation, TimeoutPolicy, client, standard
from emqsim._simpy_fast import CHECKS
from emqsim.distributions import Fixed
from emqsim.faults import Crash, Freeze, MemoryPressure, Outage, Partition
from emqsim.presets import preset
from emqsim.scenario import STANDARD
from emqsim.server import TieBreak
from tests.test_invariants import leases, scenarios, timeouts


def _run(elide: bool, scenario, policy, seed, **options):
    """The run, its command counts, the (time, priority) of every queue entry SimPy processed that is
    not a stalled-check step (priority below CHECKS), and how many entries it processed in all. Under a
    `TimeoutPolicy` (no coordinator: both paths schedule the same entries) each entry's id too."""
    width = 3 if isinstance(policy, TimeoutPolicy) else 2
    saved = client._ELISION
    client._ELISION = elide
    try:
        sim = Simulation(scenario, policy, seed=seed, **options)
        env = sim.env
        queue, step, order, counted = env._queue, env.step, [], [0]

        def logged_step() -> None:
            if queue:
                counted[0] += 1
                entry = queue[0][:width]
                if entry[1] < CHECKS:
                    order.append(entry)
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
    # every other step at the same time and priority: the checks leave the rest of the run where it was;
    # under a TimeoutPolicy every entry with the same id as well (the reaper's included)
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


# -- the timeout reaper's reaps that can only read (`client._ReapTimer`, `Server.idle_reap`) ----------------

reaper_timeouts = st.builds(
    lambda t, scan, fenced, max_stalled, by: TimeoutPolicy(
        t, scan, fenced=fenced, max_stalled=max_stalled, swept_by=by
    ),
    # timeouts close to the jobs' durations (Uniform(1, 20 or 200) s) reclaim live jobs now and then
    st.sampled_from([1.0, 2.0, 5.0, 10.0, 30.0, 300.0]),
    st.sampled_from([0.5, 1.0, 5.0, 20.0]),
    st.booleans(),
    st.sampled_from([None, 0, 1]),
    st.sampled_from(["reaper", "reaper", "workers"]),
)


@st.composite
def reaped_scenarios(draw):
    """`pressed_scenarios()` (maxmemory, partitions, timed crashes and freezes on top of the random faults:
    crashes, restarts, freezes, blocked loops, outages, failovers, Redis restarts) plus what a reap may read
    or meet: READONLY windows, remove_on_complete, 1 or 2 ms round trips with aligned timers."""
    scenario = draw(pressed_scenarios())
    extra = []
    if draw(st.booleans()):  # a failover to a lagging replica, its demoted primary READONLY for a while
        extra.append(
            Outage(
                at=draw(st.floats(0, 120)),
                duration=draw(st.floats(0.1, 30)),
                lost_writes=draw(st.sampled_from([0.5, 2.0])),
                readonly=draw(st.sampled_from([0.0, 2.0, 10.0])),
            )
        )
    knobs: dict = {"remove_on_complete": draw(st.booleans())}
    if draw(st.booleans()):
        knobs["network"] = Network(
            rtt=Fixed(draw(st.sampled_from([0.001, 0.002]))), loss=scenario.network.loss
        )
        knobs["phases"] = draw(st.sampled_from(["aligned", scenario.phases]))
    return scenario.with_(faults=scenario.faults + tuple(extra), **knobs)


def assert_same_streaming(scenario, policy, seed):
    """`assert_same` for a streaming run: the same jobs handed to the sink, in the same order, too."""
    sinks: list[list] = [[], []]
    for i, elide in enumerate((True, False)):
        saved = client._ELISION
        client._ELISION = elide
        try:
            sim = Simulation(scenario, policy, seed=seed, job_sink=lambda *job, out=sinks[i]: out.append(job))
            run = sim.run()
            sinks[i].append((run.digest(), run.requests, dict(sim.server.store.command_counts), run.end))
        finally:
            client._ELISION = saved
    assert sinks[0] == sinks[1]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reaped_scenarios(), reaper_timeouts, st.integers(0, 2**16), st.booleans())
def test_idle_reaps_change_no_record(scenario, policy, seed, streaming):
    """Timeouts close to the jobs' durations and far from them, scan intervals, fenced, max_stalled, swept by
    the reaper or by the workers, every fault above, maxmemory, READONLY windows, remove_on_complete, fixed
    round trips and aligned timers, keeping records or streaming: the reaps counted without being run give
    what running every one gives."""
    if streaming:
        assert_same_streaming(scenario, policy, seed)
    else:
        assert_same(scenario, policy, seed)


def _count_idle(monkeypatch) -> list[int]:
    """[reaps counted without running, reaps run] over the runs that follow (the elision's own count)."""
    from emqsim.server import Server

    counts = [0, 0]
    idle_reap = Server.idle_reap

    def counted(self, by, now, timeout_ms):
        done = idle_reap(self, by, now, timeout_ms)
        counts[0 if done else 1] += 1
        return done

    monkeypatch.setattr(Server, "idle_reap", counted)
    return counts


def test_the_reaps_that_reclaim_run_and_the_others_are_counted(monkeypatch):
    """The point of it: a reap is run exactly when it reclaims a job (no READONLY or lag window here), every
    other one is counted; with a long timeout that is nearly all of them (the crashed workers' jobs are the
    ones reclaimed), with a timeout near the jobs' durations more reaps run."""
    counts = _count_idle(monkeypatch)
    scenario = standard("production", jobs=60, workers=4)
    for policy, least_run in ((TimeoutPolicy(600, 5), 1), (TimeoutPolicy(2, 1), 100)):
        assert_same(scenario, policy, 1)
        counts[:] = [0, 0]
        run = Simulation(scenario, policy, seed=1).run()
        reclaiming = sum(1 for sweep in run.sweeps if sweep.reclaimed or sweep.failed)
        assert reclaiming > 0 and counts[1] == reclaiming
        assert counts[0] + counts[1] == len(run.sweeps) == run.requests["sweep"]
        assert counts[0] > 20 * counts[1] and counts[1] >= least_run


def test_reaps_are_run_where_their_reads_are_not_pure(monkeypatch):
    """maxmemory (reads touch LRU data) and explore's reordering tie-breaks: no reap is counted; a failover's
    lag window and READONLY windows: the reaps in them are run, the others counted."""
    counts = _count_idle(monkeypatch)
    base = standard("production", jobs=40, workers=3)
    policy = TimeoutPolicy(300, 1)
    pressed = base.with_(faults=(MemoryPressure(maxmemory=60_000, policy="allkeys-lru"),))
    assert_same(pressed, policy, 2)
    assert_same(base, policy, 2, tie_break=TieBreak(arrivals="reversed"))
    assert counts == [0, 0]
    windows = base.with_(
        faults=(
            Outage(at=10.0, duration=3.0, lost_writes=1.0),
            Outage(at=30.0, duration=2.0, lost_writes=0.5, readonly=5.0),
        )
    )
    assert_same(windows, policy, 2)
    assert counts[0] > 0 and counts[1] > 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.sampled_from(["add", "take", "finish"])), max_size=30),
    st.integers(0, 60),
    st.integers(0, 30),
    st.booleans(),
)
def test_queue_idle_reap_answers_what_reap_does(steps, now, timeout, lazy_lock):
    """`Queue.idle_reap` against `Queue.reap` on the same store: when it answers a count, the reap reclaims
    nothing and runs exactly one LRANGE and that many HGETs; when the reap reclaims, it answers None."""
    from emqsim.keys import QueueKeys
    from emqsim.protocol import Queue
    from emqsim.store import KeyStore

    clock = [0]
    queue = Queue(KeyStore(lambda: clock[0]), QueueKeys("q"))
    added, taken = 0, []
    for at, kind in sorted(steps):
        clock[0] = at
        if kind == "add":
            queue.add(str(added))
            added += 1
        elif kind == "take":
            job = queue.take(f"t{len(taken)}", at, 1000 if lazy_lock else None)
            if job is not None:
                taken.append((job, f"t{len(taken)}"))
        elif taken:
            job, token = taken.pop(0)
            queue.finish(job, token, check_token=False)
    clock[0] = max(now, clock[0])
    answer = queue.idle_reap(clock[0], timeout)
    store = queue.store
    before = dict(store.command_counts)
    reply = queue.reap(clock[0], timeout)
    ran = {
        name: n - before.get(name, 0) for name, n in store.command_counts.items() if n != before.get(name, 0)
    }
    if answer is not None:
        assert not reply.reclaimed and not reply.failed
        assert ran == ({"LRANGE": 1, "HGET": answer} if answer else {"LRANGE": 1})
    else:
        assert reply.reclaimed or reply.failed  # (no key the reap reads has a TTL here)
