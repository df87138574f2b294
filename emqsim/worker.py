"""Simulated workers: a fetch loop per concurrency slot, one lock-manager timer, a sweep timer, and faults.

States: alive, frozen (stop-the-world: nothing advances, timers that came due fire on resume, work resumes
where it stopped), blocked (a blocked event loop: the jobs' work advances, but no timer fires and no reply is
read until the loop frees), dead (never acts again; its connection is closed). Requests already on the wire
when a worker freezes or dies still reach Redis: the network does not know the sender stopped.

A client's connection can be down (`Outage`): its requests wait and are resent when it reconnects (ioredis's
offline queue), so a round trip that meets an outage ends after the reconnect (`Client.route`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import simpy

from emqsim import client as _client
from emqsim._simpy_fast import URGENT, Tick
from emqsim.checks import start_checks
from emqsim.client import (
    ALIVE,
    BLOCKED,
    DEAD,
    FROZEN,
    MAX_RETRIES_ERROR,
    REJECTED,
    REJECTED_RAN,
    Client,
    ClientHost,
    Proc,
    Rejected,
    _ended,
)
from emqsim.ledger import AttemptDraft
from emqsim.server import LOST
from emqsim.units import to_ms


class WorkerHost(ClientHost, Protocol):
    """What a worker needs from the run around it besides a client's: whom to tell when its attempts start and
    stop, when it crashes, and what happened to it."""

    def attempts_started(self, n: int) -> None: ...

    def attempts_stopped(self, n: int) -> None: ...

    def worker_crashed(self, worker: Worker, stopped: list[AttemptDraft]) -> None: ...

    def job_started(self, worker: Worker, attempt: AttemptDraft) -> None: ...

    def worker_event(self, wid: int, kind: str, detail: str = "") -> None: ...


class _LockManager:
    """`Worker.lock_manager` as callbacks on one `Tick`, for the same reason and with the same guarantee as
    `_SweepTimer`: each tick, each renewal round trip (lost or answered) and each wait for a freeze or a
    blocked loop stands at the generator's point of the event order, so draws and records are unchanged."""

    __slots__ = (
        "worker",
        "server",
        "rule",
        "tick",
        "first_ms",
        "next_tick",
        "fired_at",
        "due",
        "result",
        "_to_wake",
        "_to_lost",
        "_to_rejected",
    )

    def __init__(self, worker: Worker, first_ms: int) -> None:
        rule = worker.sim.policy.renewal
        assert rule is not None, "only a policy with a renewal rule starts a lock manager"
        self.worker = worker
        self.server = worker.sim.server
        self.rule = rule
        self.tick = Tick(worker.env)
        self.first_ms = first_ms
        self.next_tick = 0
        self.fired_at = 0
        self.due: list[tuple[str, str]] = []
        self.result: Any = None
        self._to_wake: list[Callable[[Any], None]] = [self._wake]
        self._to_lost: list[Callable[[Any], None]] = [self._lost]
        self._to_rejected: list[Callable[[Any], None]] = [self._rejected]
        self.tick.after(0, [self._start], URGENT)

    def _start(self, _: Any) -> None:
        self.tick.after(self.first_ms, [self._first])

    def _first(self, _: Any) -> None:
        self.next_tick = int(self.worker.env._now)
        self._wake(_)

    def _carry_on(self, then: Callable[[], None]) -> None:
        """`Client.carry_on`, then `then()`: wait out a freeze or a blocked loop; a dead worker's timer ends."""
        worker = self.worker
        if worker.state == FROZEN or worker.state == BLOCKED:
            assert worker.resume_event is not None  # set by freeze() and block()
            worker.resume_event.callbacks.append(lambda _: self._carry_on(then))
            return
        if worker.state == DEAD:
            self.tick.after(0, [_ended])  # a process that returns schedules itself (one id, as SimPy does)
            return
        then()

    def _wake(self, _: Any) -> None:
        if self.worker.state != ALIVE:
            self._carry_on(self._fire)
        else:
            self._fire()

    def _fire(self) -> None:
        worker = self.worker
        server = self.server
        now = self.fired_at = int(worker.env._now)
        due_at = self.rule.due
        tracked = worker.tracked
        due = [(h.job, token) for token, h in tracked.items() if due_at(now, h.ts)]
        if not due or worker.tick_skipped(due, now):
            self._next()
            return
        for _, token in due:
            tracked[token].ts = now
        self.due = due

        def op(t: int, d: list[tuple[str, str]] = due) -> Any:
            return server.renew(d, t)

        lost = worker._lost("renew")  # `Client.request("renew", op, retry=False)`, step by step
        if worker.outages and not lost:
            rtt_ms = worker._rtt_ms()
            out_ms, back_ms = worker.route(rtt_ms)
            flush = worker.flush_at(now, now + out_ms + back_ms) if worker._max_retries is not None else None
            if flush is not None:  # `Client.rejected`, step by step
                if now + out_ms < flush:
                    server.send_split("renew", op, out_ms, back_ms)
                    self.result = REJECTED_RAN
                else:
                    server.requests["renew"] = server.requests.get("renew", 0) + 1
                    self.result = REJECTED
                self.tick.after(flush - now, self._to_rejected)
                return
            again = worker.resent_after(rtt_ms) if worker._resend_twice else None
            reply = server.send_split("renew", op, out_ms, back_ms)
            if again is not None:  # it ran, the drop took its reply, and ioredis's resent copy runs again
                reply = server.send_split("renew", server.resent(op), again, rtt_ms - rtt_ms // 2)
        else:
            reply = server.send("renew", op, worker._rtt_ms(), lost)
        if lost:
            self.tick.after(worker._timeout_ms, self._to_lost)
        else:
            reply.callbacks.append(self._replied)

    def _lost(self, _: Any) -> None:
        self.result = LOST
        self._carry_on(self._answered)

    def _replied(self, reply: Any) -> None:
        self.result = reply._value
        self._carry_on(self._answered)

    def _rejected(self, _: Any) -> None:
        self._carry_on(self._answered)

    def _answered(self) -> None:
        failed, self.result = self.result, None
        if isinstance(failed, Rejected):  # BullMQ's extendLocks rejected: the jobs stay tracked
            if not failed.ran:
                self.server.renewal_lost(self.due, self.fired_at)
        elif failed is LOST:
            self.server.renewal_lost(self.due, self.fired_at)
        else:
            tracked = self.worker.tracked
            for token in failed:
                tracked.pop(token, None)  # lockRenewalFailed: stop renewing a lost lock
        self.due = []
        self._next()

    def _next(self) -> None:
        rule = self.rule
        if rule.after_reply:
            self.tick.after(rule.tick_ms, self._to_wake)
            return
        # Fixed rate on the original grid (see `Worker.lock_manager`).
        now = int(self.worker.env._now)
        tick_ms = rule.tick_ms
        fired_at = self.fired_at
        next_tick = self.next_tick + tick_ms
        if next_tick <= fired_at:
            next_tick += ((fired_at - next_tick) // tick_ms + 1) * tick_ms
        if next_tick <= now:
            next_tick += (now - next_tick) // tick_ms * tick_ms
        self.next_tick = next_tick
        self.tick.after(max(0, next_tick - now), self._to_wake)


class Tracked:
    """A job the lock manager tracks (keyed by its token): the job and its last renewal time (`ts`)."""

    __slots__ = ("job", "ts", "attempt")

    def __init__(self, job: str, ts: int, attempt: AttemptDraft) -> None:
        self.job = job
        self.ts = ts
        self.attempt = attempt


class Worker(Client):
    """One worker process with `concurrency` slots."""

    def __init__(
        self, sim: WorkerHost, wid: int, net_rng: np.random.Generator, loss_rng: np.random.Generator
    ) -> None:
        super().__init__(sim, net_rng, loss_rng)
        self.sim: WorkerHost = sim
        self.wid = wid
        self.state = ALIVE
        self.resume_event: simpy.Event | None = None
        self.frozen_ms = 0  # total time spent frozen, up to the last resume
        self.frozen_since: int | None = None
        # All keyed by token (one per take): the same job can be held twice by one worker, once stale.
        self.running: dict[str, AttemptDraft] = {}  # taken at Redis, not yet finished from the worker's view
        self.tracked: dict[str, Tracked] = {}  # the jobs the lock manager renews
        self.started_ms: dict[str, tuple[int, int]] = {}  # token -> (start time, frozen_total at start)
        self.takes = 0
        self.restart_after_ms: int | None = None
        self.slot_procs: dict[str, simpy.Process] | None = None  # token -> its slot, where a child can crash
        self.skip_rng: np.random.Generator | None = (
            None  # the "ticks" stream, set when Network.skipped_ticks > 0
        )
        self._skip = sim.scenario.network.skipped_ticks
        self.skip_at: list[int] = []  # explore's placed skips: the first due tick at or after each time (ms)

    # -- state changes -----------------------------------------------------------------------------------
    def _event(self, kind: str, detail: str = "") -> None:
        self.sim.worker_event(self.wid, kind, detail)

    def state_at(self, now: int) -> str:
        """The state a record reports: alive, frozen, blocked or dead, or disconnected (alive, connection down)."""
        if self.state is ALIVE and self.outages and self.disconnected_at(now):
            return "disconnected"
        return self.state

    def block(self, duration_ms: int) -> Proc:
        """The event loop is blocked for `duration_ms`: the jobs' work advances (it is not frozen time), but
        no timer fires and no reply is read until it frees."""
        if self.state != ALIVE:
            return
        self.state = BLOCKED
        self.state_changed()
        self.resume_event = self.env.event()
        self._event("block", f"{duration_ms / 1000:g} s")
        yield self.env.timeout(duration_ms)
        if self.state != BLOCKED:
            return
        self.state = ALIVE
        self.state_changed()
        self._event("unblock")
        self.resume_event.succeed()

    def child_crash(self, token: str) -> None:
        """A sandboxed processor's child running `token`'s job exits: its slot fails the job at once."""
        proc = self.slot_procs.get(token) if self.slot_procs is not None else None
        if self.state != DEAD and proc is not None and proc.is_alive:
            self._event("child_crash", f"job {self.running[token].job}")
            proc.interrupt("child exited")

    def freeze(self, duration_ms: int) -> Proc:
        if self.state != ALIVE:
            return
        self.state = FROZEN
        self.state_changed()
        self.frozen_since = int(self.env.now)
        self.resume_event = self.env.event()
        self._event("freeze", f"{duration_ms / 1000:g} s")
        yield self.env.timeout(duration_ms)
        if self.state != FROZEN:
            return
        self.state = ALIVE
        self.state_changed()
        self.frozen_ms += int(self.env.now) - self.frozen_since
        self.frozen_since = None
        self._event("resume")
        self.resume_event.succeed()

    def crash(self, restart_after_ms: int | None = None) -> None:
        """The process dies (its connection closes); with `restart_after_ms` a new worker starts then."""
        if self.state == DEAD:
            return
        if restart_after_ms is not None:
            self.restart_after_ms = restart_after_ms
        self.state = DEAD
        self.state_changed()
        now = int(self.env.now)
        self._event("crash")
        ledger = self.sim.ledger
        for token, attempt in self.running.items():
            ledger.crashed(attempt, now, self.ran_ms(token))
        stopped = list(self.running.values())
        self.sim.attempts_stopped(len(stopped))
        self.running.clear()
        self.tracked.clear()
        self.started_ms.clear()
        if self.resume_event is not None and not self.resume_event.triggered:
            self.resume_event.succeed()
        self.sim.worker_crashed(self, stopped)

    def ran_ms(self, token: str) -> int | None:
        """ms of work done on the take `token` since it started (wall time less frozen time), or None if it
        has not started."""
        start = self.started_ms.get(token)
        if start is None:
            return None
        return int(self.env.now) - start[0] - (self.frozen_total() - start[1])

    def frozen_total(self) -> int:
        ongoing = int(self.env.now) - self.frozen_since if self.frozen_since is not None else 0
        return self.frozen_ms + ongoing

    # -- called by the server when a take of ours is executed ---------------------------------------------
    def on_taken(self, job_id: str, attempt: AttemptDraft) -> None:
        if self.state != DEAD:
            if attempt.token in self.running:  # a resent take under the same token: the first job is orphaned
                self.sim.attempts_stopped(1)
            self.running[attempt.token] = attempt
            self.sim.attempts_started(1)

    # -- processes ---------------------------------------------------------------------------------------
    def slot(self) -> Proc:
        """Fetch a job, work on it, finish it; forever."""
        server = self.sim.server
        ledger = self.sim.ledger
        policy = self.sim.policy
        after_wakeup = policy.take_after_wakeup
        by_job = policy.renewal is not None and policy.renewal.track_by == "job"
        fetched: tuple[str, int] | None = None  # (token, Redis time) of a job the last finish took for us
        while True:
            if not (yield from self.carry_on()):
                return
            fetched_ms: int | None = None
            if fetched is not None:
                token, fetched_ms = fetched
                fetched = None
                job_id = self.running[token].job
            elif after_wakeup:
                token = yield from self._take_after_wakeup()
                if token is None:
                    return
                job_id = self.running[token].job
            else:
                self.takes += 1
                token = f"{self.wid}:{self.takes}"
                lost = self._lost("take")
                reply = server.send_take(self, token, self._rtt_ms(), lost)
                if lost:
                    yield self.env.timeout(self._timeout_ms)
                    continue
                job_id = yield reply
                if not (yield from self.carry_on()):
                    return
                if job_id is None:
                    continue  # refused (READONLY on a demoted primary): BullMQ fetches again at once
            attempt = self.running[token]
            now = int(self.env.now)
            if server.doomed and token in server.doomed:
                # maxStalledCount exceeded: the sweep marked it (`defa`); the taker fails it at once, without
                # calling the processor (the attempt never starts).
                server.doomed.discard(token)
                alive, fetched = yield from self._fail(
                    attempt, token, "job stalled more than allowable limit"
                )
                if not alive:
                    return
                continue
            ledger.started(attempt, now)
            if by_job:  # BullMQ's LockManager map is keyed by job id: a re-take replaces the stale entry
                for other in [t for t, h in self.tracked.items() if h.job == job_id]:
                    del self.tracked[other]
            # A job a finish took is tracked from its take at Redis (BullMQ's trackJob(job.id, token,
            # job.processedOn), worker.js:582): after a freeze it is due for renewal at once.
            self.tracked[token] = Tracked(job_id, now if fetched_ms is None else fetched_ms, attempt)
            self.started_ms[token] = (now, self.frozen_total())
            if policy.renewal is not None and policy.renewal.per_job:
                self.env.process(self.job_renewer(token))
            if self.slot_procs is not None:
                assert self.env.active_process is not None  # this slot's own process
                self.slot_procs[token] = self.env.active_process
            self.sim.job_started(self, attempt)
            # Work: progress stops while frozen (not while the loop is blocked: the job is what blocks it).
            remaining = to_ms(attempt.work)
            try:
                while remaining > 0:
                    t0, f0 = int(self.env.now), self.frozen_total()
                    yield self.env.timeout(remaining)
                    if not (yield from self.carry_on()):
                        return
                    remaining -= (int(self.env.now) - t0) - (self.frozen_total() - f0)
            except simpy.Interrupt:  # a sandboxed processor's child exited: fail the job at once
                assert self.slot_procs is not None  # only sandboxed slots are interrupted
                self.slot_procs.pop(token, None)
                if not (yield from self.carry_on()):
                    return
                alive, fetched = yield from self._fail(
                    attempt, token, "Unexpected exit code", self.sim.scenario.attempts
                )
                if not alive:
                    return
                continue
            if self.slot_procs is not None:
                self.slot_procs.pop(token, None)
            ledger.finishing(attempt, int(self.env.now))
            if policy.fetch_next:
                self.takes += 1
                nxt = f"{self.wid}:{self.takes}"
                reply = yield from self.request(
                    "finish", lambda now, a=attempt, t=nxt: server.finish_and_fetch(self, a, now, t)
                )
                if isinstance(reply, Rejected):
                    self._orphan(nxt)
                elif reply is not None and reply[1] is not None:
                    fetched = (nxt, reply[2])
                elif reply is not None:
                    self._orphan(nxt)
            else:
                reply = yield from self.request("finish", lambda now, a=attempt: server.finish(a, now))
            if reply is None:
                return
            if isinstance(reply, Rejected):  # MaxRetriesPerRequestError: BullMQ's handleFailed
                alive, fetched = yield from self._fail(
                    attempt, token, self._max_retries_error(), self.sim.scenario.attempts, reply.ran
                )
                if not alive:
                    return
                continue
            self._untrack(token, attempt.job, by_job)
            self.running.pop(token, None)
            self.started_ms.pop(token, None)
            self.sim.attempts_stopped(1)

    def _untrack(self, token: str, job_id: str, by_job: bool) -> None:
        """Stop renewing a finished job: its own entry, or (BullMQ's `untrackJob(job.id)`) every entry of its
        job id, a fresh copy's too."""
        self.tracked.pop(token, None)
        if by_job:
            for other in [t for t, h in self.tracked.items() if h.job == job_id]:
                del self.tracked[other]

    def _max_retries_error(self) -> str:
        return MAX_RETRIES_ERROR.format(n=self._max_retries)

    def _fail(
        self,
        attempt: AttemptDraft,
        token: str,
        reason: str,
        attempts: int = 1,
        finish_ran: bool | None = None,
    ) -> Proc:
        """moveToFinished(failed) for a job this worker holds, retried instead while the job's `attempts` are
        not used up (an unrecoverable failure passes 1). Returns (alive, fetched): alive is False if the
        worker died meanwhile; fetched is (token, Redis time) of the next job the failure took for this slot
        (`fetch_next`; a retry fetches none), else None. `finish_ran` (not None): it follows a finish ioredis
        rejected (BullMQ's handleFailed), True if that finish had run at Redis (then a refused move leaves
        the attempt's record as the finish left it). If ioredis rejects this one too, the finish is given up:
        the job stays active at Redis (`Server.finish_given_up`) and its lock lapses."""
        server = self.sim.server
        ran = self.ran_ms(token)
        if ran is not None and finish_ran is None:  # a sandboxed child ran it until it exited: it ends here
            self.sim.ledger.stopped(attempt, int(self.env.now), ran)
        fetched: tuple[str, int] | None = None

        nxt = ""
        if self.sim.policy.fetch_next:
            self.takes += 1
            nxt = f"{self.wid}:{self.takes}"

        def move(now: int) -> Any:
            if nxt:
                return server.finish_and_fetch(self, attempt, now, nxt, reason, attempts)
            return server.fail(attempt, now, reason, attempts)

        reply = yield from self.request("finish", server.resent(move) if finish_ran else move)
        if reply is None:
            return False, None
        if isinstance(reply, Rejected):
            if not reply.ran and not finish_ran:
                server.finish_given_up(attempt, int(self.env.now), self._max_retries_error())
        elif self.sim.policy.fetch_next and reply[1] is not None:
            fetched = (nxt, reply[2])
        if self.sim.policy.fetch_next and fetched is None:
            self._orphan(nxt)
        renewal = self.sim.policy.renewal
        self._untrack(token, attempt.job, renewal is not None and renewal.track_by == "job")
        self.running.pop(token, None)
        self.started_ms.pop(token, None)
        self.sim.attempts_stopped(1)
        return True, fetched

    def _orphan(self, token: str) -> None:
        """A job taken under `token` whose reply never reached this worker (the first run of a resent finish
        fetched it; the resent copy was refused): the worker never starts it; its lock lapses unrenewed."""
        if self.running.pop(token, None) is not None:
            self.sim.attempts_stopped(1)

    def _take_after_wakeup(self) -> Proc:
        """BullMQ's fetch: block on the queue's marker (BZPOPMIN, up to drainDelay), and only once the client
        has read the wake-up run moveToActive. A frozen or blocked worker reads no wake-up, so it is never
        handed a lock. Returns the token of the take that got a job, or None if the worker died."""
        server = self.sim.server
        while True:
            lost = self._lost("take")
            rtt_ms = self._rtt_ms()
            if lost:
                server.requests["marker"] = server.requests.get("marker", 0) + 1
                yield self.env.timeout(self._timeout_ms)
            else:
                yield server.send_marker_wait(self, rtt_ms)
            if not (yield from self.carry_on()):
                return None
            self.takes += 1
            token = f"{self.wid}:{self.takes}"
            got = yield from self.request("take", lambda now, t=token: server.move_to_active(self, t, now))
            if isinstance(got, Rejected):  # BullMQ's fetch loop emits the error and fetches again
                self._orphan(token)
                continue
            if got is None and self.state == DEAD:
                return None
            if got is not None and got is not LOST:
                return token
            # Nothing taken: but the first run of a resent take may have taken a job, whose reply the drop
            # caught (the copy found `wait` empty): the worker never starts it; its lock lapses unrenewed.
            self._orphan(token)

    def start_sweeper(self, first_ms: int, check_rng: np.random.Generator | None = None) -> None:
        """Start the worker's stalled checks (`emqsim.checks`, `check_rng`: their own round trips) when its
        requests are not lost; else (or without `check_rng`) the client's sweep timer, as the reaper's."""
        if check_rng is not None and (self._loss <= 0 or not self._loss_all):
            start_checks(self, first_ms, check_rng)
        else:
            super().start_sweeper(first_ms)

    def tick_skipped(self, due: list[tuple[str, str]], now: int) -> bool:
        """Whether this renewal-timer tick renews none of its `due` jobs (`Network.skipped_ticks`: with that
        probability, drawn from the worker's own "ticks" stream; never, and no draw, without it). A skipped
        tick sends nothing and leaves the jobs' `ts`, so the next tick finds them due (BullMQ's strict check
        failing at exactly lockRenewTime/2); it is recorded as `renew_skipped`. Explore places skips
        instead (`skip_at`, in time order): the first due tick at or after each is skipped."""
        skip_at = self.skip_at
        if skip_at and now >= skip_at[0]:
            del skip_at[0]
            self.sim.server.renewal_skipped(due, now)
            return True
        rng = self.skip_rng
        if rng is None or rng.random() >= self._skip:
            return False
        self.sim.server.renewal_skipped(due, now)
        return True

    def start_lock_manager(self, first_ms: int) -> None:
        """Start the lock manager (`lock_manager`), as the callback-driven `_LockManager` (same steps)."""
        if _client._ELISION:  # the one switch, with the stalled-check timer's
            _LockManager(self, first_ms)
        else:
            self.env.process(self.lock_manager(first_ms))

    def lock_manager(self, first_ms: int) -> Proc:
        """ONE timer renews every due lease of this worker in ONE batched round trip."""
        rule = self.sim.policy.renewal
        assert rule is not None, "only a policy with a renewal rule starts a lock manager"
        server = self.sim.server
        yield self.env.timeout(first_ms)
        next_tick = int(self.env.now)
        while True:
            if not (yield from self.carry_on()):
                return
            now = fired_at = int(self.env.now)
            due = [(h.job, token) for token, h in self.tracked.items() if rule.due(now, h.ts)]
            if due and not self.tick_skipped(due, now):
                for _, token in due:
                    self.tracked[token].ts = now
                failed = yield from self.request("renew", lambda t, d=due: server.renew(d, t), retry=False)
                if failed is None:
                    return
                if isinstance(failed, Rejected):
                    if not failed.ran:
                        server.renewal_lost(due, now)
                elif failed is LOST:
                    server.renewal_lost(due, now)
                else:
                    for token in failed:
                        self.tracked.pop(token, None)  # lockRenewalFailed: stop renewing a lost lock
            if rule.after_reply:
                yield self.env.timeout(rule.tick_ms)
            else:
                # Fixed rate on the original grid; ticks missed while frozen (or while a reply was awaited)
                # are not replayed: one fires when the process can act again (Node's setInterval and
                # Erlang's interval timers fire once when the process resumes), the rest are skipped.
                now = int(self.env.now)
                next_tick += rule.tick_ms
                if next_tick <= fired_at:  # ticks due while frozen before this one fired: it stood for them
                    next_tick += ((fired_at - next_tick) // rule.tick_ms + 1) * rule.tick_ms
                if next_tick <= now:  # came due while the reply was awaited (frozen or disconnected then):
                    next_tick += (now - next_tick) // rule.tick_ms * rule.tick_ms  # it fires once, now
                yield self.env.timeout(max(0, next_tick - now))

    def job_renewer(self, token: str) -> Proc:
        """The naive variant: one timer and one round trip per job."""
        rule = self.sim.policy.renewal
        assert rule is not None, "only a policy with a renewal rule starts job renewers"
        server = self.sim.server
        while True:
            yield self.env.timeout(rule.tick_ms)
            if not (yield from self.carry_on()):
                return
            tracked = self.tracked.get(token)
            if tracked is None:
                return
            now = int(self.env.now)
            if not rule.due(now, tracked.ts):
                continue
            item = [(tracked.job, token)]
            if self.tick_skipped(item, now):
                continue
            tracked.ts = now
            failed = yield from self.request("renew", lambda t, d=item: server.renew(d, t), retry=False)
            if failed is None:
                return
            if isinstance(failed, Rejected):
                if not failed.ran:
                    server.renewal_lost(item, now)
            elif failed is LOST:
                server.renewal_lost(item, now)
            elif failed:
                self.tracked.pop(token, None)
                return
