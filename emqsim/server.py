"""The simulated Redis: one key store, the queue's atomic operations, and the network between it and clients.

A client's request travels half a round trip, runs atomically at Redis's clock (like a Lua script), and the
reply travels back. Requests that reach Redis in the same millisecond run in the order they were sent (SimPy
processes equal-time events first in, first out). A blocking take (BLMOVE) that finds `wait` empty parks the
client, and Redis serves parked clients first come, first served as jobs are pushed, as real Redis does; a
crashed client's connection is closed, so it is never served.

Everything a server-side step does to a job's attempt or lock is recorded here, at server time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from emqsim._simpy_fast import clock, replier
from emqsim.keys import QueueKeys
from emqsim.ledger import AttemptDraft, Ledger
from emqsim.policies import ReclaimPolicy, SweepShortcut
from emqsim.protocol import READONLY, FinishReply, Queue, SweepReply
from emqsim.store import KeyStore
from emqsim.store.eviction import EvictingKeyStore, Eviction
from emqsim.store.journal import Journal

LOST = object()  # a reply that never came: the request was lost on the way
SCRIPT = "EVALSHA"  # how a client calls the queue's scripts (its latency histogram under maxmemory)


class ServerHost(Protocol):
    """What the server asks of the simulation around it."""

    def worker_state(self, wid: int) -> str:
        """The state a record reports for worker `wid` now (alive, frozen, blocked, disconnected, dead)."""
        ...

    def job_settled(self, job_id: str) -> None:
        """The job reached completed or failed."""
        ...

    def finish_applied(self, job_id: str) -> None:
        """Redis ran a finish (or a holder's fail) of one of the job's attempts."""
        ...


class RateLimitWatcher(Protocol):
    """Who plans the workers' stalled checks ahead (`checks.SweepCoordinator`): told when the stalled-check
    key changes other than by expiring (a sweep that passed, a failover, a maxmemory eviction), and asked to
    count the refused checks it has not counted yet before the run's counters are read."""

    def key_changed(self, expire_at: int | None) -> None: ...

    def flush(self) -> None: ...


class Connection(Protocol):
    """A worker as Redis sees it: its connection, its outages, and where a take's job goes."""

    wid: int
    outages: list[tuple[int, int, int]]

    @property
    def connected(self) -> bool: ...

    def route(self, rtt_ms: int) -> tuple[int, int]: ...

    def reply_delay(self, now: int, back_ms: int) -> int: ...

    def on_taken(self, job_id: str, attempt: AttemptDraft) -> None: ...


@dataclass(frozen=True)
class TieBreak:
    """How Redis orders steps that fall in the same millisecond. The default is the engine's fixed rule:
    requests run in the order they were sent (`arrivals="sent"`), and a lock is still visible in its expiry
    millisecond, so a step landing then runs before the expiry (`expiry="after"`); a fault takes its place
    among its millisecond's events in the order they were scheduled (`fault_last=False`).
    `arrivals="reversed"` runs a millisecond's requests in the reverse order; `expiry="before"` lets a lock
    expire before any step of its expiry millisecond; `fault_last=True` makes a fault strike after the other
    events of its millisecond (a renewal tick in the same ms goes out first). Only the default is the
    engine's rule; the others let `emqsim.explore` check which properties depend on it."""

    arrivals: str = "sent"  # "sent" | "reversed"
    expiry: str = "after"  # "after" | "before"
    fault_last: bool = False

    def __post_init__(self) -> None:
        if self.arrivals not in ("sent", "reversed") or self.expiry not in ("after", "before"):
            raise ValueError(f"unknown tie-break {self!r}: arrivals sent|reversed, expiry after|before")

    @property
    def default(self) -> bool:
        return self.arrivals == "sent" and self.expiry == "after" and not self.fault_last

    @property
    def reorders_redis(self) -> bool:
        return self.arrivals != "sent" or self.expiry != "after"


class Server:
    """Redis plus the bookkeeping that turns its steps into records."""

    def __init__(
        self,
        env: simpy.Environment,
        policy: ReclaimPolicy,
        keys: QueueKeys,
        store_rng: Any,
        ledger: Ledger,
        host: ServerHost,
        *,
        remove_on_complete: bool = False,
        tie_break: TieBreak | None = None,
        hz: int = 10,
        eviction: Eviction | None = None,
        eviction_rng: Any = None,
    ) -> None:
        """`ledger` records every step; `host` answers worker states and hears of settled jobs and applied
        finishes. `hz`: Redis's active expire cycles per second; `eviction`: maxmemory and its policy, with
        `eviction_rng` for its samples."""
        self.env = env
        self.host = host
        shortcut: SweepShortcut | None = policy if hasattr(policy, "sweep_refused") else None
        self._sweep_refused = None if shortcut is None else shortcut.sweep_refused
        self.policy = policy
        self.keys = keys
        # The store reads the clock once per command; the simulation's time is integer ms throughout.
        # With `eviction` (maxmemory), Redis evicts before each client command (`before_command`).
        self.evicting: EvictingKeyStore | None = None
        if eviction is None:
            self.store = KeyStore(clock(env), rng=store_rng, on_evict=self._on_evict)
        else:
            self.store = self.evicting = EvictingKeyStore(
                clock(env),
                eviction,
                evict_rng=eviction_rng,
                rng=store_rng,
                on_evict=self._on_evict,
                on_memory_evict=self._on_memory_evict,
            )
        self.store.on_ttl = self._ttl_set
        self.queue = Queue(self.store, keys, remove_on_complete=remove_on_complete)
        self.ledger = ledger  # the one writer of attempts, lock events and sweeps
        self.record_locks = ledger.record_locks
        self.streaming = ledger.streaming
        self.requests: dict[str, int] = {}
        self.blocked: deque[tuple[Connection, str, simpy.Event, int]] = deque()
        # Parked BZPOPMIN calls on the queue's marker (takes after wake-up): [worker, reply, back_ms, done].
        self.marker_waiters: deque[list[Any]] = deque()
        self.doomed: set[str] = set()  # tokens of takes that got a job marked to fail (`defa`)
        # A failover's lag window (`Outage.lost_writes`): the store's journal, and the queue steps it would undo
        # that the records need to know of: ("settled", job) for a finish or a fail, ("added", job) for an add.
        self.journal: Journal | None = None
        self.window_steps: list[tuple[str, str]] = []
        self.lost_jobs: list[str] = []  # jobs whose add a failover lost: they never run
        # [from, until) ms at Redis in which the clients' writes reach a demoted primary (`Outage.readonly`)
        self.readonly: list[tuple[int, int]] = []
        self.settled = 0  # jobs that reached completed or failed
        self.resident_peak = 0
        self.expire_period_ms = max(1, 1000 // hz)
        self._expire_planned: int | None = None
        self._expire_wakeup = env.event()
        # A non-default tie-break queues each millisecond's arrivals and runs them at the millisecond's end.
        self.tie_break = tie_break if tie_break is not None and tie_break.reorders_redis else None
        # _reply(event, result, back_ms): the reply reaches the client `back_ms` from now.
        self._reply = replier(env)
        self._tied: list[Callable[[], None]] = []
        self.resending = False  # a resent copy of a command that already ran is running (`resent`)
        self.rate_limit_watcher: RateLimitWatcher | None = None  # see RateLimitWatcher

    def _rate_limit_changed(self) -> None:
        """Tell the watcher (if any) the stalled-check key's expiry now (None: the key is gone)."""
        if self.rate_limit_watcher is not None:
            self.rate_limit_watcher.key_changed(self.store.expire_at(self.keys.stalled_check))

    # -- transport ---------------------------------------------------------------------------------------
    def send(self, kind: str, op: Callable[[int], Any], rtt_ms: int, lost: bool) -> simpy.Event:
        """Send a request; the returned event fires with the reply when it gets back to the client."""
        self.requests[kind] = self.requests.get(kind, 0) + 1
        reply = self.env.event()
        if lost:
            return reply  # the client times out on its own
        out_ms = rtt_ms // 2
        back_ms = rtt_ms - out_ms

        def arrive(_: simpy.Event) -> None:
            if self.evicting is not None:
                self.evicting.perform_evictions(SCRIPT)
            result = op(int(self.env.now))
            self._reply(reply, result, back_ms)

        self.env.timeout(out_ms).callbacks.append(arrive if self.tie_break is None else self._queued(arrive))
        return reply

    def send_split(self, kind: str, op: Callable[[int], Any], out_ms: int, back_ms: int) -> simpy.Event:
        """`send` with the two legs given (a client whose connection has outages routes its own)."""
        self.requests[kind] = self.requests.get(kind, 0) + 1
        reply = self.env.event()

        def arrive(_: simpy.Event) -> None:
            if self.evicting is not None:
                self.evicting.perform_evictions(SCRIPT)
            self._reply(reply, op(int(self.env.now)), back_ms)

        self.env.timeout(out_ms).callbacks.append(arrive if self.tie_break is None else self._queued(arrive))
        return reply

    def _queued(self, step: Callable[[Any], None]) -> Callable[[Any], None]:
        """`step`, held back to the end of its millisecond and run there in the tie-break's order."""

        def queue(event: Any) -> None:
            if not self._tied:
                self.env.timeout(0).callbacks.append(self._run_tied)
            self._tied.append(lambda: step(event))

        return queue

    def _run_tied(self, _: Any) -> None:
        assert self.tie_break is not None  # only queued under a reordering tie-break
        steps, self._tied = self._tied, []
        if self.tie_break.arrivals == "reversed":
            steps.reverse()
        for step in steps:
            if self.tie_break.expiry == "before":
                self._expire_locks_now()
            step()

    def _expire_locks_now(self) -> None:
        """Locks whose expiry millisecond is now expire before the next step (tie-break expiry="before")."""
        now = int(self.env.now)
        for job_id in self.ledger.active_jobs():
            key = self.keys.lock(job_id)
            if self.store.expire_at(key) == now:
                self.store.delete(key)

    def resent(self, op: Callable[[int], Any]) -> Callable[[int], Any]:
        """`op` run as the resent copy of a command that already ran (`Network.resend_twice`): its steps
        happen at Redis again, but a refused finish or fail leaves the attempt's record as the first run
        left it."""

        def again(now: int) -> Any:
            self.resending = True
            try:
                return op(now)
            finally:
                self.resending = False

        return again

    def send_take(self, worker: Connection, token: str, rtt_ms: int, lost: bool) -> simpy.Event:
        """BLMOVE-style take: served now if `wait` has a job, else parked until one arrives."""
        self.requests["take"] = self.requests.get("take", 0) + 1
        reply = self.env.event()
        if lost:
            return reply
        if worker.outages:
            out_ms, back_ms = worker.route(rtt_ms)
        else:
            out_ms = rtt_ms // 2
            back_ms = rtt_ms - out_ms
        raw_back_ms = rtt_ms - rtt_ms // 2

        def arrive(_: simpy.Event) -> None:
            if not worker.connected:
                return
            if self.evicting is not None:
                self.evicting.perform_evictions(SCRIPT)
            if self.readonly and self.refused(int(self.env.now)):
                self._reply(reply, None, back_ms)  # READONLY: no job (BullMQ fetches again at once)
                return
            job_id = self._take(worker, token, int(self.env.now))
            if job_id is None:
                self.blocked.append((worker, token, reply, raw_back_ms))
            else:
                self._reply(reply, job_id, back_ms)

        self.env.timeout(out_ms).callbacks.append(arrive if self.tie_break is None else self._queued(arrive))
        return reply

    def serve_blocked(self) -> None:
        """Hand newly pushed jobs to parked takers, first come first served (skipping closed connections);
        with takes after wake-up, wake parked marker waiters instead, one per job waiting."""
        now = int(self.env.now)
        while self.blocked and self.store.peek_len(self.keys.wait) > 0:  # Redis itself: not a command
            worker, token, reply, back_ms = self.blocked.popleft()
            if not worker.connected:
                continue
            job_id = self._take(worker, token, now)
            if worker.outages:
                back_ms = worker.reply_delay(now, back_ms)
            self._reply(reply, job_id, back_ms)
        if self.marker_waiters:
            woken = 0
            waiting = self.store.peek_len(self.keys.wait)
            while self.marker_waiters and woken < waiting:
                entry = self.marker_waiters.popleft()
                worker, reply, back_ms, done = entry
                if done or not worker.connected:
                    continue
                entry[3] = True
                woken += 1
                self._marker_wait_done()
                self._reply(reply, True, worker.reply_delay(now, back_ms) if worker.outages else back_ms)

    def send_marker_wait(self, worker: Connection, rtt_ms: int) -> simpy.Event:
        """BZPOPMIN on the queue's marker with drainDelay as its timeout: the reply (True: woken by a job,
        False: timed out) comes when a job is pushed, at once if one is waiting, or after drainDelay."""
        self.requests["marker"] = self.requests.get("marker", 0) + 1
        reply = self.env.event()
        if worker.outages:
            out_ms, _ = worker.route(rtt_ms)
        else:
            out_ms = rtt_ms // 2
        back_ms = rtt_ms - rtt_ms // 2
        drain_ms = self.policy.drain_delay_ms

        def arrive(_: simpy.Event) -> None:
            if not worker.connected:
                return
            if self.evicting is not None:
                self.evicting.perform_evictions()
            now = int(self.env.now)
            if self.readonly and self.refused(now):  # BZPOPMIN writes: READONLY, answered at once
                self._reply(reply, False, worker.reply_delay(now, back_ms) if worker.outages else back_ms)
                return
            if self.store.peek_len(self.keys.wait) > 0:
                self._marker_wait_done()
                self._reply(reply, True, worker.reply_delay(now, back_ms) if worker.outages else back_ms)
                return
            entry = [worker, reply, back_ms, False]
            self.marker_waiters.append(entry)

            def expire(_: simpy.Event) -> None:
                if not entry[3]:
                    entry[3] = True  # timed out: no latency histogram (Redis 7.0 updates none then)
                    t = int(self.env.now)
                    self._reply(reply, False, worker.reply_delay(t, back_ms) if worker.outages else back_ms)

            self.env.timeout(drain_ms).callbacks.append(expire)

        self.env.timeout(out_ms).callbacks.append(arrive)
        return reply

    def _marker_wait_done(self) -> None:
        """A BZPOPMIN has returned a marker: from now on it has its latency histogram (a blocked one gets it
        when a push wakes it, none when it times out: redis-server 7.0.15, tests/test_eviction.py)."""
        if self.evicting is not None:
            self.evicting.command_done("BZPOPMIN")

    def move_to_active(self, worker: Connection, token: str, now: int) -> str | None:
        """moveToActive sent after a wake-up: the take itself (None if `wait` is empty by then)."""
        if not worker.connected:
            return None
        if self.evicting is not None:
            self.evicting.perform_evictions(SCRIPT)
        if self.readonly and self.refused(now):
            return None  # READONLY
        return self._take(worker, token, now)

    # -- server-side steps -------------------------------------------------------------------------------
    def add_job(self, job_id: str, work: float) -> None:
        if self.evicting is not None:
            self.evicting.perform_evictions(SCRIPT)
        self.ledger.arrived(job_id, work)
        self.queue.add(job_id)
        if self.journal is not None:
            self.window_steps.append(("added", job_id))
        self.serve_blocked()

    def _take(self, worker: Connection, token: str, now: int) -> str | None:
        job_id = self.policy.take(self.queue, token, now)
        if job_id is None:
            return None
        if self.policy.lazy_fail and self.store.hget(self.keys.job(job_id), "defa") is not None:
            self.doomed.add(token)
        # A take sent just before its worker crashed runs with its worker dead.
        attempt = self.ledger.taken(job_id, worker.wid, token, now, worker_dead=not worker.connected)
        worker.on_taken(job_id, attempt)
        if self.record_locks and (self.policy.renewal is not None or self.policy.fenced):
            self._lock_event(now, job_id, token, "set")
        return job_id

    def renew(self, held: list[tuple[str, str]], now: int) -> list[str]:
        """Run the policy's batched renewal; returns the TOKENS whose renewal failed.

        The policy answers with job ids (as extendLocks does); when one worker holds the same job twice (a
        stale take and a new one), the lock's current value tells which of the two tokens failed.
        """
        if self.readonly and self.refused(now):  # READONLY: nothing extended, the lock manager tries again
            if self.record_locks:
                for job_id, token in held:
                    self._lock_event(now, job_id, token, "renew_failed", detail="READONLY")
            return []
        failed_jobs = self.policy.renew(self.queue, held, now)
        failed = []
        if failed_jobs:
            failed_set = frozenset(failed_jobs)
            jobs = [job_id for job_id, _ in held]
            for job_id, token in held:
                if job_id in failed_set and (
                    jobs.count(job_id) == 1 or self.store.peek(self.keys.lock(job_id)) != token
                ):
                    failed.append(token)
        if self.record_locks:
            failed_tokens = frozenset(failed)
            for job_id, token in held:
                self._lock_event(now, job_id, token, "renew_failed" if token in failed_tokens else "renewed")
        return failed

    def renewal_lost(self, held: list[tuple[str, str]], sent_ms: int) -> None:
        """Record renewals that never reached Redis (at the time they were sent)."""
        if self.record_locks:
            self.ledger.renewals_lost(held, sent_ms)

    def renewal_skipped(self, held: list[tuple[str, str]], now_ms: int) -> None:
        """Record due renewals a skipped timer tick did not send (`Network.skipped_ticks`)."""
        if self.record_locks:
            self.ledger.renewals_skipped(held, now_ms)

    def finish(self, attempt: AttemptDraft, now: int) -> FinishReply:
        if self.readonly and self.refused(now):
            return self._finish_refused(attempt, now)
        reply = self.policy.finish(self.queue, attempt.job, attempt.token, now)
        if self.resending and not reply.accepted:
            return reply  # the resent copy of a finish that already ran: refused, nothing new to record
        self.ledger.finish_applied(attempt, now, reply.error)
        if reply.accepted and self.record_locks and self.policy.fenced:
            self._lock_event(now, attempt.job, attempt.token, "released")
        if reply.was_active:
            self.settled += 1
            if self.journal is not None:
                self.window_steps.append(("settled", attempt.job))
            self.host.job_settled(attempt.job)
        self.host.finish_applied(attempt.job)
        return reply

    def finish_and_fetch(
        self,
        worker: Connection,
        attempt: AttemptDraft,
        now: int,
        token: str,
        failed: str | None = None,
        attempts: int = 1,
    ) -> tuple[FinishReply, str | None, int]:
        """moveToFinished with fetchNext (BullMQ, `fetch_next`): the finish (or with `failed`, the holder's
        move to failed) and, if it was accepted, the next waiting job taken for the same slot under `token`
        in the same atomic step (moveToFinished-14.lua:213-221, fetchNextJob.lua's RPOPLPUSH and
        prepareJobForProcessing's lock). Returns the reply, the token if a job was taken (else None), and now."""
        reply = self.finish(attempt, now) if failed is None else self.fail(attempt, now, failed, attempts)
        if not reply.accepted or reply.retried:
            return reply, None, now  # an error returns before fetchNextJob; retryJob fetches nothing
        # The script runs in full even if its sender died after sending it (the request was on the wire):
        # the job is then locked to a dead worker and waits out the lease.
        return reply, (token if self._take(worker, token, now) is not None else None), now

    def refused(self, now: int) -> bool:
        """Whether a client's write reaching Redis at `now` lands on a demoted primary (READONLY)."""
        return any(begin <= now < end for begin, end in self.readonly)

    # -- a failover that loses the writes of its lag window ---------------------------------------------------
    def start_lag_window(self) -> None:
        """From now on every write may be lost by a failover (`fail_over`): journal the store."""
        if self.journal is None:
            self.journal = Journal(self.store)
            self.journal.start()
            self.window_steps = []

    def fail_over(self) -> list[tuple[str, str]]:
        """The failover: the promoted replica never got the writes since `start_lag_window`. Every key they
        touched is put back; a lock that changed is a `lost_in_failover` lock event (back to its earlier
        holder and expiry, or gone); returns the window's queue steps (`window_steps`) whose effect is gone,
        for the simulation to correct its counts: a lost finish makes its job run again, a lost add loses
        the job (a lost take's job is back in `wait`, and its worker's finish will be refused)."""
        journal = self.journal
        if journal is None:
            return []
        self.journal = None
        now = int(self.env.now)
        for key, current, restored, expiry in journal.undo():
            job_id = self.keys.job_id_of_lock(key)
            if job_id is not None and self.record_locks and isinstance(current or restored, str):
                token = (
                    current if isinstance(current, str) else (restored if isinstance(restored, str) else None)
                )
                alive = isinstance(restored, str) and (expiry is None or expiry >= now)
                self.ledger.lock_restored(
                    now, job_id, token or "", expiry / 1000 if alive and expiry else None
                )
        self._rate_limit_changed()  # the stalled-check key may be back to its earlier state, or gone
        steps, self.window_steps = self.window_steps, []
        undone: list[tuple[str, str]] = []
        for kind, job_id in steps:
            if kind == "settled":
                self.settled -= 1
                undone.append((kind, job_id))
            elif kind == "added" and self.store.peek(self.keys.job(job_id)) is None:
                self.lost_jobs.append(job_id)
                undone.append((kind, job_id))
        return undone

    def _finish_refused(self, attempt: AttemptDraft, now: int) -> FinishReply:
        """A finish (or a fail) refused with READONLY: BullMQ's moveToFailed after it is refused too, so the
        worker gives the job up; it stays `active` where the clients will be, and is reclaimed later."""
        reply = FinishReply(attempt.job, READONLY, was_active=False)
        self.ledger.finish_applied(attempt, now, reply.error)
        self.host.finish_applied(attempt.job)
        return reply

    def finish_given_up(self, attempt: AttemptDraft, now: int, error: str) -> None:
        """A finish its worker gave up without Redis running it: ioredis rejected it and the moveToFailed
        after it (`Network.max_retries_per_request`) with `error`. Recorded as a refused finish; the job
        stays `active` with its lock, which lapses, and is reclaimed later."""
        self.ledger.finish_applied(attempt, now, error)
        self.host.finish_applied(attempt.job)

    def fail(self, attempt: AttemptDraft, now: int, reason: str, attempts: int = 1) -> FinishReply:
        """moveToFinished(failed) by the holder: token-checked; the job goes to `failed`, or with `attempts`
        left back to `wait` (retried: the attempt failed, the job did not settle)."""
        if self.readonly and self.refused(now):
            return self._finish_refused(attempt, now)
        reply = self.queue.fail(attempt.job, attempt.token, check_token=self.policy.fenced, attempts=attempts)
        if self.resending and not reply.accepted:
            return reply  # the resent copy of a fail that already ran
        failed = reply.accepted and reply.was_active
        self.ledger.fail_applied(attempt, now, failed, reply.error)
        if failed and self.record_locks:
            self._lock_event(now, attempt.job, attempt.token, "released", detail=reason)
        if reply.retried:
            self.serve_blocked()
        elif reply.was_active:
            self.settled += 1
            if self.journal is not None:
                self.window_steps.append(("settled", attempt.job))
            self.host.job_settled(attempt.job)
        self.host.finish_applied(attempt.job)
        return reply

    def sweep_refused(self, arrival_ms: int) -> bool:
        """A sweep sent now that is certain to be refused at `arrival_ms` (see `policies.SweepShortcut`, which
        a policy may implement) is counted here, one request and its one `EXISTS`, and sends nothing: the
        sender just waits out the round trip. Skipped sweeps leave no record either way."""
        refused = self._sweep_refused
        if refused is None or not refused(self.queue, arrival_ms):
            return False
        self.requests["sweep"] = self.requests.get("sweep", 0) + 1
        self.store.count_command("EXISTS")
        return True

    def count_refused_sweeps(self, n: int) -> None:
        """Count `n` sweeps refused by the rate limit (one request and one `EXISTS` each) at once: the ones a
        sweep coordinator worked out without sending them (see `sweep_refused`)."""
        self.requests["sweep"] = self.requests.get("sweep", 0) + n
        self.store.count_command("EXISTS", n)

    def idle_reap(self, by: str, now: int, timeout_ms: int) -> bool:
        """A timeout reap reaching Redis now that is certain to read and reclaim nothing (`Queue.idle_reap`),
        done without running it (issue 27): its commands counted, its sweep record kept as `sweep` keeps it,
        and True. False, with nothing done, where a reap's reads may do more: in a READONLY or a failover's
        lag window (the journal hooks every lookup), under maxmemory (LRU/LFU data) or a reordering
        tie-break, with a rate-limit watcher. The caller then runs the reap (`sweep`)."""
        if self.evicting is not None or self.journal is not None or self.tie_break is not None:
            return False
        if self.rate_limit_watcher is not None or (self.readonly and self.refused(now)):
            return False
        hgets = self.queue.idle_reap(now, timeout_ms)
        if hgets is None:
            return False
        store = self.store
        store.count_command("LRANGE")
        if hgets:
            store.count_command("HGET", hgets)
        if not self.streaming:
            self.ledger.sweep(now, by, False, (), (), 0)
        return True

    def sweep(self, by: str, now: int) -> SweepReply:
        if self.readonly and self.refused(now):
            return SweepReply(skipped=True)  # READONLY: the stalled check fails; the next one comes as usual
        reply = self.policy.sweep(self.queue, now)
        if not reply.skipped and self.rate_limit_watcher is not None:
            self._rate_limit_changed()  # it passed: the rate limit is set anew
        if not reply.skipped and not self.streaming:  # a sweep turned away by the rate limit: no record
            self.ledger.sweep(now, by, reply.skipped, reply.reclaimed, reply.failed, len(reply.marked))
        for job_id in reply.reclaimed:
            self._reclaimed(job_id, by, now, failed=False)
        for job_id in reply.failed:
            self._reclaimed(job_id, by, now, failed=True)
            self.settled += 1
            if self.journal is not None:
                self.window_steps.append(("settled", job_id))
            self.host.job_settled(job_id)
        if reply.reclaimed:
            self.serve_blocked()
        return reply

    def _reclaimed(self, job_id: str, by: str, now: int, failed: bool) -> None:
        attempt = self.ledger.current(job_id)
        if attempt is None:
            return
        self.ledger.reclaimed(job_id, by, now, failed, self.host.worker_state(attempt.worker))
        if self.record_locks and self.policy.fenced and self.policy.renewal is None:
            self._lock_event(now, job_id, attempt.token, "deleted")

    # -- records -----------------------------------------------------------------------------------------
    def _lock_event(self, now: int, job_id: str, token: str | None, kind: str, detail: str = "") -> None:
        expires = self.store.expire_at(self.keys.lock(job_id)) if kind in ("set", "renewed") else None
        self.ledger.lock(now, job_id, token, kind, expires, detail)

    def _on_evict(self, key: str, now: int, how: str) -> None:
        if not self.record_locks:
            return
        job_id = self.keys.job_id_of_lock(key)
        if job_id is not None:
            self.ledger.lock(now, job_id, None, "evicted", None, how)

    def _on_memory_evict(self, key: str, value: object, now: int) -> None:
        """maxmemory evicted `key`: a lock (its token is the value) is a `memory_evicted` lock event."""
        if key == self.keys.stalled_check and self.rate_limit_watcher is not None:
            self.rate_limit_watcher.key_changed(None)  # the rate limit is gone (deleted right after this)
        if not self.record_locks:
            return
        job_id = self.keys.job_id_of_lock(key)
        if job_id is not None:
            token = value if isinstance(value, str) else None
            self.ledger.lock(
                now,
                job_id,
                token,
                "memory_evicted",
                None,
                self.evicting.eviction.policy if self.evicting else "",
            )

    def cache_write(self, key: str, value: str, ttl_ms: int) -> bool:
        """Another tenant's `SET key value PX ttl` (memory pressure); False if Redis refused it (OOM)."""
        evicting = self.evicting
        assert evicting is not None  # only a run with maxmemory has the other tenant
        evicting.perform_evictions()
        if evicting.out_of_memory:
            return False
        evicting.set(key, value, px=ttl_ms)
        evicting.command_done("SET")  # the other tenant's command: its histogram whatever the queue runs
        return True

    # -- Redis's active expire cycle ----------------------------------------------------------------------
    def expire_cycle(self) -> Generator[simpy.Event, Any, None]:
        """Redis's active expire cycle, `hz` times a second on the tick grid (a process the simulation
        starts). Ticks that provably find no logically expired key (none has `now > expire_at`) are
        skipped: they would evict nothing."""
        period = self.expire_period_ms
        store = self.store
        env = self.env
        while True:
            now = int(env.now)
            next_tick = (now // period + 1) * period
            earliest = store.next_expiry()
            if earliest is None:
                self._expire_planned = None
            else:
                first_useful = (earliest // period + 1) * period  # the first tick with now > earliest
                next_tick = max(next_tick, first_useful)
                self._expire_planned = next_tick
            self._expire_wakeup = env.event()
            if earliest is None:
                yield self._expire_wakeup
                continue
            timer = env.timeout(next_tick - now)
            yield timer | self._expire_wakeup
            if timer.processed:
                self.active_expire()

    def _ttl_set(self, when: int) -> None:
        """A key got an expiry: wake the expire cycle if that key expires before its planned tick."""
        planned = self._expire_planned
        if (planned is None or when < planned) and not self._expire_wakeup.triggered:
            self._expire_wakeup.succeed()

    def active_expire(self) -> None:
        self.resident_peak = max(self.resident_peak, self.store.resident_keys())
        self.store.active_expire_cycle()
