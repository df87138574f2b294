"""`emqsim explore`: every timing of a fault, checked against brute force, the closed forms and sampling."""

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqsim import Crash, Fixed, LeasePolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
from emqsim.analytic import (
    block_lapses,
    freeze_lapses,
    lease_detection,
    outage_lapses,
    reconnect_time,
)
from emqsim.cli import main
from emqsim.errors import ConfigError
from emqsim.explore import (
    FAULT_KINDS,
    NO_DUPLICATE_COMPLETION,
    FaultSpec,
    Property,
    _metric_ms,
    counterexample_run,
    estimate_runs,
    explore,
    format_exploration,
    space,
)
from emqsim.server import TieBreak
from emqsim.stats import mean_ci

# -- the engine's two options change nothing unless used ---------------------------------------------------------


def test_default_options_give_bit_identical_runs():
    for name in ("fast-dead", "frozen", "production"):
        sc = standard(name)
        for policy in (LeasePolicy(30, 10, 5), TimeoutPolicy(60, 5)):
            plain = simulate(sc, policy, 3).digest()
            assert simulate(sc, policy, 3, timer_phases={}, tie_break=TieBreak()).digest() == plain


def test_timer_phases_pin_the_first_ticks():
    sc = Scenario(workers=2, jobs=1, duration=Fixed(30))
    policy = LeasePolicy(30, 10, 5, swept_by="reaper")
    run = simulate(sc, policy, 0, timer_phases={("renew", 0): 1234, ("sweep", -1): 777})
    renewed = [e.time for e in run.lock_events if e.kind == "renewed"]
    assert renewed[:2] == [1.235, 11.235]  # sent at the tick, set half a round trip later
    assert run.sweeps[0].time == pytest.approx(0.778)


# -- the search against brute force ----------------------------------------------------------------------------


def brute_force(sp):
    """Every point run, one by one: counts per property and the latency multiset."""
    held = dict.fromkeys((p.name for p in sp.properties), 0)
    latencies = []
    for point in np.ndindex(*(d.size for d in sp.dims)):
        coords = tuple(d.lo + i for d, i in zip(sp.dims, point, strict=True))
        run = sp.run(coords)
        for p in sp.properties:
            held[p.name] += bool(p.check(run))
        metric = _metric_ms(run, sp.fault_time_ms(coords))
        if metric is not None:
            latencies.append(metric)
    return held, sorted(latencies)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scan=st.integers(6, 12),
    swept_by=st.sampled_from(["reaper", "workers"]),
    two_phase=st.booleans(),
    kind=st.sampled_from(["crash", "freeze"]),
    step=st.integers(2, 5),
)
def test_explore_equals_brute_force_on_small_spaces(scan, swept_by, two_phase, kind, step):
    # ms-scale worlds (lease 30 ms, beat 10 ms) small enough to run every point; the search samples every
    # `step` ms and must still find every piece. The job lasts 0.1 s (the default would be 1 s past the
    # latest offset): the search must equal brute force whatever the job's length, and a 0.1 s job still
    # outlasts every fault (offsets within one 10 ms renewal period, freezes of at most 26 ms).
    policy = LeasePolicy(0.03, 0.01, scan / 1000, swept_by=swept_by, two_phase=two_phase)
    fault = FaultSpec(kind, params={"length": (17, 26)} if kind == "freeze" else {})
    sp = space(
        policy,
        [fault],
        bound=0.05,
        step=step,
        sweep_phases=swept_by == "reaper" or kind == "crash",
        duration=0.1,
    )
    result = explore(sp, ties=False)
    held, latencies = brute_force(sp)
    assert result.points == sp.points
    assert result.counts == held
    explored = np.repeat(result.latency_values, result.latency_weights).tolist()
    assert explored == latencies


