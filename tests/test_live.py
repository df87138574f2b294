"""Live mode end to end: real redis-server, real worker processes, real SIGKILL / SIGSTOP.

Settings are the scenario's (lease 30 s, beat 10 s, scan 10 s) at time_scale 0.02, i.e. 600 / 200 / 200 ms
of real time, so each run takes a few seconds. Timing assertions are bounds with margins (a busy 2-core
machine delays timers by milliseconds), never exact times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from emqsim import Crash, Fixed, Freeze, LeasePolicy, Scenario, TimeoutPolicy, simulate, standard
from emqsim.errors import ConfigError
from emqsim.live import LiveRun, PrivateRedis
from emqsim.live.arguments import add_live_arguments
from emqsim.live.cli import main_live
from emqsim.stats import summarize

SCALE = 0.02  # 1 scenario second = 20 ms real
LEASE, BEAT, SCAN = 30.0, 10.0, 10.0  # 600 / 200 / 200 ms real
MARGIN = 7.5  # scenario seconds = 150 ms real: timer and scheduling slack on a busy machine


def lease_policy() -> LeasePolicy:
    return LeasePolicy(lease=LEASE, beat=BEAT, scan=SCAN)


def children() -> set[int]:
    """Live descendants of this test process (zombies excluded)."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == os.getpid():
            found.add(int(pid))
    return found


# -- the three claims -----------------------------------------------------------------------------------------
@pytest.mark.redis
@pytest.mark.parametrize("die_after", [1.0, 15.0])
def test_sigkilled_workers_job_is_recovered_within_the_lease_bounds(need_redis, die_after, steady_live):
    scenario = standard("fast-dead", die_after=die_after, duration=25)
    run = steady_live(scenario, lease_policy(), time_scale=SCALE)
    first = run.attempts[0]
    assert first.died_at is not None and first.outcome == "reclaimed"
    assert first.worker_state_at_reclaim == "dead"
    assert any(e.kind == "crash" and e.worker == first.worker for e in run.worker_events)
    latency = first.detection_latency
    # The lock lapses lease after its last renewal (at most one beat before the death; none yet if the
    # crash came before the first tick), and the two-phase sweep then needs at most two intervals.
    assert LEASE - BEAT - MARGIN <= latency <= LEASE + 2 * SCAN + MARGIN, latency
    second = run.attempts[1]
    assert second.worker != first.worker and second.outcome == "completed"
    assert run.ended_by == "done" and run.final_state == {"wait": 0, "active": 0, "completed": 1, "failed": 0}
    summary = summarize(run)
    assert summary.detection_latencies == [latency] and summary.false_reclaims == 0
    assert any(e.kind == "expired" and e.token == first.token for e in run.lock_events)


@pytest.mark.redis
def test_slow_but_alive_worker_is_never_reclaimed_under_the_lease(need_redis, steady_live):
    run = steady_live(standard("slow-alive", duration=150), lease_policy(), time_scale=SCALE)  # 5 leases long
    assert [a.outcome for a in run.attempts] == ["completed"]
    assert summarize(run).reclaims == 0
    renewals = [e for e in run.lock_events if e.kind == "renewed"]
    assert len(renewals) >= 150 / BEAT - 2
    assert not any(e.kind in ("renew_failed", "expired") for e in run.lock_events)
    assert run.attempts[0].finish_result == "accepted"


@pytest.mark.redis
def test_slow_but_alive_worker_is_falsely_reclaimed_by_a_short_timeout(need_redis, steady_live):
    run = steady_live(
        standard("slow-alive", duration=60), TimeoutPolicy(timeout=40, scan=SCAN), time_scale=SCALE
    )
    first = run.attempts[0]
    assert first.reclaimed_at is not None and first.worker_state_at_reclaim == "alive"
    assert 40 < first.reclaimed_at - first.taken_at <= 40 + SCAN + MARGIN
    summary = summarize(run)
    assert summary.false_reclaims >= 1
    # No token check: the slow worker's late finish is accepted, so the job completed more than once.
    assert summary.duplicate_completions >= 1
    assert all(a.finish_result == "accepted" for a in run.attempts if a.finish_result is not None)


@pytest.mark.redis
def test_frozen_worker_loses_its_job_and_its_late_finish_is_rejected(need_redis, steady_live):
    # SIGSTOP 5 s into an 80 s job, for 70 s: past lease + 2 scans (50 s) with 20 s to spare.
    scenario = standard("frozen", freeze_after=5, freeze_for=70, duration=80)
    run = steady_live(scenario, lease_policy(), time_scale=SCALE)
    first, second = run.attempts[:2]
    assert first.worker_state_at_reclaim == "frozen"
    assert first.finish_result in ("Missing lock for job 0", "Lock mismatch for job 0")
    assert first.outcome == "finish_rejected"
    assert second.outcome == "completed" and second.finish_result == "accepted"
    kinds = [(e.worker, e.kind) for e in run.worker_events]
    assert (first.worker, "freeze") in kinds and (first.worker, "resume") in kinds
    summary = summarize(run)
    assert summary.false_reclaims == 1 and summary.duplicate_completions == 0
    assert summary.finishes_rejected == 1
    # Its work resumed where it stopped: the frozen 70 s do not count as work.
    assert first.finished_at - first.started_at >= 80 + 70 - MARGIN


