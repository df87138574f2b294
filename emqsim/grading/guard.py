"""What the answers must leave alone: a snapshot of the libraries' attributes and code, and the first change."""

from __future__ import annotations

import sys
from typing import Any


def _snapshot() -> dict[tuple[str, str], Any]:
    """What the answers must leave alone: the attributes of Python's builtins, math, statistics, NumPy and every
    loaded emqsim module, the contents of emqsim's classes and dicts, and the code of emqsim's functions."""
    import builtins
    import math
    import statistics
    import types

    import numpy

    import emqsim.analytic  # (and the package, emqsim, with it)
    import emqsim.fencing  # (emqsim.grading is loaded: this module is in it)
    import emqsim.protocol
    import emqsim.stats  # noqa: F401

    snap: dict[tuple[str, str], Any] = {}
    for module in (builtins, math, statistics, numpy):
        for key, value in list(vars(module).items()):
            snap[(module.__name__, key)] = value
    for name, module in sorted(sys.modules.items()):
        if not (name == "emqsim" or name.startswith("emqsim.")) or module is None:
            continue
        for key, value in list(vars(module).items()):
            where = f"{name}.{key}"
            snap[(name, key)] = value
            if isinstance(value, type) and value.__module__ == name:
                snap[(where, "*keys*")] = _own_keys(value)
                for attr, member in vars(value).items():
                    snap[(where, attr)] = member
                    if isinstance(member, types.FunctionType):
                        snap[(f"{where}.{attr}", "*code*")] = (member.__code__, member.__defaults__)
            elif isinstance(value, types.FunctionType) and value.__module__ == name:
                snap[(where, "*code*")] = (value.__code__, value.__defaults__, value.__kwdefaults__)
            elif isinstance(value, dict):
                snap[(where, "*items*")] = list(value.items())
    return snap


def _changed(snap: dict[tuple[str, str], Any]) -> str | None:
    """The first thing in `snap` that is no longer as it was, or None."""
    import types

    for (where, key), before in snap.items():
        if key == "*keys*":
            module, _, cls = where.rpartition(".")
            now: Any = _own_keys(getattr(sys.modules[module], cls))
            if now != before:
                return f"{where} (attributes {sorted(now ^ before)[:3]})"
            continue
        if key == "*code*":
            owner, _, name = where.rpartition(".")
            holder = sys.modules.get(owner)
            if holder is None:
                module, _, cls = owner.rpartition(".")
                holder = getattr(sys.modules[module], cls)
            fn = vars(holder).get(name)
            if isinstance(fn, types.FunctionType):
                now = (
                    (fn.__code__, fn.__defaults__)
                    if len(before) == 2
                    else (fn.__code__, fn.__defaults__, fn.__kwdefaults__)
                )
                if any(a is not b for a, b in zip(now, before, strict=True)):
                    return f"{where} (its code)"
            continue
        if key == "*items*":
            owner, _, name = where.rpartition(".")
            value = vars(sys.modules[owner]).get(name)
            if (
                not isinstance(value, dict)
                or len(value) != len(before)
                or any(value.get(k, _MISSING) is not v for k, v in before)
            ):
                return f"{where} (its contents)"
            continue
        holder = sys.modules.get(where)
        if holder is None:
            module, _, cls = where.rpartition(".")
            holder = getattr(sys.modules[module], cls)
        if vars(holder).get(key, _MISSING) is not before:
            return f"{where}.{key}"
    return None


_MISSING = object()
_CACHES = frozenset({"__slotnames__"})  # copyreg caches this on a class the first time it is deep-copied


def _own_keys(cls: type) -> frozenset[str]:
    """The names a class defines, less what Python adds to it by itself: copyreg's cache, and the empty
    `__annotations__` that reading it creates on a class without annotations (Python 3.10+), as the
    library's own argument checks may do while the checks run."""
    return frozenset(
        name
        for name, value in vars(cls).items()
        if name not in _CACHES and not (name == "__annotations__" and value == {})
    )
