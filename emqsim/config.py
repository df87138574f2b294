"""Scenario files: a scenario (and optionally a policy) in TOML, validated with errors that name the key
and its line. See emqsim/examples/*.toml.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from emqsim.distributions import Distribution, parse_distribution
from emqsim.errors import ConfigError
from emqsim.faults import Block, ChildCrash, Crash, Freeze, Network, Outage, RandomFaults
from emqsim.fileio import read_regular_text
from emqsim.policies import LeasePolicy, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import PRESETS, preset
from emqsim.scenario import Scenario
from emqsim.units import MAX_SECONDS, check_distribution

SCENARIO_KEYS = {
    "name", "workers", "concurrency", "jobs", "arrival_rate", "duration", "horizon", "phases", "hz", "queue",
    "remove_on_complete", "faults", "random_faults", "network",
}  # fmt: skip
FAULT_KEYS = {
    "kind", "worker", "at", "job", "after", "duration", "restart_after", "lost_writes", "redis_restart",
}  # fmt: skip
RANDOM_KEYS = {
    "crash_rate", "restart_after", "freeze_rate", "freeze_duration", "block_rate", "block_duration",
    "outage_rate", "outage_duration",
}  # fmt: skip
FAULT_KINDS = {"crash": Crash, "freeze": Freeze, "block": Block, "outage": Outage, "child_crash": ChildCrash}
NETWORK_KEYS = {"rtt", "loss", "loss_on", "command_timeout"}
POLICY_KEYS = {
    "kind", "lease", "beat", "scan", "timeout", "two_phase", "max_stalled", "swept_by", "fenced", "take",
    "drain_delay", "lazy_fail", "track_by",
}  # fmt: skip

# The type every key must have, checked before anything is built (TOML is typed: "no" is a string, not false;
# 1.5 is not a count). Kinds: str, bool, "count" (whole number >= 1), "index" (whole number >= 0),
# "seconds" (a number within the simulator's clock), "dist" (seconds or a distribution like 'exp:60'),
# "rate" (> 0 per second), "hourly" (>= 0 per worker-hour), "probability", "array", "table".
KEY_TYPES: dict[str, dict[str, Any]] = {
    "scenario": {
        "name": str, "workers": "count", "concurrency": "count", "jobs": "count", "arrival_rate": "rate",
        "duration": "dist", "horizon": "seconds", "phases": str, "hz": "count", "queue": str,
        "remove_on_complete": bool, "faults": "array", "random_faults": "table", "network": "table",
    },
    "fault": {
        "kind": str, "worker": "index", "at": "seconds", "job": "index", "after": "dist", "duration": "dist",
        "restart_after": "seconds",
    },
    "random_faults": {
        "crash_rate": "hourly", "restart_after": "seconds", "freeze_rate": "hourly", "freeze_duration": "dist",
    },
    "network": {"rtt": "dist", "loss": "probability", "loss_on": str, "command_timeout": "seconds"},
    "policy": {
        "kind": str, "lease": "seconds", "beat": "seconds", "scan": "seconds", "timeout": "seconds",
        "two_phase": bool, "max_stalled": "index", "swept_by": str, "fenced": bool,
    },
}  # fmt: skip
MAX_FILE_BYTES = 10_000_000
MAX_COUNT = 10**9  # workers, jobs, indexes: far beyond anything that fits in memory


class _Located:
    """Finds the line of a key in the file text, so semantic errors can say where."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, key: str) -> int | None:
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for number, line in enumerate(self.lines, start=1):
            if pattern.match(line):
                return number
        return None

    def error(self, where: str, message: str) -> ConfigError:
        key = where.rsplit(".", 1)[-1].split("[", 1)[0]
        line = self.line_of(key)
        at = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{at}: {where}: {message}")


def read_toml(path: str | Path, what: str = "scenario file") -> tuple[dict[str, Any], str]:
    """The project's one TOML reader: (data, text) of a regular UTF-8 file of at most `MAX_FILE_BYTES` bytes
    (bytes, not characters; a pipe or a device is refused, never waited on), every failure (unreadable, not
    TOML, nested too deeply to parse) a one-line ConfigError."""
    path = Path(path)
    text = read_regular_text(path, MAX_FILE_BYTES, what)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply; a {what} needs a few levels of tables") from None
    return data, text


def load_config(
    path: str | Path, overrides: Sequence[Mapping[str, Any]] = ()
) -> tuple[Scenario, ReclaimPolicy | None]:
    """Read a TOML scenario file: a [scenario] table and an optional [policy] table.

    `overrides` are settings given on the command line, which win over the file's (see `policy_overrides`);
    with several, the policy returned is the first's and `load_policies` gives them all."""
    scenario, policies = load_policies(path, overrides)
    return scenario, policies[0] if policies else None


