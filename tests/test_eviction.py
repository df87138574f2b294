"""maxmemory eviction (emqsim/store/eviction.py): the eviction pool as evict.c fills it, the LFU counter,
which keys each policy may evict, determinism, and the same fill on a real redis-server (which keys survive
under maxmemory, the model's memory against the server's)."""

from __future__ import annotations

import numpy as np
import pytest

from emqsim.store.eviction import (
    EVPOOL_SIZE,
    LATENCY_HISTOGRAM_BYTES,
    LFU_INIT_VAL,
    EvictingKeyStore,
    Eviction,
    allocation,
    key_bytes,
)

try:
    from tests.redis_server import REDIS_SERVER, RedisServer
except ImportError:  # tests/ not importable as a package
    from redis_server import REDIS_SERVER, RedisServer  # type: ignore[no-redef]

VALUE = "a" * 1000


def _store(
    policy: str,
    maxmemory: int,
    seed: int = 0,
    clock: list[int] | None = None,
    base: int = 0,
    latency_tracking: bool = False,
):
    """A store whose memory is its keys only (no base, no latency histograms, unless asked): the algorithm's
    tests fill it to an exact number of keys."""
    now = clock if clock is not None else [0]
    return EvictingKeyStore(
        lambda: now[0],
        Eviction(maxmemory=maxmemory, policy=policy, base_bytes=base, latency_tracking=latency_tracking),
        evict_rng=np.random.default_rng(seed),
    )


def _fill(store: EvictingKeyStore, n: int, plain_every: int) -> None:
    """n 1,000-byte keys; every `plain_every`-th has no TTL, the others expire later the later they come."""
    for i in range(n):
        store.perform_evictions()
        if store.out_of_memory:
            continue  # Redis refuses the write (OOM)
        if i % plain_every == 0:
            store.set(f"p:{i:05d}", VALUE)
        else:
            store.set(f"t:{i:05d}", VALUE, px=1_000_000 + i * 1000)


def test_allocation_follows_jemalloc_size_classes() -> None:
    assert [allocation(n) for n in (1, 9, 17, 100, 129, 1004, 1025, 5000)] == [
        8,
        16,
        32,
        112,
        160,
        1024,
        1280,
        5120,
    ]
    # MEMORY USAGE of a 7-byte key holding 1,000 bytes is 1,080 on redis-server 7.0.15; the model adds the
    # dict's bucket share (12) and, with a TTL, the expires entry (36)
    assert key_bytes("cache:1", VALUE, False) == 1080 + 12
    assert key_bytes("cache:1", VALUE, True) == 1080 + 12 + 36


@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-lfu", "volatile-ttl", "volatile-random"])
def test_volatile_policies_evict_only_keys_with_a_ttl(policy: str) -> None:
    store = _store(policy, maxmemory=400_000)
    _fill(store, 600, plain_every=3)
    keys = store.execute("KEYS", "*")
    assert sum(k.startswith("p:") for k in keys) == 200  # every key without a TTL survives
    assert store.evicted_keys > 0 and store.used_memory() <= 400_000 + key_bytes("t:00000", VALUE, True)


def test_noeviction_evicts_nothing_and_reports_out_of_memory() -> None:
    store = _store("noeviction", maxmemory=50_000)
    _fill(store, 100, plain_every=2)
    assert store.evicted_keys == 0 and store.out_of_memory and store.oom_commands > 0


def test_volatile_ttl_evicts_the_soonest_expiry_first() -> None:
    store = _store("volatile-ttl", maxmemory=300_000, clock=[0])
    _fill(store, 600, plain_every=1_000_000)  # only key 0 has no TTL
    survivors = sorted(int(k[2:]) for k in store.execute("KEYS", "t:*"))
    # the pool keeps the soonest-expiring of the sampled keys: survivors are mostly the late ones
    assert np.mean(survivors) > 400


