"""Issue 25's connection that never recovers, on the real BullMQ 6 library and a real Redis, against emqsim.

One session on one private redis-server (`validate_bullmq.real_redis`; 9.5-12 s measured on a 2-core
machine at load average 7-8, 13-18 s for the file with emqsim's side, 9 CPU s with the node processes). Each
victim is a real BullMQ Worker (validation/bullmq/stalls.mjs, concurrency 1, one 4 s job, lockDuration
4000 ms, stalledInterval 2000 ms) talking to Redis through its own `RedisProxy`; U(1, 3) s into its job the
proxy is `cut` (every connection closed with a FIN, new ones refused) and 0.3 s later points at Redis
again. A sweep-only Worker (worker.mjs --sweep-only, its own direct connection) runs BullMQ's stalled
checker for every queue.

- **stuck**: the victim's connection is user-supplied with an ioredis `retryStrategy` that returns null at
  its first call (`--retry-limit 0`): ioredis ends the client at the close and never reconnects, though Redis
  is back 0.3 s later. The victim renews nothing more and its finish never reaches Redis; the lock lapses
  and the sweeper moves the job back to `wait` (`stalled`), from a worker that is alive. emqsim:
  `Outage(recovers=False)` on worker 0 of 2 (worker 1 the healthy sweeper): every job reclaimed.
- **control**: BullMQ's default retry strategy (reconnects after 1 s), the same outage: the lock (4 s,
  renewed every 2 s) outlives it, the job completes, nothing is reclaimed. emqsim: `Outage(recovers=True)`.

Each count is judged with a binomial band (`binom.interval(0.999, n, p_sim)`) around emqsim's prediction for
the same settings, and the other model must fall outside it. A stuck victim also opens no new connection, its
job ends in `wait` with BullMQ's stalled counter at 1, and it is reclaimed 2..6 s after the cut (the lock,
renewed every 2 s, lapses 2..4 s after it; the next 2 s sweep takes it), as emqsim's reclaims are.

A loaded machine can add to a measured reclaim time in two ways, neither of them BullMQ's: the harness's
clock read before the cut is early by however long the proxy's loop takes to run the cut (the process's many
threads share one GIL), and the healthy sweeper's checks can come late. One CI run measured a reclaim 6.53 s
after the cut (the bound 6 s plus 0.5 s slack); which of the two it was is not known. So the cut's time is
stamped on the proxy's own loop when the cut takes effect, and a session in which the sweeper ran SLACK or more
late (`sweeper_late`: its checks' gaps past stalledInterval and their reply delays, around each reclaim) is not
judged: it runs again under fresh queue names, at most STEADY_ATTEMPTS times in all. No bound was loosened.

Marked slow and redis (run by `.ci/run`); skipped like tests/test_bullmq_real.py when node, the node_modules
or redis-server are missing (EMQSIM_REQUIRE_BULLMQ=1 turns the skip into a failure).
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))  # beside its node scripts
import validate_bullmq as vb  # noqa: E402

from emqsim import Fixed, Scenario, simulate  # noqa: E402
from emqsim.faults import Outage  # noqa: E402
from emqsim.live.proxy import RedisProxy  # noqa: E402
from emqsim.presets import preset  # noqa: E402

LOCK_MS, STALLED_MS = 4000, 2000
JOB_MS = 4000
GROUPS = {"stuck": 5, "control": 5}  # group -> victims
OUTAGE_AFTER = (1.0, 3.0)  # s into the job: the cut
OUTAGE_FOR = 0.3  # s: Redis is reachable again this long after the cut
SIM_RUNS = 40  # emqsim replications per prediction
SLACK = 0.5  # s: a real event's timing against the simulated span (node and the loaded machine's latency)
DEADLINE = 25.0  # s: the session's real experiment ends by then
STEADY_ATTEMPTS = 3  # sessions in all, while the machine makes the sweeper late (`session`)


def real(test: Any) -> Any:
    return pytest.mark.redis(pytest.mark.slow(test))


@dataclass
class Victim:
    group: str  # "stuck" (never reconnects) or "control" (BullMQ's default retry)
    queue: str
    events: list[dict[str, Any]] = field(default_factory=list)
    proxy: RedisProxy | None = None
    cut_at: float | None = None  # wall-clock time of the cut (when it took effect, on the proxy's loop)
    accepted_at_cut: int | None = None  # connections the proxy had forwarded by the cut
    accepted_at_end: int | None = None
    final_state: str | None = None  # where job 1 is at the end: wait, active, completed, failed
    stalled_count: int = 0  # job 1's stc (BullMQ's stalled counter) at the end
    done: threading.Event = field(default_factory=threading.Event)

    def reclaimed(self) -> bool:
        """The sweeper moved job 1 back (its lock lapsed), or a renewal found the lock gone."""
        return any(
            (e["ev"] == "stalled" and e.get("job") == "1") or (e["ev"] == "renew_failed" and "1" in e["jobs"])
            for e in self.events
        )


def _run_session(sock: str, workdir: Path, attempt: int = 0) -> list[Victim]:
    import redis

    rdb = redis.Redis(unix_socket_path=sock)
    rng = np.random.default_rng(25)
    retry = f"-retry{attempt}" if attempt else ""  # a session run again uses fresh queues on the same Redis
    victims = [Victim(g, f"{g}-{k}{retry}") for g, n in GROUPS.items() for k in range(n)]
    timers: list[threading.Timer] = []

    def cut(v: Victim) -> None:
        assert v.proxy is not None
        v.accepted_at_cut = v.proxy.accepted
        v.proxy.cut()
        v.cut_at = v.proxy.cut_at  # when the cut took effect, stamped on the proxy's loop
        vb.later(timers, OUTAGE_FOR, lambda: v.proxy.point(sock) if v.proxy is not None else None)

    def on_message(v: Victim, msg: dict[str, Any]) -> None:
        v.events.append(msg)
        ev = msg["ev"]
        if ev == "start" and msg.get("job") == "1" and v.cut_at is None and msg.get("attemptsMade") == 0:
            at = float(rng.uniform(*OUTAGE_AFTER))
            vb.later(timers, msg["t"] / 1000 + at - time.time(), lambda: cut(v))
        if msg.get("job") == "1" and (ev == "completed" or (v.group == "stuck" and ev == "stalled")):
            v.done.set()

    def worker_args(v: Victim) -> list[str]:
        return [
            "--jobs",
            json.dumps([{"ms": JOB_MS}]),
            *(["--retry-limit", "0"] if v.group == "stuck" else []),
        ]

    vb.run_behind_proxies(
        sock, workdir, victims, (LOCK_MS, STALLED_MS), worker_args, on_message, DEADLINE, timers
    )
    for v in victims:
        assert v.proxy is not None
        v.accepted_at_end = v.proxy.accepted  # the connections it forwarded (closed now, the count stays)
        v.stalled_count = int(rdb.hget(f"bull:{v.queue}:1", "stc") or 0)
        v.final_state = vb.job_state(rdb, v.queue, "1")
    return victims


def sweeper_late(victims: list[Victim]) -> float:
    """How late the healthy sweeper ran, in s, around each victim's reclaim: from the last check sent before the
    cut to the one that reclaimed (or the last), the worst of each gap between two checks past stalledInterval
    and each check's reply delay (its `sweep_attempt` event's time past its send). BullMQ schedules the next
    check stalledInterval after a check ends, so on a steady machine both are a few ms; what is more is the
    machine's lateness (node waiting for a core), which delays a reclaim by as much, whatever the protocol."""
    late = 0.0
    for v in victims:
        if v.cut_at is None:
            continue
        reclaimed = [e["t"] / 1000 for e in v.events if e["ev"] == "stalled"]
        end = min(reclaimed) if reclaimed else float("inf")
        sent = sorted((e["sent"] / 1000, e["t"] / 1000) for e in v.events if e["ev"] == "sweep_attempt")
        first = max([i for i, (at, _) in enumerate(sent) if at <= v.cut_at], default=0)
        window = [(at, t) for at, t in sent[first:] if at <= end]
        late = max([late, *(t - at for at, t in window)])
        gaps = [b[0] - a[0] - STALLED_MS / 1000 for a, b in itertools.pairwise(window)]
        late = max([late, *gaps])
    return late


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, need_bullmq: None) -> dict[str, Any]:
    """The experiment, run again (under fresh queue names, at most STEADY_ATTEMPTS times in all) while the
    healthy sweeper ran SLACK or more late (`sweeper_late`): such a session times the machine, not BullMQ, and
    is not judged (a NotJudged warning says so). The bounds below are unchanged."""
    from emqsim.live import Disturbed, until_steady

    with vb.real_redis(tmp_path_factory.mktemp("bullmq-stuck")) as (sock, workdir):
        t0 = time.time()

        def attempt(k: int) -> list[Victim]:
            return _run_session(sock, workdir, k)

        def disturbance(victims: list[Victim]) -> str | None:
            late = sweeper_late(victims)
            if late < SLACK:
                return None
            return (
                f"real BullMQ stuck session not judged: the sweeper ran up to {late * 1000:.0f} ms late "
                f"({SLACK * 1000:.0f} ms slack)"
            )

        try:
            victims = until_steady(attempt, disturbance, attempts=STEADY_ATTEMPTS)
        except Disturbed as exc:
            pytest.fail(str(exc))
        return {"victims": victims, "wall": time.time() - t0, "workdir": workdir}


