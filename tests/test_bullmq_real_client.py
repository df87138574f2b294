"""Issue 25's client-side stalls on the real BullMQ 6 library and a real Redis, against emqsim's predictions.

One session on one private redis-server (`validate_bullmq.real_redis`), three experiments at once (about
20 s on a quiet 2-core machine), each a count of lost locks judged against the simulator's prediction with
a binomial band (`binom.interval(0.999, n, p_sim)`), and against the model it replaces, which must fall out:

- **the finish that takes the next job**: a victim Worker (concurrency 1, a backlog of 3 jobs) stops itself
  (SIGSTOP) right after writing job 1's moveToFinished, before it can read the reply; the harness reads
  Redis while it is stopped (job 2 is already active and locked: the finish took it) and resumes it F s
  after. lockDuration 2000 ms: F = 2.4 s loses job 2's lock every time (emqsim's `fetch_next`, the bullmq
  preset), F = 1.2 s never; a take in its own round trip (`fetch_next=False`) would lose none;
- **a silent partition**: each victim Worker talks to Redis through its own asyncio TCP proxy, which stops
  forwarding for D s (1.2 or 2.4 s) without closing anything, U(1.2, 2.2) s into a 4 s job, while a
  sweep-only Worker talks to Redis directly. ioredis sees no close: renewals are held, not resent, and the
  lock survives a 1.2 s partition (emqsim `Partition(retransmit=False)`, the proxy's kernel acknowledges
  the held bytes, so no TCP retransmission timing applies and TCP never gives up; the proxy does not close
  either, so the give-up path, 924.6 s by Linux's tcp_retries2, is the simulator's alone), where an
  `Outage` with a FIN would have the client back only at its first reconnect (1 s backoff: 2 s), losing
  every 1.2 s one;
- **a sandboxed child's crash with `attempts: 2`**: the child process exits 300 ms into job 1's first
  attempt; BullMQ retries the job (to the back of `wait`, after job 2) and its second attempt completes;
  with `attempts: 1` it is failed. No lease is waited out.

Marked slow and redis (run by `.ci/run`); skipped like tests/test_bullmq_real.py when node, the
node_modules or redis-server are missing (EMQSIM_REQUIRE_BULLMQ=1 turns the skip into a failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
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

from emqsim import Fixed, Scenario, simulate, standard  # noqa: E402
from emqsim.faults import Outage, Partition  # noqa: E402
from emqsim.presets import preset  # noqa: E402

LOCK_MS, STALLED_MS = 2000, 2000
FETCH_FREEZES = {2.4: 4, 1.2: 4}  # freeze length (s) after the finish -> victims
PARTITIONS = {2.4: 4, 1.2: 4}  # partition length (s) -> victims
PARTITION_AFTER = (1.2, 2.2)  # s into the 4 s job: after its first renewal
SANDBOX = {2: 3, 1: 2}  # attempts -> victims
SIM_RUNS = 40  # emqsim replications per prediction
DEADLINE = 60.0  # s: the whole session's real experiments end by then


def real(test: Any) -> Any:
    return pytest.mark.redis(pytest.mark.slow(test))


# -- a proxy that can stop forwarding without closing ---------------------------------------------------------
class SilentProxy:
    """TCP on loopback -> Redis's unix socket, in its own asyncio loop thread. `pause()` stops forwarding
    bytes both ways without closing either side (the kernel still acknowledges what the client sends, so the
    client sees a silent link, no FIN and no RST); `resume()` forwards what was held."""

    def __init__(self, redis_socket: str) -> None:
        self.redis_socket = redis_socket
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.gate = asyncio.Event()
        self.loop.call_soon_threadsafe(self.gate.set)
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._client, "127.0.0.1", 0), self.loop
        ).result(5)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                await self.gate.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self.gate.wait()  # a chunk read just before a pause waits for the resume
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.redis_socket)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    def pause(self) -> None:
        self.loop.call_soon_threadsafe(self.gate.clear)

    def resume(self) -> None:
        self.loop.call_soon_threadsafe(self.gate.set)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)


# -- the experiments ---------------------------------------------------------------------------------------------
@dataclass
class Victim:
    kind: str  # "fetch", "partition", "sandbox"
    queue: str
    length: float = 0.0  # freeze or partition length (s); attempts for a sandbox victim
    events: list[dict[str, Any]] = field(default_factory=list)
    proc: Any = None
    proxy: SilentProxy | None = None
    fetched_while_frozen: bool | None = None
    partitioned: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def lost(self, job: str) -> bool:
        """The job's lock lapsed on this victim: a sweep moved it back, or a renewal found it gone."""
        return any(
            (e["ev"] == "stalled" and e.get("job") == job) or (e["ev"] == "renew_failed" and job in e["jobs"])
            for e in self.events
        )


