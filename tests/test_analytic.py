"""Unit tests of the closed forms in emqsim.analytic: limits, known values, monotonicity, exact enumerations."""

import itertools
import math

import numpy as np
import pytest

from emqsim import Exponential, Fixed, LogNormal, RenewalRule, Uniform
from emqsim.analytic import (
    MS,
    Latency,
    freeze_false_reclaim_probability,
    freeze_lapse_probability,
    freeze_lapses,
    lapse_probability_per_window,
    lease_detection,
    lease_latency_cdf,
    losses_to_lapse,
    lost_renewal_lapse_probability,
    one_way,
    renewal_period,
    renewal_period_after_loss,
    run_probability,
    sweep_period,
    timeout_detection,
    timeout_false_reclaim_probability,
    timeout_latency_cdf,
    uniform_sum_cdf,
)

BASIC = {"rtt": 0.0, "resolution": 0.0}  # the reference theory's continuous model
GRID = [(30, 10, 5), (30, 10, 30), (30, 10, 45), (60, 5, 1), (10, 3, 15), (2, 0.5, 0.25)]


# -- lease detection ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("L", "B", "S"), GRID)
def test_basic_model_gives_the_reference_forms(L, B, S):
    d = lease_detection(L, B, S, two_phase=False, swept_by="reaper", **BASIC)
    assert d.mean == pytest.approx(L - B / 2 + S / 2)
    assert (d.lo, d.hi) == pytest.approx((L - B, L + S))
    assert d.mean_exact


@pytest.mark.parametrize(("L", "B", "S"), GRID)
def test_two_phase_sweep_adds_exactly_the_excess_of_the_scan_over_the_lease(L, B, S):
    one = lease_detection(L, B, S, two_phase=False, swept_by="reaper", **BASIC)
    two = lease_detection(L, B, S, two_phase=True, swept_by="reaper", **BASIC)
    extra = max(0.0, S - L)
    assert two.mean - one.mean == pytest.approx(extra)
    assert two.hi - one.hi == pytest.approx(extra)
    assert two.lo - one.lo == pytest.approx(extra)
    assert extra < S  # "up to one more S", never a whole one


def test_two_phase_penalty_starts_one_millisecond_past_the_lease():
    # The reaper sweeps every scan + rtt: the penalty appears when that exceeds the lease, to the millisecond.
    at = lease_detection(30, 10, 29.998, two_phase=True, swept_by="reaper")  # P = 30.000 = L
    past = lease_detection(30, 10, 29.999, two_phase=True, swept_by="reaper")  # P = 30.001
    single_at = lease_detection(30, 10, 29.998, two_phase=False, swept_by="reaper")
    single_past = lease_detection(30, 10, 29.999, two_phase=False, swept_by="reaper")
    assert at.mean == pytest.approx(single_at.mean)
    assert past.mean - single_past.mean == pytest.approx(0.001)


def test_millisecond_corrections_for_the_default_network():
    # 30/10/5, rtt 2 ms: P = 5.002, h = 1 ms: E = L + h + (P - B)/2 = 27.5 + rtt/2 + h.
    d = lease_detection(30, 10, 5, two_phase=False, swept_by="reaper")
    assert d.mean == pytest.approx(27.502)
    assert d.lo == pytest.approx(30 + 0.001 + 0.001 - 10)
    assert d.hi == pytest.approx(30 + 5.002 + 0.001)


def test_one_way_split_and_sweep_period():
    assert one_way(0.002) == pytest.approx((0.001, 0.001))
    assert one_way(0.003) == pytest.approx((0.001, 0.002))
    assert one_way(0.001) == pytest.approx((0.0, 0.001))
    assert one_way(0.003, resolution=0) == pytest.approx((0.0015, 0.0015))
    assert sweep_period(5, 0.002) == pytest.approx(5.002)