# -- emqsim's predictions ---------------------------------------------------------------------------------------
@functools.cache
def predicted(recovers: bool) -> tuple[float, tuple[float, ...]]:
    """(P(the job is reclaimed), the reclaims' seconds after the outage's start) for an outage of OUTAGE_FOR s
    at U(1, 3) s into a 4 s job on worker 0, worker 1 the healthy sweeper (it also runs the reclaimed job
    again, which the real sweep-only Worker does not)."""
    policy = preset("bullmq", lease=LOCK_MS / 1000, scan=STALLED_MS / 1000)
    rng = np.random.default_rng(27)
    reclaimed, after = 0, []
    for r in range(SIM_RUNS):
        at = round(float(rng.uniform(*OUTAGE_AFTER)), 3)
        outage = Outage(at=at, duration=OUTAGE_FOR, worker=0, recovers=recovers)
        sc = Scenario(workers=2, jobs=1, duration=Fixed(JOB_MS / 1000), faults=(outage,), horizon=30.0)
        run = simulate(sc, policy, 27, r)
        assert run.attempts[0].worker == 0  # the faulty worker holds the job, as the real victim does
        times = [a.reclaimed_at for a in run.attempts if a.reclaimed_at is not None]
        reclaimed += bool(times)
        after += [t - at for t in times[:1]]
    return reclaimed / SIM_RUNS, tuple(after)


