"""A user's detector, named by its file: `my_detector.py:PhiAccrual` or `my_detector.py:PhiAccrual(threshold=8)`.

The one way to extend the simulator is a `Detector` subclass (docs/policies.md); this module lets every
simulating command and a scenario file's `[policy]` table run one from its file. Parameters are Python
literals (numbers, strings, booleans, None, lists, tuples, dicts), read with `ast.literal_eval`, never `eval`.
Every failure (no such file, the file does not import, no such class, not a Detector, a parameter the class
does not take or refuses) is one ConfigError line, raised before any run starts.

The file is imported once per process under a module name that spells its absolute path
(`emqsim.user_code.file_<hex of the path>`): any process that can import emqsim can import it again, so a
detector pickled to a pool's worker or a Dask worker (a fresh, spawned process) is rebuilt there from the same
file, and a sweep's cache key covers the file (see `emqsim.sweep.user_code_digest`). This module is the package
of those names (its `__path__` is empty) and puts `UserFiles`, their finder, on `sys.meta_path` when imported.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from emqsim.errors import ConfigError
from emqsim.policies import Detector

__path__: list[str] = []  # a package of the user files' module names, found by `UserFiles` below
PREFIX = f"{__name__}.file_"


def module_name(path: Path) -> str:
    """The module name a detector file is imported under: its absolute path, spelled in hex."""
    return PREFIX + str(path.resolve()).encode("utf-8", "surrogateescape").hex()


class UserFiles(importlib.abc.MetaPathFinder):
    """Finds `emqsim.user_code.file_<hex>`: the file whose absolute path the hex spells (so unpickling a
    detector in a fresh process imports its file, as the parent did)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PREFIX):
            return None
        try:
            where = bytes.fromhex(fullname[len(PREFIX) :]).decode("utf-8", "surrogateescape")
        except ValueError:
            return None
        return importlib.util.spec_from_file_location(fullname, where)


if not any(isinstance(f, UserFiles) for f in sys.meta_path):
    sys.meta_path.append(UserFiles())

SPEC = re.compile(r"^(?P<path>[^()]+?\.py):(?P<name>[A-Za-z_]\w*)\s*(?:\((?P<args>.*)\))?\s*$", re.DOTALL)
EXAMPLE = "my_detector.py:PhiAccrual or 'my_detector.py:PhiAccrual(threshold=8)'"


def looks_like_detector(text: str) -> bool:
    """Whether `text` names a detector file (`FILE.py:Class...`) rather than a built-in policy."""
    return ".py:" in text


@dataclass(frozen=True)
class DetectorSpec:
    """A detector named by its file, its class and its keyword parameters (literals)."""

    path: Path
    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"{self.path}:{self.name}" + (f"({args})" if args else "")


def parse_detector(text: str, base: str | Path | None = None) -> DetectorSpec:
    """`FILE.py:Class` or `FILE.py:Class(key=literal, ...)`; a relative FILE is taken from `base` (a scenario
    file's folder) or else the current folder."""
    found = SPEC.match(text.strip())
    if not found:
        raise ConfigError(f"{text!r} does not name a detector; write FILE.py:Class, e.g. {EXAMPLE}")
    path = Path(found["path"]).expanduser()
    if base is not None and not path.is_absolute():
        path = Path(base) / path
    params: list[tuple[str, Any]] = []
    if found["args"] is not None and found["args"].strip():
        try:
            call = ast.parse(f"f({found['args']})", mode="eval").body
        except SyntaxError:
            raise ConfigError(
                f"cannot read the parameters {found['args']!r}: write them as key=value, e.g. threshold=8"
            ) from None
        assert isinstance(call, ast.Call)
        if call.args or any(k.arg is None for k in call.keywords):
            raise ConfigError(f"give {found['name']}'s parameters by name, e.g. {found['name']}(threshold=8)")
        for keyword in call.keywords:
            try:
                value = ast.literal_eval(keyword.value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                raise ConfigError(
                    f"parameter {keyword.arg}={ast.unparse(keyword.value)} is not a literal (a number, a "
                    "string in quotes, True/False/None, a list or a dict); nothing is evaluated"
                ) from None
            params.append((str(keyword.arg), value))
    return DetectorSpec(path, found["name"], tuple(params))


def _module(path: Path) -> ModuleType:
    """The user's file imported (once per process and file) under a module name of its own."""
    resolved = path.resolve()
    name = module_name(resolved)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be imported as Python; a detector file ends in .py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise ConfigError(f"{path}:{exc.lineno}: not valid Python: {exc.msg}") from None
    except BaseException as exc:  # the user's module-level code: any failure is bad input, said in one line
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        text = " ".join(str(exc).split()) or "no message"
        raise ConfigError(f"{path}: importing it failed: {type(exc).__name__}: {text}") from None
    return module


def detector_class(spec: DetectorSpec) -> type[Detector]:
    """The `Detector` subclass `spec` names, its file imported."""
    if not spec.path.is_file():
        raise ConfigError(f"{spec.path}: no such file; give the path of your detector's .py file ({EXAMPLE})")
    module = _module(spec.path)
    found = getattr(module, spec.name, None)
    if found is None:
        detectors = [
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and issubclass(v, Detector) and v is not Detector
        ]
        offer = f"; it defines {', '.join(detectors)}" if detectors else "; it defines no Detector subclass"
        raise ConfigError(f"{spec.path} has no class {spec.name}{offer}")
    if not (inspect.isclass(found) and issubclass(found, Detector)) or found is Detector:
        raise ConfigError(
            f"{spec.path}:{spec.name} is not a Detector subclass; write `class {spec.name}(emqsim.Detector)` "
            "with a suspect(job, now) method (docs/policies.md)"
        )
    return found


def load_detector(spec: DetectorSpec) -> Detector:
    """A detector built from its file with its parameters; any refusal is one ConfigError line."""
    cls = detector_class(spec)
    params = dict(spec.params)
    accepted: Mapping[str, inspect.Parameter]
    try:
        accepted = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        accepted = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    unknown = [k for k in params if k not in accepted and not takes_any]
    if unknown:
        names = [n for n, p in accepted.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        raise ConfigError(
            f"{spec.name} has no parameter {unknown[0]!r}; it takes: {', '.join(names) or 'none'}"
        )
    try:
        return cls(**params)
    except Exception as exc:  # the user's __init__: its refusal is bad input
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"{spec}: the parameters were refused: {text}") from None


def detector(text: str, base: str | Path | None = None) -> Detector:
    """`parse_detector` then `load_detector`: the detector `text` names, built."""
    return load_detector(parse_detector(text, base))
