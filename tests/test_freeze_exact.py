"""`analytic.freeze_lapse_probability` is exact on the ms grid: brute force over every ms offset of a renewal cycle.

One worker, one job, a fixed round trip and one `Freeze(job=0, after=..., duration=F)` that starts at each ms of
one steady-state renewal cycle (B consecutive offsets, so each phase u = 1..B once); a lapse is a renewal that
failed or a reclaim while the job ran. The count must be the closed form's probability times B, exactly.
The after-reply timer (BullMQ's rule) is the case the plain ramp clip((F - (L - B)) / B, 0, 1) misses: a
freeze that starts while the renewal's reply is on the wire (the first rtt ms after its send) re-arms the timer
only at the resume, so its next renewal comes a tick later.
"""

from __future__ import annotations

import numpy as np
import pytest

from emqsim import Fixed, LeasePolicy, Scenario, simulate
from emqsim.analytic import freeze_lapse_probabilities, freeze_lapse_probability, renewal_period
from emqsim.faults import Freeze, Network
from emqsim.policies import ReclaimPolicy, RenewalRule
from emqsim.presets import preset


def _lapsed(policy: ReclaimPolicy, rtt: float, after_ms: int, freeze_ms: int, lease_ms: int) -> bool:
    """The job's lock lapsed: a renewal failed (or the lock expired) before its finish, or it was reclaimed."""
    sc = Scenario(
        workers=1,
        jobs=1,
        duration=Fixed((after_ms + freeze_ms + lease_ms + 3000) / 1000),
        faults=(Freeze(job=0, after=after_ms / 1000, duration=freeze_ms / 1000),),
        network=Network(rtt=Fixed(rtt)),
    )
    run = simulate(sc, policy, seed=0, replication=0)
    first = run.attempts[0]
    # a renewal in flight when the job finishes fails against the released lock: not a lapse
    end = first.finish_applied_at if first.finish_applied_at is not None else float("inf")
    failed = any(
        e.token == first.token and e.kind in ("renew_failed", "expired") and e.time < end
        for e in run.lock_events
    )
    return failed or len(run.attempts) > 1 or first.false_reclaim


def _cycle(renewal: float | RenewalRule, rtt: float) -> tuple[int, int]:
    """(B in ms, the first offset of a steady-state cycle: after the job's first renewals)."""
    B = round(renewal_period(renewal, rtt=rtt) * 1000)
    return B, 4 * B + 7


def _lapses(policy: ReclaimPolicy, renewal: float | RenewalRule, rtt: float, freeze_ms: int) -> int:
    B, start = _cycle(renewal, rtt)
    lease_ms = round(policy.lease * 1000)  # type: ignore[attr-defined]
    return sum(_lapsed(policy, rtt, start + k, freeze_ms, lease_ms) for k in range(B))


def _thresholds(
    policy: ReclaimPolicy, renewal: float | RenewalRule, rtt: float, lo: int, hi: int
) -> np.ndarray:
    """For each offset of one cycle, the shortest freeze (ms) that lapses (bisection: longer ones lapse too)."""
    B, start = _cycle(renewal, rtt)
    lease_ms = round(policy.lease * 1000)  # type: ignore[attr-defined]
    out = []
    for k in range(B):
        a, b = lo, hi  # a never lapses, b always does
        assert not _lapsed(policy, rtt, start + k, a, lease_ms)
        assert _lapsed(policy, rtt, start + k, b, lease_ms)
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (a, mid) if _lapsed(policy, rtt, start + k, mid, lease_ms) else (mid, b)
        out.append(b)
    return np.array(out)


