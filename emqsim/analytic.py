"""Closed forms for emqsim's model of dead-worker detection, in seconds (derivations: docs/theory.md).

Every function models THIS engine, including the details that move numbers:

* the clock counts whole milliseconds (`resolution`, 0.001 s); a lock set at Redis time r with PX L is visible
  while `now <= r + L` and gone from `r + L + resolution` on (Redis's strict `now > expire_at`);
* a round trip `rtt` is split `h = floor(rtt / 2)` on the way out and `rtt - h` back, on the ms grid;
* a timer's requests are SENT at its tick; the lock is set `h` later;
* the dedicated reaper sleeps `scan` AFTER each reply, so it sweeps every `P = scan + rtt`; workers sweeping
  for the queue are rate-limited by `stalled-check` (PX scan), so successive sweeps are `scan + 1 ms` to
  `scan + rtt` apart while the worker that sweeps lives, and up to `2 scan + rtt` apart when it dies and
  another worker takes over;
* the timers' phases are uniform, so a crash happens a uniform time `u` in `(0, B]` after the worker sent the
  renewal that last set its lock, `B` the renewal period (`renewal_period`).

With `rtt=0` and `resolution=0` the formulas reduce to the basic ones in the reference theory
(E[T_D] = L - B/2 + S/2, T_D in [L - B, L + S], ...). `rtt` is a fixed value here; a random rtt is not
modelled. `Latency.lo`/`hi` are the smallest and largest values the model can produce (same-millisecond
ties included), so every simulated value lies in `[lo, hi]`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from emqsim.distributions import Distribution
from emqsim.faults import reconnect_after_ms
from emqsim.policies import RenewalRule
from emqsim.units import to_ms

MS = 0.001  # the engine's clock resolution, seconds
DEFAULT_RTT = 0.002  # Network().rtt
DEFAULT_COMMAND_TIMEOUT = 1.0  # Network().command_timeout
_EPS = 1e-9

SweptBy = Literal["workers", "reaper"]


@dataclass(frozen=True)
class Latency:
    """A latency's mean and the interval [lo, hi] every realisation lies in (seconds).

    `mean_exact` is False where the mean is only a lower bound (see `lease_detection` with workers sweeping).
    """

    mean: float
    lo: float
    hi: float
    mean_exact: bool = True

    def __contains__(self, x: float) -> bool:
        return self.lo - _EPS <= x <= self.hi + _EPS


# -- the clock and the network ---------------------------------------------------------------------------------
def _on_grid(x: float, resolution: float) -> float:
    """x rounded to the clock grid (the engine rounds every duration to whole ms)."""
    if resolution <= 0:
        return float(x)
    return round(x / resolution) * resolution


def _ticks(x: float, resolution: float) -> int:
    return int(round(x / resolution))


def one_way(rtt: float = DEFAULT_RTT, resolution: float = MS) -> tuple[float, float]:
    """(out, back): a request reaches Redis `out = floor(rtt/2)` after it is sent; the reply takes the rest."""
    if rtt < 0:
        raise ValueError(f"rtt must be >= 0, got {rtt}")
    if resolution <= 0:
        return rtt / 2, rtt / 2
    n = _ticks(rtt, resolution)
    return (n // 2) * resolution, (n - n // 2) * resolution


def sweep_period(scan: float, rtt: float = DEFAULT_RTT, resolution: float = MS) -> float:
    """P = scan + rtt: a sweeper sleeps `scan` after each reply, so its sweeps reach Redis every scan + rtt."""
    return _on_grid(scan, resolution) + _on_grid(rtt, resolution)


# -- renewal timers -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Rule:
    tick: float
    min_age: float
    strict: bool
    after_reply: bool


def _rule(renewal: float | RenewalRule) -> _Rule:
    if isinstance(renewal, RenewalRule):
        after = renewal.after_reply or renewal.per_job  # a per-job timer also sleeps after its reply
        return _Rule(renewal.tick_ms / 1000, renewal.min_age_ms / 1000, renewal.strict, after)
    if not renewal > 0:
        raise ValueError(f"beat must be > 0 seconds, got {renewal}")
    return _Rule(float(renewal), 0.0, True, False)  # RenewalRule.every(beat): fixed rate, renew each tick


def _ticks_until_due(base: float, rule: _Rule, resolution: float) -> int:
    """Smallest m >= 1 with base + m * tick past min_age (`>` when strict, else `>=`), on the clock grid."""
    if resolution > 0:
        base_n, tick_n, age_n = (_ticks(x, resolution) for x in (base, rule.tick, rule.min_age))
        gap = age_n - base_n
        m = gap // tick_n + 1 if rule.strict else -(-gap // tick_n)
    else:
        ratio = (rule.min_age - base) / rule.tick
        m = math.floor(ratio) + 1 if rule.strict else math.ceil(ratio)
    return max(m, 1)


def renewal_period(
    renewal: float | RenewalRule, *, rtt: float = DEFAULT_RTT, resolution: float = MS
) -> float:
    """B: the time between two successful renewals of a job (their sends), in steady state.

    A number means `RenewalRule.every(beat)`: a fixed-rate timer that renews on every tick, B = beat.
    A fixed-rate rule that renews when the age passes `min_age` renews every m-th tick: B = m * tick.
    An after-reply rule (BullMQ's LockManager) sleeps `tick` after the reply: B = rtt + m * tick, m the
    smallest count with rtt + m * tick > min_age. For `RenewalRule.bullmq(lock)` (tick = min_age = lock/4)
    that is B = lock/4 + rtt when rtt > 0 (every tick renews) and B = lock/2 when rtt = 0 (every second tick).
    """
    rule = _rule(renewal)
    base = _on_grid(rtt, resolution) if rule.after_reply else 0.0
    if not rule.after_reply and rtt >= rule.tick:
        raise ValueError(
            "a fixed-rate timer needs rtt < tick (the reply must come back before the next tick)"
        )
    return base + _ticks_until_due(base, rule, resolution) * _on_grid(rule.tick, resolution)


def first_renewal_gap(
    renewal: float | RenewalRule, *, rtt: float = DEFAULT_RTT, resolution: float = MS
) -> float:
    """G: the longest time from a take's send to the send of the job's first renewal (at least B).

    The job is tracked from its start, a round trip after the take was sent; the lock manager checks it on
    its ticks and renews it at the first check where its age is past `min_age`. In the worst case a check
    comes exactly when the age reaches `min_age` (strict: not due; `>=`: one ms before) and the next check is
    a whole spacing later: `tick` for a fixed-rate timer, `tick + rtt` for one that sleeps after a reply (the
    check before may have renewed another job). Fixed rate, renew every tick: G = rtt + tick; BullMQ
    (min_age = tick = lockDuration/4, after reply): G = 2 tick + 2 rtt. A pause, an outage or a crash before
    the first renewal sees this gap where the steady state sees B, so its thresholds are lower."""
    rule = _rule(renewal)
    r = _on_grid(rtt, resolution)
    T = _on_grid(rule.tick, resolution)
    M = _on_grid(rule.min_age, resolution)
    spacing = T + r if rule.after_reply else T
    last_not_due = M if rule.strict else M - resolution
    return max(r + last_not_due + spacing, renewal_period(renewal, rtt=rtt, resolution=resolution))


def renewal_period_after_loss(
    renewal: float | RenewalRule,
    *,
    rtt: float = DEFAULT_RTT,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    resolution: float = MS,
) -> float:
    """The time from a LOST renewal's send to the next renewal's send.

    Fixed rate: the same B while command_timeout < tick (the timer keeps its schedule), else command_timeout
    (the overdue tick fires as soon as the client gives up). After reply: the timer waits for the client's
    `command_timeout` instead of a reply, so command_timeout + m * tick.
    """
    rule = _rule(renewal)
    if not rule.after_reply:
        B = renewal_period(renewal, rtt=rtt, resolution=resolution)
        if command_timeout < rule.tick:
            return B
        if rule.min_age > 0:
            raise ValueError("a fixed-rate rule with min_age is modelled only with command_timeout < tick")
        return max(B, _on_grid(command_timeout, resolution))  # the late timer fires as soon as it can
    base = _on_grid(command_timeout, resolution)
    return base + _ticks_until_due(base, rule, resolution) * _on_grid(rule.tick, resolution)


# -- lease: detection of a crashed worker ------------------------------------------------------------------------
def lease_detection(
    lease: float,
    renewal: float | RenewalRule,
    scan: float,
    *,
    two_phase: bool = True,
    swept_by: SweptBy = "workers",
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
    sweepers: int | None = None,
) -> Latency:
    """T_D (crash -> reclaim) for a worker that crashes at a uniformly random moment of a job's steady state.

    With B = renewal_period(...), P = scan + rtt, h = one-way time, eps = resolution:
    the lock was last set h after a send u ~ U(eps..B) before the crash, so it vanishes L + h + eps - u after
    the crash; a single-phase sweep finds it after a further W ~ U(0..P - eps). A two-phase sweep reclaims only
    a job that a sweep marked after its last renewal, which is the same thing when P <= L and otherwise delays
    every detection by exactly P - L: the two-phase sweep acts as a single-phase one with L replaced by
    L' = max(L, P). Hence

        E[T_D] = L' + h + (P - B) / 2        (basic model: L - B/2 + S/2, plus (S - L)+ for two-phase)

    lo/hi: single phase [L + eps + h - B, L + P + h]; two phase [max(L + eps, P) + h - B, L' + P + h].
    Workers sweeping (rate-limited by `stalled-check`): while the sweeping worker lives this is the same with
    P = scan + rtt (to 1 ms); if the crashed worker was the one sweeping, the next worker's sweep comes up to
    G = scan + P after its last one. `hi` allows one such hand-over (L + G + h single phase,
    max(L, P) + G + h two phase; BullMQ's 30 s lock with 30 s stalledInterval gives about L + 2 S), `lo` uses
    the rate-limit gap scan + eps, and the mean is exact only when a hand-over cannot delay the detection
    (L - B >= scan single phase, L - B >= 2 scan + rtt two phase); otherwise it is a lower bound.
    Given `sweepers` = n (live workers sweeping, each with an independent random phase) the mean is exact:
    with probability 1/n the crashed worker was the one sweeping and the hand-over lag (the least of n - 1
    uniform offsets in (0, scan]) delays the next sweeps (`handover_detection_mean`).
    Assumes the crash comes after the job's first renewal, fixed rtt < tick, and B < L.
    """
    if swept_by not in ("workers", "reaper"):
        raise ValueError(f"swept_by must be 'workers' or 'reaper', got {swept_by!r}")
    eps = resolution
    L = _on_grid(lease, resolution)
    S = _on_grid(scan, resolution)
    h, _ = one_way(rtt, resolution)
    B = renewal_period(renewal, rtt=rtt, resolution=resolution)
    if B >= L:
        raise ValueError(f"the renewal period ({B:g} s) must be shorter than the lease ({L:g} s)")
    P = sweep_period(scan, rtt, resolution)
    L2 = max(L, P) if two_phase else L
    mean = L2 + h + (P - B) / 2
    if swept_by == "reaper":
        lo_r = max(L + eps, P) if two_phase else L + eps
        hi_r = L2 + P
        exact = True
    else:
        G = S + P  # the longest gap: a dead sweeper's last sweep to the next worker's first
        lo_r = max(L, S) + eps if two_phase else L + eps
        hi_r = max(L, P) + G if two_phase else L + G
        exact = (L - B >= S + P) if two_phase else (L - B >= S)
    if swept_by == "workers" and sweepers is not None:
        # the crashed worker is the one sweeping with probability 1/n; then the hand-over adds its lag
        n = int(sweepers)
        if n < 2:
            raise ValueError(f"sweepers must be >= 2 (someone must take over the sweep), got {sweepers}")
        handed = handover_detection_mean(L, B, S, P, h, eps, n, two_phase)
        mean = (1 - 1 / n) * mean + handed / n
        exact = True
    # T_D = (reclaim - r_last) - (c - r_last), with c - r_last = u - h and u in [0, B] (0: a same-ms tie).
    return Latency(mean=mean, lo=lo_r + h - B, hi=hi_r + h, mean_exact=exact)


def handover_lag_survival(x: float, scan: float, sweepers: int) -> float:
    """P(hand-over lag > x): when the sweeping worker dies, each of the other n - 1 workers' next attempt
    comes an independent uniform offset in (0, S] after the sweep the dead one would have made; the lag is
    the least of them: P(lag > x) = (1 - x/S)^(n - 1), mean S/n."""
    return float(np.clip(1 - x / scan, 0.0, 1.0) ** (sweepers - 1))


def handover_detection_mean(
    L: float, B: float, S: float, P: float, h: float, eps: float, sweepers: int, two_phase: bool
) -> float:
    """E[T_D] when the crashed worker was the one sweeping (exact expectation of the reclaim rule below,
    evaluated on a fine grid; docs/theory.md section 2).

    Relative to the crash: the lock vanishes at v = L + eps + h - u (u ~ U(0, B]); the dead sweeper's last
    sweep is p1 (a - P, or a if its request was already on the wire, a ~ U(0, P]); the new sweeper's sweeps
    are t_k = p1 + P + lag + k P (lag: `handover_lag_survival`). Single phase: the first t_k >= v. Two phase:
    the same, unless that is t_0 and the sweep before it (p1) came before the last renewal r = h - u: then
    t_1. With lag = 0 this reproduces the no-hand-over mean L' + h + (P - B)/2.
    Single phase it has the closed form L + h + (P - B)/2 + E[(lag - v)+], with
    E[(lag - v)+] = S^2 / (n (n + 1) B) * (w1^(n+1) - w0^(n+1)), w = (1 - v/S)+ at u = B and u = 0.
    """
    grid = 240
    a = (np.arange(grid) + 0.5) / grid * P
    u = (np.arange(grid) + 0.5) / grid * B
    q = (np.arange(grid) + 0.5) / grid  # quantiles of the lag: lag = S (1 - (1 - q)^(1/(n-1)))
    lag = S * (1 - (1 - q) ** (1 / (sweepers - 1)))
    A, U, D = np.meshgrid(a, u, lag, indexing="ij", sparse=True)
    p1 = np.where(A < h, A, A - P)  # noqa: SIM300 (the sweep was already on the wire)
    t0 = p1 + P + D
    v = L + eps + h - U
    k = np.maximum(0, np.ceil((v - t0) / P))
    if two_phase:
        r = h - U
        k = np.where((k == 0) & (p1 <= r), 1, k)
    return float(np.mean(t0 + k * P))


def handover_extra_single_phase(L: float, B: float, S: float, h: float, eps: float, sweepers: int) -> float:
    """Closed form of E[(lag - v)+] (single phase): what a hand-over adds to the mean detection."""
    n = sweepers
    c0 = L + eps + h

    def w(v: float) -> float:
        return max(0.0, 1 - v / S)

    return S * S / (n * (n + 1) * B) * (w(c0 - B) ** (n + 1) - w(c0) ** (n + 1))


# -- timeout: detection of a crashed worker ---------------------------------------------------------------------
def _mean_min_wait(P: float, sweepers: int, resolution: float) -> float:
    """E[min of `sweepers` independent waits, each uniform on the grid 0..P - eps] (continuous: P/(N+1))."""
    if sweepers < 1:
        raise ValueError(f"sweepers must be >= 1, got {sweepers}")
    if resolution <= 0:
        return P / (sweepers + 1)
    n = _ticks(P, resolution)
    w = np.arange(1, n, dtype=float)
    return float(np.sum(((n - w) / n) ** sweepers)) * resolution


def timeout_detection(
    timeout: float,
    scan: float,
    crash_after: float,
    *,
    sweepers: int = 1,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> Latency:
    """T_D for a worker that crashes `crash_after` = d seconds into its job (d < timeout), timeout reaper.

    The reaper reclaims a job whose age `now - processedOn` is strictly over T; processedOn is the take's
    Redis time, `back` = rtt - h before the worker starts. So T_D = T + eps - d - back + W, with W the wait
    for the next sweep: uniform on 0..P - eps for a random sweep phase (P = scan + rtt), or the least of
    `sweepers` such waits when that many live processes reap independently (TimeoutPolicy with
    swept_by="workers", no rate limit). Mean T - d + S/2 in the basic model; bounds [T - d, T - d + S].
    """
    if not 0 <= crash_after < timeout:
        raise ValueError("crash_after must be in [0, timeout)")
    eps = resolution
    _, back = one_way(rtt, resolution)
    P = sweep_period(scan, rtt, resolution)
    base = _on_grid(timeout, resolution) + eps - _on_grid(crash_after, resolution) - back
    return Latency(mean=base + _mean_min_wait(P, sweepers, resolution), lo=base, hi=base + P - eps)


# -- the basic model's latency CDFs (for drawing beside empirical CDFs) --------------------------------------
def uniform_sum_cdf(t: np.ndarray, a: float, b: float) -> np.ndarray:
    """CDF of U(0, a) + U(0, b) at `t` (either width may be 0)."""
    t = np.asarray(t, dtype=float)
    a, b = min(a, b), max(a, b)
    if a <= 0:
        return np.clip(t / b, 0.0, 1.0) if b > 0 else (t >= 0).astype(float)
    out = np.where(t <= a, t**2 / (2 * a * b), (2 * t - a) / (2 * b))
    out = np.where(t >= b, 1 - (a + b - t) ** 2 / (2 * a * b), out)
    return np.clip(np.where(t <= 0, 0.0, np.where(t >= a + b, 1.0, out)), 0.0, 1.0)


def lease_latency_cdf(lease: float, beat: float, scan: float) -> Callable[[np.ndarray], np.ndarray]:
    """The basic model's CDF of a crash's detection latency under a lease (no rtt, continuous clock; the
    engine's exact mean and range are `lease_detection`): T_D = (L - u) + v, u ~ U(0, B), v ~ U(0, S)."""
    return lambda t: uniform_sum_cdf(np.asarray(t) - (lease - beat), beat, scan)


def timeout_latency_cdf(timeout: float, scan: float, die_within: float) -> Callable[[np.ndarray], np.ndarray]:
    """The basic model's CDF of the detection latency under a timeout when the worker dies d ~ U(0, die_within)
    into the job (no rtt, continuous clock; exact values: `timeout_detection`): T_D = (T - d) + v, v ~ U(0, S)."""
    return lambda t: uniform_sum_cdf(np.asarray(t) - (timeout - die_within), die_within, scan)


# -- timeout: false reclaims of slow but alive jobs --------------------------------------------------------------
def _breakpoints(duration: Distribution) -> list[float]:
    """Where a distribution's survival function jumps or kinks (for the quadrature)."""
    points: list[float] = []
    for name in ("value", "low", "high"):
        x = getattr(duration, name, None)
        if isinstance(x, int | float):
            points.append(float(x))
    values = getattr(duration, "values", None)
    if isinstance(values, tuple):
        points.extend(float(v) for v in values)
    return points


def timeout_false_reclaim_probability(
    duration: Distribution,
    timeout: float,
    scan: float,
    *,
    sweepers: int = 1,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> float:
    """P(a live job is reclaimed by the timeout reaper), for job durations with survival G.

    Basic model: G(T). This model: the job is reclaimed only if a sweep lands while it is over age and still
    active, a window of w = D - T' with T' = T - rtt + eps (the take is `back` before the start, the finish
    reaches Redis h after the end); a sweep of period P = scan + rtt hits it with probability min(1, w/P).
    So P(false reclaim) = (1/P) * integral of G over [T', T' + P]: G averaged over one sweep period, between
    G(T' + P) and G(T'). With N independent sweepers the hit probability is 1 - (1 - w/P)^N.
    Assumes the job starts at a random phase of the sweeps and that no freeze or crash interrupts it.
    """
    if sweepers < 1:
        raise ValueError(f"sweepers must be >= 1, got {sweepers}")
    T1 = _on_grid(timeout, resolution) - _on_grid(rtt, resolution) + resolution
    P = sweep_period(scan, rtt, resolution)

    def weight(w: float) -> float:  # density of the window length at which the sweeps are first hit
        return sweepers * (1 - w / P) ** (sweepers - 1) / P

    from scipy import integrate  # here, not at the top: importing scipy.integrate costs every command ~0.5 s

    points = [x - T1 for x in _breakpoints(duration) if 0 < x - T1 < P]
    value, _ = integrate.quad(
        lambda w: weight(w) * duration.survival(T1 + w), 0.0, P, points=points or None, limit=200
    )
    return float(min(1.0, max(0.0, value)))


# -- lease: a frozen (stop-the-world) worker -----------------------------------------------------------------------
def freeze_lapses(lease: float, since_renewal: float, freeze: float, *, resolution: float = MS) -> bool:
    """A freeze of `freeze` s starting `since_renewal` = u s after the worker SENT the request that last set its
    lock lapses the lock iff u + freeze > L (strictly; equality still finds the lock, on the ms grid).

    On resume the overdue tick sends a renewal that reaches Redis h after the resume, while the lock set h
    after the last send lives through L: the two h cancel. The take counts as a send `rtt` before the start.
    """
    if resolution > 0:
        return _ticks(since_renewal, resolution) + _ticks(freeze, resolution) > _ticks(lease, resolution)
    return since_renewal + freeze > lease


def freeze_lapse_probability(
    lease: float,
    renewal: float | RenewalRule,
    freeze: float,
    *,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> float:
    """P(lapse) for a freeze of length F starting u ~ U(eps..B) after the last renewal's send (docs/theory.md 5):
    (#{u in (R, B]: u > L - F} + #{u in (0, R]: u > L - F - T}) / B with R = rtt for a timer that sleeps a
    tick T after reading the reply (BullMQ: a freeze before the reply is read renews a tick later), else
    clip((F - (L - B)) / B, 0, 1): never below L - B, always from L on. Exact on the ms grid
    (tests/test_freeze_exact.py); resolution=0 takes every tick after such a resume as due."""
    one = np.array([freeze], dtype=float)
    return float(freeze_lapse_probabilities(lease, renewal, one, rtt=rtt, resolution=resolution)[0])


def freeze_lapse_probabilities(
    lease: float,
    renewal: float | RenewalRule,
    freezes: np.ndarray,
    *,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> np.ndarray:
    """`freeze_lapse_probability` of every freeze in `freezes` at once (tune averages thousands of sampled
    pauses per candidate): the scalar calls it, so the floats are the same; on the grid, count / B in ticks."""
    rule, F = _rule(renewal), np.asarray(freezes, dtype=float)
    B = renewal_period(renewal, rtt=rtt, resolution=resolution)
    L, r, T, M = float(lease), float(rtt), rule.tick, rule.min_age
    if resolution > 0:  # whole ticks (Python's round and np.round both round half to even)
        L, B, r, T, M = (float(_ticks(x, resolution)) for x in (L, B, r, T, M))
        F, M = np.round(F / resolution), M if rule.strict else M - 1  # `>=` min_age: `>` one tick before
    if not rule.after_reply or r <= 0:
        return np.clip((F - (L - B)) / B, 0.0, 1.0)
    late = np.clip(B - np.maximum(r, L - F), 0.0, B - r)  # u in (r, B]: lapses iff u + F > L
    if resolution <= 0 or r + T > M:  # every tick from the resume on finds the job due
        return (late + np.clip(r - np.maximum(0.0, L - F - T), 0.0, r)) / B  # u <= r: iff u + F + T > L
    x = np.maximum(r, np.arange(1.0, r + 1.0)[None, :] + F[:, None]) + T  # the resume's tick comes before
    due = np.where(x > M, x, x + (np.floor((M - x) / T) + 1.0) * T)  # min_age: the first due one is later
    return (late + (due > L).sum(axis=1)) / B


def _clipped_ramp_mean(lo: float, hi: float, shift: float, P: float, resolution: float) -> float:
    """Mean of clip((u + shift) / P, 0, 1) for u uniform on the grid lo..hi (continuous if resolution=0)."""
    if resolution > 0:
        u = np.arange(_ticks(lo, resolution), _ticks(hi, resolution) + 1) * resolution
        return float(np.mean(np.clip((u + shift) / P, 0.0, 1.0)))

    def antiderivative(x: float) -> float:  # of clip(x / P, 0, 1)
        if x <= 0:
            return 0.0
        return x * x / (2 * P) if x <= P else P / 2 + (x - P)

    return (antiderivative(hi + shift) - antiderivative(lo + shift)) / (hi - lo)


def freeze_false_reclaim_probability(
    lease: float,
    renewal: float | RenewalRule,
    scan: float,
    freeze: float,
    *,
    recreate_missing: bool = False,
    two_phase: bool = True,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> float:
    """P(the frozen worker's job is reclaimed), freeze of F s at a uniformly random moment, reaper sweeping.

    Token-checked renewal (BullMQ, EchoMQ): a lapsed lock is never renewed again, the job is reclaimed at the
    next sweep that finds it marked (exactly as if the worker had crashed when the freeze began), so
    P = P(lapse). With `recreate_missing` the resume renewal sets the lock again: the lock is missing for
    u + F - L (its last millisecond is a tie with the resume renewal, counted half), and only a sweep inside
    that window reclaims the job; a two-phase sweep must also have marked it, which removes the first
    (P - L)+ of the window. P = E_u[clip((u + F - L - eps/2 - (P - L)+) / P, 0, 1)].
    """
    if not recreate_missing:
        return freeze_lapse_probability(lease, renewal, freeze, rtt=rtt, resolution=resolution)
    L = _on_grid(lease, resolution)
    F = _on_grid(freeze, resolution)
    B = renewal_period(renewal, rtt=rtt, resolution=resolution)
    P = sweep_period(scan, rtt, resolution)
    shift = F - L - resolution / 2 - (max(0.0, P - L) if two_phase else 0.0)
    return _clipped_ramp_mean(resolution if resolution > 0 else 0.0, B, shift, P, resolution)


# -- lease: lost renewals -------------------------------------------------------------------------------------------
def losses_to_lapse(
    lease: float,
    renewal: float | RenewalRule,
    *,
    rtt: float = DEFAULT_RTT,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    resolution: float = MS,
) -> int:
    """k*: the fewest consecutive lost renewals that lapse a lock (steady state).

    After a success, k losses put the next successful send B + k * B_lost later (B_lost =
    renewal_period_after_loss); it still finds the lock iff B + k * B_lost <= L (the h's cancel). So
    k* = floor((L - B) / B_lost) + 1: fixed rate floor(L / B) (30/10: two losses survive, three lapse, the
    third-after renewal arriving exactly at the expiry millisecond still finds the lock); after reply
    floor((L - rtt - tick) / (command_timeout + tick)) + 1 for BullMQ's rule.
    The very first renewal after a take can lapse with one loss fewer (the take's lock is up to rtt older).
    """
    L = _on_grid(lease, resolution)
    B = renewal_period(renewal, rtt=rtt, resolution=resolution)
    Bl = renewal_period_after_loss(renewal, rtt=rtt, command_timeout=command_timeout, resolution=resolution)
    if B > L:
        return 0
    if resolution > 0:
        return (_ticks(L, resolution) - _ticks(B, resolution)) // _ticks(Bl, resolution) + 1
    return math.floor((L - B) / Bl) + 1


def lapse_probability_per_window(loss: float, losses: int) -> float:
    """P(the k* renewals after a given successful one are all lost) = p^k* (independent losses)."""
    return float(loss**losses)


def run_probability(trials: int, run: int, p: float) -> float:
    """P(at least one run of >= `run` consecutive failures among `trials` independent trials), failure prob p.

    Exact recursion on the length of the current run of failures.
    """
    if run <= 0:
        return 1.0
    if trials < run:
        return 0.0
    state = np.zeros(run)  # state[i]: no long run yet, current run of failures has length i
    state[0] = 1.0
    hit = 0.0
    for _ in range(trials):
        new = np.zeros(run)
        new[0] = (1 - p) * state.sum()
        new[1:] = p * state[:-1]
        hit += p * state[-1]
        state = new
    return float(hit)


def lost_renewal_lapse_probability(
    lease: float,
    renewal: float | RenewalRule,
    duration: float,
    loss: float,
    *,
    rtt: float = DEFAULT_RTT,
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
    resolution: float = MS,
    skipped: float = 0.0,
) -> float:
    """P(a job of `duration` s loses its lock) when each renewal is lost independently with probability p.

    The lock lapses iff two consecutive successful lock touches are more than L apart (their sends), where the
    touches are the take (sent rtt before the start), the renewals that got through, and the finish (sent at
    the end; rejected if the lock is gone). Exact dynamic programme over the timer's ticks as the engine runs
    them (fixed rate: next tick max(schedule + tick, reply); after reply: reply + tick; a lost request's
    "reply" is its command timeout), averaged over the timer's phase (first tick U(1..tick) ms after the
    start). About run_probability(D / B, k*, p) for long jobs. With token-checked renewal every lapse
    becomes a false reclaim. `skipped` (`Network.skipped_ticks`): each due tick first renews nothing with
    that probability (no request, `ts` kept, the next tick one tick later); a live worker with loss = 0
    lapses only on k consecutive skips with B + k tick > L (3 for BullMQ's rule).
    """
    if resolution <= 0:
        raise ValueError("lost_renewal_lapse_probability works on the clock grid: resolution must be > 0")
    if not (0 <= loss < 1 and 0 <= skipped < 1):
        raise ValueError(f"loss and skipped must be in [0, 1), got {loss} and {skipped}")
    rule = _rule(renewal)
    L, D, R, C = (_ticks(x, resolution) for x in (lease, duration, rtt, command_timeout))
    tick, min_age = _ticks(rule.tick, resolution), _ticks(rule.min_age, resolution)
    if not rule.after_reply and tick <= R:
        raise ValueError("a fixed-rate timer needs rtt < tick")
    phase = np.arange(1, tick + 1)  # the first tick after the start, uniform
    # A state is (tick time, schedule, last attempt `ts`, last successful send), as offsets from the phase;
    # ts None is the start (0), last None is the take (sent at -rtt).
    State = tuple[int, int, int | None, int | None]
    pending: dict[State, np.ndarray] = {(0, 0, None, None): np.ones(tick)}
    order: list[tuple[int, int, State]] = [(0, 0, (0, 0, None, None))]
    counter = 0
    survived = np.zeros(tick)

    def push(state: State, mass: np.ndarray) -> None:
        nonlocal counter
        if not mass.any():
            return
        if state in pending:
            pending[state] += mass
        else:
            pending[state] = mass
            counter += 1
            heapq.heappush(order, (state[0], counter, state))

    while order:
        _, _, state = heapq.heappop(order)
        mass = pending.pop(state)
        xo, so, tso, lo = state
        x = phase + xo
        last = -R if lo is None else phase + lo
        ts = 0 if tso is None else phase + tso
        ended = x >= D  # the finish was sent first: a tick at the end finds the job finished
        survived += np.where(ended & (D - last <= L), mass, 0.0)
        live = ~ended & (x - last <= L)  # else the lock is already gone
        due = (x - ts > min_age) if rule.strict else (x - ts >= min_age)
        idle = np.where(live & ~due, mass, 0.0)
        sent = np.where(live & due, mass, 0.0)
        idle, sent = idle + skipped * sent, (1 - skipped) * sent  # a skipped due tick sends nothing
        if rule.after_reply:
            push((xo + tick, 0, tso, lo), idle)
            push((xo + R + tick, 0, xo, xo), sent * (1 - loss))
            push((xo + C + tick, 0, xo, lo), sent * loss)
        else:
            push((max(so + tick, xo), so + tick, tso, lo), idle)
            push((max(so + tick, xo + R), so + tick, xo, xo), sent * (1 - loss))
            push((max(so + tick, xo + C), so + tick, xo, lo), sent * loss)
    return float(1.0 - survived.mean())


# -- lease: a blocked event loop, a connection outage --------------------------------------------------------------
def block_lapses(lease: float, since_renewal: float, block: float, *, resolution: float = MS) -> bool:
    """A blocked event loop of X s starting u s after the worker SENT the request that last set its lock
    lapses the lock iff u + X > L: the same rule as a freeze, because no renewal leaves while the loop is
    blocked and the overdue tick fires as it frees. What differs is the job: its work went on, so the run
    that loses its lock is a live, working one (and its finish is rejected)."""
    return freeze_lapses(lease, since_renewal, block, resolution=resolution)


def block_lapse_probability(
    lease: float,
    renewal: float | RenewalRule,
    block: float,
    *,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> float:
    """P(lapse) for a block of X s at a uniformly random moment: the freeze count (clip((X - (L - B)) / B, 0, 1),
    plus up to rtt/B for an after-reply timer). Never for X <= L - B (`block_safe_limit`), always for X > L."""
    return freeze_lapse_probability(lease, renewal, block, rtt=rtt, resolution=resolution)


def block_safe_limit(
    lease: float, renewal: float | RenewalRule, *, rtt: float = DEFAULT_RTT, resolution: float = MS
) -> float:
    """The longest block that never lapses the lease once renewals run on their period: L - B. The tuning
    answer for a job that blocks for up to X s: a lease of at least X + B (for BullMQ's rule, B =
    lockDuration/4: lockDuration >= 4X/3). Early in a job the margin is smaller: BullMQ renews a lock only once
    it is older than one tick, checked once per tick, so the first renewal can come up to two ticks after the
    take, and a block that starts before it can lapse the lock sooner (notebook 03 shows it)."""
    return _on_grid(lease, resolution) - renewal_period(renewal, rtt=rtt, resolution=resolution)


def reconnect_time(outage: float) -> float:
    """Seconds from a disconnect until the client is connected again when the network is back after
    `outage` s: the first of BullMQ's reconnect attempts (`max(min(e^n, 20000), 1000)` ms apart) at or
    after the outage's end. 1 s steps up to 6 s, then 7.096, 10.076, 18.179, 38.179 s and every 20 s."""
    return reconnect_after_ms(to_ms(outage)) / 1000


def outage_lapses(lease: float, since_renewal: float, outage: float, *, resolution: float = MS) -> bool:
    """A connection outage of D s starting u s after the worker SENT its last lock-setting request lapses
    the lock iff u + R(D) > L, with R(D) = `reconnect_time(D)`: renewals wait in the offline queue (or are
    resent) and the first reaches Redis half a round trip after the reconnect, like the overdue renewal
    after a freeze of R(D). So a 15 s outage counts as an 18.179 s freeze, not as 15 lost 1 s beats."""
    return freeze_lapses(lease, since_renewal, reconnect_time(outage), resolution=resolution)


def outage_lapse_probability(
    lease: float,
    renewal: float | RenewalRule,
    outage: float,
    *,
    rtt: float = DEFAULT_RTT,
    resolution: float = MS,
) -> float:
    """P(lapse) for a connection outage of D s at a uniformly random moment: the freeze formula at R(D)."""
    return freeze_lapse_probability(lease, renewal, reconnect_time(outage), rtt=rtt, resolution=resolution)
