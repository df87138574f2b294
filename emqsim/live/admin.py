"""The live run's Redis administration: open (or start) the server, count the protocol's commands, watch lock
evictions, restart a private server, drop a worker's connections, and say why Redis failed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Protocol

import redis

from emqsim.faults import (
    OutageWindow,
    overlaps_restart,
)
from emqsim.keys import QueueKeys
from emqsim.live.records import Proc
from emqsim.live.scripts import LuaQueue
from emqsim.live.server import (
    SOCKET_TIMEOUT,
    PrivateRedis,
    check_no_foreign_keys,
    connect,
    no_retry,
)
from emqsim.live.worker import connection_name
from emqsim.scenario import Scenario

# Commands the parent itself sends during a run; not counted as protocol work in `redis_commands`.
_ADMIN_COMMANDS = {
    "evalsha", "eval", "script", "info", "ping", "dbsize", "client", "hello", "select", "command",
    "config", "scan", "subscribe", "psubscribe", "unsubscribe", "punsubscribe",
}  # fmt: skip


class AdminHost(Protocol):
    """What the Redis side uses of the live run (`LiveRun` is one)."""

    scenario: Scenario
    keys: QueueKeys
    prefix: str
    scale: float
    t0: float
    redis_url: str | None
    allow_foreign_keys: bool
    record_locks: bool
    restarts: list[OutageWindow]
    url: str
    shas: dict[str, str]
    foreign: int
    queue: LuaQueue
    server: PrivateRedis | None
    client: redis.Redis | None
    redis_down: bool
    after_restart: list[Callable[[], None]]
    restart_watcher: Callable[[], object] | None
    commands_before: int
    commands_before_restarts: int
    connections_dropped: int
    evictions: list[tuple[float, str]]
    memory_evictions: list[tuple[float, str]]

    def real_window(self, window: OutageWindow) -> tuple[float, float, float]: ...
    def command_total(self) -> int: ...
    def watch_evictions(self, stop: threading.Event) -> threading.Thread | None: ...


class RedisAdmin:
    """The Redis side of `LiveRun` (a mixin)."""

    # what its methods set (the run's __init__ sets them first)
    server: PrivateRedis | None
    client: redis.Redis | None
    url: str
    foreign: int
    shas: dict[str, str]
    queue: LuaQueue
    redis_down: bool
    after_restart: list[Callable[[], None]]
    restart_watcher: Callable[[], object] | None
    commands_before: int
    commands_before_restarts: int
    connections_dropped: int

    def drop_connections(self: AdminHost, proc: Proc, wid: int) -> None:
        """The disconnect of one worker's outage: Redis closes that worker's connections (`CLIENT KILL`)."""
        if proc.state == "dead" or self.client is None or self.redis_down:
            return
        name = connection_name(wid)
        for conn in self.client.client_list():
            if conn.get("name") == name:
                with contextlib.suppress(redis.ResponseError):  # closed meanwhile
                    self.client.client_kill_filter(_id=conn["id"])
                self.connections_dropped += 1

    def real_window(self: AdminHost, window: OutageWindow) -> tuple[float, float, float]:
        """An outage window in scenario ms -> real times."""
        begin, up, back = (self.t0 + ms / 1000 * self.scale for ms in window)
        return begin, up, back

    def redis_down_within(self: AdminHost, begin: float, back: float) -> bool:
        """Whether Redis itself restarts inside this real window (the worker then holds its parked take too)."""
        return overlaps_restart((begin, begin, back), map(self.real_window, self.restarts))

    def producer_back(self: AdminHost, planned: float) -> float | None:
        """The real time an add planned at `planned` reaches Redis if Redis is restarting then (the
        producer's reconnect), else None."""
        for begin, _, back in map(self.real_window, self.restarts):
            if begin <= planned < back:
                return back
        return None

    def redis_stop(self: AdminHost) -> None:
        """A Redis restart begins: count the commands so far, then SHUTDOWN SAVE the private server."""
        assert self.server is not None and self.client is not None
        self.commands_before_restarts += self.command_total() - self.commands_before
        self.client.close()
        self.redis_down = True
        self.server.shut_down()

    def redis_start(self: AdminHost) -> None:
        """Redis is back on its saved data; the parent reconnects and runs what waited for it."""
        assert self.server is not None
        self.server.start_again()
        self.client = self.server.client()
        self.queue = LuaQueue(self.client, self.keys)  # loads the scripts again: a new server has none
        self.commands_before = self.command_total()
        self.redis_down = False
        waiting, self.after_restart = self.after_restart, []
        for action in waiting:
            action()
        if self.restart_watcher is not None:
            self.restart_watcher()

    # -- Redis ---------------------------------------------------------------------------------------------
    def open_redis(self: AdminHost) -> None:
        if self.redis_url is None:
            self.server = PrivateRedis(
                "--hz", str(self.scenario.hz), "--notify-keyspace-events", "ExKe"
            ).start()
            self.url = self.server.url
            self.client = self.server.client()
            self.foreign = 0
        else:
            self.url = self.redis_url
            self.client = connect(self.redis_url)
            if not self.allow_foreign_keys:
                check_no_foreign_keys(self.client, self.prefix, self.redis_url)
            self.foreign = int(self.client.dbsize())
        self.shas = LuaQueue(self.client, self.keys).shas

    def watch_evictions(self: AdminHost, stop: threading.Event) -> threading.Thread | None:
        """On a private server, record when Redis actually removes an expired lock (keyspace events). A key
        whose time passes while a restart has Redis down is left out when Redis loads its data: no event."""
        if self.server is None or not self.record_locks:
            return None
        self.restart_watcher = lambda: self.watch_evictions(stop)
        pubsub = self.server.client().pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe("__keyevent@0__:expired")
        # maxmemory evictions of the queue's own keys only (keyspace form): a subscription to every evicted
        # key would fill this client's output buffer, which counts as used memory, and feed the eviction
        pubsub.psubscribe(f"__keyspace@0__:{self.prefix}*")

        def listen() -> None:
            try:
                while not stop.is_set():
                    msg = pubsub.get_message(timeout=0.05)
                    if msg is None:
                        continue
                    if msg["type"] == "message":  # __keyevent@0__:expired: the key is the data
                        self.evictions.append((time.time(), msg["data"]))
                    elif msg["data"] == "evicted":  # a queue key's keyspace event: the key is in the channel
                        self.memory_evictions.append((time.time(), msg["channel"].split(":", 1)[1]))
            except redis.RedisError:
                pass
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        return thread

    def redis_failure(self: AdminHost) -> str | None:
        """After an error: a one-line account if Redis itself failed (died, or stopped answering), else None."""
        where = "the private redis-server" if self.server is not None else f"Redis at {self.redis_url}"
        if self.server is not None and self.server.proc is not None:
            code = self.server.proc.poll()
            if code is not None:
                how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
                return f"{where} died during the live run ({how}); the run was stopped and cleaned up"
        url = getattr(self, "url", None)
        if url is None:
            return None
        probe = None
        try:
            probe = (
                self.server.client(socket_timeout=2.0)
                if self.server is not None
                else redis.Redis.from_url(
                    url, socket_timeout=2.0, socket_connect_timeout=2.0, retry=no_retry()
                )
            )
            probe.ping()
        except redis.TimeoutError:
            return (
                f"{where} stopped answering during the live run (no reply within {SOCKET_TIMEOUT:g} s: "
                "paused, hung or overloaded); the run was stopped and cleaned up"
            )
        except (redis.ConnectionError, OSError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            return f"{where} went away during the live run ({first}); the run was stopped and cleaned up"
        finally:
            if probe is not None:
                with contextlib.suppress(Exception):
                    probe.close()
        return None

    def command_total(self: AdminHost) -> int:
        assert self.client is not None
        stats = self.client.info("commandstats")
        return sum(
            int(v["calls"])
            for k, v in stats.items()
            if k.removeprefix("cmdstat_").split("|")[0] not in _ADMIN_COMMANDS
        )
