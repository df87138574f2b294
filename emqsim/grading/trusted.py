"""The grader's side of the wire: the checks run here, in a process where no student code has ever run.

A `Channel` talks to the agent in the student's kernel (`emqsim.grading.agent`). The checks see the student's
answers as what came over the wire: plain data (numbers, strings, lists, dicts, tuples, fractions, emqsim's own
result dataclasses rebuilt from their fields), or proxies for what stayed on the student's side:

* `RemoteFunction` / `RemoteObject`: every call goes to the student's process; the reply is plain data again;
* a remote class becomes a local class; a policy class (a subclass of `ReclaimPolicy`) becomes a subclass of
  `RemotePolicy` (and of the emqsim policy classes it claims), so the simulator runs HERE, and each
  `take` / `renew` / `finish` / `sweep` / `suspect` is forwarded, its reply checked (type, bounds, time); a
  `Detector`'s steps that the student did not write are the library's and run here too, asking the student's
  object only `taken` / `heartbeat` / `suspect`.

The student's code may call back the grader's objects it was handed (the queue, its store and keys, a checks'
own test double), public methods and attributes only, and nothing that is a module, a class or a function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import socket
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

from emqsim import watchdog
from emqsim.grading.values import (
    as_dict,
    as_list,
    as_ref,
    exportable,
    library_policy,
    plain,
    short,
)
from emqsim.grading.wire import WireError, receive, send
from emqsim.policies import Detector, ReclaimPolicy, RenewalRule
from emqsim.protocol import FinishReply, SweepReply

CALL_TIMEOUT = 60.0  # seconds one call into the student's code may take
# The modules whose dataclasses the grader rebuilds from their fields (results, replies, rules, distributions)
RESULT_MODULES = frozenset(
    {
        "emqsim.records",
        "emqsim.protocol",
        "emqsim.policies",
        "emqsim.distributions",
        "emqsim.fencing",
        "emqsim.summaries",
        "emqsim.faults",
    }
)
_POLICY_BASES = ("emqsim.policies",)


class RemoteError(AssertionError):
    """The student's code raised, hung, or answered with something the grader refuses. An AssertionError, so a
    check that calls the student's code fails with this message."""


