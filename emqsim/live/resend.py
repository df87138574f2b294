"""A resent command that runs twice (`Network(resend_twice=True)`) on the live run's real redis-server.

ioredis resends a command whose reply a connection drop caught; the command had already run at Redis, so it
runs twice. On a unix socket a reply is in flight for ~0.1 ms, too short for a drop to catch (and a worker's
thread wakes up several ms late), so the live worker plays the drop on its own side, as it plays its outages:
for a request sent where the simulator's rule (`emqsim.client.Client.resent_at`, on the worker's own outage
windows and the scenario's fixed round trip) says a drop catches its reply, the worker sends it to the real
Redis (it runs there), discards the reply, waits until the resent copy would reach Redis (the reconnect plus
half a round trip, the simulator's `again`) and sends the same command again (same script, same arguments),
reading the copy's reply. The kinds the simulator resends: a finish (or a holder's fail), a renewal, and, when
the policy takes after a wake-up, a take (moveToActive).

The parent computes each worker's windows here (`catch_windows`) and hands them over in real time with the
worker's outages (`go`); the worker (emqsim/live/worker.py, `LiveWorker.deliver`) only compares its send times.
"""

from __future__ import annotations

from emqsim.client import Client
from emqsim.distributions import Fixed
from emqsim.errors import ConfigError
from emqsim.faults import Network, OutageWindow, Partition
from emqsim.policies import ReclaimPolicy
from emqsim.units import to_ms

__all__ = ["catch_windows", "check_resend", "in_flight_warning", "resent_kinds", "rtt_ms"]

CatchWindow = tuple[int, int, int]  # (from, until) send times in ms whose reply a drop catches, copy sent at


def check_resend(network: Network, faults: tuple[object, ...]) -> None:
    """A `resend_twice` setting the live mode can reproduce, or a ConfigError saying why not (before any work)."""
    if not network.resend_twice:
        return
    if not isinstance(network.rtt, Fixed):
        raise ConfigError(
            "live mode reproduces Network(resend_twice=True) with a fixed round trip only (the reply is in "
            f"flight for half of it), got rtt={network.rtt!r}: give rtt=Fixed(seconds)"
        )
    if any(isinstance(f, Partition) for f in faults):
        raise ConfigError(
            "live mode reproduces Network(resend_twice=True) or a silent partition in one run, not both "
            "(a partition's proxy holds the replies): leave out one of them"
        )


def in_flight_warning(network: Network, time_scale: float) -> str | None:
    """Why this run's resent commands may not be the simulator's, if a reply is in flight (half the round
    trip, scaled) for less than 20 ms real: a worker's send leaves a few ms real late, so a window that narrow
    may catch another request, or none (the standard `resent-finish`'s is 1 ms); else None."""
    if not network.resend_twice:
        return None
    rtt = rtt_ms(network)
    flight = (rtt - rtt // 2) * time_scale
    if flight >= 20:
        return None
    return (
        f"Network(resend_twice): a reply is in flight for {flight:g} ms real (half the {rtt} ms round trip, "
        "scaled), under the workers' scheduling jitter (a few ms): the requests a drop catches live may not "
        "be the simulator's; prefer a larger Fixed rtt or time_scale"
    )


def rtt_ms(network: Network) -> int:
    """The scenario's round trip in whole ms, as the simulator's client takes a fixed one (at least 1)."""
    assert isinstance(network.rtt, Fixed)  # check_resend
    return max(1, to_ms(network.rtt.value))


def resent_kinds(policy: ReclaimPolicy) -> list[str]:
    """The requests the simulator resends: finishes (and fails), renewals, and moveToActive (a take after a
    wake-up; a blocking take parked at Redis is not)."""
    return ["finish", "renew"] + (["take"] if policy.take_after_wakeup else [])


def catch_windows(windows: list[OutageWindow], rtt: int) -> list[CatchWindow]:
    """For a worker with outage `windows` (ms: disconnected, network back, reconnected): every span of send
    times (ms, [from, until)) whose reply a drop catches after the request ran at Redis, with the time its
    resent copy reaches Redis, by the simulator's own rule (`Client.resent_at`, asked for each ms in the
    round trip before each disconnect; a request queued offline is sent at a reconnect, also a ms asked)."""
    spans: list[CatchWindow] = []
    for begin, _, _ in windows:
        for now in range(max(0, begin - rtt - 1), begin + 1):
            after = Client.resent_at(now, rtt, windows)
            if after is None:
                continue
            again = now + after
            if spans and spans[-1][1] == now and spans[-1][2] == again:
                spans[-1] = (spans[-1][0], now + 1, again)
            elif not spans or spans[-1][1] <= now:
                spans.append((now, now + 1, again))
    return spans
