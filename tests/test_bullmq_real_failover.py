"""A Redis failover under real BullMQ 6 Workers, against emqsim's `Outage(lost_writes=S, readonly=R)`.

Two private redis-servers, A the primary and B its replica (`REPLICAOF` through a `RedisProxy`, so the
harness can make B lag), and one node process with one Worker (concurrency 1, lockDuration 2000 ms,
stalledInterval 2000 ms) per queue, all talking to Redis through a second proxy. At the failover, t = 0:

- t = -S (S = 1 s): B's replication link stops forwarding: B lags S s behind A;
- t = 0: B's link is cut (what A sent meanwhile is lost), B is promoted (`REPLICAOF NO ONE`), the clients'
  connections are cut (FIN) and new ones refused, A is made a replica of B (`REPLICAOF`): it throws away its
  own data for B's, and every write sent to it is refused with READONLY;
- t = D (1.5 s): the clients' proxy forwards to A, the demoted primary: the Workers reconnect there (ioredis
  retries every 1 s) and their writes (renewals, takes, finishes, stalled checks) fail with READONLY;
- t = D + R (R = 1.5 s): their connections are cut again and the proxy forwards to B (a Sentinel's switch):
  they reconnect to the new primary 1 s later.

Queues by class, each job a sleep of `ms`, started (added) at a planned time before the failover:
- `kept`: one 1.5 s job finishing 1.5 s before the failover, before the lag window: runs once;
- `take-lost`: two 1.5 s jobs; job 1 finishes 0.5 s before the failover, inside the lag window, and its
  moveToFinished takes job 2: both writes are lost. B has job 1 `active` with its old lock and job 2 in
  `wait` (read from B while the clients are away); job 2's finish reaches A and is refused (READONLY); job 2
  is taken again on B, job 1's lock lapses and a stalled check moves it back: both run twice;
- `running`: one 6 s job running through the failover: its renewals fail for D + R + 1 s, longer than the
  lock's 2 s, so on B its lock is gone: it is reclaimed from its live Worker (a failed renewal, a stalled
  check) and runs twice.

emqsim simulates each queue with the failover at the offset measured from its first job's start, the
same S, D and R, and the second cut as an `Outage` of 1 ms (its clients back at ioredis's first retry, 1 s
later, as the real ones are). Each count is judged against emqsim's prediction with a binomial band
(`binom.interval(0.999, n, p)`), as tests/test_bullmq_real_client.py does.

Marked slow and redis (run by `.ci/run`); skipped like the sibling tests when node, the node_modules or
redis-server are missing (EMQSIM_REQUIRE_BULLMQ=1 turns the skip into a failure).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))  # beside its node scripts
import validate_bullmq as vb  # noqa: E402

from emqsim import Fixed, Scenario, simulate  # noqa: E402
from emqsim.faults import Outage  # noqa: E402
from emqsim.live.proxy import RedisProxy  # noqa: E402
from emqsim.live.server import PrivateRedis  # noqa: E402
from emqsim.presets import preset  # noqa: E402

LOCK_MS, STALLED_MS = 2000, 2000
LAG, DOWN, READONLY = 1.0, 1.5, 1.5  # S, D, R (s)
LEAD = 3.2  # s from the Workers' ready to the failover (the first add, at -3.0 s, comes after it)
# class -> (queues, jobs per queue, ms per job, first job's start relative to the failover, s)
CLASSES = {
    "kept": (4, 1, 1500, -3.0),
    "take-lost": (4, 2, 1500, -2.0),
    "running": (4, 1, 6000, -1.7),
}
END = 25.0  # s after the failover: the session ends by then at the latest (emqsim: every run ends by 12 s)
SETTLED_AFTER = DOWN + READONLY + 1.0 + 2 * STALLED_MS / 1000 + 0.5  # s: B's two stalled checks have run
SIM_RUNS = 10  # emqsim replications per queue


def real(test: Any) -> Any:
    return pytest.mark.redis(pytest.mark.slow(test))


def _settled(events: list[dict[str, Any]]) -> bool:
    """Every job's last run has ended: its last event is a completion or a failure (a finish refused with
    READONLY ends in neither: its job runs again)."""
    last: dict[tuple[str, str], str] = {}
    for e in list(events):
        if e["ev"] in ("active", "completed", "failed") and e.get("job") is not None:
            last[(e["queue"], e["job"])] = e["ev"]
    return bool(last) and all(ev != "active" for ev in last.values())


def _run_session(workdir: Path) -> dict[str, Any]:
    """Run the failover once; returns the Workers' events, the harness's marks (epoch s) and B's state."""
    import redis

    events: list[dict[str, Any]] = []
    marks: dict[str, float] = {}
    on_b: dict[str, dict[str, Any]] = {}
    ready = threading.Event()
    plan = [
        {"queue": f"{cls}-{k}", "jobs": jobs, "ms": ms, "at": int(at * 1000)}
        for cls, (n, jobs, ms, at) in CLASSES.items()
        for k in range(n)
    ]
    with contextlib.ExitStack() as stack:
        marks["start"] = time.time()
        a = PrivateRedis().start()
        stack.callback(a.stop)
        b = PrivateRedis().start()
        stack.callback(b.stop)
        to_a, to_b, clients = RedisProxy(a.socket_path), RedisProxy(b.socket_path), RedisProxy(a.socket_path)
        for proxy in (to_a, to_b, clients):
            stack.callback(proxy.close)
        ra = redis.Redis(unix_socket_path=a.socket_path, decode_responses=True)
        rb = redis.Redis(unix_socket_path=b.socket_path, decode_responses=True)
        rb.execute_command("REPLICAOF", "127.0.0.1", to_a.port)
        deadline = time.time() + 10
        while rb.info("replication").get("master_link_status") != "up":
            assert time.time() < deadline, "the replica never linked to the primary"
            time.sleep(0.02)

        def on_message(_proc: Any, msg: dict[str, Any]) -> None:
            events.append(msg)
            if msg["ev"] == "ready":
                ready.set()

        node = vb.NodeProcess(
            "failover",
            "failover.mjs",
            ["--port", str(clients.port), "--lock-duration", str(LOCK_MS), "--stalled-interval",
             str(STALLED_MS), "--plan", json.dumps(plan)],
            workdir / "failover.log",
            on_message,
        )  # fmt: skip
        stack.callback(node.kill)
        assert ready.wait(60), f"the Workers never got ready ({workdir / 'failover.log'})"
        marks["ready"] = time.time()
        t_f = marks["ready"] + LEAD
        node.send({"go": int(t_f * 1000)})
        timeline = vb.Timeline()
        stack.callback(timeline.stop)

        def mark(name: str) -> None:
            marks[name] = time.time()

        def lag() -> None:
            to_a.hold()
            mark("lag")

        def fail_over() -> None:
            to_a.cut()  # what A sent since the hold is gone with the link
            rb.execute_command("REPLICAOF", "NO", "ONE")
            clients.cut()
            mark("failover")
            ra.execute_command("REPLICAOF", "127.0.0.1", to_b.port)

        def read_b() -> None:  # the lost writes, while the clients are away
            for q in plan:
                key = f"bull:{q['queue']}"
                on_b[q["queue"]] = {
                    "active": rb.lrange(f"{key}:active", 0, -1),
                    "wait": rb.lrange(f"{key}:wait", 0, -1),
                    "completed": rb.zrange(f"{key}:completed", 0, -1),
                    "locks": [j for j in ("1", "2") if rb.exists(f"{key}:{j}:lock")],
                }

        def back_to_a() -> None:
            clients.point(a.socket_path)
            mark("back")
            a_role = ra.info("replication")
            marks["a_is_replica"] = float(a_role.get("role") == "slave")

        def move_to_b() -> None:
            clients.cut()
            clients.point(b.socket_path)
            mark("moved")

        timeline.at(t_f - LAG, lag)
        timeline.at(t_f, fail_over)
        timeline.at(t_f + 0.5, read_b)
        timeline.at(t_f + DOWN, back_to_a)
        timeline.at(t_f + DOWN + READONLY, move_to_b)
        while time.time() < t_f + END and not (time.time() > t_f + SETTLED_AFTER and _settled(events)):
            time.sleep(0.1)
        marks["ended"] = time.time()
        assert not timeline.errors, timeline.errors
    return {"events": events, "marks": marks, "on_b": on_b, "plan": plan, "workdir": workdir}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, need_bullmq: None) -> dict[str, Any]:
    with vb.one_session_at_a_time():
        t0 = time.time()
        result = _run_session(tmp_path_factory.mktemp("bullmq-failover"))
        result["wall"] = time.time() - t0
    return result


