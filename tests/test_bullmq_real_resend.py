"""Issue 25's resent command (item 6), on the real BullMQ 6 library and a real Redis, against emqsim.

ioredis resends a command whose reply a connection drop caught (`autoResendUnfulfilledCommands`, on by
default), though it may have run at Redis already: then it runs twice. One session on one private
redis-server (`validate_bullmq.real_redis`; 9.7-10.6 s measured on a 2-core machine at load average 5-6,
13-16.5 s for the file with emqsim's side, 8.5 CPU s with the node processes). Each victim is a real BullMQ Worker (validation/bullmq/stalls.mjs,
concurrency 1, lockDuration 4000 ms, stalledInterval 2000 ms) with two jobs: job 1 runs 1 s and then waits
for a file, job 2 waits in the queue. It talks to Redis through its own `RedisProxy`. The harness holds the
proxy's replies (`hold_replies`: commands still reach Redis), creates the file, and once job 1's finish
(moveToFinished, with fetchNext) has run at Redis (its finishedOn is set, read on a direct connection):

- **resend**: the proxy is `cut` (every connection closed with a FIN, the held reply dropped) and points at
  Redis again 0.3 s later; ioredis reconnects after BullMQ's 1 s backoff and resends the finish.
  emqsim: `Network(resend_twice=True)`, an `Outage` catching the finish's reply on worker 0 of 2.
- **control**: the replies are held for the same 0.3 s and then released, with no drop: the finish runs
  once and its reply is read late, which is what emqsim's `Network(resend_twice=False)` models.

A sweep-only Worker (worker.mjs --sweep-only, its own direct connection) runs BullMQ's stalled checker for
every queue. The count of victims whose job 2 is orphaned (fetched by the first finish, then moved back to
`wait` as stalled by a stalled check: the sweeper's, or the victim's own) is judged with a binomial band (`binom.interval(0.999, n, p_sim)`) around
emqsim's prediction for the same settings, and the other model must fall outside it. How it happens is
checked too: a resend victim sends the finish twice (ioredis's resend goes through the patched
`sendCommand`), the second run is refused with "Missing lock", job 1 stays completed once, job 2's reclaim
falls LOCK..LOCK+STALLED s after the first run as emqsim's does, and the live victim then runs job 2.

The last test checks `RedisProxy.hold_replies` on its own against an echo server (quick: no Redis, no node).
The real ones are marked slow and redis (run by `.ci/run`); skipped like tests/test_bullmq_real.py when node, the node_modules
or redis-server are missing (EMQSIM_REQUIRE_BULLMQ=1 turns the skip into a failure).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))  # beside its node scripts
import validate_bullmq as vb  # noqa: E402

from emqsim import Fixed, Network, Scenario, simulate  # noqa: E402
from emqsim.faults import Outage  # noqa: E402
from emqsim.live.proxy import RedisProxy  # noqa: E402
from emqsim.presets import preset  # noqa: E402

LOCK_MS, STALLED_MS = 4000, 2000
JOB_MS = 1000
GROUPS = {"resend": 5, "control": 3}  # group -> victims
OUTAGE_FOR = 0.3  # s: the proxy refuses connections (resend) or holds replies (control) this long
SIM_RUNS = 5  # emqsim replications per prediction
SLACK = 0.5  # s: a real event's timing against the simulated span (node and the loaded machine's latency)
DEADLINE = 20.0  # s: the session's real experiment ends by then


def real(test: Any) -> Any:
    return pytest.mark.redis(pytest.mark.slow(test))


@dataclass
class Victim:
    group: str  # "resend" (the reply is dropped with the connection) or "control" (only delayed)
    queue: str
    signal_file: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    proxy: RedisProxy | None = None
    ran_at: float | None = None  # job 1's finishedOn (s): the first run of its finish, and job 2's fetch
    cut_at: float | None = None
    problem: str | None = None  # the harness could not act as planned
    final: dict[str, str | None] = field(default_factory=dict)  # job id -> its state at the end
    done: threading.Event = field(default_factory=threading.Event)

    def count(self, ev: str, job: str) -> int:
        return sum(e["ev"] == ev and e.get("job") == job for e in self.events)

    def orphaned(self) -> bool:
        """Job 2, fetched by job 1's first finish, was moved back to `wait` by a stalled check (`stalled`)."""
        return any(e["ev"] == "stalled" and e.get("job") == "2" for e in self.events)


