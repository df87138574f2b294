"""Scenario files: a scenario (and optionally a policy) in TOML, validated with errors that name the key
and its line. See emqsim/examples/*.toml.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from emqsim.distributions import Distribution, parse_distribution
from emqsim.errors import ConfigError
from emqsim.faults import Block, ChildCrash, Crash, Freeze, Network, Outage, RandomFaults
from emqsim.policies import LeasePolicy, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import PRESETS, preset
from emqsim.scenario import Scenario

SCENARIO_KEYS = {
    "name", "workers", "concurrency", "jobs", "arrival_rate", "duration", "horizon", "phases", "hz", "queue",
    "remove_on_complete", "faults", "random_faults", "network",
}  # fmt: skip
FAULT_KEYS = {"kind", "worker", "at", "job", "after", "duration", "restart_after", "lost_writes"}
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


def load_config(path: str | Path) -> tuple[Scenario, ReclaimPolicy | None]:
    """Read a TOML scenario file: a [scenario] table and an optional [policy] table."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; check the path given to --config") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc}); give a readable UTF-8 TOML file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    where = _Located(path, text)
    unknown = sorted(set(data) - {"scenario", "policy"})
    if unknown:
        raise where.error(unknown[0], "unknown table; a scenario file has [scenario] and optionally [policy]")
    if "scenario" not in data:
        raise ConfigError(f"{path}: missing the [scenario] table (see emqsim/examples/*.toml)")
    scenario = _scenario(data["scenario"], where)
    policy = _policy(data["policy"], where) if "policy" in data else None
    return scenario, policy


def _check_keys(table: Any, allowed: set[str], name: str, where: _Located) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise where.error(name, "must be a table")
    for key in table:
        if key not in allowed:
            raise where.error(f"{name}.{key}", f"unknown key; allowed: {', '.join(sorted(allowed))}")
    return table


def _dist(value: Any, name: str, where: _Located) -> Distribution:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise where.error(name, f"expected seconds or a distribution like 'exp:60', got {value!r}")
    try:
        return parse_distribution(str(value))
    except ConfigError as exc:
        raise where.error(name, str(exc)) from None


def _seconds_or_dist(value: Any, name: str, where: _Located) -> float | Distribution:
    if isinstance(value, int | float) and not isinstance(value, bool):
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
        fault = dict(_check_keys(fault, FAULT_KEYS, name, where))
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
        for key, owner in (("restart_after", "crash"), ("lost_writes", "outage")):
            if key in fault and kind != owner:
                raise where.error(
                    f"{name}.{key}", f"only a{'n' if owner[0] == 'o' else ''} {owner} has {key}"
                )
        if kind == "child_crash" and ("worker" in fault or "at" in fault):
            raise where.error(f"{name}.kind", "a child_crash hits a job: use job = N and after = seconds")
        faults.append(_build(FAULT_KINDS[kind], f"{name}.kind", where, fault))
    kwargs["faults"] = tuple(faults)
    if "random_faults" in table:
        rf = dict(_check_keys(table["random_faults"], RANDOM_KEYS, "scenario.random_faults", where))
        for key in ("freeze_duration", "block_duration", "outage_duration"):
            if key in rf:
                rf[key] = _dist(rf[key], f"scenario.random_faults.{key}", where)
        kwargs["random_faults"] = _build(RandomFaults, "scenario.random_faults", where, rf)
    if "network" in table:
        net = dict(_check_keys(table["network"], NETWORK_KEYS, "scenario.network", where))
        if "rtt" in net:
            net["rtt"] = _dist(net["rtt"], "scenario.network.rtt", where)
        kwargs["network"] = _build(Network, "scenario.network", where, net)
    return _build(Scenario, "scenario", where, kwargs)


def _policy(table: Any, where: _Located) -> ReclaimPolicy:
    table = dict(_check_keys(table, POLICY_KEYS, "policy", where))
    kind = table.pop("kind", "lease")
    if kind == "lease":
        return _build(LeasePolicy, "policy", where, table)
    if kind == "timeout":
        return _build(TimeoutPolicy, "policy", where, table)
    if kind in PRESETS:
        return _build(lambda **kw: preset(kind, **kw), "policy", where, table)
    raise where.error(
        "policy.kind", f"must be 'lease', 'timeout' or a preset ({', '.join(PRESETS)}), got {kind!r}"
    )
