"""A silent partition on the live run's real connections: a proxy that stops forwarding without closing.

`Partition(at, duration, worker)` in live mode (its private server only): every worker it can hit (`worker`,
or every worker) reaches Redis through its own `RedisProxy` (TCP on loopback, its `go` line names the
proxy's address). At `at` the proxy holds: it forwards nothing either way and closes nothing, so the
worker's client sees no close, its requests (a renewal, a finish, a take) wait for their replies and
nothing is resent, as ioredis behaves without a command timeout. When the connection carries traffic again
(the simulator's `Partition.reconnect_after_ms`: the first TCP retransmission after the end) the proxy
releases what it held, in order. If TCP gives up first (`give_up` before that), the proxy closes the
connections then (a FIN, as the kernel's reset) and refuses new ones until the traffic is back; from the
give-up the worker holds its requests itself and resends the unanswered ones at the reconnect, as after an
`Outage`. The windows are the simulator's (`emqsim.faults.outage_windows`), so the records (`disconnect`,
`network_up`, `reconnect`, a worker `disconnected` meanwhile) are the same. A request held longer than a
worker's socket timeout (5 s real) ends the run: keep partitions short in real time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emqsim.errors import ConfigError
from emqsim.faults import Outage, OutageWindow, Partition
from emqsim.live.proxy import RedisProxy
from emqsim.units import to_ms

__all__ = ["Partitions", "check_partitions"]


def check_partitions(faults: tuple[object, ...], redis_url: str | None) -> None:
    """Partitions the live mode can reproduce, or a ConfigError saying why not (before any work)."""
    if not any(isinstance(f, Partition) for f in faults):
        return
    if redis_url is not None:
        raise ConfigError(
            "live mode partitions only the connections to its own private redis-server (Partition), never "
            f"to the one at {redis_url}: leave out the Redis URL, or the partition"
        )
    if any(isinstance(f, Outage) and f.lost_writes > 0 for f in faults):
        raise ConfigError("live mode reproduces a silent partition or a failover in one run, not both")


class Partitions:
    """The run's partition proxies, one per worker a partition can hit, created when the worker starts."""

    def __init__(self, faults: tuple[object, ...]) -> None:
        self.faults = [f for f in faults if isinstance(f, Partition)]
        self.proxies: dict[int, RedisProxy] = {}

    def hits(self, wid: int) -> list[Partition]:
        return [f for f in self.faults if f.worker is None or f.worker == wid]

    def url_for(self, wid: int, upstream: str) -> str | None:
        """The address worker `wid` connects to: its proxy's, if a partition can hit it (else None)."""
        if wid < 0 or not self.hits(wid):
            return None
        if wid not in self.proxies:
            self.proxies[wid] = RedisProxy(upstream)
        return f"redis://127.0.0.1:{self.proxies[wid].port}/0"

    def plan(
        self, wid: int, window: OutageWindow, real: Callable[[float], float], at: Callable[..., Any]
    ) -> OutageWindow | None:
        """If `window` (scenario ms: disconnected, network up, reconnected) is one of worker `wid`'s partitions,
        schedule its proxy's hold, give-up and release with `at(real time, action)` and return the part of it
        the worker holds its requests itself (from the give-up on; None if TCP never gave up); return
        `window` itself if it is not a partition's."""
        begin, _, back = window
        proxy = self.proxies.get(wid)
        match = next(
            (f for f in self.hits(wid) if to_ms(f.at) == begin and begin + f.reconnect_after_ms() == back),
            None,
        )
        if match is None or proxy is None:
            return window
        upstream = proxy.upstream
        at(real(begin), proxy.hold)
        give_up = begin + to_ms(match.give_up)
        if give_up < back:
            at(real(give_up), proxy.cut)

            def back_up() -> None:  # the network is back: new connections reach Redis again
                proxy.point(upstream or "")
                proxy.release()

            at(real(back), back_up)
            return (give_up, max(give_up, window[1]), back)
        at(real(back), proxy.release)
        return None

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        self.proxies.clear()
