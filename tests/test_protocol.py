"""The queue's atomic operations on the simulated store, step by step with a hand-driven clock."""

import pytest

from emqsim.keys import QueueKeys
from emqsim.protocol import LOCK_MISMATCH, MISSING_LOCK, NOT_IN_ACTIVE, Queue
from emqsim.store import KeyStore


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def q():
    clock = Clock()
    queue = Queue(KeyStore(clock), QueueKeys("q"))
    queue.clock = clock
    return queue


def test_keys_follow_echomq_layout():
    k = QueueKeys("mail")
    assert k.lock("42") == "emq:{mail}:42:lock"
    assert k.wait == "emq:{mail}:wait"
    assert k.active == "emq:{mail}:active"
    assert k.stalled == "emq:{mail}:stalled"
    assert k.stalled_check == "emq:{mail}:stalled-check"
    assert k.job_id_of_lock("emq:{mail}:42:lock") == "42"
    assert k.job_id_of_lock("emq:{mail}:wait") is None


def test_take_is_fifo_and_locks_with_token(q):
    for job in ("a", "b"):
        q.add(job)
    assert q.take("w1:1", 0, lock_ms=30_000) == "a"
    x = q.store.execute
    assert x("GET", q.keys.lock("a")) == "w1:1"
    assert x("PTTL", q.keys.lock("a")) == 30_000
    assert x("HGET", q.keys.job("a"), "ats") == "1"
    assert x("LRANGE", q.keys.active, 0, -1) == ["a"]
    assert q.take("w1:2", 0, lock_ms=30_000) == "b"
    assert q.take("w1:3", 0, lock_ms=30_000) is None


def test_extend_is_token_checked_and_unmarks(q):
    q.add("a")
    q.take("w1:1", 0, lock_ms=1000)
    q.store.execute("SADD", q.keys.stalled, "a")
    q.clock.now = 900
    assert q.extend_locks([("a", "w1:1")], 1000) == []
    assert q.store.execute("PTTL", q.keys.lock("a")) == 1000
    assert q.store.execute("SISMEMBER", q.keys.stalled, "a") == 0
    assert q.extend_locks([("a", "w2:9")], 1000) == ["a"]  # foreign token: refused


def test_renewal_at_the_expiry_millisecond_succeeds_one_later_fails(q):
    q.add("a")
    q.take("t", 0, lock_ms=1000)
    q.clock.now = 1000  # expire_at = 1000: still visible (strict now > expire_at)
    assert q.extend_locks([("a", "t")], 1000) == []
    q.clock.now = 2001  # one past the renewed expiry
    assert q.extend_locks([("a", "t")], 1000) == ["a"]


def test_lapsed_lock_is_never_retaken_but_recreate_variant_does(q):
    q.add("a")
    q.take("t", 0, lock_ms=1000)
    q.clock.now = 1001
    assert q.extend_locks([("a", "t")], 1000) == ["a"]
    assert q.extend_locks([("a", "t")], 1000, recreate_missing=True) == []
    assert q.store.execute("GET", q.keys.lock("a")) == "t"


def test_finish_checks_the_token(q):
    q.add("a")
    q.take("t1", 0, lock_ms=1000)
    reply = q.finish("a", "other", check_token=True)
    assert reply.code == LOCK_MISMATCH and reply.error == "Lock mismatch for job a"
    q.clock.now = 1001
    reply = q.finish("a", "t1", check_token=True)
    assert reply.code == MISSING_LOCK and reply.error == "Missing lock for job a"
    assert q.state_of("a") == ["active"]


def test_finish_accepts_and_moves_to_completed(q):
    q.add("a")
    q.take("t1", 0, lock_ms=1000)
    reply = q.finish("a", "t1", check_token=True)
    assert reply.accepted and reply.was_active
    assert q.state_of("a") == ["completed"]
    assert q.store.execute("EXISTS", q.keys.lock("a")) == 0


