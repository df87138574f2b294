"""Fault plans (crash, stop-the-world freeze) and the network model, as plain data.

A fault hits either a worker at an absolute time (`worker=2, at=30`) or whichever worker runs a job's first
attempt, some seconds into it (`job=0, after=1`: "the worker dies 1 s into its job"). `after` and `duration`
take a number of seconds or a distribution; draws come from the run's seeded fault stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from emqsim.distributions import Distribution, Fixed
from emqsim.errors import ConfigError

Seconds = float | Distribution


def _check_target(kind: str, worker: int | None, at: float | None, job: int | None) -> None:
    by_worker = worker is not None and at is not None
    by_job = job is not None
    if by_worker == by_job:
        raise ConfigError(
            f"{kind} needs either worker= and at= (absolute time) or job= and after= (into the job)"
        )
    if worker is not None and at is not None and (worker < 0 or not math.isfinite(at) or at < 0):
        raise ConfigError(f"{kind}: worker must be >= 0 and at >= 0 seconds, got worker={worker}, at={at}")
    if job is not None and job < 0:
        raise ConfigError(f"{kind}: job must be >= 0, got {job}")


def as_distribution(value: Seconds, name: str) -> Distribution:
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name} must be >= 0 seconds, got {value}")
        return Fixed(float(value))
    return value


@dataclass(frozen=True)
class Crash:
    """The worker dies (SIGKILL): it never renews again. With `restart_after`, a new worker replaces it."""

    worker: int | None = None
    at: float | None = None
    job: int | None = None
    after: Seconds = 0.0
    restart_after: float | None = None

    def __post_init__(self) -> None:
        _check_target("Crash", self.worker, self.at, self.job)
        as_distribution(self.after, "Crash.after")
        if self.restart_after is not None and not (self.restart_after >= 0):
            raise ConfigError(f"Crash.restart_after must be >= 0 seconds, got {self.restart_after}")


@dataclass(frozen=True)
class Freeze:
    """A stop-the-world pause (GC, blocked event loop, SIGSTOP): neither job nor heartbeat advances."""

    duration: Seconds
    worker: int | None = None
    at: float | None = None
    job: int | None = None
    after: Seconds = 0.0

    def __post_init__(self) -> None:
        _check_target("Freeze", self.worker, self.at, self.job)
        as_distribution(self.after, "Freeze.after")
        as_distribution(self.duration, "Freeze.duration")


@dataclass(frozen=True)
class RandomFaults:
    """Faults drawn per worker: crashes and freezes as Poisson processes (rates per worker-hour)."""

    crash_rate: float = 0.0
    restart_after: float | None = 5.0
    freeze_rate: float = 0.0
    freeze_duration: Distribution = Fixed(1.0)

    def __post_init__(self) -> None:
        for name in ("crash_rate", "freeze_rate"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"RandomFaults.{name} must be >= 0 per worker-hour, got {value}")


@dataclass(frozen=True)
class Network:
    """Worker <-> Redis round trips: each takes `rtt` seconds (drawn per request, at least 1 ms), half each
    way. A request is lost with probability `loss` (on renewals only, or on every request with
    `loss_on="all"`); a lost request never reaches Redis, and the client learns it after `command_timeout`
    (a lost renewal simply does not extend the lock; other requests are retried)."""

    rtt: Distribution = Fixed(0.002)
    loss: float = 0.0
    loss_on: str = "renewals"
    command_timeout: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.loss < 1.0):
            raise ConfigError(f"network loss must be a probability in [0, 1), got {self.loss}")
        if self.loss_on not in ("renewals", "all"):
            raise ConfigError(f"network loss_on must be 'renewals' or 'all', got {self.loss_on!r}")
        if not (self.command_timeout > 0):
            raise ConfigError(f"network command_timeout must be > 0 seconds, got {self.command_timeout}")
