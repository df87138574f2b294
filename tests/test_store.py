"""Unit tests for emqsim.store.KeyStore on a hand-driven clock: every expiry rule, replies and error texts."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emqsim.store import KeyStore, ResponseError, stringmatch

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"


class Clock:
    """A fake millisecond clock advanced by hand; counts how often it is read."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now


class Store:
    """A KeyStore, its clock and a log of on_evict calls."""

    def __init__(self, now: int = 1_000_000, seed: int = 0, **kwargs: object) -> None:
        self.clock = Clock(now)
        self.evictions: list[tuple[str, int, str]] = []
        self.ks = KeyStore(
            self.clock,
            rng=np.random.default_rng(seed),
            on_evict=lambda k, t, how: self.evictions.append((k, t, how)),
            **kwargs,
        )

    def __call__(self, *args: object) -> object:
        return self.ks.execute(*args)

    def advance(self, ms: int) -> None:
        self.clock.now += ms


def error(s: Store, *args: object) -> str:
    with pytest.raises(ResponseError) as info:
        s(*args)
    return str(info.value)


@pytest.fixture
def s() -> Store:
    return Store()


def check_ttl_index(ks: KeyStore) -> None:
    """White-box: the sampling list and its index match the expiry table; only resident keys have TTLs."""
    assert sorted(ks._ttl_keys) == sorted(ks._expires)
    assert len(ks._ttl_keys) == len(set(ks._ttl_keys))
    for i, k in enumerate(ks._ttl_keys):
        assert ks._ttl_pos[k] == i
    assert set(ks._expires) <= set(ks._data)


# -- SET and TTLs --------------------------------------------------------------------------------------------
def test_set_without_keepttl_discards_ttl(s: Store) -> None:
    assert s("SET", "k", "a", "PX", 5000) == "OK"
    assert s("PTTL", "k") == 5000
    assert s("SET", "k", "b") == "OK"
    assert s("PTTL", "k") == -1
    assert s.ks.expire_at("k") is None
    s("SET", "k", "c", "EX", 10)
    s("SET", "k", "d", "XX")  # a successful conditional SET discards the TTL too
    assert s("PTTL", "k") == -1
    check_ttl_index(s.ks)


def test_keepttl_keeps_ttl(s: Store) -> None:
    s("SET", "k", "a", "PX", 5000)
    s.advance(1000)
    assert s("SET", "k", "b", "KEEPTTL") == "OK"
    assert s("PTTL", "k") == 4000
    assert s("GET", "k") == "b"
    assert s("SET", "new", "v", "KEEPTTL") == "OK"  # on a missing key: simply no TTL
    assert s("PTTL", "new") == -1


def test_expiry_boundary_is_strict(s: Store) -> None:
    t0 = s.clock.now
    s("SET", "k", "v", "PX", 100)
    assert s.ks.expire_at("k") == t0 + 100
    s.advance(100)  # exactly at expire_at: still there
    assert s("EXISTS", "k") == 1
    assert s("GET", "k") == "v"
    assert s("PTTL", "k") == 0
    assert s("TTL", "k") == 0
    s.advance(1)  # expire_at + 1: gone
    assert s("EXISTS", "k") == 0
    assert s("GET", "k") is None
    assert s("PTTL", "k") == -2


def test_set_expire_time_validation(s: Store) -> None:
    for opt, t in [("PX", 0), ("PX", -1), ("EX", 0), ("EX", -5), ("EXAT", 0), ("PXAT", 0), ("PXAT", -3)]:
        assert error(s, "SET", "k", "v", opt, t) == "ERR invalid expire time in 'set' command"
    assert error(s, "SET", "k", "v", "EX", 9223372036854776) == "ERR invalid expire time in 'set' command"
    assert error(s, "SET", "k", "v", "PX", 2**63 - 1) == "ERR invalid expire time in 'set' command"  # + now
    assert error(s, "SET", "k", "v", "PX", "abc") == NOT_INTEGER
    assert error(s, "SET", "k", "v", "PX", "01") == NOT_INTEGER
    assert error(s, "SET", "k", "v", "PX", "1.5") == NOT_INTEGER
    assert s("SET", "k", "v", "PXAT", 2**63 - 1) == "OK"  # absolute: no overflow
    assert s("DBSIZE") == 1


def test_set_syntax_errors(s: Store) -> None:
    for opts in (
        ["PX", 10, "KEEPTTL"], ["KEEPTTL", "PX", 10], ["NX", "XX"], ["XX", "NX"], ["EX", 1, "PX", 2],
        ["PXAT", 1, "EXAT", 1], ["PX"], ["FOO"], ["PERSIST"], ["PX", "abc", "FOO"],
    ):  # fmt: skip
        assert error(s, "SET", "k", "v", *opts) == "ERR syntax error", opts
    assert s("DBSIZE") == 0
    assert s("SET", "k", "v", "ex", 1, "ex", 2) == "OK"  # the same option twice: the last wins
    assert s("PTTL", "k") == 2000
    assert s("SET", "k", "v", "nx", "NX") is None