def test_renewal_periods_of_the_timer_rules():
    assert renewal_period(10) == pytest.approx(10)  # RenewalRule.every: fixed rate
    assert renewal_period(RenewalRule.every(10)) == pytest.approx(10)
    assert renewal_period(RenewalRule.every(10, after_reply=True)) == pytest.approx(10.002)
    bull = RenewalRule.bullmq(30)  # tick 7.5 s, renew when ts + 7.5 < now
    assert renewal_period(bull, rtt=0.002) == pytest.approx(7.502)  # every tick once rtt > 0
    assert renewal_period(bull, rtt=0.0) == pytest.approx(15.0)  # every second tick with rtt = 0
    assert renewal_period(RenewalRule(tick_ms=7500, min_age_ms=7500, strict=False), rtt=0) == pytest.approx(
        7.5
    )
    assert renewal_period(RenewalRule(tick_ms=1000, min_age_ms=2500, after_reply=False)) == pytest.approx(3.0)


def test_bullmq_rule_detection_uses_the_short_period():
    bull = RenewalRule.bullmq(30)
    d = lease_detection(30, bull, 5, two_phase=False, swept_by="reaper")
    assert d.mean == pytest.approx(30 + 0.001 + (5.002 - 7.502) / 2)
    assert d.lo == pytest.approx(30 + 0.002 - 7.502)


@pytest.mark.parametrize("two_phase", [False, True])
def test_detection_grows_with_lease_and_scan_and_shrinks_with_beat(two_phase):
    def mean(L, B, S):
        return lease_detection(L, B, S, two_phase=two_phase, swept_by="reaper").mean

    leases, beats, scans = [20, 30, 40, 60], [2, 5, 8], [1, 5, 25, 50, 80]
    for B, S in itertools.product(beats, scans):
        assert np.all(np.diff([mean(L, B, S) for L in leases]) >= 0)
    for L, B in itertools.product(leases, beats):
        assert np.all(np.diff([mean(L, B, S) for S in scans]) > 0)
    for L, S in itertools.product(leases, scans):
        assert np.all(np.diff([mean(L, B, S) for B in beats]) < 0)


@pytest.mark.parametrize(("L", "B", "S"), GRID)
@pytest.mark.parametrize("two_phase", [False, True])
def test_mean_lies_within_the_bounds(L, B, S, two_phase):
    for swept_by in ("reaper", "workers"):
        d = lease_detection(L, B, S, two_phase=two_phase, swept_by=swept_by)
        assert d.lo < d.mean < d.hi


def test_workers_sweeping_allow_a_hand_over():
    reaper = lease_detection(30, 10, 5, swept_by="reaper")
    workers = lease_detection(30, 10, 5, swept_by="workers")
    assert workers.mean == pytest.approx(reaper.mean)
    assert workers.hi > reaper.hi and workers.lo <= reaper.lo
    assert workers.mean_exact  # L - B = 20 >= 2 S + rtt
    # BullMQ's defaults: lock 30 s, stalledInterval 30 s: the worst case is about L + 2 S.
    bull = lease_detection(30, RenewalRule.bullmq(30), 30, two_phase=True, swept_by="workers", **BASIC)
    assert bull.hi == pytest.approx(30 + 2 * 30)
    assert not bull.mean_exact
    assert not lease_detection(30, 10, 25, two_phase=False, swept_by="workers").mean_exact


def test_latency_membership_and_argument_checks():
    d = Latency(1.0, 0.5, 2.0)
    assert 0.5 in d and 2.0 in d and 2.1 not in d
    with pytest.raises(ValueError):
        lease_detection(10, 10, 5)
    with pytest.raises(ValueError):
        lease_detection(30, 10, 5, swept_by="nobody")


# -- timeout detection -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("T", "S", "d"), [(600, 5, 1), (600, 60, 30), (10, 1, 9.5)])
def test_timeout_detection_basic_forms(T, S, d):
    t = timeout_detection(T, S, d, **BASIC)
    assert t.mean == pytest.approx(T - d + S / 2)
    assert (t.lo, t.hi) == pytest.approx((T - d, T - d + S))


