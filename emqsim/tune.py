"""Tune lease, beat and sweep interval from a team's own measurements (`python -m emqsim tune`).

Input: a `Workload` (job durations, pauses, crashes, network, fleet) and `Limits` (false reclaims per job or
per hour, detection latency mean or p99, a Redis request budget). Output: the settings with the fastest
detection that meet every limit at the requested confidence, with intervals, the Pareto frontier, the best
fixed timeout for comparison, why the runner-up lost and what would change the answer (docs/tune.md).

How the search works:
  1. candidates: lease x beat (lease/ratio) x sweep interval (or BullMQ's rules with `preset="bullmq"`), and
     fixed timeouts for comparison;
  2. closed forms (emqsim.analytic) prune what cannot meet a limit: a detection-latency lower bound over the
     limit, or a predicted false-reclaim rate from pauses (freeze_lapse_probability) far over the limit;
     they also give each candidate's predicted metrics;
  3. racing on the simulator: every candidate left runs `min_replications`; then the leader (fastest decided
     feasible) and its contenders get more replications, all on the same seeds (common random numbers:
     a run's seeds derive from (seed, replication) only), until every contender is either decided
     infeasible or decided not better than the leader by more than the indifference margin, or reaches
     `max_replications`;
  4. verification on fresh seeds: the race's best runs again on a root seed the search never used,
     sequentially (`verify_on_fresh_seeds`), and gives way to the next decided-feasible setting if it is not
     confirmed. The work is bounded: at most candidates x max_replications + 3 x verify_max runs, stated up
     front.

Intervals (the replication is the unit; one function each, see `rate_interval`, `ratio_interval`,
`paired_interval`, `bootstrap_interval`):
  rates      false reclaims: quasi-Poisson Garwood interval, dispersion measured from the per-run counts;
             no event in any run: the Poisson bound on the exposure divided by the largest cluster one fault
             can cause (a worker's concurrency: a pause or a lost renewal lapses all of one worker's locks)
  means      detection latency and Redis requests/s: ratio estimator with a cluster-robust t interval
  p99        percentile bootstrap over replications (seeded, so deterministic)
  paired     candidate minus leader on the same seeds: t over per-replication differences (mean) or a
             paired bootstrap (p99)
A limit is met when the upper end of a two-sided interval at level 1 - 2(1 - confidence)/k (k limits,
Bonferroni) is within it: the k one-sided bounds then hold together at `confidence`.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from emqsim import analytic, distributions
from emqsim.distributions import (
    Distribution,
    Empirical,
    Exponential,
    Fixed,
    LogNormal,
    Uniform,
)
from emqsim.errors import ConfigError
from emqsim.faults import Network, RandomFaults
from emqsim.policies import LeasePolicy, LeaseWarning, ReclaimPolicy, TimeoutPolicy
from emqsim.pools import batches, owned_pool, result_of, submit_all, wait_some
from emqsim.presets import preset
from emqsim.scenario import Scenario
from emqsim.stats import RunSummary
from emqsim.sweep import run_batch
from emqsim.units import to_ms

DEFAULT_LEASES = (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0)
DEFAULT_BEAT_RATIOS = (2.0, 3.0, 5.0)
DEFAULT_SCANS = (1.0, 2.0, 5.0, 10.0, 15.0, 30.0)
DEFAULT_TIMEOUTS = (30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
TIMEOUT_SCAN = 5.0  # the timeout reaper's scan, as in the standard timeout policy
PRUNE_FACTOR = 10.0  # prune a candidate whose closed-form false-reclaim rate is this many times the limit
VERIFY_SEED_OFFSET = 1_000_003  # fresh seeds for the verification runs
# settings verified on fresh seeds at most: the race's best, then up to two more decided-feasible ones
VERIFY_CANDIDATES = 3


# -- what a team measures ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """What a team can measure about its own system (seconds; rates per worker-hour).

    pause_*    stop-the-world pauses (GC, SIGSTOP, a blocked event loop) as a Poisson process per worker;
               another kind of pause is one more pair of fields here and one line in `_random_faults`
    loss       the probability that one renewal is lost (independent drops, timeouts)
    outage_*   connection outages (a Poisson process per worker): commands wait for the reconnect, which
               BullMQ's backoff delays past the outage's end (analytic.reconnect_time)
    jobs       jobs per simulated run; arrival_rate None means half the fleet's capacity
    """

    duration: Distribution = LogNormal(20.0, 1.5)
    workers: int = 4
    concurrency: int = 2
    jobs: int = 100
    arrival_rate: float | None = None
    crash_rate: float = 2.0
    restart_after: float = 5.0
    pause_rate: float = 6.0
    pause_length: Distribution = LogNormal(0.5, 1.0)
    rtt: Distribution = LogNormal(0.002, 0.5)
    loss: float = 0.0
    command_timeout: float = 1.0
    outage_rate: float = 0.0
    outage_length: Distribution = LogNormal(2.0, 1.0)
    horizon: float = 4 * 3600.0

    def __post_init__(self) -> None:
        for name in ("workers", "concurrency", "jobs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"workload {name} must be a whole number >= 1, got {value!r}")
        for name in ("crash_rate", "pause_rate", "restart_after", "outage_rate"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"workload {name} must be a number >= 0, got {value!r}")
        if not self.crash_rate > 0:
            raise ConfigError(
                "workload crash_rate must be > 0 crashes per worker-hour: with no crashes there is nothing to "
                "detect (give your best estimate, e.g. 0.5)"
            )
        if self.arrival_rate is not None and not (math.isfinite(self.arrival_rate) and self.arrival_rate > 0):
            raise ConfigError(f"workload arrival_rate must be > 0 jobs per second, got {self.arrival_rate!r}")
        if not 0 <= self.loss < 1:
            raise ConfigError(f"workload loss must be a probability in [0, 1), got {self.loss!r}")
        if not (math.isfinite(self.horizon) and self.horizon > 0):
            raise ConfigError(f"workload horizon must be > 0 seconds, got {self.horizon!r}")

    @property
    def rate(self) -> float:
        """Jobs per second arriving (default: half of what the fleet can run)."""
        if self.arrival_rate is not None:
            return self.arrival_rate
        return 0.5 * self.workers * self.concurrency / max(self.duration.mean(), 1e-3)

    def scenario(self) -> Scenario:
        return Scenario(
            name="tune",
            workers=self.workers,
            concurrency=self.concurrency,
            jobs=self.jobs,
            arrival_rate=self.rate,
            duration=self.duration,
            random_faults=_random_faults(self),
            network=Network(rtt=self.rtt, loss=self.loss, command_timeout=self.command_timeout),
            horizon=self.horizon,
        )


def _random_faults(w: Workload) -> RandomFaults:
    """The workload's faults as the engine's per-worker Poisson processes (the one place to map new kinds)."""
    return RandomFaults(
        crash_rate=w.crash_rate,
        restart_after=w.restart_after,
        freeze_rate=w.pause_rate,
        freeze_duration=w.pause_length,
        outage_rate=w.outage_rate,
        outage_duration=w.outage_length,
    )


@dataclass(frozen=True)
class Limits:
    """The team's objectives: None means no limit. Detection latency is minimised subject to the rest."""

    false_reclaims: float | None = 0.01
    false_reclaims_per: Literal["job", "hour"] = "job"
    detection: float | None = None
    detection_stat: Literal["mean", "p99"] = "mean"
    requests_per_s: float | None = None
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.false_reclaims_per not in ("job", "hour"):
            raise ConfigError(
                f"false reclaims are counted per 'job' or per 'hour', got {self.false_reclaims_per!r}"
            )
        if self.detection_stat not in ("mean", "p99"):
            raise ConfigError(f"the detection statistic is 'mean' or 'p99', got {self.detection_stat!r}")
        for name in ("false_reclaims", "detection", "requests_per_s"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int | float) and math.isfinite(value) and value > 0
            ):
                raise ConfigError(f"limit {name} must be a number > 0, got {value!r}")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"confidence must be in [0.5, 1), e.g. 0.95, got {self.confidence!r}")

    @property
    def count(self) -> int:
        return sum(v is not None for v in (self.false_reclaims, self.detection, self.requests_per_s))

    @property
    def level(self) -> float:
        """Two-sided level whose upper ends hold jointly (Bonferroni over the limits) at `confidence`."""
        return 1 - 2 * (1 - self.confidence) / max(1, self.count)


