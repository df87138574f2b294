"""The string command parser: `execute(*args)` takes a command as redis-py sends it, checks its name and arity,
parses its arguments with Redis's rules and error texts, and runs it (strings, keys and TTLs, lists, sets,
hashes)."""

from __future__ import annotations

import numbers
from collections.abc import Callable

from emqsim.store.operations import Operations
from emqsim.store.values import (
    LLONG_MAX,
    LLONG_MIN,
    NOT_INTEGER,
    NOT_POSITIVE,
    SYNTAX_ERROR,
    WRONGTYPE,
    RedisHash,
    RedisList,
    RedisSet,
    Reply,
    ResponseError,
    string2ll,
)

__all__ = ["CommandParser", "arg", "upper"]

# SET option flags (t_string.c OBJ_*)
_NX, _XX, _GET, _KEEPTTL, _EX, _PX, _EXAT, _PXAT = (1 << i for i in range(8))
_NOT_FOR_KEEPTTL = _EX | _PX | _EXAT | _PXAT


def upper(s: str) -> str:
    """ASCII-only upper-casing (Redis compares option names with strcasecmp; ``"ſ".upper() == "S"`` must not
    turn a non-ASCII argument into a keyword)."""
    return s.upper() if s.isascii() else s


def c_bytes(s: str) -> bytes:
    """What C's ``%s`` prints of an argument, as bytes (Redis cuts at byte counts): up to the first NUL."""
    return s.encode("utf-8", "surrogateescape").split(b"\0", 1)[0]


def no_newlines(msg: str) -> str:
    """Redis maps CR and LF in error replies built from user input to spaces (``sdsmapchars``)."""
    return msg.replace("\r", " ").replace("\n", " ")


def arg(a: object) -> str:
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


