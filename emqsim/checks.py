"""A worker's stalled checks (BullMQ's stalled-job checker, rate-limited by the `stalled-check` key), and the
run's one coordinator that plans them ahead (issue 27).

The rule (results schema 7): a worker's first check is sent `first_ms` after it starts, each next one
`stalledInterval` after the previous reply is read; a check's round trip is the next draw of the checks' own
stream (`stream(seed, replication, "network", wid, 2)`), routed past the worker's connection outages; both of
its steps, the send and the reading of the reply, run at priority `CHECKS + wid`, after every other event of
their millisecond (workers in id order); a step that comes due while the worker is frozen or its loop blocked
runs when it can act again, a dead worker's checks end. A check the rate limit is certain to refuse (the key
exists and expires at or after the check reaches Redis) is counted, one request and one `EXISTS`, and not
sent (`Server.sweep_refused`).

So a worker's checks are a sequence known ahead: while the key expires at E, every check reaching Redis by E
is refused. `SweepCoordinator` sends only the first check of each worker that would arrive after E (one
SimPy entry each) and counts the refused ones arithmetically; `CheckTimer` runs the same rule one check at a
time (`emqsim.client._ELISION` off, and policies without the refusal shortcut). tests/test_event_elision.py
checks that both give the same records, requests and commands.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from heapq import heapify, heappop, heappush
from typing import Any

import numpy as np

from emqsim import client as _client
from emqsim._simpy_fast import CHECKS, Tick
from emqsim.client import ALIVE, DEAD, RTT_BLOCK, Client, ClientHost
from emqsim.faults import NEVER_MS
from emqsim.policies import LeasePolicy


def start_checks(client: Client, first_ms: int, rng: np.random.Generator) -> None:
    """Start a worker's stalled checks (`rng`: their round trips): planned by the run's coordinator when the
    policy says which checks its rate limit refuses and `_ELISION` is on, else one by one."""
    server = client.sim.server
    # The coordinator plans with the rate-limit rule itself (`Queue.sweep_rate_limited`, which is what
    # `LeasePolicy.sweep_refused` answers); a policy that answers otherwise has its checks run one by one.
    refused_by = getattr(type(client.sim.policy), "sweep_refused", None)
    if _client._ELISION and refused_by is LeasePolicy.sweep_refused:
        coordinator = server.rate_limit_watcher
        if not isinstance(coordinator, SweepCoordinator):
            coordinator = server.rate_limit_watcher = SweepCoordinator(client.sim)
        coordinator.add(client, first_ms, rng)
    else:
        CheckTimer(client, first_ms, rng)


class _CheckDraws:
    """The round trips of one worker's stalled checks, from their own stream: the k-th check takes the k-th
    draw whenever it is sent, so the sequence can be read ahead (`at`) and dropped once used (`used`)."""

    __slots__ = ("client", "rng", "fixed", "rtts", "base")

    def __init__(self, client: Client, rng: np.random.Generator) -> None:
        self.client = client
        self.rng = rng
        self.fixed = client._fixed_rtt_ms
        self.rtts: list[int] = []
        self.base = 0  # the index of rtts[0]

    def at(self, k: int) -> int:
        """The k-th check's round trip in whole ms (at least 1); drawn in blocks of RTT_BLOCK as needed."""
        if self.fixed is not None:
            return self.fixed
        i = k - self.base
        rtts = self.rtts
        while i >= len(rtts):
            draws = self.client._rtt.sample(self.rng, RTT_BLOCK)
            rtts.extend(np.maximum(1, np.floor(draws * 1000 + 0.5)).astype(np.int64).tolist())
        return rtts[i]

    def used(self, k: int) -> None:
        """Checks before the k-th are sent: forget their draws (a long run keeps at most two blocks)."""
        if k - self.base >= 2 * RTT_BLOCK:
            del self.rtts[:RTT_BLOCK]
            self.base += RTT_BLOCK