def _run_session(sock: str, workdir: Path) -> list[Victim]:
    import redis

    rdb = redis.Redis(unix_socket_path=sock)
    rng = np.random.default_rng(25)
    victims: list[Victim] = []
    for f, n in FETCH_FREEZES.items():
        victims += [Victim("fetch", f"fn-{f}-{k}", f) for k in range(n)]
    for d, n in PARTITIONS.items():
        victims += [Victim("partition", f"pt-{d}-{k}", d) for k in range(n)]
    for a, n in SANDBOX.items():
        victims += [Victim("sandbox", f"sb-{a}-{k}", a) for k in range(n)]
    timers: list[threading.Timer] = []
    procs: list[vb.NodeProcess] = []

    def on_message(v: Victim, proc: vb.NodeProcess, msg: dict[str, Any]) -> None:
        v.events.append(msg)
        ev = msg["ev"]
        if v.kind == "fetch" and ev == "finish_sent":

            def look() -> None:  # while it is stopped: did its finish take job 2?
                lock = rdb.get(f"bull:{v.queue}:2:lock")
                v.fetched_while_frozen = lock is not None and b"2" in rdb.lrange(
                    f"bull:{v.queue}:active", 0, -1
                )

            vb.later(timers, 0.2, look)
            vb.later(timers, msg["t"] / 1000 + v.length - time.time(), lambda: proc.signal(signal.SIGCONT))
        if v.kind == "partition" and ev == "start" and v.proxy is not None and not v.partitioned:
            v.partitioned = True  # the first attempt only (a re-take after a lapse starts again)
            assert v.proxy is not None
            proxy = v.proxy
            at = float(rng.uniform(*PARTITION_AFTER))
            vb.later(timers, msg["t"] / 1000 + at - time.time(), proxy.pause)
            vb.later(timers, msg["t"] / 1000 + at + v.length - time.time(), proxy.resume)
        last = {"fetch": "3", "partition": "1", "sandbox": "1"}[v.kind]
        final = ev == "completed" or (ev == "failed" and (v.kind != "sandbox" or v.length == 1))
        if final and msg.get("job") == last:
            v.done.set()

    common = ["--socket", sock, "--lock-duration", str(LOCK_MS), "--stalled-interval", str(STALLED_MS)]
    try:
        sweep_queues = [v.queue for v in victims if v.kind != "sandbox"]
        procs.append(
            vb.start_sweeper(
                common,
                sweep_queues,
                workdir / "sweeper.log",
                lambda p, m: [v.events.append(m) for v in victims if v.queue == m.get("queue")],
            )
        )
        for v in victims:
            if v.kind == "fetch":
                jobs = [{"ms": 300, "freezeAfterFinish": True}, {"ms": 3000}, {"ms": 300}]
                extra: list[str] = []
            elif v.kind == "partition":
                v.proxy = SilentProxy(sock)
                jobs, extra = [{"ms": 4000}], ["--port", str(v.proxy.port)]
            else:
                jobs = [{"ms": 600, "crashAfter": 300}, {"ms": 300}]
                extra = ["--sandbox", "--attempts", str(int(v.length))]
            v.proc = vb.NodeProcess(
                v.queue,
                "stalls.mjs",
                [*common, "--queue", v.queue, "--jobs", json.dumps(jobs), *extra],
                workdir / f"{v.queue}.log",
                lambda p, m, v=v: on_message(v, p, m),
            )
            procs.append(v.proc)
        end = time.time() + DEADLINE
        for v in victims:
            v.done.wait(max(0.0, end - time.time()))
        time.sleep(0.3)  # late events (a sweeper's stalled after the last completion)
        for v in victims:
            if v.kind == "sandbox":
                job = rdb.hgetall(f"bull:{v.queue}:1")
                v.events.append(
                    {"ev": "hash", "ats": int(job.get(b"ats", 0)), "atm": int(job.get(b"atm", 0))}
                )
                v.events.append({"ev": "states", "completed": rdb.zscore(f"bull:{v.queue}:completed", "1") is not None,
                                 "failed": rdb.zscore(f"bull:{v.queue}:failed", "1") is not None})  # fmt: skip
    finally:
        vb.end_session(timers, procs, [v.proxy for v in victims])
    return victims


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, need_bullmq: None) -> dict[str, Any]:
    with vb.real_redis(tmp_path_factory.mktemp("bullmq-client")) as (sock, workdir):
        t0 = time.time()
        victims = _run_session(sock, workdir)
        return {"victims": victims, "wall": time.time() - t0, "workdir": workdir}


