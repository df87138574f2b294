"""emqsim: why a job queue should find dead workers with a lock lease renewed by a heartbeat, not a timeout.

>>> from emqsim import LeasePolicy, TimeoutPolicy, simulate, simulate_summary, standard, summarize
>>> run = simulate(standard("fast-dead"), LeasePolicy(lease=30, beat=10), seed=1)
>>> summary = simulate_summary(standard("fast-dead"), LeasePolicy(lease=30, beat=10), seed=1)  # no records
>>> summary == summarize(run)  # the same numbers, without keeping the records
True
>>> timeout = simulate_summary(standard("fast-dead"), TimeoutPolicy(timeout=60), seed=1)
"""

# ruff: noqa: E402  (the program's quiet Ctrl-C handler goes in before the heavy imports)
from emqsim._quiet_start import quiet_interrupts_while_starting

quiet_interrupts_while_starting()  # the `emqsim` program only: a Ctrl-C during the imports below is one line

from emqsim.distributions import Empirical, Exponential, Fixed, LogNormal, Uniform, parse_distribution
from emqsim.engine import Simulation, simulate
from emqsim.errors import ConfigError
from emqsim.faults import (
    Block,
    ChildCrash,
    Crash,
    Freeze,
    MemoryPressure,
    Network,
    Outage,
    Partition,
    RandomFaults,
)
from emqsim.policies import Detector, LeasePolicy, LeaseWarning, ReclaimPolicy, RenewalRule, TimeoutPolicy
from emqsim.records import RESULTS_SCHEMA, Attempt, LockEvent, Run, SweepEvent, WorkerEvent
from emqsim.scenario import STANDARD, Scenario, standard
from emqsim.stats import RunSummary, summarize
from emqsim.summaries import simulate_summary

__version__ = "0.4.0"

__all__ = [
    "RESULTS_SCHEMA",
    "STANDARD",
    "Attempt",
    "ConfigError",
    "Crash",
    "Detector",
    "Empirical",
    "Exponential",
    "Fixed",
    "Freeze",
    "Block",
    "MemoryPressure",
    "Outage",
    "Partition",
    "ChildCrash",
    "LeasePolicy",
    "LeaseWarning",
    "LockEvent",
    "LogNormal",
    "Network",
    "RandomFaults",
    "ReclaimPolicy",
    "RenewalRule",
    "Run",
    "RunSummary",
    "Scenario",
    "Simulation",
    "SweepEvent",
    "TimeoutPolicy",
    "Uniform",
    "WorkerEvent",
    "__version__",
    "parse_distribution",
    "simulate",
    "simulate_summary",
    "standard",
    "summarize",
]