def test_parallel_equals_serial():
    """A search is cut in the same parts however many processes share them: one process, a pool of ours (its
    progress told run by run through a shared counter) and an executor give the same exploration, its runs,
    tie findings and counterexamples included. Which searches are cut reads the space alone."""
    from concurrent.futures import ThreadPoolExecutor

    from emqsim.explore import as_json
    from emqsim.explore.running import MIN_PART, PARTS, SPLIT_RUNS, _parts

    # a 0.3 s job (the default: 1 s past the latest offset): the split must not change the result whatever
    # the job's length, and the crash (at most 0.2 s in) still comes before its end
    sp = space(LeasePolicy(0.3, 0.1, 0.05, swept_by="reaper"), [FaultSpec("crash")], duration=0.3)
    told: dict[int, list[int]] = {1: [], 2: []}
    one = explore(sp, jobs=1, progress=told[1].append, parts=PARTS)
    two = explore(sp, jobs=2, progress=told[2].append, parts=PARTS)
    with ThreadPoolExecutor(3) as executor:
        three = explore(sp, executor=executor, parts=PARTS)
    assert as_json(one) == as_json(two) == as_json(three)
    assert one.runs == two.runs == sum(told[1]) == sum(told[2])
    assert set(told[1]) == {1} and len(told[1]) == one.runs  # one process: run by run
    # each part finds its own edges; by default this small search is not cut
    assert one.runs > explore(sp).runs
    assert _parts(sp, True) == 1 and sp.dims[0].size > PARTS
    # the default world is big (cut in PARTS); a restart world whose offset spans 21 ms is not, however big its
    # estimate: each part would search its few lines again (docs/explore.md: 4 times the runs)
    default = space(LeasePolicy(30, 10, 5), [FaultSpec("crash")])
    assert _parts(default, True) == _parts(default, False) == PARTS
    assert estimate_runs(default, ties=False) >= SPLIT_RUNS and default.dims[0].size >= PARTS * MIN_PART
    narrow = space(
        LeasePolicy(20, 5, 1, swept_by="reaper"),
        [FaultSpec("restart", offset=(6990, 7010), params={"length": (9000, 12000)})],
    )
    assert estimate_runs(narrow) >= SPLIT_RUNS and _parts(narrow, True) == 1
    with pytest.raises(ConfigError, match="parts must be >= 1"):
        explore(sp, parts=0)


# -- against the closed forms (docs/theory.md) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lease", "beat", "scan", "two_phase"),
    [(30, 10, 5, True), (0.3, 0.1, 0.05, False), (0.3, 0.1, 0.4, True), (0.3, 0.1, 0.4, False)],
)
def test_reaper_detection_is_the_closed_form_to_the_millisecond(lease, beat, scan, two_phase):
    policy = LeasePolicy(lease, beat, scan, swept_by="reaper", two_phase=two_phase)
    # the 0.3 s leases with a 0.3 s job, not the default 1.2 s: the crash (at most 0.2 s in) still comes first,
    # and the re-run's length changes no latency (measured: the same Exploration; 19.2 -> 14.3 CPU s for three)
    duration = 0.3 if lease < 1 else None
    result = explore(space(policy, [FaultSpec("crash")], duration=duration))
    theory = lease_detection(lease, beat, scan, swept_by="reaper", two_phase=two_phase)
    assert result.never_reclaimed == 0
    # exact, not statistical. With a two-phase sweep slower than the lease, the sweep that marks the job may
    # reach Redis in the same ms as the last renewal; the engine's fixed order (the renewal was sent first)
    # lets it count as marking after the renewal, so the first sweep after the renewal is 0..P-1 ms later,
    # not 1..P as docs/theory.md section 2 counts it: the exact mean is 1 ms below the closed form.
    tie_shift = 1 if two_phase and scan + 0.002 > lease else 0
    assert result.latency_mean == pytest.approx(theory.mean * 1000 - tie_shift, abs=1e-6)
    # the bounds include the same-millisecond orders the model leaves open (a crash on a tick)
    assert result.latency_min_any_order() == round(theory.lo * 1000)
    assert result.latency_max_any_order() == round(theory.hi * 1000)


