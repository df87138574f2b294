"""The simulator against the closed forms of emqsim.analytic (derivations in docs/theory.md).

Each check simulates many independent faults (one per worker, hundreds of workers per run, a few seeds) and
asserts that the closed form lies in the simulated mean's (or proportion's) confidence interval, and that
every simulated value lies within the closed form's bounds (exact to the millisecond). About 25 interval
checks run here, so each uses a Bonferroni level of 1 - 0.05/25 = 99.8%: at 95% one or two of them would
fail by chance alone. Settings are in seconds, several at the millisecond scale (lease 0.3 s) where the
model's millisecond corrections are a visible share of the latency.
"""

import numpy as np
import pytest

from emqsim import (
    Crash,
    Exponential,
    Fixed,
    Freeze,
    LeasePolicy,
    LogNormal,
    Network,
    RenewalRule,
    Scenario,
    TimeoutPolicy,
    Uniform,
    simulate,
)
from emqsim.analytic import (
    freeze_false_reclaim_probability,
    freeze_lapse_probability,
    freeze_lapses,
    lease_detection,
    losses_to_lapse,
    lost_renewal_lapse_probability,
    renewal_period,
    renewal_period_after_loss,
    timeout_detection,
    timeout_false_reclaim_probability,
)
from emqsim.stats import mean_ci, wilson_ci

LEVEL = 0.998
SEEDS = range(5)


def _ci_contains(values, expected):
    mean, lo, hi = mean_ci(values, LEVEL)
    assert lo <= expected <= hi, (
        f"closed form {expected:.6f} outside the simulated {mean:.6f} [{lo:.6f}, {hi:.6f}]"
    )


def _within(values, bounds):
    values = np.asarray(values)
    assert values.min() >= bounds.lo - 1e-9, (values.min(), bounds)
    assert values.max() <= bounds.hi + 1e-9, (values.max(), bounds)


def _proportion_contains(hits, trials, expected):
    p, lo, hi = wilson_ci(hits, trials, LEVEL)
    assert lo <= expected <= hi, (
        f"closed form {expected:.4f} outside the simulated {p:.4f} [{lo:.4f}, {hi:.4f}]"
    )


def crash_detections(policy, crash_after, *, crashing=200, spare=0, seeds=SEEDS, duration=None, **scenario):
    """Crash every one of `crashing` workers while it holds its job (a crash `crash_after` into it); `spare`
    more workers hold nothing and survive. With max_stalled=0 a detected job fails, so runs end quickly."""
    latencies = []
    for seed in seeds:
        faults = tuple(Crash(job=spare + i, after=crash_after) for i in range(crashing))
        sc = Scenario(
            workers=crashing + spare, jobs=crashing + spare, duration=duration, faults=faults, **scenario
        )
        run = simulate(sc, policy, seed=seed, record_locks=False)
        dead = [a for a in run.attempts if a.died_at is not None]
        assert len(dead) == crashing * 1 and all(a.detection_latency is not None for a in dead)
        latencies += [a.detection_latency for a in dead]
    return latencies


def _spread(renewal, lease, scan):
    """Crash times: after the job's first renewal, spread over many renewal and sweep periods."""
    first = 3 * lease / 4 if isinstance(renewal, RenewalRule) else renewal + 0.05
    return first, first + 8 * max(renewal_period(renewal), scan)


# -- lease, dedicated reaper: exact means and bounds --------------------------------------------------------------
REAPER_GRID = [
    # lease, renewal, scan, two_phase
    (0.3, 0.1, 0.05, False),
    (0.3, 0.1, 0.05, True),
    (0.3, 0.1, 0.4, False),  # scan > lease: the two-phase sweep costs exactly P - L more
    (0.3, 0.1, 0.4, True),
    (0.4, RenewalRule.bullmq(0.4), 0.05, True),
    (0.4, RenewalRule.bullmq(0.4), 0.5, True),
    (30, 10, 5, True),
]


