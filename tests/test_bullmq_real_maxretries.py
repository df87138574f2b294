"""ioredis's `maxRetriesPerRequest` on a Worker's client (issue 25 item 1, its second form), on the real BullMQ 6
library and a real Redis, against emqsim's `Network(max_retries_per_request)`.

One session on one private redis-server (`validate_bullmq.real_redis`). Each victim is a real BullMQ Worker
(validation/bullmq/stalls.mjs, concurrency 1, one 2 s job, lockDuration 10 s, stalledInterval 2 s) on a
user-supplied IORedis instance with BullMQ's retry strategy (`--max-retries-per-request`), talking to Redis
through its own `RedisProxy`. The proxy is `cut` (every connection closed, new ones closed at once) `before`
s before the job's work ends, so the finish is sent while the client is reconnecting, and points at Redis
again `OUTAGE` s after the cut. A sweep-only Worker (worker.mjs --sweep-only, its own direct connection) runs
BullMQ's stalled checker for every queue.

- **lost** (maxRetriesPerRequest 0, a 3.5 s outage): ioredis rejects the waiting finish at its first failed
  reconnect attempt (1 s), BullMQ sends moveToFailed, rejected at the second (2 s); the client is back at
  4 s. The job stays active, its lock lapses, the sweeper moves it back and it runs again.
- **failed** (0, a 1.5 s outage): the finish is rejected at 1 s, the moveToFailed goes through at the
  reconnect (2 s): the job fails with "Reached the max retries per request limit (which is 0)...".
- **control** (null, a 3.5 s outage): the finish waits for the reconnect; the job completes once.

emqsim runs the same (job, outage, `before` drawn alike) with `Network(max_retries_per_request=0)` and with
None; each group's count is judged with `validate_bullmq.binomial_band` around the prediction of its own
setting, and the other setting's prediction must fall outside it.

Marked slow and redis (run by `.ci/run`); skipped like tests/test_bullmq_real.py when node, the node_modules
or redis-server are missing (EMQSIM_REQUIRE_BULLMQ=1 turns the skip into a failure).
"""

from __future__ import annotations

import functools
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

from emqsim import Fixed, Network, Scenario, simulate  # noqa: E402
from emqsim.faults import Outage  # noqa: E402
from emqsim.live.proxy import RedisProxy  # noqa: E402
from emqsim.presets import preset  # noqa: E402
from emqsim.records import COMPLETED, FAILED, FINISH_REJECTED  # noqa: E402

LOCK_MS, STALLED_MS = 10_000, 2000
JOB_MS = 2000
# group -> (victims, maxRetriesPerRequest, outage s, the cut this many s before the work ends)
GROUPS: dict[str, tuple[int, int | None, float, tuple[float, float]]] = {
    "lost": (3, 0, 3.5, (0.5, 1.2)),  # lost if the finish is sent 0 to 2 s after the cut
    "failed": (3, 0, 1.5, (0.4, 0.6)),  # failed if 0 to 1 s after it
    "control": (3, None, 3.5, (0.5, 1.2)),
}
FATES = {"lost": FINISH_REJECTED, "failed": FAILED, "control": COMPLETED}  # what each group's job should do
SIM_RUNS = 30  # emqsim replications per prediction
SLACK = 0.6  # s: a real event's timing against the simulated one (node and the loaded machine's latency)
DEADLINE = 40.0  # s: the session's real experiment ends by then


def real(test: Any) -> Any:
    return pytest.mark.redis(pytest.mark.slow(test))


@dataclass
class Victim:
    group: str
    queue: str
    events: list[dict[str, Any]] = field(default_factory=list)
    proxy: RedisProxy | None = None
    cut_at: float | None = None  # wall-clock time of the cut
    final_state: str | None = None  # where job 1 is at the end: wait, active, completed, failed
    done: threading.Event = field(default_factory=threading.Event)

    def fate(self) -> str:
        """What became of job 1's first finish: lost (the job was moved back by the sweeper and ran again),
        failed (with ioredis's error), or completed."""
        if any(e["ev"] == "stalled" and e.get("job") == "1" for e in self.events):
            return FINISH_REJECTED
        if any(e["ev"] == "failed" and e.get("job") == "1" for e in self.events):
            return FAILED
        return COMPLETED if any(e["ev"] == "completed" for e in self.events) else "unknown"


