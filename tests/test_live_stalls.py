"""Issue 25's stalls on real redis-servers in live mode: the finish that takes the next job (`fetch_next`), a
sandboxed child's crash (`ChildCrash`, retried with `attempts` > 1), a failover whose clients stay on the
demoted primary (`Outage(readonly > 0)`) and a silent partition (`Partition`). Each live run is judged as the
other live tests judge theirs: the same attempts and outcomes as the simulator for the same scenario and seed,
times within the live tests' margin (150 ms real). Real time and real servers: in the slow suite.
"""

from __future__ import annotations

import pytest

from emqsim import ChildCrash, Fixed, Freeze, LeasePolicy, Scenario, Uniform, simulate
from emqsim.stats import summarize

pytestmark = [pytest.mark.slow, pytest.mark.redis]

SCALE = 0.25
MARGIN = 0.15 / SCALE  # the live tests' 150 ms real, in scenario seconds
POLICY = LeasePolicy(lease=2.0, beat=0.5, scan=1.0)


def outcomes(run) -> list[tuple[str, int, str, str | None]]:
    return sorted((a.job, a.attempt, a.outcome, a.worker_state_at_reclaim) for a in run.attempts)


def fetched(run) -> list[tuple[str, int]]:
    """The attempts a finish took (fetchNext): taken by the same worker at the very time its finish ran."""
    finishes = {(a.worker, a.finish_applied_at) for a in run.attempts if a.finish_applied_at is not None}
    return sorted((a.job, a.attempt) for a in run.attempts if (a.worker, a.taken_at) in finishes)


# -- the scripts: finish.lua's fetchNext and fail.lua against emqsim.protocol ----------------------------------
def test_the_finish_and_fail_scripts_match_the_protocol(need_redis) -> None:
    """finish.lua with fetchNext is `Queue.finish` then, if accepted, `Queue.take` (the simulator's
    `Server.finish_and_fetch`); fail.lua is `Queue.fail` (with attempts) then the same fetch unless retried;
    the two-phase sweep with lazy_fail marks instead of failing: same replies, same keys."""
    from emqsim.keys import QueueKeys
    from emqsim.live.lua import RawScripts, key_names
    from emqsim.live.server import PrivateRedis
    from emqsim.protocol import Queue
    from emqsim.store import KeyStore

    keys = QueueKeys("parity")
    with PrivateRedis() as server:
        client = server.client()
        lua = RawScripts(client, key_names(keys.base))
        store = KeyStore(lambda: 1000)
        py = Queue(store, keys)
        for job in "01234":
            py.add(job)
            lua.add(job)
        for token in ("w:1", "w:2", "w:3"):
            assert py.take(token, 1000, 5000) == lua.take(token, 1000, 5000)

        def py_fetch(reply, token: str) -> str:
            if not reply.accepted or reply.retried:
                return ""
            return py.take(token, 2000, 5000) or ""

        fetch = ("w:4", 2000, 5000, True)
        r = py.finish("0", "w:1", True)
        assert [r.code, int(r.was_active), py_fetch(r, "w:4")] == lua.finish("0", "w:1", True, False, fetch)
        r = py.finish("1", "w:1", True)  # a foreign lock: refused, nothing fetched
        assert [r.code, int(r.was_active), ""] == lua.finish(
            "1", "w:1", True, False, ("w:5", 2000, 5000, True)
        )
        r = py.fail("1", "w:2", True, attempts=2)  # retried: back to wait, nothing fetched
        assert [r.code, int(r.was_active), int(r.retried), ""] == lua.fail(
            "1", "w:2", True, 2, ("w:5", 2000, 5000, True)
        )
        r = py.fail("2", "w:3", True, attempts=1)  # failed for good, the next job fetched
        assert [r.code, int(r.was_active), int(r.retried), py_fetch(r, "w:6")] == lua.fail(
            "2", "w:3", True, 1, ("w:6", 2000, 5000, True)
        )
        for name in ("wait", "active", "completed", "failed", "stalled"):
            key = getattr(keys, name)
            kind = client.type(key)
            got = client.lrange(key, 0, -1) if kind == "list" else sorted(client.smembers(key))
            want = store.lrange(key, 0, -1) if kind == "list" else sorted(store.smembers(key))
            assert got == want, name
        # lazy_fail's two-phase sweep: job 3, stalled once before, loses its lock; the second sweep marks it
        # (`defa`) and puts it back in `wait` instead of failing it
        client.hset(keys.job("3"), "stc", 1)
        store.hset(keys.job("3"), "stc", "1")
        for sweep in range(2):
            for side in (client, store):
                for key in (keys.lock("3"), keys.stalled_check):
                    side.delete(key)
            want = py.sweep_two_phase(3000 + sweep, 1000, 1, lazy_fail=True)
            got = lua.sweep_two_phase(3000 + sweep, 1000, 1, lazy_fail=True)
            assert [int(want.skipped), list(want.reclaimed), list(want.failed)] == got[:3], sweep
        assert client.hget(keys.job("3"), "defa") == store.hget(keys.job("3"), "defa") is not None
        for job in "01234":
            assert client.get(keys.lock(job)) == store.get(keys.lock(job)), job
            for field in ("ats", "atm", "processedOn"):
                assert client.hget(keys.job(job), field) == store.hget(keys.job(job), field), (job, field)
        client.close()