def test_set_nx_xx(s: Store) -> None:
    assert s("SET", "k", "a", "XX") is None
    assert s("EXISTS", "k") == 0
    assert s("SET", "k", "a", "NX", "PX", 1000) == "OK"
    assert s("SET", "k", "b", "NX", "PX", 9000) is None  # failure: nothing changes, TTL included
    assert s("GET", "k") == "a"
    assert s("PTTL", "k") == 1000
    assert s("SET", "k", "c", "XX") == "OK"
    assert s("GET", "k") == "c"
    s("RPUSH", "l", "x")
    assert s("SET", "l", "v", "NX") is None  # NX sees any type
    assert s("SET", "l", "v", "XX") == "OK"  # and SET overwrites any type
    assert s("TYPE", "l") == "string"


def test_set_get_option(s: Store) -> None:
    assert s("SET", "k", "a", "GET") is None
    assert s("SET", "k", "b", "GET") == "a"
    assert s("SET", "k", "c", "GET", "NX") == "b"  # NX fails, but GET still replies the old value
    assert s("GET", "k") == "b"
    assert s("SET", "m", "x", "XX", "GET") is None
    assert s("EXISTS", "m") == 0
    s("SADD", "set", "a")
    assert error(s, "SET", "set", "v", "GET") == WRONGTYPE
    assert error(s, "SET", "set", "v", "GET", "NX") == WRONGTYPE
    assert s("TYPE", "set") == "set"  # nothing changed


def test_set_pxat_in_the_past_creates_a_resident_invisible_key(s: Store) -> None:
    assert s("SET", "k", "v", "PXAT", 1) == "OK"
    assert s("DBSIZE") == 1 and s.ks.resident_keys() == 1
    assert s("KEYS", "*") == []  # KEYS skips it without deleting it
    assert s("DBSIZE") == 1
    assert s("EXISTS", "k") == 0
    assert s("DBSIZE") == 0
    assert s.evictions == [("k", s.clock.now, "lazy")]