class CommandParser(Operations):
    """`execute` and a handler per command: each takes the argv (name first) and returns the reply."""

    # name -> (handler, Redis arity: n > 0 exactly n args incl. the name, n < 0 at least -n); see KeyStore
    _commands: dict[str, tuple[Callable[[list[str]], Reply], int]]

    # -- entry point ---------------------------------------------------------------------------------------
    def execute(self, *args: str | int | float | bytes) -> Reply:
        """Run one Redis command (name case-insensitive) and return its reply; errors raise ResponseError."""
        self.commands_executed += 1
        if not args:
            raise ValueError("execute() needs at least a command name")
        argv = [a if type(a) is str else (str(a) if type(a) is int else arg(a)) for a in args]
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
            shown += b"'" + c_bytes(arg)[: 128 - len(shown)] + b"' "
        text = b"ERR unknown command '%s', with args beginning with: %s" % (c_bytes(argv[0])[:128], shown)
        return no_newlines(text.decode("utf-8", "surrogateescape"))

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
        if n == 5 and upper(argv[3]) == "PX":  # fast path: SET key value PX ms (a lock)
            when = string2ll(argv[4])
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
            opt = upper(argv[j])
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
            when = string2ll(expire_arg)
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

    def _incr(self, argv: list[str]) -> Reply:
        return self._incr_by(argv[1], 1)

    def _decr(self, argv: list[str]) -> Reply:
        return self._incr_by(argv[1], -1)

    def _incrby(self, argv: list[str]) -> Reply:
        incr = string2ll(argv[2])
        if incr is None:
            raise ResponseError(NOT_INTEGER)
        return self._incr_by(argv[1], incr)

    def _decrby(self, argv: list[str]) -> Reply:
        decr = string2ll(argv[2])
        if decr is None:
            raise ResponseError(NOT_INTEGER)
        if decr == LLONG_MIN:
            raise ResponseError("ERR decrement would overflow")
        return self._incr_by(argv[1], -decr)

    # -- keys and TTLs -------------------------------------------------------------------------------------
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

    def _expire_generic(self, argv: list[str], basetime: int, seconds: bool) -> Reply:
        """expireGenericCommand: flags, then the time, then the key; a time not in the future deletes."""
        nx = xx = gt = lt = False
        for opt in argv[3:]:
            u = upper(opt)
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
                raise ResponseError(no_newlines(f"ERR Unsupported option {shown}".rstrip("\r\n")))
        if nx and (xx or gt or lt):
            raise ResponseError("ERR NX and XX, GT or LT options at the same time are not compatible")
        if gt and lt:
            raise ResponseError("ERR GT and LT options at the same time are not compatible")
        when = string2ll(argv[2])
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
            count = string2ll(argv[2])
            if count is None or count < 0:
                raise ResponseError(NOT_POSITIVE)
        key = argv[1]
        lst = self._lookup_typed(key, RedisList)
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

    def _lmove(self, argv: list[str]) -> Reply:
        wherefrom = upper(argv[3])
        whereto = upper(argv[4])
        if wherefrom not in ("LEFT", "RIGHT") or whereto not in ("LEFT", "RIGHT"):
            raise ResponseError(SYNTAX_ERROR)
        return self._move(argv[1], argv[2], wherefrom == "LEFT", whereto == "LEFT")

    def _rpoplpush(self, argv: list[str]) -> Reply:
        return self._move(argv[1], argv[2], False, True)

    def _lrem(self, argv: list[str]) -> Reply:
        """LREM key count element: count > 0 from the head, < 0 from the tail, 0 all."""
        count = string2ll(argv[2])
        if count is None:
            raise ResponseError(NOT_INTEGER)
        return self._lrem_typed(argv[1], count, argv[3])

    def _lrange(self, argv: list[str]) -> Reply:
        start = string2ll(argv[2])
        end = string2ll(argv[3])
        if start is None or end is None:
            raise ResponseError(NOT_INTEGER)
        return self._lrange_typed(argv[1], start, end)

    def _llen(self, argv: list[str]) -> Reply:
        lst = self._lookup_typed(argv[1], RedisList)
        return 0 if lst is None else len(lst)

    # -- sets ----------------------------------------------------------------------------------------------
    def _sadd(self, argv: list[str]) -> Reply:
        return self._sadd_typed(argv[1], argv[2:])

    def _srem(self, argv: list[str]) -> Reply:
        return self._srem_typed(argv[1], argv[2:])

    def _smembers(self, argv: list[str]) -> Reply:
        return self._smembers_typed(argv[1])

    def _sismember(self, argv: list[str]) -> Reply:
        s = self._lookup_typed(argv[1], RedisSet)
        return 1 if s is not None and argv[2] in s else 0

    def _scard(self, argv: list[str]) -> Reply:
        s = self._lookup_typed(argv[1], RedisSet)
        return 0 if s is None else len(s)

    # -- hashes --------------------------------------------------------------------------------------------
    def _hset(self, argv: list[str]) -> Reply:
        if len(argv) % 2:
            raise ResponseError("ERR wrong number of arguments for 'hset' command")
        return self._hset_typed(argv[1], argv[2:])

    def _hget(self, argv: list[str]) -> Reply:
        h = self._lookup_typed(argv[1], RedisHash)
        return None if h is None else h.get(argv[2])

    def _hdel(self, argv: list[str]) -> Reply:
        key = argv[1]
        h = self._lookup_typed(key, RedisHash)
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
        incr = string2ll(argv[3])
        if incr is None:
            raise ResponseError(NOT_INTEGER)
        return self._hincrby_typed(argv[1], argv[2], incr)

    def _hgetall(self, argv: list[str]) -> Reply:
        h = self._lookup_typed(argv[1], RedisHash)
        if h is None:
            return []
        out = []
        for f, v in h.items():
            out.append(f)
            out.append(v)
        return out

    def _hexists(self, argv: list[str]) -> Reply:
        h = self._lookup_typed(argv[1], RedisHash)
        return 1 if h is not None and argv[2] in h else 0