# -- fetchNext and a sandboxed child's crash, in one live run -----------------------------------------------
def test_a_live_finish_takes_the_next_job_and_a_dead_child_retries_its_job(need_redis, steady_live) -> None:
    """Two workers, six jobs of 0.5-3 s (seed 29), `fetch_next`, `attempts` 2. Job 0's worker freezes for 5 s
    0.6 s after its finish, which has already locked job 2 to it in the same script (BullMQ's moveToFinished
    under a backlog): job 2's lock lapses on a frozen worker and the sweep takes it back (a false reclaim,
    a duplicate execution). Job 3's sandboxed child is killed 0.5 s in (a real process, SIGKILL): its worker
    fails the job at once and, with an attempt left, the job goes back to `wait` and completes on its second
    attempt. Every take after a finish is that finish's fetchNext, as in the simulator."""
    scenario = Scenario(
        workers=2,
        jobs=6,
        duration=Uniform(0.5, 3.0),
        faults=(Freeze(job=0, after=1.374, duration=5.0), ChildCrash(job=3, after=0.5)),
        attempts=2,
        horizon=60,
    )
    policy = LeasePolicy(lease=2.0, beat=0.5, scan=1.0, fetch_next=True)
    live = steady_live(scenario, policy, time_scale=SCALE, seed=29)
    sim = simulate(scenario, policy, seed=29)
    assert outcomes(live) == outcomes(sim)
    assert ("2", 1, "finish_rejected", "frozen") in outcomes(sim)
    assert ("3", 1, "failed", None) in outcomes(sim) and ("3", 2, "completed", None) in outcomes(sim)
    assert fetched(live) == fetched(sim) == [("2", 1), ("2", 2), ("3", 1), ("3", 2)]
    assert live.final_state == sim.final_state == {"wait": 0, "active": 0, "completed": 6, "failed": 0}
    for a, b in ((summarize(live), summarize(sim)),):
        assert (
            (a.false_reclaims, a.duplicate_executions) == (b.false_reclaims, b.duplicate_executions) == (1, 1)
        )
    crashes = [[e.time for e in r.worker_events if e.kind == "child_crash"] for r in (live, sim)]
    assert len(crashes[0]) == len(crashes[1]) == 1 and abs(crashes[0][0] - crashes[1][0]) <= MARGIN
    # Two workers sweep here, on fixed phases live and on the simulator's per-check offsets (results schema 7):
    # the two-phase sweep's marking and reclaiming checks can each fall a scan apart between the two.
    reclaim = [next(a.reclaimed_at for a in r.attempts if a.job == "2") for r in (live, sim)]
    assert abs(reclaim[0] - reclaim[1]) <= MARGIN + 2 * POLICY.sweep_interval_ms / 1000
    assert live.requests["finish"] == sim.requests["finish"]  # a fetch rides in its finish's round trip


def test_a_live_dead_child_fails_its_job_for_good_with_one_attempt(need_redis, steady_live) -> None:
    """`attempts` 1: job 0's child dies 0.5 s in and the job is failed at once (no lease waited out); the other
    jobs complete, as in the simulator."""
    scenario = Scenario(
        workers=2, jobs=3, duration=Fixed(1.0), faults=(ChildCrash(job=0, after=0.5),), horizon=60
    )
    live = steady_live(scenario, POLICY, time_scale=SCALE, seed=0)
    sim = simulate(scenario, POLICY, seed=0)
    assert (
        outcomes(live)
        == outcomes(sim)
        == [
            ("0", 1, "failed", None),
            ("1", 1, "completed", None),
            ("2", 1, "completed", None),
        ]
    )
    assert live.final_state == sim.final_state == {"wait": 0, "active": 0, "completed": 2, "failed": 1}
    failed = [next(a for a in r.attempts if a.job == "0") for r in (live, sim)]
    assert abs(failed[0].failed_at - failed[1].failed_at) <= MARGIN
    assert abs(failed[0].work_done - failed[1].work_done) <= MARGIN


