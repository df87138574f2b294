"""KeyStore: a Redis 7.0 key store on a virtual clock, for the simulator's hot path.

One entry point, `execute(*args)`, takes a Redis command as redis-py would send it and returns the reply
as redis-py (RESP2, ``decode_responses=True``, no response callbacks) would: ``"OK"`` for status replies,
``int``, ``str``, ``None`` for nil and ``list`` for arrays. Error replies raise `ResponseError` whose text
is Redis's exact error line (e.g. ``"ERR syntax error"``), so a differential test can compare replies one by
one.

Expiry follows Redis 7.0 (``src/db.c``, ``src/expire.c``):

* the clock is sampled once per command; a key is logically expired when ``now > expire_at`` (strict), so at
  its expiry millisecond it still exists;
* lazy expiry: any command that looks a key up deletes it first if it is logically expired (``on_evict(key,
  now, "lazy")``) and then behaves as if it were missing; KEYS skips such keys without deleting them, and
  DBSIZE counts them;
* active expiry: `active_expire_cycle` samples up to 20 keys with a TTL, deletes the expired ones
  (``on_evict(key, now, "active")``) and repeats while more than 10% of the sample was expired.

Determinism: every observable order comes from insertion-ordered dicts (sets are dicts with ``None`` values),
never from iterating a Python ``set``, so results do not depend on ``PYTHONHASHSEED``; the active cycle's
sampling is driven only by the numpy Generator handed in.
"""

from __future__ import annotations

import collections
import heapq
import numbers
from collections import deque
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

import numpy as np

Reply = Any  # "OK" | int | str | None | list[Reply]
"""A Redis reply shaped as redis-py returns it (RESP2, decode_responses=True, no response callbacks)."""

LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)

SET_MAX_INTSET_ENTRIES = 512  # set-max-intset-entries (7.0 default)
ACTIVE_EXPIRE_KEYS_PER_LOOP = 20  # ACTIVE_EXPIRE_CYCLE_KEYS_PER_LOOP (effort 1)
ACTIVE_EXPIRE_ACCEPTABLE_STALE = 10  # ACTIVE_EXPIRE_CYCLE_ACCEPTABLE_STALE, percent (effort 1)

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
SYNTAX_ERROR = "ERR syntax error"
OVERFLOW = "ERR increment or decrement would overflow"
NOT_POSITIVE = "ERR value is out of range, must be positive"


class ResponseError(Exception):
    """A Redis error reply; str(exc) is the exact Redis error text, e.g. "ERR syntax error"."""


class _List(deque):
    """A Redis list (head = left)."""

    __slots__ = ()


class _Set(dict):
    """A Redis set: members as keys of an insertion-ordered dict (values None), never a Python set.

    `intset` mirrors Redis's compact encoding: while every member is a 64-bit integer and there are at most
    512 of them (set-max-intset-entries), Redis keeps them sorted and SMEMBERS returns ascending numbers;
    the first other member or the 513th converts the set for good.
    """

    __slots__ = ("intset",)

    def __init__(self) -> None:
        super().__init__()
        self.intset = True


class _Hash(dict):
    """A Redis hash: field -> value, insertion-ordered."""

    __slots__ = ()


_TYPE_NAMES: dict[type, str] = {str: "string", _List: "list", _Set: "set", _Hash: "hash"}

# SET option flags (t_string.c OBJ_*)
_NX, _XX, _GET, _KEEPTTL, _EX, _PX, _EXAT, _PXAT = (1 << i for i in range(8))
_NOT_FOR_KEEPTTL = _EX | _PX | _EXAT | _PXAT


def _string2ll(s: str) -> int | None:
    """Redis's strict ``string2ll``: optional '-', no '+', no spaces, no leading zeros, no "-0", 64-bit."""
    n = len(s)
    if n == 0 or n >= 21:  # LONG_STR_SIZE
        return None
    body = s[1:] if s[0] == "-" else s
    if not body or not body.isascii() or not body.isdigit():
        return None
    if body[0] == "0":
        return 0 if n == 1 else None
    v = int(s)
    if v > LLONG_MAX or v < LLONG_MIN:
        return None
    return v