@dataclass(frozen=True)
class SearchSpace:
    """The settings tried. `preset="bullmq"` keeps BullMQ's rules: the heartbeat ticks at lockDuration/4 (no
    free beat), two-phase sweep by every worker, maxStalledCount 1; then `beat_ratios` is unused."""

    leases: tuple[float, ...] = DEFAULT_LEASES
    beat_ratios: tuple[float, ...] = DEFAULT_BEAT_RATIOS
    scans: tuple[float, ...] = DEFAULT_SCANS
    timeouts: tuple[float, ...] = DEFAULT_TIMEOUTS
    preset: str | None = None
    min_replications: int = 3
    max_replications: int = 30
    indifference: float = 0.05  # relative: a contender within 5% of the leader's detection is not better

    def __post_init__(self) -> None:
        if self.preset not in (None, "bullmq"):
            raise ConfigError(f"tune starts from preset 'bullmq' or from none, got {self.preset!r}")
        if not self.leases or not self.scans:
            raise ConfigError("the search space needs at least one lease and one sweep interval")
        if any(r < 2 for r in self.beat_ratios) or (not self.beat_ratios and self.preset is None):
            raise ConfigError("beat ratios (lease / beat) must be >= 2, e.g. 3: one late beat must not lapse")
        if not 2 <= self.min_replications <= self.max_replications:
            raise ConfigError(
                "replications: need 2 <= min_replications <= max_replications (an interval needs two runs)"
            )
        if not 0 <= self.indifference < 1:
            raise ConfigError(f"indifference must be a fraction in [0, 1), got {self.indifference!r}")


# -- measured durations -------------------------------------------------------------------------------------------
def read_durations(path: str | os.PathLike) -> Empirical:
    """Job durations from a file: one number of seconds per line, or a CSV with a `duration` (seconds) column,
    or BullMQ's `processedOn` and `finishedOn` columns (epoch milliseconds). Blank lines and `#` comments are
    skipped. The same reader as `--duration file:PATH` (`emqsim.distributions.read_durations`)."""
    return distributions.read_durations(Path(path))


def distribution_spec(d: Distribution) -> str:
    """The text `parse_distribution` reads back (for TOML files and reports)."""
    if isinstance(d, Fixed):
        return f"{d.value:g}"
    if isinstance(d, Uniform):
        return f"uniform:{d.low:g}:{d.high:g}"
    if isinstance(d, Exponential):
        return f"exp:{d.mean_value:g}"
    if isinstance(d, LogNormal):
        return f"lognormal:{d.median:g}:{d.sigma:g}"
    if isinstance(d, Empirical):
        return "empirical:" + ",".join(f"{v:g}" for v in d.values)
    raise ConfigError(f"cannot write {d!r} as a distribution spec")


# -- candidates ------------------------------------------------------------------------------------------------
@dataclass
class Metric:
    """An estimate and its interval (None where no honest interval exists)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None


@dataclass
class Candidate:
    """One setting: its closed-form predictions, its simulated metrics and what the search decided."""

    kind: Literal["lease", "timeout"]
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
        if self.kind == "timeout":
            return TimeoutPolicy(self.timeout_s, self.scan)
        if self.preset == "bullmq":
            return preset("bullmq", lease=self.lease, scan=self.scan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LeaseWarning)
            return LeasePolicy(self.lease_s, self.beat_s, self.scan)

    def label(self) -> str:
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
    lapse = float(np.mean([analytic.freeze_lapse_probability(c.lease_s, rule, f, rtt=rtt) for f in pauses]))
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


# -- intervals: the replication is the unit ------------------------------------------------------------------
def _t(level: float, df: int) -> float:
    from scipy import stats as st

    return float(st.t.ppf((1 + level) / 2, df))


def rate_interval(counts: Sequence[float], exposures: Sequence[float], level: float, cluster: int) -> Metric:
    """Events per unit of exposure over replications: a quasi-Poisson Garwood interval whose dispersion is
    measured from the per-run counts (at least 1, inflated by (t/z)^2 for estimating it from few runs). With
    no event in any run: [0, U] with U the Poisson bound -ln((1 - level)/2) on the exposure divided by
    `cluster`, the most events one fault can cause (so U holds even when events come in clusters)."""
    from scipy import stats as st

    x = np.asarray(counts, dtype=float)
    n = np.asarray(exposures, dtype=float)
    total, exposure = float(x.sum()), float(n.sum())
    if exposure <= 0 or len(x) < 2:
        return Metric(total / exposure if exposure > 0 else None)
    alpha = 1 - level
    if total == 0:
        return Metric(0.0, 0.0, -math.log(alpha / 2) * max(1, cluster) / exposure)
    rate = total / exposure
    expected = rate * n
    keep = expected > 0
    phi = float(((x[keep] - expected[keep]) ** 2 / expected[keep]).sum()) / (len(x) - 1)
    phi = max(phi, 1.0) * (_t(level, len(x) - 1) / float(st.norm.ppf(1 - alpha / 2))) ** 2
    k, e = total / phi, exposure / phi
    lo = float(st.chi2.ppf(alpha / 2, 2 * k)) / 2 / e
    hi = float(st.chi2.ppf(1 - alpha / 2, 2 * k + 2)) / 2 / e
    return Metric(rate, lo, hi)


def ratio_interval(sums: Sequence[float], counts: Sequence[float], level: float) -> Metric:
    """sum(S)/sum(N) over replications with a cluster-robust (linearised ratio) t interval; no interval with
    fewer than two replications or no spread."""
    s = np.asarray(sums, dtype=float)
    n = np.asarray(counts, dtype=float)
    keep = n > 0
    s, n = s[keep], n[keep]
    if n.sum() == 0:
        return Metric(None)
    m = float(s.sum() / n.sum())
    r = len(n)
    if r < 2:
        return Metric(m)
    resid = (s - m * n) / n.mean()
    se = math.sqrt(float((resid**2).sum()) / (r * (r - 1)))
    if se == 0:
        return Metric(m)
    half = _t(level, r - 1) * se
    return Metric(m, m - half, m + half)


def paired_interval(diffs: Sequence[float], level: float) -> Metric:
    """Mean of per-replication differences (same seeds) with a t interval."""
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return Metric(None)
    m = float(d.mean())
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    if d.size < 2 or sd == 0:
        return Metric(m)
    half = _t(level, d.size - 1) * sd / math.sqrt(d.size)
    return Metric(m, m - half, m + half)


Group = TypeVar("Group")  # what one replication contributes to a bootstrapped statistic


def bootstrap_interval(
    groups: Sequence[Group],
    stat: Callable[[list[Group]], float | None],
    level: float,
    seed: int,
    draws: int = 1000,
) -> Metric:
    """Percentile bootstrap over replications: resample whole replications (index lists shared by paired
    statistics), recompute the statistic. Seeded, so deterministic."""
    value = stat(list(groups))
    if value is None or len(groups) < 2:
        return Metric(value)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7919,)))
    idx = rng.integers(0, len(groups), size=(draws, len(groups)))
    values = [v for row in idx if (v := stat([groups[i] for i in row])) is not None]
    if not values:
        return Metric(value)
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return Metric(value, float(lo), float(hi))


def _p99(groups: Sequence[Sequence[float]]) -> float | None:
    pooled = [x for g in groups for x in g]
    return float(np.percentile(pooled, 99)) if pooled else None


# -- measuring a candidate --------------------------------------------------------------------------------------
def measure(c: Candidate, runs: Sequence[RunSummary], limits: Limits, w: Workload, seed: int) -> None:
    """Fill a candidate's metrics from its runs (replications 0..n-1, same seeds as every other candidate)."""
    level = limits.level
    c.replications = len(runs)
    if limits.false_reclaims_per == "job":
        exposure = [float(s.jobs_arrived) for s in runs]  # the jobs at risk: added before the run ended
    else:
        exposure = [s.end / 3600 for s in runs]
    c.metrics["false_reclaims"] = rate_interval(
        [s.false_reclaims for s in runs], exposure, level, w.concurrency
    )
    c.metrics["detection_mean"] = ratio_interval(
        [math.fsum(s.detection_latencies) for s in runs], [len(s.detection_latencies) for s in runs], level
    )
    latencies: list[Sequence[float]] = [s.detection_latencies for s in runs]
    c.metrics["detection_p99"] = bootstrap_interval(latencies, _p99, level, seed)
    c.metrics["requests_per_s"] = ratio_interval([s.requests for s in runs], [s.end for s in runs], level)
    c.metrics["undetected"] = Metric(float(sum(s.undetected for s in runs)))