class Channel:
    """The grader's end of one connection to the student's kernel."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        call_timeout: float = CALL_TIMEOUT,
        deadline: float | None = None,
        interrupt: Callable[[], bool] | None = None,
    ):
        self.sock = sock
        self.interrupt = interrupt
        self.call_timeout = call_timeout
        self.deadline = deadline
        self.exported: dict[int, Any] = {}
        self._export_ids: dict[int, int] = {}
        self.next_id = 0
        self.broken: str | None = None
        self.calls = 0
        # a number for each exported type: its public methods are listed and sent once, the agent keeps them
        self._type_ids: dict[type, int] = {}

    # -- the loop ---------------------------------------------------------------------------------------------
    def request(self, op: str, *, within: float | None = None, **fields: Any) -> Any:
        """Send one request and wait for its reply, serving the student's call-backs meanwhile: at most
        `within` seconds if given and shorter than the channel's own limit."""
        if self.broken:
            raise RemoteError(self.broken)
        self.next_id += 1
        ident = self.next_id
        self.calls += 1
        seconds = self.call_timeout if within is None else min(within, self.call_timeout)
        limit = time.monotonic() + seconds
        if self.deadline is not None:
            limit = min(limit, self.deadline)
        try:
            send(self.sock, {"op": op, "id": ident, **fields})
            while True:
                left = limit - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.sock.settimeout(left)
                message = receive(self.sock)
                if "re" in message:
                    if message["re"] != ident:
                        raise WireError("a reply to a request that was not asked")
                    if "error" in message:
                        raise RemoteError(short(str(message["error"])))
                    return self.decode(message.get("value"))
                self._serve(message)
        except TimeoutError:
            why = f"the student's code did not answer within {seconds:g} s"
            if self._recover(ident):
                raise RemoteError(why) from None
            self.broken = why
            raise RemoteError(self.broken) from None
        except (EOFError, OSError) as exc:
            self.broken = f"the student's kernel is gone ({type(exc).__name__})"
            raise RemoteError(self.broken) from None
        except WireError as exc:
            self.broken = f"the student's kernel sent an invalid message: {exc}"
            raise RemoteError(self.broken) from None

    def _recover(self, ident: int) -> bool:
        """After a call ran out of time: interrupt the kernel and wait (10 s at most) for the call's reply, an
        error now; True if it came, so the next question's calls can go on."""
        if self.interrupt is None or not self.interrupt():
            return False
        limit = time.monotonic() + 10.0
        try:
            while (left := limit - time.monotonic()) > 0:
                self.sock.settimeout(left)
                message = receive(self.sock)
                if message.get("re") == ident:
                    return True
                if "re" not in message:
                    send(
                        self.sock, {"re": message.get("id"), "error": "the call that made this one timed out"}
                    )
        except (TimeoutError, EOFError, OSError, WireError):
            return False
        return False

    def _serve(self, message: dict[str, Any]) -> None:
        """One call-back from the student's code into an object the grader handed it."""
        ident = message.get("id")
        try:
            value = self._perform(message)
            send(self.sock, {"re": ident, "value": value})
        except (RemoteError, WireError, LookupError, TypeError, ValueError, AttributeError) as exc:
            send(self.sock, {"re": ident, "error": short(f"{type(exc).__name__}: {exc}")})
        except Exception as exc:  # the grader's own object raised (say, a store refusing a command)
            send(self.sock, {"re": ident, "error": short(f"{type(exc).__name__}: {exc}")})

    def _perform(self, message: dict[str, Any]) -> Any:
        op = message.get("op")
        ref = message.get("ref")
        if not isinstance(ref, int) or ref not in self.exported:
            raise LookupError("no such object of the grader's")
        target = self.exported[ref]
        if op == "getattr" or op == "method":
            name = message.get("name")
            if not isinstance(name, str) or name.startswith("_") or not name.isidentifier():
                raise AttributeError(f"{name!r} is not a public attribute")
            value = getattr(target, name)
            if op == "getattr":
                return self.encode(value)
            args = [self.decode(a) for a in as_list(message.get("args", []))]
            kwargs = {str(k): self.decode(v) for k, v in as_dict(message.get("kwargs", {})).items()}
            if not callable(value) or isinstance(value, type) or not hasattr(value, "__self__"):
                raise TypeError(f"{name!r} is not a method")
            return self.encode(value(*args, **kwargs))
        if op == "call":
            if not (callable(target) and hasattr(target, "__self__")):
                raise TypeError("not callable")
            args = [self.decode(a) for a in as_list(message.get("args", []))]
            kwargs = {str(k): self.decode(v) for k, v in as_dict(message.get("kwargs", {})).items()}
            return self.encode(target(*args, **kwargs))
        raise ValueError(f"unknown request {op!r}")

    def close(self) -> None:
        with contextlib.suppress(OSError, WireError):
            self.sock.settimeout(5)
            send(self.sock, {"op": "bye", "id": 0})
        with contextlib.suppress(OSError):
            self.sock.close()

    # -- values from the student: plain data, or proxies ------------------------------------------------------
    def decode(self, value: Any) -> Any:
        if value is None or type(value) in (bool, int, float, str):
            return value
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict) or len(value) < 1:
            raise WireError("not a value")
        if "$t" in value:
            return tuple(self.decode(v) for v in as_list(value["$t"]))
        if "$d" in value:
            out = {}
            for pair in as_list(value["$d"]):
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise WireError("a dict entry must be a pair")
                key = self.decode(pair[0])
                try:
                    hash(key)
                except TypeError:
                    raise WireError("a dict key must be hashable plain data") from None
                out[key] = self.decode(pair[1])
            return out
        if "$set" in value:
            items = [self.decode(v) for v in as_list(value["$set"])]
            try:
                return set(items)
            except TypeError:
                raise WireError("a set of unhashable values") from None
        if "$frac" in value:
            parts = as_list(value["$frac"])
            if len(parts) != 2 or any(type(p) is not int for p in parts) or parts[1] == 0:
                raise WireError("a fraction must be two ints, the second not 0")
            return Fraction(parts[0], parts[1])
        if "$dc" in value:
            return self._dataclass(value)
        if "$pol" in value:
            return library_policy(value.get("$pol"), self.decode(value.get("state")))
        if "$cls" in value:
            return remote_class(
                self, as_ref(value["$cls"]), str(value.get("name", "Remote")), value.get("bases", [])
            )
        if "$fn" in value:
            return RemoteFunction(self, as_ref(value["$fn"]), str(value.get("name", "function")))
        if "$obj" in value:
            if value.get("policy") is True:
                return _bind_policy(RemotePolicy, self, as_ref(value["$obj"]))
            return RemoteObject(self, as_ref(value["$obj"]), str(value.get("type", "object")))
        raise WireError(f"unknown value {sorted(value)[:2]}")

    def _dataclass(self, value: dict[str, Any]) -> Any:
        """One of emqsim's own dataclasses (a Run, an Attempt, a SweepReply...), rebuilt here from its fields."""
        where = value["$dc"]
        if not isinstance(where, str) or ":" not in where:
            raise WireError("a dataclass needs its module:name")
        module, _, name = where.partition(":")
        if module not in RESULT_MODULES or "<" in name:
            raise WireError(f"{where} is not one of emqsim's result types")
        try:
            cls: Any = importlib.import_module(module)
            for part in name.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError):
            raise WireError(f"{where} is not one of emqsim's result types") from None
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise WireError(f"{where} is not one of emqsim's result types")
        fields = as_dict(value.get("f", {}))
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(fields) - known:
            raise WireError(f"{where}: unknown fields {sorted(set(fields) - known)[:3]}")
        try:
            return cls(**{k: self.decode(v) for k, v in fields.items()})
        except WireError:
            raise
        except Exception as exc:
            raise WireError(f"cannot rebuild a {name}: {type(exc).__name__}: {exc}") from None

    # -- values for the student -------------------------------------------------------------------------------
    def encode(self, value: Any) -> Any:
        if value is None or type(value) in (bool, int, str):
            return value
        if type(value) is float:
            return value
        if isinstance(value, Remote):
            return {"$ref": value._ref}
        if isinstance(value, RemotePolicy):
            return {"$ref": value._ref}
        if isinstance(value, bool | int | float | str):
            return plain(value)
        if isinstance(value, Fraction):
            return {"$frac": [value.numerator, value.denominator]}
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {"$t": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, dict):
            return {"$d": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if isinstance(value, set | frozenset):
            return {"$set": [self.encode(v) for v in value]}
        kind = type(value)
        try:
            import numpy as np

            if isinstance(value, np.generic):
                return self.encode(value.item())
        except ImportError:  # pragma: no cover
            pass
        if (
            dataclasses.is_dataclass(value)
            and not isinstance(value, type)
            and kind.__module__.startswith("emqsim.")
        ):
            return {
                "$dc": f"{kind.__module__}:{kind.__qualname__}",
                "f": {
                    f.name: self.encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init
                },
            }
        return self._export(value)

    def _export(self, value: Any, depth: int = 0) -> Any:
        """A handle to one of the grader's objects the student's code may use: only objects of emqsim's own
        classes or of the checks' (never a module, a class, a function). An emqsim object's public plain
        attributes, and its public attributes that are exportable objects (a queue's store and keys), travel
        with the handle: each read of them would otherwise be a round trip."""
        owner = getattr(value, "__self__", None)
        public = not str(getattr(value, "__name__", "_")).startswith("_")
        if owner is not None and callable(value) and public and exportable(owner):
            return {"$tfn": self._register(value)}
        if not exportable(value):
            raise WireError(f"cannot hand a {type(value).__name__} to the student's code")
        kind = type(value)
        handle: dict[str, Any] = {"$tobj": self._register(value), "type": kind.__name__}
        type_id = self._type_ids.get(kind)
        if type_id is None:  # a policy's every step hands over its queue: its type's methods go once
            self._type_ids[kind] = type_id = len(self._type_ids) + 1
            handle["methods"] = sorted(
                name
                for name in dir(kind)
                if not name.startswith("_")
                and callable(getattr(kind, name, None))
                and not isinstance(getattr(kind, name, None), type)
            )
        handle["tid"] = type_id
        attrs: dict[str, Any] = {}
        if type(value).__module__ != "__checks__" and depth < 2:
            for key, member in list(vars(value).items()) if hasattr(value, "__dict__") else []:
                if key.startswith("_"):
                    continue
                if member is None or type(member) in (bool, int, float, str):
                    attrs[key] = member
                elif exportable(member):
                    attrs[key] = self._export(member, depth + 1)
        handle["attrs"] = attrs
        return handle

    def _register(self, value: Any) -> int:
        key = id(value)
        if key in self._export_ids and self.exported.get(self._export_ids[key]) is value:
            return self._export_ids[key]
        self.next_id += 1
        self.exported[self.next_id] = value
        self._export_ids[key] = self.next_id
        return self.next_id

    # -- answers ----------------------------------------------------------------------------------------------
    def lookup(self, name: str) -> Any:
        """The student's answer called `name`, as plain data or a proxy."""
        return self.request("lookup", name=name)


class Remote:
    """Something that stays in the student's process."""

    __slots__ = ("_channel", "_ref", "_name")

    def __init__(self, channel: Channel, ref: int, name: str) -> None:
        self._channel, self._ref, self._name = channel, ref, name

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        channel = self._channel
        return channel.request(
            op,
            ref=self._ref,
            args=[channel.encode(a) for a in args],
            kwargs={k: channel.encode(v) for k, v in kwargs.items()},
        )

    def __repr__(self) -> str:
        return f"<the student's {self._name}>"


class RemoteFunction(Remote):
    """A function (or other callable) of the student's: each call runs in the student's process."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("call", *args, **kwargs)

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return self._name


class RemoteObject(Remote):
    """Any other object of the student's: public attributes and methods are read and called remotely."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _remote_getattr(self._channel, self._ref, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("call", *args, **kwargs)

    def __len__(self) -> int:
        got = self._channel.request("dunder", ref=self._ref, name="__len__", args=[], kwargs={})
        if type(got) is not int or got < 0:
            raise RemoteError("len() of the student's object is not a non-negative int")
        return got

    def __iter__(self) -> Iterator[Any]:
        got = self._channel.request("dunder", ref=self._ref, name="__iter__", args=[], kwargs={})
        if not isinstance(got, list):
            raise RemoteError("iterating the student's object gave no list")
        return iter(got)

    def __getitem__(self, key: Any) -> Any:
        return (
            self._call("dunder", key, name="__getitem__")
            if False
            else self._channel.request(
                "dunder", ref=self._ref, name="__getitem__", args=[self._channel.encode(key)], kwargs={}
            )
        )


class RemoteClassBase:
    """Base of the local stand-in for a class of the student's (not a policy)."""

    _channel: Channel
    _remote_ref: int

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        channel = cls._channel
        return channel.request(
            "call",
            ref=cls._remote_ref,
            args=[channel.encode(a) for a in args],
            kwargs={k: channel.encode(v) for k, v in kwargs.items()},
        )


# A Detector's engine steps; those the student's class does not write run in the grader (_library_steps)
_DETECTOR_STEPS = ("take", "renew", "finish", "sweep")
_DETECTOR_ATTRS = ("answer_within", "max_stalled")  # what those steps read of the detector
_POLICY_ATTRS = (
    "name",
    "renewal",
    "sweep_interval_ms",
    "swept_by",
    "fenced",
    "take_after_wakeup",
    "drain_delay_ms",
    "lazy_fail",
)


class RemotePolicy(ReclaimPolicy):
    """A policy of the student's: the simulator runs in the grader's process and calls this object, which
    forwards every server-side step to the student's object and checks the reply."""

    _channel: Channel
    _remote_ref: int
    _ref: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        channel = type(self)._channel
        reply = channel.request(
            "new",
            ref=type(self)._remote_ref,
            args=[channel.encode(a) for a in args],
            kwargs={k: channel.encode(v) for k, v in kwargs.items()},
        )
        if not isinstance(reply, RemotePolicy):
            raise RemoteError(f"{type(self).__name__}(...) did not build a policy")
        self._adopt(reply._ref)

    def _adopt(self, ref: int) -> None:
        """Bind to the student's object `ref` and read the settings the engine uses, each checked. Set with
        `object.__setattr__`: a student's class that extends a library policy has a frozen dataclass among its
        bases."""
        channel = type(self)._channel
        object.__setattr__(self, "_ref", ref)
        detector = isinstance(self, Detector)
        names = [*_POLICY_ATTRS, *(_DETECTOR_ATTRS if detector else ())]
        got = channel.request("attrs", ref=ref, names=names)
        if not isinstance(got, dict):
            raise RemoteError("the policy's settings are not readable")
        name = got.get("name")
        object.__setattr__(self, "name", name if isinstance(name, str) and len(name) <= 100 else "custom")
        renewal = got.get("renewal")
        if renewal is not None and not isinstance(renewal, RenewalRule):
            raise RemoteError("renewal must be a RenewalRule or None")
        object.__setattr__(self, "renewal", renewal)
        interval = got.get("sweep_interval_ms")
        if type(interval) is not int or not 1 <= interval <= 10**9:
            raise RemoteError("sweep_interval_ms must be a whole number of ms between 1 and 10**9")
        object.__setattr__(self, "sweep_interval_ms", interval)
        if got.get("swept_by") not in ("reaper", "workers"):
            raise RemoteError('swept_by must be "reaper" or "workers"')
        object.__setattr__(self, "swept_by", got["swept_by"])
        for flag in ("fenced", "take_after_wakeup", "lazy_fail"):
            if type(got.get(flag)) is not bool:
                raise RemoteError(f"{flag} must be True or False")
            object.__setattr__(self, flag, got[flag])
        drain = got.get("drain_delay_ms")
        if type(drain) is not int or not 0 <= drain <= 10**9:
            raise RemoteError("drain_delay_ms must be a whole number of ms")
        object.__setattr__(self, "drain_delay_ms", drain)
        steps = self._library_steps(channel, ref, got) if detector else frozenset()
        object.__setattr__(self, "_local_steps", steps)

    def _library_steps(self, channel: Channel, ref: int, got: dict[str, Any]) -> frozenset[str]:
        """The engine steps of a student's `Detector` that are the library's own (the student wrote `suspect`
        and perhaps `taken` and `heartbeat`): they run here, on the grader's queue, and ask the student's
        object only those three, one round trip each, where forwarding a step costs a round trip and as many
        call-backs to the queue. What the kernel says is not trusted and need not be: a step run here is the
        library's, which the student could have had by not writing one. `got`: the detector's settings, read
        with the others (`_DETECTOR_ATTRS`)."""
        own = channel.request("own_steps", ref=ref, names=list(_DETECTOR_STEPS))
        if not isinstance(own, list):
            return frozenset()
        within, stalled = got.get("answer_within"), got.get("max_stalled")
        if isinstance(within, bool) or not isinstance(within, int | float) or not 0 < within <= CALL_TIMEOUT:
            return frozenset()  # the kernel's own Detector enforces it
        if stalled is not None and (type(stalled) is not int or not 0 <= stalled <= 10**9):
            raise RemoteError("max_stalled must be a whole number or None")
        object.__setattr__(self, "answer_within", float(within))
        object.__setattr__(self, "max_stalled", stalled)
        return frozenset(_DETECTOR_STEPS) - {name for name in own if isinstance(name, str)}

    @property
    def sweep_refused(self) -> Any:  # the engine's shortcut reads the policy's own state: not for remote ones
        raise AttributeError("sweep_refused")

    def __deepcopy__(self, memo: dict[int, Any]) -> RemotePolicy:
        ref = self._method_raw("copy")
        made = object.__new__(type(self))
        if not isinstance(ref, RemotePolicy):
            raise RemoteError("copying the policy did not give a policy")
        made._adopt(ref._ref)
        return made

    def __copy__(self) -> RemotePolicy:
        return self.__deepcopy__({})

    def _method_raw(self, op: str) -> Any:
        return type(self)._channel.request(op, ref=self._ref)

    def _method(self, name: str, *args: Any, within: float | None = None) -> Any:
        channel = type(self)._channel
        return channel.request(
            "method",
            within=within,
            ref=self._ref,
            name=name,
            args=[channel.encode(a) for a in args],
            kwargs={},
        )

    def take(self, queue: Any, token: str, now_ms: int) -> str | None:
        if "take" in self._local_steps:
            return Detector.take(self, queue, token, now_ms)  # type: ignore[arg-type]
        got = self._method("take", queue, token, now_ms)
        if got is not None and (type(got) is not str or len(got) > 200):
            raise RemoteError(f"take must return a job id (str) or None, got {type(got).__name__}")
        return got

    def renew(self, queue: Any, held: list[tuple[str, str]], now_ms: int) -> list[str]:
        if "renew" in self._local_steps:
            return Detector.renew(self, queue, held, now_ms)  # type: ignore[arg-type]
        got = self._method("renew", queue, list(held), now_ms)
        if isinstance(got, tuple):
            got = list(got)
        if not isinstance(got, list) or not all(type(x) is str for x in got):
            raise RemoteError("renew must return a list of job ids (str)")
        return got

    def finish(self, queue: Any, job_id: str, token: str, now_ms: int) -> FinishReply:
        if "finish" in self._local_steps:
            return Detector.finish(self, queue, job_id, token, now_ms)  # type: ignore[arg-type]
        got = self._method("finish", queue, job_id, token, now_ms)
        if not isinstance(got, FinishReply):
            raise RemoteError("finish must return the FinishReply of queue.finish(...)")
        return got

    def sweep(self, queue: Any, now_ms: int) -> SweepReply:
        if "sweep" in self._local_steps:
            return Detector.sweep(self, queue, now_ms)  # type: ignore[arg-type]
        got = self._method("sweep", queue, now_ms)
        if not isinstance(got, SweepReply):
            raise RemoteError("sweep must return a SweepReply")
        return got

    def taken(self, job: str, now: float) -> None:
        self._method("taken", job, now)

    def heartbeat(self, job: str, now: float) -> None:
        self._method("heartbeat", job, now)

    def _ask_suspect(self, job: str, now: float, started: float) -> Any:
        """The student's `suspect(job, now)` for the library's sweep run here: asked in the kernel, which is
        interrupted (and the run stopped) at the detector's `answer_within`, as `Detector`'s own watchdog
        does in one process; `Detector` checks the answer."""
        try:
            return self._method("suspect", job, now, within=self.answer_within)
        except RemoteError:
            if time.monotonic() - started >= self.answer_within:  # interrupted in the kernel at the limit
                name = f"{type(self).__qualname__}.suspect"
                raise watchdog.stopped(name, job, now, self.answer_within) from None
            raise

    def suspect(self, job_id: str, now_ms: float) -> bool:
        got = self._method("suspect", job_id, now_ms)
        if type(got) is not bool:
            raise RemoteError(f"suspect must return True or False, got {type(got).__name__}")
        return got

    def settings(self) -> dict[str, Any]:
        got = self._method("settings")
        if not isinstance(got, dict) or not all(isinstance(k, str) for k in got):
            raise RemoteError("settings() must return a dict")
        return got

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "sweep_refused" or "_ref" not in self.__dict__:
            raise AttributeError(name)
        return _remote_getattr(type(self)._channel, self.__dict__["_ref"], name)

    def __repr__(self) -> str:
        return f"<the student's {type(self).__name__}>"


def _remote_getattr(channel: Channel, ref: int, name: str) -> Any:
    """An attribute of the student's object; AttributeError if it has none (so hasattr() works)."""
    try:
        return channel.request("getattr", ref=ref, name=name)
    except RemoteError as exc:
        if str(exc).startswith("AttributeError") and not channel.broken:
            raise AttributeError(name) from None
        raise


def _bind_policy(cls: type[RemotePolicy], channel: Channel, ref: int) -> RemotePolicy:
    if getattr(cls, "_channel", None) is not channel:
        cls = type("StudentPolicy", (RemotePolicy,), {"_channel": channel, "_remote_ref": 0})
    made = object.__new__(cls)
    made._adopt(ref)
    return made


def remote_class(channel: Channel, ref: int, name: str, bases: Any) -> type:
    """A local stand-in for the student's class `name`: a policy class if it derives from ReclaimPolicy (with
    the emqsim policy classes it claims as bases), else a class whose calls build remote objects."""
    claimed: list[type] = []
    for where in bases if isinstance(bases, list) else []:
        if not isinstance(where, str) or ":" not in where:
            continue
        module, _, qual = where.partition(":")
        if module not in _POLICY_BASES or "." in qual:
            continue
        cls = getattr(importlib.import_module(module), qual, None)
        if isinstance(cls, type) and issubclass(cls, ReclaimPolicy) and cls not in claimed:
            claimed.append(cls)
    if not name.isidentifier():
        name = "StudentClass"
    if claimed:
        leaves = [c for c in claimed if not any(o is not c and issubclass(o, c) for o in claimed)]
        with contextlib.suppress(TypeError):
            return type(
                name,
                (RemotePolicy, *leaves),
                {"_channel": channel, "_remote_ref": ref, "__module__": "__student__"},
            )
        return type(
            name, (RemotePolicy,), {"_channel": channel, "_remote_ref": ref, "__module__": "__student__"}
        )
    return type(
        name, (RemoteClassBase,), {"_channel": channel, "_remote_ref": ref, "__module__": "__student__"}
    )