class CheckTimer:
    """A worker's stalled checks one by one, on the fixed rule the coordinator computes ahead: a check is sent
    `first_ms` after the worker starts and then `stalledInterval` after each reply is read; its round trip is
    the next one of the checks' own stream (`_CheckDraws`); both steps, the send and the reading of the reply,
    run at priority `CHECKS + wid` (after every other event of their millisecond, workers in id order). A step
    that comes due while the worker is frozen or its loop blocked runs when it can act again (at that
    millisecond, same priority); a dead worker's timer ends. A check the rate limit is certain to refuse
    (`Server.sweep_refused`) is counted and not sent."""

    __slots__ = ("client", "server", "tick", "priority", "interval_ms", "draws", "k", "sweep", "outages")

    def __init__(self, client: Client, first_ms: int, rng: np.random.Generator) -> None:
        self.client = client
        server = self.server = client.sim.server
        self.tick = Tick(client.env)
        self.priority = CHECKS + client.wid
        self.interval_ms = client.sim.policy.sweep_interval_ms
        self.draws = _CheckDraws(client, rng)
        self.k = 0
        self.outages = list(client.outages)
        by = client.label

        def sweep(now: int) -> Any:
            return server.sweep(by, now)

        self.sweep = sweep
        self.tick.after(first_ms, [self._send], self.priority)

    def _can_act(self, step: Callable[[Any], None]) -> bool:
        """Whether the worker can take `step` now; if frozen or blocked, `step` runs again when it can."""
        client = self.client
        if client.state == ALIVE:
            return True
        if client.state != DEAD:
            assert client.resume_event is not None  # set by freeze() and block()
            client.resume_event.callbacks.append(lambda _: self.tick.after(0, [step], self.priority))
        return False

    def _send(self, _: Any) -> None:
        if not self._can_act(self._send):
            return
        client = self.client
        now = int(client.env._now)
        rtt_ms = self.draws.at(self.k)
        self.k += 1
        self.draws.used(self.k)
        outages = self.outages
        while outages and outages[0][2] <= now:
            outages.pop(0)
        out_ms, back_ms = client.route_at(now, rtt_ms, outages)
        if not self.server.sweep_refused(now + out_ms):
            self.server.send_split("sweep", self.sweep, out_ms, back_ms)
        self.tick.after(out_ms + back_ms, [self._read], self.priority)

    def _read(self, _: Any) -> None:
        if self._can_act(self._read):
            self.tick.after(self.interval_ms, [self._send], self.priority)


class _Checker:
    """One worker's place in the coordinator's plan: its next stalled-check step (a send at `t`, or the reading
    of a reply at `t`), the index `k` of its next check, and whether it is paused (frozen or blocked)."""

    __slots__ = (
        "coordinator",
        "client",
        "wid",
        "t",
        "send",
        "k",
        "draws",
        "outages",
        "paused",
        "version",
        "sweep",
    )

    def __init__(
        self, coordinator: SweepCoordinator, client: Client, t: int, rng: np.random.Generator
    ) -> None:
        self.coordinator = coordinator
        self.client = client
        self.wid = client.wid
        self.t = t
        self.send = True
        self.k = 0
        self.draws = _CheckDraws(client, rng)
        self.outages = list(client.outages)
        self.paused = False
        self.version = 0
        server = coordinator.server
        by = client.label

        def sweep(now: int) -> Any:
            reply = server.sweep(by, now)
            if coordinator.armed is None:  # the plan waited for this check to reach Redis (`_fire`)
                coordinator._arm()
            return reply

        self.sweep = sweep

    def legs(self, t: int, k: int) -> tuple[int, int]:
        """(out, back) ms of the k-th check, sent at `t` (not before this checker's current step)."""
        rtt_ms = self.draws.at(k)
        if not self.outages:
            return rtt_ms // 2, rtt_ms - rtt_ms // 2
        return self.client.route_at(t, rtt_ms, self.outages)

    def moved(self) -> None:
        """The current step moved on: forget the draws and the outages no later step can need."""
        self.draws.used(self.k)
        outages = self.outages
        while outages and outages[0][2] <= self.t:
            outages.pop(0)