@pytest.mark.parametrize(("lease", "renewal", "scan", "two_phase"), REAPER_GRID)
def test_lease_detection_with_a_reaper(lease, renewal, scan, two_phase):
    beat = renewal if not isinstance(renewal, RenewalRule) else lease / 4
    rule = renewal if isinstance(renewal, RenewalRule) else None
    policy = LeasePolicy(
        lease, beat, scan, two_phase=two_phase, swept_by="reaper", max_stalled=0, renewal=rule
    )
    lo, hi = _spread(renewal, lease, scan)
    lat = crash_detections(policy, Uniform(lo, hi), duration=Fixed(hi + 3 * lease + 3 * scan))
    theory = lease_detection(lease, renewal, scan, two_phase=two_phase, swept_by="reaper")
    _ci_contains(lat, theory.mean)
    _within(lat, theory)


def test_bullmq_timer_renews_on_every_tick_once_rtt_is_positive():
    # The strict `ts + renew/2 < now` rule renews every SECOND tick only when the round trip takes no time;
    # the simulated detections rule out that period (lock/2) and agree with tick + rtt.
    rule = RenewalRule.bullmq(0.4)
    policy = LeasePolicy(0.4, 0.1, 0.05, two_phase=False, swept_by="reaper", max_stalled=0, renewal=rule)
    lat = crash_detections(policy, Uniform(0.3, 1.3), duration=Fixed(3))
    assert renewal_period(rule) == pytest.approx(0.102)
    _ci_contains(lat, lease_detection(0.4, rule, 0.05, two_phase=False, swept_by="reaper").mean)
    every_second_tick = 0.4 + 0.001 + (0.052 - 0.2) / 2  # an older lock at the crash: found sooner
    assert mean_ci(lat, LEVEL)[1] > every_second_tick


MECHANISM = [
    # lease, renewal, scan, two_phase, swept_by, spare workers
    (0.3, 0.1, 0.05, False, "reaper", 0),
    (0.3, 0.1, 0.4, True, "reaper", 0),
    (0.4, RenewalRule.bullmq(0.4), 0.5, True, "reaper", 0),
    (0.3, 0.1, 0.05, True, "workers", 2),
    (0.3, 0.1, 0.4, True, "workers", 2),
]


@pytest.mark.parametrize(("lease", "renewal", "scan", "two_phase", "swept_by", "spare"), MECHANISM)
def test_each_detection_is_the_first_eligible_sweep(lease, renewal, scan, two_phase, swept_by, spare):
    """The derivation step by step, per detection, from the run's own records: the lock was last set at
    r (h after a send u in [0, B] before the crash), it vanishes at V = r + L + 1 ms, and the job is reclaimed
    by the first successful sweep at or after V (two-phase: that also follows a sweep later than r)."""
    rule = renewal if isinstance(renewal, RenewalRule) else None
    policy = LeasePolicy(
        lease, lease / 4, scan, two_phase=two_phase, swept_by=swept_by, max_stalled=0, renewal=rule
    )
    lo, hi = _spread(renewal, lease, scan)
    faults = tuple(Crash(job=spare + i, after=Uniform(lo, hi)) for i in range(100))
    sc = Scenario(
        workers=100 + spare, jobs=100 + spare, duration=Fixed(hi + 3 * lease + 3 * scan), faults=faults
    )
    run = simulate(sc, policy, seed=7)
    h, eps, B = 0.001, 0.001, renewal_period(renewal)
    sweeps = np.array([e.time for e in run.sweeps if not e.skipped])
    last_set = {}
    for e in run.lock_events:
        if e.kind in ("set", "renewed"):
            last_set[e.token] = e
    checked = 0
    for a in run.attempts:
        if a.died_at is None:
            continue
        r = last_set[a.token]
        u = a.died_at - (r.time - h)
        assert -1e-9 <= u <= B + 1e-9
        vanish = r.expires_at + eps
        assert r.expires_at == pytest.approx(r.time + lease)
        after_v = sweeps[sweeps >= vanish - 1e-9]
        if two_phase:  # the marking sweep must come after r; a sweep in r's own millisecond may go either way
            strictly = [t for t in after_v if np.any((sweeps > r.time + 1e-9) & (sweeps < t - 1e-9))]
            loosely = [t for t in after_v if np.any((sweeps > r.time - 1e-9) & (sweeps < t - 1e-9))]
            assert a.failed_at in (pytest.approx(strictly[0]), pytest.approx(loosely[0]))
        else:
            assert a.failed_at == pytest.approx(after_v[0])
        checked += 1
    assert checked == 100