def _run_session(sock: str, workdir: Path) -> list[Victim]:
    import redis

    rdb = redis.Redis(unix_socket_path=sock)
    rng = np.random.default_rng(25)
    victims = [Victim(g, f"{g}-{k}") for g, (n, *_) in GROUPS.items() for k in range(n)]
    timers: list[threading.Timer] = []

    def cut(v: Victim) -> None:
        assert v.proxy is not None
        v.proxy.cut()
        v.cut_at = v.proxy.cut_at  # when the cut took effect, stamped on the proxy's loop
        vb.later(timers, GROUPS[v.group][2], lambda: v.proxy.point(sock) if v.proxy is not None else None)

    def on_message(v: Victim, msg: dict[str, Any]) -> None:
        v.events.append(msg)
        ev = msg["ev"]
        if ev == "start" and msg.get("job") == "1" and v.cut_at is None:
            before = float(rng.uniform(*GROUPS[v.group][3]))
            vb.later(timers, msg["t"] / 1000 + JOB_MS / 1000 - before - time.time(), lambda: cut(v))
        if msg.get("job") == "1" and ev in ("completed", "failed"):
            v.done.set()

    def worker_args(v: Victim) -> list[str]:
        retries = GROUPS[v.group][1]
        return [
            "--jobs",
            json.dumps([{"ms": JOB_MS}]),
            "--max-retries-per-request",
            "null" if retries is None else str(retries),
        ]

    vb.run_behind_proxies(
        sock, workdir, victims, (LOCK_MS, STALLED_MS), worker_args, on_message, DEADLINE, timers
    )
    for v in victims:
        v.final_state = vb.job_state(rdb, v.queue, "1")
    return victims


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, need_bullmq: None) -> dict[str, Any]:
    with vb.real_redis(tmp_path_factory.mktemp("bullmq-maxretries")) as (sock, workdir):
        t0 = time.time()
        victims = _run_session(sock, workdir)
        return {"victims": victims, "wall": time.time() - t0, "workdir": workdir}


# -- emqsim's predictions ---------------------------------------------------------------------------------------
@functools.cache
def predicted(group: str, retries: int | None) -> dict[str, float]:
    """P(each fate of job 0's first finish) for the group's outage and cut times, worker 0 the victim and
    worker 1 the healthy sweeper, with `maxRetriesPerRequest` = `retries`; under "ends_s" the earliest
    seconds from the cut to the first attempt's end at Redis (its finish or its moveToFailed)."""
    _, _, outage_s, before = GROUPS[group]
    policy = preset("bullmq", lease=LOCK_MS / 1000, scan=STALLED_MS / 1000)
    rng = np.random.default_rng(27)
    counts: dict[str, int] = {}
    ends: list[float] = []
    for r in range(SIM_RUNS):
        taken = 0.003  # job 0's take (asserted below): the work ends JOB_MS later
        at = round(taken + JOB_MS / 1000 - float(rng.uniform(*before)), 3)
        sc = Scenario(
            workers=2,
            jobs=1,
            duration=Fixed(JOB_MS / 1000),
            faults=(Outage(at=at, duration=outage_s, worker=0),),
            network=Network(max_retries_per_request=retries),
            horizon=60.0,
        )
        run = simulate(sc, policy, 27, r)
        first = run.attempts[0]
        assert first.worker == 0 and first.taken_at == taken
        counts[first.outcome] = counts.get(first.outcome, 0) + 1
        if first.finish_applied_at is not None:
            ends.append(first.finish_applied_at - at)
    return {**{fate: n / SIM_RUNS for fate, n in counts.items()}, "ends_s": min(ends, default=-1.0)}


# -- the judgements -------------------------------------------------------------------------------------------
@real
def test_every_victim_ran_to_its_end(session: dict[str, Any]) -> None:
    victims = session["victims"]
    print(f"\nreal BullMQ maxRetriesPerRequest: {len(victims)} victims, {session['wall']:.1f} s")
    assert all(v.cut_at is not None for v in victims), [v.queue for v in victims if v.cut_at is None]
    late = [v.queue for v in victims if not v.done.is_set()]
    assert not late, (late, session["workdir"])