# -- a failover whose clients stay on the demoted primary ------------------------------------------------------
def test_a_live_failover_leaves_the_workers_on_the_demoted_primary_for_readonly_seconds(
    need_redis, steady_live
) -> None:
    """tests/test_live_failover.py's failover (one worker, three 1 s jobs, lag 0.8 s, the workers away 1 s at
    1.5 s) with `readonly` 1 s, at time_scale 0.5: the workers come back through a proxy to the demoted primary,
    now a real replica of the promoted one, where every write gets READONLY: the renewal of job 1 fails
    (`renew_failed`, READONLY), its finish is refused with Redis's READONLY text and given up; 1 s later the
    proxy closes their connections and leads to the new primary, where job 1 is reclaimed and runs again. The
    same attempts, outcomes and finish results as the simulator."""
    from emqsim.faults import Outage

    scenario = Scenario(
        workers=1,
        jobs=3,
        duration=Fixed(1.0),
        faults=(Outage(at=1.5, duration=1.0, lost_writes=0.8, readonly=1.0),),
        phases="aligned",
        horizon=30.0,
    )
    live = steady_live(scenario, POLICY, time_scale=0.5, seed=1)
    sim = simulate(scenario, POLICY, seed=1)

    def results(run) -> list[tuple[str, int, str, str | None]]:
        return sorted((a.job, a.attempt, a.outcome, a.finish_result) for a in run.attempts)

    readonly = "READONLY You can't write against a read only replica."
    assert (
        results(live)
        == results(sim)
        == [
            ("0", 1, "completed", "accepted"),
            ("0", 2, "duplicate_completion", "accepted"),
            ("1", 1, "finish_rejected", readonly),
            ("1", 2, "completed", "accepted"),
            ("2", 1, "completed", "accepted"),
        ]
    )
    for run in (live, sim):
        refused = [e for e in run.lock_events if e.kind == "renew_failed" and e.detail == "READONLY"]
        assert refused and {e.job for e in refused} == {"1"}
        assert all(2.5 - 0.3 <= e.time < 3.5 + 0.3 for e in refused)  # in the READONLY window, 0.15 s real
    assert abs(live.end - sim.end) <= 0.3 + POLICY.sweep_interval_ms / 1000


# -- a silent partition: a proxy that stops forwarding without closing -------------------------------------
@pytest.mark.parametrize(
    ("give_up", "back"),
    [(924.6, 8.0), (2.0, 5.8)],
    ids=["tcp-retransmits", "tcp-gives-up"],
)
def test_a_live_silent_partition_holds_the_workers_requests_as_the_simulator_says(
    need_redis, steady_live, give_up, back
) -> None:
    """`silent-partition` shortened: one worker, one 6 s job, lease 3 s renewed every 1.5 s (at 1.08 and
    2.58 s), a reaper sweeping every 1 s; the worker's connection is partitioned for 3.5 s from 1.8 s, midway
    between two renewals (180 ms real from each). Its proxy holds every byte without closing: the renewal sent
    meanwhile reaches Redis only at the first TCP retransmission after the end (8.0 s), too late, so the
    reaper takes the job back from a live, `disconnected` worker, whose finish is then refused. With `give_up`
    2 s TCP gives up first: the proxy closes the connection at 3.8 s, the worker resends at its reconnect
    (5.8 s, a SYN retransmission after the end). The simulator's outcomes, connection records and refused
    renewal (at Redis's time)."""
    from emqsim.faults import Partition

    partition = Partition(at=1.8, duration=3.5, worker=0, give_up=give_up)
    assert partition.at + partition.reconnect_after_ms() / 1000 == back
    scenario = Scenario(
        name="silent-partition-live", workers=1, jobs=1, duration=Fixed(6.0), faults=(partition,), horizon=60
    )
    policy = LeasePolicy(lease=3.0, beat=1.5, scan=1.0, swept_by="reaper")
    live = steady_live(scenario, policy, time_scale=SCALE, seed=0)
    sim = simulate(scenario, policy, seed=0)
    assert (
        outcomes(live)
        == outcomes(sim)
        == [("0", 1, "finish_rejected", "disconnected"), ("0", 2, "completed", None)]
    )
    for run in (live, sim):
        events = [(e.kind, e.time) for e in run.worker_events if e.kind in ("disconnect", "reconnect")]
        assert [k for k, _ in events] == ["disconnect", "reconnect"]
        assert abs(events[0][1] - 1.8) <= MARGIN and abs(events[1][1] - back) <= MARGIN
        refused = [e.time for e in run.lock_events if e.kind == "renew_failed"]
        assert refused and abs(refused[0] - back) <= MARGIN, refused  # the held renewal, run at `back`
    assert abs(live.end - sim.end) <= MARGIN