def load_policies(
    path: str | Path, overrides: Sequence[Mapping[str, Any]] = ()
) -> tuple[Scenario, list[ReclaimPolicy]]:
    """The file's scenario, and its [policy] table (none: an empty list) with each of `overrides` applied
    in turn: a setting given replaces the file's (`lease`, `beat`, `scan`, `timeout`); a `kind` other than
    the file's replaces the whole table (`--policy timeout` over a lease table). The file is read once."""
    path = Path(path)
    data, text = read_toml(path)
    where = _Located(path, text)
    unknown = sorted(set(data) - {"scenario", "policy"})
    if unknown:
        raise where.error(unknown[0], "unknown table; a scenario file has [scenario] and optionally [policy]")
    if "scenario" not in data:
        raise ConfigError(f"{path}: missing the [scenario] table (see emqsim/examples/*.toml)")
    scenario = _scenario(data["scenario"], where)
    if "policy" not in data:
        return scenario, []
    table = _check_keys(data["policy"], POLICY_KEYS, "policy", where)
    policies = []
    for given in overrides or [{}]:
        merged = dict(table)
        kind = given.get("kind")
        if kind is not None and kind != merged.get("kind", "lease"):
            merged = {"kind": kind}
        merged.update({k: v for k, v in given.items() if k != "kind" and v is not None})
        policies.append(_policy(merged, where))
    return scenario, policies