# -- the judgements -------------------------------------------------------------------------------------------
@real
def test_every_victim_ran_to_its_end(session: dict[str, Any]) -> None:
    victims = session["victims"]
    print(
        f"\nreal BullMQ stuck connections: {len(victims)} victims, {session['wall']:.1f} s, the sweeper "
        f"up to {sweeper_late(victims) * 1000:.0f} ms late"
    )
    assert all(v.cut_at is not None for v in victims), [v.queue for v in victims if v.cut_at is None]
    late = [v.queue for v in victims if not v.done.is_set()]
    assert not late, (late, session["workdir"])


@real
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_connection_that_never_recovers_loses_its_lock_as_the_model_says(
    session: dict[str, Any], group: str
) -> None:
    victims = [v for v in session["victims"] if v.group == group]
    recovers = group == "control"
    reclaimed = sum(v.reclaimed() for v in victims)
    (p, sim_after), (p_other, _) = predicted(recovers), predicted(not recovers)
    lo, hi = vb.binomial_band(len(victims), p)
    lo_other, hi_other = vb.binomial_band(len(victims), p_other)
    after = [
        min(e["t"] / 1000 for e in v.events if e["ev"] == "stalled") - v.cut_at
        for v in victims
        if v.cut_at is not None and any(e["ev"] == "stalled" for e in v.events)
    ]
    print(f"{group}: real reclaimed {reclaimed}/{len(victims)} (s after the cut: {[round(a, 2) for a in after]}), "
          f"emqsim Outage(recovers={recovers}) p={p:.2f} band {lo}..{hi}, "
          f"the other p={p_other:.2f} band {lo_other}..{hi_other}; emqsim's reclaims "
          f"{min(sim_after, default=0):.2f}..{max(sim_after, default=0):.2f} s after the outage")  # fmt: skip
    assert lo <= reclaimed <= hi
    assert not lo_other <= reclaimed <= hi_other
    # how: a stuck client never connects again (the proxy forwards nothing new) and its job is back in `wait`;
    # a control client reconnects (main and blocking connections) and its job completes
    reconnected = [(v.accepted_at_end or 0) - (v.accepted_at_cut or 0) for v in victims]
    states = [v.final_state for v in victims]
    if recovers:
        assert all(n >= 1 for n in reconnected), reconnected
        assert states == ["completed"] * len(victims), states
        assert [v.stalled_count for v in victims] == [0] * len(victims)
    else:
        assert reconnected == [0] * len(victims), reconnected
        assert states == ["wait"] * len(victims), states  # to run again on any healthy worker
        # counted once: maxStalledCount 1 let it back; a second lapse would fail it
        assert [v.stalled_count for v in victims] == [1] * len(victims)
        gave_up = [
            [e["times"] for e in v.events if e["ev"] == "retry" and e["delay"] is None] for v in victims
        ]
        assert all(g and g[0] == 1 for g in gave_up), gave_up  # ioredis asked once, at the first close
        # when: the lock lapses 2..4 s after the cut (renewed every 2 s, 4 s lease) and the next sweep (every
        # 2 s) takes it: 2..6 s after the cut. emqsim's reclaim times lie in that window, and so do the real
        # ones (stalled events timed by node on a loaded machine), give or take SLACK
        lo_s, hi_s = LOCK_MS / 2000, LOCK_MS / 1000 + STALLED_MS / 1000
        assert all(lo_s <= a <= hi_s for a in sim_after), sim_after
        assert all(lo_s - SLACK <= a <= hi_s + SLACK for a in after), after
        errors = [e["error"] for v in victims for e in v.events if e["ev"] == "error"]
        print(f"stuck victims' errors: {len(errors)}, {sorted(set(errors))}")