def _run_session(sock: str, workdir: Path) -> list[Victim]:
    import redis

    rdb = redis.Redis(unix_socket_path=sock)
    victims = [Victim(g, f"{g}-{k}", workdir / f"{g}-{k}.go") for g, n in GROUPS.items() for k in range(n)]
    threads: list[threading.Thread] = []

    def act(v: Victim) -> None:
        """Hold the replies, let job 1 finish, and once its finish ran at Redis drop (or delay) the reply."""
        assert v.proxy is not None
        v.proxy.hold_replies()
        v.signal_file.touch()
        end = time.time() + 5.0
        while time.time() < end:
            finished = rdb.hget(f"bull:{v.queue}:1", "finishedOn")
            if finished is not None:
                v.ran_at = int(finished) / 1000
                break
            time.sleep(0.005)
        else:
            v.problem = "job 1's finish never ran at Redis"
            v.proxy.release_replies()
            return
        if v.group == "resend":
            v.proxy.cut()
            v.cut_at = v.proxy.cut_at  # when the cut took effect, stamped on the proxy's loop
            time.sleep(OUTAGE_FOR)
            v.proxy.point(sock)
        else:
            time.sleep(OUTAGE_FOR)
            v.proxy.release_replies()

    def on_message(v: Victim, msg: dict[str, Any]) -> None:
        v.events.append(msg)
        if msg["ev"] == "waiting" and msg.get("job") == "1" and not v.signal_file.exists():
            thread = threading.Thread(target=act, args=(v,), daemon=True)
            threads.append(thread)
            thread.start()
        if msg["ev"] == "completed" and msg.get("job") == "2":
            v.done.set()

    def worker_args(v: Victim) -> list[str]:
        return ["--jobs", json.dumps([{"ms": JOB_MS, "waitFor": str(v.signal_file)}, {"ms": JOB_MS}])]

    vb.run_behind_proxies(sock, workdir, victims, (LOCK_MS, STALLED_MS), worker_args, on_message, DEADLINE)
    for v in victims:
        for job in ("1", "2"):
            v.final[job] = vb.job_state(rdb, v.queue, job)
    return victims


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, need_bullmq: None) -> dict[str, Any]:
    with vb.real_redis(tmp_path_factory.mktemp("bullmq-resend")) as (sock, workdir):
        t0 = time.time()
        victims = _run_session(sock, workdir)
        return {"victims": victims, "wall": time.time() - t0, "workdir": workdir}


# -- emqsim's predictions ---------------------------------------------------------------------------------------
@functools.cache
def predicted(resend_twice: bool) -> tuple[float, tuple[float, ...]]:
    """(P(a job fetched by the caught finish is orphaned and reclaimed), the reclaims' seconds after that
    fetch) for an outage of OUTAGE_FOR s catching the reply of worker 0's first finish (as the standard
    scenario `resent-finish` does), 2 workers, 3 jobs of JOB_MS (worker 1 stands for the sweeper; it also
    runs jobs, which the real sweep-only Worker does not)."""
    policy = preset("bullmq", lease=LOCK_MS / 1000, scan=STALLED_MS / 1000)
    duration = JOB_MS / 1000
    orphaned, after = 0, []
    for r in range(SIM_RUNS):
        outage = Outage(at=duration + 0.006, duration=OUTAGE_FOR, worker=0)  # `resent-finish`'s timing
        sc = Scenario(
            workers=2,
            jobs=3,
            duration=Fixed(duration),
            faults=(outage,),
            network=Network(resend_twice=resend_twice),
            horizon=30.0,
        )
        run = simulate(sc, policy, 25, r)
        # taken for worker 0 (by its finish's fetch), never started by it, reclaimed by a sweep
        reclaimed = [
            a for a in run.attempts if a.worker == 0 and a.started_at is None and a.reclaimed_at is not None
        ]
        orphaned += bool(reclaimed)
        after += [a.reclaimed_at - a.taken_at for a in reclaimed]
    return orphaned / SIM_RUNS, tuple(after)


# -- the judgements -------------------------------------------------------------------------------------------
@real
def test_every_victim_ran_to_its_end(session: dict[str, Any]) -> None:
    victims = session["victims"]
    print(f"\nreal BullMQ resent finishes: {len(victims)} victims, {session['wall']:.1f} s")
    assert [v.problem for v in victims] == [None] * len(victims)
    assert all(v.ran_at is not None for v in victims), [v.queue for v in victims if v.ran_at is None]
    late = [v.queue for v in victims if not v.done.is_set()]
    assert not late, (late, session["workdir"])