# -- EXPIRE family -------------------------------------------------------------------------------------------
def test_pexpire_basics(s: Store) -> None:
    assert s("PEXPIRE", "missing", 100) == 0
    s("SET", "k", "v")
    assert s("PEXPIRE", "k", 100) == 1
    assert s("PTTL", "k") == 100
    assert s("EXPIRE", "k", 3) == 1
    assert s("PTTL", "k") == 3000
    assert s("PEXPIREAT", "k", s.clock.now + 50) == 1
    assert s("PTTL", "k") == 50
    assert s("EXPIREAT", "k", s.clock.now // 1000 + 10) == 1
    assert s.ks.expire_at("k") == (s.clock.now // 1000 + 10) * 1000


@pytest.mark.parametrize(
    "args", [("PEXPIRE", 0), ("PEXPIRE", -10), ("EXPIRE", 0), ("PEXPIREAT", 1), ("EXPIREAT", 0)]
)
def test_expire_not_in_future_deletes(s: Store, args: tuple[str, int]) -> None:
    s("SET", "k", "v", "PX", 1000)
    assert s(args[0], "k", args[1]) == 1
    assert s("EXISTS", "k") == 0
    assert s("DBSIZE") == 0
    assert s.evictions == []  # an explicit delete, not an eviction
    check_ttl_index(s.ks)


def test_pexpireat_now_deletes_but_now_plus_one_keeps(s: Store) -> None:
    s("SET", "a", "v")
    s("SET", "b", "v")
    assert s("PEXPIREAT", "a", s.clock.now) == 1
    assert s("PEXPIREAT", "b", s.clock.now + 1) == 1
    assert s("EXISTS", "a", "b") == 1


def test_pexpire_nx_xx(s: Store) -> None:
    s("SET", "k", "v")
    assert s("PEXPIRE", "k", 500, "XX") == 0  # XX needs a TTL
    assert s("PTTL", "k") == -1
    assert s("PEXPIRE", "k", 500, "NX") == 1
    assert s("PEXPIRE", "k", 900, "NX") == 0  # NX needs no TTL
    assert s("PEXPIRE", "k", 700, "XX") == 1
    assert s("PTTL", "k") == 700


def test_pexpire_gt_lt_no_ttl_counts_as_infinite(s: Store) -> None:
    s("SET", "k", "v")
    assert s("PEXPIRE", "k", 10**9, "GT") == 0  # nothing is greater than infinite
    assert s("PTTL", "k") == -1
    assert s("PEXPIRE", "k", 10**9, "LT") == 1  # anything is less than infinite
    assert s("PEXPIRE", "k", 500, "GT") == 0
    assert s("PEXPIRE", "k", 10**9, "GT") == 0  # equal is not greater
    assert s("PEXPIRE", "k", 10**9, "LT") == 0  # nor less
    assert s("PEXPIRE", "k", 10**9 + 1, "GT") == 1
    assert s("PEXPIRE", "k", 10**9, "LT") == 1
    assert s("PEXPIRE", "k", 500, "XX", "LT") == 1
    assert s("PTTL", "k") == 500
    assert s("PEXPIRE", "k", -1, "GT") == 0
    assert s("PEXPIRE", "k", -1, "LT") == 1  # passes LT, then deletes
    assert s("EXISTS", "k") == 0
    s("SET", "k", "v")
    assert s("PEXPIRE", "k", -1, "LT") == 1  # no TTL: LT passes, the key is deleted
    assert s("EXISTS", "k") == 0


def test_expire_option_errors(s: Store) -> None:
    s("SET", "k", "v")
    nx_err = "ERR NX and XX, GT or LT options at the same time are not compatible"
    for opts in (["NX", "XX"], ["nx", "GT"], ["LT", "NX"]):
        assert error(s, "PEXPIRE", "k", 100, *opts) == nx_err
    assert (
        error(s, "PEXPIRE", "k", 100, "GT", "LT")
        == "ERR GT and LT options at the same time are not compatible"
    )
    assert error(s, "EXPIRE", "k", 100, "Foo") == "ERR Unsupported option Foo"
    assert error(s, "EXPIRE", "k", "abc", "Foo") == "ERR Unsupported option Foo"  # options are checked first
    assert error(s, "EXPIRE", "k", 100, "a\nb\n") == "ERR Unsupported option a b"
    assert error(s, "PEXPIRE", "missing", 100, "NX", "XX") == nx_err  # before the key lookup
    assert error(s, "PEXPIRE", "k", "abc") == NOT_INTEGER
    assert error(s, "PEXPIRE", "k", "+1") == NOT_INTEGER
    assert error(s, "EXPIRE", "k", 9223372036854776) == "ERR invalid expire time in 'expire' command"
    assert error(s, "PEXPIRE", "k", 2**63 - 1) == "ERR invalid expire time in 'pexpire' command"
    assert error(s, "EXPIREAT", "k", -9223372036854776) == "ERR invalid expire time in 'expireat' command"
    assert s("PEXPIREAT", "k", 2**63 - 1) == 1
    assert s("PEXPIRE", "k", -(2**63)) == 1  # very negative: deletes
    assert s("EXISTS", "k") == 0


def test_pttl_and_ttl(s: Store) -> None:
    assert s("PTTL", "missing") == -2
    assert s("TTL", "missing") == -2
    s("SET", "k", "v")
    assert s("PTTL", "k") == -1
    assert s("TTL", "k") == -1
    for ms, seconds in [(1499, 1), (1500, 2), (500, 1), (499, 0), (2000, 2)]:
        s("PEXPIRE", "k", ms)
        assert s("PTTL", "k") == ms
        assert s("TTL", "k") == seconds, ms  # Redis rounds to the nearest second, half up


def test_persist(s: Store) -> None:
    assert s("PERSIST", "missing") == 0
    s("SET", "k", "v")
    assert s("PERSIST", "k") == 0
    s("PEXPIRE", "k", 100)
    assert s("PERSIST", "k") == 1
    assert s("PTTL", "k") == -1
    s.advance(1000)
    assert s("EXISTS", "k") == 1
    check_ttl_index(s.ks)


def test_ttl_survives_modifications_other_than_set(s: Store) -> None:
    s("SET", "n", "1", "PX", 1000)
    s("RPUSH", "l", "a")
    s("PEXPIRE", "l", 1000)
    s("HSET", "h", "f", "1")
    s("PEXPIRE", "h", 1000)
    s("INCR", "n")
    s("INCRBY", "n", 5)
    s("RPUSH", "l", "b")
    s("LPOP", "l")
    s("HINCRBY", "h", "f", 1)
    assert [s("PTTL", k) for k in ("n", "l", "h")] == [1000, 1000, 1000]


# -- lazy and active expiry ----------------------------------------------------------------------------------
def test_lazy_eviction_calls_on_evict_and_frees_memory(s: Store) -> None:
    s("SET", "a", "v", "PX", 10)
    s("SET", "b", "v", "PX", 10)
    s("SET", "c", "v")
    s.advance(11)
    assert s.ks.resident_keys() == 3  # expired, invisible, still resident
    assert s("DBSIZE") == 3
    assert sorted(s("KEYS", "*")) == ["c"]
    assert s.evictions == []
    assert s.ks.peek("a") == "v"  # peek: no lazy expiry
    assert s.ks.expire_at("a") is not None
    assert s("GET", "a") is None
    assert s.evictions == [("a", s.clock.now, "lazy")]
    assert s.ks.resident_keys() == 2
    assert s("DEL", "b") == 0  # DEL of an expired key: evicted lazily, not counted as deleted
    assert s.evictions[-1] == ("b", s.clock.now, "lazy")
    assert s.ks.resident_keys() == 1
    check_ttl_index(s.ks)


@pytest.mark.parametrize(
    "args",
    [
        ("EXISTS", "k"), ("GET", "k"), ("TYPE", "k"), ("PTTL", "k"), ("TTL", "k"), ("PERSIST", "k"),
        ("SET", "k", "w"), ("SET", "k", "w", "NX"), ("INCR", "k"), ("PEXPIRE", "k", 5), ("DEL", "k"),
    ],
)  # fmt: skip
def test_every_lookup_expires_lazily(s: Store, args: tuple) -> None:
    s("SET", "k", "1", "PX", 10)
    s.advance(11)
    s(*args)
    assert s.evictions == [("k", s.clock.now, "lazy")]


def test_lazily_expired_key_behaves_as_missing(s: Store) -> None:
    s("RPUSH", "l", "a", "b")
    s("PEXPIRE", "l", 10)
    s("SET", "k", "v", "PX", 10)
    s.advance(11)
    assert s("SET", "k", "w", "NX") == "OK"
    assert s("PTTL", "k") == -1
    assert s("SET", "k2", "x", "XX") is None
    assert s("RPUSH", "l", "c") == 1  # a fresh list, without the old TTL
    assert s("PTTL", "l") == -1
    assert s("LRANGE", "l", 0, -1) == ["c"]


def test_active_cycle_evicts_without_access(s: Store) -> None:
    for i in range(10):
        s("SET", f"old{i}", "v", "PX", 10)
    for i in range(5):
        s("SET", f"live{i}", "v", "PX", 10_000)
    s("SET", "forever", "v")
    s.advance(11)
    assert s.ks.resident_keys() == 16
    assert s.ks.active_expire_cycle() == 10
    assert s.ks.resident_keys() == 6
    assert sorted(k for k, _, how in s.evictions if how == "active") == sorted(f"old{i}" for i in range(10))
    assert {t for _, t, _ in s.evictions} == {s.clock.now}
    assert s.ks.active_expire_cycle() == 0
    assert s("DBSIZE") == 6
    check_ttl_index(s.ks)


def test_active_cycle_at_expire_at_keeps_key(s: Store) -> None:
    s("SET", "k", "v", "PX", 10)
    s.advance(10)
    assert s.ks.active_expire_cycle() == 0
    s.advance(1)
    assert s.ks.active_expire_cycle() == 1


def test_active_cycle_is_bounded_by_max_loops() -> None:
    s = Store(active_expire_max_loops=3)
    for i in range(1000):
        s("SET", f"k{i}", "v", "PX", 1)
    s.advance(2)
    assert s.ks.active_expire_cycle() == 60  # 3 rounds of 20, all expired
    assert s.ks.resident_keys() == 940
    default = Store()
    for i in range(1000):
        default("SET", f"k{i}", "v", "PX", 1)
    default.advance(2)
    assert default.ks.active_expire_cycle() == 16 * 20
    with pytest.raises(ValueError):
        KeyStore(lambda: 0, active_expire_max_loops=0)


def test_active_cycle_stops_when_few_expired() -> None:
    """One round of 20 with <= 2 expired (<= 10%) ends the cycle; more than 2 goes on."""

    class CountingRng:
        def __init__(self) -> None:
            self.calls = 0
            self.rng = np.random.default_rng(1)

        def choice(self, n: int, size: int, replace: bool) -> np.ndarray:
            self.calls += 1
            return self.rng.choice(n, size, replace=replace)

    rng = CountingRng()
    clock = Clock(0)
    ks = KeyStore(clock, rng=rng)  # type: ignore[arg-type]
    for i in range(1000):
        ks.execute("SET", f"k{i}", "v", "PX", 10_000)
    clock.now = 5_000
    assert ks.active_expire_cycle() == 0
    assert rng.calls == 1
    for i in range(1000):
        ks.execute("PEXPIRE", f"k{i}", 1)
    clock.now = 30_000
    assert ks.active_expire_cycle() == 16 * 20
    assert rng.calls == 1 + 16


@pytest.mark.parametrize(("expired", "rounds"), [(2, 1), (3, 2)])
def test_active_cycle_repeats_only_above_ten_percent(expired: int, rounds: int) -> None:
    """2 expired in a sample of 20 is 10%: stop; 3 is 15%: sample again."""

    class FirstTwenty:  # samples the first 20 entries of the TTL list
        calls = 0

        def choice(self, n: int, size: int, replace: bool) -> np.ndarray:
            self.calls += 1
            return np.arange(size)

    rng = FirstTwenty()
    clock = Clock(0)
    ks = KeyStore(clock, rng=rng)  # type: ignore[arg-type]
    for i in range(100):
        ks.execute("SET", f"k{i}", "v", "PX", 10 if i < expired else 10_000)
    clock.now = 100
    assert ks.active_expire_cycle() == expired
    assert rng.calls == rounds


def test_active_cycle_small_keyspace_needs_no_rng() -> None:
    s = Store()
    s("SET", "a", "v", "PX", 1)
    s("SET", "b", "v", "PX", 100)
    s.advance(2)
    assert s.ks.active_expire_cycle() == 1
    assert s.evictions == [("a", s.clock.now, "active")]


def _evict_trace(seed: int) -> list[tuple[str, int, str]]:
    s = Store(seed=seed)
    for i in range(500):
        s("SET", f"k{i}", "v", "PX", 1 + i % 7)
    for i in range(200):
        s("SET", f"live{i}", "v", "PX", 10**6)
    for _ in range(5):
        s.advance(3)
        s.ks.active_expire_cycle()
    return s.evictions


def test_active_cycle_is_deterministic_for_a_seed() -> None:
    assert _evict_trace(7) == _evict_trace(7)
    assert _evict_trace(7) != _evict_trace(8)


def test_results_do_not_depend_on_pythonhashseed() -> None:
    script = textwrap.dedent(
        """
        import numpy as np
        from emqsim.store import KeyStore
        now = [0]
        log = []
        ks = KeyStore(lambda: now[0], rng=np.random.default_rng(3), on_evict=lambda k, t, h: log.append(k))
        for i in range(300):
            ks.execute("SET", f"k{i}", "v", "PX", 1 + i % 5)
            ks.execute("SADD", "s", f"m{i * 7 % 300}")
            ks.execute("HSET", "h", f"f{i * 11 % 300}", i)
        now[0] = 10
        ks.active_expire_cycle()
        print(log, ks.execute("SMEMBERS", "s"), ks.execute("HGETALL", "h"), ks.execute("KEYS", "*"))
        """
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": ":".join(sys.path)},
            capture_output=True, text=True, check=True,
        ).stdout
        for seed in ("0", "1", "12345")
    }  # fmt: skip
    assert len(outputs) == 1


def test_flushall_clears_ttls_without_evictions(s: Store) -> None:
    s("SET", "a", "v", "PX", 1)
    s("SET", "b", "v")
    s.advance(5)
    assert s("FLUSHALL") == "OK"
    assert s("FLUSHALL", "async") == "OK"
    assert error(s, "FLUSHALL", "later") == "ERR syntax error"
    assert s.ks.resident_keys() == 0
    assert s.evictions == []
    assert s.ks.active_expire_cycle() == 0
    check_ttl_index(s.ks)


def test_clock_read_once_per_command() -> None:
    s = Store()
    s("SET", "a", "v", "PX", 10)
    s("EXISTS", "a", "a", "b")
    with pytest.raises(ResponseError):
        s("NOSUCH")
    assert s.clock.reads == 3
    s.ks.active_expire_cycle()
    assert s.clock.reads == 4
    s.ks.peek("a"), s.ks.expire_at("a"), s.ks.resident_keys()
    assert s.clock.reads == 4


# -- data types ----------------------------------------------------------------------------------------------
def test_strings_and_counters(s: Store) -> None:
    assert s("INCR", "n") == 1
    assert s("INCRBY", "n", 10) == 11
    assert s("DECR", "n") == 10
    assert s("DECRBY", "n", -5) == 15
    assert s("GET", "n") == "15"
    assert error(s, "INCRBY", "n", "abc") == NOT_INTEGER
    for bad in ("01", "-0", " 1", "1 ", "+1", "1.0", "", "9223372036854775808", "١"):
        s("SET", "x", bad)
        assert error(s, "INCR", "x") == NOT_INTEGER, bad
    s("SET", "x", "9223372036854775807")
    assert error(s, "INCR", "x") == "ERR increment or decrement would overflow"
    s("SET", "x", "-9223372036854775808")
    assert error(s, "DECR", "x") == "ERR increment or decrement would overflow"
    assert error(s, "DECRBY", "x", "-9223372036854775808") == "ERR decrement would overflow"
    s("RPUSH", "l", "a")
    assert error(s, "INCR", "l") == WRONGTYPE
    assert error(s, "GET", "l") == WRONGTYPE


def test_lists(s: Store) -> None:
    assert s("LPUSH", "l", "a", "b") == 2  # b a
    assert s("RPUSH", "l", "c", "d") == 4  # b a c d
    assert s("LRANGE", "l", 0, -1) == ["b", "a", "c", "d"]
    assert s("LRANGE", "l", -2, -1) == ["c", "d"]
    assert s("LRANGE", "l", -100, 1) == ["b", "a"]
    assert s("LRANGE", "l", 2, 100) == ["c", "d"]
    assert s("LRANGE", "l", 3, 1) == []
    assert s("LRANGE", "l", 4, 10) == []
    assert s("LRANGE", "missing", 0, -1) == []
    assert s("LLEN", "l") == 4
    assert s("LPOP", "l") == "b"
    assert s("RPOP", "l", 2) == ["d", "c"]
    assert s("LPOP", "l", 0) == []
    assert s("LPOP", "missing") is None
    assert s("LPOP", "missing", 3) is None
    assert error(s, "LPOP", "l", -1) == "ERR value is out of range, must be positive"
    assert error(s, "LPOP", "l", "x") == "ERR value is out of range, must be positive"
    assert error(s, "LPOP", "l", 1, 2) == "ERR wrong number of arguments for 'lpop' command"
    assert s("LPOP", "l", 5) == ["a"]
    assert s("EXISTS", "l") == 0


def test_lmove_and_rpoplpush(s: Store) -> None:
    s("RPUSH", "src", "a", "b", "c")
    assert s("LMOVE", "src", "dst", "RIGHT", "LEFT") == "c"
    assert s("LMOVE", "src", "dst", "left", "right") == "a"
    assert s("LRANGE", "dst", 0, -1) == ["c", "a"]
    assert s("LMOVE", "dst", "dst", "LEFT", "RIGHT") == "c"  # rotation
    assert s("LRANGE", "dst", 0, -1) == ["a", "c"]
    assert s("RPOPLPUSH", "src", "dst") == "b"
    assert s("EXISTS", "src") == 0  # emptied: deleted
    assert s("LMOVE", "src", "dst", "LEFT", "LEFT") is None
    assert error(s, "LMOVE", "src", "dst", "UP", "LEFT") == "ERR syntax error"
    s("SET", "str", "v")
    assert error(s, "LMOVE", "dst", "str", "LEFT", "LEFT") == WRONGTYPE
    assert s("LLEN", "dst") == 3  # nothing moved
    assert s("LMOVE", "missing", "str", "LEFT", "LEFT") is None  # source checked first
    s("RPUSH", "one", "x")
    assert s("LMOVE", "one", "one", "LEFT", "RIGHT") == "x"  # single-element rotation keeps the list
    assert s("LRANGE", "one", 0, -1) == ["x"]


def test_lrem(s: Store) -> None:
    s("RPUSH", "l", "a", "b", "a", "c", "a", "b")
    assert s("LREM", "l", 2, "a") == 2
    assert s("LRANGE", "l", 0, -1) == ["b", "c", "a", "b"]
    assert s("LREM", "l", -1, "b") == 1
    assert s("LRANGE", "l", 0, -1) == ["b", "c", "a"]
    assert s("LREM", "l", 0, "zz") == 0
    assert s("LREM", "l", 0, "c") == 1
    assert error(s, "LREM", "l", "x", "a") == NOT_INTEGER
    assert s("LREM", "missing", 1, "a") == 0
    assert s("LREM", "l", 0, "a") == 1
    assert s("LREM", "l", -5, "b") == 1
    assert s("EXISTS", "l") == 0


def test_sets(s: Store) -> None:
    assert s("SADD", "s", "a", "b", "a") == 2
    assert s("SADD", "s", "c", "a") == 1
    assert s("SMEMBERS", "s") == ["a", "b", "c"]  # insertion order
    assert s("SISMEMBER", "s", "b") == 1
    assert s("SISMEMBER", "s", "z") == 0
    assert s("SISMEMBER", "missing", "z") == 0
    assert s("SCARD", "s") == 3
    assert s("SREM", "s", "a", "z") == 1
    assert s("SMEMBERS", "missing") == []
    assert s.ks.peek("s") == {"b", "c"}
    assert s("SREM", "s", "b", "c") == 2
    assert s("EXISTS", "s") == 0
    s("SET", "str", "v")
    assert error(s, "SADD", "str", "a") == WRONGTYPE
    assert error(s, "SMEMBERS", "str") == WRONGTYPE


def test_hashes(s: Store) -> None:
    assert s("HSET", "h", "a", 1, "b", 2) == 2
    assert s("HSET", "h", "a", 3, "c", 4) == 1
    assert s("HGETALL", "h") == ["a", "3", "b", "2", "c", "4"]
    assert s("HGET", "h", "a") == "3"
    assert s("HGET", "h", "z") is None
    assert s("HEXISTS", "h", "b") == 1
    assert s("HEXISTS", "h", "z") == 0
    assert s("HINCRBY", "h", "a", 5) == 8
    assert s("HINCRBY", "h", "new", -2) == -2
    assert s("HINCRBY", "h2", "f", 1) == 1  # creates the hash
    s("HSET", "h", "txt", "x")
    assert error(s, "HINCRBY", "h", "txt", 1) == "ERR hash value is not an integer"
    assert error(s, "HINCRBY", "h", "a", "1.5") == NOT_INTEGER
    assert error(s, "HINCRBY", "h", "a", 2**63 - 1) == "ERR increment or decrement would overflow"
    assert error(s, "HSET", "h", "a", 1, "b") == "ERR wrong number of arguments for 'hset' command"
    assert s("HDEL", "h", "a", "b", "c", "new", "zz") == 4
    assert s("HGETALL", "h") == ["txt", "x"]
    assert s("HDEL", "h", "txt") == 1
    assert s("EXISTS", "h") == 0
    assert s("HGETALL", "h") == []
    assert s("HDEL", "h", "x") == 0
    s("SET", "str", "v")
    assert error(s, "HSET", "str", "a", 1) == WRONGTYPE


def test_empty_aggregates_are_deleted_with_their_ttl(s: Store) -> None:
    ops = [
        (("RPUSH", "k", "a"), ("LPOP", "k")),
        (("RPUSH", "k", "a"), ("RPOP", "k", 3)),
        (("RPUSH", "k", "a"), ("LREM", "k", 0, "a")),
        (("RPUSH", "k", "a"), ("LMOVE", "k", "other", "LEFT", "LEFT")),
        (("SADD", "k", "a"), ("SREM", "k", "a")),
        (("HSET", "k", "f", "v"), ("HDEL", "k", "f")),
    ]
    for create, empty in ops:
        s(*create)
        s("PEXPIRE", "k", 1000)
        s(*empty)
        assert s("EXISTS", "k") == 0, empty
        assert s.ks.expire_at("k") is None
        s(*create)
        assert s("PTTL", "k") == -1
        s("DEL", "k", "other")
    check_ttl_index(s.ks)


def test_del_exists_type_keys_dbsize(s: Store) -> None:
    s("SET", "a", "v")
    s("RPUSH", "b", "x")
    s("SADD", "c", "x")
    s("HSET", "d", "f", "v")
    assert [s("TYPE", k) for k in "abcde"] == ["string", "list", "set", "hash", "none"]
    assert s("EXISTS", "a", "a", "e") == 2
    assert s("KEYS", "*") == ["a", "b", "c", "d"]
    assert s("KEYS", "[a-b]") == ["a", "b"]
    s("SET", "", "empty")
    assert s("KEYS", "*") == ["a", "b", "c", "d", ""]
    assert s("KEYS", "**") == ["a", "b", "c", "d"]  # only the literal "*" is the match-all fast path
    assert s("DBSIZE") == 5
    assert s("DEL", "a", "a", "b", "e") == 2
    assert s("DBSIZE") == 3


def test_glob() -> None:
    assert not stringmatch("*", "")  # Redis's matcher never matches the empty string (KEYS * lists it anyway)
    assert stringmatch("k?", "k1") and not stringmatch("k?", "k12")
    assert stringmatch("k[0-2]", "k1") and not stringmatch("k[0-2]", "k3")
    assert stringmatch("k[2-0]", "k1")  # reversed range
    assert stringmatch("k[^1]", "k2") and not stringmatch("k[^1]", "k1")
    assert stringmatch("a\\*", "a*") and not stringmatch("a\\*", "ab")
    assert stringmatch("*b*", "abc") and not stringmatch("*b*", "ac")
    assert stringmatch("[a", "a")  # unterminated class
    assert not stringmatch("a", "A")
    assert stringmatch("a*" * 20 + "b", "a" * 40 + "b")
    assert not stringmatch("a*" * 20 + "b", "a" * 40)  # the skipLongerMatches cut-off keeps this fast


# -- errors, arguments, accounting ---------------------------------------------------------------------------
def test_arity_errors(s: Store) -> None:
    for args in (["SET", "k"], ["get"], ["GET", "a", "b"], ["LMOVE", "a", "b", "LEFT"], ["DbSize", "x"],
                 ["HSET", "h", "f"], ["EXISTS"], ["RPOPLPUSH", "a"], ["keys"]):  # fmt: skip
        assert error(s, *args) == f"ERR wrong number of arguments for '{args[0].lower()}' command"


def test_unknown_command_text(s: Store) -> None:
    assert error(s, "FOO") == "ERR unknown command 'FOO', with args beginning with: "
    assert error(s, "foo", "a", 1) == "ERR unknown command 'foo', with args beginning with: 'a' '1' "
    assert error(s, "foo", "a\nb") == "ERR unknown command 'foo', with args beginning with: 'a b' "
    long = error(s, "foo", "x" * 200, "y")
    assert long == "ERR unknown command 'foo', with args beginning with: '" + "x" * 128 + "' "
    assert (
        error(s, "x\ny", "z") == "ERR unknown command 'x', with args beginning with: 'y' 'z' "
    )  # redis-py split
    with pytest.raises(ValueError):
        s.ks.execute()
    with pytest.raises(ValueError):
        s.ks.execute(" ")


def test_argument_conversion(s: Store) -> None:
    assert s("SET", b"k", 12) == "OK"
    assert s("GET", "k") == "12"
    assert s("INCRBY", "k", np.int64(3)) == 15
    s("SET", "f", 1.5)
    assert s("GET", "f") == "1.5"
    s("hset", "h", "f", 1)
    assert s("HGET", "h", "f") == "1"
    with pytest.raises(TypeError):
        s("SET", "k", True)
    with pytest.raises(TypeError):
        s("SET", "k", None)


def test_command_counting(s: Store) -> None:
    s("SET", "a", "v")
    s("set", "b", "v")
    s("Get", "a")
    with pytest.raises(ResponseError):
        s("GET")
    with pytest.raises(ResponseError):
        s("NOPE")
    assert s.ks.commands_executed == 5
    assert s.ks.command_counts == {"SET": 2, "GET": 2, "NOPE": 1}
    s.ks.peek("a")
    s.ks.active_expire_cycle()
    assert s.ks.commands_executed == 5


def test_peek_returns_detached_copies(s: Store) -> None:
    s("RPUSH", "l", "a", "b")
    s("HSET", "h", "f", "v")
    s("SADD", "s", "m")
    lst, h = s.ks.peek("l"), s.ks.peek("h")
    assert lst == ["a", "b"] and h == {"f": "v"} and s.ks.peek("s") == frozenset({"m"})
    lst.append("c")
    h["g"] = "w"
    assert s("LLEN", "l") == 2 and s("HGETALL", "h") == ["f", "v"]
    assert s.ks.peek("missing") is None


KEY3 = st.sampled_from(["a", "b", "c"])
KEY4 = st.sampled_from(["a", "b", "c", "l"])
OPS = st.one_of(
    st.tuples(st.just("SET"), KEY3, st.sampled_from([[], ["PX", "5"], ["KEEPTTL"]])),
    st.tuples(st.just("PEXPIRE"), KEY4, st.sampled_from([["-1"], ["3"], ["9"]])),
    st.tuples(st.sampled_from(["DEL", "PERSIST", "GET", "LPOP", "EXISTS"]), KEY4, st.just([])),
    st.tuples(st.just("RPUSH"), st.sampled_from(["l", "a"]), st.just(["x"])),
    st.tuples(st.just("ADVANCE"), st.just(""), st.sampled_from([["1"], ["4"]])),
    st.tuples(st.just("CYCLE"), st.just(""), st.just([])),
    st.tuples(st.just("FLUSHALL"), st.just(""), st.just([])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=40))
def test_ttl_index_stays_consistent(ops: list) -> None:
    s = Store()
    for name, key, rest in ops:
        if name == "ADVANCE":
            s.advance(int(rest[0]))
        elif name == "CYCLE":
            s.ks.active_expire_cycle()
        elif name == "FLUSHALL":
            s("FLUSHALL")
        else:
            with contextlib.suppress(ResponseError):
                s(name, key, *rest)
        check_ttl_index(s.ks)
        now = s.clock.now
        visible = s("KEYS", "*")
        for k in visible:
            exp = s.ks.expire_at(k)
            assert exp is None or now <= exp
        assert s.ks.resident_keys() >= len(visible)
        assert s.ks.next_expiry() == min(s.ks._expires.values(), default=None)


def test_smembers_of_an_integer_set_is_ascending_like_redis_intsets():
    store = KeyStore(lambda: 0)
    store.execute("SADD", "s", "10", "2", "33", "1")
    assert store.execute("SMEMBERS", "s") == ["1", "2", "10", "33"]
    store.execute("SADD", "s", "x")  # a non-integer member converts the set for good
    store.execute("SREM", "s", "x")
    assert store.execute("SMEMBERS", "s") == ["10", "2", "33", "1"]
    store.execute("SADD", "big", *[str(i) for i in range(600, 0, -1)])  # over 512: a hash table
    assert store.execute("SMEMBERS", "big")[:2] == ["600", "599"]


# -- typed calls (what the protocol uses) against execute ----------------------------------------------------
TKEY = st.sampled_from(["a", "b", "l", "s", "h"])
MEMBER = st.sampled_from(["1", "2", "x"])
TYPED_OPS = st.one_of(
    st.tuples(st.just("get"), TKEY),
    st.tuples(st.just("set"), TKEY, MEMBER, st.sampled_from([None, 1, 5, 9])),
    st.tuples(st.just("delete"), TKEY),
    st.tuples(st.just("exists"), TKEY),
    st.tuples(st.sampled_from(["lpush", "rpush"]), TKEY, MEMBER),
    st.tuples(st.just("lmove"), TKEY, TKEY, st.booleans(), st.booleans()),
    st.tuples(st.just("lrem"), TKEY, st.sampled_from([-1, 0, 1, 2]), MEMBER),
    st.tuples(st.just("lrange"), TKEY, st.sampled_from([0, 1, -2]), st.sampled_from([-1, 0, 3])),
    st.tuples(st.sampled_from(["sadd", "srem"]), TKEY, st.lists(MEMBER, min_size=1, max_size=3)),
    st.tuples(st.just("smembers"), TKEY),
    st.tuples(st.just("hset"), TKEY, st.sampled_from([("f", "1"), ("f", "x", "g", "2")])),
    st.tuples(st.just("hget"), TKEY, st.sampled_from(["f", "g"])),
    st.tuples(st.just("hincrby"), TKEY, st.sampled_from(["f", "g"]), st.sampled_from([-1, 1, 7])),
    st.tuples(st.just("advance"), st.sampled_from([1, 4])),
)


def as_argv(op: tuple) -> list[object]:
    """The `execute` form of a typed call."""
    name, *a = op
    if name == "set":
        key, value, px = a
        return ["SET", key, value] + ([] if px is None else ["PX", px])
    if name == "delete":
        return ["DEL", *a]
    if name == "lmove":
        src, dst, from_left, to_left = a
        return ["LMOVE", src, dst, "LEFT" if from_left else "RIGHT", "LEFT" if to_left else "RIGHT"]
    if name in ("sadd", "srem"):
        return [name.upper(), a[0], *a[1]]
    if name == "hset":
        return ["HSET", a[0], *a[1]]
    return [name.upper(), *a]


def typed_call(ks: KeyStore, op: tuple) -> object:
    name, *a = op
    if name == "set":
        return ks.set(a[0], a[1], px=a[2])
    if name in ("sadd", "srem"):
        return getattr(ks, name)(a[0], *a[1])
    if name == "hset":
        return ks.hset(a[0], *a[1])
    if name == "lmove":
        return ks.lmove(a[0], a[1], from_left=a[2], to_left=a[3])
    return getattr(ks, name)(*a)


def outcome(call) -> object:
    try:
        return ("ok", call())
    except ResponseError as e:
        return ("error", str(e))


@settings(max_examples=200, deadline=None)
@given(st.lists(TYPED_OPS, max_size=40))
def test_typed_calls_do_exactly_what_execute_does(ops: list) -> None:
    """Same replies, errors, data, expiries, evictions and command counts, op by op."""
    typed, argv = Store(), Store()
    for op in ops:
        if op[0] == "advance":
            typed.advance(op[1])
            argv.advance(op[1])
            continue
        got = outcome(lambda op=op: typed_call(typed.ks, op))
        want = outcome(lambda op=op: argv(*as_argv(op)))
        assert got == want, op
        assert typed.ks._data == argv.ks._data
        assert typed.ks._expires == argv.ks._expires
        assert typed.evictions == argv.evictions
        assert typed.ks.command_counts == argv.ks.command_counts
        assert typed.clock.reads == argv.clock.reads
        check_ttl_index(typed.ks)