def test_workers_sweeping_detection_against_the_closed_form():
    # Where the closed form's mean is exact (a hand-over of the sweep is over before it can matter), the
    # explored mean equals it and the extremes are the reaper's; the closed form's hi, which allows one
    # hand-over, is an upper bound that these settings never reach. (The 0.3 / 0.1 / 0.05 s of the reaper tests
    # scaled by 1/5: the same shape, every timing at 1 ms resolution, a twentieth of the runs.) The job lasts
    # 0.1 s instead of the default 1.04 s: the crash (19..38 ms in) and its detection (< 0.1 s later) come
    # before the surviving worker's re-run, whose length changes no latency, verdict or order; it is only
    # simulated (measured: the same Exploration, histogram, tie extremes and runs; 78 -> 22 CPU s).
    lease, beat, scan = 0.06, 0.02, 0.01
    policy = LeasePolicy(lease, beat, scan, swept_by="workers")
    sp = space(policy, [FaultSpec("crash")], duration=0.1)
    assert [d.role for d in sp.dims] == ["fault0.offset", "sweep.0", "sweep.1"]
    result = explore(sp)
    theory = lease_detection(lease, beat, scan, swept_by="workers")
    reaper = lease_detection(lease, beat, scan, swept_by="reaper")
    assert theory.mean_exact
    assert result.latency_mean == pytest.approx(theory.mean * 1000, abs=1e-6)
    assert result.latency_min_any_order() == round(theory.lo * 1000)
    assert result.latency_max_any_order() == round(reaper.hi * 1000) <= round(theory.hi * 1000)


def test_workers_sweeping_stays_within_the_bounds_when_the_sweeper_hands_over():
    # scan > lease: a crashed sweeper's hand-over delays detection. (0.3 / 0.1 / 0.4 s on a 50 ms grid scaled
    # by 1/5, as above: the same shape and grid, every boundary refined to 1 ms; a quarter of the run time.)
    # A 0.1 s job, as above (measured: the same Exploration as with the default 1.04 s; 41 -> 18 CPU s).
    lease, beat, scan = 0.06, 0.02, 0.08
    for two_phase in (True, False):
        policy = LeasePolicy(lease, beat, scan, swept_by="workers", two_phase=two_phase)
        result = explore(space(policy, [FaultSpec("crash")], step=10, duration=0.1), ties=False)
        theory = lease_detection(lease, beat, scan, swept_by="workers", two_phase=two_phase)
        assert theory.lo * 1000 - 1e-6 <= result.latency_min <= result.latency_max <= theory.hi * 1000 + 1e-6
        assert result.latency_mean >= theory.mean * 1000 - 1e-6  # the closed-form mean is a lower bound here


def test_explored_mean_agrees_with_a_big_sampled_run():
    lease, beat, scan = 0.3, 0.1, 0.05
    policy = LeasePolicy(lease, beat, scan, swept_by="reaper", max_stalled=0)
    # a 0.3 s job, as in the test above (the same Exploration as the default 1.2 s job's)
    sp = space(LeasePolicy(lease, beat, scan, swept_by="reaper"), [FaultSpec("crash")], duration=0.3)
    result = explore(sp)
    sampled = []
    for seed in range(5):  # 1000 crashes at random phases, as tests/test_theory_vs_sim.py samples them
        faults = tuple(Crash(job=i, after=Uniform(0.15, 0.95)) for i in range(200))
        sc = Scenario(workers=200, jobs=200, duration=Fixed(2.0), faults=faults)
        run = simulate(sc, policy, seed=seed, record_locks=False)
        sampled += [a.detection_latency * 1000 for a in run.attempts if a.died_at is not None]
    mean, lo, hi = mean_ci(sampled, 0.998)
    assert lo <= result.latency_mean <= hi
    assert result.latency_min <= min(sampled) and max(sampled) <= result.latency_max_any_order()


def _first_failing_length(lease, beat, scan, offset):
    policy = LeasePolicy(lease, beat, scan, swept_by="reaper")
    fault = FaultSpec("freeze", offset=(offset, offset), params={"length": (1, round(lease * 1000) + 50)})
    result = explore(space(policy, [fault], sweep_phases=False), ties=False)
    (boundary,) = [b for b in result.boundaries if b.property == "live_never_reclaimed"]
    assert boundary.first == boundary.last
    return boundary.first


@pytest.mark.parametrize("since_send", [3, 4, 50, 99, 100])
def test_freeze_boundary_is_the_closed_form(since_send):
    # renewals are sent at 100, 200, ... ms; the job starts at 2 ms; a freeze `u` ms after a send lapses the
    # lock (and the job is reclaimed from the live worker) iff u + F > L
    lease, beat = 0.3, 0.1
    first = _first_failing_length(lease, beat, 0.05, 100 + since_send - 2)
    assert first == 300 - since_send + 1
    assert freeze_lapses(lease, since_send / 1000, first / 1000)
    assert not freeze_lapses(lease, since_send / 1000, (first - 1) / 1000)


