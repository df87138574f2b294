"""A Redis failover on the live run's real redis-servers: a replica that lags, its promotion, clients moving.

`Outage(lost_writes=S)` in live mode (its private server only): at the start the parent
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

`readonly=R` > 0: the workers reach Redis through a `RedisProxy` (`front`, TCP on loopback) that leads to the
primary. At the failover it is pointed at the demoted primary, which is made a real replica of the promoted
one (`REPLICAOF`, through a second proxy): the workers reconnect there at the outage's end and every write of
theirs gets Redis's own `READONLY` error (a take gets no job and is sent again, a renewal fails and is tried
again, a finish is given up, a sweep fails). R s after the network's return (the simulator's window) the proxy
closes their connections and leads to the run's address, the new primary, where they reconnect at once. The
parent and the producer move to the new primary at the failover, as in the simulator.
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
    url: str

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
        # `readonly` > 0: the workers reach Redis through `front`, which leads to the primary, after the
        # failover to the demoted one (a replica of the promoted, through `demote_link`: it refuses every
        # write with READONLY), and `readonly` s after the network's return to the new primary.
        self.front: RedisProxy | None = None
        self.demote_link: RedisProxy | None = None

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
        if self.fault.readonly > 0:
            self.front = RedisProxy(primary.socket_path)
            self.run.url = f"redis://127.0.0.1:{self.front.port}/0"

    def schedule(self, t0: float) -> None:
        """The lag, the failover and (`readonly`) the clients' move to the new primary on the run's clock."""
        scale = self.run.scale
        fault = self.fault
        at = t0 + fault.at * scale
        self.run.at(at - fault.lost_writes * scale, self.lag)
        self.run.at(at, self.fail_over)
        switch = self.switch_at(t0)
        if switch is not None:
            self.run.at(switch, self.switch)

    def switch_at(self, t0: float) -> float | None:
        """When the workers move off the demoted primary (real time), if they do within the horizon: `readonly`
        s after the network's return, as the simulator's READONLY window (`math.inf`: never)."""
        end = self.fault.at + self.fault.duration + self.fault.readonly
        if self.front is None or not end < self.run.scenario.horizon:
            return None
        return t0 + end * self.run.scale

    def switches(self, t0: float) -> list[tuple[float, float]]:
        """The real (from, until) in which a worker reopens a closed connection at once: from the failover
        (the demotion closes connections) to 2 s after the move to the new primary (which closes them all)."""
        if self.front is None:
            return []
        switch = self.switch_at(t0)
        until = t0 + self.run.scenario.horizon * self.run.scale if switch is None else switch + 2.0
        return [(t0 + self.fault.at * self.run.scale, until)]

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
        if self.front is not None:  # the workers come back to the demoted primary, now a replica
            self.demote_link = RedisProxy(a)
            demoted = old.client()
            try:
                demoted.execute_command("REPLICAOF", "127.0.0.1", self.demote_link.port)
            finally:
                demoted.close()
            self.front.point(b)
        self.lost_adds = [
            str(job) for job in range(len(run.arrived)) if not run.client.exists(run.keys.job(str(job)))
        ]
        keys = run.keys
        run.settled = int(run.client.scard(keys.completed)) + int(run.client.scard(keys.failed))
        self.done = True
        if run.restart_watcher is not None:
            run.restart_watcher()

    def switch(self) -> None:
        """The workers move to the new primary (a Sentinel's switch, a killed connection): their connections
        to the demoted primary close, and their reconnects reach the run's address, the new primary."""
        front, primary = self.front, self.run.server
        assert front is not None and primary is not None
        front.cut()
        front.point(primary.socket_path)

    def stop(self) -> None:
        for proxy in (self.front, self.demote_link):
            if proxy is not None:
                proxy.close()
        if self.link is not None:
            self.link.close()
        if self.replica is not None:
            self.replica.stop()
