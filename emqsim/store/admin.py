"""Admin and introspection commands: TYPE, DBSIZE, FLUSHALL and KEYS with Redis's glob matcher."""

from __future__ import annotations

from emqsim.store.keyspace import Keyspace
from emqsim.store.parsing import upper
from emqsim.store.values import SYNTAX_ERROR, TYPE_NAMES, Reply, ResponseError

__all__ = ["AdminCommands", "stringmatch"]


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


class AdminCommands(Keyspace):
    """TYPE, DBSIZE, FLUSHALL [ASYNC|SYNC] and KEYS pattern, as `execute` handlers."""

    def _type(self, argv: list[str]) -> Reply:
        v = self._lookup(argv[1])
        return "none" if v is None else TYPE_NAMES[type(v)]

    def _dbsize(self, argv: list[str]) -> Reply:
        return len(self._data)

    def _flushall(self, argv: list[str]) -> Reply:
        if len(argv) > 2 or (len(argv) == 2 and upper(argv[1]) not in ("SYNC", "ASYNC")):
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