def test_freeze_boundary_while_a_renewal_is_on_the_wire():
    # the freeze starts 1 ms after a renewal was sent (its reply comes back during the freeze) and ends
    # exactly on the next tick: that tick fires at once, as after any freeze, so the closed form holds
    assert _first_failing_length(0.3, 0.1, 0.05, 100 + 1 - 2) == 300


def test_unfenced_timeout_duplicate_completion_is_found():
    policy = TimeoutPolicy(0.6, 0.05)
    fault = FaultSpec("freeze", offset=(100, 100), params={"length": (1, 900)})
    sp = space(policy, [fault], duration=0.3)  # a job well within the timeout, unless frozen
    # ties=False: the other same-millisecond orders add only `tie_dependent` findings, never a count or a
    # counterexample (measured here: the same counts and smallest counterexample, 7,261 runs instead of
    # 13,823); what they find in this world is test_same_millisecond_orders_that_change_a_property_are_reported's
    result = explore(sp, ties=False)
    assert "no_duplicate_completion" in result.violated()
    (ce,) = [c for c in result.counterexamples if c.property == "no_duplicate_completion"]
    run = counterexample_run(result, "no_duplicate_completion")
    assert any(a.outcome == "duplicate_completion" for a in run.attempts)
    # smallest: one ms shorter, at the same phase, completes once
    shorter = dict(zip([d.role for d in sp.dims], ce.coords, strict=True))
    shorter["fault0.length"] -= 1
    rerun = sp.run(tuple(shorter[d.role] for d in sp.dims))
    assert NO_DUPLICATE_COMPLETION.check(rerun)
    assert "no_duplicate_completion" in format_exploration(result)


def test_lease_never_completes_a_job_twice_over_the_whole_space():
    # every freeze offset within a renewal cycle x every length up to 700 ms (70,000 points); the sweep's
    # phase is pinned (fencing does not depend on it, and the third coordinate costs minutes)
    policy = LeasePolicy(0.3, 0.1, 0.05, swept_by="reaper")
    sp = space(policy, [FaultSpec("freeze", params={"length": (1, 700)})], step=50, sweep_phases=False)
    result = explore(sp, ties=False)
    assert result.counts["no_duplicate_completion"] == result.points == sp.points
    assert "live_never_reclaimed" in result.violated()  # long freezes are reclaimed, but fenced


def test_a_pair_of_faults_and_the_crashed_sweepers_hand_over():
    policy = LeasePolicy(0.3, 0.1, 0.4, swept_by="workers")
    pair = [FaultSpec("crash"), FaultSpec("crash", target="other", offset=(500, 520))]
    sp = space(policy, pair, workers=3, sweep_phases=False, bound=2.0)
    result = explore(sp, ties=False)
    assert [d.role for d in sp.dims] == ["fault0.offset", "fault1.offset"]
    assert result.points == sp.points and result.never_reclaimed == 0


def test_same_millisecond_orders_that_change_a_property_are_reported():
    # a timeout sweep and the frozen worker's finish in the same millisecond: which runs first decides
    # whether the job is completed once or twice
    # (a 0.3 s job frozen 100 ms in for about 0.3 s finishes when its age passes the 0.6 s timeout: where the
    # reaper's sweep phase is length - 270 ms, the sweep and the finish reach Redis in the same millisecond)
    sp = space(
        TimeoutPolicy(0.6, 0.05),
        [FaultSpec("freeze", offset=(100, 100), params={"length": (280, 320)})],
        duration=0.3,
    )
    result = explore(sp)
    found = [
        t
        for t in result.tie_dependent
        if "no_duplicate_completion" in t.properties and "reversed" in t.tie_break
    ]
    assert found
    point = tuple(found[0].point[d.role] for d in sp.dims)
    as_run = NO_DUPLICATE_COMPLETION.check(sp.run(point))
    assert NO_DUPLICATE_COMPLETION.check(sp.run(point, TieBreak(arrivals="reversed"))) != as_run


