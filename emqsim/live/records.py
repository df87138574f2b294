"""Live records: the parent's view of each process, and the `Run` built from what the processes reported.

The records are written by an `emqsim.ledger.Ledger`, the simulator's own writer, counting in scenario seconds
(`ticks_per_s=1`): this module works out what happened from the reports (which take a reclaim ended, which
attempts a dead process had taken, the work done between freezes) and tells the ledger, which writes every
attempt, lock event and sweep and finalises the attempts by the simulator's rules (`emqsim.ledger.finalise`).
`WorkerEvent`s are made here from what the parent did to the processes.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from emqsim.keys import QueueKeys
from emqsim.ledger import AttemptDraft, Ledger
from emqsim.live.settings import LiveSettings
from emqsim.policies import ReclaimPolicy
from emqsim.protocol import FINISH_ERRORS
from emqsim.records import LockEvent, Run, WorkerEvent, with_expiries
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
    held: list[tuple[float, float]] = field(default_factory=list)  # a partition's proxy holding, real
    resend: list[tuple[float, float, float]] = field(default_factory=list)  # runs twice (live.resend), real
    flushes: list[tuple[float, float, float, bool]] = field(default_factory=list)  # live.flushes, real

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
    """The run's records from what the processes reported and what the parent did to them, written through a
    `Ledger` that counts in scenario seconds."""
    s = self.sim_s
    procs = self.procs
    ledger = Ledger(record_locks=self.record_locks, ticks_per_s=1)
    for index, work in enumerate(self.works_s):
        ledger.arrived(str(index), work)
    takes = sorted((e for e in self.events if e["e"] == "take"), key=lambda e: e["t"])
    drafts: list[AttemptDraft] = []
    by_token: dict[str, AttemptDraft] = {}
    by_job: dict[str, list[AttemptDraft]] = {}
    for ev in takes:
        a = ledger.taken(ev["job"], ev["w"], ev["token"], s(ev["t"]), worker_dead=False)
        if ev["s"] is not None:
            ledger.started(a, s(ev["s"]))
        by_job.setdefault(a.job, []).append(a)
        drafts.append(a)
        by_token[a.token] = a
    locks = self.record_locks
    lease_s = None if self.live.lock_ms is None else self.live.lock_ms / 1000
    sent_finish: set[str] = set()  # tokens whose worker reported sending the finish
    applied: set[str] = set()  # tokens whose finish Redis ran
    stopped: set[str] = set()  # tokens whose sandboxed child died (their work ended there)
    for ev in self.events:
        kind = ev["e"]
        if kind == "finishing" and ev["token"] in by_token:
            ledger.finishing(by_token[ev["token"]], s(ev["t"]))
            sent_finish.add(ev["token"])
        elif kind == "finished" and ev["token"] in by_token:
            a = by_token[ev["token"]]
            applied.add(a.token)
            code = int(ev["code"])
            ledger.finish_applied(a, s(ev["t"]), None if code == 0 else _finish_error(code, a.job))
            if code == 0 and locks and self.live.fenced:
                ledger.lock(s(ev["t"]), a.job, a.token, "released")
        elif kind == "child_exit" and ev["token"] in by_token:  # a sandboxed child died: the work stops
            a = by_token[ev["token"]]
            ledger.stopped(a, s(ev["t"]), ev["worked"] / self.scale)
            stopped.add(a.token)
        elif kind == "failed" and ev["token"] in by_token:  # the holder's move to failed (or a retry)
            a = by_token[ev["token"]]
            applied.add(a.token)
            code = int(ev["code"])
            moved = code == 0 and bool(ev["active"])
            ledger.fail_applied(a, s(ev["t"]), moved, None if code == 0 else _finish_error(code, a.job))
            if moved and locks and self.live.fenced:
                ledger.lock(s(ev["t"]), a.job, a.token, "released", detail=ev["reason"])
        elif kind == "given_up" and ev["token"] in by_token:  # its finish and moveToFailed rejected
            a = by_token[ev["token"]]
            applied.add(a.token)
            ledger.finish_applied(a, s(ev["t"]), ev["error"])  # the simulator's `Server.finish_given_up`
        elif kind == "renew" and locks and ev.get("rejected"):  # rejected at a flush: never reached Redis
            ledger.renewals_lost(ev["held"], s(ev["t"]))
        elif kind == "renew_skipped" and locks:  # Network.skipped_ticks: nothing was sent
            for job, token in ev["held"]:
                ledger.lock(s(ev["t"]), job, token, "renew_skipped")
        elif kind == "renew" and locks and ev.get("readonly"):  # refused by a demoted primary
            for job, token in ev["held"]:
                ledger.lock(s(ev["t"]), job, token, "renew_failed", detail="READONLY")
        elif kind == "renew" and locks:
            failed = set(ev["failed"] or ())
            for job, token in ev["held"]:
                if ev["failed"] is None:
                    continue  # lost on the (emulated) network: never reached Redis
                if job in failed:
                    ledger.lock(s(ev["t"]), job, token, "renew_failed")
                else:
                    expires = s(ev["t"] + lease_s) if lease_s is not None else None
                    ledger.lock(s(ev["t"]), job, token, "renewed", expires)
    # Reclaims: the n-th reclaim (or failure) of a job ends its n-th attempt (takes and reclaims of a job
    # alternate), which does not depend on how the processes' clocks interleave.
    ends: dict[str, int] = {}
    for ev in sorted((e for e in self.events if e["e"] == "sweep"), key=lambda e: e["t"]):
        now = s(ev["t"])
        ledger.sweep(now, ev["by"], ev["skipped"], tuple(ev["reclaimed"]), tuple(ev["failed"]), ev["marked"])
        for job, is_failed in [(j, False) for j in ev["reclaimed"]] + [(j, True) for j in ev["failed"]]:
            n = ends.get(job, 0)
            ends[job] = n + 1
            tries = by_job.get(job, [])
            if n >= len(tries):
                continue
            a = tries[n]
            ledger.swept(a, ev["by"], now, is_failed, procs[a.worker].state_at(ev["t"]))
            if locks and self.live.fenced and self.live.renewal is None:
                ledger.lock(now, job, a.token, "deleted")
    # Deaths and the work each attempt did (real times, from the reports): a dead process stopped every
    # attempt it had taken; the ledger judges, from the recorded times, which of their jobs it still held.
    for ev, a in zip(takes, drafts, strict=True):
        proc = procs[a.worker]
        death = next((t for t, st in proc.timeline if st == "dead"), None)
        finished = a.token in sent_finish
        if death is not None and finished and a.token not in applied:
            ledger.finish_lost(a)  # it sent the finish, but died before Redis ran it
            finished = False
        took = death is not None and ev["t"] <= death
        worked = None
        if ev["s"] is not None and not finished and a.token not in stopped:
            stop = death if death is not None and took else end
            worked = _worked(proc, ev["s"], stop, self.scale)
        if death is not None and took:
            ledger.crashed(a, s(death), worked)
        elif worked is not None:
            ledger.ran(a, worked)
    attempts = ledger.attempts()
    lock_events: list[LockEvent] = []
    if locks:
        for ev in takes:
            if self.live.set_lock:
                expires = s(ev["t"] + lease_s) if lease_s is not None else None
                ledger.lock(s(ev["t"]), ev["job"], ev["token"], "set", expires)
        for t, key in self.evictions:
            job = self.keys.job_id_of_lock(key)
            if job is not None:
                ledger.lock(s(t), job, None, "evicted", None, "expired")
        for t, key in getattr(self, "memory_evictions", ()):
            job = self.keys.job_id_of_lock(key)
            if job is not None:
                ledger.lock(s(t), job, None, "memory_evicted", None, "maxmemory")
        lock_events = with_expiries(ledger.lock_events, s(end), 0.001 / self.scale)
    # Round trips by kind, from the reports (exact even for killed workers); only the empty polls of
    # `take` come from the workers' periodic counters.
    kinds = {"take": "take", "finishing": "finish", "failing": "finish", "renew": "renew", "sweep": "sweep"}
    counts = {"poll": sum(p.counts.get("poll", 0) for p in procs.values())}
    for ev in self.events:
        # a finish's resent copy counts too, and a take rejected at a flush (live.flushes)
        kind = ev["kind"] if ev["e"] in ("resent", "rejected") else kinds.get(ev["e"])
        if ev.get("fetched"):  # a take by a finish's fetchNext: in the finish's round trip, as the simulator
            continue
        if kind is not None and ev not in self.synthetic_takes:
            counts[kind] = counts.get(kind, 0) + 1
    return Run(
        scenario=self.scenario.name,
        policy={**self.policy.table_settings(), "mode": "live", "time_scale": self.scale},
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
        sweeps=ledger.sweeps,
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