def test_timeout_detection_holds_the_job_for_the_rest_of_the_timeout():
    t = timeout_detection(600, 5, 1)
    assert t.lo == pytest.approx(599.0)  # T + 1 ms - d - back, with back = 1 ms
    assert t.hi == pytest.approx(599 + 5.002 - 0.001)
    assert t.mean == pytest.approx(599 + (5.002 - 0.001) / 2)  # lo + mean wait for a scan


def test_more_independent_reapers_find_it_sooner():
    means = [timeout_detection(600, 5, 1, sweepers=n).mean for n in (1, 2, 3, 8)]
    assert np.all(np.diff(means) < 0)
    assert timeout_detection(600, 6, 0, sweepers=2, **BASIC).mean == pytest.approx(600 + 2.0)


# -- timeout false reclaims -------------------------------------------------------------------------------------
DURATIONS = [Uniform(300, 1200), Exponential(400), LogNormal(300, 1.0), Fixed(620)]


@pytest.mark.parametrize("dist", DURATIONS, ids=repr)
def test_false_reclaim_is_the_survival_averaged_over_one_sweep_period(dist):
    T, S = 600, 30
    p = timeout_false_reclaim_probability(dist, T, S)
    t1, P = T - 0.002 + 0.001, 30.002
    assert dist.survival(t1 + P) - 1e-9 <= p <= dist.survival(t1) + 1e-9
    # and tends to the reference's G(T) as the sweeps get frequent
    assert timeout_false_reclaim_probability(dist, T, 1e-6, **BASIC) == pytest.approx(
        dist.survival(T), abs=1e-4
    )


def test_false_reclaim_known_values():
    T, S, mu = 600, 60, 400
    exact = mu / S * (math.exp(-T / mu) - math.exp(-(T + S) / mu))
    assert timeout_false_reclaim_probability(Exponential(mu), T, S, **BASIC) == pytest.approx(exact)
    # A job 20 s over a 600 s timeout with 60 s scans: hit only if a scan falls in those 20 s.
    assert timeout_false_reclaim_probability(Fixed(620), T, S, **BASIC) == pytest.approx(20 / 60)
    assert timeout_false_reclaim_probability(Fixed(700), T, S, **BASIC) == pytest.approx(1.0)
    assert timeout_false_reclaim_probability(Fixed(599), T, S, **BASIC) == pytest.approx(0.0)
    # two independent reapers: 1 - (1 - w/P)^2
    assert timeout_false_reclaim_probability(Fixed(620), T, S, sweepers=2, **BASIC) == pytest.approx(
        1 - (2 / 3) ** 2
    )


# -- freezes ----------------------------------------------------------------------------------------------------
def test_freeze_lapse_threshold_is_strict_on_the_millisecond():
    assert not freeze_lapses(30, 5.002, 24.998)
    assert freeze_lapses(30, 5.002, 24.999)
    assert not freeze_lapses(30, 5.0, 25.0, resolution=0)
    assert freeze_lapses(30, 5.0, 25.0 + 1e-6, resolution=0)


def test_freeze_lapse_probability_ramps_from_lease_minus_beat_to_lease():
    L, B = 30, 10
    assert freeze_lapse_probability(L, B, L - B) == 0
    assert freeze_lapse_probability(L, B, L - B + 0.001) == pytest.approx(0.0001)  # u = B exactly
    assert freeze_lapse_probability(L, B, L - B / 2) == pytest.approx(0.5)
    assert freeze_lapse_probability(L, B, L) == pytest.approx(1.0)
    assert freeze_lapse_probability(L, B, 2 * L) == 1.0
    freezes = np.linspace(15, 35, 41)
    assert np.all(np.diff([freeze_lapse_probability(L, B, f) for f in freezes]) >= 0)
    # bullmq's shorter period narrows the ramp; its after-reply timer adds the rtt = 2 ms of the cycle whose
    # freeze starts before the reply is read (they lapse from L - T - rtt on): 3751 + 2 of the 7502 offsets
    assert freeze_lapse_probability(30, RenewalRule.bullmq(30), 30 - 7.502 / 2) == 3753 / 7502