# -- emqsim's predictions ---------------------------------------------------------------------------------------
def _policy(fetch_next: bool = True) -> Any:
    policy = preset("bullmq", lease=LOCK_MS / 1000, scan=STALLED_MS / 1000)
    return dataclasses.replace(policy, fetch_next=fetch_next)


def predicted_fetch_loss(freeze: float, fetch_next: bool = True) -> float:
    """P(the fetched job's lock lapses) for a freeze of `freeze` s 1 ms after the finish, under emqsim."""
    lost = 0
    for r in range(SIM_RUNS):  # one worker, as the real victim (the real sweeper only sweeps)
        sc = standard("finish-takes-next", freeze_for=freeze, duration=0.3, jobs=3, workers=1)
        run = simulate(sc, _policy(fetch_next), 25, r)
        lost += any(a.reclaimed_at is not None for a in run.attempts)
    return lost / SIM_RUNS


def predicted_partition_loss(length: float, fault: str) -> float:
    """P(the job's lock lapses) for a partition (or an outage) of `length` s at U(1.2, 2.2) s into a 4 s job."""
    rng = np.random.default_rng(26)
    lost = 0
    for r in range(SIM_RUNS):
        at = round(float(rng.uniform(*PARTITION_AFTER)), 3)
        kind = (
            Partition(at=at, duration=length, worker=0, retransmit=False)
            if fault == "partition"
            else Outage(at=at, duration=length, worker=0)
        )
        sc = Scenario(workers=1, jobs=1, duration=Fixed(4.0), faults=(kind,))
        run = simulate(sc, _policy(), 26, r)
        lost += any(a.reclaimed_at is not None for a in run.attempts)
    return lost / SIM_RUNS


def _victims(session: dict[str, Any], kind: str, length: float) -> list[Victim]:
    return [v for v in session["victims"] if v.kind == kind and v.length == length]


# -- the judgements -------------------------------------------------------------------------------------------
@real
def test_every_victim_ran_to_its_end(session: dict[str, Any]) -> None:
    print(f"\nreal BullMQ client stalls: {len(session['victims'])} victims, {session['wall']:.1f} s")
    stuck = [v.queue for v in session["victims"] if not v.done.is_set()]
    assert not stuck, (stuck, session["workdir"])