# -- lease, workers sweeping ------------------------------------------------------------------------------------
@pytest.mark.parametrize("two_phase", [False, True])
def test_lease_detection_with_workers_sweeping(two_phase):
    # All crashes fall in a 6 s window; any hand-over of the sweep is over before the first lock lapses
    # (L - B >= 2 S + rtt), so the mean is exact; the survivors sweep every scan + rtt (to 1 ms).
    lease, beat, scan = 30, 10, 2
    policy = LeasePolicy(lease, beat, scan, two_phase=two_phase, swept_by="workers", max_stalled=0)
    lat = crash_detections(policy, Uniform(10.05, 16.05), spare=3, duration=Fixed(60))
    theory = lease_detection(lease, beat, scan, two_phase=two_phase, swept_by="workers")
    assert theory.mean_exact
    _ci_contains(lat, theory.mean)
    _within(lat, theory)


@pytest.mark.parametrize("two_phase", [False, True])
def test_crashed_sweeper_hands_over_within_the_bounds(two_phase):
    # Two workers, one crash per run: half the time the crashed worker was the one sweeping and the other
    # takes over up to scan + P later. Every detection stays within the bounds, which the reaper's would
    # not hold; the mean is then only bounded below by the closed form.
    lease, beat, scan = 0.3, 0.1, 0.4
    policy = LeasePolicy(lease, beat, scan, two_phase=two_phase, swept_by="workers", max_stalled=0)
    lat = []
    for seed in range(300):
        sc = Scenario(workers=2, jobs=1, duration=Fixed(20), faults=(Crash(job=0, after=Uniform(0.2, 9)),))
        run = simulate(sc, policy, seed=seed, record_locks=False)
        lat += [a.detection_latency for a in run.attempts if a.died_at is not None]
    theory = lease_detection(lease, beat, scan, two_phase=two_phase, swept_by="workers")
    reaper = lease_detection(lease, beat, scan, two_phase=two_phase, swept_by="reaper")
    assert not theory.mean_exact
    _within(lat, theory)
    if two_phase:
        assert max(lat) > reaper.hi  # a hand-over happened, and cost more than any reaper's detection
    assert mean_ci(lat, LEVEL)[2] >= theory.mean
    # with the number of sweeping workers the mean is exact: the hand-over lag is the least of n - 1
    # independent uniform offsets in (0, scan]
    _ci_contains(lat, lease_detection(lease, beat, scan, two_phase=two_phase, sweepers=2).mean)


HANDOVER_GRID = [
    # lease, renewal, scan, two_phase, workers, crash window
    (0.3, 0.1, 0.4, True, 3, (0.2, 9)),
    (2, RenewalRule.bullmq(2), 2, True, 2, (1.6, 20)),  # BullMQ's rule, lease = stalledInterval
]


@pytest.mark.parametrize(("lease", "renewal", "scan", "two_phase", "workers", "window"), HANDOVER_GRID)
def test_hand_over_mean_matches_the_closed_form(lease, renewal, scan, two_phase, workers, window):
    rule = renewal if isinstance(renewal, RenewalRule) else None
    beat = lease / 4 if rule else renewal
    policy = LeasePolicy(
        lease, beat, scan, two_phase=two_phase, swept_by="workers", max_stalled=0, renewal=rule
    )
    lat = []
    for seed in range(300):
        sc = Scenario(
            workers=workers,
            jobs=1,
            duration=Fixed(window[1] + 3 * lease + 3 * scan),
            faults=(Crash(job=0, after=Uniform(*window)),),
        )
        run = simulate(sc, policy, seed=seed, record_locks=False)
        lat += [a.detection_latency for a in run.attempts if a.died_at is not None]
    exact = lease_detection(lease, renewal, scan, two_phase=two_phase, sweepers=workers)
    assert exact.mean_exact
    _ci_contains(lat, exact.mean)
    # and the no-hand-over mean is too low to be the truth here (the hand-over matters)
    assert mean_ci(lat, LEVEL)[1] > lease_detection(lease, renewal, scan, two_phase=two_phase).mean


