"""The data model: keys with their values and expiry times on a virtual millisecond clock, lazy expiry on every
lookup and Redis's active expire cycle, and read-only introspection for the simulator."""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable
from typing import Any

import numpy as np

from emqsim.store.values import WRONGTYPE, RedisHash, RedisList, RedisSet, ResponseError

__all__ = ["ACTIVE_EXPIRE_ACCEPTABLE_STALE", "ACTIVE_EXPIRE_KEYS_PER_LOOP", "Keyspace"]

ACTIVE_EXPIRE_KEYS_PER_LOOP = 20  # ACTIVE_EXPIRE_CYCLE_KEYS_PER_LOOP (effort 1)

ACTIVE_EXPIRE_ACCEPTABLE_STALE = 10  # ACTIVE_EXPIRE_CYCLE_ACCEPTABLE_STALE, percent (effort 1)


class Keyspace:
    """Keys, values and TTLs on ``clock()`` (integer ms, sampled once per command): see `emqsim.store.KeyStore`
    for the arguments. Subclasses add the commands."""

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        rng: np.random.Generator | None = None,
        on_evict: Callable[[str, int, str], None] | None = None,
        active_expire_max_loops: int = 16,
    ) -> None:
        if active_expire_max_loops < 1:
            raise ValueError("active_expire_max_loops must be at least 1")
        self._clock = clock
        self._rng = rng if rng is not None else np.random.default_rng(0)
        self._on_evict = on_evict
        self.active_expire_max_loops = active_expire_max_loops
        self._data: dict[str, str | RedisList | RedisSet | RedisHash] = {}
        self._expires: dict[str, int] = {}  # key -> absolute expiry ms
        self._ttl_keys: list[str] = []  # keys with a TTL, O(1) random sampling ...
        self._ttl_pos: dict[str, int] = {}  # ... and O(1) swap-remove
        self._expiry_heap: list[tuple[int, str]] = []  # (expire_at, key), stale entries dropped lazily
        self.on_ttl: Callable[[int], None] | None = None  # told of every new expiry time (see next_expiry)
        self._now = 0
        self.commands_executed = 0
        self.command_counts: collections.Counter[str] = collections.Counter()

    # Each one is its command exactly as `execute` runs it (counted, one clock sample, lazy expiry, WRONGTYPE),
    # for arguments that are valid by construction (the protocol's fixed commands). The conformance tests
    # drive `execute`; tests/test_store.py checks each typed call against it.
    def _begin(self, name: str) -> None:
        self.commands_executed += 1
        self.command_counts[name] += 1
        self._now = self._clock()

    def count_command(self, name: str, n: int = 1) -> None:
        """Count `n` commands `name` whose replies are known without running them (sweeps refused by their
        rate limit, the timeout reaper's idle reaps: see `resident_value`)."""
        self.commands_executed += n
        self.command_counts[name] += n

    # -- introspection (no side effects) -------------------------------------------------------------------
    def resident_keys(self) -> int:
        """Keys physically in memory, including logically expired ones not yet evicted (= DBSIZE)."""
        return len(self._data)

    def resident_value(self, key: str) -> str | RedisList | RedisSet | RedisHash | None:
        """The value resident at `key` itself (not a copy, as `peek` gives: read it, never change it), or None:
        no command counted, no clock sample, no lazy expiry. For a caller that must know cheaply what a
        read-only command would see (pair it with `expire_at`: a key with a TTL may be expired by the read)."""
        return self._data.get(key)

    def expire_at(self, key: str) -> int | None:
        """The key's absolute expiry in ms, or None if it has no TTL or is not resident. No lazy expiry."""
        return self._expires.get(key)

    def peek_len(self, key: str) -> int:
        """Length of a resident list, set or hash (0 if missing); no side effects, not counted as a command."""
        v = self._data.get(key)
        return 0 if v is None or type(v) is str else len(v)

    def peek(self, key: str) -> object | None:
        """A detached copy of the resident value, or None; no lazy expiry, no counting.

        A logically expired key that is still resident is returned too (compare `expire_at` with the clock to
        tell). Strings come back as ``str``, lists as ``list`` (head first), hashes as ``dict`` and sets as
        ``frozenset`` (iterate ``sorted(...)`` if the order is observable).
        """
        v = self._data.get(key)
        if v is None or type(v) is str:
            return v
        if type(v) is RedisList:
            return list(v)
        if type(v) is RedisHash:
            return dict(v)
        return frozenset(v)

    # -- expiry --------------------------------------------------------------------------------------------
    def active_expire_cycle(self) -> int:
        """One active expire tick (the engine calls it ``hz`` times a second); returns the keys evicted.

        Each round samples up to 20 distinct keys that have a TTL and deletes the logically expired ones; the
        cycle repeats while more than 10% of the sample was expired, for at most ``active_expire_max_loops``
        rounds. The clock is sampled once for the whole cycle.
        """
        now = self._clock()
        keys = self._ttl_keys
        expires = self._expires
        per_loop = ACTIVE_EXPIRE_KEYS_PER_LOOP
        total = 0
        for _ in range(self.active_expire_max_loops):
            n = len(keys)
            if n == 0:
                break
            if n <= per_loop:
                sample = list(keys)
            else:
                sample = [keys[i] for i in self._rng.choice(n, per_loop, replace=False).tolist()]
            expired = 0
            for key in sample:
                if now > expires[key]:
                    self._delete(key)
                    expired += 1
                    if self._on_evict is not None:
                        self._on_evict(key, now, "active")
            total += expired
            if expired * 100 // len(sample) <= ACTIVE_EXPIRE_ACCEPTABLE_STALE:
                break
        return total

    def _set_expire(self, key: str, when: int) -> None:
        if key not in self._expires:
            self._ttl_pos[key] = len(self._ttl_keys)
            self._ttl_keys.append(key)
        self._expires[key] = when
        heapq.heappush(self._expiry_heap, (when, key))
        if self.on_ttl is not None:
            self.on_ttl(when)

    def next_expiry(self) -> int | None:
        """The earliest expiry time (ms) of any key with a TTL, or None: lets a simulator skip the active
        expire ticks that provably find nothing to evict. No side effects on the data."""
        heap = self._expiry_heap
        expires = self._expires
        while heap:
            when, key = heap[0]
            if expires.get(key) == when:
                return when
            heapq.heappop(heap)  # stale: the key's TTL changed or went away
        return None

    def _remove_expire(self, key: str) -> bool:
        if self._expires.pop(key, None) is None:
            return False
        i = self._ttl_pos.pop(key)
        last = self._ttl_keys.pop()
        if last != key:
            self._ttl_keys[i] = last
            self._ttl_pos[last] = i
        return True

    def _delete(self, key: str) -> None:
        del self._data[key]
        if key in self._expires:
            self._remove_expire(key)

    def _lookup(self, key: str) -> Any:
        """The key's value after lazy expiry (Redis ``lookupKey*``), or None if missing."""
        v = self._data.get(key)
        if v is not None:
            exp = self._expires.get(key)
            if exp is not None and self._now > exp:
                self._delete(key)
                if self._on_evict is not None:
                    self._on_evict(key, self._now, "lazy")
                return None
        return v

    def _lookup_typed(self, key: str, kind: type) -> Any:
        """`_lookup` plus Redis's checkType: WRONGTYPE if the key holds another type."""
        v = self._lookup(key)
        if v is not None and type(v) is not kind:
            raise ResponseError(WRONGTYPE)
        return v
