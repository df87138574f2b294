"""The candidate settings and their closed-form predictions: build them, predict each one's metrics from
emqsim.analytic, and prune what cannot meet a limit before any run."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from emqsim import analytic
from emqsim.distributions import (
    Distribution,
    Fixed,
    LogNormal,
)
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import preset
from emqsim.tune.inputs import PRUNE_FACTOR, TIMEOUT_SCAN, Limits, SearchSpace, Workload
from emqsim.units import to_ms


@dataclass
class Metric:
    """An estimate and its interval (None where no honest interval exists)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None


@dataclass
class Candidate:
    """One setting: its closed-form predictions, its simulated metrics and what the search decided."""

    kind: Literal["lease", "timeout", "detector"]
    lease: float | None = None
    beat: float | None = None
    scan: float = 5.0
    timeout: float | None = None
    preset: str | None = None
    predicted: dict[str, float | None] = field(default_factory=dict)
    replications: int = 0
    metrics: dict[str, Metric] = field(default_factory=dict)
    status: str = "open"  # open, pruned, fails, beaten, feasible
    reason: str = ""
    custom: ReclaimPolicy | None = None  # a user's detector (kind "detector"): measured, never predicted

    @classmethod
    def of_detector(cls, policy: ReclaimPolicy) -> Candidate:
        """A user's detector as a candidate: simulated on the search's seeds, with no closed form."""
        return cls("detector", scan=policy.settings()["scan"], custom=policy)

    @property
    def lease_s(self) -> float:
        """The lease in seconds (lease candidates only)."""
        assert self.lease is not None, "a timeout candidate has no lease"
        return self.lease

    @property
    def beat_s(self) -> float:
        """The heartbeat in seconds (lease candidates only)."""
        assert self.beat is not None, "a timeout candidate has no heartbeat"
        return self.beat

    @property
    def timeout_s(self) -> float:
        """The fixed timeout in seconds (timeout candidates only)."""
        assert self.timeout is not None, "a lease candidate has no timeout"
        return self.timeout

    def policy(self) -> ReclaimPolicy:
        if self.custom is not None:
            return self.custom
        if self.kind == "timeout":
            return TimeoutPolicy(self.timeout_s, self.scan)
        if self.preset == "bullmq":
            return preset("bullmq", lease=self.lease, scan=self.scan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LeaseWarning)
            return LeasePolicy(self.lease_s, self.beat_s, self.scan)

    def label(self) -> str:
        if self.custom is not None:
            return repr(self.custom)
        if self.kind == "timeout":
            return f"timeout {self.timeout:g} s, scan {self.scan:g} s"
        return f"lease {self.lease:g} s, beat {self.beat:g} s, scan {self.scan:g} s"

    def settings(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "lease": self.lease,
            "beat": self.beat,
            "scan": self.scan,
            "timeout": self.timeout,
            **({"detector": repr(self.custom)} if self.custom is not None else {}),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.settings(),
            "preset": self.preset,
            "status": self.status,
            "reason": self.reason,
            "replications": self.replications,
            "predicted": dict(self.predicted),
            "metrics": {k: asdict(m) for k, m in self.metrics.items()},
        }


def _typical_rtt(rtt: Distribution) -> float:
    """The round trip the closed forms use (they take a fixed one): the median, on the ms grid, >= 1 ms."""
    if isinstance(rtt, Fixed):
        value = rtt.value
    elif isinstance(rtt, LogNormal):
        value = rtt.median
    else:
        rng = np.random.default_rng(np.random.SeedSequence(20240))
        value = float(np.median(rtt.sample(rng, 4001)))
    return max(analytic.MS, round(value, 3))


def _outage_sample(w: Workload) -> np.ndarray:
    """A fixed sample of outage lengths for the closed-form averages (deterministic; empty without outages)."""
    if w.outage_rate <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(np.random.SeedSequence(20242))
    return np.asarray(w.outage_length.sample(rng, 1000), dtype=float)


def _pause_sample(w: Workload) -> np.ndarray:
    """A fixed sample of pause lengths for the closed-form averages (deterministic)."""
    rng = np.random.default_rng(np.random.SeedSequence(20241))
    return np.asarray(w.pause_length.sample(rng, 4000), dtype=float)


