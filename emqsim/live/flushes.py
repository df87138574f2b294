"""ioredis's `maxRetriesPerRequest` (`Network.max_retries_per_request`) on the live run's real redis-server.

During an outage ioredis rejects every command still waiting at some of its reconnect attempts (its queue
flushes, `emqsim.faults.max_retries_flush_ms`). A live worker plays its outages on its own side (it holds a
request sent inside a window until the reconnect, emqsim/live/worker.py), so it plays the flushes there too:
the parent asks the simulator's own rule (`emqsim.client.Client.flush_time`, with `Client.route_at` for where
the request is when the flush comes) which send times a flush catches, at what time, and whether the request
had already reached Redis and run (its reply was what the drop caught: `REJECTED_RAN`), and hands the spans
over in real time in the worker's `go` line. The worker (`Rejecting`, emqsim/live/rejects.py) only compares
its send times: a request of a kind the simulator rejects, sent in a span, is rejected at the span's flush.
"""

from __future__ import annotations

from emqsim.client import MAX_RETRIES_ERROR, Client
from emqsim.distributions import Fixed
from emqsim.faults import Network, OutageWindow
from emqsim.policies import ReclaimPolicy
from emqsim.units import to_ms

__all__ = ["flush_spans", "max_retries_error", "rejected_kinds", "round_trip_ms"]

FlushSpan = tuple[int, int, int, bool]  # (from, until) send times in ms, rejected at, had run at Redis


def rejected_kinds(policy: ReclaimPolicy) -> list[str]:
    """The requests the simulator lets a flush reject: finishes (and a holder's fails), renewals, and
    moveToActive (a take after a wake-up); never a stalled check, nor a blocking take parked at Redis
    (BullMQ forces null on its blocking client)."""
    return ["finish", "renew"] + (["take"] if policy.take_after_wakeup else [])


def max_retries_error(network: Network) -> str:
    """ioredis's MaxRetriesPerRequestError text for this network's `maxRetriesPerRequest` (the simulator's)."""
    return MAX_RETRIES_ERROR.format(n=network.max_retries_per_request)


def round_trip_ms(network: Network) -> int:
    """The round trip the spans are computed with, in whole ms (at least 1): the scenario's, if fixed, else
    its mean (it only decides whether a request sent in the last ms before a drop had reached Redis)."""
    rtt = network.rtt.value if isinstance(network.rtt, Fixed) else network.rtt.mean()
    return max(1, to_ms(rtt))


def flush_spans(windows: list[OutageWindow], n: int, rtt: int, until_ms: int) -> list[FlushSpan]:
    """For a worker with outage `windows` (ms: disconnected, network back, reconnected) and
    `maxRetriesPerRequest` = n: every span of send times (ms, [from, until), up to `until_ms`) that a flush
    rejects, with the flush's time and whether the request had run at Redis first, by the simulator's own
    rule (`Client.flush_time` for a request sent at a ms, read when `Client.route_at` says). The answer is
    constant over runs of ms, so each run is found by galloping and bisection, not ms by ms (a window that
    never recovers runs to the end of the run)."""

    def fate(now: int) -> tuple[int, bool] | None:
        out_ms, back_ms = Client.route_at(now, rtt, windows)
        flush = Client.flush_time(n, now, now + out_ms + back_ms, windows)
        return None if flush is None else (flush, now + out_ms < flush)

    spans: list[FlushSpan] = []
    for begin, _, back in windows:
        now = max(0, begin - rtt - 1, spans[-1][1] if spans else 0)
        end = min(back, until_ms)
        while now < end:
            got = fate(now)
            step, last = 1, now  # `last` has the same fate as `now`; find the first ms that does not
            while last + step < end and fate(last + step) == got:
                last += step
                step *= 2
            high = min(last + step, end)  # the first different fate lies in (last, high]
            while high - last > 1:
                mid = (last + high) // 2
                if fate(mid) == got:
                    last = mid
                else:
                    high = mid
            if got is not None:
                spans.append((now, last + 1, got[0], got[1]))
            now = last + 1
    return spans
