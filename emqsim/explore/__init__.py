"""Every fault timing instead of a sample of them: exact worst cases and the smallest fault that breaks a policy.

A `Space` is one small world (a few workers, one job, one or two faults placed on the job's worker or another
worker) and the timings to search: each fault's offset, a fault's size (a freeze's length), each sweeper's
phase and, optionally, the holding worker's renewal phase, all in whole milliseconds. Every point of the space
is one deterministic run (`Simulation` with `timer_phases` pinned), so "every timing" is a finite set.

The search does not run every point. Along one coordinate the outcome of a run is piecewise constant and its
latency piecewise linear (shift the fault by 1 ms and the reclaim stays on the same sweep: the latency moves
by 1 ms; past an event time the reclaim jumps to another sweep). `explore` bisects each line for the points
where the outcome changes, and across the outer coordinates it bisects for the points where the *pattern* of
a line changes: between two lines whose pieces have the same outcomes and whose boundaries and latencies move
linearly (an integer number of ms per ms), every line in between is the interpolation, checked at the middle.
The result covers the whole space: exact minimum, maximum and distribution of the latency (each point weighs
the same, as the uniform-phase assumption of docs/theory.md says), the boundaries, and per property the
smallest counterexample. docs/explore.md says what "exact" means here and where it stops.
"""

from __future__ import annotations

from emqsim.explore.aggregate import _SIZE_NAMES, estimate_runs
from emqsim.explore.faults import FAULT_KINDS, HOLDER, OTHER, FaultKind, FaultSpec, register_fault
from emqsim.explore.properties import (
    LIVE_NEVER_RECLAIMED,
    NO_DUPLICATE_COMPLETION,
    NO_DUPLICATE_EXECUTION,
    NO_FINISH_LOST,
    NO_JOB_LOST,
    Property,
    dead_reclaimed_within,
    default_properties,
)
from emqsim.explore.report import as_json, format_exploration
from emqsim.explore.results import Boundary, Counterexample, Exploration, TieDependence, counterexample_run
from emqsim.explore.running import explore
from emqsim.explore.search import Sig, _metric_ms
from emqsim.explore.space import DROPS, TIE_VARIANTS, Dim, Space, space

__all__ = [
    "DROPS",
    "FAULT_KINDS",
    "HOLDER",
    "LIVE_NEVER_RECLAIMED",
    "NO_DUPLICATE_COMPLETION",
    "NO_DUPLICATE_EXECUTION",
    "NO_FINISH_LOST",
    "NO_JOB_LOST",
    "OTHER",
    "TIE_VARIANTS",
    "Boundary",
    "Counterexample",
    "Dim",
    "Exploration",
    "FaultKind",
    "FaultSpec",
    "Property",
    "Sig",
    "Space",
    "TieDependence",
    "_SIZE_NAMES",
    "_metric_ms",
    "as_json",
    "counterexample_run",
    "dead_reclaimed_within",
    "default_properties",
    "estimate_runs",
    "explore",
    "format_exploration",
    "register_fault",
    "space",
]