def build_candidates(space: SearchSpace) -> list[Candidate]:
    out: list[Candidate] = []
    for lease in space.leases:
        for scan in space.scans:
            if space.preset == "bullmq":
                out.append(Candidate("lease", lease, round(lease / 4, 3), scan, preset="bullmq"))
                continue
            for ratio in space.beat_ratios:
                beat = round(lease / ratio, 3)
                if beat >= 0.001:
                    out.append(Candidate("lease", lease, beat, scan))
    out.extend(Candidate("timeout", scan=TIMEOUT_SCAN, timeout=t) for t in space.timeouts)
    return out


def predict(
    c: Candidate, w: Workload, limits: Limits, pauses: np.ndarray, outages: np.ndarray | None = None
) -> None:
    """Closed-form predictions (emqsim.analytic) for one candidate, with a fixed round trip."""
    rtt = _typical_rtt(w.rtt)
    jobs_per_hour = w.rate * 3600
    if c.kind == "timeout":
        p = analytic.timeout_false_reclaim_probability(w.duration, c.timeout_s, c.scan, rtt=rtt)
        lat = analytic.timeout_detection(c.timeout_s, c.scan, 0.0, rtt=rtt)
        c.predicted = {
            "requests_per_s": 1 / (c.scan + rtt) + 2 * w.rate,
            "requests_per_s_at_least": 1 / (c.scan + rtt),
            "false_reclaims_per_job": p,
            "false_reclaims_per_hour": p * jobs_per_hour,
            "detection_mean_at_most": lat.mean,
            "detection_lo": 0.0,
            "detection_hi": lat.hi,
        }
        return
    policy = c.policy()
    rule = policy.renewal
    assert rule is not None  # a lease candidate's policy renews
    two_phase = getattr(policy, "two_phase", True)
    B = analytic.renewal_period(rule, rtt=rtt)
    lat = analytic.lease_detection(
        c.lease_s, rule, c.scan, two_phase=two_phase, swept_by=policy.swept_by, rtt=rtt
    )
    lapse = float(np.mean(analytic.freeze_lapse_probabilities(c.lease_s, rule, pauses, rtt=rtt)))
    pauses_per_job = w.pause_rate / 3600 * w.duration.mean()
    per_job = pauses_per_job * lapse
    if w.loss > 0:
        k = analytic.losses_to_lapse(c.lease_s, rule, rtt=rtt, command_timeout=w.command_timeout)
        per_job += w.duration.mean() / B * w.loss**k  # windows per job x P(k* losses in a row)
    outage_lapse = 0.0
    if w.outage_rate > 0:
        outage_lapse = float(
            np.mean(
                [
                    analytic.outage_lapse_probability(c.lease_s, rule, d, rtt=rtt)
                    for d in (_outage_sample(w) if outages is None else outages)
                ]
            )
        )
        per_job += w.outage_rate / 3600 * w.duration.mean() * outage_lapse
    G = analytic.first_renewal_gap(rule, rtt=rtt)
    h = analytic.one_way(rtt)[0]
    Bl = analytic.renewal_period_after_loss(rule, rtt=rtt, command_timeout=w.command_timeout)
    sweeps = w.workers / (c.scan + rtt) if policy.swept_by == "workers" else 1 / (c.scan + rtt)
    c.predicted = {
        "requests_per_s": sweeps + _busy_workers(w) / B + 2 * w.rate,
        "requests_per_s_at_least": sweeps * _alive_fraction(w),
        "false_reclaims_per_job": per_job,
        "false_reclaims_per_hour": per_job * jobs_per_hour,
        "detection_mean": lat.mean,
        "detection_mean_exact": float(lat.mean_exact),
        "detection_lo": lat.lo,
        "detection_hi": lat.hi,
        "detection_p99_at_least": _p99_lower_bound(c.lease_s, B, c.scan, rtt, two_phase),
        "renewal_period": B,
        "pause_lapse_probability": lapse,
        "pause_safe_up_to": c.lease_s - B,
        "outage_lapse_probability": outage_lapse,
        "outage_safe_up_to": longest_safe_outage(c.lease_s - B - h),
        # before the job's first renewal the lock was last set by the take, up to G before (G >= B)
        "first_renewal_gap": G,
        "pause_safe_up_to_first": c.lease_s - G,
        "outage_safe_up_to_first": longest_safe_outage(c.lease_s - G - h),
        "losses_to_lapse_first": (to_ms(c.lease_s) - to_ms(G)) // to_ms(Bl) + 1 if c.lease_s >= G else 0,
        "detection_lo_first": lat.lo + B - G,
    }