@pytest.mark.parametrize(("renewal", "slack"), [(0.1, "fixed"), (RenewalRule.bullmq(0.4), "bullmq")])
def test_first_renewal_after_a_take(renewal, slack):
    """How old the take's lock is when the first renewal is sent: at most B + R for a fixed-rate timer, but
    up to 2 ticks + R for BullMQ's rule (a job taken just after a tick is younger than a tick at the next one,
    which skips it), which exceeds B + R = tick + 2R."""
    rule = renewal if isinstance(renewal, RenewalRule) else None
    lease = 0.4 if rule else 0.3
    policy = LeasePolicy(lease, 0.1, 0.05, swept_by="reaper", renewal=rule)
    sc = Scenario(workers=200, jobs=200, duration=Fixed(1.0))
    gaps = []
    for seed in range(3):
        run = simulate(sc, policy, seed=seed)
        taken, first = {}, {}
        for e in run.lock_events:
            if e.kind == "set":
                taken.setdefault(e.token, e.time)
            elif e.kind == "renewed" and e.token not in first:
                first[e.token] = e.time
        gaps += [first[t] - taken[t] for t in first]
    rtt = 0.002
    B = renewal_period(renewal)
    if slack == "fixed":
        assert max(gaps) <= B + rtt + 1e-9
    else:
        tick = 0.1
        assert max(gaps) <= 2 * tick + rtt + 1e-9
        assert max(gaps) > B + rtt + 0.05  # well past B + R: the statement B + R was wrong for this rule


# -- timeout detection --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("timeout", "scan", "crash_after"), [(0.6, 0.05, 0.1), (6, 0.5, 1.0)])
def test_timeout_detection_with_a_reaper(timeout, scan, crash_after):
    policy = TimeoutPolicy(timeout, scan, max_stalled=0)
    n = 200
    lat = crash_detections(
        policy,
        crash_after,
        crashing=n,
        duration=Fixed(3 * timeout),
        arrival_rate=n / (10 * scan),  # Poisson starts: every job at its own phase of the sweeps
    )
    theory = timeout_detection(timeout, scan, crash_after)
    _ci_contains(lat, theory.mean)
    _within(lat, theory)


def test_timeout_detection_with_workers_reaping():
    # TimeoutPolicy's workers reap without a rate limit: the wait is the least of the live workers' waits.
    # One crash per run (2 ms into the job), three live workers; one detection per run.
    timeout, scan, crash_after, live = 3, 0.4, 0.002, 3
    policy = TimeoutPolicy(timeout, scan, max_stalled=0, swept_by="workers")
    lat = []
    for seed in range(300):
        sc = Scenario(workers=1 + live, jobs=1, duration=Fixed(10), faults=(Crash(job=0, after=crash_after),))
        run = simulate(sc, policy, seed=seed, record_locks=False)
        lat += [a.detection_latency for a in run.attempts if a.died_at is not None]
    theory = timeout_detection(timeout, scan, crash_after, sweepers=live)
    _ci_contains(lat, theory.mean)
    _within(lat, theory)
    assert mean_ci(lat, LEVEL)[2] < timeout_detection(timeout, scan, crash_after).mean  # not one reaper's


# -- timeout false reclaims -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", [Uniform(0.3, 1.2), Exponential(0.5), LogNormal(0.5, 0.6)], ids=repr)
def test_timeout_false_reclaims_follow_the_survival_function(dist):
    timeout, scan, n = 0.6, 0.3, 400
    policy = TimeoutPolicy(timeout, scan, max_stalled=0)
    hits = trials = 0
    for seed in SEEDS:
        sc = Scenario(workers=n, jobs=n, duration=dist, arrival_rate=n / (20 * scan))
        run = simulate(sc, policy, seed=seed, record_locks=False)
        first = [a for a in run.attempts if a.attempt == 1]
        trials += len(first)
        hits += sum(a.false_reclaim for a in first)
    _proportion_contains(hits, trials, timeout_false_reclaim_probability(dist, timeout, scan))
    if isinstance(dist, Uniform):  # G(T) alone is far off when scans are slow next to the jobs' spread
        assert wilson_ci(hits, trials, LEVEL)[2] < dist.survival(timeout)


# -- frozen workers ---------------------------------------------------------------------------------------------------
FREEZE_CASES = [
    # renewal, freeze_after: the freeze starts at start + after; start = rtt = 2 ms, timers aligned at t = 0
    (10.0, 15.0),  # ticks at 10, 20 s: u = 15.002 - 10 = 5.002
    (10.0, 12.5),  # u = 2.502
    (RenewalRule.bullmq(30), 20.0),  # ticks at 7.5 (not due), 15.0 (renews), 22.502: u = 5.002
]