@real
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_finish_waiting_through_an_outage_meets_the_model(session: dict[str, Any], group: str) -> None:
    victims = [v for v in session["victims"] if v.group == group]
    retries = GROUPS[group][1]
    other = None if retries is not None else 0
    fate = FATES[group]
    count = sum(v.fate() == fate for v in victims)
    p, p_other = predicted(group, retries).get(fate, 0.0), predicted(group, other).get(fate, 0.0)
    lo, hi = vb.binomial_band(len(victims), p)
    lo_other, hi_other = vb.binomial_band(len(victims), p_other)
    errors = sorted({e["error"] for v in victims for e in v.events if e["ev"] in ("error", "failed")})
    sent = [  # s from the cut to the finish's send (the first start's time plus the work)
        round(
            next(e["t"] for e in v.events if e["ev"] == "start") / 1000 + JOB_MS / 1000 - (v.cut_at or 0), 2
        )
        for v in victims
    ]
    print(f"{group}: finishes sent {sent} s after the cut; real {fate} {count}/{len(victims)} (fates {[v.fate() for v in victims]}, final "
          f"{[v.final_state for v in victims]}), emqsim maxRetriesPerRequest={retries} p={p:.2f} band {lo}..{hi}, "
          f"={other} p={p_other:.2f} band {lo_other}..{hi_other}; errors {errors}")  # fmt: skip
    assert lo <= count <= hi
    assert not lo_other <= count <= hi_other
    states = [v.final_state for v in victims]
    if group == "failed":
        assert states == ["failed"] * len(victims), states
        failed = [
            (e["error"], e["t"] / 1000 - (v.cut_at or 0))
            for v in victims
            for e in v.events
            if e["ev"] == "failed"
        ]
        assert all(e.startswith("Reached the max retries per request limit (which is 0)") for e, _ in failed)
        # when: at the reconnect, 2 s after the cut (the moveToFailed waited from the 1 s flush), as emqsim's
        sim_at = predicted(group, retries)["ends_s"]
        print(f"failed: real {[round(t, 2) for _, t in failed]} s after the cut, emqsim from {sim_at:.3f} s")
        assert 2.0 <= sim_at <= 2.01
        assert all(sim_at - 0.1 <= t <= sim_at + SLACK for _, t in failed), failed
    else:  # the lost finish's job ran again and completed; the control's completed once
        assert states == ["completed"] * len(victims), states
        starts = [sum(e["ev"] == "start" and e.get("job") == "1" for e in v.events) for v in victims]
        assert starts == [2 if group == "lost" else 1] * len(victims), starts


PROBE = """
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
const w = new Worker('q', async () => {}, { connection: { port: 1, lazyConnect: true }, autorun: false });
w.on('error', () => {});
await new Promise(resolve => setTimeout(resolve, 50));
const raw = c => c?.raw ?? c;
const retries = c => raw(c._client)?.options?.maxRetriesPerRequest;
let refused = null;
try {
  new Worker('q', async () => {}, { connection: new Redis({ port: 1, lazyConnect: true }), autorun: false });
} catch (e) { refused = e.message; }
console.log(JSON.stringify({ main: retries(w.backend.connection), blocking: retries(w.backend.blockingConnection), refused }));
process.exit(0);
"""


@pytest.mark.slow
def test_a_workers_main_client_keeps_ioredis_default_and_an_instance_must_be_null_or_0(
    need_bullmq: None,
) -> None:
    """What docs/model.md says of BullMQ 6.7 (the divergence row, and why the real test above uses 0): built
    from connection options, a Worker's main client keeps ioredis's default maxRetriesPerRequest 20 and only
    its blocking client gets null; a user-supplied instance with ioredis's default is refused."""
    import subprocess

    out = subprocess.run(
        ["node", "--input-type=module", "-e", PROBE],
        cwd=Path(__file__).resolve().parents[1] / "validation" / "bullmq",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe == {
        "main": 20,
        "blocking": None,
        "refused": "BullMQ: Your redis options maxRetriesPerRequest must be null.",
    }
