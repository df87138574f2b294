"""KeyStore: a Redis 7.0 key store on a virtual clock, for the simulator's hot path.

    values      the value types, the integer rule, error texts
    keyspace    keys, values and TTLs: lazy and active expiry (the data model)
    operations  what commands do to the data; the typed commands the protocol calls
    parsing     `execute`: the string command parser
    admin       TYPE, DBSIZE, FLUSHALL, KEYS
    keystore    `KeyStore`, all of the above

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

from emqsim.store.admin import stringmatch
from emqsim.store.keystore import KeyStore
from emqsim.store.values import (
    LLONG_MAX,
    LLONG_MIN,
    NOT_INTEGER,
    NOT_POSITIVE,
    OVERFLOW,
    SYNTAX_ERROR,
    WRONGTYPE,
    Reply,
    ResponseError,
)

__all__ = [
    "LLONG_MAX",
    "LLONG_MIN",
    "NOT_INTEGER",
    "NOT_POSITIVE",
    "OVERFLOW",
    "SYNTAX_ERROR",
    "WRONGTYPE",
    "KeyStore",
    "Reply",
    "ResponseError",
    "stringmatch",
]