@pytest.mark.redis
def test_blocked_event_loop_loses_a_working_workers_job_as_the_simulator_says(need_redis, steady_live):
    # A busy loop holds the worker's event loop 5 s into an 80 s job, for 70 s: no renewal leaves, the lease
    # lapses and the job is reclaimed while its worker is blocked; unlike a freeze the work goes on.
    scenario = standard("blocked-loop", block_after=5, block_for=70, duration=80)
    run = steady_live(scenario, lease_policy(), time_scale=SCALE)
    sim = simulate(scenario, lease_policy(), seed=0)
    for r in (run, sim):
        first, second = r.attempts[:2]
        assert first.worker_state_at_reclaim == "blocked" and first.outcome == "finish_rejected"
        assert second.outcome == "completed"
        assert (first.worker, "block") in [(e.worker, e.kind) for e in r.worker_events]
        summary = summarize(r)
        assert summary.false_reclaims == 1 and summary.duplicate_executions == 1
        # the blocked 70 s counted as work: the job ended about 80 s after it began, not 150
        assert 80 - MARGIN <= first.finished_at - first.started_at <= 80 + MARGIN


def test_live_mode_refuses_what_it_cannot_reproduce():
    from emqsim.faults import Outage

    scenario = Scenario(
        workers=2, jobs=1, duration=Fixed(10), faults=(Outage(at=1, duration=5, lost_writes=2, readonly=3),)
    )  # a failover with its clients on the demoted primary runs live (tests/test_live_stalls.py), not elsewhere
    LiveRun(scenario, lease_policy(), time_scale=SCALE)
    LiveRun(standard("fast-dead"), LeasePolicy(LEASE, BEAT, SCAN, lazy_fail=True), time_scale=SCALE)  # runs
    LiveRun(standard("max-retries-outage"), lease_policy(), time_scale=SCALE)  # runs (test_live_stalls.py)
    with pytest.raises(ConfigError, match="--without-outages"):
        LiveRun(scenario, lease_policy(), time_scale=SCALE, redis_url="redis://localhost:6379/15")
    # a resent command runs twice live (tests/test_live_stalls.py), with a fixed round trip (the reply is in
    # flight for half of it) and without a silent partition's proxy (which holds replies): else one line
    from dataclasses import replace

    from emqsim.live import LiveWarning

    with pytest.warns(LiveWarning, match="in flight"):  # its 1 ms window, scaled, is under the jitter
        LiveRun(standard("resent-finish"), lease_policy(), time_scale=SCALE)

    from emqsim import LogNormal, Network
    from emqsim.faults import Partition

    resent = standard("resent-finish")
    for bad, words in (
        (replace(resent, network=Network(rtt=LogNormal(0.002, 0.5), resend_twice=True)), "fixed round trip"),
        (replace(resent, faults=(Partition(at=1, duration=1, worker=0),)), "silent partition"),
    ):
        with pytest.raises(ConfigError, match=words) as info:
            LiveRun(bad, lease_policy(), time_scale=SCALE)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["production", "flaky-network"])
def test_without_outages_keeps_everything_else(name):
    from emqsim.faults import Outage
    from emqsim.live.cli import without_outages

    scenario = standard(name)
    randoms = scenario.random_faults
    assert (randoms is not None and randoms.outage_rate > 0) or any(
        isinstance(f, Outage) for f in scenario.faults
    )
    stripped = without_outages(scenario)
    assert not any(isinstance(f, Outage) for f in stripped.faults)
    assert stripped.random_faults is None or stripped.random_faults.outage_rate == 0
    same = without_outages(stripped)
    assert same == stripped  # nothing else to drop
    assert (stripped.workers, stripped.jobs, stripped.duration, stripped.network) == (
        scenario.workers, scenario.jobs, scenario.duration, scenario.network,
    )  # fmt: skip
    LiveRun(stripped, lease_policy(), time_scale=SCALE)  # accepted by the live mode


# -- plumbing -------------------------------------------------------------------------------------------------
@pytest.mark.redis
def test_no_process_or_server_is_left_behind(need_redis):
    scenario = Scenario(
        name="mixed",
        workers=2,
        concurrency=2,
        jobs=4,
        duration=Fixed(10),
        faults=(Crash(worker=0, at=5, restart_after=2), Freeze(worker=1, at=3, duration=2)),
        horizon=300,
    )
    before = children()
    live = LiveRun(scenario, lease_policy(), time_scale=SCALE)
    run = live.run()
    assert run.ended_by == "done" and run.final_state["completed"] == 4
    assert any(e.kind == "restart" for e in run.worker_events)
    assert all(p.popen.poll() is not None for p in live.all_procs)
    assert live.server is not None and live.server.proc is None and live.server.workdir is None
    assert children() <= before
    summarize(run)
    json.dumps(run.as_dict())
    assert run.policy["mode"] == "live" and run.policy["time_scale"] == SCALE


