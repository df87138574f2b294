"""The one error type for bad input: its message is a single line saying what is wrong and how to fix it."""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid settings, scenario or argument. The CLI prints `error: <message>` and exits with status 2."""