def objective(c: Candidate, limits: Limits) -> float:
    m = c.metrics.get(f"detection_{limits.detection_stat}")
    return m.value if m is not None and m.value is not None else math.inf


def check_limits(c: Candidate, limits: Limits) -> tuple[str, str]:
    """('meets' | 'fails' | 'unknown', why) for all limits together."""
    checks = [
        ("false_reclaims", limits.false_reclaims, f"false reclaims per {limits.false_reclaims_per}"),
        (f"detection_{limits.detection_stat}", limits.detection, f"detection {limits.detection_stat} (s)"),
        ("requests_per_s", limits.requests_per_s, "Redis requests/s"),
    ]
    unknown = []
    for key, limit, name in checks:
        if limit is None:
            continue
        m = c.metrics[key]
        if m.value is None:
            unknown.append(f"{name}: no data")
        elif m.lo is not None and m.lo > limit:
            return "fails", f"{name} {_fmt(m)} is over the limit {limit:g}"
        elif m.hi is None or m.hi > limit:
            unknown.append(f"{name} {_fmt(m)} vs limit {limit:g}")
    if unknown:
        return "unknown", "; ".join(unknown)
    return "meets", "meets every limit"


def _fmt(m: Metric | None, digits: int = 3) -> str:
    if m is None or m.value is None:
        return "-"
    if m.lo is None or m.hi is None:
        return f"{m.value:.{digits}g} [no interval]"
    return f"{m.value:.{digits}g} [{m.lo:.{digits}g}, {m.hi:.{digits}g}]"


# -- the search -------------------------------------------------------------------------------------------------
@dataclass
class Race:
    """The outcome of racing one family of candidates (leases, or timeouts)."""

    best: Candidate | None
    runner_up: Candidate | None
    why_runner_up_lost: str
    decided: bool


@dataclass
class TuneResult:
    workload: Workload
    limits: Limits
    space: SearchSpace
    seed: int
    candidates: list[Candidate]
    lease: Race
    timeout: Race
    runs: int
    max_runs: int
    # fresh-seed measurements, in the order tried (see `verify_on_fresh_seeds`)
    verifications: list[Candidate]
    what_would_change: list[str]
    verify_level: float | None = None  # the two-sided level of every fresh-seed interval

    @property
    def confirmed(self) -> Candidate | None:
        """The first setting tried whose fresh-seed runs met every limit, as simulated in the race."""
        for v in self.verifications:
            if v.status == "confirmed":
                return next(c for c in self.candidates if c.label() == v.label() and c.kind == v.kind)
        return None

    @property
    def recommended(self) -> Candidate | None:
        """The confirmed setting; without verification (or none confirmed), the race's best."""
        return self.confirmed or self.lease.best

    @property
    def verification(self) -> Candidate | None:
        """The fresh-seed measurement of the recommended setting, if it was verified."""
        best = self.recommended
        return next((v for v in self.verifications if best is not None and v.label() == best.label()), None)

    def frontier(self) -> list[Candidate]:
        """Simulated lease candidates no other one beats on all three of false reclaims, detection, requests."""
        pts = [
            c
            for c in self.candidates
            if c.kind == "lease" and c.metrics and objective(c, self.limits) < math.inf
        ]

        def key(c: Candidate) -> tuple[float, float, float]:
            return (
                c.metrics["false_reclaims"].value or 0.0,
                objective(c, self.limits),
                c.metrics["requests_per_s"].value or 0.0,
            )

        out = []
        for c in pts:
            kc = key(c)
            if not any(all(a <= b for a, b in zip(key(o), kc, strict=True)) and key(o) != kc for o in pts):
                out.append(c)
        return sorted(out, key=lambda c: (objective(c, self.limits), c.lease, c.beat, c.scan))