# -- the bullmq preset (fetch_next and lazy_fail) --------------------------------------------------------------
def test_the_bullmq_preset_runs_live_and_a_lazily_failed_job_fails_at_its_next_take(
    need_redis, steady_live
) -> None:
    """The `bullmq` preset (lease 2 s, scan 1 s; `fetch_next`, `lazy_fail`, maxStalledCount 1) with every
    renewal lost (loss 0.999 on renewals): one 5 s job's lock lapses on each of two live workers in turn; the
    second reclaim is past maxStalledCount, so the sweep marks the job (`defa`) and puts it back, and its next
    taker fails it at once without starting it. The simulator's attempts and outcomes."""
    from emqsim import Network
    from emqsim.presets import preset

    policy = preset("bullmq", lease=2.0, scan=1.0)
    scenario = Scenario(workers=2, jobs=1, duration=Fixed(5.0), network=Network(loss=0.999), horizon=60)
    live = steady_live(scenario, policy, time_scale=SCALE, seed=0)
    sim = simulate(scenario, policy, seed=0)
    assert (
        outcomes(live)
        == outcomes(sim)
        == [
            ("0", 1, "finish_rejected", "alive"),
            ("0", 2, "finish_rejected", "alive"),
            ("0", 3, "failed", None),
        ]
    )
    assert live.final_state == sim.final_state == {"wait": 0, "active": 0, "completed": 0, "failed": 1}
    for run in (live, sim):
        first, second, third = sorted(run.attempts, key=lambda a: a.attempt)
        assert third.started_at is None  # failed by its taker, never started
        assert None not in (third.failed_at, second.reclaimed_at, first.finish_applied_at)
        # taken (and failed) as soon as a worker is free: at the reclaim, or when the first attempt's worker ends
        assert third.failed_at - max(second.reclaimed_at, first.finish_applied_at) <= MARGIN


# -- a resent command that runs twice (Network(resend_twice=True)) ---------------------------------------------
def resent_finish_live(resend_twice: bool) -> Scenario:
    """`resent-finish` (2 workers, the `bullmq` preset's fetchNext, a drop catching the reply of worker 0's
    finish) timed so that real time can hit it: the standard one's reply is in flight for 1 ms (half its 2 ms
    round trip), and a live worker's finish leaves several ms real late. Here the round trip is 0.2 s and worker
    0's finish is held by a blocked event loop until 2.6 s in both modes (its job's work ends inside the block,
    at 2.4 s simulated, ~2.0 s live, where round trips cost nothing): the drop at 2.77 s catches a reply sent in
    [2.57, 2.67) s, 35 ms real after 2.6 s at time_scale 0.5. Four 2 s jobs: worker 1 finishes first and its
    fetchNext takes job 2; worker 0's finish takes job 3."""
    from dataclasses import replace

    from emqsim import Block, Network, standard
    from emqsim.faults import Outage

    base = standard("resent-finish", resend_twice=resend_twice, jobs=4, duration=2.0)
    return replace(
        base,
        network=Network(rtt=Fixed(0.2), resend_twice=resend_twice),
        faults=(Block(worker=0, at=1.6, duration=1.0), Outage(at=2.77, duration=1.0, worker=0)),
        horizon=60,
    )


def test_a_live_resent_finish_runs_twice_and_orphans_the_job_its_first_run_took(
    need_redis, steady_live, monkeypatch
) -> None:
    """`Network(resend_twice=True)` live: by the simulator's rule the drop at 2.77 s catches the reply of the
    finish worker 0 sends at 2.6 s, so the worker sends it to the real redis-server (it completes the job and
    its fetchNext locks job 3 to the worker), throws the reply away, and at the reconnect plus half a round
    trip (3.87 s, the simulator's resent copy) sends the same command again: Redis refuses it ("Missing lock",
    code -2) and fetches nothing, so job 3 stays active, locked to a live worker that never starts it, until
    its lock lapses and a sweep moves it back; it then completes. The simulator's attempts and outcomes, its
    finish count (the copy is one more), the orphan's reclaim within lease + two scans of its take;
    `resend_twice=False` live matches the simulator too (the finish runs once, nothing is orphaned)."""
    import emqsim.live.runner as runner_module
    from emqsim.presets import preset

    events: list[dict] = []
    clock = []
    build = runner_module.build_run

    def spy(facts, *args, **kwargs):  # the workers' reports, for the resent copy's reply
        events[:] = list(facts.events)
        clock[:] = [facts.sim_s]
        return build(facts, *args, **kwargs)

    monkeypatch.setattr(runner_module, "build_run", spy)
    policy = preset("bullmq", lease=2.0, scan=1.0)
    scale, margin = 0.5, 0.15 / 0.5
    twice, once = resent_finish_live(True), resent_finish_live(False)
    live = steady_live(twice, policy, time_scale=scale, seed=0)
    resent = [e for e in events if e["e"] == "resent"]
    sim_s = clock[0]
    live_once = steady_live(once, policy, time_scale=scale, seed=0)
    sim, sim_once = simulate(twice, policy, seed=0), simulate(once, policy, seed=0)
    assert (
        outcomes(live)
        == outcomes(sim)
        == [
            ("0", 1, "completed", None),
            ("1", 1, "completed", None),
            ("2", 1, "completed", None),
            ("3", 1, "reclaimed", "alive"),
            ("3", 2, "completed", None),
        ]
    )
    assert live.final_state == sim.final_state == {"wait": 0, "active": 0, "completed": 4, "failed": 0}
    assert live.requests["finish"] == sim.requests["finish"] == sim_once.requests["finish"] + 1 == 5
    # the copy: one, of worker 0's finish, refused with Missing lock at the simulator's resend time
    assert [(e["kind"], e["w"], e["code"]) for e in resent] == [("finish", 0, -2)]
    assert abs(sim_s(resent[0]["t"]) - 3.87) <= margin
    for run in (live, sim):
        first = next(a for a in run.attempts if a.worker == 0 and a.finish_result == "accepted")
        orphan = next(a for a in run.attempts if a.job == "3" and a.attempt == 1)
        assert (
            orphan.worker == 0 and orphan.started_at is None
        )  # taken by the finish's first run, never started
        assert abs(orphan.taken_at - first.finish_applied_at) <= 0.001  # in the same script
        latency = orphan.reclaimed_at - orphan.taken_at
        assert 2.0 - margin <= latency <= 2.0 + 2 * 1.0 + margin, latency  # lease, then the two-phase sweep
    orphans = [next(a for a in r.attempts if a.job == "3") for r in (live, sim)]
    assert abs(orphans[0].reclaimed_at - orphans[1].reclaimed_at) <= margin + 2 * 1.0
    assert outcomes(live_once) == outcomes(sim_once) == [(str(j), 1, "completed", None) for j in range(4)]
    assert live_once.requests["finish"] == sim_once.requests["finish"] == 4