@pytest.mark.redis
def test_a_users_redis_is_checked_and_cleaned(need_redis, tmp_path, steady_live):
    with PrivateRedis() as server:
        client = server.client()
        client.set("someone:else", "1")
        with pytest.raises(ConfigError, match="outside this run's prefix") as info:
            steady_live(standard("fast-dead"), lease_policy(), redis_url=server.url, time_scale=SCALE)
        assert "\n" not in str(info.value) and "--allow-foreign-keys" in str(info.value)
        run = steady_live(
            standard("fast-dead", duration=5),
            lease_policy(),
            redis_url=server.url,
            time_scale=SCALE,
            allow_foreign_keys=True,
        )
        assert run.ended_by == "done"
        assert client.keys("*") == ["someone:else"]  # its own keys deleted, the other left alone
        client.close()


def _live_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="emqsim live")
    add_live_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "nope"], "choose one of"),
        (["--time-scale", "fast"], "--time-scale"),
        (["--time-scale", "0"], "--time-scale"),
        (["--time-scale", "0.00001"], "live timers need"),
        (["--lease", "10", "--beat", "20"], "--beat 20 must be shorter"),
        (["--lease", "-3"], "--lease"),
        (["--timeout", "60", "--lease", "30"], "drop --lease"),
        (["--seed", "x"], "--seed"),
        (["--redis", "http://nowhere"], "Redis URL"),
    ],
)
def test_bad_cli_input_is_one_clear_line(argv, message):
    with pytest.raises(ConfigError, match=message) as info:
        main_live(_live_args(*argv))
    assert "\n" not in str(info.value)


@pytest.mark.redis
def test_cli_json(need_redis):
    cmd = [
        sys.executable,
        "-m",
        "emqsim",
        "live",
        "--scenario",
        "fast-dead",
        "--time-scale",
        "0.01",
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    data = json.loads(out)
    assert data["run"]["scenario"] == "fast-dead" and len(data["summary"]["detection_latencies"]) == 1


def _bare_worker():
    """A LiveWorker without a Redis or a parent: just its request path and its tick bookkeeping."""
    import threading

    from emqsim.live.worker import LiveWorker

    w = LiveWorker.__new__(LiveWorker)
    w.stopping = threading.Event()
    w.outages = []
    w.held = []  # no silent partition
    w.switches = []  # no failover onto a demoted primary
    w.loss = 0.0
    w.offline = threading.Condition()
    w.tickets = w.served = 0
    w.tick = threading.Condition()
    w.tick_pending = False
    return w


def test_a_finish_never_reaches_redis_between_a_ticks_decision_and_its_renewal():
    """Node decides which leases are due and sends them in one callback; here the lock manager is a thread that
    can be descheduled between the two (one CI run saw a finish land 2 ms into that gap, and the renewal
    fail). A finish waits while a decided tick is not yet issued, and goes at once when none is pending."""
    import threading
    import time

    order = []
    w = _bare_worker()
    slow = w.call

    def call(fn, t):
        if fn is renew:
            time.sleep(0.3)  # the lock manager's thread, descheduled after deciding
        return slow(fn, t)

    def renew(t):
        order.append("renew")

    w.call = call

    def tick():
        with w.tick:
            w.tick_pending = True
        try:
            w.request("renew", renew, retry=False, issued=w.tick_issued)
        finally:
            w.tick_issued()

    lock_manager = threading.Thread(target=tick)
    lock_manager.start()
    time.sleep(0.05)  # the tick has decided; its renewal is not yet sent
    w.after_tick()
    w.request("finish", lambda t: order.append("finish"))
    lock_manager.join()
    assert order == ["renew", "finish"]
    started = time.monotonic()
    w.after_tick()  # no tick pending: no wait
    assert time.monotonic() - started < 0.3


def test_a_lost_or_queued_renewal_releases_the_finish_at_once():
    """A renewal lost on the (emulated) network, or queued offline, is issued as far as ordering goes: the
    finish is released before the lost request's timeout ends or the reconnect comes, not after."""
    import time

    from emqsim.live.worker import LOST

    w = _bare_worker()
    order = []
    w.lost = lambda kind: kind == "renew"
    w.command_timeout = 0.05
    w.count = lambda kind: None
    _, reply = w.request(
        "renew", lambda t: order.append("sent"), retry=False, issued=lambda: order.append("issued")
    )
    assert reply is LOST and order == ["issued"]

    w = _bare_worker()
    order = []
    now = time.time()
    w.outages = [(now - 1, now + 0.2, False)]  # disconnected now, back in 0.2 s

    def sleep_until(when, real=w.sleep_until):
        order.append("waits for the reconnect")
        real(when)

    w.sleep_until = sleep_until
    w.call = lambda fn, t: fn(t)
    w.request("renew", lambda t: order.append("sent"), retry=False, issued=lambda: order.append("issued"))
    assert order == ["issued", "waits for the reconnect", "sent"]
