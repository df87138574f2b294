"""Streaming runs: `simulate_summary` folds each job into the summary as soon as it is final and keeps no
records, and must give exactly the summary of the full records (`summarize(simulate(...))`)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emqsim import LeasePolicy, Simulation, TimeoutPolicy, simulate, simulate_summary, standard
from emqsim.presets import preset
from emqsim.scenario import STANDARD
from emqsim.stats import SummaryBuilder, summarize, summary_dict
from tests.test_invariants import leases, scenarios, timeouts

POLICIES = [
    LeasePolicy(30, 10, 5),
    LeasePolicy(30, 10, 5, two_phase=False, swept_by="reaper"),
    TimeoutPolicy(30, 5),
    TimeoutPolicy(120, 5, fenced=True),
    preset("bullmq"),
]


@pytest.mark.parametrize("name", list(STANDARD))
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_streaming_summary_equals_the_summary_of_the_records(name, policy):
    scenario = STANDARD[name]()
    for replication in range(2):
        full = summarize(simulate(scenario, policy, 7, replication))
        assert summary_dict(simulate_summary(scenario, policy, 7, replication)) == summary_dict(full)


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.one_of(leases, timeouts), st.integers(0, 2**16), st.booleans())
def test_streaming_equals_records_on_random_scenarios(scenario, policy, seed, remove_on_complete):
    """Crashes with restarts, freezes, lost requests, stale finishes: every path by which a job closes."""
    scenario = scenario.with_(remove_on_complete=remove_on_complete)
    full = summarize(simulate(scenario, policy, seed))
    assert summary_dict(simulate_summary(scenario, policy, seed)) == summary_dict(full)


def test_the_summary_does_not_depend_on_the_order_jobs_are_folded_in():
    run = simulate(standard("production"), TimeoutPolicy(30, 5), 3)
    by_job: dict[str, list] = {}
    for a in run.attempts:
        by_job.setdefault(a.job, []).append(a)
    forward, backward = SummaryBuilder(run.jobs), SummaryBuilder(run.jobs)
    for job, attempts in by_job.items():
        forward.add_job(attempts, run.arrivals[int(job)], run.end)
    for job, attempts in reversed(by_job.items()):
        backward.add_job(attempts, run.arrivals[int(job)], run.end)
    assert summary_dict(forward.result(run)) == summary_dict(backward.result(run))
    assert forward.result(run).false_reclaims > 0 and forward.result(run).detection_latencies


def test_remove_on_complete_changes_redis_not_the_outcomes():
    scenario = standard("production")
    policy = LeasePolicy(30, 10, 5)
    kept = simulate(scenario, policy, 1)
    removed = simulate(scenario.with_(remove_on_complete=True), policy, 1)
    assert summary_dict(summarize(removed)) == summary_dict(summarize(kept))
    assert kept.final_state["completed"] > 0 and removed.final_state["completed"] == 0
    assert removed.resident_keys_peak < kept.resident_keys_peak


def test_a_streaming_run_keeps_nothing_once_every_job_is_final():
    """Each job is handed over exactly once, and the engine, server and Redis keep nothing of it."""
    scenario = standard("production").with_(remove_on_complete=True)
    seen: list[str] = []
    open_jobs: list[int] = []
    sim: Simulation

    def sink(attempts, arrival, end):
        assert len({a.job for a in attempts}) == 1
        seen.append(attempts[0].job)
        open_jobs.append(len(sim.ledger.job_attempts))

    sim = Simulation(scenario, LeasePolicy(30, 10, 5), 0, job_sink=sink)
    run = sim.run()
    assert run.ended_by == "done"
    assert sorted(seen, key=int) == [str(i) for i in range(scenario.jobs)]
    assert max(open_jobs) <= scenario.workers * scenario.concurrency * 2 + 20  # jobs in flight, not all jobs
    server = sim.server
    ledger = sim.ledger
    assert not ledger.job_attempts and not ledger.work_of and not ledger.attempt_counts
    assert not ledger.open_attempts and not sim._arrival_of and not sim._settled_open
    assert run.attempts == [] and run.lock_events == [] and run.sweeps == [] and run.worker_events == []
    x = server.store.execute
    job_keys = sorted(k for k in x("KEYS", "*") if k.split(":")[-1].isdigit())
    assert job_keys == sorted(
        server.keys.job(j) for j in x("SMEMBERS", server.keys.failed)
    )  # kept, as BullMQ


def test_jobs_still_open_at_the_horizon_are_handed_over_with_the_end():
    scenario = standard("fast-dead")
    ends = []
    Simulation(scenario, TimeoutPolicy(3600, 5), 0, job_sink=lambda a, arrival, end: ends.append(end)).run()
    full = simulate(scenario, TimeoutPolicy(3600, 5), 0)
    assert full.ended_by == "horizon" and ends == [full.end]
    summary = simulate_summary(scenario, TimeoutPolicy(3600, 5), 0)
    assert summary.undetected == 1 and dataclasses.asdict(summary) == dataclasses.asdict(summarize(full))


def test_a_crash_after_a_sandboxed_childs_exit_does_not_extend_the_attempts_work():
    """The child exits at once and the job's fail is sent; the loop then blocks, and the worker crashes before
    it reads the fail's reply. The attempt's work ended with the child (0 s), so its record is final once the
    fail is applied: the crash does not rewrite it (it used to set 1 s of work and stop at the crash, after the
    streaming summary had taken the job as final). Found by Hypothesis with more examples than the suite runs."""
    from emqsim.distributions import Uniform
    from emqsim.faults import Block, ChildCrash, Crash
    from emqsim.scenario import Scenario

    scenario = Scenario(
        name="custom",
        workers=1,
        concurrency=1,
        jobs=2,
        duration=Uniform(1, 20.0),
        faults=(
            Crash(job=0, after=1.0),
            Crash(job=1, after=0.0),
            ChildCrash(job=0, after=0.0),
            Block(duration=1.0, job=0, after=0.0),
        ),
    )
    policy = TimeoutPolicy(10.0, 1.0)
    run = simulate(scenario, policy, 0)
    first = next(a for a in run.attempts if a.job == "0")
    assert first.outcome == "failed" and first.died_at is None
    assert first.work_done == 0.0 and first.stopped_at == first.started_at
    assert summary_dict(simulate_summary(scenario, policy, 0)) == summary_dict(summarize(run))