def longest_safe_outage(margin: float) -> float:
    """The longest connection outage whose reconnect (BullMQ's backoff, analytic.reconnect_time) comes at most
    `margin` after the disconnect (ms resolution): with `margin` = lease - B - h it never lapses the lease
    (a renewal sent less than h, half a round trip, before the outage is lost with the connection, so the lock
    can have been set B + h before it)."""
    lo, hi = 0, to_ms(max(margin, 0.0))
    if analytic.reconnect_time(0.001) > margin:
        return 0.0
    while lo < hi:  # reconnect_time is non-decreasing in the outage's length
        mid = (lo + hi + 1) // 2
        if analytic.reconnect_time(mid / 1000) <= margin:
            lo = mid
        else:
            hi = mid - 1
    return lo / 1000


def _alive_fraction(w: Workload) -> float:
    """The fraction of time a worker is up: a crash takes it down for `restart_after` seconds."""
    return 1 / (1 + w.crash_rate / 3600 * w.restart_after)


def _busy_workers(w: Workload) -> float:
    """Workers holding at least one job, on average (slots busy as Poisson arrivals, capped at the fleet)."""
    per_worker = min(w.rate * w.duration.mean() / w.workers, float(w.concurrency))
    return w.workers * (1 - math.exp(-per_worker))


def _p99_lower_bound(
    lease: float, B: float, scan: float, rtt: float, two_phase: bool, q: float = 0.99
) -> float:
    """The q-quantile of L' + h - u + W (u ~ U(0, B), W ~ U(0, P)): the reaper's detection latency; workers
    sweeping only delay it (a dead sweeper's hand-over removes sweeps), so it is a lower bound."""
    P = scan + rtt
    L2 = max(lease, P) if two_phase else lease
    h = analytic.one_way(rtt)[0]
    a, b = min(B, P), max(B, P)  # X = (B - u) + W ~ U(0, B) + U(0, P); T_D = L2 + h - B + X

    def cdf(t: float) -> float:
        if t <= 0:
            return 0.0
        if t >= a + b:
            return 1.0
        if t <= a:
            return t * t / (2 * a * b)
        if t <= b:
            return (2 * t - a) / (2 * b)
        return 1 - (a + b - t) ** 2 / (2 * a * b)

    lo, hi = 0.0, a + b
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return L2 + h - B + hi


def prune(c: Candidate, limits: Limits) -> None:
    """Rule out, from the closed forms, what cannot meet a limit (a margin covers the random round trip)."""
    if limits.detection is not None:
        margin = 1.05 * limits.detection + 0.05
        if limits.detection_stat == "mean":
            bound = c.predicted.get("detection_mean", c.predicted.get("detection_lo"))
        else:
            bound = c.predicted.get("detection_p99_at_least", c.predicted.get("detection_lo"))
        if c.kind == "timeout":
            bound = None  # a timeout's detection depends on when in the job the crash comes: simulate it
        if bound is not None and bound > margin:
            c.status = "pruned"
            c.reason = f"closed form: detection {limits.detection_stat} at least {bound:.2f} s > limit {limits.detection:g} s"
            return
    if limits.requests_per_s is not None:
        floor = 0.9 * (c.predicted["requests_per_s_at_least"] or 0.0)
        if floor > limits.requests_per_s:
            c.status = "pruned"
            c.reason = (
                f"closed form: sweeps alone send {floor:.3g} requests/s > budget {limits.requests_per_s:g}"
            )
            return
    if limits.false_reclaims is not None:
        key = f"false_reclaims_per_{limits.false_reclaims_per}"
        predicted = c.predicted.get(key)
        if predicted is not None and predicted > PRUNE_FACTOR * limits.false_reclaims:
            c.status = "pruned"
            c.reason = (
                f"closed form: {predicted:.3g} false reclaims per {limits.false_reclaims_per}, "
                f"over {PRUNE_FACTOR:g}x the limit {limits.false_reclaims:g}"
            )