# -- what happened, queue by queue ------------------------------------------------------------------------------
def _of(session: dict[str, Any], queue: str, ev: str) -> list[dict[str, Any]]:
    return [e for e in session["events"] if e.get("queue") == queue and e["ev"] == ev]


def real_outcome(session: dict[str, Any], queue: str) -> dict[str, Any]:
    """Per job id: how many times it ran; whether its lock was lost on its live Worker."""
    runs: dict[str, int] = {}
    for e in _of(session, queue, "active"):
        runs[e["job"]] = runs.get(e["job"], 0) + 1
    reclaimed = {e["job"] for e in _of(session, queue, "stalled")} | {
        j for e in _of(session, queue, "renew_failed") for j in e["jobs"]
    }
    first = min((e["t"] / 1000 for e in _of(session, queue, "active") if e["job"] == "1"), default=None)
    return {"runs": runs, "reclaimed": reclaimed, "first_start": first}


# -- emqsim's predictions ---------------------------------------------------------------------------------------
def predicted(session: dict[str, Any], queue: str) -> dict[str, dict[str, float]]:
    """Per BullMQ job id (emqsim's job i is BullMQ's i + 1): P(it ran twice), P(it was reclaimed from its live
    worker), over SIM_RUNS replications of the queue with the failover at its measured offset."""
    q = next(p for p in session["plan"] if p["queue"] == queue)
    marks = session["marks"]
    start = real_outcome(session, queue)["first_start"]
    assert start is not None, queue
    at = round(marks["failover"] - start, 3)
    down = round(marks["back"] - marks["failover"], 3)
    readonly = round(marks["moved"] - marks["back"], 3)
    lag = round(marks["failover"] - marks["lag"], 3)
    policy = preset("bullmq", lease=LOCK_MS / 1000, scan=STALLED_MS / 1000)
    sc = Scenario(
        workers=1,
        jobs=q["jobs"],
        duration=Fixed(q["ms"] / 1000),
        faults=(
            Outage(at=at, duration=down, lost_writes=lag, readonly=readonly),
            Outage(at=at + down + readonly, duration=0.001),  # the switch to B: a cut, then ioredis's retry
        ),
        horizon=60.0,
    )
    twice: dict[str, float] = {}
    reclaimed: dict[str, float] = {}
    for r in range(SIM_RUNS):
        run = simulate(sc, policy, 2025, r)
        for j in range(q["jobs"]):
            mine = [x for x in run.attempts if x.job == str(j)]
            twice[str(j + 1)] = twice.get(str(j + 1), 0.0) + (len(mine) >= 2) / SIM_RUNS
            reclaimed[str(j + 1)] = (
                reclaimed.get(str(j + 1), 0.0)
                + any(x.reclaimed_at is not None and x.false_reclaim for x in mine) / SIM_RUNS
            )
    return {"twice": twice, "reclaimed": reclaimed}


