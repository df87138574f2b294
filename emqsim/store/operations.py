"""What each command does to the data, and the typed commands: the protocol's fixed commands called directly,
without building and parsing an argv. Each typed command is its command exactly as `execute` runs it (counted,
one clock sample, lazy expiry, WRONGTYPE) for arguments valid by construction; tests/test_store.py checks each
against `execute`."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from emqsim.store.keyspace import Keyspace
from emqsim.store.values import (
    LLONG_MAX,
    LLONG_MIN,
    NOT_INTEGER,
    OVERFLOW,
    SET_MAX_INTSET_ENTRIES,
    RedisHash,
    RedisList,
    RedisSet,
    Reply,
    ResponseError,
    string2ll,
)

__all__ = ["Operations"]


class Operations(Keyspace):
    """The keyspace with its data operations (lists, sets, hashes, counters) and the typed commands."""

    # -- typed commands ------------------------------------------------------------------------------------
    def get(self, key: str) -> str | None:
        self._begin("GET")
        return self._lookup_typed(key, str)

    def set(self, key: str, value: str, px: int | None = None) -> str:
        """SET key value [PX ms] (`px` > 0)."""
        self._begin("SET")
        self._lookup(key)
        self._data[key] = value
        if px is None:
            if key in self._expires:
                self._remove_expire(key)
        else:
            self._set_expire(key, px + self._now)
        return "OK"

    def delete(self, key: str) -> int:
        self._begin("DEL")
        if self._lookup(key) is None:
            return 0
        self._delete(key)
        return 1

    def exists(self, key: str) -> int:
        self._begin("EXISTS")
        return 0 if self._lookup(key) is None else 1

    def lpush(self, key: str, value: str) -> int:
        self._begin("LPUSH")
        lst = self._list_for_push(key)
        lst.appendleft(value)
        return len(lst)

    def rpush(self, key: str, value: str) -> int:
        self._begin("RPUSH")
        lst = self._list_for_push(key)
        lst.append(value)
        return len(lst)

    def lmove(self, src: str, dst: str, from_left: bool, to_left: bool) -> str | None:
        self._begin("LMOVE")
        return self._move(src, dst, from_left, to_left)

    def lrem(self, key: str, count: int, element: str) -> int:
        self._begin("LREM")
        return self._lrem_typed(key, count, element)

    def lrange(self, key: str, start: int, end: int) -> list[str]:
        self._begin("LRANGE")
        return self._lrange_typed(key, start, end)

    def sadd(self, key: str, *members: str) -> int:
        self._begin("SADD")
        return self._sadd_typed(key, members)

    def srem(self, key: str, *members: str) -> int:
        self._begin("SREM")
        return self._srem_typed(key, members)

    def smembers(self, key: str) -> list[str]:
        self._begin("SMEMBERS")
        return self._smembers_typed(key)

    def hset(self, key: str, *pairs: str) -> int:
        """HSET key field value [field value ...] (an even number of strings)."""
        self._begin("HSET")
        return self._hset_typed(key, pairs)

    def hget(self, key: str, field: str) -> str | None:
        self._begin("HGET")
        h = self._lookup_typed(key, RedisHash)
        return None if h is None else h.get(field)

    def hincrby(self, key: str, field: str, incr: int) -> int:
        self._begin("HINCRBY")
        return self._hincrby_typed(key, field, incr)

    # -- the operations both the typed commands and the parsed ones run --------------------------------------
    def _incr_by(self, key: str, incr: int) -> int:
        """incrDecrCommand: the value must be a strict 64-bit integer string; the TTL is kept."""
        v = self._lookup_typed(key, str)
        value: int | None
        if v is None:
            value = 0
        else:
            value = string2ll(v)
            if value is None:
                raise ResponseError(NOT_INTEGER)
        new = value + incr
        if new > LLONG_MAX or new < LLONG_MIN:
            raise ResponseError(OVERFLOW)
        self._data[key] = str(new)
        return new

    def _list_for_push(self, key: str) -> RedisList:
        lst = self._lookup_typed(key, RedisList)
        if lst is None:
            lst = self._data[key] = RedisList()
        return lst

    def _move(self, src: str, dst: str, from_left: bool, to_left: bool) -> Reply:
        """lmoveGenericCommand: pop from src, push onto dst (same key rotates); src deleted when emptied."""
        slist = self._lookup_typed(src, RedisList)
        if slist is None:
            return None
        dlist = self._lookup_typed(dst, RedisList)
        v = slist.popleft() if from_left else slist.pop()
        if dlist is None:
            dlist = self._data[dst] = RedisList()
        if to_left:
            dlist.appendleft(v)
        else:
            dlist.append(v)
        if not slist:
            self._delete(src)
        return v

    def _lrem_typed(self, key: str, count: int, element: str) -> int:
        lst = self._lookup_typed(key, RedisList)
        if lst is None:
            return 0
        if element not in lst:
            return 0
        if count == 0:
            kept = [x for x in lst if x != element]
            removed = len(lst) - len(kept)
            lst.clear()
            lst.extend(kept)
        else:  # find-and-delete at C speed; from the tail by searching the reversed list
            if count < 0:
                lst.reverse()
            removed = 0
            i = 0
            try:
                while removed < abs(count):
                    i = lst.index(element, i)
                    del lst[i]
                    removed += 1
            except ValueError:
                pass
            if count < 0:
                lst.reverse()
        if not lst:
            self._delete(key)
        return removed

    def _lrange_typed(self, key: str, start: int, end: int) -> list[str]:
        lst = self._lookup_typed(key, RedisList)
        if lst is None:
            return []
        llen = len(lst)
        if start < 0:
            start += llen
        if end < 0:
            end += llen
        if start < 0:
            start = 0
        if start > end or start >= llen:
            return []
        if end >= llen:
            end = llen - 1
        if start == 0 and end == llen - 1:
            return list(lst)
        return list(islice(lst, start, end + 1))

    def _sadd_typed(self, key: str, members: Sequence[str]) -> int:
        s = self._lookup_typed(key, RedisSet)
        if s is None:
            s = self._data[key] = RedisSet()
        before = len(s)
        for m in members:
            s[m] = None
            if s.intset and (string2ll(m) is None or len(s) > SET_MAX_INTSET_ENTRIES):
                s.intset = False
        return len(s) - before

    def _srem_typed(self, key: str, members: Sequence[str]) -> int:
        s = self._lookup_typed(key, RedisSet)
        if s is None:
            return 0
        removed = 0
        for m in members:
            if m in s:
                del s[m]
                removed += 1
        if not s:
            self._delete(key)
        return removed

    def _smembers_typed(self, key: str) -> list[str]:
        s = self._lookup_typed(key, RedisSet)
        if s is None:
            return []
        return sorted(s, key=int) if s.intset else list(s)

    def _hset_typed(self, key: str, pairs: Sequence[str]) -> int:
        h = self._lookup_typed(key, RedisHash)
        if h is None:
            h = self._data[key] = RedisHash()
        before = len(h)
        for i in range(0, len(pairs), 2):
            h[pairs[i]] = pairs[i + 1]
        return len(h) - before

    def _hincrby_typed(self, key: str, field: str, incr: int) -> int:
        h = self._lookup_typed(key, RedisHash)
        if h is None:
            h = self._data[key] = RedisHash()
        old = h.get(field)
        value: int | None
        if old is None:
            value = 0
        else:
            value = string2ll(old)
            if value is None:
                raise ResponseError("ERR hash value is not an integer")
        new = value + incr
        if new > LLONG_MAX or new < LLONG_MIN:
            raise ResponseError(OVERFLOW)
        h[field] = str(new)
        return new