def test_freeze_lapse_probabilities_are_the_scalar_ones_bit_for_bit():
    # tune averages thousands of sampled pauses per candidate in one call; the floats must be the scalar's,
    # half-millisecond ties (rounded half to even by both) included
    from emqsim.analytic import freeze_lapse_probabilities

    rng = np.random.default_rng(7)
    freezes = np.concatenate([rng.exponential(20, 500), np.arange(0, 40, 0.0005)[::7], [0.0, 19.9995, 30.0]])
    for lease, renewal in ((30, 10), (30, RenewalRule.bullmq(30)), (0.3, 0.1), (17.123, 4.567)):
        for resolution in (0.001, 0):
            one = [freeze_lapse_probability(lease, renewal, f, resolution=resolution) for f in freezes]
            many = freeze_lapse_probabilities(lease, renewal, freezes, resolution=resolution)
            assert np.array_equal(np.array(one), many)
            assert float(np.mean(one)) == float(np.mean(many))


def test_recreating_a_missing_lock_saves_most_lapsed_jobs():
    L, B, S = 30, 10, 5
    for F in (21, 25, 28, 30, 33, 40):
        token = freeze_false_reclaim_probability(L, B, S, F)
        recreate = freeze_false_reclaim_probability(L, B, S, F, recreate_missing=True)
        assert recreate <= token + 1e-12
    assert freeze_false_reclaim_probability(L, B, S, 40, recreate_missing=True) == pytest.approx(1.0)
    # basic model, lapse window u + F - L with u ~ U(0, B): F = L: E[min(1, u/S)] = 1 - S/(2B)
    assert freeze_false_reclaim_probability(
        L, B, S, L, recreate_missing=True, two_phase=False, **BASIC
    ) == pytest.approx(1 - S / (2 * B))
    # two-phase with S > L: the sweep inside the window must have been preceded by a marking one
    one = freeze_false_reclaim_probability(10, 3, 15, 12, recreate_missing=True, two_phase=False, **BASIC)
    two = freeze_false_reclaim_probability(10, 3, 15, 12, recreate_missing=True, two_phase=True, **BASIC)
    assert two < one


# -- lost renewals -----------------------------------------------------------------------------------------------
def test_losses_that_lapse_the_lock():
    assert losses_to_lapse(30, 10) == 3  # two survive (at the expiry millisecond), three lapse
    assert losses_to_lapse(30, 10.001) == 2
    assert losses_to_lapse(30, 9.999) == 3
    assert losses_to_lapse(30, 7.4) == 4
    bull = RenewalRule.bullmq(30)
    assert losses_to_lapse(30, bull, command_timeout=1.0) == 3  # 7.502 + 2 * 8.5 <= 30 < 7.502 + 3 * 8.5
    assert losses_to_lapse(30, bull, command_timeout=4.0) == 2  # a slow timeout eats the margin
    assert losses_to_lapse(30, RenewalRule.every(10, after_reply=True), command_timeout=1.0) == 2
    assert losses_to_lapse(0.3, 0.1, command_timeout=1.0) == 1  # the fixed-rate timer waits for the timeout
    assert renewal_period_after_loss(0.1, command_timeout=1.0) == pytest.approx(1.0)
    assert lapse_probability_per_window(0.1, 3) == pytest.approx(1e-3)


def _runs_by_enumeration(n, k, p):
    total = 0.0
    for pattern in itertools.product((0, 1), repeat=n):
        if "1" * k in "".join(map(str, pattern)):
            total += p ** sum(pattern) * (1 - p) ** (n - sum(pattern))
    return total


@pytest.mark.parametrize(("n", "k"), [(1, 1), (5, 2), (8, 3), (10, 4), (3, 5)])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_run_probability_matches_enumeration(n, k, p):
    assert run_probability(n, k, p) == pytest.approx(_runs_by_enumeration(n, k, p))


