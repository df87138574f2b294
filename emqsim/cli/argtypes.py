"""Argument types for the command line: each parses one flag's text or raises ArgumentTypeError with the fix
in its message (argparse prints it as one line, exit status 2)."""

from __future__ import annotations

import argparse
import functools
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emqsim.distributions import Distribution, parse_distribution
from emqsim.errors import ConfigError
from emqsim.fileio import folder_problem, writable_problem
from emqsim.policies import ReclaimPolicy
from emqsim.presets import PRESETS
from emqsim.scenario import STANDARD
from emqsim.units import MAX_SECONDS, check_distribution
from emqsim.user_code import EXAMPLE as DETECTOR_EXAMPLE
from emqsim.user_code import detector, looks_like_detector


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (e.g. 30 or 0.5)") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds (e.g. 30)")
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is beyond the simulator's clock (integer milliseconds): at most {MAX_SECONDS:g} s"
        )
    return value


def seconds_or_zero(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return seconds(text)


MAX_COUNT = 10**9  # workers, jobs, concurrency, replications: far beyond any sweep that fits in memory


def whole(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text!r} must be at most {high:,}")
        return value

    return parse


def probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability (e.g. 0.1)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a probability in [0, 1), e.g. 0.1")
    return value


def grid(text: str) -> list[float]:
    """`30`, `10,20,30` or `10:60:10` (start:stop:step, stop included), or a mix: `5,10:30:10`."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise argparse.ArgumentTypeError(f"{text!r} has an empty item; use 10,20,30 or 10:60:10")
        if ":" in part:
            pieces = part.split(":")
            if len(pieces) != 3:
                raise argparse.ArgumentTypeError(f"range {part!r} must be start:stop:step, e.g. 10:60:10")
            start, stop, step = (seconds(p) for p in pieces)
            if stop < start:
                raise argparse.ArgumentTypeError(f"range {part!r} has stop < start; write it as 10:60:10")
            steps = (stop - start) / step  # inf for a step of 1e-320
            if not steps < 1000:
                raise argparse.ArgumentTypeError(f"range {part!r} has over 1000 values; at most 1000")
            count = int(math.floor(steps + 1e-9)) + 1
            if count > 1000:
                raise argparse.ArgumentTypeError(f"range {part!r} has {count} values; at most 1000")
            values.extend(round(start + i * step, 9) for i in range(count))
        else:
            values.append(seconds(part))
    return sorted(set(values))


def timeouts(text: str) -> list[float]:
    if text.strip().lower() == "none":
        return []
    return grid(text)


def span(text: str) -> tuple[float, float]:
    """`A` or `A:B` seconds (uniform in [A, B])."""
    parts = text.split(":")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be A or A:B seconds, e.g. 1 or 1:5")
    low = seconds_or_zero(parts[0])
    high = seconds_or_zero(parts[-1])
    if high < low:
        raise argparse.ArgumentTypeError(f"{text!r} has B < A; write A:B with A <= B, e.g. 1:5")
    return (low, high)


def distribution(text: str) -> Distribution:
    try:
        return check_distribution(parse_distribution(text), "the distribution")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def scenario_name(text: str) -> str:
    if text not in STANDARD:
        raise argparse.ArgumentTypeError(f"unknown scenario {text!r}; choose one of: {', '.join(STANDARD)}")
    return text


def preset_name(text: str) -> str:
    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}; choose one of: {', '.join(PRESETS)}")
    return text


POLICY_HELP = (
    "the policy to run: lease (default), timeout, or your detector from its file, FILE.py:Class or "
    "'FILE.py:Class(key=value, ...)' with its parameters as literals (docs/policies.md)"
)


def policy_choice(text: str) -> str | ReclaimPolicy:
    """`lease`, `timeout`, or a user's detector named by its file (`my_detector.py:PhiAccrual(threshold=8)`),
    imported and built here, so a bad file, class or parameter is refused before any work."""
    if text in ("lease", "timeout"):
        return text
    if not looks_like_detector(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a policy; choose lease or timeout, or give your detector as {DETECTOR_EXAMPLE}"
        )
    try:
        return detector(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _os_errors_are_bad_input(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag's parser whose file-system calls may fail (a name too long for the file system, a loop of links):
    the OSError becomes the flag's one-line error instead of a traceback."""

    @functools.wraps(parse)
    def checked(text: str) -> Any:
        try:
            return parse(text)
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot use {_shown(text)!r}: {exc.strerror or exc}") from None

    return checked


def _shown(text: str) -> str:
    """A path as an error message shows it: whole up to 60 characters, else its start."""
    return text if len(text) <= 60 else text[:40] + "..."


def output_path(*suffixes: str):
    @_os_errors_are_bad_input
    def parse(text: str) -> Path:
        path = Path(text)
        if path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text!r} must end in {' or '.join(suffixes)}")
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"folder {str(folder)!r} does not exist; create it first")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"folder {str(folder)!r} is not writable")
        if path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{text!r} is a folder; give a file name, e.g. {text}/results{suffixes[0]}"
            )
        if path.exists() and not path.is_file():
            raise argparse.ArgumentTypeError(f"{text!r} exists and is not a regular file; give another name")
        if path.exists() and not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"{text!r} is read-only; make it writable or give another name")
        problem = writable_problem(path, f"{path.stem}.partial{path.suffix}")
        if problem:
            raise argparse.ArgumentTypeError(f"{_shown(text)!r} cannot be written: {problem}")
        return path

    return parse


