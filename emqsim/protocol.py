"""The queue protocol as atomic operations: what EchoMQ's (and BullMQ's) Lua scripts do inside Redis.

Each method runs at one instant of the store's clock with no other command in between, exactly as a Lua
script does, and issues ordinary Redis commands through the key store's typed calls (`KeyStore.get`, `set`,
...; each is its command exactly as `KeyStore.execute` runs it). The live mode runs the same operations as Lua
scripts on a real Redis (`emqsim/live/*.lua`); a test drives both and compares the keys.

Jobs enter `wait` on the left and are taken from the right (FIFO). Reclaimed jobs go back on the right, so
they are the next to be taken, as BullMQ does with stalled jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emqsim.keys import QueueKeys
from emqsim.store import KeyStore
from emqsim.store.values import RedisHash, RedisList

# moveToFinished's error codes and texts (BullMQ `scripts.finishedErrors`).
MISSING_LOCK = -2
NOT_IN_ACTIVE = -3
LOCK_MISMATCH = -6
READONLY = -100  # not a script's code: Redis refused the call (a demoted primary, `Outage.readonly`)
FINISH_ERRORS = {
    MISSING_LOCK: "Missing lock for job {id}",
    NOT_IN_ACTIVE: "Job {id} is not in the active state",
    LOCK_MISMATCH: "Lock mismatch for job {id}",
    READONLY: "READONLY You can't write against a read only replica.",
}


@dataclass(frozen=True, slots=True)
class FinishReply:
    """Outcome of a finish: code 0 accepted, else one of the moveToFinished error codes."""

    job_id: str
    code: int
    was_active: bool
    retried: bool = False  # a holder's failure with attempts left: the job went back to `wait`

    @property
    def accepted(self) -> bool:
        return self.code == 0

    @property
    def error(self) -> str | None:
        return None if self.accepted else FINISH_ERRORS[self.code].format(id=self.job_id)


@dataclass(frozen=True, slots=True)
class SweepReply:
    """Outcome of one sweep: skipped (rate-limited by `stalled-check`), jobs moved back, jobs failed, marked."""

    skipped: bool
    reclaimed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    marked: tuple[str, ...] = field(default=())


class Queue:
    """One queue's atomic operations against a key store."""

    def __init__(self, store: KeyStore, keys: QueueKeys, remove_on_complete: bool = False) -> None:
        self.store = store
        self.keys = keys
        self.remove_on_complete = remove_on_complete

    # -- producers ---------------------------------------------------------------------------------------
    def add(self, job_id: str) -> None:
        """Add a new job: its hash and its id on the left of `wait`."""
        store = self.store
        store.hset(self.keys.job(job_id), "ats", "0", "stc", "0")
        store.lpush(self.keys.wait, job_id)

    # -- workers -----------------------------------------------------------------------------------------
    def take(self, token: str, now_ms: int, lock_ms: int | None, set_lock: bool = True) -> str | None:
        """moveToActive: `wait` -> `active`, lock the job with the taker's token, count the attempt.

        `lock_ms` None with `set_lock` sets a lock without expiry (a fencing token only, for fenced timeouts).
        """
        store = self.store
        job_id = store.lmove(self.keys.wait, self.keys.active, from_left=False, to_left=True)
        if job_id is None:
            return None
        if set_lock:
            if lock_ms is None:
                store.set(self.keys.lock(job_id), token)
            else:
                store.set(self.keys.lock(job_id), token, px=lock_ms)
        job_key = self.keys.job(job_id)
        store.hincrby(job_key, "ats", 1)
        store.hset(job_key, "processedOn", str(now_ms))
        return job_id

    def extend_locks(
        self, held: list[tuple[str, str]], lock_ms: int, recreate_missing: bool = False
    ) -> list[str]:
        """extendLocks: token-checked renewal of many locks in one call; returns the ids that failed.

        With `recreate_missing` a missing lock is set again (a renewal without the token check's first half):
        the variant the theory notes contrast with BullMQ's, which never re-takes a lapsed lock.
        """
        store = self.store
        failed = []
        for job_id, token in held:
            lock_key = self.keys.lock(job_id)
            current = store.get(lock_key)
            if current == token or (recreate_missing and current is None):
                store.set(lock_key, token, px=lock_ms)
                store.srem(self.keys.stalled, job_id)
            else:
                failed.append(job_id)
        return failed

    def finish(self, job_id: str, token: str, check_token: bool) -> FinishReply:
        """moveToFinished: with `check_token`, a missing or foreign lock rejects the completion. A completed
        job's id goes to `completed`, or with `remove_on_complete` its hash is deleted instead."""
        store = self.store
        lock_key = self.keys.lock(job_id)
        if check_token:
            current = store.get(lock_key)
            if current is None:
                return FinishReply(job_id, MISSING_LOCK, was_active=False)
            if current != token:
                return FinishReply(job_id, LOCK_MISMATCH, was_active=False)
            store.delete(lock_key)
            store.srem(self.keys.stalled, job_id)
        removed = store.lrem(self.keys.active, -1, job_id)
        if removed == 0:
            if check_token:
                return FinishReply(job_id, NOT_IN_ACTIVE, was_active=False)
            # Unchecked (a plain reliable queue): the ack is accepted, but the job is no longer active (it was
            # reclaimed, and is waiting, running again or done), so the queue's structures are left alone.
            return FinishReply(job_id, 0, was_active=False)
        if self.remove_on_complete:
            store.delete(self.keys.job(job_id))
        else:
            store.sadd(self.keys.completed, job_id)
        return FinishReply(job_id, 0, was_active=True)

    def fail(self, job_id: str, token: str, check_token: bool = True, attempts: int = 1) -> FinishReply:
        """moveToFinished to `failed` by the job's holder (a sandboxed child's exit, a deferred failure):
        token-checked like a completion (unless `check_token` is False: an unfenced queue). With `attempts`
        (BullMQ's job option) not used up, the job is retried instead (retryJob-11.lua: lock removed, out of
        `active`, LPUSH to the back of `wait`, `atm` + 1; BullMQ decides `attemptsMade + 1 < attempts`
        client-side, job.js:452, from the same counter)."""
        store = self.store
        if check_token:
            lock_key = self.keys.lock(job_id)
            current = store.get(lock_key)
            if current is None:
                return FinishReply(job_id, MISSING_LOCK, was_active=False)
            if current != token:
                return FinishReply(job_id, LOCK_MISMATCH, was_active=False)
            store.delete(lock_key)
            store.srem(self.keys.stalled, job_id)
        if store.lrem(self.keys.active, -1, job_id) == 0:
            if check_token:
                return FinishReply(job_id, NOT_IN_ACTIVE, was_active=False)
            return FinishReply(job_id, 0, was_active=False)  # reclaimed meanwhile: left alone
        if attempts > 1:
            made = int(store.hget(self.keys.job(job_id), "atm") or 0)
            store.hincrby(self.keys.job(job_id), "atm", 1)
            if made + 1 < attempts:
                store.lpush(self.keys.wait, job_id)
                return FinishReply(job_id, 0, was_active=True, retried=True)
        store.sadd(self.keys.failed, job_id)
        return FinishReply(job_id, 0, was_active=True)

    # -- recovery ----------------------------------------------------------------------------------------
    def _requeue(self, job_id: str, max_stalled: int | None, lazy_fail: bool = False) -> bool:
        """Count a stall; back to `wait` (True) or to `failed` past `max_stalled` (False). With `lazy_fail`
        (BullMQ 6) a job past the limit is marked (`defa`) and still goes back to `wait`; its next taker
        fails it."""
        store = self.store
        stalled_count = store.hincrby(self.keys.job(job_id), "stc", 1)
        if max_stalled is not None and stalled_count > max_stalled:
            if lazy_fail:
                store.hset(self.keys.job(job_id), "defa", "job stalled more than allowable limit")
            else:
                store.sadd(self.keys.failed, job_id)
                return False
        store.rpush(self.keys.wait, job_id)
        return True

    def sweep_two_phase(
        self, now_ms: int, interval_ms: int, max_stalled: int | None, lazy_fail: bool = False
    ) -> SweepReply:
        """moveStalledJobsToWait: rate-limited by `stalled-check`; move marked jobs whose lock is gone, then
        mark every active job. A job is recovered only if it was active at the previous check, no renewal
        unmarked it since, and its lock is gone now."""
        store = self.store
        k = self.keys
        if store.exists(k.stalled_check):
            return SweepReply(skipped=True)
        store.set(k.stalled_check, str(now_ms), px=interval_ms)
        reclaimed: list[str] = []
        failed: list[str] = []
        stalling = store.smembers(k.stalled)
        if stalling:
            store.delete(k.stalled)
            for job_id in stalling:
                if not store.exists(k.lock(job_id)) and store.lrem(k.active, 1, job_id) > 0:
                    (reclaimed if self._requeue(job_id, max_stalled, lazy_fail) else failed).append(job_id)
        active = store.lrange(k.active, 0, -1)
        if active:
            store.sadd(k.stalled, *active)
        return SweepReply(False, tuple(reclaimed), tuple(failed), tuple(active))

    def sweep_rate_limited(self, arrival_ms: int) -> bool:
        """Whether a sweep reaching Redis at `arrival_ms` is certain to stop at `EXISTS stalled-check`: the
        key is set now with an expiry at or after `arrival_ms` (it is visible while `now <= expire_at`), and
        only a sweep that passes the check sets it, so nothing can change the answer before then."""
        expire_at = self.store.expire_at(self.keys.stalled_check)
        return expire_at is not None and arrival_ms <= expire_at

    def sweep_single_phase(self, now_ms: int, interval_ms: int, max_stalled: int | None) -> SweepReply:
        """One-pass variant: every active job whose lock is gone is moved at once (no marking round)."""
        store = self.store
        k = self.keys
        if store.exists(k.stalled_check):
            return SweepReply(skipped=True)
        store.set(k.stalled_check, str(now_ms), px=interval_ms)
        reclaimed: list[str] = []
        failed: list[str] = []
        for job_id in store.lrange(k.active, 0, -1):
            if not store.exists(k.lock(job_id)) and store.lrem(k.active, 1, job_id) > 0:
                (reclaimed if self._requeue(job_id, max_stalled) else failed).append(job_id)
        return SweepReply(False, tuple(reclaimed), tuple(failed))

    def reap(self, now_ms: int, timeout_ms: int, max_stalled: int | None = None) -> SweepReply:
        """The timeout reaper: any active job whose age `now - processedOn` is strictly over the timeout goes
        back to `wait` (its fencing lock, if any, is deleted so the old holder's finish is rejected)."""
        store = self.store
        k = self.keys
        reclaimed: list[str] = []
        failed: list[str] = []
        for job_id in store.lrange(k.active, 0, -1):
            started = store.hget(k.job(job_id), "processedOn")
            if started is not None and now_ms - int(started) > timeout_ms and store.lrem(k.active, 1, job_id):
                store.delete(k.lock(job_id))
                (reclaimed if self._requeue(job_id, max_stalled) else failed).append(job_id)
        return SweepReply(False, tuple(reclaimed), tuple(failed))

    def idle_reap(self, now_ms: int, timeout_ms: int) -> int | None:
        """If `reap(now_ms, timeout_ms)` is certain to be a pure read that reclaims nothing (no active job's
        `processedOn` is over the timeout, and no key it reads has a TTL, so no lazy expiry), how many `HGET`s
        it runs (one per active job, after its `LRANGE`); else None. Reads without running commands."""
        store = self.store
        active_key = self.keys.active
        active = store.resident_value(active_key)
        if active is None:
            return 0
        if type(active) is not RedisList or store.expire_at(active_key) is not None:
            return None
        prefix = self.keys.job("")  # a job's hash is this prefix + its id
        oldest = now_ms - timeout_ms  # a job taken before this is reclaimed (`now - processedOn > timeout`)
        value_at, expire_at = store.resident_value, store.expire_at
        for job_id in active:
            key = prefix + job_id
            job = value_at(key)
            if job is None:
                continue  # HGET of a missing hash: nil, nothing reclaimed
            if type(job) is not RedisHash or expire_at(key) is not None:
                return None
            started = job.get("processedOn")
            if started is not None and int(started) < oldest:
                return None
        return len(active)

    # -- what a detector needs (each is one atomic step, or a read inside one) ------------------------------
    def active_jobs(self) -> list[str]:
        """The ids of the jobs being worked on (the `active` list), oldest take last."""
        return self.store.lrange(self.keys.active, 0, -1)

    def holds(self, job_id: str, token: str) -> bool:
        """Whether the take `token` still holds the job's lock (nobody reclaimed or re-took it since)."""
        return self.store.get(self.keys.lock(job_id)) == token

    def reclaim(self, job_id: str, max_stalled: int | None = None) -> str | None:
        """Take an active job back from its worker, as a sweep does: out of `active`, its lock deleted (so
        the old holder's finish is rejected), its stall counter raised, and back to `wait` ("reclaimed"), or
        to `failed` once it stalled more than `max_stalled` times ("failed"). None if it was not active."""
        store = self.store
        if not store.lrem(self.keys.active, 1, job_id):
            return None
        store.delete(self.keys.lock(job_id))
        return "reclaimed" if self._requeue(job_id, max_stalled) else "failed"

    # -- inspection --------------------------------------------------------------------------------------
    def state_of(self, job_id: str) -> list[str]:
        """Which structures hold the job (for invariant checks); a healthy queue gives exactly one."""
        store = self.store
        k = self.keys
        where = []
        if job_id in store.lrange(k.wait, 0, -1):
            where.append("wait")
        if job_id in store.lrange(k.active, 0, -1):
            where.append("active")
        if store.execute("SISMEMBER", k.completed, job_id) or (
            self.remove_on_complete and not store.execute("EXISTS", k.job(job_id))
        ):
            where.append("completed")  # with remove_on_complete, a job whose hash is gone was completed
        if store.execute("SISMEMBER", k.failed, job_id):
            where.append("failed")
        return where