@pytest.mark.parametrize(("renewal", "after"), FREEZE_CASES)
@pytest.mark.parametrize("delta_ms", [-1, 0, 1, 2])
def test_freeze_lapses_exactly_when_u_plus_freeze_exceeds_the_lease(renewal, after, delta_ms):
    lease = 30
    last_send = 10.0 if after < 20 else 15.0
    u = round(after + 0.002 - last_send, 3)
    freeze = round(lease - u + delta_ms / 1000, 3)
    rule = renewal if isinstance(renewal, RenewalRule) else None
    policy = LeasePolicy(lease, 10, 5, swept_by="reaper", renewal=rule)
    sc = Scenario(
        workers=2,
        jobs=1,
        duration=Fixed(100),
        faults=(Freeze(job=0, after=after, duration=freeze),),
        phases="aligned",
    )
    run = simulate(sc, policy, seed=1)
    first = run.attempts[0]
    lapsed = any(e.kind == "renew_failed" for e in run.lock_events)
    assert lapsed == freeze_lapses(lease, u, freeze) == (delta_ms > 0)
    # token-checked renewal: a lapse is never undone; the job is reclaimed from its live worker
    assert first.false_reclaim == lapsed
    assert (first.outcome == "finish_rejected") == lapsed


def test_recreated_lock_saves_a_job_unless_a_sweep_lands_in_the_gap():
    lease, u = 30, 5.002
    rule = RenewalRule.every(10, recreate_missing=True)
    policy = LeasePolicy(lease, 10, 5, swept_by="reaper", renewal=rule)
    outcomes = {}
    for freeze in (lease - u + 0.001, 40.0):
        sc = Scenario(
            workers=2,
            jobs=1,
            duration=Fixed(100),
            faults=(Freeze(job=0, after=15.0, duration=freeze),),
            phases="aligned",
        )
        run = simulate(sc, policy, seed=1)
        assert any(e.kind == "expired" for e in run.lock_events)  # it lapsed both times
        outcomes[freeze] = run.attempts[0].false_reclaim
    assert outcomes == {lease - u + 0.001: False, 40.0: True}  # a 1 ms gap vs a 15 s gap, scans every 5 s


def _freeze_runs(policy, lease, beat, freeze, n=400):
    hits = trials = 0
    delays = []
    for seed in range(3):
        faults = tuple(
            Freeze(job=i, after=Uniform(beat + 0.05, beat + 0.05 + 6 * beat), duration=freeze)
            for i in range(n)
        )
        sc = Scenario(workers=n, jobs=n, duration=Fixed(8 * beat + 2 * freeze), faults=faults)
        run = simulate(sc, policy, seed=seed, record_locks=False)
        froze = {e.worker: e.time for e in run.worker_events if e.kind == "freeze"}
        for a in run.attempts:
            if a.attempt != 1:
                continue
            trials += 1
            if a.false_reclaim:
                hits += 1
                delays.append((a.failed_at or a.reclaimed_at) - froze[a.worker])
    return hits, trials, delays


@pytest.mark.parametrize("freeze", [0.22, 0.25, 0.29])
def test_freeze_lapse_probability_and_reclaim_time(freeze):
    lease, beat, scan = 0.3, 0.1, 0.05
    policy = LeasePolicy(lease, beat, scan, swept_by="reaper", max_stalled=0)
    hits, trials, delays = _freeze_runs(policy, lease, beat, freeze)
    _proportion_contains(hits, trials, freeze_lapse_probability(lease, beat, freeze))
    # once lapsed, the job is reclaimed as if its worker had crashed when the freeze began
    _within(delays, lease_detection(lease, beat, scan, swept_by="reaper"))


@pytest.mark.parametrize("freeze", [0.25, 0.28])
def test_freeze_false_reclaims_with_a_recreating_renewal(freeze):
    lease, beat, scan = 0.3, 0.1, 0.05
    rule = RenewalRule.every(beat, recreate_missing=True)
    policy = LeasePolicy(lease, beat, scan, swept_by="reaper", max_stalled=0, renewal=rule)
    hits, trials, _ = _freeze_runs(policy, lease, beat, freeze)
    expected = freeze_false_reclaim_probability(lease, beat, scan, freeze, recreate_missing=True)
    _proportion_contains(hits, trials, expected)
    assert expected < freeze_lapse_probability(lease, beat, freeze)