def _check_keys(
    table: Any, allowed: set[str], name: str, where: _Located, types: str | None = None
) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise where.error(name, "must be a table")
    for key in table:
        if key not in allowed:
            raise where.error(f"{name}.{key}", f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for key, value in table.items():
        kind = KEY_TYPES.get(types or name, {}).get(key)
        if kind is not None:
            _check_type(value, kind, f"{name}.{key}", where)
    return table


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_type(value: Any, kind: Any, name: str, where: _Located) -> None:
    """Refuse a value of the wrong TOML type (or outside the simulator's range) with the key and its line."""
    if kind is str:
        if not isinstance(value, str):
            raise where.error(name, f"must be a string in quotes, got {value!r}")
    elif kind is bool:
        if not isinstance(value, bool):
            raise where.error(name, f"must be true or false (no quotes), got {value!r}")
    elif kind in ("count", "index"):
        low = 1 if kind == "count" else 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise where.error(name, f"must be a whole number, got {value!r}")
        if value < low:
            raise where.error(name, f"must be a whole number >= {low}, got {value!r}")
        if value > MAX_COUNT:
            raise where.error(name, f"must be at most {MAX_COUNT:,}, got {value!r}")
    elif kind == "seconds":
        if not _is_number(value) or not math.isfinite(value) or value < 0:
            raise where.error(name, f"must be a number of seconds >= 0, got {value!r}")
        if value > MAX_SECONDS:
            raise where.error(
                name,
                f"{value:g} s is beyond the simulator's clock (integer milliseconds): at most {MAX_SECONDS:g} s",
            )
    elif kind == "dist":
        if not (_is_number(value) or isinstance(value, str)):
            raise where.error(name, f"expected seconds or a distribution like 'exp:60', got {value!r}")
    elif kind in ("rate", "hourly"):
        per = "per second" if kind == "rate" else "per worker-hour"
        if not _is_number(value) or not math.isfinite(value) or value < 0 or (kind == "rate" and value == 0):
            raise where.error(
                name, f"must be a number {'> 0' if kind == 'rate' else '>= 0'} {per}, got {value!r}"
            )
        scale = 1.0 if kind == "rate" else 3600.0
        if value and scale / value > MAX_SECONDS:
            raise where.error(
                name, f"{value:g} {per} makes gaps beyond the simulator's clock; use a larger rate"
            )
    elif kind == "probability":
        if not _is_number(value) or not 0 <= value < 1:
            raise where.error(name, f"must be a probability in [0, 1), got {value!r}")
    elif kind == "array":
        if not isinstance(value, list):
            raise where.error(name, f"must be an array of tables ([[{name}]]), got {value!r}")
    elif kind == "table" and not isinstance(value, dict):
        raise where.error(name, f"must be a table, got {value!r}")


def _dist(value: Any, name: str, where: _Located) -> Distribution:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise where.error(name, f"expected seconds or a distribution like 'exp:60', got {value!r}")
    try:
        return check_distribution(
            parse_distribution(str(value), base=where.path.parent), "the distribution"
        )  # file: paths are beside the TOML
    except ConfigError as exc:
        raise where.error(name, str(exc)) from None


def _seconds_or_dist(value: Any, name: str, where: _Located) -> float | Distribution:
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_type(value, "seconds", name, where)
        return float(value)
    return _dist(value, name, where)


def _build(factory: Any, label: str, where: _Located, kwargs: dict[str, Any]) -> Any:
    try:
        return factory(**kwargs)
    except ConfigError as exc:
        raise where.error(label, str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise where.error(label, f"wrong type of value ({exc})") from None


def _scenario(table: Any, where: _Located) -> Scenario:
    table = _check_keys(table, SCENARIO_KEYS, "scenario", where)
    kwargs: dict[str, Any] = {
        k: v for k, v in table.items() if k not in ("faults", "random_faults", "network")
    }
    if "duration" in kwargs:
        kwargs["duration"] = _dist(kwargs["duration"], "scenario.duration", where)
    for key in ("workers", "concurrency", "jobs", "hz"):
        if key in kwargs and (isinstance(kwargs[key], bool) or not isinstance(kwargs[key], int)):
            raise where.error(f"scenario.{key}", f"must be a whole number, got {kwargs[key]!r}")
    for key in ("arrival_rate", "horizon"):
        if key in kwargs and (isinstance(kwargs[key], bool) or not isinstance(kwargs[key], int | float)):
            raise where.error(f"scenario.{key}", f"must be a number, got {kwargs[key]!r}")
    faults = []
    for i, fault in enumerate(table.get("faults", [])):
        name = f"scenario.faults[{i}]"
        fault = dict(_check_keys(fault, FAULT_KEYS, name, where, types="fault"))
        kind = fault.pop("kind", None)
        if kind not in FAULT_KINDS:
            raise where.error(
                f"{name}.kind", f"must be one of {', '.join(map(repr, FAULT_KINDS))}, got {kind!r}"
            )
        if "after" in fault:
            if kind == "outage":
                raise where.error(f"{name}.after", "an outage starts at an absolute time: use at = seconds")
            fault["after"] = _seconds_or_dist(fault["after"], f"{name}.after", where)
        if kind in ("freeze", "block", "outage"):
            if "duration" not in fault:
                raise where.error(f"{name}.kind", f"a {kind} needs duration = seconds")
            if kind == "outage":
                if isinstance(fault["duration"], bool) or not isinstance(fault["duration"], int | float):
                    raise where.error(f"{name}.duration", "an outage's duration must be a number of seconds")
            else:
                fault["duration"] = _seconds_or_dist(fault["duration"], f"{name}.duration", where)
        elif "duration" in fault:
            raise where.error(f"{name}.duration", f"a {kind} has no duration (did you mean kind = 'freeze'?)")
        for key, owner in (
            ("restart_after", "crash"),
            ("lost_writes", "outage"),
            ("redis_restart", "outage"),
        ):
            if key in fault and kind != owner:
                raise where.error(
                    f"{name}.{key}", f"only a{'n' if owner[0] == 'o' else ''} {owner} has {key}"
                )
        if "redis_restart" in fault and not isinstance(fault["redis_restart"], bool):
            raise where.error(
                f"{name}.redis_restart", f"must be true or false, got {fault['redis_restart']!r}"
            )
        if kind == "child_crash" and ("worker" in fault or "at" in fault):
            raise where.error(f"{name}.kind", "a child_crash hits a job: use job = N and after = seconds")
        faults.append(_build(FAULT_KINDS[kind], f"{name}.kind", where, fault))
    kwargs["faults"] = tuple(faults)
    if "random_faults" in table:
        rf = dict(
            _check_keys(
                table["random_faults"], RANDOM_KEYS, "scenario.random_faults", where, types="random_faults"
            )
        )
        for key in ("freeze_duration", "block_duration", "outage_duration"):
            if key in rf:
                rf[key] = _dist(rf[key], f"scenario.random_faults.{key}", where)
        kwargs["random_faults"] = _build(RandomFaults, "scenario.random_faults", where, rf)
    if "network" in table:
        net = dict(_check_keys(table["network"], NETWORK_KEYS, "scenario.network", where, types="network"))
        if "rtt" in net:
            net["rtt"] = _dist(net["rtt"], "scenario.network.rtt", where)
        kwargs["network"] = _build(Network, "scenario.network", where, net)
    return _build(Scenario, "scenario", where, kwargs)


def _policy(table: Any, where: _Located) -> ReclaimPolicy:
    table = dict(_check_keys(table, POLICY_KEYS, "policy", where))
    kind = table.pop("kind", "lease")
    if "take" in table:
        table["take_mode"] = table.pop("take")
    if kind == "lease":
        return _build(LeasePolicy, "policy", where, table)
    if kind == "timeout":
        return _build(TimeoutPolicy, "policy", where, table)
    if kind in PRESETS:
        return _build(lambda **kw: preset(kind, **kw), "policy", where, table)
    raise where.error(
        "policy.kind", f"must be 'lease', 'timeout' or a preset ({', '.join(PRESETS)}), got {kind!r}"
    )
