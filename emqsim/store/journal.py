"""A failover's lost writes: what an asynchronous replica lagging behind the primary never received.

A `Journal` started at `failover - lag` keeps, for every key a command touches from then on, the key's value
and expiry as they were just before (a copy: later commands change the live value in place). `undo` at the
failover puts every such key back: the promoted replica has exactly the primary's data as of the journal's
start, so every write of the lag window is lost, whatever it was (a take's move and lock, a finish, an add, a
renewal, a sweep's moves, an eviction's or an expiry's delete: the primary propagates those as DELs).

It hooks the store's instance (its `_lookup` and `_delete`, which every command and every removal goes
through) only while it runs, so a store without a failover pays nothing.
"""

from __future__ import annotations

from typing import Any

from emqsim.store.keyspace import Keyspace
from emqsim.store.values import RedisHash, RedisList, RedisSet

__all__ = ["Journal"]


def _copy(value: Any) -> Any:
    """A detached copy of a stored value (strings are immutable)."""
    if type(value) is RedisList:
        return RedisList(value)
    if type(value) is RedisHash:
        return RedisHash(value)
    if type(value) is RedisSet:
        copy = RedisSet()
        copy.update(value)
        copy.intset = value.intset
        return copy
    return value


class Journal:
    """The pre-images of the keys touched since `start` (see the module's docstring)."""

    def __init__(self, store: Keyspace) -> None:
        self.store = store
        self.before: dict[str, tuple[Any, int | None]] = {}  # key -> (value or None, expiry or None)
        self.running = False

    def _keep(self, key: str) -> None:
        if key not in self.before:
            store = self.store
            value = store._data.get(key)
            self.before[key] = (None, None) if value is None else (_copy(value), store._expires.get(key))

    def start(self) -> None:
        """Record from now on: hook the store's key lookups and deletes."""
        store = self.store
        lookup, delete = store._lookup, store._delete

        def journaled_lookup(key: str) -> Any:
            self._keep(key)
            return lookup(key)

        def journaled_delete(key: str) -> None:
            self._keep(key)
            delete(key)

        store._lookup = journaled_lookup  # type: ignore[method-assign]
        store._delete = journaled_delete  # type: ignore[method-assign]
        self.running = True

    def undo(self) -> list[tuple[str, Any, Any, int | None]]:
        """Stop recording and put every touched key back as it was at `start`. Returns, per key whose value
        changed, (key, the value it had, the value it has again or None, that value's expiry or None)."""
        store = self.store
        if self.running:
            del store._lookup  # type: ignore[method-assign]
            del store._delete  # type: ignore[method-assign]
            self.running = False
        changed = []
        touched = getattr(store, "_touched", None)  # an evicting store re-sizes the keys it is told of
        for key, (value, expiry) in self.before.items():
            current = store._data.get(key)
            if current is None and value is None:
                continue
            if current == value and store._expires.get(key) == expiry:
                continue
            if current is not None:
                store._delete(key)
            if value is not None:
                store._data[key] = value
                if expiry is not None:
                    store._set_expire(key, expiry)
            if touched is not None:
                touched[key] = None
            changed.append((key, current, value, expiry))
        self.before = {}
        return changed
