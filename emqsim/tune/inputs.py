"""What `tune` takes: a team's measured `Workload`, its `Limits`, the `SearchSpace` of settings, and the
search's fixed constants."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from emqsim import distributions
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
from emqsim.scenario import Scenario

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
