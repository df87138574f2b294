"""Redis 7's `maxmemory` eviction on the simulated key store: a simple memory model and the sampled
approximate LRU / LFU / TTL algorithm with its eviction pool.

Sources (redis/redis at tag 7.0.15): `src/evict.c` (EVPOOL_SIZE 16 at line 54, `estimateObjectIdleTime` at
line 92, `evictionPoolPopulate` at line 146 sampling `maxmemory_samples` keys with `dictGetSomeKeys` at line
150, `LFULogIncr` at line 299, `LFUDecrAndReturn` at line 319, `performEvictions` at line 540, whose pool loop
starts at line 593 and whose random policies pick with `dictGetRandomKey` at line 654); `src/server.h`
(LRU_CLOCK_RESOLUTION 1000 ms at line 849, LFU_INIT_VAL 5 at line 3265); `src/db.c` (lookupKey updates the
LRU time or the LFU counter of a key it finds, line 116); `src/object.c` (a new object's LRU/LFU field, line 52).

What is modelled:

* Memory: `base_bytes` (an empty redis-server 7.0.15 reports used_memory 914,736 bytes) plus, per key,
  `key_bytes`: its dict entry, the key and value as Redis allocates them (jemalloc size classes; compact
  encodings for small hashes, lists and sets: no conversion to hashtables or linked nodes) and a TTL's entry
  in the expires dict. An estimate, not a byte count: tests/test_eviction.py compares the number of keys
  that fit under a real server's maxmemory with the model's.
* Latency histograms: with `latency-tracking yes` (Redis 7's default) a command's first call gives it a
  latency histogram (`src/server.c` `updateCommandLatencyHistogram`, called from `call()`, for a script's
  own commands too), `LATENCY_HISTOGRAM_BYTES` each, kept until CONFIG RESETSTAT. So the memory used grows
  by that much for every command name the server has run: the script call (EVALSHA), each command the
  scripts call, the blocking marker wait (once a push wakes it: one that times out gets none), the cache's
  SET; or, when the clients' own vocabulary is known (`Eviction.client_commands`: BullMQ's 33 names,
  0.81 MB), those from the start. emqsim's own scripts run 14 or 15 names (0.35 to 0.37 MB): memory its keys
  cannot have.
* When: before each command a client sends (a script counts as one command), as `processCommand` calls
  `performEvictions`: while the memory used is above `maxmemory`, evict one key at a time.
* Which: `volatile-*` candidates are the keys with a TTL, `allkeys-*` every key. LRU/LFU/TTL sample
  `samples` distinct keys uniformly (Redis's `dictGetSomeKeys` walks adjacent hash buckets from a random
  one: close to uniform for a well-mixed table), score them (LRU: idle seconds on the 1 s LRU clock, times
  1000; LFU: 255 minus the decayed logarithmic counter; TTL: the sooner the expiry the better), insert them
  into the 16-entry pool kept across calls exactly as `evictionPoolPopulate` does, and evict the best entry
  that still exists (stale entries, "ghosts", are dropped). `*-random` evict a uniformly drawn candidate.
* LRU: a lookup stamps the key with the LRU clock (ms // 1000); so does a new key. LFU: a new key starts at
  LFU_INIT_VAL with its decrement time in minutes; a lookup decays the counter by one per `lfu_decay_time`
  minutes elapsed, then increments it with probability 1 / ((counter - 5) * lfu_log_factor + 1).

Not modelled: `noeviction`'s OOM refusal of writes (and a `volatile-*` policy's when no key with a TTL is
left): the command runs anyway and the store counts it in `oom_commands`; `maxmemory-eviction-tenacity`'s
time limit (evictions finish within the command); replication and AOF buffers (not counted, as in Redis);
clients' buffers (about 20 kB a busy connection). Under emqsim's live mode a real server holds as many keys at
its peak as the model (tests/test_live_memory.py).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from emqsim.store.keystore import KeyStore
from emqsim.store.values import RedisHash, RedisList, RedisSet, Reply

__all__ = [
    "BASE_BYTES",
    "EVPOOL_SIZE",
    "LATENCY_HISTOGRAM_BYTES",
    "LFU_INIT_VAL",
    "POLICIES",
    "EvictingKeyStore",
    "Eviction",
    "key_bytes",
]

EVPOOL_SIZE = 16  # evict.c:54
LRU_CLOCK_RESOLUTION_MS = 1000  # server.h:849
LFU_INIT_VAL = 5  # server.h:3265
BASE_BYTES = 914_736  # used_memory of an empty redis-server 7.0.15 (INFO memory), measured
# hdr_init(1, 1e9, 2): 24,576 bytes of counts and a 112-byte header; a real server's used_memory grows by
# exactly this at a command's first call (tests/test_eviction.py checks it on redis-server)
LATENCY_HISTOGRAM_BYTES = 24_688
DICT_ENTRY = 24  # a dictEntry (key pointer, value pointer, next)
ROBJ = 16  # a redisObject header
BUCKET_SHARE = 12  # a key's share of its dict's bucket array (8 bytes a slot, load between 1/2 and 1)
EMBSTR_LIMIT = 44  # OBJ_ENCODING_EMBSTR_SIZE_LIMIT: shorter strings share one 64-byte allocation with robj

POLICIES = (
    "noeviction",
    "volatile-lru",
    "volatile-lfu",
    "volatile-ttl",
    "volatile-random",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
)


@dataclass(frozen=True)
class Eviction:
    """Redis's memory settings: `maxmemory` bytes (0: no limit), `maxmemory-policy`, `maxmemory-samples`,
    `lfu-log-factor`, `lfu-decay-time` (minutes), the memory an empty server uses (`base_bytes`) and
    `latency-tracking` (each command's latency histogram counts in the memory used). `client_commands`,
    when given, are the command names the clients make Redis run (a client library's, measured): they hold
    their histograms from the start, and the store's own command names are not counted besides (they stand
    for the same scripts); the client-level names `perform_evictions` and `command_done` hear of still are."""

    maxmemory: int
    policy: str = "volatile-lru"
    samples: int = 5
    lfu_log_factor: int = 10
    lfu_decay_time: int = 1
    base_bytes: int = BASE_BYTES
    latency_tracking: bool = True
    client_commands: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"maxmemory policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        for name in ("maxmemory", "samples", "lfu_log_factor", "lfu_decay_time", "base_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
        if not isinstance(self.latency_tracking, bool):
            raise ValueError(f"latency_tracking must be True or False, got {self.latency_tracking!r}")
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1 (Redis's maxmemory-samples), got {self.samples}")


def allocation(n: int) -> int:
    """jemalloc's size class for an allocation of `n` bytes (8, 16, 32, 48, ... 128, then four classes per
    doubling: 160, 192, 224, 256, 320, ...)."""
    if n <= 8:
        return 8
    if n <= 128:
        return -(-n // 16) * 16
    spacing = 1 << ((n - 1).bit_length() - 3)
    return -(-n // spacing) * spacing


def _sds(n: int) -> int:
    """An sds string of `n` bytes: its header (sdshdr8 3 bytes up to 255, sdshdr16 5 above), the bytes, a NUL."""
    return allocation(n + (4 if n < 256 else 6))


def _listpack(lengths: list[int]) -> int:
    """A listpack holding elements of these lengths: a 6-byte header and an end byte; each element a 1 or 2
    byte encoding, its bytes, and a 1 or 2 byte back-length."""
    return allocation(7 + sum(n + (2 if n < 64 else 4) for n in lengths))


def key_bytes(key: str, value: object, has_ttl: bool) -> int:
    """The model's estimate of the memory one key takes: its dict entry and bucket share, the key string,
    the value (an embedded or raw string, a listpack for a hash, a quicklist of one listpack for a list, an
    intset or listpack for a set) and a TTL's entry in the expires dict. `MEMORY USAGE` of a string key
    (which leaves out the bucket share and the TTL) is exact for the strings the queue writes."""
    size = DICT_ENTRY + BUCKET_SHARE + _sds(len(key))
    if has_ttl:
        size += DICT_ENTRY + BUCKET_SHARE
    if type(value) is str:
        n = len(value)
        return size + (64 if n <= EMBSTR_LIMIT else ROBJ + _sds(n))
    size += ROBJ
    if type(value) is RedisHash:
        return size + _listpack([len(x) for pair in value.items() for x in pair])
    if type(value) is RedisList:
        return size + 48 + 32 + _listpack([len(x) for x in value])  # quicklist + its one node
    if type(value) is RedisSet:
        if value.intset:
            return size + allocation(8 + 8 * len(value))
        return size + _listpack([len(x) for x in value])
    return size


class EvictingKeyStore(KeyStore):
    """A `KeyStore` with `maxmemory`: keeps each key's size and LRU/LFU metadata and evicts keys when the
    caller runs `perform_evictions` (before each client command). `evict_rng` draws the samples and the LFU
    increments (a stream of its own, so a store without eviction draws exactly what it always did);
    `on_memory_evict(key, value, now_ms)` hears of each evicted key before it goes."""

    def __init__(
        self,
        clock: Callable[[], int],
        eviction: Eviction,
        *,
        evict_rng: np.random.Generator,
        rng: np.random.Generator | None = None,
        on_evict: Callable[[str, int, str], None] | None = None,
        on_memory_evict: Callable[[str, object, int], None] | None = None,
        active_expire_max_loops: int = 16,
    ) -> None:
        super().__init__(clock, rng=rng, on_evict=on_evict, active_expire_max_loops=active_expire_max_loops)
        self.eviction = eviction
        self._evict_rng = evict_rng
        self.on_memory_evict = on_memory_evict
        self._sizes: dict[str, int] = {}
        self._dataset = 0
        self._all: list[str] = []  # every sized key, for uniform draws under allkeys-*
        self._all_pos: dict[str, int] = {}
        self._lru: dict[str, int] = {}  # key -> LRU clock (s) of its last access (LRU policies)
        self._lfu: dict[str, tuple[int, int]] = {}  # key -> (decrement time in minutes, counter)
        self._touched: dict[str, None] = {}  # keys whose size may have changed since the last sync
        self._pool: list[tuple[int, str]] = []  # (score, key), ascending score, at most EVPOOL_SIZE
        self._uniforms: list[float] = []  # evict_rng's draws, taken in blocks (one numpy call per 1,024)
        self.evicted_keys = 0
        self.oom_commands = 0
        self.out_of_memory = False  # the last check found the memory over the limit and nothing to evict
        self.peak_used = 0
        # the command names (lower case, as Redis names them) that have a latency histogram
        self._histograms: set[str] = {name.lower() for name in eviction.client_commands}
        self._names_seen = 0  # len(command_counts) when `_histograms` last took its names
        self._count_store_names = not eviction.client_commands
        self._histogram_bytes = LATENCY_HISTOGRAM_BYTES if eviction.latency_tracking else 0

    # -- bookkeeping -----------------------------------------------------------------------------------------
    def _lookup(self, key: str) -> object:
        value = super()._lookup(key)
        self._touched[key] = None
        policy = self.eviction.policy
        if policy.endswith("lfu"):
            minutes = self._now // 60_000
            if value is not None and key in self._lfu:
                self._lfu[key] = (minutes, self._lfu_incr(self._lfu_decayed(key, minutes)))
            else:
                self._lfu[key] = (minutes, LFU_INIT_VAL)
        else:
            self._lru[key] = self._now // LRU_CLOCK_RESOLUTION_MS
        return value

    def _delete(self, key: str) -> None:
        super()._delete(key)
        self._touched[key] = None

    def _set_expire(self, key: str, when: int) -> None:
        super()._set_expire(key, when)
        self._touched[key] = None

    def _remove_expire(self, key: str) -> bool:
        self._touched[key] = None
        return super()._remove_expire(key)

    def _flushall(self, argv: list[str]) -> Reply:
        self._touched.update(dict.fromkeys(self._sizes))
        return super()._flushall(argv)

    def _sync(self) -> None:
        """Bring the sizes, the key index and the metadata up to date with the keys touched since."""
        data, sizes, expires = self._data, self._sizes, self._expires
        for key in self._touched:
            old = sizes.get(key)
            value = data.get(key)
            if value is None:
                if old is not None:
                    del sizes[key]
                    self._dataset -= old
                    i = self._all_pos.pop(key)
                    last = self._all.pop()
                    if last != key:
                        self._all[i] = last
                        self._all_pos[last] = i
                self._lru.pop(key, None)
                self._lfu.pop(key, None)
                continue
            new = key_bytes(key, value, key in expires)
            if old is None:
                self._all_pos[key] = len(self._all)
                self._all.append(key)
                old = 0
            sizes[key] = new
            self._dataset += new - old
        self._touched.clear()

    def command_done(self, name: str) -> None:
        """A client's command `name` has run (EVALSHA, BZPOPMIN): from now on it has its latency histogram.
        The commands the store runs itself (a script's, SET) are known from `command_counts`."""
        self._histograms.add(name.lower())

    def histogram_bytes(self) -> int:
        """The memory of the latency histograms: one for every command name run so far (none without
        latency tracking)."""
        counts = self.command_counts
        if self._count_store_names and len(counts) != self._names_seen:
            self._histograms.update(name.lower() for name in counts)
            self._names_seen = len(counts)
        return len(self._histograms) * self._histogram_bytes

    def used_memory(self) -> int:
        """The model's used_memory: `base_bytes`, the latency histograms and every resident key's
        `key_bytes`."""
        self._sync()
        return self.eviction.base_bytes + self.histogram_bytes() + self._dataset

    def _uniform(self) -> float:
        """The next uniform draw in [0, 1) from `evict_rng`."""
        if not self._uniforms:
            self._uniforms = self._evict_rng.random(1024).tolist()
            self._uniforms.reverse()
        return self._uniforms.pop()

    # -- LFU (evict.c:299, 319) ------------------------------------------------------------------------------
    def _lfu_decayed(self, key: str, minutes: int) -> int:
        ldt, counter = self._lfu.get(key, (minutes, LFU_INIT_VAL))
        periods = (minutes - ldt) // self.eviction.lfu_decay_time if self.eviction.lfu_decay_time else 0
        return 0 if periods > counter else counter - periods

    def _lfu_incr(self, counter: int) -> int:
        if counter == 255:
            return 255
        base = max(0, counter - LFU_INIT_VAL)
        if self._uniform() < 1.0 / (base * self.eviction.lfu_log_factor + 1):
            counter += 1
        return counter

    # -- eviction (evict.c:146, 540) -------------------------------------------------------------------------
    def perform_evictions(self, command: str | None = None) -> int:
        """Evict keys until the memory used is at most `maxmemory`; returns how many went. Called before
        each client command; `command`, if given, is that command's name: it runs now, so it has its
        latency histogram from the next check on."""
        try:
            return self._evict()
        finally:
            if command is not None:
                self._histograms.add(command.lower())

    def _evict(self) -> int:
        config = self.eviction
        self.out_of_memory = False
        if config.maxmemory == 0:
            return 0
        used = self.used_memory()
        self.peak_used = max(self.peak_used, used)
        if used <= config.maxmemory:
            return 0
        if config.policy == "noeviction":
            self.oom_commands += 1
            self.out_of_memory = True
            return 0
        self._now = self._clock()
        evicted = 0
        fixed = self.eviction.base_bytes + self.histogram_bytes()
        while fixed + self._dataset > config.maxmemory:
            key = self._pick()
            if key is None:
                self.oom_commands += 1
                self.out_of_memory = True
                break
            if self.on_memory_evict is not None:
                self.on_memory_evict(key, self._data[key], self._now)
            self._delete(key)  # (through any failover journal: a replica gets the eviction's DEL late)
            self._sync()
            evicted += 1
        self.evicted_keys += evicted
        return evicted

    def _candidates(self) -> list[str]:
        return self._all if self.eviction.policy.startswith("allkeys") else self._ttl_keys

    def _pick(self) -> str | None:
        candidates = self._candidates()
        if self.eviction.policy.endswith("random"):
            if not candidates:
                return None
            return candidates[int(self._uniform() * len(candidates))]
        volatile = not self.eviction.policy.startswith("allkeys")
        pool = self._pool
        while True:
            if not candidates:
                return None
            self._populate(candidates)
            while pool:
                _, key = pool.pop()
                if key in (self._expires if volatile else self._data):
                    return key  # else a ghost: try the next best

    def _populate(self, candidates: list[str]) -> None:
        n = len(candidates)
        count = min(self.eviction.samples, n)
        if count == n:
            picks: list[int] = list(range(n))
        else:  # `count` distinct indices, uniformly (redrawing repeats: cheap for count << n)
            picks = []
            while len(picks) < count:
                i = int(self._uniform() * n)
                if i not in picks:
                    picks.append(i)
        pool = self._pool
        for i in picks:
            key = candidates[i]
            score = self._score(key)
            k = bisect_left(pool, (score, ""))  # the first entry whose score is not below ours
            if k == 0 and len(pool) == EVPOOL_SIZE:
                continue  # worse than every entry of a full pool
            if len(pool) < EVPOOL_SIZE:
                pool.insert(k, (score, key))
            else:  # full: drop the worst (leftmost) entry, insert just left of k
                del pool[0]
                pool.insert(k - 1, (score, key))

    def _score(self, key: str) -> int:
        policy = self.eviction.policy
        if policy.endswith("lru"):
            clock = self._now // LRU_CLOCK_RESOLUTION_MS
            return (clock - self._lru.get(key, clock)) * LRU_CLOCK_RESOLUTION_MS
        if policy.endswith("lfu"):
            return 255 - self._lfu_decayed(key, self._now // 60_000)
        return -self._expires[key]  # volatile-ttl: the sooner the expiry the better