class SweepCoordinator:
    """Every worker's stalled checks (`CheckTimer`'s rule) in one plan, for the run: while the stalled-check
    key is set to expire at E, a check that would reach Redis by E is refused, so each worker's checks up to
    its first one that would arrive after E are known ahead. Only those first checks are events (one Tick at
    a time, the earliest); the refused ones are counted arithmetically, as `Server.sweep_refused` would count
    them, when the coordinator catches up with the worker: at a change of its state (`changed`), a change of
    the key (`key_changed`), and at the end of the run (`flush`). Every step keeps `CheckTimer`'s place in
    the event order, so the requests, commands and records are those of the checks simulated one by one."""

    def __init__(self, sim: ClientHost) -> None:
        self.env = sim.env
        self.server = sim.server
        self.interval_ms = sim.policy.sweep_interval_ms
        self.expire_at: int | None = sim.server.store.expire_at(sim.server.keys.stalled_check)
        self.checkers: dict[int, _Checker] = {}
        self.plan: list[tuple[int, int, int]] = []  # (time of the next check that is sent, wid, version)
        self.armed: Tick | None = None
        self.armed_at: tuple[int, int] | None = None
        self.last: tuple[int, int] = (-1, 0)  # (ms, wid) of the last step run as an event
        self._fire_list: list[Callable[[Any], None]] = [self._fire]

    # -- what the run tells it -------------------------------------------------------------------------
    def add(self, client: Client, first_ms: int, rng: np.random.Generator) -> None:
        """Plan a worker that starts now: its first check `first_ms` from now."""
        checker = _Checker(self, client, int(self.env._now) + first_ms, rng)
        client.on_state = partial(self.changed, checker)
        self.checkers[checker.wid] = checker
        self._replan(checker)
        self._arm()

    def changed(self, checker: _Checker) -> None:
        """Its worker froze, blocked, came back or died (just now, in an event before any check of now)."""
        state = checker.client.state
        if not checker.paused:
            self._catch_up(checker, self._limit(checker))
        if state == ALIVE:
            if checker.paused:  # a step that came due meanwhile runs now
                checker.paused = False
                checker.t = max(checker.t, int(self.env._now))
                self._replan(checker)
        elif state == DEAD:
            del self.checkers[checker.wid]
            checker.client.on_state = None
            checker.version += 1
        else:
            checker.paused = True
            checker.version += 1
        self._arm()

    def key_changed(self, expire_at: int | None) -> None:
        """The stalled-check key now expires at `expire_at` (None: it is gone): every worker catches up under
        the old expiry, then is planned under the new one."""
        if expire_at == self.expire_at:
            return
        now = int(self.env._now)
        last_ms, last_wid = self.last
        last_wid = last_wid if last_ms == now else -(2**62)
        old, self.expire_at = self.expire_at, expire_at
        interval_ms = self.interval_ms
        refused = 0
        plan = []
        for checker in self.checkers.values():
            if not checker.paused:
                if checker.t < now or (checker.t == now and checker.wid <= last_wid):
                    refused += _walk(checker, now if checker.wid <= last_wid else now - 1, old, interval_ms)
                checker.version += 1
                plan.append((_ahead(checker, expire_at, interval_ms), checker.wid, checker.version))
        if refused:
            self.server.count_refused_sweeps(refused)
        heapify(plan)
        self.plan = plan
        self._arm()

    def flush(self) -> None:
        """Count every refused check up to now (the run ends before the checks of its last millisecond that
        were not run yet)."""
        for checker in self.checkers.values():
            if not checker.paused:
                self._catch_up(checker, self._limit(checker))

    # -- the plan --------------------------------------------------------------------------------------
    def _limit(self, checker: _Checker) -> int:
        """The last ms whose steps of this worker have happened, seen from an event now: this ms's checks
        come after every other event, except those before the last check run as an event now."""
        now = int(self.env._now)
        last_ms, last_wid = self.last
        return now if last_ms == now and checker.wid <= last_wid else now - 1

    def _catch_up(self, checker: _Checker, limit: int) -> None:
        """Run the worker's steps due by `limit` ms (see `_walk`) and count the refused checks."""
        refused = _walk(checker, limit, self.expire_at, self.interval_ms)
        if refused:
            self.server.count_refused_sweeps(refused)

    def _replan(self, checker: _Checker) -> None:
        checker.version += 1
        heappush(self.plan, (_ahead(checker, self.expire_at, self.interval_ms), checker.wid, checker.version))

    def _arm(self) -> None:
        """Keep one Tick on SimPy's queue, at the earliest planned check that is sent."""
        plan = self.plan
        checkers = self.checkers
        while plan:
            t, wid, version = plan[0]
            checker = checkers.get(wid)
            if checker is not None and checker.version == version:
                break
            heappop(plan)
        else:
            self.armed = self.armed_at = None
            return
        if self.armed is not None and self.armed_at == (t, wid):
            return
        tick = self.armed = Tick(self.env)
        self.armed_at = (t, wid)
        tick.after(t - int(self.env._now), self._fire_list, CHECKS + wid)

    def _fire(self, tick: Any) -> None:
        """The planned check: its worker's steps up to it, then the check itself (sent, or refused if the
        key changed meanwhile), then the next plan. Checks planned for the same millisecond follow at once
        while none reaches Redis in it (nothing else can come between them)."""
        if tick is not self.armed or self.armed_at is None:
            return  # a plan that changed since
        t, wid = self.armed_at
        self.armed = self.armed_at = None
        plan = self.plan
        checkers = self.checkers
        server = self.server
        sent_at: int | None = None  # when the last check sent here reaches Redis
        while True:
            self.last = (t, wid)
            checker = checkers[wid]
            if checker.t < t:
                self._catch_up(checker, t - 1)
            assert checker.send and checker.t == t
            out_ms, back_ms = checker.legs(t, checker.k)
            expire_at = self.expire_at
            if expire_at is not None and t + out_ms <= expire_at:
                server.count_refused_sweeps(1)
            else:
                server.send_split("sweep", checker.sweep, out_ms, back_ms)
                sent_at = t + out_ms
            checker.k += 1
            checker.t = t + out_ms + back_ms
            checker.send = False
            checker.moved()
            self._replan(checker)
            if out_ms == 0:
                break  # it reaches Redis in this millisecond: the next check of it comes after that event
            while plan:
                t_next, wid, version = plan[0]
                found = checkers.get(wid)
                if found is not None and found.version == version:
                    break
                heappop(plan)
            else:
                break
            if t_next != t:
                break
            heappop(plan)  # that check is taken now (its worker is planned again after it)
        if sent_at is not None and sent_at < NEVER_MS:
            # A check sent reaches Redis (a NORMAL event) before any check planned for then or later, and
            # it arms the plan there, once it has changed the key or not: a tick armed now would mostly go
            # stale (the plan made before the key moves), so arm now only a check due before it.
            while plan:
                t_next, wid, version = plan[0]
                found = checkers.get(wid)
                if found is not None and found.version == version:
                    if t_next >= sent_at:
                        return
                    break
                heappop(plan)
        self._arm()