@real
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_resent_finish_orphans_the_fetched_job_as_the_model_says(
    session: dict[str, Any], group: str
) -> None:
    victims = [v for v in session["victims"] if v.group == group]
    resend = group == "resend"
    orphaned = sum(v.orphaned() for v in victims)
    (p, sim_after), (p_other, _) = predicted(resend), predicted(not resend)
    lo, hi = vb.binomial_band(len(victims), p)
    lo_other, hi_other = vb.binomial_band(len(victims), p_other)
    after = [
        min(e["t"] / 1000 for e in v.events if e["ev"] == "stalled" and e.get("job") == "2") - v.ran_at
        for v in victims
        if v.ran_at is not None and v.orphaned()
    ]
    errors = sorted({e["error"] for v in victims for e in v.events if e["ev"] == "error"})
    sent = [(v.count("finish_sent", "1"), v.count("fail_sent", "1")) for v in victims]
    print(f"{group}: real orphaned {orphaned}/{len(victims)} (reclaimed s after the first run: "
          f"{[round(a, 2) for a in after]}), emqsim Network(resend_twice={resend}) p={p:.2f} band {lo}..{hi}, "
          f"the other p={p_other:.2f} band {lo_other}..{hi_other}; emqsim's reclaims "
          f"{min(sim_after, default=0):.2f}..{max(sim_after, default=0):.2f} s after the fetch; "
          f"(finishes, fails) sent for job 1: {sent}; errors: {errors}")  # fmt: skip
    assert lo <= orphaned <= hi
    assert not lo_other <= orphaned <= hi_other
    # job 1 completed once either way, and job 2 ran to its end on the live victim
    assert [v.final for v in victims] == [{"1": "completed", "2": "completed"}] * len(victims)
    assert [v.count("completed", "2") for v in victims] == [1] * len(victims)
    v0 = victims[0]
    trace = [
        (e["ev"], e.get("job") or e.get("error"), round(e["t"] / 1000 - (v0.ran_at or 0), 2))
        for e in v0.events
        if e["ev"] not in ("renewed", "ready")
    ]
    print(f"{v0.queue}'s events (s after the first run): {trace}")
    if resend:
        # how: ioredis sent the finish again after its reconnect (BullMQ's 1 s backoff from the cut); Redis
        # refused the copy (job 1's lock was gone); the Worker then tried to fail job 1 (handleFailed's
        # moveToFailed), refused too, and emitted the errors; it never heard of job 2
        assert sent == [(2, 1)] * len(victims), sent
        resent = [
            [e["t"] / 1000 - (v.cut_at or 0) for e in v.events if e["ev"] == "finish_sent"][1]
            for v in victims
        ]
        print(f"resent finishes s after the cut: {[round(r, 2) for r in resent]}")
        assert all(1.0 <= r <= 1.0 + SLACK for r in resent), resent
        per_victim = [
            sum(e["ev"] == "error" and "Missing lock" in e["error"] for e in v.events) for v in victims
        ]
        print(f"Missing lock errors per victim: {per_victim}")
        assert per_victim == [2] * len(victims), per_victim  # the resent finish's and the fail's
        assert all(any("Missing lock for job 1" in e for e in errors) for _ in victims), errors
        assert [v.count("completed", "1") for v in victims] == [0] * len(victims)  # the Worker never heard
        # job 2 was started only after its reclaim, by the same live victim
        starts = [[e["t"] / 1000 - v.ran_at for e in v.events if e["ev"] == "start" and e.get("job") == "2"] for v in victims]  # fmt: skip
        assert all(len(s) == 1 for s in starts), starts
        # when: the lock set at the fetch lapses LOCK s later; the sweep every STALLED s marked it and takes it
        lo_s, hi_s = LOCK_MS / 1000, LOCK_MS / 1000 + STALLED_MS / 1000
        assert sim_after and all(lo_s <= a <= hi_s for a in sim_after), sim_after
        assert all(lo_s - SLACK <= a <= hi_s + SLACK for a in after), after
    else:
        assert sent == [(1, 0)] * len(victims), sent
        assert [v.count("completed", "1") for v in victims] == [1] * len(victims)
        assert not errors, errors


# -- the proxy's reply hold, on its own (quick: an echo server on a unix socket, no Redis, no node) -----------
def test_a_reply_hold_lets_requests_through_and_a_cut_drops_the_held_replies(tmp_path: Path) -> None:
    import socket

    path = str(tmp_path / "echo.sock")
    received: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()

    def echo() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    while data := conn.recv(1024):
                        received.append(data)
                        conn.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    proxy = RedisProxy(path)
    try:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        client.sendall(b"a")
        assert client.recv(16) == b"a"  # forwarded both ways
        proxy.hold_replies()
        client.sendall(b"b")
        end = time.time() + 2
        while b"b" not in received and time.time() < end:
            time.sleep(0.005)
        assert received == [b"a", b"b"]  # the request reached the server and ran ...
        client.settimeout(0.2)
        with pytest.raises(TimeoutError):
            client.recv(16)  # ... but its reply is held
        proxy.release_replies()
        client.settimeout(2)
        assert client.recv(16) == b"b"  # released: the reply comes
        proxy.hold_replies()
        client.sendall(b"c")
        while b"c" not in received and time.time() < end + 2:
            time.sleep(0.005)
        proxy.cut()
        assert client.recv(16) == b""  # the held reply is dropped with the connection (a FIN)
        proxy.point(path)
        again = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        again.sendall(b"d")
        assert again.recv(16) == b"d"  # a cut ends the hold: a new connection gets its replies
        client.close()
        again.close()
    finally:
        proxy.close()
        server.close()
