"""The wire between the trusted grader and the student's sandboxed kernel: framed JSON messages over a socket.

Both ends use it: the trusted side (`emqsim.grading.trusted`) and the agent in the student's kernel
(`emqsim.grading.agent`). Only plain data crosses: None, bools, numbers, strings, lists and dicts, with a few
tagged forms (`$t` tuple, `$frac` fraction, `$dc` an emqsim dataclass by its fields, `$ref` a handle to an
object that stays on the other side). Sizes and depths are bounded; the receiving side decides what a tag may
become (the trusted side builds only what its own allow-list names).
"""

from __future__ import annotations

import json
import math
import socket
import struct
from typing import Any

MAX_MESSAGE = 64 << 20  # bytes in one message
MAX_DEPTH = 24  # nesting of lists, dicts and tagged values
MAX_ITEMS = 2_000_000  # values in one message, all levels together
MAX_INT_BITS = 4096  # an int longer than this is refused (float() of it would fail or mislead)
_HEADER = struct.Struct(">I")


class WireError(Exception):
    """The other side sent something that is not a valid message (too big, too deep, not plain data)."""


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one message (a dict of plain data, already encoded)."""
    data = json.dumps(message, allow_nan=True, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise WireError(f"a message of {len(data)} bytes is larger than the {MAX_MESSAGE} byte limit")
    sock.sendall(_HEADER.pack(len(data)) + data)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(sock: socket.socket, *, check: bool = True) -> dict[str, Any]:
    """Read one message; WireError if it is too large or not a JSON object of bounded shape. `check=False`
    skips the shape check: for the agent, which reads what the trusted grader sends."""
    (size,) = _HEADER.unpack(_read_exactly(sock, _HEADER.size))
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes is larger than the {MAX_MESSAGE} byte limit")
    try:
        message = json.loads(_read_exactly(sock, size))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not a JSON message: {type(exc).__name__}") from None
    if not isinstance(message, dict):
        raise WireError("a message must be a JSON object")
    if check:
        check_shape(message)
    return message


def check_shape(value: Any) -> None:
    """WireError unless `value` (decoded JSON) stays within MAX_DEPTH levels, MAX_ITEMS values and ints of at
    most MAX_INT_BITS bits. Level by level, on exact types: json.loads makes only dicts, lists, strings, ints,
    floats, bools and None."""
    count = 0
    level: list[Any] = [value]
    depth = 0
    while level:
        if depth > MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH} levels")
        count += len(level)
        if count > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} values in one message")
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is dict:
                below.extend(item.values())
            elif kind is list:
                below.extend(item)
            elif kind is int:
                if item.bit_length() > MAX_INT_BITS:
                    raise WireError(f"an integer longer than {MAX_INT_BITS} bits")
            elif not (kind is str or kind is float or kind is bool or item is None):
                raise WireError(f"unexpected value of type {kind.__name__}")
        level = below
        depth += 1


def is_plain_number(value: Any) -> bool:
    """An int or float of Python's own types (not a bool, not a subclass)."""
    return type(value) in (int, float)


def finite(value: float) -> bool:
    return math.isfinite(value)
