"""A simulated client of Redis: its round trips, its connection's outages and its stalled-check timer; the
Reaper is one, and every Worker (emqsim/worker.py) is one too.

States: alive, frozen (stop-the-world: nothing advances, timers that came due fire on resume), blocked (a
blocked event loop: no timer fires and no reply is read until the loop frees), dead (never acts again; its
connection is closed). Requests already on the wire when a client freezes or dies still reach Redis: the
network does not know the sender stopped.

A client's connection can be down (`Outage`): its requests wait and are resent when it reconnects (ioredis's
offline queue), so a round trip that meets an outage ends after the reconnect (`Client.route`). With
`Network.max_retries_per_request` a request still waiting at one of ioredis's queue flushes is rejected there
instead (`Client.flush_at`, `Rejected`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Protocol

import numpy as np
import simpy

from emqsim._simpy_fast import URGENT, Tick
from emqsim.distributions import Fixed
from emqsim.faults import max_retries_flush_ms
from emqsim.ledger import Ledger
from emqsim.policies import ReclaimPolicy
from emqsim.scenario import Scenario
from emqsim.server import LOST, Server
from emqsim.units import to_ms

ALIVE, FROZEN, BLOCKED, DEAD = "alive", "frozen", "blocked", "dead"
RTT_BLOCK = 256  # round trips drawn at once (a fixed block size keeps the draws reproducible)
Proc = Generator[simpy.Event, Any, Any]
MAX_RETRIES_ERROR = (
    'Reached the max retries per request limit (which is {n}). Refer to "maxRetriesPerRequest" option for '
    "details."
)  # ioredis's MaxRetriesPerRequestError (built/errors/MaxRetriesPerRequestError.js)


class Rejected:
    """The reply of a request ioredis rejected with MaxRetriesPerRequestError at a queue flush during an
    outage (`Network.max_retries_per_request`). `ran`: the command had reached Redis and run before the
    connection dropped its reply (it was in ioredis's sent-command queue)."""

    __slots__ = ("ran",)

    def __init__(self, ran: bool) -> None:
        self.ran = ran


REJECTED, REJECTED_RAN = Rejected(False), Rejected(True)
# Private switch for tests: False runs every timer as the plain SimPy process it stands for, every stalled
# check of a worker one by one, and every reap of the timeout reaper (same results).
_ELISION = True


class ClientHost(Protocol):
    """What a client needs from the run around it: the clock, the scenario (its network), the policy, the
    server and the ledger (a worker's host tells it more: `emqsim.worker.WorkerHost`)."""

    env: simpy.Environment
    scenario: Scenario
    policy: ReclaimPolicy
    server: Server
    ledger: Ledger


class Client:
    """Something that talks to Redis over the simulated network (a worker or the reaper)."""

    wid: int
    state: str = ALIVE
    resume_event: simpy.Event | None = None
    on_state: Callable[[], None] | None = None  # see state_changed

    def __init__(self, sim: ClientHost, net_rng: np.random.Generator, loss_rng: np.random.Generator) -> None:
        self.sim = sim
        self.env = sim.env
        self.net_rng = net_rng
        self.loss_rng = loss_rng
        network = sim.scenario.network
        self._rtt = network.rtt
        self._fixed_rtt_ms = max(1, to_ms(network.rtt.value)) if isinstance(network.rtt, Fixed) else None
        self._rtt_block: list[int] = []
        self._loss = network.loss
        self._loss_all = network.loss_on == "all"
        self._timeout_ms = to_ms(network.command_timeout)
        self._resend_twice = network.resend_twice
        self._max_retries = network.max_retries_per_request
        # Connection outages, in time order: (disconnected at, network back at, reconnected at), in ms.
        self.outages: list[tuple[int, int, int]] = []

    @property
    def connected(self) -> bool:
        """Not dead: a crashed client's connection is closed (a frozen or blocked one's stays open)."""
        return self.state != DEAD

    def _rtt_ms(self) -> int:
        """This request's round trip in whole ms (at least 1), drawn in blocks from the client's own stream."""
        if self._fixed_rtt_ms is not None:
            return self._fixed_rtt_ms
        if not self._rtt_block:
            draws = self._rtt.sample(self.net_rng, RTT_BLOCK)  # seconds >= 0; to_ms, vectorised
            self._rtt_block = np.maximum(1, np.floor(draws[::-1] * 1000 + 0.5)).astype(np.int64).tolist()
        return self._rtt_block.pop()

    def _lost(self, kind: str) -> bool:
        if self._loss <= 0 or not (self._loss_all or kind == "renew"):
            return False
        return bool(self.loss_rng.random() < self._loss)

    def carry_on(self) -> Proc:
        """Wait out a freeze or a blocked event loop, if any: True if the client may go on, False if it
        died. Every process of a client calls it after each wait (`if not (yield from self.carry_on())`)."""
        while self.state == FROZEN or self.state == BLOCKED:
            assert self.resume_event is not None  # set by freeze() and block()
            yield self.resume_event
        return self.state != DEAD

    # -- connection outages ------------------------------------------------------------------------------
    def disconnected_at(self, now: int) -> bool:
        """Whether the client's connection is down at `now` (between a disconnect and the reconnect)."""
        return any(start <= now < back for start, _, back in self.outages)

    def route(self, rtt_ms: int) -> tuple[int, int]:
        """(ms until the request reaches Redis, ms from then until the reply is read), sent now, given the
        outages: a request sent while disconnected waits in the offline queue until the reconnect; one the
        connection drops on the way is resent at the reconnect; a reply the connection drops on the way is
        read one round trip after the reconnect (the resent command's reply; the command runs once here)."""
        now = int(self.env.now)
        outages = self.outages
        while outages and outages[0][2] <= now:
            outages.pop(0)
        return self.route_at(now, rtt_ms, outages)

    def resent_after(self, rtt_ms: int) -> int | None:
        """With `Network.resend_twice`: ms from now until the resent copy of a request sent now reaches Redis,
        if a drop catches its reply after the request ran at Redis (ioredis resends it at the reconnect);
        None if its reply is not caught. Call right after `route`, with the same round trip."""
        return self.resent_at(int(self.env.now), rtt_ms, self.outages)

    @staticmethod
    def resent_at(now: int, rtt_ms: int, outages: list[tuple[int, int, int]]) -> int | None:
        """`resent_after` for a request sent at `now` past `outages` (the live mode asks it which of its
        requests a drop catches); changes nothing."""
        out_ms = rtt_ms // 2
        sent = now
        for start, _, back in outages:
            if start <= sent < back or sent < start <= sent + out_ms:
                sent = back
        arrive = sent + out_ms
        read = arrive + rtt_ms - out_ms
        for start, _, back in outages:
            if arrive < start <= read or start <= arrive < back:
                return back + out_ms - now
        return None

    def reply_delay(self, now: int, back_ms: int) -> int:
        """ms until a reply Redis sends at `now` is read (a parked take's reply; see `route`)."""
        read = now + back_ms
        for start, _, back in self.outages:
            if now < start <= read or start <= now < back:
                read = max(read, back + 2 * back_ms)
        return read - now

    def flush_at(self, now: int, read_at: int) -> int | None:
        """With `Network.max_retries_per_request`: the time of the first of ioredis's queue flushes
        (`faults.max_retries_flush_ms`, counted from each outage's disconnect; only those before its
        reconnect happen) that catches a request sent at `now` whose reply would be read at `read_at`
        (after `now`, before `read_at`), or None if none does."""
        n = self._max_retries
        if n is None:
            return None
        return self.flush_time(n, now, read_at, self.outages)

    @staticmethod
    def flush_time(n: int, now: int, read_at: int, outages: list[tuple[int, int, int]]) -> int | None:
        """`flush_at` for a client with `maxRetriesPerRequest` = n past `outages` (the live mode asks it which
        of its requests a flush rejects); changes nothing."""
        for begin, _, back in outages:
            if begin >= read_at:
                break
            if back <= now:
                continue
            flush = begin + max_retries_flush_ms(n, now - begin)
            if flush < back:
                return flush if flush < read_at else None
        return None

    def rejected(
        self, kind: str, op: Callable[..., Any], now: int, out_ms: int, back_ms: int, flush: int
    ) -> Proc:
        """A request that ioredis rejects at the queue flush at `flush` (`flush_at`): it runs at Redis only if
        it got there before the drop (its reply is what the drop caught); the client learns at `flush`.
        Returns `REJECTED` or `REJECTED_RAN`, or None if the client died meanwhile."""
        server = self.sim.server
        ran = now + out_ms < flush
        if ran:
            server.send_split(kind, op, out_ms, back_ms)  # its reply never comes: rejected instead
        else:
            server.requests[kind] = server.requests.get(kind, 0) + 1
        yield self.env.timeout(flush - now)
        if not (yield from self.carry_on()):
            return None
        return REJECTED_RAN if ran else REJECTED

    def request(self, kind: str, op: Callable[..., Any], retry: bool = True) -> Proc:
        """One round trip; returns the reply, or LOST (renewals are not retried), or a `Rejected` (a flush of
        ioredis's queues during an outage, `Network.max_retries_per_request`; never a stalled check), or
        None if the client died."""
        while True:
            lost = self._lost(kind)
            if self.outages and not lost:
                rtt_ms = self._rtt_ms()
                out_ms, back_ms = self.route(rtt_ms)
                if self._max_retries is not None and kind != "sweep":
                    now = int(self.env.now)
                    flush = self.flush_at(now, now + out_ms + back_ms)
                    if flush is not None:
                        return (yield from self.rejected(kind, op, now, out_ms, back_ms, flush))
                again = self.resent_after(rtt_ms) if self._resend_twice else None
                if again is None:
                    reply = self.sim.server.send_split(kind, op, out_ms, back_ms)
                else:  # it runs, its reply dies with the connection, and the resent copy runs again
                    self.sim.server.send_split(kind, op, out_ms, back_ms)
                    reply = self.sim.server.send_split(
                        kind, self.sim.server.resent(op), again, rtt_ms - rtt_ms // 2
                    )
            else:
                reply = self.sim.server.send(kind, op, self._rtt_ms(), lost)
            if lost:
                yield self.env.timeout(self._timeout_ms)
            else:
                result = yield reply
            if not (yield from self.carry_on()):
                return None
            if not lost:
                return result
            if not retry:
                return LOST

    def start_sweeper(self, first_ms: int) -> None:
        """Start the sweep timer (`sweeper`): as the callback-driven `_SweepTimer` when requests are not lost
        (the same steps in the same places of the event order, without a generator), else as a process. A
        worker's stalled checks run otherwise (`Worker.start_sweeper`, `emqsim.checks`)."""
        if _ELISION and (self._loss <= 0 or not self._loss_all):
            if _ReapTimer.applies(self):
                _ReapTimer(self, first_ms)
            else:
                _SweepTimer(self, first_ms)
        else:
            self.env.process(self.sweeper(first_ms))

    @staticmethod
    def route_at(now: int, rtt_ms: int, outages: list[tuple[int, int, int]]) -> tuple[int, int]:
        """`route` for a request sent at `now` (any time, past or to come) past `outages` (this client's, or
        the part of them not over before `now`); changes nothing."""
        out_ms = rtt_ms // 2
        back_ms = rtt_ms - out_ms
        if not outages or now + rtt_ms < outages[0][0]:
            return out_ms, back_ms  # the windows are sorted and disjoint: none touches this round trip
        sent = now
        for start, _, back in outages:
            if start <= sent < back or sent < start <= sent + out_ms:
                sent = back  # queued (or dropped on the way) until the reconnect, then resent
        arrive = sent + out_ms
        read = arrive + back_ms
        for start, _, back in outages:
            if arrive < start <= read or (start <= arrive < back):
                read = max(read, back + rtt_ms)
        return arrive - now, read - arrive

    def state_changed(self) -> None:
        """Tell whoever plans this client's stalled checks ahead (`emqsim.checks`) that its state changed
        (frozen, blocked, alive again, dead); called right after the change."""
        if self.on_state is not None:
            self.on_state()

    def sweeper(self, first_ms: int) -> Proc:
        """Run the policy's sweep on a timer: once at `first_ms`, then every interval after each run."""
        server = self.sim.server
        by = self.label

        def sweep(now: int) -> Any:
            return server.sweep(by, now)

        # Without request loss, a sweep's only draw is its round trip, so it can be drawn here and the sweep
        # answered at once when the rate limit is certain to refuse it (the common case: every worker sweeps).
        reliable = self._loss <= 0 or not self._loss_all
        yield self.env.timeout(first_ms)
        while True:
            if not (yield from self.carry_on()):
                return
            if reliable and self.outages:
                out_ms, back_ms = self.route(self._rtt_ms())
                if server.sweep_refused(int(self.env.now) + out_ms):
                    yield self.env.timeout(out_ms + back_ms)
                else:
                    yield server.send_split("sweep", sweep, out_ms, back_ms)
                if not (yield from self.carry_on()):
                    return
            elif reliable:
                rtt_ms = self._rtt_ms()
                if server.sweep_refused(int(self.env.now) + rtt_ms // 2):
                    yield self.env.timeout(rtt_ms)
                else:
                    yield server.send("sweep", sweep, rtt_ms, False)
                if not (yield from self.carry_on()):
                    return
            else:
                yield from self.request("sweep", sweep)
            if self.state == DEAD:
                return
            yield self.env.timeout(self.sim.policy.sweep_interval_ms)

    @property
    def label(self) -> str:
        return f"worker {self.wid}"


class _SweepTimer:
    """`Client.sweeper` without loss, as callbacks on one `Tick`: a stalled check the rate limit is certain to
    refuse (nearly all of them when every worker checks) costs one light queue entry for its round trip and
    one for the interval, with no event object and no generator resumed. Every step happens at the same point
    of SimPy's event order as the generator's (`Tick` takes its ids from the same counter, a start is URGENT
    like `Initialize`, the end schedules what a finished process schedules), so the round-trip draws, the
    requests, the commands and every record are the generator's, faults and outages included: a frozen or
    blocked client's timer waits on its `resume_event` in the same callback order."""

    __slots__ = ("client", "server", "tick", "interval_ms", "sweep", "_to_wake", "_to_replied")

    def __init__(self, client: Client, first_ms: int) -> None:
        self.client = client
        server = self.server = client.sim.server
        self.tick = Tick(client.env)
        self.interval_ms = client.sim.policy.sweep_interval_ms
        by = client.label

        def sweep(now: int) -> Any:
            return server.sweep(by, now)

        self.sweep = sweep
        self._to_wake: list[Callable[[Any], None]] = [self._wake]
        self._to_replied: list[Callable[[Any], None]] = [self._replied]
        self.tick.after(0, [lambda _: self.tick.after(first_ms, self._to_wake)], URGENT)

    def _carry_on(self, then: Callable[[], None]) -> None:
        """`Client.carry_on`, then `then()`: wait out a freeze or a blocked loop; a dead client ends."""
        client = self.client
        if client.state == FROZEN or client.state == BLOCKED:
            assert client.resume_event is not None  # set by freeze() and block()
            client.resume_event.callbacks.append(lambda _: self._carry_on(then))
            return
        if client.state == DEAD:
            self.tick.after(0, [_ended])  # a process that returns schedules itself (one id, as SimPy does)
            return
        then()

    def _wake(self, _: Any) -> None:
        if self.client.state != ALIVE:
            self._carry_on(self._check)
        else:
            self._check()

    def _check(self) -> None:
        client = self.client
        server = self.server
        now = int(client.env._now)
        if client.outages:
            out_ms, back_ms = client.route(client._rtt_ms())
            if server.sweep_refused(now + out_ms):
                self.tick.after(out_ms + back_ms, self._to_replied)
            else:
                reply = server.send_split("sweep", self.sweep, out_ms, back_ms)
                reply.callbacks.append(self._replied)
        else:
            rtt_ms = client._rtt_ms()
            if server.sweep_refused(now + rtt_ms // 2):
                self.tick.after(rtt_ms, self._to_replied)
            else:
                reply = server.send("sweep", self.sweep, rtt_ms, False)
                reply.callbacks.append(self._replied)

    def _replied(self, _: Any) -> None:
        if self.client.state != ALIVE:
            self._carry_on(self._again)
        else:
            self.tick.after(self.interval_ms, self._to_wake)

    def _again(self) -> None:
        self.tick.after(self.interval_ms, self._to_wake)


class _ReapTimer:
    """The timeout reaper's timer (`Reaper`, `TimeoutPolicy`) as callbacks on one `Tick`, with its reaps that
    can only read done without running them (issue 27). The reaper's three steps per reap keep their entries
    and their places in SimPy's event order: the send (its round trip drawn from the reaper's own stream), the
    reap reaching Redis (where `Client.route`'s Timeout stood), the reading of the reply (where the reply
    event stood), each scheduled at the moment the simulated reaper schedules it, so every id comes from the
    same counter at the same point and no fixed ordering rule is needed. The reaper never freezes, blocks or
    dies (`Reaper`), so no step waits for a resume. At Redis, `Server.idle_reap` counts a
    reap that is certain to read and reclaim nothing (its `LRANGE`, its `HGET`s, its record); any other reap
    runs as `Server.sweep` runs it. Only when the server neither evicts (maxmemory) nor reorders a
    millisecond's requests (explore's tie-breaks): there every reap runs as `_SweepTimer` runs it."""

    __slots__ = ("client", "server", "tick", "interval_ms", "timeout_ms", "by", "back_ms", "_steps")

    @staticmethod
    def applies(client: Client) -> bool:
        """Whether `client` is the reaper of a `TimeoutPolicy` whose reap is `Queue.reap`, on a server where
        a reap's reads have no side effect of their own (no maxmemory, the default tie-break)."""
        from emqsim.policies import TimeoutPolicy

        policy = client.sim.policy
        server = client.sim.server
        return (
            isinstance(client, Reaper)
            and isinstance(policy, TimeoutPolicy)
            and type(policy).sweep is TimeoutPolicy.sweep
            and server.evicting is None
            and server.tie_break is None
        )

    def __init__(self, client: Client, first_ms: int) -> None:
        self.client = client
        self.server = client.sim.server
        self.tick = Tick(client.env)
        policy = client.sim.policy
        self.interval_ms = policy.sweep_interval_ms
        self.timeout_ms: int = policy.timeout_ms  # type: ignore[attr-defined]  # a TimeoutPolicy (applies)
        self.by = client.label
        self.back_ms = 0
        self._steps: tuple[list[Callable[[Any], None]], ...] = ([self._send], [self._arrive], [self._replied])
        self.tick.after(0, [lambda _: self.tick.after(first_ms, self._steps[0])], URGENT)

    def _send(self, _: Any) -> None:
        client = self.client
        server = self.server
        rtt_ms = client._rtt_ms()
        if client.outages:
            out_ms, back_ms = client.route(rtt_ms)
        else:
            out_ms = rtt_ms // 2
            back_ms = rtt_ms - out_ms
        server.requests["sweep"] = server.requests.get("sweep", 0) + 1
        self.back_ms = back_ms
        self.tick.after(out_ms, self._steps[1])  # where `Server.send`'s Timeout stood

    def _arrive(self, _: Any) -> None:
        server = self.server
        now = int(self.client.env._now)
        if not server.idle_reap(self.by, now, self.timeout_ms):
            server.sweep(self.by, now)
        self.tick.after(self.back_ms, self._steps[2])  # where the reply event stood

    def _replied(self, _: Any) -> None:
        self.tick.after(self.interval_ms, self._steps[0])


def _ended(_: Any) -> None:
    """A finished timer's last queue entry (the event a returning SimPy process schedules)."""


class Reaper(Client):
    """A dedicated sweeper process that never fails and loses its connection only while Redis itself
    restarts (the usual home of the timeout reaper)."""

    wid = -1
    resume_event = None

    @property
    def label(self) -> str:
        return "reaper"