def _upper(s: str) -> str:
    """ASCII-only upper-casing (Redis compares option names with strcasecmp; ``"ſ".upper() == "S"`` must not
    turn a non-ASCII argument into a keyword)."""
    return s.upper() if s.isascii() else s


def _c_bytes(s: str) -> bytes:
    """What C's ``%s`` prints of an argument, as bytes (Redis cuts at byte counts): up to the first NUL."""
    return s.encode("utf-8", "surrogateescape").split(b"\0", 1)[0]


def _no_newlines(msg: str) -> str:
    """Redis maps CR and LF in error replies built from user input to spaces (``sdsmapchars``)."""
    return msg.replace("\r", " ").replace("\n", " ")


def _arg(a: object) -> str:
    """Convert one argument the way redis-py's Encoder does (then decode, as the store works on str)."""
    t = type(a)
    if t is int:
        return str(a)
    if t is str:
        return a  # type: ignore[return-value]
    if isinstance(a, str):
        return str(a)  # a str subclass (e.g. a StrEnum)
    if isinstance(a, bytes | bytearray | memoryview):
        return bytes(a).decode("utf-8", "surrogateescape")
    if isinstance(a, bool) or not isinstance(a, numbers.Real):
        raise TypeError(
            f"Invalid input of type: {t.__name__!r}. Convert to a bytes, string, int or float first."
        )
    if isinstance(a, numbers.Integral):
        return str(int(a))  # also numpy integers, which redis-py would reject
    return repr(float(a))


def stringmatch(pattern: str, string: str) -> bool:
    """Redis's glob matcher (``util.c: stringmatchlen``, case-sensitive): ``* ? [abc] [^a-z] \\x``.

    A straight port, including its handling of malformed patterns (an unterminated ``[`` class, a trailing
    backslash) and the 7.0 ``skipLongerMatches`` cut-off, so KEYS answers exactly as Redis does.
    """
    skip = [False]
    return _stringmatch(pattern + "\0", 0, len(pattern), string, 0, len(string), skip)


def _stringmatch(p: str, pi: int, plen: int, s: str, si: int, slen: int, skip: list[bool]) -> bool:
    # ``p`` carries a trailing NUL, standing in for the sds terminator the C code reads past the length.
    while plen and slen:
        c = p[pi]
        if c == "*":
            while plen and p[pi + 1] == "*":
                pi += 1
                plen -= 1
            if plen == 1:
                return True
            while slen:
                if _stringmatch(p, pi + 1, plen - 1, s, si, slen, skip):
                    return True
                if skip[0]:
                    return False
                si += 1
                slen -= 1
            skip[0] = True
            return False
        elif c == "?":
            si += 1
            slen -= 1
        elif c == "[":
            pi += 1
            plen -= 1
            negate = p[pi] == "^"
            if negate:
                pi += 1
                plen -= 1
            match = False
            while True:
                if p[pi] == "\\" and plen >= 2:
                    pi += 1
                    plen -= 1
                    if p[pi] == s[si]:
                        match = True
                elif p[pi] == "]":
                    break
                elif plen == 0:
                    pi -= 1
                    plen += 1
                    break
                elif plen >= 3 and p[pi + 1] == "-":
                    start, end = ord(p[pi]), ord(p[pi + 2])
                    if start > end:
                        start, end = end, start
                    pi += 2
                    plen -= 2
                    if start <= ord(s[si]) <= end:
                        match = True
                elif p[pi] == s[si]:
                    match = True
                pi += 1
                plen -= 1
            if negate:
                match = not match
            if not match:
                return False
            si += 1
            slen -= 1
        else:
            if c == "\\" and plen >= 2:
                pi += 1
                plen -= 1
            if p[pi] != s[si]:
                return False
            si += 1
            slen -= 1
        pi += 1
        plen -= 1
        if slen == 0:
            while p[pi] == "*":
                pi += 1
                plen -= 1
            break
    return plen == 0 and slen == 0