def test_run_probability_edges():
    assert run_probability(10, 1, 0.2) == pytest.approx(1 - 0.8**10)
    assert run_probability(2, 3, 0.9) == 0.0
    assert run_probability(5, 3, 0.0) == 0.0
    assert run_probability(0, 0, 0.5) == 1.0


def _reference_lapse(L, D, R, C, tick, min_age, strict, after_reply, p):
    """Walk every branch of the engine's timer loop (ms), for every phase: an independent check of the DP."""
    total = 0.0
    for phase in range(1, tick + 1):
        stack = [(phase, phase, 0, -R, 1.0)]
        while stack:
            x, sched, ts, last, prob = stack.pop()
            if x >= D:
                if D - last > L:
                    total += prob
                continue
            if x - last > L:
                total += prob
                continue
            due = x - ts > min_age if strict else x - ts >= min_age
            if not due:  # an idle tick: no request
                nx = x + tick if after_reply else max(sched + tick, x)
                stack.append((nx, sched + tick, ts, last, prob))
                continue
            for lost, q in ((False, 1 - p), (True, p)):
                wait = C if lost else R
                nx = x + wait + tick if after_reply else max(sched + tick, x + wait)
                stack.append((nx, sched + tick, x, last if lost else x, prob * q))
    return total / tick


CASES = [
    # lease, duration, rtt, command timeout, rule (all ms)
    (30, 70, 2, 5, RenewalRule.every(0.010)),
    (30, 95, 2, 5, RenewalRule.every(0.010)),
    (25, 80, 1, 3, RenewalRule.every(0.009)),
    (30, 70, 2, 15, RenewalRule.every(0.010)),  # command timeout longer than the tick
    (40, 90, 2, 3, RenewalRule.bullmq(0.040)),
    (40, 90, 3, 12, RenewalRule.bullmq(0.040)),
    (30, 60, 2, 2, RenewalRule(tick_ms=4, min_age_ms=9, strict=True, after_reply=False)),
]


@pytest.mark.parametrize(("L", "D", "R", "C", "rule"), CASES)
@pytest.mark.parametrize("p", [0.2, 0.6])
def test_lost_renewal_programme_matches_brute_force(L, D, R, C, rule, p):
    ours = lost_renewal_lapse_probability(L * MS, rule, D * MS, p, rtt=R * MS, command_timeout=C * MS)
    ref = _reference_lapse(
        L, D, R, C, rule.tick_ms, rule.min_age_ms, rule.strict, rule.after_reply or rule.per_job, p
    )
    assert ours == pytest.approx(ref, abs=1e-12)


def test_lost_renewal_lapse_limits():
    assert lost_renewal_lapse_probability(30, 10, 300, 0.0) == 0.0
    ps = [0.05, 0.2, 0.4, 0.6]
    values = [lost_renewal_lapse_probability(30, 10, 300, p, command_timeout=1.0) for p in ps]
    assert np.all(np.diff(values) > 0)
    durations = [60, 120, 300, 600]
    values = [lost_renewal_lapse_probability(30, 10, D, 0.3) for D in durations]
    assert np.all(np.diff(values) > 0)
    # a job shorter than the lease never lapses: the take's lock covers it
    assert lost_renewal_lapse_probability(30, 10, 29.9, 0.9) == 0.0
    # long jobs: about a run of k* losses among D/B renewals
    approx = run_probability(60, 3, 0.3)
    assert lost_renewal_lapse_probability(30, 10, 600, 0.3) == pytest.approx(approx, abs=0.03)


