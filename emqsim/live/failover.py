"""A Redis failover on the live run's real redis-servers: a replica that lags, its promotion, clients moving.

`Outage(lost_writes=S)` in live mode (its private server only, `readonly` 0): at the start the parent
starts a second private redis-server, the replica, linked to the primary (`REPLICAOF`) through a
`RedisProxy`. S seconds (scaled) before the outage the link stops forwarding: the replica lags. At the
outage (the workers' connections were just closed by its disconnect, as for any outage): the link is cut
(what the primary sent meanwhile is lost), the replica is promoted (`REPLICAOF NO ONE`), and the two servers'
unix sockets swap paths, so that the run's address now leads to the new primary: the workers reconnect there
at the outage's end (their outage windows are the simulator's), the parent's next command goes there. The
old primary keeps running under the replica's old path until the run ends, out of every client's way; its
key-event watcher is closed and a new one listens to the new primary. What the lag window wrote is gone on
the new primary (a take, a finish, an add, a renewal): the parent counts the settled jobs again from it, and
a job whose add was lost is counted as lost (it never runs), as the simulator does.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis

from emqsim.errors import ConfigError
from emqsim.faults import Outage
from emqsim.keys import QueueKeys
from emqsim.live.proxy import RedisProxy
from emqsim.live.server import PrivateRedis
from emqsim.scenario import Scenario


class FailoverHost(Protocol):
    """What a failover needs of the live run (`emqsim.live.runner.LiveRun`)."""

    server: PrivateRedis | None
    client: redis.Redis | None
    scenario: Scenario
    scale: float
    keys: QueueKeys
    arrived: list[float]
    settled: int
    restart_watcher: Callable[[], object] | None

    def at(self, when: float, action: Callable[..., Any]) -> None: ...


__all__ = ["failovers_of", "check_failover", "Failover"]


def failovers_of(faults: tuple[object, ...]) -> list[Outage]:
    """The scenario's failovers: outages that lose writes."""
    return [f for f in faults if isinstance(f, Outage) and f.lost_writes > 0]


def check_failover(faults: tuple[object, ...], redis_url: str | None) -> None:
    """A failover the live mode can reproduce, or a ConfigError saying why not (before any work)."""
    found = failovers_of(faults)
    if not found:
        return
    if redis_url is not None:
        raise ConfigError(
            "live mode fails over only its own private redis-servers (Outage lost_writes > 0), never the one "
            f"at {redis_url}: leave out the Redis URL, or the failover (emqsim live --without-outages)"
        )
    if any(f.readonly > 0 for f in found):
        raise ConfigError(
            "live mode reproduces a failover whose clients come back to the new primary (readonly 0); "
            "Outage readonly > 0 (clients on the demoted primary, refused with READONLY) is sim-only: drop it "
            "(for a standard scenario: emqsim live --without-outages)"
        )
    if len(found) > 1:
        raise ConfigError("live mode reproduces one failover per run: keep one Outage with lost_writes > 0")
    if any(f.redis_restart for f in faults if isinstance(f, Outage)):
        raise ConfigError("live mode reproduces a failover or a Redis restart in one run, not both")


class Failover:
    """The replica and the steps of one failover (see the module's docstring)."""

    def __init__(self, run: FailoverHost, fault: Outage) -> None:
        self.run = run
        self.fault = fault
        self.replica: PrivateRedis | None = None
        self.link: RedisProxy | None = None
        self.done = False
        self.lost_adds: list[str] = []

    def start(self) -> None:
        """Start the replica and link it to the primary; wait until its link is up."""
        primary = self.run.server
        assert primary is not None
        self.link = RedisProxy(primary.socket_path)
        self.replica = PrivateRedis(
            "--hz", str(self.run.scenario.hz), "--notify-keyspace-events", "ExKe"
        ).start()
        client = self.replica.client()
        try:
            client.execute_command("REPLICAOF", "127.0.0.1", self.link.port)
            deadline = time.time() + 10
            while client.info("replication").get("master_link_status") != "up":
                if time.time() > deadline:
                    raise RuntimeError("the live run's replica did not link to its primary within 10 s")
                time.sleep(0.01)
        finally:
            client.close()

    def schedule(self, t0: float) -> None:
        """The lag and the failover on the run's clock."""
        scale = self.run.scale
        at = t0 + self.fault.at * scale
        self.run.at(at - self.fault.lost_writes * scale, self.lag)
        self.run.at(at, self.fail_over)

    def lag(self) -> None:
        assert self.link is not None
        self.link.hold()

    def fail_over(self) -> None:
        """Cut the link, promote the replica, swap the sockets, move the parent and its watcher."""
        run, replica, link = self.run, self.replica, self.link
        primary = run.server
        assert primary is not None and replica is not None and link is not None and run.client is not None
        link.cut()
        promoted = replica.client()
        try:
            promoted.execute_command("REPLICAOF", "NO", "ONE")
        finally:
            promoted.close()
        a, b = primary.socket_path, replica.socket_path
        spare = a + ".swap"
        os.rename(a, spare)
        os.rename(b, a)
        os.rename(spare, b)
        # the objects follow their sockets: `run.server` is whatever answers at the run's address
        primary.proc, replica.proc = replica.proc, primary.proc
        old = replica  # now the demoted primary, under the replica's old path
        with contextlib.suppress(redis.RedisError):  # its key-event watcher ends on the closed connection
            demoted = old.client()
            demoted.client_kill_filter(_type="pubsub")
            demoted.close()
        run.client.connection_pool.disconnect()  # the parent's next command goes to the new primary
        self.lost_adds = [
            str(job) for job in range(len(run.arrived)) if not run.client.exists(run.keys.job(str(job)))
        ]
        keys = run.keys
        run.settled = int(run.client.scard(keys.completed)) + int(run.client.scard(keys.failed))
        self.done = True
        if run.restart_watcher is not None:
            run.restart_watcher()

    def stop(self) -> None:
        if self.link is not None:
            self.link.close()
        if self.replica is not None:
            self.replica.stop()
