"""Helpers every chart shares: a row's metric, a policy's short label, error bars from an interval, a legend's
place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes

from emqsim.stats import DEPRECATED_KEYS

__all__ = ["ci_errors", "metric", "place_legend", "policy_label"]

_DEPRECATED_NAME = {new: old for old, new in DEPRECATED_KEYS.items()}


def metric(row: Mapping[str, Any], key: str) -> Any:
    """A result row's value of `key` (its current name). During 0.3.x a row that gives the value only under its
    deprecated 0.2 name (a row written by hand or read from a 0.2 file) is read under that name."""
    value = row.get(key)
    if value is None and key in _DEPRECATED_NAME:
        value = row.get(_DEPRECATED_NAME[key])
    return value


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:g}"


def policy_label(settings: Mapping[str, Any]) -> str:
    """A short human label for a policy's settings (a `Run.policy` dict or a table row)."""
    name = settings.get("policy", "policy")
    if settings.get("label"):
        return str(settings["label"])
    if settings.get("timeout") is not None:
        text = f"timeout {_num(settings['timeout'])} s"
        return text if name == "timeout" else f"{name} ({text})"
    if settings.get("lease") is not None:
        text = f"lease {_num(settings['lease'])} s, beat {_num(settings.get('beat'))} s"
        return text if name == "lease" else f"{name} ({text})"
    return str(name)


def ci_errors(value: float | None, ci: Sequence[float | None] | None) -> tuple[float, float]:
    """Error-bar lengths (below, above) of `value` inside its interval `ci`; none when an end is unknown."""
    if value is None or not ci or ci[0] is None or ci[1] is None:
        return (0.0, 0.0)
    return (max(0.0, value - ci[0]), max(0.0, ci[1] - value))


def place_legend(ax: Axes, handles: list[Any], loc: str) -> None:
    """A legend inside the axes at `loc`, or to the right of them with loc="outside"."""
    if loc == "outside":
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles=handles, loc=loc)  # type: ignore[call-overload]
