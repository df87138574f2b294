"""KeyStore: the keyspace, its string command parser and its admin commands in one object."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from emqsim.store.admin import AdminCommands
from emqsim.store.parsing import CommandParser
from emqsim.store.values import Reply

__all__ = ["KeyStore"]


class KeyStore(CommandParser, AdminCommands):
    """A Redis-like key store (strings, lists, sets, hashes, TTLs) on a caller-supplied millisecond clock.

    ``clock()`` returns the current time in integer milliseconds and is sampled once per `execute` call (Redis
    samples the clock once per command). ``rng`` drives the active expire cycle's sampling. ``on_evict(key,
    now_ms, how)`` is called whenever a logically expired key is physically removed, ``how`` being ``"lazy"``
    (an access found it expired) or ``"active"`` (the active expire cycle sampled it).

    ``active_expire_max_loops`` bounds the sampling rounds of one `active_expire_cycle`. Redis bounds a cycle
    by a time budget (25% of a tick, checked every 16 rounds), which has no meaning on a virtual clock; a
    fixed round count keeps the cycle deterministic and, like the budget, leaves a backlog of expired keys
    resident when very many expire at once.
    """

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        rng: np.random.Generator | None = None,
        on_evict: Callable[[str, int, str], None] | None = None,
        active_expire_max_loops: int = 16,
    ) -> None:
        super().__init__(clock, rng=rng, on_evict=on_evict, active_expire_max_loops=active_expire_max_loops)

    @functools.cached_property
    def _commands(self) -> dict[str, tuple[Callable[[list[str]], Reply], int]]:  # type: ignore[override]
        """name -> (handler, Redis arity: n > 0 exactly n args incl. the name, n < 0 at least -n); made at the
        first `execute` (the simulator's protocol calls the typed commands: most stores never parse one)."""
        return {
            "SET": (self._set, -3),
            "GET": (self._get, 2),
            "DEL": (self._del, -2),
            "EXISTS": (self._exists, -2),
            "EXPIRE": (self._expire, -3),
            "PEXPIRE": (self._pexpire, -3),
            "EXPIREAT": (self._expireat, -3),
            "PEXPIREAT": (self._pexpireat, -3),
            "TTL": (self._ttl, 2),
            "PTTL": (self._pttl, 2),
            "PERSIST": (self._persist, 2),
            "INCR": (self._incr, 2),
            "DECR": (self._decr, 2),
            "INCRBY": (self._incrby, 3),
            "DECRBY": (self._decrby, 3),
            "LPUSH": (self._lpush, -3),
            "RPUSH": (self._rpush, -3),
            "LPOP": (self._lpop, -2),
            "RPOP": (self._rpop, -2),
            "LMOVE": (self._lmove, 5),
            "RPOPLPUSH": (self._rpoplpush, 3),
            "LREM": (self._lrem, 4),
            "LRANGE": (self._lrange, 4),
            "LLEN": (self._llen, 2),
            "SADD": (self._sadd, -3),
            "SREM": (self._srem, -3),
            "SMEMBERS": (self._smembers, 2),
            "SISMEMBER": (self._sismember, 3),
            "SCARD": (self._scard, 2),
            "HSET": (self._hset, -4),
            "HGET": (self._hget, 3),
            "HDEL": (self._hdel, -3),
            "HINCRBY": (self._hincrby, 4),
            "HGETALL": (self._hgetall, 2),
            "HEXISTS": (self._hexists, 3),
            "DBSIZE": (self._dbsize, 1),
            "FLUSHALL": (self._flushall, -1),
            "KEYS": (self._keys, 2),
            "TYPE": (self._type, 2),
        }