def _walk(checker: _Checker, limit: int, expire_at: int | None, interval_ms: int) -> int:
    """Move the worker's plan through its steps due by `limit` ms, under the key's expiry `expire_at`: all are
    refused checks (a check that is sent is an event of its own) and readings of replies. Returns how many
    checks it passed (to count as refused). One turn per check: its send, its reply read, the next send."""
    t = checker.t
    if t > limit:
        return 0
    k, send = checker.k, checker.send
    draws = checker.draws
    fixed, rtts, base = draws.fixed, draws.rtts, draws.base
    outages = checker.outages
    k0 = k
    if not send:  # a reply read due: the next check is sent an interval after it
        t += interval_ms
        send = True
    while t <= limit:
        if fixed is not None:
            rtt_ms = fixed
        else:
            i = k - base
            rtt_ms = rtts[i] if i < len(rtts) else draws.at(k)
        if outages and t + rtt_ms >= outages[0][0]:
            out_ms, back_ms = checker.client.route_at(t, rtt_ms, outages)
        else:
            out_ms = rtt_ms // 2
            back_ms = rtt_ms - out_ms
        assert expire_at is not None and t + out_ms <= expire_at, "a check to send was not an event"
        k += 1
        t += out_ms + back_ms
        if t > limit:
            send = False  # its reply is read later
            break
        t += interval_ms
    checker.t, checker.k, checker.send = t, k, send
    checker.moved()
    return k - k0


def _ahead(checker: _Checker, expire_at: int | None, interval_ms: int) -> int:
    """When the worker's next check that is not refused (one reaching Redis after `expire_at`) is sent, if
    the worker stays alive and the key does not change: reads its plan ahead without moving it."""
    t, k = checker.t, checker.k
    if not checker.send:
        t += interval_ms
    if expire_at is None:
        return t
    draws = checker.draws
    fixed, rtts, base = draws.fixed, draws.rtts, draws.base
    outages = checker.outages
    while True:
        if fixed is not None:
            rtt_ms = fixed
        else:
            i = k - base
            rtt_ms = rtts[i] if i < len(rtts) else draws.at(k)
        if outages and t + rtt_ms >= outages[0][0]:
            out_ms, back_ms = checker.client.route_at(t, rtt_ms, outages)
        else:
            out_ms = rtt_ms // 2
            back_ms = rtt_ms - out_ms
        if t + out_ms > expire_at:
            return t
        k += 1
        t += out_ms + back_ms + interval_ms
