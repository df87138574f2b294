"""What the protocol does with a command ioredis resends after its reply was lost, so that it runs twice
(issue 25, item 6: `autoResendUnfulfilledCommands`, on by default). The simulator runs such a command once
(docs/model.md, "Known divergences"); these are the consequences it leaves out, at the protocol level:
a renewal twice is harmless, a finish twice is refused the second time (Missing lock) but the job completed
once, and with fetchNext the first run's fetched job is orphaned: active, locked to a worker that never
learns of it, until its lock lapses and a sweep moves it back (a stall of a live worker). A take twice
orphans the first job the same way.
"""

from __future__ import annotations

from emqsim.keys import QueueKeys
from emqsim.protocol import MISSING_LOCK, Queue
from emqsim.store import KeyStore


def _queue() -> tuple[Queue, list[int]]:
    now = [0]
    queue = Queue(KeyStore(lambda: now[0]), QueueKeys("q"))
    for job in ("a", "b", "c"):
        queue.add(job)
    return queue, now


def test_a_renewal_run_twice_only_extends_the_lock_again() -> None:
    queue, now = _queue()
    assert queue.take("w:1", 0, lock_ms=30_000) == "a"
    now[0] = 10_000
    assert queue.extend_locks([("a", "w:1")], 30_000) == []
    now[0] = 10_500  # the resent copy, after the reconnect
    assert queue.extend_locks([("a", "w:1")], 30_000) == []
    assert queue.store.expire_at(queue.keys.lock("a")) == 40_500


def test_a_finish_run_twice_is_refused_the_second_time_and_the_job_completes_once() -> None:
    queue, _ = _queue()
    queue.take("w:1", 0, lock_ms=30_000)
    first = queue.finish("a", "w:1", check_token=True)
    again = queue.finish("a", "w:1", check_token=True)
    assert first.accepted and again.code == MISSING_LOCK and again.error == "Missing lock for job a"
    assert queue.state_of("a") == ["completed"]


def test_a_finish_with_fetch_next_run_twice_orphans_the_job_it_took() -> None:
    # moveToFinished(fetchNext): the first run completes `a` and locks `b` to the worker; its reply is lost;
    # the resent copy finds no lock (Missing lock) and fetches nothing, so the worker never starts `b`.
    queue, now = _queue()
    queue.take("w:1", 0, lock_ms=30_000)
    assert queue.finish("a", "w:1", check_token=True).accepted
    assert queue.take("w:2", 0, lock_ms=30_000) == "b"  # the fetch inside the first run
    assert queue.finish("a", "w:1", check_token=True).code == MISSING_LOCK  # the resent copy
    assert queue.state_of("b") == ["active"] and queue.holds("b", "w:2")
    # nobody renews `b`: the two-phase sweep marks it, its lock lapses, the next sweep moves it back
    assert queue.sweep_two_phase(1_000, 5_000, max_stalled=1).marked == ("b",)
    now[0] = 30_001
    assert queue.sweep_two_phase(30_001, 5_000, max_stalled=1).reclaimed == ("b",)


def test_a_take_run_twice_orphans_the_first_job() -> None:
    queue, _ = _queue()
    assert queue.take("w:1", 0, lock_ms=30_000) == "a"  # its reply is lost
    assert queue.take("w:1", 5, lock_ms=30_000) == "b"  # the resent copy: the worker runs `b`
    assert queue.active_jobs() == ["b", "a"] and queue.holds("a", "w:1")  # `a` waits out its lease


# -- the simulator with Network(resend_twice=True) -------------------------------------------------------------
def test_the_resent_finish_orphans_the_fetched_job_in_the_simulator() -> None:
    from emqsim import simulate, standard
    from emqsim.presets import preset
    from emqsim.stats import summarize
    from emqsim.summaries import simulate_summary

    for rep in range(3):
        scenario = standard("resent-finish")
        run = simulate(scenario, preset("bullmq"), 0, rep)
        (orphan,) = [a for a in run.attempts if a.outcome != "completed"]
        first = next(a for a in run.attempts if a.job == "0")
        # taken by job 0's finish (its first run), never started, reclaimed from a live worker after the lease
        assert orphan.worker == first.worker and orphan.taken_at == first.finish_applied_at
        assert orphan.started_at is None and orphan.outcome == "reclaimed"
        assert orphan.worker_state_at_reclaim == "alive" and orphan.reclaimed_at - orphan.taken_at >= 30
        assert first.outcome == "completed"  # the refused copy leaves the first run's record alone
        assert sorted({a.job for a in run.attempts if a.outcome == "completed"}) == [str(i) for i in range(6)]
        assert summarize(run) == simulate_summary(scenario, preset("bullmq"), 0, rep)
        once = simulate(standard("resent-finish", resend_twice=False), preset("bullmq"), 0, rep)
        assert all(a.outcome == "completed" for a in once.attempts)
        assert run.requests["finish"] == once.requests["finish"] + 1  # the resent copy


def test_resend_twice_is_read_from_toml_and_the_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emqsim.cli.building import with_fault_flags
    from emqsim.cli.parser import build_parser
    from emqsim.config import load_config
    from emqsim.scenario import Scenario

    path = tmp_path / "s.toml"
    path.write_text("[scenario]\n[scenario.network]\nresend_twice = true\n")
    assert load_config(path)[0].network.resend_twice is True
    args = build_parser().parse_args(["run", "--resend-twice"])
    assert with_fault_flags(Scenario(), args).network.resend_twice is True


def test_a_resent_take_whose_copy_finds_nothing_orphans_the_first_runs_job_and_the_run_ends():
    """An after-wake-up take whose reply a drop catches ran at Redis (job 1 locked to worker 0); its copy at the
    reconnect finds `wait` empty. The worker never starts job 1: its attempt is orphaned (counted as stopped),
    its lock lapses and a sweep moves it back, and the run ends once the work is done, not at its horizon."""
    from emqsim import Block, Fixed, LeasePolicy, Network, Scenario, simulate
    from emqsim.faults import Outage

    def scenario(resend_twice: bool) -> Scenario:
        return Scenario(
            workers=2,
            jobs=3,
            arrival_rate=1.0,
            duration=Fixed(4.0),
            faults=(Block(worker=0, at=0.1, duration=1.9), Outage(at=2.17, duration=1.0, worker=0)),
            network=Network(rtt=Fixed(0.2), resend_twice=resend_twice),
            horizon=60,
        )

    policy = LeasePolicy(lease=2.0, beat=0.5, scan=1.0, take_mode="after-wakeup")
    run = simulate(scenario(True), policy, seed=27)
    orphan = next(a for a in run.attempts if a.job == "1" and a.attempt == 1)
    assert orphan.worker == 0 and orphan.started_at is None and orphan.outcome == "reclaimed"
    assert run.final_state == {"wait": 0, "active": 0, "completed": 3, "failed": 0}
    last = max(a.finish_applied_at for a in run.attempts if a.outcome == "completed")
    assert run.end < 20 and run.end == simulate(scenario(False), policy, seed=27).end
    assert last <= run.end
