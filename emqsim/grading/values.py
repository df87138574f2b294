"""Values at the grader's end of the wire, apart from the connection itself: the library policies rebuilt from
their settings, which of the grader's objects a student's code may be handed, and the checks every message
field gets (emqsim.grading.trusted uses them)."""

from __future__ import annotations

from typing import Any

from emqsim.grading.wire import WireError
from emqsim.policies import ReclaimPolicy, RenewalRule


def library_policy(kind: Any, state: Any) -> ReclaimPolicy:
    """A LeasePolicy or TimeoutPolicy rebuilt from its settings, each of the type (and range) the library's
    own default has."""
    from emqsim.policies import LeasePolicy, TimeoutPolicy

    classes: dict[str, type[ReclaimPolicy]] = {"LeasePolicy": LeasePolicy, "TimeoutPolicy": TimeoutPolicy}
    if kind not in classes or not isinstance(state, dict):
        raise WireError("not a library policy")
    cls = classes[kind]
    fresh = vars(LeasePolicy() if cls is LeasePolicy else TimeoutPolicy(60.0))
    if set(state) - set(fresh):
        raise WireError(f"{kind}: unknown settings {sorted(set(state) - set(fresh))[:3]}")
    for key, value in state.items():
        default = fresh[key]
        if value is None and key in ("renewal", "max_stalled"):
            continue
        wanted = type(default) if default is not None else (RenewalRule if key == "renewal" else int)
        if type(value) is not wanted:
            raise WireError(f"{kind}.{key} must be a {wanted.__name__}")
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= 10**12:
            raise WireError(f"{kind}.{key} is out of range")
    if state.get("swept_by", "reaper") not in ("reaper", "workers"):
        raise WireError(f"{kind}.swept_by must be reaper or workers")
    made: ReclaimPolicy = object.__new__(cls)
    made.__dict__.update(fresh)
    made.__dict__.update(state)
    return made


# The grader's objects a student's code may be handed (a policy's `queue`, its store and keys), and the
# checks' own test doubles. Nothing else: not the server, the engine or the ledger behind them.
EXPORTABLE = frozenset({"emqsim.protocol.Queue", "emqsim.store.keystore.KeyStore", "emqsim.keys.QueueKeys"})


def exportable(value: Any) -> bool:
    import types

    if isinstance(value, type | types.ModuleType | types.FunctionType | types.BuiltinFunctionType):
        return False
    kind = type(value)
    module = getattr(kind, "__module__", "") or ""
    return module == "__checks__" or f"{module}.{kind.__qualname__}" in EXPORTABLE


def plain(value: Any) -> Any:
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def as_ref(value: Any) -> int:
    if type(value) is not int:
        raise WireError("a handle must be an int")
    return value


def as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise WireError("expected a list")
    return value


def as_dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError("expected an object")
    return value


def short(text: str, limit: int = 300) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


# -- proxies --------------------------------------------------------------------------------------------------
