"""The downstream store that checks fencing tokens (emqsim/fencing.py): the check, the replay of a run's
writes, the corruption it counts, and the check-then-act race."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emqsim import Freeze, LeasePolicy, Scenario, TimeoutPolicy, Uniform, simulate, standard
from emqsim.distributions import Fixed
from emqsim.fencing import (
    DownstreamStore,
    accept_all,
    check_time,
    fenced,
    holds_lock,
    replay,
    writes,
)

FROZEN = standard("frozen", freeze_for=80.0, freeze_after=5.0, duration=40.0, workers=2)
RACE = standard("frozen", freeze_for=85.0, freeze_after=39.0, duration=40.0, workers=2)


def test_the_fenced_rule_accepts_only_newer_tokens():
    assert fenced(None, 1) and fenced(None, 0)
    assert fenced(1, 2) and fenced(3, 10)
    assert not fenced(2, 1) and not fenced(5, 4)
    assert not fenced(2, 2), "an equal token is not newer: refused"
    assert all(accept_all(last, t) for last, t in [(None, 1), (2, 1), (2, 2), (1, 2)])


def test_the_store_keeps_the_last_accepted_write_per_job():
    store = DownstreamStore(fenced)
    assert store.write("a", 1, "one", 1.0)
    assert store.write("b", 1, "b-one", 1.5)
    assert store.write("a", 2, "two", 2.0)
    assert not store.write("a", 1, "stale", 3.0)
    assert not store.write("a", 2, "again", 4.0)
    assert store.tokens == {"a": 2, "b": 1} and store.values == {"a": "two", "b": "b-one"}
    assert [w.accepted for w in store.log] == [True, True, True, False, False]
    assert not any(w.stale_overwrite for w in store.log)
    bare = DownstreamStore(accept_all)
    bare.write("a", 2, "two", 1.0)
    bare.write("a", 1, "stale", 2.0)
    assert bare.values["a"] == "stale" and bare.log[-1].stale_overwrite and bare.log[-1].replaced == 2


def test_the_store_refuses_an_answer_that_is_not_a_bool():
    store = DownstreamStore(lambda last, token: 1)
    with pytest.raises(TypeError, match="True or False"):
        store.write("a", 1, "x", 0.0)
    with pytest.raises(TypeError):
        DownstreamStore(accept=3)  # type: ignore[arg-type]


def test_a_frozen_worker_corrupts_an_unfenced_store_and_not_a_fenced_one():
    run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=1)
    stale, fresh = run.attempts
    assert stale.finished_at > fresh.finished_at, "the frozen worker writes after the new take"
    bare = replay(run, accept_all)
    assert bare.writes == 2 and bare.accepted == 2 and bare.rejected == 0
    assert bare.corrupted_jobs == ("0",) and bare.corrupted == 1
    assert bare.final == (("0", 1, f"take 1 by worker {stale.worker}"),)
    checked = replay(run, fenced)
    assert checked.accepted == 1 and checked.rejected == 1 and checked.corrupted == 0
    assert checked.final == (("0", 2, f"take 2 by worker {fresh.worker}"),)
    assert replay(run) == checked, "the default store checks the token"


def test_a_stale_write_before_the_new_takes_write_corrupts_nothing():
    """The frozen worker resumes after the reclaim but writes before the new take does: the newer write
    lands last, so the store ends with the newest result under either rule."""
    run = simulate(
        standard("frozen", freeze_for=62.0, freeze_after=5.0, duration=40.0), TimeoutPolicy(60), seed=1
    )
    stale, fresh = run.attempts
    assert stale.reclaimed_at is not None and stale.finished_at < fresh.finished_at
    assert replay(run, accept_all).corrupted == 0 and replay(run, fenced).corrupted == 0


def test_the_replay_is_deterministic():
    scenario = standard("frozen", freeze_for=Uniform(0, 90), freeze_after=5.0, duration=40.0, workers=2)
    for r in range(6):
        first = replay(simulate(scenario, TimeoutPolicy(timeout=60), seed=7, replication=r), accept_all)
        second = replay(simulate(scenario, TimeoutPolicy(timeout=60), seed=7, replication=r), accept_all)
        assert first == second


def test_writes_come_in_time_order_with_ties_in_record_order():
    run = simulate(FROZEN, TimeoutPolicy(timeout=60), seed=1)
    first, second = run.attempts
    # a tie: the engine's record order decides (records are frozen: a copy with the second write moved)
    run.attempts[1] = dataclasses.replace(second, finished_at=first.finished_at)
    assert [w.token for w in writes(run)] == [1, 2]
    run.attempts.reverse()
    assert [w.token for w in writes(run)] == [2, 1]


def test_many_jobs_with_random_pauses_corrupt_only_without_the_check():
    scenario = Scenario(
        name="pauses",
        workers=3,
        jobs=12,
        duration=Fixed(20.0),
        faults=tuple(Freeze(job=j, after=2.0, duration=Uniform(0, 90)) for j in range(0, 12, 3)),
        horizon=3600.0,
    )
    run = simulate(scenario, TimeoutPolicy(timeout=30), seed=3)
    bare, checked = replay(run, accept_all), replay(run, fenced)
    assert bare.corrupted > 0 and checked.corrupted == 0
    assert bare.writes == checked.writes == sum(a.finished_at is not None for a in run.attempts)
    newest = {}
    for a in run.attempts:
        if a.finished_at is not None:
            newest[a.job] = max(newest.get(a.job, 0), a.attempt)
    assert {job: token for job, token, _ in checked.final} == newest


def test_check_then_act_still_corrupts_when_the_pause_falls_between_check_and_write():
    run = simulate(RACE, LeasePolicy(30, 10), seed=1)
    stale, fresh = run.attempts
    freeze = next(e.time for e in run.worker_events if e.kind == "freeze")
    resume = next(e.time for e in run.worker_events if e.kind == "resume")
    assert stale.finish_result != "accepted", "the queue refuses the stale finish: the store does not"
    report = replay(run, accept_all, check_gap=2.0)
    check = next(w for w in report.checks if w.token == 1)
    assert check.checked_at < freeze < resume < check.at, "the pause falls between the check and the write"
    assert check.lock_ok and report.skipped == 0 and report.corrupted_jobs == ("0",)
    assert not holds_lock(sorted(run.lock_events, key=lambda e: e.time), "0", stale.token, check.at)
    assert replay(run, fenced, check_gap=2.0).corrupted == 0
    # a check right at the write (no gap, no pause between) sees the lapsed lock and skips the write
    atomic = replay(run, accept_all, check_gap=0.0)
    assert atomic.skipped == 1 and atomic.corrupted == 0


def test_check_time_skips_pauses():
    run = simulate(RACE, LeasePolicy(30, 10), seed=1)
    stale = run.attempts[0]
    freeze = next(e.time for e in run.worker_events if e.kind == "freeze")
    resume = next(e.time for e in run.worker_events if e.kind == "resume")
    assert check_time(run, stale, 0.0) == stale.finished_at
    assert check_time(run, stale, 0.5) == round(stale.finished_at - 0.5, 6)
    ran_after = stale.finished_at - resume
    assert check_time(run, stale, ran_after + 1.0) == round(freeze - 1.0, 6)
    assert check_time(run, stale, 1e6) == stale.started_at
    with pytest.raises(ValueError):
        check_time(run, stale, -1.0)


def test_a_lock_check_needs_lock_events():
    run = simulate(RACE, LeasePolicy(30, 10), seed=1, record_locks=False)
    with pytest.raises(ValueError, match="record_locks"):
        replay(run, fenced, check_gap=1.0)


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=20), st.floats(0, 1000, allow_nan=False)), max_size=40
    )
)
def test_the_fenced_store_accepts_strictly_increasing_tokens_and_ends_with_the_highest(items):
    store = DownstreamStore(fenced)
    for index, (token, at) in enumerate(sorted(items, key=lambda x: x[1])):
        store.write("job", token, f"write {index}", at)
    accepted = [w.token for w in store.log if w.accepted]
    assert all(a < b for a, b in zip(accepted, accepted[1:], strict=False))
    assert not any(w.stale_overwrite for w in store.log)
    if items:
        highest = max(token for token, _ in items)
        assert store.tokens["job"] == highest
        first_highest = next(w for w in store.log if w.token == highest)
        assert store.values["job"] == first_highest.value
    else:
        assert store.tokens == {}


def test_the_race_timeline_draws_the_stale_write():
    import matplotlib

    matplotlib.use("Agg")
    from emqsim import plots

    run = simulate(RACE, LeasePolicy(30, 10), seed=1)
    ax = plots.race_timeline(run, 2.0)
    texts = [t.get_text() for t in ax.texts]
    assert "write: corrupts without the check, rejected with it" in texts
    assert "lock lapses" in texts and texts.count("lock check: mine") == 2
    assert "1 corrupted without the store's check, 0 with it" in ax.get_title(loc="left")
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
