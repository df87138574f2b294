"""Simulated workers: a fetch loop per concurrency slot, one lock-manager timer, a sweep timer, and faults.

States: alive, frozen (stop-the-world: nothing advances, timers that came due fire on resume, work resumes
where it stopped), dead (never acts again; its connection is closed). Requests already on the wire when a
worker freezes or dies still reach Redis: the network does not know the sender stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emqsim.distributions import Fixed
from emqsim.records import Attempt, WorkerEvent
from emqsim.server import LOST
from emqsim.units import to_ms

if TYPE_CHECKING:
    from emqsim.engine import Simulation

ALIVE, FROZEN, DEAD = "alive", "frozen", "dead"
RTT_BLOCK = 256  # round trips drawn at once (a fixed block size keeps the draws reproducible)
Proc = Generator[simpy.Event, Any, Any]


class Client:
    """Something that talks to Redis over the simulated network (a worker or the reaper)."""

    wid: int
    state: str = ALIVE
    resume_event: simpy.Event | None = None

    def __init__(self, sim: Simulation, net_rng: np.random.Generator, loss_rng: np.random.Generator) -> None:
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

    @property
    def connected(self) -> bool:
        return self.state != DEAD

    @property
    def alive_or_frozen(self) -> bool:
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

    def settle(self) -> Proc:
        """Wait out a freeze; True if the client may go on, False if it died. (Callers skip it while the
        state is ALIVE: the hot loops then create no generator.)"""
        while self.state == FROZEN:
            assert self.resume_event is not None  # set by freeze()
            yield self.resume_event
        return self.state != DEAD

    def request(self, kind: str, op: Callable[..., Any], retry: bool = True) -> Proc:
        """One round trip; returns the reply, or LOST (renewals are not retried), or None if the client died."""
        while True:
            lost = self._lost(kind)
            reply = self.sim.server.send(self, kind, op, self._rtt_ms(), lost)
            if lost:
                yield self.env.timeout(self._timeout_ms)
            else:
                result = yield reply
            if self.state is not ALIVE and not (yield from self.settle()):
                return None
            if not lost:
                return result
            if not retry:
                return LOST

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
            if self.state is not ALIVE and not (yield from self.settle()):
                return
            if reliable:
                rtt_ms = self._rtt_ms()
                if server.sweep_refused(int(self.env.now) + rtt_ms // 2):
                    yield self.env.timeout(rtt_ms)
                else:
                    yield server.send(self, "sweep", sweep, rtt_ms, False)
                if self.state is not ALIVE and not (yield from self.settle()):
                    return
            else:
                yield from self.request("sweep", sweep)
            if self.state == DEAD:
                return
            yield self.env.timeout(self.sim.policy.sweep_interval_ms)

    @property
    def label(self) -> str:
        return f"worker {self.wid}"


class Reaper(Client):
    """A dedicated sweeper process that never fails (the usual home of the timeout reaper)."""

    wid = -1
    resume_event = None

    @property
    def label(self) -> str:
        return "reaper"


class Held:
    """A job the lock manager tracks (keyed by its token): the job and its last renewal time (`ts`)."""

    __slots__ = ("job", "ts", "attempt")

    def __init__(self, job: str, ts: int, attempt: Attempt) -> None:
        self.job = job
        self.ts = ts
        self.attempt = attempt


class Worker(Client):
    """One worker process with `concurrency` slots."""

    def __init__(
        self, sim: Simulation, wid: int, net_rng: np.random.Generator, loss_rng: np.random.Generator
    ) -> None:
        super().__init__(sim, net_rng, loss_rng)
        self.wid = wid
        self.state = ALIVE
        self.resume_event: simpy.Event | None = None
        self.frozen_ms = 0  # total time spent frozen, up to the last resume
        self.frozen_since: int | None = None
        # All keyed by token (one per take): the same job can be held twice by one worker, once stale.
        self.running: dict[str, Attempt] = {}  # taken at Redis, not yet finished from the worker's view
        self.held: dict[str, Held] = {}  # tracked by the lock manager
        self.started_ms: dict[str, tuple[int, int]] = {}  # token -> (start time, frozen_total at start)
        self.takes = 0
        self.restart_after_ms: int | None = None

    # -- state changes -----------------------------------------------------------------------------------
    def _event(self, kind: str, detail: str = "") -> None:
        if self.sim.keep_records:
            self.sim.worker_events.append(WorkerEvent(self.env.now / 1000, self.wid, kind, detail))

    def freeze(self, duration_ms: int) -> Proc:
        if self.state != ALIVE:
            return
        self.state = FROZEN
        self.frozen_since = int(self.env.now)
        self.resume_event = self.env.event()
        self._event("freeze", f"{duration_ms / 1000:g} s")
        yield self.env.timeout(duration_ms)
        if self.state != FROZEN:
            return
        self.state = ALIVE
        self.frozen_ms += int(self.env.now) - self.frozen_since
        self.frozen_since = None
        self._event("resume")
        self.resume_event.succeed()

    def crash(self) -> None:
        if self.state == DEAD:
            return
        self.state = DEAD
        now = self.env.now / 1000
        self._event("crash")
        for token, attempt in self.running.items():
            if attempt.started_at is not None and attempt.finished_at is None:
                attempt.stopped_at = now  # its execution ends here, whether or not the job is still its own
            # A dead worker holds this job hostage only if the job is still its own (not reclaimed already).
            if (
                attempt.died_at is None
                and attempt.finish_applied_at is None
                and attempt.reclaimed_at is None
                and attempt.failed_at is None
            ):
                attempt.died_at = now
            start = self.started_ms.get(token)
            if start is not None:
                ran = int(self.env.now) - start[0] - (self.frozen_total() - start[1])
                attempt.work_done = min(attempt.work, max(0, ran) / 1000)
        stopped = list(self.running.values())
        self.sim.attempts_stopped(len(stopped))
        self.running.clear()
        self.held.clear()
        self.started_ms.clear()
        if self.resume_event is not None and not self.resume_event.triggered:
            self.resume_event.succeed()
        self.sim.worker_crashed(self, stopped)

    def frozen_total(self) -> int:
        ongoing = int(self.env.now) - self.frozen_since if self.frozen_since is not None else 0
        return self.frozen_ms + ongoing

    # -- called by the server when a take of ours is executed ---------------------------------------------
    def on_taken(self, job_id: str, attempt: Attempt) -> None:
        if self.state != DEAD:
            self.running[attempt.token] = attempt
            self.sim.attempts_started(1)

    # -- processes ---------------------------------------------------------------------------------------
    def slot(self) -> Proc:
        """Fetch a job, work on it, finish it; forever."""
        server = self.sim.server
        policy = self.sim.policy
        while True:
            if self.state is not ALIVE and not (yield from self.settle()):
                return
            self.takes += 1
            token = f"{self.wid}:{self.takes}"
            lost = self._lost("take")
            reply = server.send_take(self, token, self._rtt_ms(), lost)
            if lost:
                yield self.env.timeout(self._timeout_ms)
                continue
            job_id = yield reply
            if self.state is not ALIVE and not (yield from self.settle()):
                return
            attempt = self.running[token]
            now = int(self.env.now)
            attempt.started_at = now / 1000
            self.held[token] = Held(job_id, now, attempt)
            self.started_ms[token] = (now, self.frozen_total())
            if policy.renewal is not None and policy.renewal.per_job:
                self.env.process(self.job_renewer(token))
            self.sim.job_started(self, attempt)
            # Work: progress stops while frozen.
            remaining = to_ms(attempt.work)
            while remaining > 0:
                t0, f0 = int(self.env.now), self.frozen_total()
                yield self.env.timeout(remaining)
                if self.state is not ALIVE and not (yield from self.settle()):
                    return
                remaining -= (int(self.env.now) - t0) - (self.frozen_total() - f0)
            attempt.finished_at = self.env.now / 1000
            reply = yield from self.request("finish", lambda now, a=attempt: server.finish(a, now))
            if reply is None:
                return
            self.held.pop(token, None)
            self.running.pop(token, None)
            self.started_ms.pop(token, None)
            self.sim.attempts_stopped(1)

    def lock_manager(self, first_ms: int) -> Proc:
        """ONE timer renews every due lease of this worker in ONE batched round trip."""
        rule = self.sim.policy.renewal
        assert rule is not None, "only a policy with a renewal rule starts a lock manager"
        server = self.sim.server
        yield self.env.timeout(first_ms)
        next_tick = int(self.env.now)
        while True:
            if self.state is not ALIVE and not (yield from self.settle()):
                return
            now = int(self.env.now)
            due = [(h.job, token) for token, h in self.held.items() if rule.due(now, h.ts)]
            if due:
                for _, token in due:
                    self.held[token].ts = now
                failed = yield from self.request("renew", lambda t, d=due: server.renew(d, t), retry=False)
                if failed is None:
                    return
                if failed is LOST:
                    server.renewal_lost(due, now)
                else:
                    for token in failed:
                        self.held.pop(token, None)  # lockRenewalFailed: stop renewing a lost lock
            if rule.after_reply:
                yield self.env.timeout(rule.tick_ms)
            else:
                # Fixed rate on the original grid; ticks missed while frozen are skipped, not replayed
                # (Node's setInterval and Erlang's interval timers fire once when the process resumes).
                now = int(self.env.now)
                next_tick += rule.tick_ms
                if next_tick <= now:
                    next_tick += (now - next_tick) // rule.tick_ms * rule.tick_ms + rule.tick_ms
                yield self.env.timeout(next_tick - now)

    def job_renewer(self, token: str) -> Proc:
        """The naive variant: one timer and one round trip per job."""
        rule = self.sim.policy.renewal
        assert rule is not None, "only a policy with a renewal rule starts job renewers"
        server = self.sim.server
        while True:
            yield self.env.timeout(rule.tick_ms)
            if self.state is not ALIVE and not (yield from self.settle()):
                return
            held = self.held.get(token)
            if held is None:
                return
            now = int(self.env.now)
            if not rule.due(now, held.ts):
                continue
            held.ts = now
            item = [(held.job, token)]
            failed = yield from self.request("renew", lambda t, d=item: server.renew(d, t), retry=False)
            if failed is None:
                return
            if failed is LOST:
                server.renewal_lost(item, now)
            elif failed:
                self.held.pop(token, None)
                return