def writable_folder(what: str):
    """A folder that exists and is writable, or that can be created (its nearest existing parent is)."""

    @_os_errors_are_bad_input
    def parse(text: str) -> Path:
        path = Path(text)
        if path.exists():
            if not path.is_dir():
                raise argparse.ArgumentTypeError(f"{text!r} is a file; {what} must be a folder")
            if not os.access(path, os.W_OK | os.X_OK):
                raise argparse.ArgumentTypeError(f"folder {text!r} is not writable")
            return path
        parent = path.absolute().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(
                f"cannot create folder {text!r}: {str(parent)!r} is not a writable folder"
            )
        problem = folder_problem(path)
        if problem:
            raise argparse.ArgumentTypeError(f"{what} {_shown(text)!r} cannot be written: {problem}")
        return path

    return parse


CONFIG_HELP = (
    "a TOML scenario file instead of --scenario: a path, or the name of a shipped example such as "
    "gc-pauses (list them with `emqsim examples`); policy flags given (--lease, --beat, --scan, --timeout, "
    "--policy) win over its [policy] settings, and --preset replaces the table"
)


def example_files() -> dict[str, Path]:
    """The example scenario files installed with the package, by name (`gc-pauses` -> .../gc-pauses.toml)."""
    from importlib.resources import files

    folder = files("emqsim") / "examples"
    return {
        entry.name.removesuffix(".toml"): Path(str(entry))
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    }


@_os_errors_are_bad_input
def config_file(text: str) -> Path:
    """A scenario file: an existing path, or a shipped example's name (`gc-pauses` or `gc-pauses.toml`)."""
    path = Path(text)
    if path.is_file():
        return path
    examples = example_files()
    name = text.removesuffix(".toml")
    if "/" not in text and name in examples:
        return examples[name]
    if path.name.removesuffix(".toml") in examples and path.parts[-2:-1] == ("examples",):
        return examples[path.name.removesuffix(".toml")]  # emqsim/examples/X.toml outside a checkout
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a readable file or an example name; check the path, or give one of: "
        f"{', '.join(examples)} (see `emqsim examples`)"
    )


# Optional features and the modules they need; `missing_extra` names what to install before any work starts.
EXTRAS = {
    "live": ("redis",),
    "notebooks": ("nbformat", "nbclient", "ipykernel"),
    "dask": ("dask", "distributed"),
}


def missing_extra(extra: str) -> str | None:
    """None if the modules of `extra` import, else one line saying which extra to install."""
    from importlib.util import find_spec

    def absent(module: str) -> bool:
        try:
            return find_spec(module) is None
        except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
            return True

    missing = [module for module in EXTRAS[extra] if absent(module)]
    if not missing:
        return None
    return f"needs the {extra!r} extra ({', '.join(missing)} missing): pip install 'emqsim[{extra}]'"


@_os_errors_are_bad_input
def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable file; check the path")
    return path


def rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate per worker-hour (e.g. 2 or 0.5)") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a rate >= 0 per worker-hour (e.g. 2)")
    return value


def add_policy_flags(p: argparse.ArgumentParser, gridded: bool) -> None:
    kind = grid if gridded else seconds
    g = p.add_argument_group("policy settings (seconds)")
    several = "; a grid: 10,20,30 or 10:60:10" if gridded else ""
    g.add_argument("--lease", type=kind, help=f"lock lease (PX){several} (default 30)")
    g.add_argument("--beat", type=kind, help=f"heartbeat period{several} (default lease/3)")
    g.add_argument("--scan", type=kind, help=f"sweep/reaper interval{several} (default 5)")
    g.add_argument(
        "--timeout",
        type=timeouts if gridded else seconds,
        help="fixed timeout(s) for the reaper"
        + (" (default 30,120,600,1200; 'none' to skip)" if gridded else ""),
    )
    g.add_argument("--preset", type=preset_name, help=f"a real system's defaults: {', '.join(PRESETS)}")