def test_lru_evicts_the_idle_keys_not_the_recently_read_ones() -> None:
    clock = [0]
    store = _store("allkeys-lru", maxmemory=150_000, clock=clock)
    for i in range(100):
        store.set(f"hot:{i}", VALUE, px=10_000_000)
    clock[0] = 5_000
    for i in range(100):
        store.set(f"cold:{i}", VALUE, px=10_000_000)
    clock[0] = 10_000
    for i in range(100):
        store.get(f"hot:{i}")  # read: idle 0 s; the cold keys are idle 5 s
    clock[0] = 11_000
    for i in range(100):
        store.perform_evictions()
        store.set(f"new:{i}", VALUE, px=10_000_000)
    keys = store.execute("KEYS", "*")
    hot = sum(k.startswith("hot:") for k in keys)
    cold = sum(k.startswith("cold:") for k in keys)
    assert hot > 3 * max(cold, 1)


def test_pool_is_sorted_and_bounded() -> None:
    clock = [0]
    store = _store("volatile-lru", maxmemory=100_000, clock=clock)
    for i in range(300):
        clock[0] = i * 200
        store.perform_evictions()
        store.set(f"t:{i}", VALUE, px=10_000_000)
        pool = store._pool
        assert len(pool) <= EVPOOL_SIZE
        assert [s for s, _ in pool] == sorted(s for s, _ in pool)


def test_lfu_counter_starts_at_init_grows_logarithmically_and_decays() -> None:
    clock = [0]
    store = _store("allkeys-lfu", maxmemory=10**9, clock=clock)
    store.set("k", "v")
    assert store._lfu["k"] == (0, LFU_INIT_VAL)
    for _ in range(1000):
        store.get("k")
    counter = store._lfu["k"][1]
    # p = 1/((c - 5) * 10 + 1): 1,000 hits take the counter to about 5 + sqrt(2 * 1000 / 10) ~ 19
    assert 12 <= counter <= 30
    clock[0] = 10 * 60_000  # ten minutes later: one decrement per minute (lfu-decay-time 1)
    assert store._lfu_decayed("k", 10) == counter - 10


def test_same_seed_same_evictions_and_the_expire_stream_is_untouched() -> None:
    def survivors(seed: int) -> list[str]:
        store = _store("volatile-random", maxmemory=200_000, seed=seed)
        _fill(store, 400, plain_every=4)
        return sorted(store.execute("KEYS", "*"))

    assert survivors(1) == survivors(1)
    assert survivors(1) != survivors(2)


def test_each_command_name_run_adds_one_latency_histogram() -> None:
    """Redis 7's latency tracking: a command's first call gives it a histogram that counts in the memory
    used; a second call, or another command of the same name, adds nothing; a client's command named to
    `perform_evictions` (EVALSHA) has its histogram from the next check on; without latency tracking none."""
    store = _store("volatile-lru", maxmemory=10**9, latency_tracking=True)
    assert store.used_memory() == 0
    store.set("k", VALUE, px=1000)
    assert store.used_memory() == key_bytes("k", VALUE, True) + LATENCY_HISTOGRAM_BYTES
    store.set("j", VALUE, px=1000)
    store.get("k")
    store.get("j")
    keys = key_bytes("k", VALUE, True) + key_bytes("j", VALUE, True)
    assert store.used_memory() == keys + 2 * LATENCY_HISTOGRAM_BYTES  # SET, GET
    store.perform_evictions("EVALSHA")
    store.perform_evictions("EVALSHA")
    store.command_done("BZPOPMIN")
    assert store.histogram_bytes() == 4 * LATENCY_HISTOGRAM_BYTES
    plain = _store("volatile-lru", maxmemory=10**9, latency_tracking=False)
    plain.set("k", VALUE, px=1000)
    plain.perform_evictions("EVALSHA")
    assert plain.histogram_bytes() == 0 and plain.used_memory() == key_bytes("k", VALUE, True)
    with pytest.raises(ValueError, match="latency_tracking"):
        Eviction(maxmemory=1, latency_tracking=1)  # type: ignore[arg-type]


