"""The one error type for bad input: its message is a single line saying what is wrong and how to fix it."""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid settings, scenario or argument. The CLI prints `error: <message>` and exits with status 2."""


class WrongType(ConfigError, TypeError):
    """An argument of the wrong type (`Crash(after='5')`, `LeasePolicy(lease=True)`): a TypeError naming it,
    and a ConfigError, so the command line prints it as its one line with exit status 2."""


def _kind(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def require_number(where: str, value: object, *, none: bool = False) -> None:
    """`value` must be an int or a float (never a bool, a string or None unless `none`): else WrongType."""
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        also = " or None" if none else ""
        raise WrongType(f"{where} must be a number{also}, got {_kind(value)}")


def require_whole(where: str, value: object, *, low: int = 0, none: bool = False) -> None:
    """`value` must be a whole number >= `low` (an int, never a bool or a float such as 1.5), or None if
    `none`."""
    if value is None and none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        also = " or None" if none else ""
        raise WrongType(f"{where} must be a whole number{also}, got {_kind(value)}")
    if value < low:
        raise ConfigError(f"{where} must be >= {low}, got {value}")


def require_bool(where: str, value: object) -> None:
    """`value` must be True or False (not 'no', 0 or None)."""
    if not isinstance(value, bool):
        raise WrongType(f"{where} must be True or False, got {_kind(value)}")


def require_instance(where: str, value: object, kinds: type | tuple[type, ...], what: str) -> None:
    """`value` must be an instance of `kinds` (`what` names them for the message)."""
    if not isinstance(value, kinds):
        raise WrongType(f"{where} must be {what}, got {_kind(value)}")