def test_the_live_catch_windows_are_the_simulators_rule() -> None:
    """`catch_windows` asks `Client.resent_at` (the simulator's own rule, not a copy): a send time is in a
    window, with the copy's time, exactly when the simulator says a drop catches its reply; at every ms a live
    worker sends (not inside an outage, where it queues, except at a reconnect, where the queue goes)."""
    from emqsim.client import Client
    from emqsim.live.resend import catch_windows

    for windows in ([(1000, 1500, 2000), (2050, 2100, 3000), (3150, 3200, 4000)], [(20006, 21006, 21006)]):
        backs = {back for _, _, back in windows}
        for rtt in (1, 2, 7, 200):
            spans = catch_windows(windows, rtt)
            for now in range(0, windows[-1][2] + 10):
                if any(a <= now < b for a, _, b in windows) and now not in backs:
                    continue
                after = Client.resent_at(now, rtt, windows)
                got = [again for lo, hi, again in spans if lo <= now < hi]
                assert got == ([] if after is None else [now + after]), (windows, rtt, now)
            assert spans, (windows, rtt)  # each case catches something


def test_a_live_worker_sends_a_caught_request_twice_with_the_same_arguments() -> None:
    """`Resending.deliver`, without Redis: a request of a kind the simulator resends, sent inside a catch
    window, is sent, its reply kept aside (`first`), and sent again with the same arguments at the copy's time;
    the copy's reply is the answer. Another kind, or a send outside the windows, goes once."""
    import threading
    import time

    from emqsim.live.worker import LiveWorker

    w = LiveWorker.__new__(LiveWorker)
    w.stopping = threading.Event()
    w.outages, w.held, w.switches, w.loss = [], [], [], 0.0
    now = time.time()
    w.resend = [(now - 1.0, now + 5.0, now + 0.2)]
    w.resend_kinds = {"finish", "renew"}
    sent: list[tuple[float, float]] = []

    def command(t: float) -> int:
        sent.append((t, time.time()))
        return len(sent)

    first: list = []
    t, reply = w.request("finish", command, first=first)
    assert len(sent) == 2 and sent[0][0] == sent[1][0]  # the same command: the same `now` argument
    assert sent[1][1] >= now + 0.2 and t >= now + 0.2  # sent again when the simulator's copy reaches Redis
    assert first == [(sent[0][0], 1)] and reply == 2
    sent.clear()
    assert w.request("sweep", command)[1] == 1 and len(sent) == 1  # not a kind the simulator resends
    w.resend = [(now + 60, now + 61, now + 62)]
    assert w.request("finish", command)[1] == 2 and len(sent) == 2  # outside the windows: once


