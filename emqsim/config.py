"""Scenario files: a scenario (and optionally a policy) in TOML, validated with errors that name the key
and its line. See emqsim/examples/*.toml.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields, replace
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from emqsim.distributions import (
    Distribution,
    Empirical,
    Exponential,
    Fixed,
    LogNormal,
    Uniform,
    parse_distribution,
)
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
from emqsim.fileio import read_regular_text
from emqsim.policies import LeasePolicy, ReclaimPolicy, RenewalRule, TimeoutPolicy
from emqsim.presets import PRESETS, preset
from emqsim.scenario import Scenario
from emqsim.units import MAX_SECONDS, check_distribution
from emqsim.user_code import load_detector, looks_like_detector, parse_detector

# The schema of a scenario file is derived from the dataclasses: a table's keys are its type's init fields, and
# each key's kind comes from the field's type hint (so a new option is a dataclass field and nothing else).
# Kinds: str, bool, "count" (whole number >= 1: an int field with a default >= 1), "index" (whole number >= 0:
# any other int), "seconds" (a number within the simulator's clock: a float), "dist" (seconds or a
# distribution like 'exp:60': a Distribution), "rate" (> 0 per second), "per second" (>= 0), "hourly" (>= 0
# per worker-hour: floats ending in "_rate"), "seconds or inf", "probability" (floats named in FLOAT_KINDS are
# not seconds), "array" (of tables), "strings" (an array of strings: a tuple of str), "table". TOML is
# typed: "no" is a string, not false; 1.5 is not a count. A field typed `X | None` whose default is not None
# takes the string "none" for None (a max_stalled that never fails a job, a crash that is never restarted).
FAULT_KINDS: dict[str, type] = {
    "crash": Crash, "freeze": Freeze, "block": Block, "outage": Outage, "child_crash": ChildCrash,
    "partition": Partition, "memory_pressure": MemoryPressure,
}  # fmt: skip
POLICY_KINDS: dict[str, type] = {"lease": LeasePolicy, "timeout": TimeoutPolicy}
TABLE_TYPES: dict[str, type] = {
    "random_faults": RandomFaults, "network": Network, "renewal": RenewalRule,
}  # fmt: skip
# floats that are not seconds: a memory pressure's cache writes `cache_rate` keys a second (0: no cache); an
# outage's `readonly` may be inf (the clients never leave the demoted primary)
FLOAT_KINDS = {
    "arrival_rate": "rate", "loss": "probability", "cache_rate": "per second", "readonly": "seconds or inf",
}  # fmt: skip
ALIASES = {"take": "take_mode"}  # older spellings of [policy] keys, still read
NONE = "none"


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """(the hint without None, whether None was allowed)."""
    if get_origin(hint) in (Union, UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        optional = len(args) < len(get_args(hint))
        if len(args) == 1:
            return args[0], optional
        return Union[tuple(args)], optional  # noqa: UP007
    return hint, False


def key_kind(owner: type, name: str) -> Any:
    """The TOML kind of `owner`'s field `name`, from its type hint (see the table above)."""
    hint, optional = _unwrap_optional(get_type_hints(owner)[name])
    default = {f.name: f.default for f in fields(owner)}.get(name, MISSING)
    if hint is bool:
        return bool
    if hint is str or get_origin(hint) is Literal:
        return str
    if hint is int:
        return "count" if isinstance(default, int) and default >= 1 and not optional else "index"
    if hint is float:
        if name in FLOAT_KINDS:
            return FLOAT_KINDS[name]
        return "hourly" if name.endswith("_rate") else "seconds"
    if get_origin(hint) is tuple and get_args(hint) == (str, Ellipsis):
        return "strings"
    if get_origin(hint) is tuple:
        return "array"
    if hint is Distribution or (get_origin(hint) in (Union, UnionType) and Distribution in get_args(hint)):
        return "dist"
    return "table"


def table_keys(owner: type) -> dict[str, Any]:
    """The keys of `owner`'s TOML table and their kinds: its init fields, in order."""
    return {f.name: key_kind(owner, f.name) for f in fields(owner) if f.init}


def _none_allowed(owner: type, name: str) -> bool:
    """Whether `owner.name` is `X | None` with a non-None default (so "none" is how a file says None)."""
    field = {f.name: f for f in fields(owner)}[name]
    return _unwrap_optional(get_type_hints(owner)[name])[1] and field.default is not None