class _Runner:
    """Runs (candidate, replication) tasks, serially or on a process pool, caching summaries by key."""

    def __init__(
        self, scenario: Scenario, seed: int, jobs: int, progress: bool, executor: Executor | None = None
    ):
        self.scenario = scenario
        self.seed = seed
        self.jobs = jobs
        self.progress = progress
        self.results: dict[tuple[int, int], RunSummary] = {}
        self.count = 0
        self._pool = executor
        self._owned = contextlib.ExitStack()

    def __enter__(self) -> _Runner:
        if self._pool is None and self.jobs > 1:
            self._pool = self._owned.enter_context(owned_pool(self.jobs))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._owned.__exit__(*exc)  # an owned pool: shut down, or stopped at once after a Ctrl-C or failure

    def ensure(
        self, wanted: dict[int, tuple[ReclaimPolicy, int]], stage: str, seed: int | None = None
    ) -> None:
        """Make sure candidate i has replications 0..n-1 (wanted: i -> (policy, n))."""
        seed = self.seed if seed is None else seed
        tasks = [
            (i, self.scenario, policy, seed, r)
            for i, (policy, n) in sorted(wanted.items())
            for r in range(n)
            if (i, r) not in self.results
        ]
        if not tasks:
            return
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(tasks), disable=not self.progress, unit="run", file=sys.stderr, desc=stage, leave=False
        )
        try:
            if self._pool is None:
                for task in tasks:
                    self._absorb(run_batch([task]), bar)
            else:
                pending = set(submit_all(self._pool, run_batch, batches(tasks, parts=8 * self.jobs)))
                while pending:
                    done, pending = wait_some(pending)
                    for future in done:
                        self._absorb(result_of(future), bar)
        finally:
            bar.close()

    def _absorb(self, results: list[tuple[int, RunSummary]], bar: Any) -> None:
        for i, s in results:
            self.results[(i, s.replication)] = s
            self.count += 1
            bar.update(1)

    def runs_of(self, i: int, n: int) -> list[RunSummary]:
        return [self.results[(i, r)] for r in range(n)]


WAVE = 12  # candidates racing at once; more are admitted, best predicted first, as others drop out


def detection_floor(c: Candidate, limits: Limits) -> float:
    """The closed form's lower bound on a candidate's detection statistic, less a margin for the random round
    trip and crashes before a job's first renewal (0 for timeouts: their latency depends on the job)."""
    key = "detection_mean" if limits.detection_stat == "mean" else "detection_p99_at_least"
    value = c.predicted.get(key)
    return 0.0 if value is None else (value - 0.05) / 1.05