def test_a_live_resent_take_runs_twice_and_orphans_the_job_its_first_run_took(
    need_redis, steady_live
) -> None:
    """A take (moveToActive, after a wake-up) whose reply a drop catches, live and simulated: worker 0's event
    loop is blocked from 0.1 s to 2.0 s while jobs 0 and 1 arrive (seed 27: 0.50 and 0.95 s; worker 1 takes
    job 0), so its take of job 1 leaves at 2.0 s in both modes, and the drop at 2.17 s (round trip 0.2 s)
    catches its reply: the take ran (job 1 locked to worker 0, never started), and its copy at the reconnect
    finds `wait` empty. Job 1's lock lapses and a sweep moves it back; it completes on its second attempt. The
    simulator's attempts and outcomes, the orphan's take and reclaim times (`resend_twice=False` is the finish
    test's, above). The simulated run ends once the work is done (the orphaned take counted as stopped)."""
    from emqsim import Block, Network
    from emqsim.faults import Outage

    def scenario(resend_twice: bool) -> Scenario:
        return Scenario(
            name="resent-take",
            workers=2,
            jobs=3,
            arrival_rate=1.0,
            duration=Fixed(4.0),
            faults=(Block(worker=0, at=0.1, duration=1.9), Outage(at=2.17, duration=1.0, worker=0)),
            network=Network(rtt=Fixed(0.2), resend_twice=resend_twice),
            horizon=60,
        )

    policy = LeasePolicy(lease=2.0, beat=0.5, scan=1.0, take_mode="after-wakeup")
    scale, margin = 0.5, 0.15 / 0.5
    live = steady_live(scenario(True), policy, time_scale=scale, seed=27)
    sim = simulate(scenario(True), policy, seed=27)
    assert (
        outcomes(live)
        == outcomes(sim)
        == [
            ("0", 1, "completed", None),
            ("1", 1, "reclaimed", "alive"),
            ("1", 2, "completed", None),
            ("2", 1, "completed", None),
        ]
    )
    assert live.final_state == sim.final_state == {"wait": 0, "active": 0, "completed": 3, "failed": 0}
    orphans = [next(a for a in r.attempts if a.job == "1" and a.attempt == 1) for r in (live, sim)]
    for orphan in orphans:
        assert orphan.worker == 0 and orphan.started_at is None
    # taken when it reached Redis: live at once, simulated half the 0.2 s round trip after the send at 2.0 s
    assert abs(orphans[0].taken_at - (orphans[1].taken_at - 0.1)) <= margin
    assert abs(orphans[0].reclaimed_at - orphans[1].reclaimed_at) <= margin + 0.1 + 1.0  # the sweeps' phases
    assert sim.end < 20  # the orphaned take counted as stopped (live: `children.py`)


# -- ioredis's maxRetriesPerRequest: requests rejected at a queue flush (Network(max_retries_per_request)) -------
def max_retries_live(max_retries: int | None, outage_for: float) -> tuple[Scenario, LeasePolicy]:
    """`max-retries-outage` timed for real time: one worker and one 8 s job (the standard one's two workers
    race for the jobs live, so the outage could hit another job than in the simulator), and the `bullmq`
    preset with a 10 s lock and a 5 s stalled check (with its 30 s ones the lost finish's job is reclaimed
    at 47.8 s; here at 18.0 s, 4.5 s real at time_scale 0.25). The worker's connection drops when the work
    ends (8 s): with `maxRetriesPerRequest` 0 ioredis flushes at 9 and 10 s (`faults.max_retries_flush_ms`)."""
    from emqsim import standard
    from emqsim.presets import preset

    scenario = standard(
        "max-retries-outage",
        max_retries=max_retries,
        outage_for=outage_for,
        duration=8.0,
        jobs=1,
        workers=1,
        horizon=60,
    )
    return scenario, preset("bullmq", lease=10.0, scan=5.0)