def _merged(*owners: type) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for owner in owners:
        for key, kind in table_keys(owner).items():
            merged.setdefault(key, kind)
    return merged


# Every key each table takes, and its kind (derived; kept as data for the docs and the fuzz tests).
KEY_TYPES: dict[str, dict[str, Any]] = {
    "scenario": table_keys(Scenario),
    "fault": {"kind": str, **_merged(*FAULT_KINDS.values())},
    "random_faults": table_keys(RandomFaults),
    "network": table_keys(Network),
    "policy": {"kind": str, **_merged(LeasePolicy, TimeoutPolicy)},
}
RENEWAL_KEYS = table_keys(RenewalRule)  # [policy.renewal]
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
    table = data["policy"]
    if not isinstance(table, dict):
        raise where.error("policy", "must be a table")
    policies = []
    for given in overrides or [{}]:
        merged = dict(table)
        kind = given.get("kind")
        if isinstance(kind, ReclaimPolicy):  # a detector built from its file on the command line
            policies.append(kind)
            continue
        if kind is not None and kind != merged.get("kind", "lease"):
            merged = {"kind": kind}
        merged.update({k: v for k, v in given.items() if k != "kind" and v is not None})
        policies.append(_policy(merged, where))
    return scenario, policies


def _check_keys(
    table: Any, allowed: Mapping[str, Any], name: str, where: _Located, owner: type | None = None
) -> dict[str, Any]:
    """`table` as a dict whose keys are all `allowed` and whose values have their kinds (`owner`, the type
    the table builds, says which keys take "none")."""
    if not isinstance(table, dict):
        raise where.error(name, "must be a table")
    for key in table:
        if key not in allowed:
            raise where.error(f"{name}.{key}", f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for key, value in table.items():
        if value == NONE and owner is not None and key in table_keys(owner) and _none_allowed(owner, key):
            continue
        _check_type(value, allowed[key], f"{name}.{key}", where)
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
    elif kind == "seconds or inf":
        if not _is_number(value) or math.isnan(value) or value < 0:
            raise where.error(name, f"must be a number of seconds >= 0, or inf, got {value!r}")
        if math.isfinite(value) and value > MAX_SECONDS:
            raise where.error(
                name,
                f"{value:g} s is beyond the simulator's clock: at most {MAX_SECONDS:g} s, or inf for never",
            )
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
    elif kind in ("rate", "hourly", "per second"):
        per = "per worker-hour" if kind == "hourly" else "per second"
        if not _is_number(value) or not math.isfinite(value) or value < 0 or (kind == "rate" and value == 0):
            raise where.error(
                name, f"must be a number {'> 0' if kind == 'rate' else '>= 0'} {per}, got {value!r}"
            )
        scale = 3600.0 if kind == "hourly" else 1.0
        if value and scale / value > MAX_SECONDS:
            raise where.error(
                name, f"{value:g} {per} makes gaps beyond the simulator's clock; use a larger rate"
            )
    elif kind == "probability":
        if not _is_number(value) or not 0 <= value < 1:
            raise where.error(name, f"must be a probability in [0, 1), got {value!r}")
    elif kind == "strings":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise where.error(name, f"must be an array of strings, got {value!r}")
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
    """`factory(**kwargs)`, its ConfigError located at the key it names (else at `label`)."""
    try:
        return factory(**kwargs)
    except ConfigError as exc:
        named = [k for k in kwargs if re.search(rf"\b{re.escape(k)}\b", str(exc))]
        raise where.error(f"{label}.{named[0]}" if named else label, str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise where.error(label, f"wrong type of value ({exc})") from None


def _values(owner: type, table: dict[str, Any], name: str, where: _Located) -> dict[str, Any]:
    """A checked table's values as `owner`'s keyword arguments: distributions parsed, "none" as None,
    nested tables built."""
    kinds = table_keys(owner)
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        label = f"{name}.{key}"
        if value == NONE and _none_allowed(owner, key):
            kwargs[key] = None
        elif kinds[key] == "dist":
            hint = _unwrap_optional(get_type_hints(owner)[key])[0]
            kwargs[key] = (
                _seconds_or_dist(value, label, where)
                if hint is not Distribution
                else _dist(value, label, where)
            )
        elif kinds[key] == "table" and key in TABLE_TYPES:
            kwargs[key] = _record(TABLE_TYPES[key], value, label, where)
        elif kinds[key] == "strings":
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = value
    return kwargs


def _record(owner: type, table: Any, name: str, where: _Located) -> Any:
    """The `owner` record a [table] describes, every key and value checked, errors located."""
    table = _check_keys(table, table_keys(owner), name, where, owner)
    return _build(owner, name, where, _values(owner, table, name, where))


# What to say when a fault has a key of another kind (a crash has no duration, ...).
FAULT_HINTS = {
    ("outage", "after"): "an outage starts at an absolute time: use at = seconds",
    ("child_crash", "worker"): "a child_crash hits a job: use job = N and after = seconds",
    ("child_crash", "at"): "a child_crash hits a job: use job = N and after = seconds",
}


def _a(word: str) -> str:
    return f"a{'n' if word[0] in 'aeiou' else ''} {word}"


def _fault(table: Any, name: str, where: _Located) -> Any:
    table = dict(_check_keys(table, KEY_TYPES["fault"], name, where))
    kind = table.pop("kind", None)
    if kind not in FAULT_KINDS:
        raise where.error(f"{name}.kind", f"must be one of {', '.join(map(repr, FAULT_KINDS))}, got {kind!r}")
    owner = FAULT_KINDS[kind]
    own = table_keys(owner)
    for key in table:
        if key in own:
            continue
        # a kind whose type extends another owner's (a partition is an outage) is not named again
        types = {k: t for k, t in FAULT_KINDS.items() if key in table_keys(t)}
        owners = [
            k for k, t in types.items() if not any(t is not u and issubclass(t, u) for u in types.values())
        ]
        hint = FAULT_HINTS.get((kind, key))
        if hint is None and len(owners) == 1:
            hint = f"only {_a(owners[0])} has {key}"
        if hint is None:
            hint = f"{_a(kind)} has no {key} (did you mean kind = {owners[0]!r}?)"
        where_key = f"{name}.kind" if (kind, key) == ("child_crash", "worker") else f"{name}.{key}"
        raise where.error(where_key, hint)
    _check_keys(table, own, name, where, owner)  # the kind's own types (an outage's duration is a number)
    missing = [f.name for f in fields(owner) if f.init and f.default is MISSING and f.name not in table]
    if missing:
        raise where.error(f"{name}.kind", f"{_a(kind)} needs {' and '.join(f'{m} = ...' for m in missing)}")
    return _build(owner, f"{name}.kind", where, _values(owner, table, name, where))


def _scenario(table: Any, where: _Located) -> Scenario:
    table = dict(_check_keys(table, KEY_TYPES["scenario"], "scenario", where, Scenario))
    faults = table.pop("faults", [])
    kwargs = _values(Scenario, table, "scenario", where)
    kwargs["faults"] = tuple(_fault(f, f"scenario.faults[{i}]", where) for i, f in enumerate(faults))
    return _build(Scenario, "scenario", where, kwargs)


def _policy(table: dict[str, Any], where: _Located) -> ReclaimPolicy:
    """The policy a [policy] table describes: `kind` names a type (its fields are the keys) or a preset (its
    settings are)."""
    table = dict(table)
    kind = table.pop("kind", "lease")
    _check_type(kind, str, "policy.kind", where)
    if looks_like_detector(kind):  # a user's detector: the table's other keys are its parameters
        try:
            spec = parse_detector(kind, base=where.path.parent)  # a relative file is beside the TOML
            return load_detector(replace(spec, params=spec.params + tuple(table.items())))
        except ConfigError as exc:
            raise where.error("policy.kind", str(exc)) from None
    renamed = {new: old for old, new in ALIASES.items() if old in table}
    for new, old in renamed.items():
        table[new] = table.pop(old)
    try:
        if kind in POLICY_KINDS:
            return _record(POLICY_KINDS[kind], table, "policy", where)
        if kind in PRESETS:
            _check_keys(table, KEY_TYPES["policy"], "policy", where, LeasePolicy)
            table = {k: None if v == NONE else v for k, v in table.items()}
            return _build(lambda **kw: preset(kind, **kw), "policy", where, table)
    except ConfigError as exc:
        if not renamed:
            raise
        new, old = next(iter(renamed.items()))  # say it as the file does: `take`, not `take_mode`
        message = str(exc).split(f"policy.{new}: ", 1)[-1].replace(new, old)
        raise where.error(f"policy.{old}", message) from None
    raise where.error(
        "policy.kind", f"must be 'lease', 'timeout' or a preset ({', '.join(PRESETS)}), got {kind!r}"
    )


# -- writing -----------------------------------------------------------------------------------------------------
def distribution_text(value: Distribution) -> str:
    """A distribution as `parse_distribution` reads it back (floats by their repr: exact)."""
    match value:
        case Fixed():
            return f"fixed:{float(value.value)!r}"
        case Uniform():
            return f"uniform:{float(value.low)!r}:{float(value.high)!r}"
        case Exponential():
            return f"exp:{float(value.mean_value)!r}"
        case LogNormal():
            return f"lognormal:{float(value.median)!r}:{float(value.sigma)!r}"
        case Empirical():
            return "empirical:" + ",".join(repr(float(v)) for v in value.values)
    raise ConfigError(f"{type(value).__name__} cannot be written to a scenario file (no text form)")


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, tuple):
        return json.dumps(list(value))  # a JSON array of strings is a TOML array
    return json.dumps(distribution_text(value))


def _lines(record: Any, skip: Sequence[str] = ()) -> list[str]:
    """`key = value` for every init field of `record` that differs from its default ("none" for a None)."""
    lines = []
    for f in fields(record):
        value = getattr(record, f.name)
        if not f.init or f.name in skip or (f.default is not MISSING and value == f.default):
            continue
        if f.default_factory is not MISSING and value == f.default_factory():
            continue
        lines.append(f"{f.name} = {_literal(NONE if value is None else value)}")
    return lines


def to_toml(scenario: Scenario, policy: ReclaimPolicy | None = None) -> str:
    """A scenario file that `load_config` reads back as `(scenario, policy)`, equal: every field that differs
    from its default, by the same schema (a built-in `LeasePolicy` or `TimeoutPolicy`, or a preset as it
    ships). A distribution without a text form (a user's own class) is refused."""
    out = ["[scenario]", *_lines(scenario, skip=("faults", "random_faults", "network"))]
    if scenario.network != Network():
        out += ["", "[scenario.network]", *_lines(scenario.network)]
    if scenario.random_faults is not None:
        out += ["", "[scenario.random_faults]", *_lines(scenario.random_faults)]
    kinds = {owner: kind for kind, owner in FAULT_KINDS.items()}
    for fault in scenario.faults:
        out += ["", "[[scenario.faults]]", f"kind = {_literal(kinds[type(fault)])}", *_lines(fault)]
    if policy is not None:
        out += ["", "[policy]", *_policy_lines(policy)]
    return "\n".join(out) + "\n"


def _policy_lines(policy: ReclaimPolicy) -> list[str]:
    kinds = {owner: kind for kind, owner in POLICY_KINDS.items()}
    if type(policy) in kinds:
        lines = [f"kind = {_literal(kinds[type(policy)])}", *_lines(policy, skip=("renewal",))]
        rule = getattr(policy, "renewal", None)
        if isinstance(policy, LeasePolicy) and rule is not None:
            lines = [line for line in lines if not line.startswith("track_by")]  # the rule's own, below
            lines += ["", "[policy.renewal]", *_lines(rule)]
        return lines
    if policy.name in PRESETS and policy == preset(policy.name):
        return [f"kind = {_literal(policy.name)}"]
    raise ConfigError(
        f"{type(policy).__name__} cannot be written to a scenario file: only LeasePolicy, TimeoutPolicy and "
        "the presets as they ship can"
    )


# -- for the other TOML readers (emqsim.cli.tune): the same line-naming errors and distribution checks ---------
Located = _Located


def toml_distribution(value: Any, name: str, where: _Located) -> Distribution:
    """A TOML value (seconds, or a spec like 'exp:60'; file: paths beside the file) as a checked distribution;
    a bad one raises a ConfigError naming the key's line."""
    return _dist(value, name, where)