def _race(
    family: list[tuple[int, Candidate]],
    runner: _Runner,
    limits: Limits,
    w: Workload,
    space: SearchSpace,
    seed: int,
    name: str,
    say: Callable[[str], None],
) -> Race:
    """Sequential replications on the candidates that matter, common random numbers across candidates.

    Candidates enter best predicted detection first, WAVE at a time; once a leader (the fastest decided
    feasible) exists, a candidate whose closed-form detection floor is above the leader's upper bound is out
    without a run, and a racing one is out when its paired difference to the leader says it is not faster
    by more than the indifference margin."""
    pending = sorted(
        (p for p in family if p[1].status != "pruned"), key=lambda p: (detection_floor(p[1], limits), p[0])
    )
    if not pending:
        return Race(None, None, "every candidate was ruled out by the closed forms", False)
    n: dict[int, int] = {}
    active: dict[int, Candidate] = {}
    leader: int | None = None
    undecided: list[int] = []
    round_no = 0
    while True:
        round_no += 1
        if leader is not None:
            lead = active[leader]
            m = lead.metrics[f"detection_{limits.detection_stat}"]
            cutoff = m.hi if m.hi is not None else m.value
            assert cutoff is not None  # the leader has a decided value
            keep = []
            for i, c in pending:
                if detection_floor(c, limits) > cutoff:
                    c.status = "beaten"
                    c.reason = (
                        f"closed form: detection {limits.detection_stat} at least {detection_floor(c, limits):.3g} s, "
                        f"above the leader's {cutoff:.3g} s"
                    )
                else:
                    keep.append((i, c))
            pending = keep
        while pending and len(active) < WAVE:
            i, c = pending.pop(0)
            active[i] = c
            n[i] = space.min_replications
        runner.ensure({i: (active[i].policy(), n[i]) for i in active}, f"{name} round {round_no}")
        for i, c in active.items():
            measure(c, runner.runs_of(i, n[i]), limits, w, seed)
            verdict, why = check_limits(c, limits)
            c.status = {"fails": "fails", "meets": "feasible"}.get(verdict, "open")
            c.reason = why
        active = {i: c for i, c in active.items() if c.status != "fails"}
        feasible = {i: c for i, c in active.items() if c.status == "feasible"}
        leader = min(feasible, key=lambda i: (objective(feasible[i], limits), i)) if feasible else None
        more: set[int] = set()
        for i, c in list(active.items()):
            if i == leader:
                continue
            if leader is not None:
                d = _paired_objective(i, leader, runner, min(n[i], n[leader]), limits, seed)
                delta = space.indifference * objective(active[leader], limits)
                if d.value is not None and d.lo is not None and d.lo > -delta:
                    c.status = "beaten"
                    c.reason = (
                        f"detection {limits.detection_stat} {d.value:+.3g} s vs the leader "
                        f"[{d.lo:+.3g}, {d.hi:+.3g}] (paired, same seeds)"
                    )
                    del active[i]
                    continue
            if n[i] < space.max_replications:
                more.add(i)
            else:  # out of replications, still undecided: it leaves the race (and makes room for the next)
                c.reason = f"undecided after {n[i]} replications: {c.reason}"
                undecided.append(i)
                del active[i]
        contenders = [i for i in active if i != leader]
        say(
            f"{name}: round {round_no}, {len(active)} racing, {len(pending)} waiting, "
            f"{len(feasible)} decided feasible, {runner.count} runs so far"
        )
        if not pending and (not more or (leader is not None and not contenders)):
            break
        if leader is not None and n[leader] < space.max_replications and contenders:
            more.add(leader)
        for i in more:
            n[i] = min(space.max_replications, n[i] + max(2, n[i] // 2))
    ranked = sorted(
        (c for _, c in family if c.metrics and c.status in ("feasible", "open", "beaten")),
        key=lambda c: (c.status != "feasible", objective(c, limits)),
    )
    best = active[leader] if leader is not None else None
    decided = (
        best is not None
        and not [i for i in active if i != leader]
        and not [i for i in undecided if objective(dict(family)[i], limits) < objective(best, limits)]
    )
    runner_up = next((c for c in ranked if c is not best), None)
    return Race(best, runner_up, _why_lost(runner_up, best, limits), decided)


def _paired_objective(i: int, j: int, runner: _Runner, n: int, limits: Limits, seed: int) -> Metric:
    a, b = runner.runs_of(i, n), runner.runs_of(j, n)
    level = limits.level
    if limits.detection_stat == "mean":
        diffs = [
            float(np.mean(x.detection_latencies) - np.mean(y.detection_latencies))
            for x, y in zip(a, b, strict=True)
            if x.detection_latencies and y.detection_latencies
        ]
        return paired_interval(diffs, level)
    pairs = [(x.detection_latencies, y.detection_latencies) for x, y in zip(a, b, strict=True)]

    def stat(groups: list[tuple[list[float], list[float]]]) -> float | None:
        pa = _p99([g[0] for g in groups])
        pb = _p99([g[1] for g in groups])
        return None if pa is None or pb is None else pa - pb

    return bootstrap_interval(pairs, stat, level, seed)


def _why_lost(runner_up: Candidate | None, best: Candidate | None, limits: Limits) -> str:
    if runner_up is None:
        return "no other candidate was simulated"
    if best is None:
        return f"{runner_up.label()}: {runner_up.reason}"
    if runner_up.status == "beaten":
        return f"{runner_up.label()}: {runner_up.reason}"
    if runner_up.status == "feasible":
        return (
            f"{runner_up.label()}: meets every limit but detects slower "
            f"({limits.detection_stat} {_fmt(runner_up.metrics[f'detection_{limits.detection_stat}'])} s)"
        )
    return f"{runner_up.label()}: not decided at the requested confidence ({runner_up.reason})"


def max_runs(candidates: Sequence[Candidate], space: SearchSpace, verify_max: int) -> int:
    """The most runs a search can take: every candidate left after pruning at its most replications, and
    the fresh-seed verification of up to VERIFY_CANDIDATES settings at `verify_max` each."""
    return (
        sum(c.status != "pruned" for c in candidates) * space.max_replications
        + VERIFY_CANDIDATES * verify_max
    )


def verification_sizes(verify: int, verify_max: int) -> list[int]:
    """The fresh-seed replication counts at which a verification looks: verify, 2 verify, 4 verify, ...,
    ending at `verify_max`."""
    sizes = []
    n = verify
    while verify and n < verify_max:
        sizes.append(n)
        n *= 2
    return sizes + [verify_max] if verify else []


def verify_on_fresh_seeds(
    order: Sequence[Candidate],
    runner: _Runner,
    limits: Limits,
    w: Workload,
    seed: int,
    sizes: Sequence[int],
    say: Callable[[str], None],
) -> tuple[list[Candidate], float]:
    """Run settings again on seeds the search never saw, in `order`, until one meets every limit.

    Sequential: each setting gets sizes[0] replications, then more (the next size) while its intervals still
    straddle a limit; it is confirmed when they meet every limit, refuted when one is decided over a limit,
    unconfirmed when the last size leaves it open; then the next setting is tried. Every look is a test, so
    the intervals are Bonferroni-adjusted over all looks that could happen (len(sizes) x len(order), fixed
    before any fresh run): a setting confirmed this way meets the limits at `limits.confidence`, however many
    looks it took. Returns the measurements and the level of their intervals."""
    looks = len(sizes) * len(order)
    strict = replace(limits, confidence=1 - (1 - limits.confidence) / looks)
    out = []
    for k, cand in enumerate(order):
        key = -(k + 1)
        fresh = replace(cand, metrics={})
        verdict, why = "unknown", "no runs"
        for n in sizes:
            runner.ensure({key: (cand.policy(), n)}, f"verify {cand.label()}", seed=seed + VERIFY_SEED_OFFSET)
            measure(fresh, runner.runs_of(key, n), strict, w, seed)
            verdict, why = check_limits(fresh, strict)
            if verdict != "unknown":
                break
        fresh.status = {"meets": "confirmed", "fails": "refuted"}.get(verdict, "unconfirmed")
        fresh.reason = (
            f"fresh seeds (root seed {seed + VERIFY_SEED_OFFSET}), {fresh.replications} runs: {why}"
        )
        say(f"verify: {cand.label()} {fresh.status} on {fresh.replications} fresh runs ({why})")
        out.append(fresh)
        if verdict == "meets":
            break
    return out, strict.level


def zero_event_bound(w: Workload, limits: Limits, runs: int, level: float) -> float:
    """The smallest upper bound `rate_interval` can give the false-reclaim rate from `runs` runs: with no false
    reclaim at all, the Poisson bound -ln((1 - level)/2) x concurrency over the most exposure the runs can have
    (every job arrived, per job; the whole horizon, per hour)."""
    exposure = w.jobs if limits.false_reclaims_per == "job" else w.horizon / 3600
    return -math.log((1 - level) / 2) * max(1, w.concurrency) / (runs * exposure)


def check_certifiable(w: Workload, limits: Limits, runs: int, level: float, budget: str) -> None:
    """Refuse, before any run, a false-reclaim limit that `runs` runs could not show to be met even with no
    false reclaim at all: the search would run to its budget and decide nothing. Names the runs it takes."""
    limit = limits.false_reclaims
    if limit is None:
        return
    floor = zero_event_bound(w, limits, runs, level)
    if floor <= limit:
        return
    need = math.ceil(runs * floor / limit)
    unit = f"per {limits.false_reclaims_per}"
    flag = {"max_replications": "--max-replications", "verify_max": "--verify-max"}[budget]
    jobs = math.ceil(w.jobs * floor / limit)
    more = f" or --jobs-per-run {jobs}" if limits.false_reclaims_per == "job" else ""
    raise ConfigError(
        f"a limit of {limit:g} false reclaims {unit} cannot be shown with {runs} runs ({budget}): even with "
        f"none at all they bound the rate only at {floor:.3g} {unit} ({100 * level:.4g}% interval; one fault "
        f"can lapse all {w.concurrency} jobs of a worker); give {flag} {need}{more}, or a limit of at least "
        f"{floor:.3g}"
    )


def tune(
    workload: Workload,
    limits: Limits,
    space: SearchSpace = SearchSpace(),
    *,
    seed: int = 0,
    jobs: int = 1,
    verify: int = 10,
    verify_max: int | None = None,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
    executor: Executor | None = None,
) -> TuneResult:
    """Search lease, beat and sweep interval (and the best fixed timeout, for comparison); see the module doc.

    At the end the race's best runs again on fresh seeds (seed + 1000003): `verify` replications, doubled while
    undecided up to `verify_max` (default 8 x verify); if it is not confirmed, the next decided-feasible
    settings are tried (`verify_on_fresh_seeds`). `verify=0` skips this. Same inputs and seed give the same
    result with any `jobs`."""
    say = say or (lambda _msg: None)
    if verify_max is None:
        verify_max = 8 * verify
    if verify and verify_max < verify:
        raise ConfigError(f"verify_max ({verify_max}) must be at least verify ({verify})")
    # a limit the budget could not certify even with no false reclaim at all: refused before any work
    check_certifiable(workload, limits, space.max_replications, limits.level, "max_replications")
    if verify:
        looks = len(verification_sizes(verify, verify_max)) * VERIFY_CANDIDATES
        check_certifiable(workload, limits, verify_max, 1 - (1 - limits.level) / looks, "verify_max")
    scenario = workload.scenario()
    candidates = build_candidates(space)
    pauses, outages = _pause_sample(workload), _outage_sample(workload)  # drawn once for every candidate
    for c in candidates:
        predict(c, workload, limits, pauses, outages)
        prune(c, limits)
    bound = max_runs(candidates, space, verify_max if verify else 0)
    say(
        f"tune: {len(candidates)} candidates, {sum(c.status == 'pruned' for c in candidates)} ruled out by the "
        f"closed forms; at most {bound} runs ({space.min_replications} to {space.max_replications} replications "
        f"each{f', plus {verify} to {verify_max} on fresh seeds for up to {VERIFY_CANDIDATES} settings' if verify else ''})"
    )
    indexed = list(enumerate(candidates))
    with _Runner(scenario, seed, jobs, progress, executor) as runner:
        lease_race = _race(
            [p for p in indexed if p[1].kind == "lease"], runner, limits, workload, space, seed, "lease", say
        )
        timeout_race = _race(
            [p for p in indexed if p[1].kind == "timeout"],
            runner,
            limits,
            workload,
            space,
            seed,
            "timeout",
            say,
        )
        verifications: list[Candidate] = []
        level = None
        if verify and lease_race.best is not None:
            others = sorted(
                (
                    c
                    for c in candidates
                    if c.kind == "lease"
                    and c is not lease_race.best
                    and c.metrics
                    and check_limits(c, limits)[0] == "meets"  # decided feasible (some were then beaten)
                ),
                key=lambda c: (objective(c, limits), candidates.index(c)),
            )
            order = [lease_race.best, *others][:VERIFY_CANDIDATES]
            verifications, level = verify_on_fresh_seeds(
                order, runner, limits, workload, seed, verification_sizes(verify, verify_max), say
            )
        runs = runner.count
    result = TuneResult(
        workload,
        limits,
        space,
        seed,
        candidates,
        lease_race,
        timeout_race,
        runs,
        bound,
        verifications,
        [],
        level,
    )
    result.what_would_change = what_would_change(result)
    return result


def binding_causes(candidates: Sequence[Candidate]) -> list[str]:
    """Why the lease settings were ruled out, by limit: how many each limit ruled out (closed form or
    simulated) and how many stayed undecided at the budget, with an example of each."""
    kinds = {
        "false reclaims": "the false-reclaim limit",
        "detection": "the detection limit",
        "requests": "the Redis budget",
    }
    counts: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.kind != "lease" or c.status not in ("pruned", "fails", "open", "undecided"):
            continue
        if c.status in ("pruned", "fails"):
            text = c.reason.lower()
            key = next((v for k, v in kinds.items() if k in text), "another limit")
        else:
            key = "undecided at the budget (an interval still straddles a limit)"
        counts.setdefault(key, []).append(c)
    out = []
    for key, cs in sorted(counts.items(), key=lambda kv: -len(kv[1])):
        example = cs[0]
        why = f": e.g. {example.label()}, {example.reason}" if example.reason else ""
        label = key if key.startswith("undecided") else f"ruled out by {key}"
        out.append(f"{len(cs)} lease setting(s) {label}{why}")
    return out


def what_would_change(r: TuneResult) -> list[str]:
    """Closed-form thresholds and data-driven alternatives around the recommendation."""
    best = r.recommended
    if best is None:
        return ["no lease setting was decided feasible: loosen a limit, widen the search space or raise "
                "max_replications", *binding_causes(r.candidates)]  # fmt: skip
    w, limits = r.workload, r.limits
    p = best.predicted
    safe, first = p["pause_safe_up_to"], p["pause_safe_up_to_first"]
    assert safe is not None and first is not None  # predicted for every lease candidate
    rule = best.policy().renewal
    assert rule is not None  # the recommendation is a lease
    rtt = _typical_rtt(w.rtt)
    reply = (
        f"; a pause that starts while a renewal's reply is on its way counts one tick "
        f"({rule.tick_ms / 1000:g} s) longer (the lock manager sleeps a tick after reading the reply)"
        if rule.after_reply
        else ""
    )
    out = [
        f"a pause (GC, blocked event loop) longer than {safe:g} s can lapse this lease ({first:g} s before a "
        f"job's first renewal), and one longer than {best.lease:g} s always does: it lapses iff u + pause > "
        f"lease, u = time since the worker sent the request that last set the lock (the take counts){reply}; "
        f"your pauses exceed {safe:g} s with probability {w.pause_length.survival(safe):.2g} and {first:g} s "
        f"with {w.pause_length.survival(first):.2g}"
    ]
    k = analytic.losses_to_lapse(best.lease_s, rule, rtt=rtt, command_timeout=w.command_timeout)
    k0 = p["losses_to_lapse_first"]
    out.append(
        f"{k} renewals lost in a row lapse it ({k0:g} for a job's first renewals); at loss {w.loss:g} per "
        f"renewal that is {w.loss**k:.2g} per renewal window"
    )
    out.append(
        f"a connection outage longer than {p['outage_safe_up_to']:g} s can lapse it "
        f"({p['outage_safe_up_to_first']:g} s before a job's first renewal): it lapses iff u + R > lease, R = "
        f"when BullMQ's reconnect backoff brings the client back, u = time since the last renewal "
        f"that reached Redis was sent (one sent within half a round trip of the outage is lost); "
        + (
            f"your outages exceed that with probability {w.outage_length.survival(p['outage_safe_up_to'] or 0.0):.2g}"
            if w.outage_rate > 0
            else "no outages were given (--outage-rate)"
        )
    )
    lo = min(p["detection_lo"] or 0.0, p["detection_lo_first"] or 0.0)
    out.append(
        f"a crash is detected {lo:.4g} to {p['detection_hi']:.4g} s later ({p['detection_lo']:.4g} s at the "
        f"soonest once a job has renewed; closed form, mean "
        f"{'' if p['detection_mean_exact'] else 'at least '}{p['detection_mean']:.2f} s): a detection limit "
        f"below {lo:.4g} s needs a shorter lease"
    )
    sims = [c for c in r.candidates if c.kind == "lease" and c.metrics and c is not best]
    req = best.metrics["requests_per_s"].value or 0.0
    cheaper = [
        c for c in sims if c.status in ("feasible",) and (c.metrics["requests_per_s"].value or 0.0) < req
    ]
    if cheaper:
        alt = min(cheaper, key=lambda c: objective(c, limits))
        out.append(
            f"a Redis budget under {req:.3g} requests/s rules this out; the best decided-feasible setting under it "
            f"was {alt.label()} ({alt.metrics['requests_per_s'].value:.3g} req/s, detection "
            f"{limits.detection_stat} {objective(alt, limits):.3g} s)"
        )
    fails = [c for c in sims if c.status == "fails" and objective(c, limits) < objective(best, limits)]
    if fails:
        alt = min(fails, key=lambda c: objective(c, limits))
        out.append(
            f"a looser limit would allow faster detection: {alt.label()} was ruled out because {alt.reason}"
        )
    t = r.timeout.best
    if t is not None:
        out.append(
            f"the best fixed timeout ({t.timeout:g} s) detects a crash after up to {t.timeout:g} s and falsely "
            f"reclaims every job that runs longer (P(duration > {t.timeout:g} s) = {w.duration.survival(t.timeout_s):.2g})"
        )
    return out


# -- output ---------------------------------------------------------------------------------------------------
def bullmq_settings(c: Candidate) -> dict[str, Any]:
    """The Worker options a BullMQ user pastes, with what lockRenewTime means for the beat."""
    out: dict[str, Any] = {
        "lockDuration": int(round(c.lease_s * 1000)),
        "stalledInterval": int(round(c.scan * 1000)),
        "maxStalledCount": 1,
    }
    if c.preset != "bullmq":
        # BullMQ's LockManager ticks every lockRenewTime/2 and renews then (plus a round trip): a beat of B
        # seconds is lockRenewTime = 2 B.
        out["lockRenewTime"] = int(round(2 * c.beat_s * 1000))
    return out


def lock_renew_note(c: Candidate, rtt: float) -> str:
    """What lockRenewTime means for the heartbeat (BullMQ's LockManager renews on ticks of lockRenewTime/2)."""
    B = c.predicted.get("renewal_period", c.beat)
    if c.preset == "bullmq":
        return (
            f"(BullMQ derives lockRenewTime = lockDuration/2 = {c.lease_s * 500:.0f} ms; its lock manager ticks every "
            f"lockRenewTime/2 = {c.beat_s * 1000:.0f} ms and, with a {rtt * 1000:g} ms round trip, renews on every "
            f"tick: a renewal every {B:.4g} s per worker holding jobs. maxStalledCount 1 retries a stalled job once)"
        )
    return (
        f"(lockRenewTime = 2 x beat = {2 * c.beat_s * 1000:.0f} ms: BullMQ's lock manager ticks every lockRenewTime/2 "
        f"and renews on each tick, every {c.beat:g} s plus a round trip; leaving lockRenewTime at its default "
        f"(lockDuration/2) would renew every {c.lease_s / 4:g} s instead. maxStalledCount 1 retries a stalled job once)"
    )


def scenario_toml(r: TuneResult, c: Candidate | None = None) -> str:
    """The workload and the recommended policy as an emqsim scenario file (`run --config`, `sweep --config`)."""
    c = c or r.recommended
    w = r.workload
    lines = [
        "# Written by `python -m emqsim tune`: your workload and the recommended settings.",
        "[scenario]",
        'name = "tuned"',
        f"workers = {w.workers}",
        f"concurrency = {w.concurrency}",
        f"jobs = {w.jobs}",
        f"arrival_rate = {w.rate!r}",
        f'duration = "{distribution_spec(w.duration)}"',
        f"horizon = {w.horizon:g}",
        "",
        "[scenario.random_faults]",
        f"crash_rate = {w.crash_rate:g}",
        f"restart_after = {w.restart_after:g}",
        f"freeze_rate = {w.pause_rate:g}",
        f'freeze_duration = "{distribution_spec(w.pause_length)}"',
        f"outage_rate = {w.outage_rate:g}",
        f'outage_duration = "{distribution_spec(w.outage_length)}"',
        "",
        "[scenario.network]",
        f'rtt = "{distribution_spec(w.rtt)}"',
        f"loss = {w.loss:g}",
        f"command_timeout = {w.command_timeout:g}",
    ]
    if c is not None:
        lines += ["", "[policy]"]
        if c.preset == "bullmq":
            lines += ['kind = "bullmq"', f"lease = {c.lease:g}", f"scan = {c.scan:g}", "max_stalled = 1"]
        else:
            lines += ['kind = "lease"', f"lease = {c.lease:g}", f"beat = {c.beat:g}", f"scan = {c.scan:g}"]
    return "\n".join(lines) + "\n"


def _row(c: Candidate, limits: Limits, wide: bool = True) -> list[str]:
    """One table row: every metric as `estimate [lower, upper]` (`wide`), or as `estimate <= upper` (the
    default report: every limit is checked against an interval's upper end, and this fits 100 columns)."""
    m = c.metrics
    cell = _fmt if wide else _fmt_upper
    return [
        c.label() if wide else c.label().replace(" s,", ",").removesuffix(" s"),
        str(c.replications),
        cell(m.get("false_reclaims")),
        cell(m.get(f"detection_{limits.detection_stat}")),
        cell(m.get("requests_per_s")),
        c.status,
    ]


def _fmt_upper(m: Metric | None, digits: int = 3) -> str:
    """An estimate and its interval's upper end, `0.01 <= 0.0787` (the narrow table's cell, under a heading
    naming the interval's level)."""
    if m is None or m.value is None:
        return "-"
    if m.hi is None:
        return f"{m.value:.{digits}g} [no interval]"
    return f"{m.value:.{digits}g} <= {m.hi:.{digits}g}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    """A plain text table; a heading may hold a newline: its parts stand on two heading lines."""
    parts = [h.split("\n") for h in header]
    depth = max(len(p) for p in parts)
    heads = [[(p[i] if i < len(p) else "") for p in parts] for i in range(depth)]
    cells = heads + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for n, r in enumerate(cells):
        out.append("  ".join(x.ljust(wd) for x, wd in zip(r, widths, strict=True)).rstrip())
        if n == depth - 1:
            out.append("  ".join("-" * wd for wd in widths))
    return "\n".join(out)


def _bullet(text: str, width: int = 100) -> str:
    """One "  - text" item wrapped to `width` columns, continuation lines indented under the text."""
    import textwrap

    return textwrap.fill(text, width, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False)


def _prose(text: str, width: int = 100) -> str:
    """A line of prose wrapped to `width` columns, continuations indented 2 more than its first line."""
    if len(text) <= width:
        return text
    import textwrap

    indent = " " * (len(text) - len(text.lstrip()) + 2)
    return textwrap.fill(text, width, subsequent_indent=indent, break_on_hyphens=False)


def report(r: TuneResult, wide: bool = True) -> str:
    """The human-readable answer: with `wide` every interval in full, else each estimate with its upper end
    (what the limits are checked against) under two-line headings, so the tables fit 100 columns."""
    limits = r.limits
    per = limits.false_reclaims_per
    lvl = f"{limits.level:.1%}".replace(".0%", "%")
    if wide:
        header = [
            "settings",
            "reps",
            f"false reclaims/{per} [{lvl}]",
            f"detect {limits.detection_stat} s [{lvl}]",
            f"Redis req/s [{lvl}]",
            "status",
        ]
    else:
        header = [
            "settings (s)",
            "reps",
            f"false reclaims/{per}\n({lvl} upper)",
            f"detect {limits.detection_stat} s\n({lvl} upper)",
            f"Redis req/s\n({lvl} upper)",
            "status",
        ]

    def row(c: Candidate) -> list[str]:
        return _row(c, limits, wide)

    lines = [
        _prose(
            f"limits: false reclaims <= {limits.false_reclaims if limits.false_reclaims is not None else 'any'} per {per}; "
            f"detection {limits.detection_stat} <= {limits.detection if limits.detection is not None else 'any'} s; "
            f"Redis <= {limits.requests_per_s if limits.requests_per_s is not None else 'any'} requests/s; "
            f"confidence {limits.confidence:g}: intervals are two-sided at {lvl}, so their upper ends hold together "
            f"at {limits.confidence:g} over the {max(1, limits.count)} limit(s) (Bonferroni)"
        ),
        f"simulated runs: {r.runs} (at most {r.max_runs}); seed {r.seed}",
        "",
    ]
    best = r.recommended
    if best is None:
        lines.append("no lease setting was decided feasible at the requested confidence.")
    else:
        margin = f"{r.space.indifference:.0%}"
        if r.lease.decided:
            state = f"meets every limit; no other setting detects faster by more than {margin}"
        else:
            state = (
                f"meets every limit; the fastest point estimate, but not separated from the runner-up by "
                f"{r.space.max_replications} replications (the difference is within the noise)"
            )
        if r.verifications and r.confirmed is None:
            state += "; NOT confirmed on fresh seeds (below)"
        elif r.lease.best is not None and best is not r.lease.best:
            state = (
                f"meets every limit; the race's fastest, {r.lease.best.label()}, was not confirmed on fresh "
                f"seeds, this one was"
            )
        lines += [
            f"recommended: {best.label()}",
            _prose(f"  ({state})"),
            _table([row(best)], header),
        ]
        if r.verifications:
            assert r.verify_level is not None
            vlvl = f"{r.verify_level:.2%}"
            lines += [
                _prose(
                    f"on fresh seeds (root seed {r.seed + VERIFY_SEED_OFFSET}; sequential, so every interval is "
                    f"at {vlvl}: Bonferroni over the limits and every look that could happen):"
                ),
                _table(
                    [row(v) for v in r.verifications],
                    [h.replace(f"[{lvl}]", f"[{vlvl}]").replace(f"({lvl} ", f"({vlvl} ") for h in header],
                ),
            ]
            lines += [
                _prose(f"  {v.label()}: {v.reason}") for v in r.verifications if v.status != "confirmed"
            ]
        lines += ["", _prose(f"runner-up: {r.lease.why_runner_up_lost}")]
        lines += [
            "",
            "BullMQ Worker options:",
            _prose("  " + ", ".join(f"{k}: {v}" for k, v in bullmq_settings(best).items())),
        ]
        lines.append(_prose("  " + lock_renew_note(best, _typical_rtt(r.workload.rtt))))
    t = r.timeout.best
    lines += ["", "best fixed timeout, for comparison:"]
    lines.append(
        _table([row(t)], header)
        if t is not None
        else _prose(f"  none met the limits ({r.timeout.why_runner_up_lost})")
    )
    lines += ["", "Pareto frontier (false reclaims, detection, Redis requests; simulated lease settings):"]
    lines.append(_table([row(c) for c in r.frontier()], header))
    lines += ["", "what would change the answer:"] + [_bullet(x) for x in r.what_would_change]
    if best is not None:
        lines += ["", "emqsim scenario file (python -m emqsim run --config FILE):", scenario_toml(r).rstrip()]
    return "\n".join(lines)


def to_json_dict(r: TuneResult) -> dict[str, Any]:
    from emqsim import __version__

    best = r.recommended
    return {
        "version": __version__,
        "seed": r.seed,
        "runs": r.runs,
        "max_runs": r.max_runs,
        "limits": asdict(r.limits),
        "level": r.limits.level,
        "workload": {
            k: (distribution_spec(v) if not isinstance(v, int | float | type(None)) else v)
            for k, v in vars(r.workload).items()
        },
        "decided": r.lease.decided,
        "recommended": best.as_dict() if best else None,
        "verification": r.verification.as_dict() if r.verification else None,
        "verifications": [v.as_dict() for v in r.verifications],
        "verify_level": r.verify_level,
        "confirmed": r.confirmed is not None,
        "runner_up": r.lease.runner_up.as_dict() if r.lease.runner_up else None,
        "why_runner_up_lost": r.lease.why_runner_up_lost,
        "best_timeout": r.timeout.best.as_dict() if r.timeout.best else None,
        "frontier": [c.as_dict() for c in r.frontier()],
        "what_would_change": r.what_would_change,
        "bullmq": bullmq_settings(best) if best else None,
        "toml": scenario_toml(r) if best else None,
        "candidates": [c.as_dict() for c in r.candidates],
    }


def figure(r: TuneResult):
    """Detection latency vs false reclaims of every simulated setting, coloured by Redis requests/s; the
    frontier circled, the recommendation starred above everything, the best timeout and the limits labelled;
    nothing clipped at the axes."""
    import matplotlib.pyplot as plt

    from emqsim.plots import RC

    limits = r.limits
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(7.0, 5.4))
        sims = [c for c in r.candidates if c.metrics and objective(c, limits) < math.inf]
        leases = [c for c in sims if c.kind == "lease"]
        xs = [objective(c, limits) for c in leases]
        ys = [c.metrics["false_reclaims"].value or 0.0 for c in leases]
        zs = [c.metrics["requests_per_s"].value or 0.0 for c in leases]
        sc = ax.scatter(xs, ys, c=zs, cmap="viridis", s=18, label="lease settings (simulated)", clip_on=False)
        fig.colorbar(sc, ax=ax, label="Redis requests/s")
        front = r.frontier()
        ax.scatter(
            [objective(c, limits) for c in front],
            [c.metrics["false_reclaims"].value or 0.0 for c in front],
            s=70, facecolors="none", edgecolors="#D55E00", linewidths=1.2, clip_on=False,
            label="Pareto frontier (false reclaims, detection, requests)",
        )  # fmt: skip
        tops = list(ys)
        if r.recommended is not None:
            c = r.recommended
            ax.scatter(
                [objective(c, limits)],
                [c.metrics["false_reclaims"].value or 0.0],
                marker="*", s=320, color="#F0E442", edgecolors="#000000", linewidths=1.0, zorder=6,
                clip_on=False, label=f"recommended: {c.label()}",
            )  # fmt: skip
        if r.timeout.best is not None:
            c = r.timeout.best
            tops.append(c.metrics["false_reclaims"].value or 0.0)
            ax.scatter(
                [objective(c, limits)],
                [c.metrics["false_reclaims"].value or 0.0],
                marker="s", s=40, color="#000000", zorder=5, clip_on=False, label=f"best {c.label()}",
            )  # fmt: skip
        per = limits.false_reclaims_per
        if limits.false_reclaims is not None:
            tops.append(limits.false_reclaims)
            ax.axhline(
                limits.false_reclaims, color="#8C8C8C", ls="--", lw=0.8,
                label=f"limit: {limits.false_reclaims:g} false reclaims per {per}",
            )  # fmt: skip
        if limits.detection is not None:
            ax.axvline(
                limits.detection, color="#8C8C8C", ls=":", lw=0.8,
                label=f"limit: detection {limits.detection_stat} {limits.detection:g} s",
            )  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=max(1e-4, (limits.false_reclaims or 1e-3) / 10))
        ax.set_xlabel(f"detection latency {limits.detection_stat} (s)")
        ax.set_ylabel(f"false reclaims per {per}")
        ax.set_ylim(bottom=0, top=2 * max([*tops, 1e-3]))
        ax.set_title("tune: simulated settings, false reclaims against detection", fontsize=11)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
        fig.tight_layout()
    return fig
