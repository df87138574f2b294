"""A failover to an asynchronous replica loses every write of its lag window (issue 25 item 2): a take (the
job is back in `wait`, its worker's finish refused), a finish (the job runs again), an add (the job is gone),
a renewal (the lock is back to its earlier expiry); the store's journal undoes them (emqsim/store/journal.py)."""

from __future__ import annotations

import numpy as np

from emqsim import Scenario, simulate
from emqsim.distributions import Fixed
from emqsim.faults import Outage
from emqsim.policies import LeasePolicy
from emqsim.store import KeyStore
from emqsim.store.journal import Journal

POLICY = LeasePolicy(30, 10, 5, swept_by="reaper")


def _run(at: float, lag: float, **scenario):
    options = {"workers": 2, "jobs": 1, "duration": Fixed(20), "phases": "aligned", "horizon": 600} | scenario
    sc = Scenario(faults=(Outage(at=at, duration=0.5, lost_writes=lag),), **options)
    return simulate(sc, POLICY, seed=0)


def test_the_journal_puts_back_every_key_the_window_touched() -> None:
    now = [0]
    store = KeyStore(lambda: now[0], rng=np.random.default_rng(0))
    store.execute("RPUSH", "l", "a", "b")
    store.execute("SET", "k", "v", "PX", "5000")
    store.execute("HSET", "h", "f", "1")
    journal = Journal(store)
    journal.start()
    now[0] = 10
    store.execute("LPOP", "l")
    store.execute("SET", "k", "w")  # drops the TTL
    store.execute("HINCRBY", "h", "f", "5")
    store.execute("SET", "new", "x")
    store.execute("DEL", "h")
    changed = {key for key, *_ in journal.undo()}
    assert changed == {"l", "k", "h", "new"}
    assert store.execute("LRANGE", "l", "0", "-1") == ["a", "b"]
    assert store.execute("GET", "k") == "v" and store.expire_at("k") == 5000
    assert store.execute("HGET", "h", "f") == "1" and store.execute("EXISTS", "new") == 0
    store.execute("LPOP", "l")  # no longer journaled
    assert journal.before == {}


def test_a_lost_finish_runs_the_job_again_and_a_lost_take_puts_it_back_in_wait() -> None:
    # two jobs at t=0 on one worker: job 0 taken at 1 ms, finished at about 20 s, job 1 taken right after. A
    # failover at 20.5 s with 1 s of lag loses job 0's finish and job 1's take: job 0 is back in `active` with
    # its lock, which lapses (its worker untracked it), and the reaper hands it out again; job 1 is back in
    # `wait`, and its first worker's finish is refused (no lock).
    run = _run(at=20.5, lag=1.0, workers=1, jobs=2)
    by_job: dict[str, list] = {}
    for a in run.attempts:
        by_job.setdefault(a.job, []).append(a)
    j0, j1 = by_job["0"], by_job["1"]
    assert j0[0].outcome == "completed" and j0[0].finish_applied_at < 20.5
    assert [a.outcome for a in j0[1:]] == ["duplicate_completion"]  # the lost finish: it ran again
    assert j1[0].taken_at < 20.5 and j1[0].outcome == "finish_rejected"  # the lost take: its finish refused
    assert j1[-1].outcome == "completed" and j1[-1].taken_at > 20.5
    assert run.final_state["completed"] == 2 and run.ended_by == "done"


def test_no_lag_loses_nothing() -> None:
    run = _run(at=20.5, lag=0.0, workers=1, jobs=2)
    assert [a.outcome for a in run.attempts] == ["completed", "completed"]
    assert not [e for e in run.lock_events if e.kind == "lost_in_failover"]


def test_a_lost_add_loses_the_job_and_the_run_still_ends() -> None:
    run = _run(at=0.5, lag=1.0, workers=1, jobs=1)
    assert [a.outcome for a in run.attempts] == ["finish_rejected"]
    assert run.ended_by == "done" and run.final_state["completed"] == 0