@pytest.mark.parametrize(
    ("max_retries", "outage_for", "want"),
    [
        (0, 5.0, [("0", 1, "finish_rejected", "alive"), ("0", 2, "completed", None)]),
        (0, 1.5, [("0", 1, "failed", None)]),
        (None, 5.0, [("0", 1, "completed", None)]),
    ],
    ids=["finish-lost", "job-failed", "null-waits"],
)
def test_a_live_worker_rejects_its_held_requests_at_ioredis_flushes(
    need_redis, steady_live, max_retries, outage_for, want
) -> None:
    """`Network(max_retries_per_request)` live, against the simulator for the same scenario and seed. With 0
    and a 5 s outage the finish, held since the drop at 8 s, is rejected at the flush at 9 s; the worker sends
    moveToFailed, which the flush at 10 s rejects too: the finish is given up (`finish_rejected` with ioredis's
    text, at 10 s), the renewal sent at 9.3 s is lost (`renew_lost`), the lock lapses and the stalled check
    takes the job back from the live worker; it runs again and completes. With a 1.5 s outage the client is
    back at 10 s, before the second flush, so the moveToFailed reaches the real Redis: the job fails with the
    error. With None (null) the finish waits for the reconnect (13 s) and the job completes once."""
    from emqsim.client import MAX_RETRIES_ERROR

    scenario, policy = max_retries_live(max_retries, outage_for)
    live = steady_live(scenario, policy, time_scale=SCALE, seed=0)
    sim = simulate(scenario, policy, seed=0)
    assert outcomes(live) == outcomes(sim) == want
    assert live.requests["finish"] == sim.requests["finish"]  # a moveToFailed counts as one, rejected or not
    assert live.requests["take"] == sim.requests["take"]  # so does a moveToActive rejected after the give-up
    if want[0][2] == "finish_rejected":
        # Every renewal sent, the rejected one too (the flaky runs sent 4 of 5: a due tick read as not due).
        # Not compared in the other two: there the renewal of 9.3 s waits behind the moveToFailed or finish
        # that ends the run at the reconnect, and live counts a renewal from its reply, which may come after
        # the worker is stopped (1 of 40 null-waits runs beside a busy loop); the simulator counts it when sent.
        assert live.requests["renew"] == sim.requests["renew"]
    error = MAX_RETRIES_ERROR.format(n=max_retries)
    first = [next(a for a in r.attempts if a.attempt == 1) for r in (live, sim)]
    for run, attempt in zip((live, sim), first, strict=True):
        lost = [e.time for e in run.lock_events if e.kind == "renew_lost"]
        released = [e for e in run.lock_events if e.kind == "released"]
        if want[0][2] == "finish_rejected":
            assert attempt.finish_result == error
            assert abs(attempt.finish_applied_at - 10.0) <= MARGIN  # given up at the second flush
            assert len(lost) == 1 and 9.0 <= lost[0] <= 10.0  # sent in the outage, rejected at 10 s
            assert attempt.reclaimed_at is not None and attempt.reclaimed_at > 10.0 + 5.0  # the lock lapsed
        elif want[0][2] == "failed":
            assert abs(attempt.failed_at - 10.0) <= MARGIN and not lost  # moveToFailed ran at the reconnect
            assert [e.detail for e in released] == [error]
        else:
            assert abs(attempt.finish_applied_at - 13.0) <= MARGIN and not lost
    # One worker sweeps on the simulator's phase, but a live check sent one interval after the last one's
    # reply can still meet its `stalled-check` key (set for exactly one interval; a ms edge of Redis's clock,
    # seen here before any outage too): it is skipped and the reclaim, and the end, come one scan later.
    scan = policy.sweep_interval_ms / 1000
    if first[0].reclaimed_at is not None:
        assert abs(first[0].reclaimed_at - first[1].reclaimed_at) <= MARGIN + scan
    assert abs(live.end - sim.end) <= MARGIN + scan
    assert live.final_state == sim.final_state


def test_the_live_flush_spans_are_the_simulators_rule() -> None:
    """`flush_spans` asks `Client.flush_time` and `Client.route_at` (the simulator's own rule, not a copy):
    a send time is in a span, with the flush's time and whether it had run at Redis, exactly when the
    simulator rejects a request sent then; a window that never recovers ends at the run's end."""
    from emqsim.client import Client
    from emqsim.faults import NEVER_MS
    from emqsim.live.flushes import flush_spans

    cases = (
        [(8000, 13000, 13000)],
        [(1000, 1500, 2000), (2050, 2100, 3000), (3150, 3200, 4000)],
        [(20000, 21500, 22000), (30000, 30000, 31000)],
        [(5000, 9000, NEVER_MS)],
    )

    def rule(now: int) -> int | None:
        out_ms, back_ms = Client.route_at(now, rtt, windows)
        return Client.flush_time(n, now, now + out_ms + back_ms, windows)

    for windows in cases:
        until = min(windows[-1][2], 30_000)
        for n in (0, 1, 20):
            for rtt in (1, 7, 200):
                spans = flush_spans(windows, n, rtt, until)
                # every ms around each drop, each reconnect and each flush; every 13th ms in between
                points = {0, until - 1, until}
                for begin, _, back in windows:
                    points |= {*range(begin - 210, begin + 10), *range(back - 5, back + 5)}
                    points |= set(range(begin, min(back, until), 13))
                flushes = {rule(t) for t in set(points)} - {None}
                points |= {f + d for f in flushes if f is not None for d in range(-3, 4)}
                for now in sorted(t for t in points if t >= 0):
                    flush = rule(now)
                    out_ms, _ = Client.route_at(now, rtt, windows)
                    want = [] if flush is None or now >= until else [(flush, now + out_ms < flush)]
                    got = [(f, ran) for lo, hi, f, ran in spans if lo <= now < hi]
                    assert got == want, (windows, n, rtt, now)
        assert flush_spans(windows, 0, 2, until), windows  # each case rejects something