# -- the harness's own rules (no Redis, no node) ------------------------------------------------------------------
def test_a_cut_is_stamped_when_it_takes_effect_on_the_proxys_loop() -> None:
    proxy = RedisProxy("/nonexistent/redis.sock")
    try:
        assert proxy.cut_at is None
        before = time.time()
        proxy.cut()
        assert proxy.cut_at is not None and before <= proxy.cut_at <= time.time()
    finally:
        proxy.close()


def test_the_sweeper_is_late_by_its_gaps_past_the_interval_and_its_reply_delays_around_the_reclaim() -> None:
    def attempt(sent: float, took: float = 0.005) -> dict[str, Any]:
        return {"ev": "sweep_attempt", "sent": sent * 1000, "t": (sent + took) * 1000}

    steady = Victim("stuck", "q", cut_at=10.5)
    steady.events = [attempt(s) for s in (6.0, 8.0, 10.0, 12.0, 14.0)] + [{"ev": "stalled", "t": 14_010}]
    assert sweeper_late([steady]) == pytest.approx(0.005)
    late = Victim("stuck", "q", cut_at=10.5)  # the check after the cut came 0.6 s late, then one replied late
    late.events = [attempt(s) for s in (8.0, 10.0, 12.6)] + [
        attempt(14.6, 0.3),
        {"ev": "stalled", "t": 14_900},
    ]
    assert sweeper_late([late]) == pytest.approx(0.6)
    # what came before the last check ahead of the cut, or after the reclaim, does not count
    early = Victim("stuck", "q", cut_at=10.5)
    early.events = [attempt(s) for s in (2.0, 7.0, 9.0, 11.0)] + [
        {"ev": "stalled", "t": 11_010},
        attempt(16.0),
    ]
    assert sweeper_late([early]) == pytest.approx(0.005)
