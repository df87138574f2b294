"""The data model's values: Redis's value types (lists, sets, hashes; strings are `str`), its integer rule,
its limits and the exact texts of its error replies."""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = [
    "LLONG_MAX",
    "LLONG_MIN",
    "NOT_INTEGER",
    "NOT_POSITIVE",
    "OVERFLOW",
    "SET_MAX_INTSET_ENTRIES",
    "SYNTAX_ERROR",
    "TYPE_NAMES",
    "WRONGTYPE",
    "RedisHash",
    "RedisList",
    "Reply",
    "ResponseError",
    "RedisSet",
    "string2ll",
]

Reply = Any  # "OK" | int | str | None | list[Reply]
"""A Redis reply shaped as redis-py returns it (RESP2, decode_responses=True, no response callbacks)."""

LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)
SET_MAX_INTSET_ENTRIES = 512  # set-max-intset-entries (7.0 default)

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
SYNTAX_ERROR = "ERR syntax error"
OVERFLOW = "ERR increment or decrement would overflow"
NOT_POSITIVE = "ERR value is out of range, must be positive"


class ResponseError(Exception):
    """A Redis error reply; str(exc) is the exact Redis error text, e.g. "ERR syntax error"."""


class RedisList(deque):
    """A Redis list (head = left)."""

    __slots__ = ()


class RedisSet(dict):
    """A Redis set: members as keys of an insertion-ordered dict (values None), never a Python set.

    `intset` mirrors Redis's compact encoding: while every member is a 64-bit integer and there are at most
    512 of them (set-max-intset-entries), Redis keeps them sorted and SMEMBERS returns ascending numbers;
    the first other member or the 513th converts the set for good.
    """

    __slots__ = ("intset",)

    def __init__(self) -> None:
        super().__init__()
        self.intset = True


class RedisHash(dict):
    """A Redis hash: field -> value, insertion-ordered."""

    __slots__ = ()


TYPE_NAMES: dict[type, str] = {str: "string", RedisList: "list", RedisSet: "set", RedisHash: "hash"}


def string2ll(s: str) -> int | None:
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
