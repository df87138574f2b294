"""The student's side of the wire: runs inside the student's sandboxed kernel, after the notebook's cells.

`serve(path, nonce)` connects to the trusted grader's socket and answers its requests: look up an answer by
name, call a function, a method or a class, read an attribute, copy a policy. Values go back as plain data,
or as a handle when they are not plain (a class, a function, a policy object). The student's code may call
back the objects the grader handed it (a queue, a store) through `TrustedProxy`: those calls run on the
trusted side, which decides what it allows.

Nothing here is trusted by the grader: a notebook can replace any of it. The grader checks every reply.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import numbers
import os
import socket
from fractions import Fraction
from typing import Any

from emqsim.grading.wire import receive, send

MAX_SEQUENCE = 1_000_000


class Agent:
    """One connection: a table of handed-out objects and the request loop (requests may nest)."""

    def __init__(self, sock: socket.socket, namespace: dict[str, Any]) -> None:
        self.sock = sock
        self.namespace = namespace
        self.table: dict[int, Any] = {}
        self.types: dict[Any, frozenset[str]] = {}  # public methods of the grader's types, by type number
        self.next_id = 0
        self.done = False

    # -- values -----------------------------------------------------------------------------------------------
    def handle(self, value: Any) -> int:
        self.next_id += 1
        self.table[self.next_id] = value
        return self.next_id

    def encode(self, value: Any, depth: int = 0) -> Any:
        """Plain data for `value`, or a handle to it."""
        if depth > 20:
            raise ValueError("a value nested too deeply to send")
        if value is None or type(value) in (bool, int, float, str):
            return value
        try:
            import numpy as np

            if isinstance(value, np.bool_):
                return bool(value)
            if isinstance(value, np.integer):
                return int(value)
            if isinstance(value, np.floating):
                return float(value)
            if isinstance(value, np.ndarray) and value.size <= MAX_SEQUENCE:
                return [self.encode(v, depth + 1) for v in value.tolist()]
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        if isinstance(value, Fraction):
            return {"$frac": [value.numerator, value.denominator]}
        if isinstance(value, bool | int | float | str):  # subclasses: their plain value
            return {bool: bool, int: int, float: float, str: str}[
                next(t for t in (bool, int, float, str) if isinstance(value, t))
            ](value)
        if isinstance(value, tuple) and len(value) <= MAX_SEQUENCE and not hasattr(value, "_fields"):
            return {"$t": [self.encode(v, depth + 1) for v in value]}
        if isinstance(value, list) and len(value) <= MAX_SEQUENCE:
            return [self.encode(v, depth + 1) for v in value]
        if isinstance(value, dict) and len(value) <= MAX_SEQUENCE:
            return {"$d": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]}
        if isinstance(value, set | frozenset) and len(value) <= MAX_SEQUENCE:
            return {"$set": [self.encode(v, depth + 1) for v in value]}
        kind = type(value)
        if (
            dataclasses.is_dataclass(value)
            and not isinstance(value, type)
            and kind.__module__.startswith("emqsim.")
        ):
            return {
                "$dc": f"{kind.__module__}:{kind.__qualname__}",
                "f": {
                    f.name: self.encode(getattr(value, f.name), depth + 1)
                    for f in dataclasses.fields(value)
                    if f.init
                },
            }
        if isinstance(value, type):
            bases = [
                f"{c.__module__}:{c.__qualname__}" for c in value.__mro__ if c.__module__.startswith("emqsim")
            ]
            return {"$cls": self.handle(value), "name": value.__name__, "bases": bases}
        if isinstance(value, numbers.Number):
            return {"$obj": self.handle(value), "type": kind.__name__, "policy": False}
        from emqsim.policies import ReclaimPolicy

        if type(value).__module__ == "emqsim.policies" and type(value).__name__ in (
            "LeasePolicy",
            "TimeoutPolicy",
        ):
            # the library's own policies travel by their settings, so the grader rebuilds the same object
            return {"$pol": type(value).__name__, "state": self.encode(dict(vars(value)), depth + 1)}
        if isinstance(value, ReclaimPolicy):
            return {"$obj": self.handle(value), "type": kind.__name__, "policy": True}
        if callable(value):
            return {"$fn": self.handle(value), "name": getattr(value, "__name__", kind.__name__)}
        return {"$obj": self.handle(value), "type": kind.__name__, "policy": False}

    def decode(self, value: Any) -> Any:
        """What the grader sent: plain data, our own handles, or proxies for the grader's objects."""
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "$t" in value:
            return tuple(self.decode(v) for v in value["$t"])
        if "$d" in value:
            return {self.decode(k): self.decode(v) for k, v in value["$d"]}
        if "$set" in value:
            return {self.decode(v) for v in value["$set"]}
        if "$frac" in value:
            return Fraction(*value["$frac"])
        if "$dc" in value:
            module, _, name = value["$dc"].partition(":")
            cls: Any = importlib.import_module(module)
            for part in name.split("."):
                cls = getattr(cls, part)
            return cls(**{k: self.decode(v) for k, v in value["f"].items()})
        if "$ref" in value:
            return self.table[value["$ref"]]
        if "$tobj" in value:
            methods = value.get("methods")
            if methods is not None:  # a type's methods come with its first object, then by its number
                self.types[value.get("tid")] = frozenset(methods)
            return TrustedProxy(
                self,
                value["$tobj"],
                self.types.get(value.get("tid"), frozenset()),
                value.get("type", "object"),
                value.get("attrs", {}),
            )
        if "$tfn" in value:
            return TrustedFunction(self, value["$tfn"])
        raise ValueError(f"unknown value {sorted(value)[:3]}")

    # -- the loop ---------------------------------------------------------------------------------------------
    def request(self, message: dict[str, Any]) -> Any:
        """Ask the grader (a call back into one of its objects), answering its own requests meanwhile."""
        self.next_id += 1
        ident = self.next_id
        send(self.sock, {**message, "id": ident})
        while True:
            incoming = receive(self.sock, check=False)
            if incoming.get("re") == ident:
                if "error" in incoming:
                    raise RuntimeError(f"the grader refused: {incoming['error']}")
                return self.decode(incoming.get("value"))
            self.answer(incoming)
            if self.done:
                raise RuntimeError("the grader ended the session")

    def answer(self, message: dict[str, Any]) -> None:
        """Answer one request of the grader."""
        op = message.get("op")
        ident = message.get("id")
        if op == "bye":
            self.done = True
            return
        try:
            value = self.perform(op, message)
            reply = {"re": ident, "value": value}
        except BaseException as exc:  # the answer's own errors go back as text
            if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit) and op is None:
                raise
            reply = {"re": ident, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        send(self.sock, reply)

    def perform(self, op: Any, message: dict[str, Any]) -> Any:
        if op == "lookup":
            name = message["name"]
            if name not in self.namespace:
                raise NameError(f"name {name!r} is not defined")
            return self.encode(self.namespace[name])
        if op == "source_of":
            return self.encode(None)
        target = self.table[message["ref"]]
        args = [self.decode(a) for a in message.get("args", [])]
        kwargs = {k: self.decode(v) for k, v in message.get("kwargs", {}).items()}
        if op == "call":
            result = target(*args, **kwargs)
        elif op == "method":
            result = getattr(target, message["name"])(*args, **kwargs)
        elif op == "getattr":
            result = getattr(target, message["name"])
        elif op == "attrs":
            return {"$d": [[name, self.encode(getattr(target, name, None))] for name in message["names"]]}
        elif op == "copy":
            made = copy.deepcopy(target)
            return {"$obj": self.handle(made), "type": type(made).__name__, "policy": True}
        elif op == "new":  # an instance of a class, always as a handle
            made = target(*args, **kwargs)
            return {"$obj": self.handle(made), "type": type(made).__name__, "policy": True}
        elif op == "dunder":
            name = message["name"]
            if name not in ("__len__", "__bool__", "__getitem__", "__contains__", "__iter__"):
                raise AttributeError(name)
            result = list(iter(target))[:MAX_SEQUENCE] if name == "__iter__" else getattr(target, name)(*args)
        elif op == "own_steps":  # which of a Detector's engine steps the object's class writes itself
            from emqsim.policies import Detector

            return [
                n
                for n in message["names"]
                if getattr(type(target), n, None) is not getattr(Detector, n, None)
            ]
        elif op == "isinstance_of":
            return isinstance(target, type) and issubclass(target, tuple(args))
        else:
            raise ValueError(f"unknown request {op!r}")
        return self.encode(result)

    def loop(self) -> None:
        while not self.done:
            try:
                message = receive(self.sock, check=False)
            except EOFError:
                return
            self.answer(message)


class TrustedProxy:
    """An object of the grader's (a queue, a store, its keys): attribute reads and method calls go to it."""

    def __init__(
        self, agent: Agent, ref: int, methods: frozenset[str], kind: str, attrs: dict[str, Any] | None = None
    ) -> None:
        object.__setattr__(self, "_agent", agent)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_methods", methods)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_attrs", {k: agent.decode(v) for k, v in (attrs or {}).items()})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._attrs:  # sent with the handle
            return self._attrs[name]
        if name in self._methods:
            return TrustedMethod(self._agent, self._ref, name)
        return self._agent.request({"op": "getattr", "ref": self._ref, "name": name})

    def __repr__(self) -> str:
        return f"<grader's {self._kind}>"


class TrustedMethod:
    def __init__(self, agent: Agent, ref: int, name: str) -> None:
        self.agent, self.ref, self.name = agent, ref, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.agent.request(
            {
                "op": "method",
                "ref": self.ref,
                "name": self.name,
                "args": [self.agent.encode(a) for a in args],
                "kwargs": {k: self.agent.encode(v) for k, v in kwargs.items()},
            }
        )


class TrustedFunction:
    def __init__(self, agent: Agent, ref: int) -> None:
        self.agent, self.ref = agent, ref

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.agent.request(
            {
                "op": "call",
                "ref": self.ref,
                "args": [self.agent.encode(a) for a in args],
                "kwargs": {k: self.agent.encode(v) for k, v in kwargs.items()},
            }
        )


def serve(path: str, nonce: str, namespace: dict[str, Any] | None = None) -> None:
    """Connect to the grader at `path` and answer its requests until it says bye (the last cell the grader
    appends to the student's notebook)."""
    if namespace is None:
        from IPython import get_ipython

        shell = get_ipython()
        namespace = shell.user_ns if shell is not None else {}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    try:
        send(sock, {"hello": nonce, "pid": os.getpid()})
        Agent(sock, namespace).loop()
    finally:
        sock.close()