def test_a_live_worker_rejects_a_held_request_at_the_flush() -> None:
    """`Rejecting`, without Redis: a request of a kind the simulator rejects, sent in a span, is answered
    `Rejected` at the span's flush; one that had reached Redis first (`ran`) is sent once (its reply kept for
    the records); another kind, a parked take's poll, or a send outside the spans goes as usual."""
    import threading
    import time

    from emqsim.live.rejects import Rejected
    from emqsim.live.worker import LiveWorker

    w = LiveWorker.__new__(LiveWorker)
    w.stopping = threading.Event()
    w.outages, w.held, w.switches, w.loss, w.resend = [], [], [], 0.0, []
    now = time.time()
    w.flushes = [(now - 1.0, now + 5.0, now + 0.2, False)]
    w.reject_kinds = {"finish", "renew"}
    sent: list[float] = []

    def command(t: float) -> int:
        sent.append(t)
        return len(sent)

    issued: list[bool] = []
    t, reply = w.request("finish", command, issued=lambda: issued.append(True))
    assert isinstance(reply, Rejected) and not reply.ran and reply.reply is None
    assert sent == [] and issued == [True] and time.time() >= now + 0.2  # learnt at the flush
    assert w.request("sweep", command)[1] == 1  # a stalled check is never rejected
    assert w.request("finish", command, offline=False)[1] == 2  # nor a parked take's poll
    w.flushes = [(now - 1.0, now + 5.0, time.time() + 0.05, True)]
    _, reply = w.request("renew", command)
    assert isinstance(reply, Rejected) and reply.ran and reply.reply == 3 and len(sent) == 3
    w.flushes = [(now + 60, now + 61, now + 62, False)]
    assert w.request("finish", command)[1] == 4  # outside the spans: as usual


def test_a_live_lock_manager_reads_ages_finer_than_whole_real_ms() -> None:
    """The live lock manager's due rule on real ms, never truncated to whole ms. At time scale 0.25 BullMQ's
    tick comes 625 ms real after the reply to the last renewal, which was sent 625 ms plus the round trip
    (the simulator's 2 ms, 0.5 ms real) earlier: older than min_age (625), so due, as simulated. Truncated to
    whole ms that age read 625 about one tick in three and the strict rule renewed nothing: the cause of
    the max-retries live test's missing `renew_lost` (the renewal at 9.3 s never sent)."""
    from emqsim.live.worker import LiveWorker, Tracked

    w = LiveWorker.__new__(LiveWorker)
    w.tracked = {"0:1": Tracked("0", 1_000_000.7)}
    assert w.due_at(1_000_000.7 + 625.2, 625, strict=True) == [("0", "0:1")]  # whole ms: read 625
    assert w.due_at(1_000_000.7 + 625, 625, strict=True) == []  # exactly as old: not due when strict
    assert w.due_at(1_000_000.7 + 625, 625, strict=False) == [("0", "0:1")]  # due when not strict
    assert w.due_at(1_000_000.7 + 624.9, 625, strict=False) == []
    w.tracked["0:2"] = Tracked("1", 1_000_300.0)
    assert w.due_at(1_000_926.0, 625, strict=True) == [("0", "0:1"), ("1", "0:2")]


def test_a_live_finish_that_ran_before_the_drop_is_rejected_and_its_fetched_job_orphaned(
    need_redis, steady_live
) -> None:
    """A rejected request that had already run at Redis (the simulator's `REJECTED_RAN`), live: the
    resent-finish timing above (round trip 0.2 s, worker 0's finish held by a block until 2.6 s, the drop at
    2.77 s) with `maxRetriesPerRequest` 0 instead of a resend: the disconnect itself flushes, and a finish
    sent in [2.57, 2.67) s had reached Redis first, so it runs on the real server (the job completes and its
    fetchNext locks job 3 to the worker), the worker learns of it only as a rejection at 2.77 s and sends
    moveToFailed, which reaches Redis at the reconnect (3.77 s) and is refused (Missing lock), leaving the
    records as the finish left them. Job 3, taken and never started, is reclaimed after its lease and runs
    again. The simulator's attempts, outcomes and finish count (four finishes and the moveToFailed)."""
    from dataclasses import replace

    from emqsim import Network
    from emqsim.presets import preset

    base = resent_finish_live(False)
    scenario = replace(base, network=Network(rtt=Fixed(0.2), max_retries_per_request=0))
    policy = preset("bullmq", lease=2.0, scan=1.0)
    scale, margin = 0.5, 0.15 / 0.5
    live = steady_live(scenario, policy, time_scale=scale, seed=0)
    sim = simulate(scenario, policy, seed=0)
    assert (
        outcomes(live)
        == outcomes(sim)
        == [
            ("0", 1, "completed", None),
            ("1", 1, "completed", None),
            ("2", 1, "completed", None),
            ("3", 1, "reclaimed", "alive"),
            ("3", 2, "completed", None),
        ]
    )
    assert live.requests["finish"] == sim.requests["finish"] == 5
    assert live.final_state == sim.final_state == {"wait": 0, "active": 0, "completed": 4, "failed": 0}
    for run in (live, sim):
        orphan = next(a for a in run.attempts if a.job == "3" and a.attempt == 1)
        ran = next(a for a in run.attempts if a.worker == 0 and a.finish_applied_at == orphan.taken_at)
        assert ran.finish_result == "accepted" and ran.finish_applied_at < 2.77  # before the drop
        assert orphan.worker == 0 and orphan.started_at is None
        latency = orphan.reclaimed_at - orphan.taken_at
        assert 2.0 - margin <= latency <= 2.0 + 2 * 1.0 + margin, latency  # lease, then the two-phase sweep