# -- lost renewals ------------------------------------------------------------------------------------------------
def _renewal_gaps(run, period, period_lost):
    """For every successful renewal (not the take), the next renewal that reached Redis: (losses, lapsed)."""
    finished = {a.token: a.finish_applied_at for a in run.attempts}
    by_token = {}
    for e in run.lock_events:
        if e.kind in ("renewed", "renew_failed", "set") and e.token is not None:
            by_token.setdefault(e.token, []).append(e)
    out = []
    for token, events in by_token.items():
        end = finished.get(token)
        for prev, nxt in zip(events, events[1:], strict=False):
            if prev.kind != "renewed" or (end is not None and nxt.time >= end):
                continue
            gap_ms = round((nxt.time - prev.time) * 1000)
            losses, rest = divmod(gap_ms - period, period_lost)
            assert rest == 0, (token, prev, nxt)
            out.append((losses, nxt.kind == "renew_failed"))
    return out


@pytest.mark.parametrize(
    ("lease", "renewal", "timeout"),
    [
        (0.3, RenewalRule.every(0.1), 0.05),
        (0.4, RenewalRule.bullmq(0.4), 0.01),
        (0.4, RenewalRule.bullmq(0.4), 0.06),
    ],
)
def test_consecutive_lost_renewals_that_lapse_the_lock(lease, renewal, timeout):
    policy = LeasePolicy(lease, lease / 4, 0.05, swept_by="reaper", max_stalled=0, renewal=renewal)
    sc = Scenario(
        workers=300,
        jobs=300,
        duration=Fixed(3.0),
        network=Network(loss=0.5, command_timeout=timeout),
    )
    run = simulate(sc, policy, seed=3)
    period = round(renewal_period(renewal) * 1000)
    period_lost = round(renewal_period_after_loss(renewal, command_timeout=timeout) * 1000)
    k = losses_to_lapse(lease, renewal, command_timeout=timeout)
    gaps = _renewal_gaps(run, period, period_lost)
    for losses, lapsed in gaps:
        assert lapsed == (losses >= k), (losses, lapsed, k)
    seen = {losses for losses, _ in gaps}
    assert {k - 1, k} <= seen  # both sides of the threshold were exercised
    if renewal == RenewalRule.every(0.1):
        # k - 1 = 2 losses: the next renewal reaches Redis exactly at the expiry millisecond, and finds the lock
        assert period + (k - 1) * period_lost == round(lease * 1000)


@pytest.mark.parametrize(
    ("lease", "renewal", "duration", "loss", "timeout"),
    [
        (0.3, RenewalRule.every(0.1), 1.2, 0.3, 0.05),
        (0.3, RenewalRule.every(0.1), 1.2, 0.3, 1.0),  # the fixed-rate timer waits out the command timeout
        (0.4, RenewalRule.bullmq(0.4), 1.2, 0.3, 0.01),
        (0.4, RenewalRule.bullmq(0.4), 1.2, 0.3, 0.06),
    ],
)
def test_lost_renewal_lapse_probability_per_job(lease, renewal, duration, loss, timeout):
    policy = LeasePolicy(lease, lease / 4, 0.05, swept_by="reaper", max_stalled=0, renewal=renewal)
    hits = trials = 0
    for seed in range(3):
        sc = Scenario(
            workers=400,
            jobs=400,
            duration=Fixed(duration),
            network=Network(loss=loss, command_timeout=timeout),
        )
        run = simulate(sc, policy, seed=seed, record_locks=False)
        first = [a for a in run.attempts if a.attempt == 1]
        trials += len(first)
        hits += sum(a.false_reclaim for a in first)
    expected = lost_renewal_lapse_probability(lease, renewal, duration, loss, command_timeout=timeout)
    _proportion_contains(hits, trials, expected)


# -- a worker that crashes after its job was already reclaimed holds nothing hostage -------------------
def test_detection_latency_is_never_negative():
    policy = LeasePolicy(30, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=2,
        jobs=1,
        duration=Fixed(120),
        faults=(Freeze(job=0, after=5, duration=60), Crash(job=0, after=80)),
    )
    run = simulate(sc, policy, seed=0)
    first = run.attempts[0]
    crash = next(e.time for e in run.worker_events if e.kind == "crash")
    assert first.reclaimed_at is not None and first.reclaimed_at < crash  # reclaimed while frozen
    assert first.died_at is None and first.detection_latency is None  # so its crash holds nothing hostage