def judge(session: dict[str, Any], cls: str, job: str, what: str) -> tuple[int, int, float, int, int]:
    """(real count, n, emqsim's mean p, band lo, band hi) of `what` ("twice" or "reclaimed") for `job` over
    the class's queues."""
    queues = [p["queue"] for p in session["plan"] if p["queue"].startswith(f"{cls}-")]
    count = 0
    ps = []
    for queue in queues:
        out = real_outcome(session, queue)
        count += out["runs"].get(job, 0) >= 2 if what == "twice" else job in out["reclaimed"]
        ps.append(predicted(session, queue)[what][job])
    p = sum(ps) / len(ps)
    lo, hi = vb.binomial_band(len(queues), p)
    print(f"failover {cls} job {job} {what}: real {count}/{len(queues)}, emqsim p={p:.2f} band {lo}..{hi}")
    return count, len(queues), p, lo, hi


# -- the judgements -------------------------------------------------------------------------------------------
@real
def test_the_failover_happened_as_planned(session: dict[str, Any]) -> None:
    """The harness's steps came on time, A became B's replica, and the Workers saw READONLY from A."""
    marks = session["marks"]
    print(f"\nreal BullMQ failover: {len(session['plan'])} queues, {session['wall']:.1f} s (Workers ready "
          f"{marks['ready'] - marks['start']:.1f} s in, ended {marks['ended'] - marks['failover']:.1f} s after "
          "the failover)")  # fmt: skip
    assert abs(marks["failover"] - marks["lag"] - LAG) < 0.1
    assert abs(marks["back"] - marks["failover"] - DOWN) < 0.1
    assert abs(marks["moved"] - marks["back"] - READONLY) < 0.1
    assert marks["a_is_replica"] == 1.0
    readonly = [e for e in session["events"] if e["ev"] == "error" and "READONLY" in e["error"]]
    assert readonly, [e for e in session["events"] if e["ev"] == "error"][:5]
    assert all(marks["back"] <= e["t"] / 1000 <= marks["moved"] + 0.2 for e in readonly)


@real
def test_the_lag_windows_writes_are_lost_on_the_promoted_replica(session: dict[str, Any]) -> None:
    """Read from B while the clients are away: a finish before the window is there; the finish inside it and
    the take it made are not (job 1 active with its lock, job 2 back in wait)."""
    on_b = session["on_b"]
    for q in session["plan"]:
        state = on_b[q["queue"]]
        if q["queue"].startswith("kept-"):
            assert state["completed"] == ["1"] and not state["active"], state
        elif q["queue"].startswith("take-lost-"):
            assert state["active"] == ["1"] and state["wait"] == ["2"] and not state["completed"], state
        else:
            assert state["active"] == ["1"], state


@real
@pytest.mark.parametrize(
    ("cls", "job", "what"),
    [("kept", "1", "twice"), ("take-lost", "1", "twice"), ("take-lost", "2", "twice"),
     ("running", "1", "twice"), ("running", "1", "reclaimed")],
)  # fmt: skip
def test_jobs_run_again_as_the_failover_model_says(
    session: dict[str, Any], cls: str, job: str, what: str
) -> None:
    count, n, p, lo, hi = judge(session, cls, job, what)
    assert lo <= count <= hi, (count, n, p, session["workdir"])