def test_bullmq_freezes_that_start_before_the_reply_is_read_lapse_a_tick_sooner() -> None:
    """BullMQ's rule at lockDuration 2 s, rtt 2 ms (B = 502 ms, T = 500 ms): at F = 1.499 s two of the 502
    offsets lapse (u = B, and u = 1 with its reply on the wire), at 1.5 s four; the plain ramp said 1 and 2."""
    policy = preset("bullmq", lease=2.0)
    rule = policy.renewal
    assert rule is not None
    for freeze_ms, count in ((1499, 2), (1500, 4)):
        assert _lapses(policy, rule, 0.002, freeze_ms) == count
        assert freeze_lapse_probability(2.0, rule, freeze_ms / 1000) == count / 502
    # the plain fixed-rate timer has no such offsets: the ramp itself (the slow test counts it)
    assert freeze_lapse_probability(2.0, 0.5, 1.503) == 3 / 500


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "rtt"), [("bullmq", 0.004), ("plain", 0.002)]
)  # about 12 s each; bullmq at 2 ms and plain at 4 ms pass too (measured once: the CI budget is tight)
def test_the_closed_form_counts_every_offset_of_a_cycle(name: str, rtt: float) -> None:
    """Every F from 1 ms to L + 50 ms: closed form x B == the number of lapsing offsets, exactly."""
    if name == "bullmq":
        policy: LeasePolicy = preset("bullmq", lease=2.0)  # type: ignore[assignment]
        renewal: float | RenewalRule = policy.renewal  # type: ignore[assignment]
    else:
        policy, renewal = LeasePolicy(2.0, 0.5, 1.0), 0.5
    B, _ = _cycle(renewal, rtt)
    thresholds = _thresholds(policy, renewal, rtt, lo=2000 - B - 500 - 10, hi=2050)
    freezes = np.arange(1, 2051)
    counts = np.array([(thresholds <= f).sum() for f in freezes])
    expected = freeze_lapse_probabilities(2.0, renewal, freezes / 1000, rtt=rtt)
    assert np.array_equal(expected, counts / B)
    scalar = [freeze_lapse_probability(2.0, renewal, f / 1000, rtt=rtt) for f in freezes]
    assert np.array_equal(np.array(scalar), expected)
    if name == "bullmq":  # rtt ms of the cycle lapse from L - T - rtt on: that many above the plain ramp
        r = round(rtt * 1000)
        ramp = np.clip(freezes - (2000 - B), 0, B)
        diff = counts - ramp
        assert diff[freezes <= 2000 - B].max() == 0 and diff[freezes >= 2000].max() == 0
        assert np.all(diff[(freezes >= 1500) & (freezes <= 2000 - r)] == r) and diff.min() == 0


def test_the_continuous_form_is_the_grid_form_in_the_limit() -> None:
    """resolution=0 counts the same two parts as measures: P(u in (rtt, B], u > L - F) + P(u <= rtt, u > L - F - T)."""
    rule = RenewalRule.bullmq(2.0)
    for freeze in (1.0, 1.497, 1.5, 1.7, 1.998, 2.0, 2.5):
        grid = freeze_lapse_probability(2.0, rule, freeze, rtt=0.002)
        smooth = freeze_lapse_probability(2.0, rule, freeze, rtt=0.002, resolution=0)
        assert smooth == pytest.approx(grid, abs=1 / 502 + 1e-9)
    assert freeze_lapse_probability(2.0, rule, 1.4, rtt=0.002, resolution=0) == 0.0
    assert freeze_lapse_probability(2.0, rule, 2.0, rtt=0.002, resolution=0) == 1.0
    # 1 ms of each part: the late part's u = B and the early part's u = rtt
    assert freeze_lapse_probability(2.0, rule, 1.499, rtt=0.002, resolution=0) == pytest.approx(2 / 502)


def test_the_skipped_tick_form_at_p_0_is_the_freeze_form() -> None:
    """`skipped_tick_freeze_lapse_probability` with no skipped tick is `freeze_lapse_probability`, the ms the
    renewal's reply arrives included (BullMQ's rule, lockDuration 2 s, every F from 1.0 to 2.1 s)."""
    from emqsim.analytic_stalls import skipped_tick_freeze_lapse_probability

    policy = preset("bullmq", lease=2.0, scan=2.0)
    for f_ms in range(1000, 2101, 7):
        f = f_ms / 1000
        assert skipped_tick_freeze_lapse_probability(policy.lease, policy.renewal, f, 0.0) == pytest.approx(
            freeze_lapse_probability(policy.lease, policy.renewal, f), abs=1e-12
        ), f
