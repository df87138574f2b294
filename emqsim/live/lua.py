"""The queue's Lua scripts on a real Redis: SCRIPT LOAD once, EVALSHA per call, raw replies.

This module imports only the standard library and redis-py, because worker processes load it on their own
(by file path, without importing the `emqsim` package and its numpy/scipy/simpy dependencies). The typed
wrapper with `emqsim.protocol`'s reply classes is `emqsim.live.scripts.LuaQueue`.

Every script mirrors one method of `emqsim.protocol.Queue` command for command and takes the current time
as an argument (as BullMQ's scripts take the client's timestamp), so the same operation sequence gives the
same keys on both; `tests/test_protocol_lua.py` checks that.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
SCRIPT_NAMES = (
    "add",
    "take",
    "extend_locks",
    "finish",
    "fail",
    "sweep_two_phase",
    "sweep_single_phase",
    "reap",
)


_INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.M)


def script_source(name: str) -> str:
    """The Lua text of one script (`emqsim/live/<name>.lua`), each `--- @include "part"` line replaced by
    `emqsim/live/<part>.lua` (as BullMQ's scripts include theirs; Redis runs one text per script)."""
    return _INCLUDE.sub(
        lambda m: (HERE / f"{m.group(1)}.lua").read_text().rstrip("\n"), (HERE / f"{name}.lua").read_text()
    )


def key_names(base: str) -> dict[str, str]:
    """The queue's key names from its base `emq:{queue}` (the same layout as `emqsim.keys.QueueKeys`)."""
    return {
        "prefix": base + ":",
        "wait": f"{base}:wait",
        "active": f"{base}:active",
        "stalled": f"{base}:stalled",
        "stalled_check": f"{base}:stalled-check",
        "completed": f"{base}:completed",
        "failed": f"{base}:failed",
    }


def _opt_int(value: int | None) -> str:
    return "" if value is None else str(int(value))


def _fetch_args(fetch: tuple[str, int, int | None, bool] | None) -> list[str]:
    """fetchNext's arguments (finish.lua, fail.lua): the next take's token, now, lock ms, set lock; none."""
    if fetch is None:
        return ["", "", "", "0"]
    token, now_ms, lock_ms, set_lock = fetch
    return [token, str(int(now_ms)), _opt_int(lock_ms), "1" if set_lock else "0"]


class RawScripts:
    """The scripts loaded into one Redis, called by SHA with the queue's keys; replies as Redis sends them.

    A NOSCRIPT reply (someone ran SCRIPT FLUSH, or Redis restarted) reloads the script and retries once.
    """

    def __init__(self, client: redis.Redis, keys: dict[str, str], shas: dict[str, str] | None = None) -> None:
        self.client = client
        self.k = keys
        self.shas = dict(shas) if shas else {name: self._load(name) for name in SCRIPT_NAMES}

    def _load(self, name: str) -> str:
        return self.client.script_load(script_source(name))

    def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return self.client.evalsha(self.shas[name], len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            self.shas[name] = self._load(name)
            return self.client.evalsha(self.shas[name], len(keys), *keys, *args)

    # One method per script, with protocol.Queue's arguments.
    def add(self, job_id: str) -> Any:
        return self.call("add", [self.k["wait"]], [self.k["prefix"], job_id])

    def take(self, token: str, now_ms: int, lock_ms: int | None, set_lock: bool = True) -> str | None:
        args = [self.k["prefix"], token, int(now_ms), _opt_int(lock_ms), "1" if set_lock else "0"]
        return self.call("take", [self.k["wait"], self.k["active"]], args)

    def extend_locks(self, held: list[tuple[str, str]], lock_ms: int, recreate_missing: bool = False) -> list:
        args: list[Any] = [self.k["prefix"], int(lock_ms), "1" if recreate_missing else "0"]
        for job_id, token in held:
            args += [job_id, token]
        return self.call("extend_locks", [self.k["stalled"]], args)

    def finish(
        self,
        job_id: str,
        token: str,
        check_token: bool,
        remove_on_complete: bool = False,
        fetch: tuple[str, int, int | None, bool] | None = None,
    ) -> list:
        """The finish; with `fetch` = (next token, now ms, lock ms, set lock), BullMQ's fetchNext: an accepted
        finish takes the next waiting job in the same script (a third reply element: its id, or "")."""
        keys = [self.k["active"], self.k["stalled"], self.k["completed"], self.k["wait"]]
        args = [
            self.k["prefix"],
            job_id,
            token,
            "1" if check_token else "0",
            "1" if remove_on_complete else "0",
            *_fetch_args(fetch),
        ]
        return self.call("finish", keys, args)

    def fail(
        self,
        job_id: str,
        token: str,
        check_token: bool,
        attempts: int = 1,
        fetch: tuple[str, int, int | None, bool] | None = None,
    ) -> list:
        """The holder's move to failed (retried while `attempts` are not used up); `fetch` as in `finish`.
        Replies {code, was_active, retried, fetched id or ""}."""
        keys = [self.k["active"], self.k["stalled"], self.k["failed"], self.k["wait"]]
        args = [
            self.k["prefix"],
            job_id,
            token,
            "1" if check_token else "0",
            int(attempts),
            *_fetch_args(fetch),
        ]
        return self.call("fail", keys, args)

    def sweep_two_phase(
        self, now_ms: int, interval_ms: int, max_stalled: int | None, lazy_fail: bool = False
    ) -> list:
        k = self.k
        keys = [k["stalled_check"], k["stalled"], k["active"], k["wait"], k["failed"]]
        args = [k["prefix"], int(now_ms), int(interval_ms), _opt_int(max_stalled), "1" if lazy_fail else "0"]
        return self.call("sweep_two_phase", keys, args)

    def sweep_single_phase(self, now_ms: int, interval_ms: int, max_stalled: int | None) -> list:
        k = self.k
        keys = [k["stalled_check"], k["active"], k["wait"], k["failed"]]
        args = [k["prefix"], int(now_ms), int(interval_ms), _opt_int(max_stalled)]
        return self.call("sweep_single_phase", keys, args)

    def reap(self, now_ms: int, timeout_ms: int, max_stalled: int | None = None) -> list:
        k = self.k
        args = [k["prefix"], int(now_ms), int(timeout_ms), _opt_int(max_stalled)]
        return self.call("reap", [k["active"], k["wait"], k["failed"]], args)