@real
@pytest.mark.parametrize("freeze", sorted(FETCH_FREEZES))
def test_the_finish_takes_the_next_job_and_a_freeze_after_it_lapses_that_lock(
    session: dict[str, Any], freeze: float
) -> None:
    victims = _victims(session, "fetch", freeze)
    assert all(v.fetched_while_frozen for v in victims), [(v.queue, v.fetched_while_frozen) for v in victims]
    lost = sum(v.lost("2") for v in victims)  # BullMQ's job ids start at 1: job 2 is the fetched one
    p = predicted_fetch_loss(freeze)
    lo, hi = vb.binomial_band(len(victims), p)
    print(
        f"finish+freeze {freeze} s: real lost {lost}/{len(victims)}, emqsim bullmq p={p:.2f} band {lo}..{hi}"
    )
    assert lo <= lost <= hi
    if freeze > LOCK_MS / 1000:  # the separate take hands a frozen worker nothing: rejected by the real runs
        lo_sep, hi_sep = vb.binomial_band(len(victims), predicted_fetch_loss(freeze, fetch_next=False))
        assert not lo_sep <= lost <= hi_sep


@real
@pytest.mark.parametrize("length", sorted(PARTITIONS))
def test_a_silent_partition_holds_renewals_as_the_partition_model_says(
    session: dict[str, Any], length: float
) -> None:
    victims = _victims(session, "partition", length)
    lost = sum(v.lost("1") for v in victims)
    p = predicted_partition_loss(length, "partition")
    lo, hi = vb.binomial_band(len(victims), p)
    p_outage = predicted_partition_loss(length, "outage")
    print(f"partition {length} s: real lost {lost}/{len(victims)}, emqsim Partition p={p:.2f} band {lo}..{hi}, "
          f"Outage p={p_outage:.2f}")  # fmt: skip
    assert lo <= lost <= hi
    if length < LOCK_MS / 1000:  # an outage with a FIN (reconnect backoff) would lose these: rejected
        lo_out, hi_out = vb.binomial_band(len(victims), p_outage)
        assert not lo_out <= lost <= hi_out
    assert not any(e["ev"] == "error" and "ECONN" in e.get("error", "") for v in victims for e in v.events)


@real
@pytest.mark.parametrize("attempts", sorted(SANDBOX))
def test_a_sandboxed_childs_crash_is_retried_while_attempts_last(
    session: dict[str, Any], attempts: int
) -> None:
    victims = _victims(session, "sandbox", attempts)
    sim = simulate(standard("child-crash", crash_after=0.3, duration=0.6, jobs=2, attempts=attempts),
                   _policy(), 0, 0)  # fmt: skip
    sim_job = [a for a in sim.attempts if a.job == "0"]
    retried = 0
    for v in victims:
        (hash_,) = [e for e in v.events if e["ev"] == "hash"]
        (states,) = [e for e in v.events if e["ev"] == "states"]
        failed = [e for e in v.events if e["ev"] == "failed" and e["job"] == "1"]
        assert failed and "Unexpected exit code" in failed[0]["error"]
        assert not v.lost("1")  # failed (or retried) by its own worker, never stalled
        if states["completed"] and hash_["ats"] == 2:
            retried += 1
            order = [e["job"] for e in v.events if e["ev"] == "active"]
            assert order == ["1", "2", "1"], order  # the retry went to the back of `wait`
        else:
            assert states["failed"] and hash_["ats"] == 1
    p = float(len(sim_job) == 2 and sim_job[1].outcome == "completed")
    lo, hi = vb.binomial_band(len(victims), p)
    print(f"child crash, attempts {attempts}: real retried {retried}/{len(victims)}, emqsim p={p:.0f}")
    assert lo <= retried <= hi


def test_real_bullmq_sessions_run_one_at_a_time(tmp_path: Path) -> None:
    """Without node: a second session waits for the first's lock (pytest runs files in parallel, and one
    session's node processes would disturb the other's timing)."""
    lock, order = tmp_path / "session.lock", []

    def second() -> None:
        with vb.one_session_at_a_time(lock):
            order.append("second")

    with vb.one_session_at_a_time(lock):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.2)
        order.append("first")
    thread.join(5)
    assert order == ["first", "second"]