def test_hand_over_lag_and_its_closed_form():
    from emqsim.analytic import (
        handover_detection_mean,
        handover_extra_single_phase,
        handover_lag_survival,
        one_way,
        sweep_period,
    )

    # the least of n - 1 uniform offsets in (0, S]: P(lag > x) = (1 - x/S)^(n-1), mean S/n
    S = 5.0
    for n in (2, 3, 5):
        xs = np.linspace(0, S, 20001)
        mean = np.trapezoid([handover_lag_survival(x, S, n) for x in xs], xs)
        assert mean == pytest.approx(S / n, rel=1e-4)
    # single phase: the grid expectation agrees with the closed form E[(lag - v)+]
    L, B = 12.0, 10.0
    P, (h, _) = sweep_period(S), one_way()
    for n in (2, 4):
        grid = handover_detection_mean(L, B, S, P, h, 0.001, n, two_phase=False) - (L + h + (P - B) / 2)
        assert grid == pytest.approx(handover_extra_single_phase(L, B, S, h, 0.001, n), abs=0.01)
    # L - B >= 2S + R: the hand-over is over before the lock can lapse, nothing to add
    assert lease_detection(30, 10, 5, sweepers=2).mean == pytest.approx(
        lease_detection(30, 10, 5).mean, abs=0.01
    )
    with pytest.raises(ValueError):
        lease_detection(30, 10, 5, sweepers=1)


# -- the basic model's latency CDFs ----------------------------------------------------------------------------
def test_basic_lease_and_timeout_cdfs():
    t = np.linspace(0, 60, 601)
    cdf = lease_latency_cdf(30, 10, 5)(t)
    assert cdf[t <= 20].max() == 0 and cdf[t >= 35].min() == 1
    assert np.all(np.diff(cdf) >= -1e-12)
    mean = float(np.sum(1 - cdf) * (t[1] - t[0]))
    assert mean == pytest.approx(30 - 10 / 2 + 5 / 2, abs=0.1)  # E[T_D] = L - B/2 + S/2
    t2 = np.linspace(0, 200, 2001)
    tcdf = timeout_latency_cdf(120, 5, 50)(t2)
    assert tcdf[t2 <= 70].max() == 0 and tcdf[t2 >= 125].min() == 1
    dying_halfway = timeout_detection(120, 5, 25, **BASIC).mean  # the mean death is halfway into U(0, 50)
    assert float(np.trapezoid(1 - tcdf, t2)) == pytest.approx(dying_halfway, rel=1e-4)


@pytest.mark.parametrize(
    ("L", "B", "S"), [g for g in GRID if g[2] <= g[0]]
)  # a slower sweep: not the basic model
def test_basic_lease_cdf_agrees_with_lease_detection_in_the_basic_model(L, B, S):
    """Range and mean of the CDF are those of `lease_detection` with rtt 0 and a continuous clock."""
    exact = lease_detection(L, B, S, swept_by="reaper", **BASIC)
    t = np.linspace(0, exact.hi * 1.2, 200_001)
    cdf = lease_latency_cdf(L, B, S)(t)
    assert cdf[t < exact.lo - 1e-9].max(initial=0.0) == 0 and cdf[t >= exact.hi].min() == 1
    mean = float(np.trapezoid(1 - cdf, t))
    assert mean == pytest.approx(exact.mean, rel=1e-4)


@pytest.mark.parametrize(
    ("a", "b"), [(1.0, 1.0), (2.0, 5.0), (5.0, 2.0), (0.0, 3.0), (3.0, 0.0), (0.25, 40.0)]
)
def test_uniform_sum_cdf_matches_samples(a, b):
    """Against 200,000 draws of U(0, a) + U(0, b) (a fixed seed): within the Kolmogorov-Smirnov 99.9% band."""
    rng = np.random.default_rng(np.random.SeedSequence(20240))
    draws = np.sort(rng.uniform(0, a, 200_000) + rng.uniform(0, b, 200_000))
    empirical = np.arange(1, draws.size + 1) / draws.size
    gap = np.abs(uniform_sum_cdf(draws, a, b) - empirical).max()
    assert gap < 1.95 / math.sqrt(draws.size)
    assert uniform_sum_cdf(np.array([-1.0, a + b + 1]), a, b).tolist() == [0.0, 1.0]


def test_uniform_sum_cdf_of_two_points_is_a_step():
    assert uniform_sum_cdf(np.array([-0.5, 0.0, 0.5]), 0.0, 0.0).tolist() == [0.0, 1.0, 1.0]