def test_remove_on_complete_deletes_the_job_instead_of_keeping_it():
    queue = Queue(KeyStore(lambda: 0), QueueKeys("q"), remove_on_complete=True)
    for job in ("a", "b"):
        queue.add(job)
    queue.take("t1", 0, lock_ms=1000)
    assert queue.finish("a", "t1", check_token=True).accepted
    x = queue.store.execute
    assert x("EXISTS", queue.keys.job("a")) == 0 and x("SCARD", queue.keys.completed) == 0
    assert sorted(x("KEYS", "*")) == sorted([queue.keys.job("b"), queue.keys.wait])  # the waiting job only
    assert queue.state_of("a") == ["completed"] and queue.state_of("b") == ["wait"]


def test_finish_of_job_not_active_is_rejected_when_checked(q):
    q.add("a")
    q.take("t1", 0, lock_ms=None)  # a fencing lock without expiry
    q.store.execute("LREM", q.keys.active, 0, "a")
    assert q.finish("a", "t1", check_token=True).code == NOT_IN_ACTIVE


def test_unchecked_late_finish_is_accepted_but_leaves_structures_alone(q):
    q.add("a")
    q.take("t1", 0, lock_ms=None, set_lock=False)
    q.clock.now = 700_000
    assert q.reap(q.clock.now, 600_000).reclaimed == ("a",)
    assert q.state_of("a") == ["wait"]
    reply = q.finish("a", "t1", check_token=False)  # the slow worker's late ack
    assert reply.accepted and not reply.was_active
    assert q.state_of("a") == ["wait"]


def test_two_phase_sweep_marks_then_moves(q):
    q.add("a")
    q.take("t", 0, lock_ms=1000)
    first = q.sweep_two_phase(0, 5000, max_stalled=1)
    assert not first.skipped and first.marked == ("a",) and first.reclaimed == ()
    assert q.sweep_two_phase(10, 5000, max_stalled=1).skipped  # stalled-check rate limit
    q.clock.now = 5001  # stalled-check (PX 5000 set at 0) has expired; the lock too
    second = q.sweep_two_phase(5001, 5000, max_stalled=1)
    assert second.reclaimed == ("a",)
    assert q.state_of("a") == ["wait"]
    assert q.store.execute("HGET", q.keys.job("a"), "stc") == "1"


def test_two_phase_needs_a_mark_first(q):
    q.add("a")
    q.take("t", 0, lock_ms=1000)
    q.clock.now = 2000  # the lock is gone, but the job was never marked
    assert q.sweep_two_phase(2000, 5000, max_stalled=1).reclaimed == ()
    q.clock.now = 7001
    assert q.sweep_two_phase(7001, 5000, max_stalled=1).reclaimed == ("a",)


def test_renewal_unmarks_so_sweep_spares_the_job(q):
    q.add("a")
    q.take("t", 0, lock_ms=1000)
    q.sweep_two_phase(0, 100, max_stalled=1)
    q.clock.now = 500
    q.extend_locks([("a", "t")], 1000)
    q.clock.now = 1000
    assert q.sweep_two_phase(1000, 100, max_stalled=1).reclaimed == ()


def test_max_stalled_fails_the_job(q):
    q.add("a")
    for round_ in range(2):
        base = round_ * 10_000
        q.clock.now = base
        q.take(f"t{round_}", base, lock_ms=100)
        q.sweep_two_phase(base, 1000, max_stalled=1)
        q.clock.now = base + 1001
        reply = q.sweep_two_phase(base + 1001, 1000, max_stalled=1)
    assert reply.failed == ("a",)
    assert q.state_of("a") == ["failed"]


def test_single_phase_moves_at_once(q):
    q.add("a")
    q.take("t", 0, lock_ms=1000)
    q.clock.now = 1001
    assert q.sweep_single_phase(1001, 5000, max_stalled=None).reclaimed == ("a",)


def test_reaper_is_strict_about_age(q):
    q.add("a")
    q.take("t", 0, lock_ms=None)
    q.clock.now = 600_000
    assert q.reap(600_000, 600_000).reclaimed == ()  # exactly T old: not older than T
    q.clock.now = 600_001
    assert q.reap(600_001, 600_000).reclaimed == ("a",)
    assert q.store.execute("EXISTS", q.keys.lock("a")) == 0  # fencing lock deleted
