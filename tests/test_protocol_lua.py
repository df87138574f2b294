"""The Lua scripts (emqsim/live/*.lua) and the Python protocol (emqsim.protocol) must not drift apart.

Hypothesis generates operation sequences (add, take, extend with right/wrong/stale tokens, finish with and
without the token check, both sweeps, the reaper, and clock advances). Each sequence runs on
`emqsim.protocol.Queue` over `emqsim.store.KeyStore` with a manual clock, and through `LuaQueue` on a
private redis-server; after every step the replies and every key (type, value, TTL present or not) must
agree, and each TTL must have been set by the same step with the same PX on both sides.

Time only moves in the Python store. When the virtual clock passes a key's expiry, the test deletes that key
on the server (the expiry the server would have done). The server's own clock must never expire a key: after
each step has been checked, the harness moves every expiry that step set one day later on the server (and
remembers the shift), so neither a slow machine, a paused one nor a step of the wall clock can make a key
vanish mid-example. Only a stall of more than 10 s (every PX is at least 10 s) inside a single step could.

One harness adjustment, a known difference between the simulated store and Redis 7.0: SMEMBERS on a set of
integers (an intset, up to 512 members) returns them in ascending numeric order, while `KeyStore` returns
insertion order. The two-phase sweep iterates SMEMBERS, so the order in which several reclaimed jobs go back
to `wait` differs. The Python side here runs on a KeyStore whose SMEMBERS returns Redis's order.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emqsim.keys import QueueKeys
from emqsim.live.scripts import LuaQueue
from emqsim.live.server import INSTALL_HINT, PrivateRedis, redis_server_path
from emqsim.protocol import Queue
from emqsim.store import KeyStore

pytestmark = pytest.mark.redis

EPOCH_MS = 1_700_000_000_000  # a realistic epoch-ms clock: exercises Lua's number handling
SHIFT_MS = 86_400_000  # how far the harness moves a freshly set expiry on the server (a day)


@pytest.fixture(scope="module")
def server():
    if redis_server_path() is None:
        if os.environ.get("EMQSIM_REQUIRE_REDIS") == "1":
            pytest.fail(f"EMQSIM_REQUIRE_REDIS=1 but {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    with PrivateRedis() as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    c = server.client()
    yield c
    c.close()


class Clock:
    def __init__(self) -> None:
        self.now = EPOCH_MS

    def __call__(self) -> int:
        return self.now


@dataclass
class Pair:
    """The same queue on both sides, plus the bookkeeping that picks tokens for the operations."""

    client: redis.Redis
    clock: Clock = field(default_factory=Clock)
    keys: QueueKeys = field(default_factory=lambda: QueueKeys("diff"))
    jobs: int = 0
    tokens: dict[str, list[str]] = field(default_factory=dict)  # job -> tokens it was taken with
    takes: int = 0
    offsets: dict[str, int] = field(default_factory=dict)  # key -> Redis PEXPIRETIME - Python expire_at

    remove_on_complete: bool = False

    def __post_init__(self) -> None:
        self.client.flushall()
        self.store = KeyStore(self.clock)
        self.py = Queue(self.store, self.keys, self.remove_on_complete)
        self.lua = LuaQueue(self.client, self.keys, self.remove_on_complete)

    def token_for(self, job_index: int, which: str) -> tuple[str, str] | None:
        if self.jobs == 0:
            return None
        job = str(job_index % self.jobs)
        history = self.tokens.get(job, [])
        if which == "right" and history:
            return job, history[-1]
        if which == "old" and len(history) >= 2:
            return job, history[-2]
        return job, "w9:0"  # nobody's token

    # -- the comparison ------------------------------------------------------------------------------------
    def both(self, op: str, *args):
        """Run one operation on both sides (Redis's wall clock bracketed) and return both replies."""
        r0 = int(time.time() * 1000)
        left = getattr(self.py, op)(*args)
        right = getattr(self.lua, op)(*args)
        r1 = int(time.time() * 1000)
        self.check_state(r0, r1)
        return left, right

    def advance(self, ms: int) -> None:
        """Move the virtual clock; apply on Redis the expiries the Python store now sees."""
        self.clock.now += ms
        now = self.clock.now
        for key in self.client.keys("*"):
            expire_at = self.store.expire_at(key)
            if (expire_at is not None and now > expire_at) or self.store.peek(key) is None:
                self.client.delete(key)
                self.offsets.pop(key, None)
        self.check_state(None, None)

    def redis_snapshot(self) -> dict[str, tuple]:
        """Every key on the server: (type, value, PEXPIRETIME), in two pipelined round trips."""
        names = sorted(self.client.keys("*"))
        pipe = self.client.pipeline(transaction=False)
        for key in names:
            pipe.type(key)
            pipe.pexpiretime(key)
        meta = pipe.execute()
        readers = {
            "string": pipe.get,
            "list": lambda k: pipe.lrange(k, 0, -1),
            "set": pipe.smembers,
            "hash": pipe.hgetall,
        }
        for i, key in enumerate(names):
            readers[meta[2 * i]](key)
        values = pipe.execute()
        return {key: (meta[2 * i], values[i], meta[2 * i + 1]) for i, key in enumerate(names)}

    def python_snapshot(self) -> dict[str, tuple]:
        x = self.store.execute
        out = {}
        for key in sorted(x("KEYS", "*")):
            kind = x("TYPE", key)
            if kind == "string":
                value = x("GET", key)
            elif kind == "list":
                value = x("LRANGE", key, 0, -1)
            elif kind == "set":
                value = set(x("SMEMBERS", key))
            else:
                flat = x("HGETALL", key)
                value = dict(zip(flat[::2], flat[1::2], strict=True))
            out[key] = (kind, value, self.store.expire_at(key))
        return out

    def check_state(self, r0: int | None, r1: int | None) -> None:
        py, rd = self.python_snapshot(), self.redis_snapshot()
        assert sorted(py) == sorted(rd)
        fresh: dict[str, int] = {}  # key -> the server's expiry (epoch ms) as this step set it
        for key, (kind, value, expire_at) in py.items():
            r_kind, r_value, pexpiretime = rd[key]
            assert (kind, value) == (r_kind, r_value), key
            assert (expire_at is None) == (pexpiretime == -1), f"{key}: TTL on one side only"
            if expire_at is None:
                self.offsets.pop(key, None)
                continue
            # Redis's expiry = its clock at the SET + PX; Python's = virtual now + PX. An unchanged offset:
            # nobody touched the TTL; a new offset must come from a SET during this very step.
            offset = pexpiretime - expire_at
            if self.offsets.get(key) != offset:
                assert r0 is not None and r1 is not None, f"{key}: TTL changed without a step"
                now = self.clock.now
                assert r0 - now <= offset <= r1 - now, f"{key}: PX differs (offset {offset})"
                fresh[key] = pexpiretime
        # Keys whose TTL this step set: out of the server clock's reach (see the module doc).
        if fresh:
            pipe = self.client.pipeline(transaction=False)
            for key, pexpiretime in fresh.items():
                pipe.pexpireat(key, pexpiretime + SHIFT_MS)
                self.offsets[key] = pexpiretime + SHIFT_MS - py[key][2]
            assert all(pipe.execute()), f"a key of {sorted(fresh)} expired on the server within its step"


# -- operation sequences --------------------------------------------------------------------------------------
# One generic tuple per step: (kind, job index, token choice, flag, amount); the kind says which fields it
# uses. Kinds are weighted by repetition so that sequences reach interesting states (several jobs held,
# leases lapsing, sweeps reclaiming, stale finishes).
KINDS = ["add"] * 3 + ["take"] * 3 + ["extend"] * 2 + ["finish"] * 2 + ["sweep2"] * 2 + ["sweep1", "reap"]
KINDS += ["advance"] * 3
TOKENS = ["right", "right", "old", "wrong"]
operation = st.tuples(
    st.sampled_from(KINDS),
    st.integers(0, 9),
    st.sampled_from(TOKENS),
    st.booleans(),
    st.sampled_from(["lease-1", "lease", "lease+1", "interval+1", "small", "zero", "any"]),
    st.integers(0, 60_000),
)
config = st.fixed_dictionaries(
    {
        "lock": st.sampled_from(["lease", "lease", "fence", "none"]),
        "lease_ms": st.integers(10_000, 60_000),
        "interval_ms": st.integers(10_000, 60_000),
        "max_stalled": st.sampled_from([None, 0, 1, 2]),
        "remove_on_complete": st.booleans(),
    }
)


def _amount(cfg: dict, which: str, value: int) -> int:
    return {
        "lease-1": cfg["lease_ms"] - 1,
        "lease": cfg["lease_ms"],
        "lease+1": cfg["lease_ms"] + 1,
        "interval+1": cfg["interval_ms"] + 1,
        "small": value % 1000,
        "zero": 0,
    }.get(which, value)


def run_sequence(pair: Pair, cfg: dict, ops: list[tuple]) -> None:
    """Apply the steps to both sides; every reply must agree (the state is checked inside `Pair.both`)."""
    lock_ms = cfg["lease_ms"] if cfg["lock"] == "lease" else None
    set_lock = cfg["lock"] != "none"
    for kind, index, which, flag, amount_kind, value in ops:
        now = pair.clock.now
        if kind == "add":
            left, right = pair.both("add", str(pair.jobs))
            pair.jobs += 1
        elif kind == "take":
            pair.takes += 1
            token = f"w{index % 3}:{pair.takes}"
            left, right = pair.both("take", token, now, lock_ms, set_lock)
            if left is not None:
                pair.tokens.setdefault(left, []).append(token)
        elif kind == "extend":
            picks = [(index, which)] + [
                (index + i, TOKENS[(value >> i) % 4]) for i in range(1, 1 + value % 3)
            ]
            held = [h for i, w in picks if (h := pair.token_for(i, w)) is not None]
            left, right = pair.both("extend_locks", held, cfg["lease_ms"], flag and value % 4 == 0)
        elif kind == "finish":
            chosen = pair.token_for(index, which)
            if chosen is None:
                continue
            left, right = pair.both("finish", chosen[0], chosen[1], flag)
        elif kind in ("sweep1", "sweep2"):
            name = "sweep_two_phase" if kind == "sweep2" else "sweep_single_phase"
            left, right = pair.both(name, now, cfg["interval_ms"], cfg["max_stalled"])
        elif kind == "reap":
            # A timeout at the age of an active job, one ms either side, or anything.
            active = pair.store.execute("LRANGE", pair.keys.active, 0, -1)
            timeout = value
            if active:
                started = pair.store.execute(
                    "HGET", pair.keys.job(active[index % len(active)]), "processedOn"
                )
                timeout = max(0, now - int(started) + (value % 3) - 1)
            left, right = pair.both("reap", now, timeout, cfg["max_stalled"])
        else:
            pair.advance(_amount(cfg, amount_kind, value))
            continue
        assert left == right, f"{kind}: python {left!r} != lua {right!r}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=config, adds=st.integers(0, 4), ops=st.lists(operation, min_size=20, max_size=60))
def test_lua_matches_python(client, cfg, adds, ops):
    run_sequence(
        Pair(client, remove_on_complete=cfg["remove_on_complete"]),
        cfg,
        [("add", 0, "right", False, "zero", 0)] * adds + ops,
    )


# -- readable fixed sequences (also documentation of the protocol) ---------------------------------------------
def step(kind: str, index: int = 0, which: str = "right", flag: bool = False, value: int = 0) -> tuple:
    return (kind, index, which, flag, "any", value)


def test_lapsed_lease_is_reclaimed_and_stale_finish_rejected(client):
    pair = Pair(client)
    cfg = {"lock": "lease", "lease_ms": 30_000, "interval_ms": 10_000, "max_stalled": 1}
    ops = [step("add"), step("add"), step("take"), step("take"), step("sweep2")]
    ops += [step("extend", 1, value=3), step("advance", value=30_001), step("sweep2"), step("take")]
    ops += [
        step("finish", 0, "old", True),
        step("finish", 0, "right", True),
        step("finish", 1, "right", True),
    ]
    run_sequence(pair, cfg, ops)
    x = pair.store.execute
    # Job 1's renewal kept it off the stalled set, but 30 s later its lease had lapsed too: only job 0 was
    # reclaimed (it had been marked), retaken and completed; job 1's holder now finds its lock gone.
    assert x("SMEMBERS", pair.keys.completed) == ["0"]
    for queue in (pair.py, pair.lua):
        assert queue.finish("1", pair.tokens["1"][-1], True).error == "Missing lock for job 1"
        assert queue.finish("0", pair.tokens["0"][0], True).error == "Missing lock for job 0"


def test_reclaim_order_of_several_stalled_jobs(client):
    """Three jobs lapse together: Redis requeues them in intset (numeric) order, as the harness models."""
    pair = Pair(client)
    cfg = {"lock": "lease", "lease_ms": 10_000, "interval_ms": 10_000, "max_stalled": None}
    ops = [step("add")] * 3 + [step("take")] * 3
    ops += [step("sweep2"), step("advance", value=10_001), step("sweep2")]
    run_sequence(pair, cfg, ops)
    assert pair.client.lrange(pair.keys.wait, 0, -1) == ["0", "1", "2"]


def test_unchecked_finish_of_a_reaped_job_is_accepted_twice(client):
    pair = Pair(client)
    cfg = {"lock": "none", "lease_ms": 10_000, "interval_ms": 10_000, "max_stalled": None}
    ops = [step("add"), step("take"), step("advance", value=5000), step("reap", value=0), step("take")]
    ops += [step("finish", 0, "old", False), step("finish", 0, "right", False)]
    run_sequence(pair, cfg, ops)
    x = pair.store.execute
    assert x("SMEMBERS", pair.keys.completed) == ["0"]
    assert x("HGET", pair.keys.job("0"), "ats") == "2"


def test_the_servers_clock_cannot_expire_a_key_mid_example(client):
    """The harness's premise: a TTL set by a step is a day away on the server once that step is checked, so a
    stalled or paused machine (or a step of the wall clock) cannot expire it before the virtual clock does."""
    pair = Pair(client)
    cfg = {"lock": "lease", "lease_ms": 10_000, "interval_ms": 10_000, "max_stalled": 1}
    run_sequence(pair, cfg, [step("add"), step("take"), step("sweep2"), step("advance", value=9_000)])
    now_ms = int(time.time() * 1000)
    for key in (pair.keys.lock("0"), pair.keys.stalled_check):
        assert client.pexpiretime(key) - now_ms > SHIFT_MS - 10_000, key
    # ...and the virtual clock still expires them, on both sides, one ms after their PX.
    run_sequence(pair, cfg, [step("advance", value=1_001)])
    assert client.exists(pair.keys.lock("0"), pair.keys.stalled_check) == 0