class KeyStore:
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
        if active_expire_max_loops < 1:
            raise ValueError("active_expire_max_loops must be at least 1")
        self._clock = clock
        self._rng = rng if rng is not None else np.random.default_rng(0)
        self._on_evict = on_evict
        self.active_expire_max_loops = active_expire_max_loops
        self._data: dict[str, str | _List | _Set | _Hash] = {}
        self._expires: dict[str, int] = {}  # key -> absolute expiry ms
        self._ttl_keys: list[str] = []  # keys with a TTL, O(1) random sampling ...
        self._ttl_pos: dict[str, int] = {}  # ... and O(1) swap-remove
        self._expiry_heap: list[tuple[int, str]] = []  # (expire_at, key), stale entries dropped lazily
        self.on_ttl: Callable[[int], None] | None = None  # told of every new expiry time (see next_expiry)
        self._now = 0
        self.commands_executed = 0
        self.command_counts: collections.Counter[str] = collections.Counter()
        # name -> (handler, Redis arity: n > 0 exactly n args incl. the name, n < 0 at least -n)
        self._commands: dict[str, tuple[Callable[[list[str]], Reply], int]] = {
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

    # -- entry point ---------------------------------------------------------------------------------------
    def execute(self, *args: str | int | float | bytes) -> Reply:
        """Run one Redis command (name case-insensitive) and return its reply; errors raise ResponseError."""
        self.commands_executed += 1
        if not args:
            raise ValueError("execute() needs at least a command name")
        argv = [a if type(a) is str else (str(a) if type(a) is int else _arg(a)) for a in args]
        entry = self._commands.get(argv[0])
        if entry is not None:  # fast path: an upper-case command name, as the simulator sends them
            uname = argv[0]
            self.command_counts[uname] += 1
            self._now = self._clock()
            handler, arity = entry
            n = len(argv)
            if (n != arity) if arity > 0 else (n < -arity):
                raise ResponseError(f"ERR wrong number of arguments for '{uname.lower()}' command")
            return handler(argv)
        name = argv[0]
        if not name.isalpha():  # redis-py splits the name on whitespace ("CONFIG GET" -> two arguments)
            argv[:1] = [
                w.decode("utf-8", "surrogateescape") for w in name.encode("utf-8", "surrogateescape").split()
            ]
            if not argv:
                raise ValueError("execute() needs a non-blank command name")
            name = argv[0]
        uname = name.upper() if name.isascii() else name
        self.command_counts[uname] += 1
        self._now = self._clock()
        entry = self._commands.get(uname)
        if entry is None:
            raise ResponseError(self._unknown_command(argv))
        handler, arity = entry
        n = len(argv)
        if (n != arity) if arity > 0 else (n < -arity):
            raise ResponseError(f"ERR wrong number of arguments for '{uname.lower()}' command")
        return handler(argv)

    @staticmethod
    def _unknown_command(argv: list[str]) -> str:
        """Redis 7.0's text: the name cut to 128 bytes, then quoted arguments while under 128 bytes."""
        shown = b""
        for arg in argv[1:]:
            if len(shown) >= 128:
                break
            shown += b"'" + _c_bytes(arg)[: 128 - len(shown)] + b"' "
        text = b"ERR unknown command '%s', with args beginning with: %s" % (_c_bytes(argv[0])[:128], shown)
        return _no_newlines(text.decode("utf-8", "surrogateescape"))

    # -- typed commands: what the protocol sends, without building and parsing an argv ---------------------
    # Each one is its command exactly as `execute` runs it (counted, one clock sample, lazy expiry, WRONGTYPE),
    # for arguments that are valid by construction (the protocol's fixed commands). The conformance tests
    # drive `execute`; tests/test_store.py checks each typed call against it.
    def _begin(self, name: str) -> None:
        self.commands_executed += 1
        self.command_counts[name] += 1
        self._now = self._clock()

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
        h = self._lookup_typed(key, _Hash)
        return None if h is None else h.get(field)

    def hincrby(self, key: str, field: str, incr: int) -> int:
        self._begin("HINCRBY")
        return self._hincrby_typed(key, field, incr)

    def count_command(self, name: str) -> None:
        """Count a command whose reply is known without running it (a sweep refused by its rate limit)."""
        self.commands_executed += 1
        self.command_counts[name] += 1

    # -- introspection (no side effects) -------------------------------------------------------------------
    def resident_keys(self) -> int:
        """Keys physically in memory, including logically expired ones not yet evicted (= DBSIZE)."""
        return len(self._data)

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
        if type(v) is _List:
            return list(v)
        if type(v) is _Hash:
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

    # -- strings -------------------------------------------------------------------------------------------
    def _set(self, argv: list[str]) -> Reply:
        key = argv[1]
        n = len(argv)
        if n == 3:  # fast path: plain SET, discards any TTL
            self._lookup(key)
            self._data[key] = argv[2]
            if key in self._expires:
                self._remove_expire(key)
            return "OK"
        if n == 5 and _upper(argv[3]) == "PX":  # fast path: SET key value PX ms (a lock)
            when = _string2ll(argv[4])
            if when is None:
                raise ResponseError(NOT_INTEGER)
            if when <= 0 or when + self._now > LLONG_MAX:
                raise ResponseError("ERR invalid expire time in 'set' command")
            self._lookup(key)
            self._data[key] = argv[2]
            self._set_expire(key, when + self._now)
            return "OK"
        flags = 0
        expire_arg: str | None = None
        j = 3
        while j < n:  # parseExtendedStringArgumentsOrReply
            opt = _upper(argv[j])
            has_next = j < n - 1
            if opt == "NX" and not flags & _XX:
                flags |= _NX
            elif opt == "XX" and not flags & _NX:
                flags |= _XX
            elif opt == "GET":
                flags |= _GET
            elif opt == "KEEPTTL" and not flags & _NOT_FOR_KEEPTTL:
                flags |= _KEEPTTL
            elif opt == "EX" and not flags & (_KEEPTTL | _PX | _EXAT | _PXAT) and has_next:
                flags |= _EX
                j += 1
                expire_arg = argv[j]
            elif opt == "PX" and not flags & (_KEEPTTL | _EX | _EXAT | _PXAT) and has_next:
                flags |= _PX
                j += 1
                expire_arg = argv[j]
            elif opt == "EXAT" and not flags & (_KEEPTTL | _EX | _PX | _PXAT) and has_next:
                flags |= _EXAT
                j += 1
                expire_arg = argv[j]
            elif opt == "PXAT" and not flags & (_KEEPTTL | _EX | _PX | _EXAT) and has_next:
                flags |= _PXAT
                j += 1
                expire_arg = argv[j]
            else:
                raise ResponseError(SYNTAX_ERROR)
            j += 1
        when = None
        if expire_arg is not None:  # getExpireMillisecondsOrReply
            when = _string2ll(expire_arg)
            if when is None:
                raise ResponseError(NOT_INTEGER)
            seconds = flags & (_EX | _EXAT)
            if when <= 0 or (seconds and when > LLONG_MAX // 1000):
                raise ResponseError("ERR invalid expire time in 'set' command")
            if seconds:
                when *= 1000
            if flags & (_EX | _PX):
                when += self._now
            if when > LLONG_MAX:  # C's signed overflow wraps to <= 0, which Redis reports
                raise ResponseError("ERR invalid expire time in 'set' command")
        old = None
        if flags & _GET:
            old = self._lookup(key)
            if old is not None and type(old) is not str:
                raise ResponseError(WRONGTYPE)
            found = old is not None
        else:
            found = self._lookup(key) is not None
        if (flags & _NX and found) or (flags & _XX and not found):
            return old  # nil, or the old value with GET
        self._data[key] = argv[2]
        if when is not None:
            self._set_expire(key, when)
        elif not flags & _KEEPTTL and key in self._expires:
            self._remove_expire(key)
        return old if flags & _GET else "OK"

    def _get(self, argv: list[str]) -> Reply:
        return self._lookup_typed(argv[1], str)

    def _incr_by(self, key: str, incr: int) -> int:
        """incrDecrCommand: the value must be a strict 64-bit integer string; the TTL is kept."""
        v = self._lookup_typed(key, str)
        value: int | None
        if v is None:
            value = 0
        else:
            value = _string2ll(v)
            if value is None:
                raise ResponseError(NOT_INTEGER)
        new = value + incr
        if new > LLONG_MAX or new < LLONG_MIN:
            raise ResponseError(OVERFLOW)
        self._data[key] = str(new)
        return new

    def _incr(self, argv: list[str]) -> Reply:
        return self._incr_by(argv[1], 1)

    def _decr(self, argv: list[str]) -> Reply:
        return self._incr_by(argv[1], -1)

    def _incrby(self, argv: list[str]) -> Reply:
        incr = _string2ll(argv[2])
        if incr is None:
            raise ResponseError(NOT_INTEGER)
        return self._incr_by(argv[1], incr)

    def _decrby(self, argv: list[str]) -> Reply:
        decr = _string2ll(argv[2])
        if decr is None:
            raise ResponseError(NOT_INTEGER)
        if decr == LLONG_MIN:
            raise ResponseError("ERR decrement would overflow")
        return self._incr_by(argv[1], -decr)

    # -- keyspace ------------------------------------------------------------------------------------------
    def _del(self, argv: list[str]) -> Reply:
        deleted = 0
        for key in argv[1:]:
            if self._lookup(key) is not None:
                self._delete(key)
                deleted += 1
        return deleted

    def _exists(self, argv: list[str]) -> Reply:
        count = 0
        for key in argv[1:]:
            if self._lookup(key) is not None:
                count += 1
        return count

    def _type(self, argv: list[str]) -> Reply:
        v = self._lookup(argv[1])
        return "none" if v is None else _TYPE_NAMES[type(v)]

    def _dbsize(self, argv: list[str]) -> Reply:
        return len(self._data)

    def _flushall(self, argv: list[str]) -> Reply:
        if len(argv) > 2 or (len(argv) == 2 and _upper(argv[1]) not in ("SYNC", "ASYNC")):
            raise ResponseError(SYNTAX_ERROR)
        self._data.clear()
        self._expires.clear()
        self._ttl_keys.clear()
        self._ttl_pos.clear()
        self._expiry_heap.clear()
        return "OK"

    def _keys(self, argv: list[str]) -> Reply:
        """KEYS: glob match; logically expired keys are skipped but not deleted (as in Redis 7.0)."""
        pattern = argv[1]
        now = self._now
        expires = self._expires
        match_all = pattern == "*"
        out = []
        for key in self._data:
            if match_all or stringmatch(pattern, key):
                exp = expires.get(key)
                if exp is None or now <= exp:
                    out.append(key)
        return out

    # -- TTLs ----------------------------------------------------------------------------------------------
    def _expire_generic(self, argv: list[str], basetime: int, seconds: bool) -> Reply:
        """expireGenericCommand: flags, then the time, then the key; a time not in the future deletes."""
        nx = xx = gt = lt = False
        for opt in argv[3:]:
            u = _upper(opt)
            if u == "NX":
                nx = True
            elif u == "XX":
                xx = True
            elif u == "GT":
                gt = True
            elif u == "LT":
                lt = True
            else:
                # addReplyErrorFormat cuts at NUL (%s), trims trailing CR/LF, maps the others to spaces
                shown = opt.split("\0", 1)[0]
                raise ResponseError(_no_newlines(f"ERR Unsupported option {shown}".rstrip("\r\n")))
        if nx and (xx or gt or lt):
            raise ResponseError("ERR NX and XX, GT or LT options at the same time are not compatible")
        if gt and lt:
            raise ResponseError("ERR GT and LT options at the same time are not compatible")
        when = _string2ll(argv[2])
        if when is None:
            raise ResponseError(NOT_INTEGER)
        if seconds:
            if when > LLONG_MAX // 1000 or when < -(LLONG_MAX // 1000):  # C: LLONG_MIN / 1000 truncates
                raise ResponseError(f"ERR invalid expire time in '{argv[0].lower()}' command")
            when *= 1000
        if when > LLONG_MAX - basetime:
            raise ResponseError(f"ERR invalid expire time in '{argv[0].lower()}' command")
        when += basetime
        key = argv[1]
        if self._lookup(key) is None:
            return 0
        current = self._expires.get(key)  # None = no TTL = infinite for GT/LT
        if nx and current is not None:
            return 0
        if xx and current is None:
            return 0
        if gt and (current is None or when <= current):
            return 0
        if lt and current is not None and when >= current:
            return 0
        if when <= self._now:  # checkAlreadyExpired
            self._delete(key)
        else:
            self._set_expire(key, when)
        return 1

    def _expire(self, argv: list[str]) -> Reply:
        return self._expire_generic(argv, self._now, True)

    def _pexpire(self, argv: list[str]) -> Reply:
        return self._expire_generic(argv, self._now, False)

    def _expireat(self, argv: list[str]) -> Reply:
        return self._expire_generic(argv, 0, True)

    def _pexpireat(self, argv: list[str]) -> Reply:
        return self._expire_generic(argv, 0, False)

    def _pttl(self, argv: list[str]) -> Reply:
        key = argv[1]
        if self._lookup(key) is None:
            return -2
        exp = self._expires.get(key)
        return -1 if exp is None else max(exp - self._now, 0)

    def _ttl(self, argv: list[str]) -> Reply:
        key = argv[1]
        if self._lookup(key) is None:
            return -2
        exp = self._expires.get(key)
        return -1 if exp is None else (max(exp - self._now, 0) + 500) // 1000

    def _persist(self, argv: list[str]) -> Reply:
        key = argv[1]
        if self._lookup(key) is None:
            return 0
        return 1 if self._remove_expire(key) else 0

    # -- lists ---------------------------------------------------------------------------------------------
    def _list_for_push(self, key: str) -> _List:
        lst = self._lookup_typed(key, _List)
        if lst is None:
            lst = self._data[key] = _List()
        return lst

    def _lpush(self, argv: list[str]) -> Reply:
        lst = self._list_for_push(argv[1])
        lst.extendleft(argv[2:])
        return len(lst)

    def _rpush(self, argv: list[str]) -> Reply:
        lst = self._list_for_push(argv[1])
        lst.extend(argv[2:])
        return len(lst)

    def _pop(self, argv: list[str], left: bool) -> Reply:
        """popGenericCommand: LPOP/RPOP key [count] (count replies with an array, nil array if missing)."""
        n = len(argv)
        if n > 3:
            raise ResponseError(f"ERR wrong number of arguments for '{argv[0].lower()}' command")
        count = None
        if n == 3:
            count = _string2ll(argv[2])
            if count is None or count < 0:
                raise ResponseError(NOT_POSITIVE)
        key = argv[1]
        lst = self._lookup_typed(key, _List)
        if lst is None:
            return None
        if count is None:
            v = lst.popleft() if left else lst.pop()
        else:
            take = min(count, len(lst))
            v = [lst.popleft() for _ in range(take)] if left else [lst.pop() for _ in range(take)]
        if not lst:
            self._delete(key)
        return v

    def _lpop(self, argv: list[str]) -> Reply:
        return self._pop(argv, True)

    def _rpop(self, argv: list[str]) -> Reply:
        return self._pop(argv, False)

    def _move(self, src: str, dst: str, from_left: bool, to_left: bool) -> Reply:
        """lmoveGenericCommand: pop from src, push onto dst (same key rotates); src deleted when emptied."""
        slist = self._lookup_typed(src, _List)
        if slist is None:
            return None
        dlist = self._lookup_typed(dst, _List)
        v = slist.popleft() if from_left else slist.pop()
        if dlist is None:
            dlist = self._data[dst] = _List()
        if to_left:
            dlist.appendleft(v)
        else:
            dlist.append(v)
        if not slist:
            self._delete(src)
        return v

    def _lmove(self, argv: list[str]) -> Reply:
        wherefrom = _upper(argv[3])
        whereto = _upper(argv[4])
        if wherefrom not in ("LEFT", "RIGHT") or whereto not in ("LEFT", "RIGHT"):
            raise ResponseError(SYNTAX_ERROR)
        return self._move(argv[1], argv[2], wherefrom == "LEFT", whereto == "LEFT")

    def _rpoplpush(self, argv: list[str]) -> Reply:
        return self._move(argv[1], argv[2], False, True)

    def _lrem(self, argv: list[str]) -> Reply:
        """LREM key count element: count > 0 from the head, < 0 from the tail, 0 all."""
        count = _string2ll(argv[2])
        if count is None:
            raise ResponseError(NOT_INTEGER)
        return self._lrem_typed(argv[1], count, argv[3])

    def _lrem_typed(self, key: str, count: int, element: str) -> int:
        lst = self._lookup_typed(key, _List)
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

    def _lrange(self, argv: list[str]) -> Reply:
        start = _string2ll(argv[2])
        end = _string2ll(argv[3])
        if start is None or end is None:
            raise ResponseError(NOT_INTEGER)
        return self._lrange_typed(argv[1], start, end)

    def _lrange_typed(self, key: str, start: int, end: int) -> list[str]:
        lst = self._lookup_typed(key, _List)
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

    def _llen(self, argv: list[str]) -> Reply:
        lst = self._lookup_typed(argv[1], _List)
        return 0 if lst is None else len(lst)

    # -- sets ----------------------------------------------------------------------------------------------
    def _sadd(self, argv: list[str]) -> Reply:
        return self._sadd_typed(argv[1], argv[2:])

    def _sadd_typed(self, key: str, members: Sequence[str]) -> int:
        s = self._lookup_typed(key, _Set)
        if s is None:
            s = self._data[key] = _Set()
        before = len(s)
        for m in members:
            s[m] = None
            if s.intset and (_string2ll(m) is None or len(s) > SET_MAX_INTSET_ENTRIES):
                s.intset = False
        return len(s) - before

    def _srem(self, argv: list[str]) -> Reply:
        return self._srem_typed(argv[1], argv[2:])

    def _srem_typed(self, key: str, members: Sequence[str]) -> int:
        s = self._lookup_typed(key, _Set)
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

    def _smembers(self, argv: list[str]) -> Reply:
        return self._smembers_typed(argv[1])

    def _smembers_typed(self, key: str) -> list[str]:
        s = self._lookup_typed(key, _Set)
        if s is None:
            return []
        return sorted(s, key=int) if s.intset else list(s)

    def _sismember(self, argv: list[str]) -> Reply:
        s = self._lookup_typed(argv[1], _Set)
        return 1 if s is not None and argv[2] in s else 0

    def _scard(self, argv: list[str]) -> Reply:
        s = self._lookup_typed(argv[1], _Set)
        return 0 if s is None else len(s)

    # -- hashes --------------------------------------------------------------------------------------------
    def _hset(self, argv: list[str]) -> Reply:
        if len(argv) % 2:
            raise ResponseError("ERR wrong number of arguments for 'hset' command")
        return self._hset_typed(argv[1], argv[2:])

    def _hset_typed(self, key: str, pairs: Sequence[str]) -> int:
        h = self._lookup_typed(key, _Hash)
        if h is None:
            h = self._data[key] = _Hash()
        before = len(h)
        for i in range(0, len(pairs), 2):
            h[pairs[i]] = pairs[i + 1]
        return len(h) - before

    def _hget(self, argv: list[str]) -> Reply:
        h = self._lookup_typed(argv[1], _Hash)
        return None if h is None else h.get(argv[2])

    def _hdel(self, argv: list[str]) -> Reply:
        key = argv[1]
        h = self._lookup_typed(key, _Hash)
        if h is None:
            return 0
        removed = 0
        for f in argv[2:]:
            if f in h:
                del h[f]
                removed += 1
        if not h:
            self._delete(key)
        return removed

    def _hincrby(self, argv: list[str]) -> Reply:
        incr = _string2ll(argv[3])
        if incr is None:
            raise ResponseError(NOT_INTEGER)
        return self._hincrby_typed(argv[1], argv[2], incr)

    def _hincrby_typed(self, key: str, field: str, incr: int) -> int:
        h = self._lookup_typed(key, _Hash)
        if h is None:
            h = self._data[key] = _Hash()
        old = h.get(field)
        value: int | None
        if old is None:
            value = 0
        else:
            value = _string2ll(old)
            if value is None:
                raise ResponseError("ERR hash value is not an integer")
        new = value + incr
        if new > LLONG_MAX or new < LLONG_MIN:
            raise ResponseError(OVERFLOW)
        h[field] = str(new)
        return new

    def _hgetall(self, argv: list[str]) -> Reply:
        h = self._lookup_typed(argv[1], _Hash)
        if h is None:
            return []
        out = []
        for f, v in h.items():
            out.append(f)
            out.append(v)
        return out

    def _hexists(self, argv: list[str]) -> Reply:
        h = self._lookup_typed(argv[1], _Hash)
        return 1 if h is not None and argv[2] in h else 0