def test_a_users_property_is_checked_everywhere():
    def at_most_two_attempts(run):
        return len(run.attempts) <= 1

    prop = Property("one_attempt", at_most_two_attempts)
    sp = space(LeasePolicy(0.3, 0.1, 0.05, swept_by="reaper"), [FaultSpec("crash")], properties=[prop])
    result = explore(sp, ties=False)
    assert result.counts == {"one_attempt": 0}
    assert result.counterexamples[0].property == "one_attempt"


def test_fault_registry_has_one_entry_per_kind():
    assert {"crash", "freeze"} <= set(FAULT_KINDS)
    from emqsim import faults

    for name, cls in (("block", "Block"), ("outage", "Outage")):
        assert (name in FAULT_KINDS) == hasattr(faults, cls)


def test_estimate_is_an_upper_estimate():
    sp = space(LeasePolicy(0.3, 0.1, 0.05, swept_by="reaper"), [FaultSpec("crash")])
    assert explore(sp, ties=False).runs <= estimate_runs(sp, ties=False)


# -- the command line ------------------------------------------------------------------------------------------


def test_cli_explore_prints_the_report_and_draws_counterexamples(capsys, tmp_path):
    out_file = tmp_path / "ce.png"
    code = main(
        ["explore", "--policy", "timeout", "--timeout", "0.6", "--scan", "0.05",
         "--fault", "freeze,length=0.5:0.7,offset=0.1", "--plot", str(out_file)]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    assert "no_duplicate_completion      FAILS" in out
    assert "smallest counterexample of no_duplicate_completion" in out
    assert "finish by worker 0: accepted" in out  # the text timeline
    assert (tmp_path / "ce-no_duplicate_completion.png").stat().st_size > 1000


def test_cli_explore_json(capsys):
    code = main(
        ["explore", "--lease", "0.3", "--beat", "0.1", "--scan", "0.05", "--swept-by", "reaper", "--json"]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    theory = lease_detection(0.3, 0.1, 0.05, swept_by="reaper")
    assert data["points"] == 100 * 52 and data["latency"]["mean"] == pytest.approx(theory.mean)
    assert sum(w for _, w in data["latency"]["histogram_ms"]) == data["points"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--fault", "meteor"], "unknown fault 'meteor'"),
        (["--fault", "freeze"], "needs length"),
        (["--fault", "crash,length=3"], "takes offset, target"),
        (["--fault", "freeze,length=x"], "not a number"),
        (["--lease", "-3"], "--lease"),
        (["--fault", "crash", "--fault", "crash", "--fault", "crash"], "one fault or a pair"),
        (["--fault", "freeze,length=1:60", "--max-runs", "10"], "over --max-runs 10"),
        (["--fault", "restart,length=1:2,target=other"], "hits every worker at once"),
        (["--fault", "restart,length=1:2,size=3"], "takes length, offset; not 'size'"),
    ],
)
def test_cli_explore_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    try:
        code = main(["explore", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_math_of_the_default_window():
    sp = space(LeasePolicy(30, 10, 5), [FaultSpec("crash")])
    offsets = next(d for d in sp.dims if d.role == "fault0.offset")
    assert offsets.size == 10_000 and offsets.lo + 2 == 10_001  # u = 1 .. 10 000 ms after the send
    assert math.prod(d.size for d in sp.dims) == sp.points


# -- the fault kinds issue 14 added: a blocked event loop and a connection outage --------------------------------


def _first_failing(kind, lease, beat, scan, offset, longest):
    policy = LeasePolicy(lease, beat, scan, swept_by="reaper")
    fault = FaultSpec(kind, offset=(offset, offset), params={"length": (1, longest)})
    result = explore(space(policy, [fault], sweep_phases=False), ties=False)
    (boundary,) = [b for b in result.boundaries if b.property == "live_never_reclaimed"]
    assert boundary.first == boundary.last
    return boundary.first


@pytest.mark.parametrize("since_send", [3, 50, 99])
def test_block_boundary_is_the_closed_form(since_send):
    # a blocked loop is a freeze for the lease (no renewal leaves) while the work goes on: same boundary
    first = _first_failing("block", 0.3, 0.1, 0.05, 100 + since_send - 2, 350)
    assert first == 300 - since_send + 1
    assert block_lapses(0.3, since_send / 1000, first / 1000)
    assert not block_lapses(0.3, since_send / 1000, (first - 1) / 1000)


def test_outage_boundary_follows_the_reconnect_backoff():
    # renewals every 5 s from 5 s; an outage 2 s after a send: the lock lapses iff 2 + R(D) > 20, and R jumps
    # from 10.076 to 18.179 s just past a 10.076 s outage (BullMQ's reconnect backoff), so the shortest outage
    # that lapses it is 10.077 s, though it covers only two beats
    since_send = 2000
    first = _first_failing("outage", 20.0, 5.0, 1.0, 5000 + since_send - 2, 25_000)
    assert first == 10_077
    assert outage_lapses(20.0, since_send / 1000, first / 1000)
    assert not outage_lapses(20.0, since_send / 1000, (first - 1) / 1000)


def test_cli_explore_draws_a_counterexample_as_an_interactive_timeline(capsys, tmp_path):
    from emqsim.timeline_html import timeline_html

    out_file = tmp_path / "ce.html"
    code = main(
        ["explore", "--policy", "timeout", "--timeout", "0.6", "--scan", "0.05", "--no-ties",
         "--fault", "freeze,length=0.5:0.7,offset=0.1", "--plot", str(out_file)]
    )  # fmt: skip
    capsys.readouterr()
    assert code == 0
    page = (tmp_path / "ce-no_duplicate_completion.html").read_text(encoding="utf-8")
    assert (
        page.lstrip().lower().startswith("<!doctype html") and 'src="http' not in page  # self-contained
    )
    result = explore(
        space(
            TimeoutPolicy(0.6, 0.05), [FaultSpec("freeze", offset=(100, 100), params={"length": (500, 700)})]
        ),
        ties=False,
    )
    (ce,) = [c for c in result.counterexamples if c.property == "no_duplicate_completion"]
    assert page == timeline_html(counterexample_run(result, "no_duplicate_completion"))


def test_a_redis_restart_lapses_a_lease_where_an_outage_of_its_worker_does():
    # Redis keeps its clock while down (expiries are absolute) and every client reconnects on BullMQ's
    # backoff: the lock lapses iff the renewal resent at the reconnect reaches Redis after the expiry, the
    # outage's rule, though the restart also cuts off the reaper and the other worker
    since_send = 2000
    first = _first_failing("restart", 20.0, 5.0, 1.0, 5000 + since_send - 2, 25_000)
    assert first == _first_failing("outage", 20.0, 5.0, 1.0, 5000 + since_send - 2, 25_000) == 10_077
    assert outage_lapses(20.0, since_send / 1000, first / 1000)


def test_a_redis_restart_delays_a_crashed_workers_detection_by_the_reaper():
    # crashes 1..100 ms into the job, then Redis restarts at 150 ms for 0.4 s: the reaper is cut off too and
    # reconnects on BullMQ's backoff (at least 1 s), so no crash is found before it is back
    policy = LeasePolicy(0.3, 0.1, 0.05, swept_by="reaper")
    crash = FaultSpec("crash", offset=(1, 100))
    alone = explore(space(policy, [crash], sweep_phases=False), ties=False)
    restart = FaultSpec("restart", offset=(150, 150), params={"length": (400, 400)})
    both = explore(space(policy, [crash, restart], sweep_phases=False), ties=False)
    assert alone.reclaimed == both.reclaimed == 100
    back_ms = 150 + 1000 * reconnect_time(0.4)  # after the job's start, like the offsets
    assert both.latency_min + 100 >= back_ms > alone.latency_max + 100  # the last crash, at 100 ms


def test_cli_explore_a_redis_restart(capsys):
    # the command docs/explore.md quotes: the shortest restart that lapses the lease, hitting every client
    code = main(
        ["explore", "--lease", "20", "--beat", "5", "--scan", "1", "--swept-by", "reaper",
         "--fault", "restart,length=9:12,offset=6.99:7.01", "--no-ties"]
    )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    assert "timings of restart (every client)" in out
    assert "smallest counterexample of live_never_reclaimed: fault0.length 10.077 s" in out
    assert "worker 1 DISCONNECTED" in out  # the other worker is cut off too
