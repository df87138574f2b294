"""Live records: the parent's view of each process, and the `Run` built from what the processes reported.

The finalising rules (outcomes, duplicates, work done) are `emqsim.ledger.finalise`, the simulator's own.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from emqsim.keys import QueueKeys
from emqsim.ledger import finalise
from emqsim.live.settings import LiveSettings
from emqsim.policies import ReclaimPolicy
from emqsim.protocol import FINISH_ERRORS
from emqsim.records import Attempt, LockEvent, Run, SweepEvent, WorkerEvent, with_expiries
from emqsim.scenario import Scenario


@dataclass
class Proc:
    """One worker (or reaper) process and what the parent did to it (real times)."""

    wid: int | None
    popen: subprocess.Popen[bytes]
    role: str
    log_path: Path | None = None
    buffer: bytes = b""
    ready: bool = False
    state: str = "alive"
    timeline: list[tuple[float, str]] = field(default_factory=list)  # (real time, state from then on)
    counts: dict[str, int] = field(default_factory=dict)
    open_eof: bool = True
    started: bool = False
    outages: list[tuple[float, float]] = field(default_factory=list)  # (disconnected, reconnected), real

    def state_at(self, t: float) -> str:
        """Its state at real time `t`: as the simulator's `Worker.state_at`, an alive worker whose connection
        is down (between a disconnect and the reconnect) is "disconnected"."""
        state = "alive"
        for when, s in self.timeline:
            if when <= t:
                state = s
            else:
                break
        if state == "alive" and any(begin <= t < back for begin, back in self.outages):
            return "disconnected"
        return state


class RunFacts(Protocol):
    """What a live run knows when it stops: the records are built from this alone."""

    scenario: Scenario
    policy: ReclaimPolicy
    seed: int
    replication: int
    live: LiveSettings
    keys: QueueKeys
    record_locks: bool
    t0: float  # real time of the start
    scale: float  # real seconds per scenario second
    procs: dict[int, Proc]
    events: list[dict[str, Any]]  # every report of every process, in arrival order
    synthetic_takes: list[dict[str, Any]]
    works_s: list[float]
    arrived: list[float]
    worker_events: list[tuple[float, int, str, str]]
    evictions: list[tuple[float, str]]
    redis_commands: int
    resident_peak: int
    final_state: dict[str, int]

    def sim_s(self, real_t: float) -> float: ...


def build_run(self: RunFacts, end: float, ended_by: str) -> Run:
    """The run's records from what the processes reported and what the parent did to them."""
    s = self.sim_s
    procs = self.procs
    takes = sorted((e for e in self.events if e["e"] == "take"), key=lambda e: e["t"])
    attempts: list[Attempt] = []
    by_token: dict[str, Attempt] = {}
    by_job: dict[str, list[Attempt]] = {}
    for ev in takes:
        job = ev["job"]
        tries = by_job.setdefault(job, [])
        a = Attempt(
            job=job,
            attempt=len(tries) + 1,
            worker=ev["w"],
            token=ev["token"],
            work=self.works_s[int(job)],
            taken_at=s(ev["t"]),
            started_at=None if ev["s"] is None else s(ev["s"]),
        )
        tries.append(a)
        attempts.append(a)
        by_token[a.token] = a
    lock_events: list[LockEvent] = []
    lease_s = None if self.live.lock_ms is None else self.live.lock_ms / 1000
    for ev in self.events:
        kind = ev["e"]
        if kind == "finishing" and ev["token"] in by_token:
            by_token[ev["token"]].finished_at = s(ev["t"])
        elif kind == "finished" and ev["token"] in by_token:
            a = by_token[ev["token"]]
            a.finish_applied_at = s(ev["t"])
            code = int(ev["code"])
            a.finish_result = "accepted" if code == 0 else _finish_error(code, a.job)
            if code == 0 and self.record_locks and self.live.fenced:
                lock_events.append(LockEvent(s(ev["t"]), a.job, a.token, "released"))
        elif kind == "renew" and self.record_locks:
            failed = set(ev["failed"] or ())
            for job, token in ev["held"]:
                if ev["failed"] is None:
                    continue  # lost on the (emulated) network: never reached Redis
                if job in failed:
                    lock_events.append(LockEvent(s(ev["t"]), job, token, "renew_failed"))
                else:
                    expires = s(ev["t"] + lease_s) if lease_s is not None else None
                    lock_events.append(LockEvent(s(ev["t"]), job, token, "renewed", expires))
    # Reclaims: the n-th reclaim (or failure) of a job ends its n-th attempt (takes and reclaims of a job
    # alternate), which does not depend on how the processes' clocks interleave.
    sweeps = []
    ends: dict[str, int] = {}
    for ev in sorted((e for e in self.events if e["e"] == "sweep"), key=lambda e: e["t"]):
        sweeps.append(
            SweepEvent(
                s(ev["t"]),
                ev["by"],
                ev["skipped"],
                tuple(ev["reclaimed"]),
                tuple(ev["failed"]),
                ev["marked"],
            )
        )
        for job, is_failed in [(j, False) for j in ev["reclaimed"]] + [(j, True) for j in ev["failed"]]:
            n = ends.get(job, 0)
            ends[job] = n + 1
            tries = by_job.get(job, [])
            if n >= len(tries):
                continue
            a = tries[n]
            if is_failed:
                a.failed_at = s(ev["t"])
            else:
                a.reclaimed_at = s(ev["t"])
            a.reclaimed_by = ev["by"]
            a.worker_state_at_reclaim = procs[a.worker].state_at(ev["t"])  # type: ignore[assignment]
            if self.record_locks and self.live.fenced and self.live.renewal is None:
                lock_events.append(LockEvent(s(ev["t"]), job, a.token, "deleted"))
    # Deaths and the work each attempt did.
    for a in attempts:
        proc = procs[a.worker]
        death = next((t for t, st in proc.timeline if st == "dead"), None)
        taken_real = self.t0 + a.taken_at * self.scale
        applied_real = None if a.finish_applied_at is None else self.t0 + a.finish_applied_at * self.scale
        ended = [t for t in (a.reclaimed_at, a.failed_at) if t is not None]
        ended_real = self.t0 + min(ended) * self.scale if ended else None
        if (
            death is not None
            and taken_real <= death
            and (applied_real is None or applied_real > death)
            and (ended_real is None or ended_real > death)  # a job reclaimed before is not its hostage
        ):
            a.died_at = s(death)
        if death is not None and a.finished_at is not None and applied_real is None:
            a.finished_at = None  # it sent the finish, but died before Redis ran it
        if a.finished_at is not None:
            a.work_done = a.work
        elif a.started_at is not None:
            if death is not None and taken_real <= death:  # stopped with its process, reclaimed or not
                a.stopped_at = s(death)
            stop = death if death is not None and a.stopped_at is not None else end
            a.work_done = min(a.work, _worked(proc, self.t0 + a.started_at * self.scale, stop, self.scale))
    finalise(attempts)
    if self.record_locks:
        for ev in takes:
            if self.live.set_lock:
                expires = s(ev["t"] + lease_s) if lease_s is not None else None
                lock_events.append(LockEvent(s(ev["t"]), ev["job"], ev["token"], "set", expires))
        for t, key in self.evictions:
            job = self.keys.job_id_of_lock(key)
            if job is not None:
                lock_events.append(LockEvent(s(t), job, None, "evicted", None, "expired"))
        lock_events = with_expiries(lock_events, s(end), 0.001 / self.scale)
    # Round trips by kind, from the reports (exact even for killed workers); only the empty polls of
    # `take` come from the workers' periodic counters.
    kinds = {"take": "take", "finishing": "finish", "renew": "renew", "sweep": "sweep"}
    counts = {"poll": sum(p.counts.get("poll", 0) for p in procs.values())}
    for ev in self.events:
        kind = kinds.get(ev["e"])
        if kind is not None and ev not in self.synthetic_takes:
            counts[kind] = counts.get(kind, 0) + 1
    return Run(
        scenario=self.scenario.name,
        policy={**self.policy.settings(), "mode": "live", "time_scale": self.scale},
        seed=self.seed,
        replication=self.replication,
        end=s(end),
        ended_by=ended_by,
        jobs=self.scenario.jobs,
        arrivals=[s(t) for t in self.arrived],
        attempts=attempts,
        worker_events=sorted(
            (WorkerEvent(s(t), w, k, d) for t, w, k, d in self.worker_events), key=lambda e: e.time
        ),
        lock_events=lock_events,
        sweeps=sweeps,
        requests=dict(sorted((k, v) for k, v in counts.items() if v)),
        redis_commands=self.redis_commands,
        resident_keys_peak=self.resident_peak,
        final_state=self.final_state,
    )


def _worked(proc: Proc, start: float, stop: float, scale: float) -> float:
    """Scenario seconds the process ran between two real times (frozen spans do not count)."""
    frozen = 0.0
    since = None
    for t, state in proc.timeline:
        if state == "frozen":
            since = t
        elif since is not None:
            frozen += max(0.0, min(t, stop) - max(since, start))
            since = None
    if since is not None:
        frozen += max(0.0, stop - max(since, start))
    return max(0.0, stop - start - frozen) / scale


def _finish_error(code: int, job: str) -> str:
    return FINISH_ERRORS[code].format(id=job)