def test_a_new_commands_histogram_evicts_keys_at_the_next_check() -> None:
    """The histogram of a command run for the first time takes memory from the keys: the next check evicts
    as many keys as it needs."""
    room = 40 * key_bytes("t:00000", VALUE, True)
    store = _store("volatile-random", maxmemory=LATENCY_HISTOGRAM_BYTES + room, latency_tracking=True)
    for i in range(40):
        store.perform_evictions()
        store.set(f"t:{i:05d}", VALUE, px=10**9)
    assert store.evicted_keys == 0 and store.resident_keys() == 40  # (not DBSIZE: a command, a histogram)
    store.perform_evictions("EVALSHA")  # EVALSHA runs: it has a histogram from now on
    assert store.evicted_keys == 0
    store.perform_evictions()
    expected = -(-LATENCY_HISTOGRAM_BYTES // key_bytes("t:00000", VALUE, True))
    assert store.evicted_keys == expected and store.used_memory() <= store.eviction.maxmemory


@pytest.mark.redis
@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
def test_a_real_redis_server_gives_each_command_its_latency_histogram_as_the_model_does() -> None:
    """On redis-server 7.0: a command's first call grows used_memory by LATENCY_HISTOGRAM_BYTES and its second
    by nothing; a script's own commands get histograms as well as EVAL; a BZPOPMIN that times out gets none,
    one a push wakes does (what `Server` tells the store)."""
    import threading
    import time

    import redis

    def histograms() -> set[str]:
        return {k.removeprefix("latency_percentiles_usec_") for k in client.info("latencystats")}

    with RedisServer() as server:
        client = redis.Redis(unix_socket_path=server.socket_path, decode_responses=True)
        assert client.config_get("latency-tracking")["latency-tracking"] == "yes"

        def used() -> int:
            return int(client.info("memory")["used_memory"])

        used()
        used()  # INFO has its histogram; the client's buffers are grown
        before = used()
        client.echo("x")
        first = used()
        client.echo("x")
        second = used()
        assert (first - before) - (second - first) == LATENCY_HISTOGRAM_BYTES, (before, first, second)
        client.eval("redis.call('SET', 'k', 'v', 'PX', 1000); return redis.call('HSET', 'h', 'f', 'v')", 0)
        assert {"eval", "set", "hset"} <= histograms()
        client.bzpopmin("empty", timeout=0.1)
        assert "bzpopmin" not in histograms()

        def push() -> None:
            time.sleep(0.2)
            redis.Redis(unix_socket_path=server.socket_path).zadd("marker", {"m": 1})

        pusher = threading.Thread(target=push)
        pusher.start()
        client.bzpopmin("marker", timeout=5)
        pusher.join()
        assert {"bzpopmin", "zadd"} <= histograms()
        client.config_set("latency-tracking", "no")  # what live mode sets for latency_tracking=False
        before = used()
        client.hlen("h")
        assert "hlen" not in histograms() and used() - before < LATENCY_HISTOGRAM_BYTES


@pytest.mark.redis
@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
def test_the_same_fill_on_a_real_redis_server_keeps_the_same_keys() -> None:
    """Fill a real redis-server 7 with maxmemory 400 kB above its own usage, policy by policy, and the
    model's store with the same base: the number of keys that fit agrees within 5%, the keys without a TTL
    survive a volatile policy on both, and the TTL keys that survive are alike (allkeys-random: the share of
    TTL keys among survivors within a binomial band; volatile-ttl: the late keys)."""
    import redis

    extra, n = 400_000, 1000
    with RedisServer() as server:
        client = server.client()
        for policy, plain_every in (
            ("warm-up", 5),  # the first fill under eviction grows the server's own buffers once (~30 kB)
            ("volatile-lru", 5),
            ("volatile-ttl", 5),
            ("volatile-random", 5),
            ("allkeys-random", 2),
            ("allkeys-lru", 2),
        ):
            client.execute_command("CONFIG", "SET", "maxmemory", "0")
            client.execute_command("FLUSHALL")
            client.execute_command(
                "CONFIG", "SET", "maxmemory-policy", policy.replace("warm-up", "volatile-lru")
            )
            info = client.execute_command("INFO", "memory")
            base = int(
                next(line.split(":")[1] for line in info.splitlines() if line.startswith("used_memory:"))
            )
            client.execute_command("CONFIG", "SET", "maxmemory", str(base + extra))
            refused = 0
            for start in range(0, n, 10):  # small batches: a big query buffer counts as used memory
                pipe = client.pipeline(transaction=False)
                for i in range(start, start + 10):
                    if i % plain_every == 0:
                        pipe.execute_command("SET", f"p:{i:05d}", VALUE)
                    else:
                        pipe.execute_command("SET", f"t:{i:05d}", VALUE, "PX", str(1_000_000 + i * 1000))
                replies = pipe.execute(raise_on_error=False)
                refused += sum(isinstance(r, redis.ResponseError) for r in replies)
            real = client.execute_command("KEYS", "*")
            client.execute_command("CONFIG", "SET", "maxmemory", "0")
            if policy == "warm-up":
                continue
            model = _store(policy, base + extra, base=base)
            _fill(model, n, plain_every)
            sim = model.execute("KEYS", "*")
            assert abs(len(sim) - len(real)) <= 0.05 * len(real), (policy, len(real), len(sim))
            real_plain = sum(k.startswith("p:") for k in real)
            sim_plain = sum(k.startswith("p:") for k in sim)
            if policy.startswith("volatile"):
                assert real_plain == sim_plain == n // plain_every, policy
                assert (refused > 0) == (model.oom_commands > 0), policy
            else:  # random / LRU among keys written within the same second: a key's kind does not matter
                share = sim_plain / len(sim)
                half = 3 * np.sqrt(0.25 / len(real))
                assert abs(real_plain / len(real) - share) <= half, (policy, real_plain, len(real), share)
            if policy == "volatile-ttl":
                real_ttl = np.mean([int(k[2:]) for k in real if k.startswith("t:")])
                sim_ttl = np.mean([int(k[2:]) for k in sim if k.startswith("t:")])
                assert real_ttl > 600 and sim_ttl > 600 and abs(real_ttl - sim_ttl) < 100


# -- in the simulator: the memory-pressure scenario ----------------------------------------------------------


def test_memory_pressure_evicts_live_workers_locks_and_the_sweep_reclaims_them() -> None:
    from emqsim import simulate
    from emqsim.presets import preset
    from emqsim.scenario import standard

    scenario = standard("memory-pressure")
    run = simulate(scenario, preset("bullmq"), seed=0)
    evicted = [e for e in run.lock_events if e.kind == "memory_evicted"]
    assert evicted and all(e.detail == "volatile-lru" for e in evicted)
    by_token = {a.token: a for a in run.attempts}
    for event in evicted:
        attempt = by_token[event.token]
        # the worker was alive: its renewals fail from the eviction on, and a sweep takes the job back
        assert attempt.worker_state_at_reclaim == "alive" and attempt.reclaimed_at is not None
        assert attempt.taken_at <= event.time <= attempt.reclaimed_at
        assert any(
            e.kind == "renew_failed" and e.token == event.token and e.time > event.time
            for e in run.lock_events
        )
    assert simulate(scenario, preset("bullmq"), seed=0).digest() == run.digest()
    calm = simulate(standard("memory-pressure", policy="noeviction"), preset("bullmq"), seed=0)
    assert not [e for e in calm.lock_events if e.kind == "memory_evicted"]
    assert all(a.outcome == "completed" for a in calm.attempts)


def test_the_queues_latency_histograms_take_room_from_its_keys() -> None:
    """memory-pressure under BullMQ's preset: BullMQ's 33 command names (`redis_commands`) hold their
    histograms from the start, room for 33 x 24,688 bytes of cache keys; without latency tracking
    (`MemoryPressure(latency_tracking=False)`) the memory holds that many more keys at its peak. Under a plain
    lease the queue's own step names count, as they run: fewer, so more keys."""
    import dataclasses

    from emqsim import LeasePolicy, simulate
    from emqsim.presets import BULLMQ_REDIS_COMMANDS, preset
    from emqsim.scenario import standard

    scenario = standard("memory-pressure")
    (pressure,) = scenario.faults
    untracked = dataclasses.replace(scenario, faults=(dataclasses.replace(pressure, latency_tracking=False),))
    tracked_peak = simulate(scenario, preset("bullmq"), seed=0).resident_keys_peak
    untracked_peak = simulate(untracked, preset("bullmq"), seed=0).resident_keys_peak
    per_key = key_bytes("cache:1000", VALUE, True)
    room = len(BULLMQ_REDIS_COMMANDS) * LATENCY_HISTOGRAM_BYTES / per_key
    assert abs(untracked_peak - tracked_peak - room) <= 2, (untracked_peak, tracked_peak, room)
    lease_peak = simulate(scenario, LeasePolicy(30, 10, 5), seed=0).resident_keys_peak
    assert tracked_peak < lease_peak < untracked_peak


def test_memory_pressure_from_toml_and_flags(tmp_path) -> None:
    import subprocess
    import sys

    from emqsim.config import load_config

    path = tmp_path / "m.toml"
    path.write_text(
        '[scenario]\nworkers = 2\njobs = 3\nduration = 20\n[[scenario.faults]]\nkind = "memory_pressure"\n'
        'maxmemory = 1_100_000\npolicy = "volatile-ttl"\ncache_rate = 10.0\ncache_bytes = 500\n'
    )
    scenario, _ = load_config(path)
    (fault,) = scenario.faults
    assert (fault.maxmemory, fault.policy, fault.cache_rate, fault.cache_bytes) == (
        1_100_000,
        "volatile-ttl",
        10.0,
        500,
    )
    path.write_text(
        '[scenario]\n[[scenario.faults]]\nkind = "memory_pressure"\nmaxmemory = 1000000\nat = 3\n'
    )
    with pytest.raises(Exception, match="memory_pressure"):
        load_config(path)
    bad = subprocess.run(
        [sys.executable, "-m", "emqsim", "run", "--scenario", "fast-dead", "--cache-rate", "5"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--maxmemory" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_random_eviction_probability_is_the_stores_draw() -> None:
    """analytic.random_eviction_probability against the store: V keys with a TTL fill the memory, one more
    write evicts one of them uniformly, so a given key survives n evictions with (1 - 1/V)^n."""
    from emqsim.analytic_stalls import random_eviction_probability

    volatile, writes, trials = 30, 20, 200
    evicted = 0
    for trial in range(trials):
        store = _store("volatile-random", maxmemory=volatile * key_bytes("c:0000", VALUE, True), seed=trial)
        for i in range(volatile):
            store.set(f"c:{i:04d}", VALUE, px=10**9)
        store.set("lock", VALUE, px=10**9)  # the lock: the same size as a cache key, so each write evicts one
        for i in range(writes):
            store.perform_evictions()
            store.set(f"n:{i:04d}", VALUE, px=10**9)
        store.perform_evictions()
        evicted += store.execute("EXISTS", "lock") == 0
    # writes + 1 evictions (the last check too), each among the V cache keys and the lock
    p = random_eviction_probability(hold=writes + 1, evictions_per_s=1.0, volatile_keys=volatile + 1)
    half = 3 * np.sqrt(p * (1 - p) / trials)
    assert abs(evicted / trials - p) <= half, (evicted, trials, p)
    assert (
        random_eviction_probability(0.0, 5.0, 10) == 0.0 and random_eviction_probability(1.0, 1.0, 1) == 1.0
    )