def test_streaming_summaries_match_the_records_under_a_failover() -> None:
    from emqsim.stats import summarize, summary_dict
    from emqsim.summaries import simulate_summary

    sc = Scenario(
        workers=2,
        jobs=12,
        arrival_rate=0.5,
        duration=Fixed(8),
        faults=(Outage(at=12, duration=1, lost_writes=3.0),),
        horizon=600,
    )
    for seed in range(4):
        recorded = simulate(sc, POLICY, seed=seed)
        assert summary_dict(simulate_summary(sc, POLICY, seed, 0)) == summary_dict(summarize(recorded)), seed


def test_clients_on_the_demoted_primary_see_readonly_until_they_move() -> None:
    # one 60 s job, renewed every 10 s (aligned). A failover at 20.5 s (away 0.5 s, 0.1 s of lag) leaves the
    # clients on the demoted primary: their renewals fail with READONLY from 21 s. 15 s of it: the renewal at
    # 40 s reaches the new primary and saves the lock (it expires at 50.001 s). 40 s of it: the lock runs out
    # at 50.001 s, the reaper's sweeps are refused too until 61 s, and the finish at 60 s is refused.
    def run(readonly: float):
        sc = Scenario(
            workers=2,
            jobs=1,
            duration=Fixed(60),
            faults=(Outage(at=20.5, duration=0.5, lost_writes=0.1, readonly=readonly),),
            phases="aligned",
            horizon=600,
        )
        return simulate(sc, POLICY, seed=0)

    short = run(15.0)
    refused = [e for e in short.lock_events if e.kind == "renew_failed"]
    assert [(e.time, e.detail) for e in refused] == [(30.001, "READONLY")]
    assert [a.outcome for a in short.attempts] == ["completed"]
    long = run(40.0)
    first = long.attempts[0]
    assert first.finish_result == "READONLY You can't write against a read only replica."
    assert first.outcome == "finish_rejected" and first.reclaimed_at is not None and first.reclaimed_at >= 61
    assert first.worker_state_at_reclaim == "alive"
    assert long.attempts[-1].outcome == "completed" and long.final_state["completed"] == 1


def test_readonly_from_toml_and_flags(tmp_path) -> None:
    import subprocess
    import sys

    import pytest

    from emqsim.config import load_config
    from emqsim.errors import ConfigError

    path = tmp_path / "f.toml"
    path.write_text(
        '[scenario]\n[[scenario.faults]]\nkind = "outage"\nat = 5\nduration = 1\nlost_writes = 0.5\nreadonly = inf\n'
    )
    scenario, _ = load_config(path)
    assert scenario.faults[0].readonly == float("inf")
    with pytest.raises(ConfigError, match="lost_writes"):
        Outage(at=1, duration=1, readonly=5.0)
    bad = subprocess.run(
        [sys.executable, "-m", "emqsim", "run", "--scenario", "fast-dead", "--outage-at", "5", "--outage-for", "1",
         "--readonly", "5"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert (
        bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--failover-lag" in bad.stderr
    )


def test_a_run_does_not_end_while_a_failover_can_still_undo_its_last_finish() -> None:
    # one job, finished at about 20 s, inside the lag window of a failover at 20.5 s: the failover puts it back
    # in `active`, its lock lapses and it runs again (the run used to end at the finish, before the failover)
    run = _run(at=20.5, lag=1.0, workers=1, jobs=1)
    assert [a.outcome for a in run.attempts] == ["completed", "duplicate_completion"]
    assert run.attempts[0].finish_applied_at < 20.5 < run.attempts[1].taken_at
    assert run.ended_by == "done" and run.end > 20.5


def test_a_failover_whose_window_opens_after_the_last_finish_does_not_hold_the_run() -> None:
    # the window opens at 59 s; the job finished at about 20 s
    run = _run(at=60.0, lag=1.0, workers=1, jobs=1)
    assert [a.outcome for a in run.attempts] == ["completed"]
    assert run.ended_by == "done" and run.end < 59.0
