"""Live fault injection: crashes (SIGKILL), freezes (SIGSTOP/SIGCONT) and blocked event loops, at the
scenario's times and from the same named random streams as the simulator, scaled to real time."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import redis

from emqsim.faults import Block, ChildCrash, Crash, Freeze, MemoryPressure, as_distribution
from emqsim.keys import QueueKeys
from emqsim.live.records import Proc
from emqsim.live.settings import LiveSettings
from emqsim.processes import signal_group
from emqsim.scenario import Scenario
from emqsim.store.eviction import BASE_BYTES
from emqsim.units import HOUR_S, to_ms


class FaultHost(Protocol):
    """What fault injection uses of the live run (`LiveRun` is one)."""

    scenario: Scenario
    scale: float
    live: LiveSettings
    keys: QueueKeys
    client: redis.Redis | None
    procs: dict[int, Proc]
    events: list[dict[str, Any]]
    synthetic_takes: list[dict[str, Any]]
    worker_events: list[tuple[float, int, str, str]]
    executing: dict[str, int]
    job_faults: dict[int, list[Crash | Freeze | Block | ChildCrash]]
    children: dict[str, int]
    restart_requested: dict[int, float]
    redis_down: bool
    after_restart: list[Callable[[], None]]
    pending_restarts: list[int]
    next_wid: int

    stopping: bool
    memory_evictions: list[tuple[float, str]]

    def at(self, when: float, action: Callable[..., None]) -> None: ...
    def send(self, proc: Proc, line: str) -> None: ...
    def _rng(self, name: str, *index: int) -> np.random.Generator: ...
    def read_from(self, proc: Proc, final: bool = False) -> None: ...
    def pump(self, timeout: float) -> None: ...
    def on_event(self, proc: Proc, ev: dict[str, Any]) -> None: ...
    def start_pending(self) -> None: ...
    def apply(
        self, wid: int, fault: Crash | Freeze | Block | ChildCrash, rng: Any, token: str = ""
    ) -> None: ...
    def child_crash(self, wid: int, token: str) -> None: ...
    def block(self, wid: int, duration_s: float) -> None: ...
    def crash(self, wid: int, restart_after: float | None) -> None: ...
    def reconcile(self, proc: Proc, died: float) -> None: ...
    def freeze(self, wid: int, duration_s: float) -> None: ...
    def resume(self, wid: int) -> None: ...
    def restart(self) -> None: ...


class FaultInjection:
    """The fault side of `LiveRun` (a mixin): what the parent does to its worker processes."""

    def job_started(self: FaultHost, proc: Proc, job: int, started: float, token: str = "") -> None:
        for i, fault in enumerate(self.job_faults.get(job, ())):
            rng = self._rng("job_faults", job, i)
            after = to_ms(float(as_distribution(fault.after, "after").sample(rng, 1)[0])) / 1000
            self.at(
                started + after * self.scale,
                lambda f=fault, r=rng, w=proc.wid, k=token: self.apply(w, f, r, k),
            )

    def apply(
        self: FaultHost, wid: int, fault: Crash | Freeze | Block | ChildCrash, rng: Any, token: str = ""
    ) -> None:
        if isinstance(fault, Crash):
            self.crash(wid, fault.restart_after)
        elif isinstance(fault, ChildCrash):
            self.child_crash(wid, token)
        else:
            duration = to_ms(float(as_distribution(fault.duration, "duration").sample(rng, 1)[0])) / 1000
            if isinstance(fault, Block):
                self.block(wid, duration)
            else:
                self.freeze(wid, duration)

    def block(self: FaultHost, wid: int, duration_s: float) -> None:
        """The worker's event loop is blocked (a busy loop in the process) for `duration_s` scenario s."""
        proc = self.procs[wid]
        if proc.state != "alive":
            return
        self.send(proc, f"block {duration_s * self.scale:.6f}")
        now = time.time()
        proc.state = "blocked"
        proc.timeline.append((now, "blocked"))
        self.worker_events.append((now, wid, "block", f"{duration_s:g} s"))

        def unblock() -> None:
            if proc.state == "blocked":
                proc.state = "alive"
                proc.timeline.append((time.time(), "alive"))
                self.worker_events.append((time.time(), wid, "unblock", ""))

        self.at(now + duration_s * self.scale, unblock)

    def crash(self: FaultHost, wid: int, restart_after: float | None) -> None:
        proc = self.procs[wid]
        if proc.state == "dead":
            return
        signal_group(proc.popen.pid, signal.SIGKILL)
        now = time.time()
        proc.state = "dead"
        proc.timeline.append((now, "dead"))
        self.worker_events.append((now, wid, "crash", ""))
        proc.popen.wait()
        self.read_from(proc, final=True)  # everything it wrote before dying
        self.pump(0)  # and what the others reported so far, before looking at Redis

        def settle() -> None:
            self.reconcile(proc, now)
            for token, owner in list(self.executing.items()):
                if owner == wid:
                    del self.executing[token]

        if self.redis_down:  # Redis is restarting: look at it once it is back
            self.after_restart.append(settle)
        else:
            settle()
        if restart_after is not None:
            self.at(now + restart_after * self.scale, self.restart)

    def child_crash(self: FaultHost, wid: int, token: str) -> None:
        """The sandboxed child running the take `token`'s job dies (SIGKILL): its worker, alive, sees the exit
        and fails the job (fail.lua), retried while the scenario's `attempts` are not used up. Nothing happens
        if the job's work is already done or its worker is dead, as in the simulator."""
        pid = self.children.pop(token, None)
        if pid is None or self.procs[wid].state == "dead":
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def reconcile(self: FaultHost, proc: Proc, died: float) -> None:
        """Steps the dead worker ran in Redis but never reported (killed between the reply and the report
        line, a window of microseconds): recover them from the keys so the records stay complete."""
        assert self.client is not None
        x: Any = self.client  # decodes responses: str replies
        mine = [ev for ev in self.events if ev["w"] == proc.wid]
        finished = {ev["token"] for ev in mine if ev["e"] == "finished"}
        accepted_jobs = {ev["job"] for ev in self.events if ev["e"] == "finished" and ev["code"] == 0}
        for ev in mine:
            if ev["e"] == "finishing" and ev["token"] not in finished and ev["job"] not in accepted_jobs:
                lock = x.get(self.keys.lock(ev["job"])) if self.live.fenced else None
                if lock != ev["token"] and x.sismember(self.keys.completed, ev["job"]):
                    self.on_event(proc, {**ev, "e": "finished", "r": died, "code": 0, "active": 1})
        known = {
            ev["job"]
            for ev in self.events
            if ev["e"] == "take" and (ev["token"] in self.executing or ev.get("orphan"))
        }
        for job in x.lrange(self.keys.active, 0, -1):
            if job in known:
                continue
            started = x.hget(self.keys.job(job), "processedOn")
            if self.live.set_lock:
                token = x.get(self.keys.lock(job))
                if token is None or not token.startswith(f"{proc.wid}:"):
                    continue
            else:  # no lock to tell whose it is: a take of this worker stamped before it died
                if started is None or int(started) > died * 1000:
                    continue
                token = f"{proc.wid}:?{job}"
            t = int(started) / 1000 if started else died
            ev = {"e": "take", "w": proc.wid, "job": job, "token": token, "t": t, "s": None}
            self.events.append(ev)
            self.synthetic_takes.append(ev)

    def freeze(self: FaultHost, wid: int, duration_s: float) -> None:
        proc = self.procs[wid]
        if proc.state != "alive":
            return
        signal_group(proc.popen.pid, signal.SIGSTOP)
        now = time.time()
        proc.state = "frozen"
        proc.timeline.append((now, "frozen"))
        self.worker_events.append((now, wid, "freeze", f"{duration_s:g} s"))
        self.at(now + duration_s * self.scale, lambda: self.resume(wid))

    def resume(self: FaultHost, wid: int) -> None:
        proc = self.procs[wid]
        if proc.state != "frozen":
            return
        signal_group(proc.popen.pid, signal.SIGCONT)
        now = time.time()
        proc.state = "alive"
        proc.timeline.append((now, "alive"))
        self.worker_events.append((now, wid, "resume", ""))

    def restart(self: FaultHost) -> None:
        """A replacement worker: the ready spare starts now (or the next process to become ready)."""
        self.restart_requested[self.next_wid] = time.time()
        self.pending_restarts.append(self.next_wid)
        self.next_wid += 1
        self.start_pending()

    def random_faults(self: FaultHost, wid: int, start: float) -> None:
        faults = self.scenario.random_faults
        if faults is None:
            return
        if faults.crash_rate > 0:
            rng = self._rng("faults", wid)
            after = max(0.001, to_ms(rng.exponential(HOUR_S / faults.crash_rate)) / 1000)
            self.at(start + after * self.scale, lambda: self.crash(wid, faults.restart_after))
        if faults.freeze_rate > 0:
            _recurring(
                self,
                wid,
                start,
                self._rng("faults", wid, 1),
                faults.freeze_rate,
                faults.freeze_duration,
                self.freeze,
            )
        if faults.block_rate > 0:
            _recurring(
                self,
                wid,
                start,
                self._rng("faults", wid, 4),
                faults.block_rate,
                faults.block_duration,
                self.block,
            )


def memory_pressure(host: FaultHost, start: float) -> threading.Thread | None:
    """The scenario's `MemoryPressure` on the live run's Redis, from `start` (real time): set its
    maxmemory-policy and maxmemory-samples, then maxmemory to the server's own used memory now plus what the
    model allows above an empty server (`maxmemory - BASE_BYTES`: the queue's latency histograms and keys),
    and run the other tenant in a thread:
    `SET cache:n <cache_bytes> PX cache_ttl` at the simulator's Poisson times (the run's ("memory", 1)
    stream), scaled to real time, until the run stops. Redis evicts by itself (a real `evict.c`); the
    live run hears of evicted locks through `evicted` keyspace events (`memory_evictions`). Redis's LRU
    clock ticks in real seconds, so only a run at scale 1 ranks keys on the simulator's clock."""
    pressure = next((f for f in host.scenario.faults if isinstance(f, MemoryPressure)), None)
    if pressure is None:
        return None
    assert host.client is not None  # opened before the run starts
    client = host.client
    client.config_set("maxmemory-policy", pressure.policy)
    client.config_set("maxmemory-samples", pressure.samples)
    client.config_set("latency-tracking", "yes" if pressure.latency_tracking else "no")
    # Redis gives each command its latency histogram at its first call (`LATENCY_HISTOGRAM_BYTES`): run the
    # live run's own commands (INFO, DBSIZE) once before measuring, so the histograms that come after are
    # the queue's and the cache's, which the simulator counts too
    client.dbsize()
    client.info("memory")
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + max(1, pressure.maxmemory - BASE_BYTES))
    if pressure.cache_rate <= 0:
        return None
    rng = host._rng("memory", 1)
    value = "x" * pressure.cache_bytes
    ttl_ms = max(1, int(pressure.cache_ttl * host.scale * 1000))

    def write() -> None:
        writer = redis.Redis(connection_pool=client.connection_pool)
        due, n = start, 0
        try:
            while not host.stopping:
                for gap in rng.exponential(1.0 / pressure.cache_rate, 1024).tolist():
                    due += max(0.001, to_ms(gap) / 1000) * host.scale
                    pause = due - time.time()
                    if pause > 0:
                        time.sleep(pause)
                    if host.stopping:
                        return
                    with contextlib.suppress(redis.ResponseError):  # OOM: Redis refused the write
                        writer.set(f"cache:{n}", value, px=ttl_ms)
                    n += 1
        except (redis.RedisError, OSError):
            return  # the run is over (its server stopped) or Redis failed: the run reports that itself

    thread = threading.Thread(target=write, daemon=True, name="emqsim-memory-pressure")
    thread.start()
    return thread


def _recurring(
    host: FaultHost,
    wid: int,
    start: float,
    rng: np.random.Generator,
    rate: float,
    lengths: Any,
    act: Callable[[int, float], None],
) -> None:
    """Random freezes or blocks of worker `wid` from `start`: exponential gaps at `rate` per hour, each
    fault `lengths` long, the next gap counted from the end of the last, or from the moment a fault found the
    worker not alive (already frozen or blocked: then it does not happen); none once the worker is dead. As
    the simulator's processes: the times are the planned ones, so a timer firing late does not shift the rest."""

    def schedule(when: float) -> None:
        gap = max(0.001, to_ms(rng.exponential(HOUR_S / rate)) / 1000)
        duration = max(0.001, to_ms(float(lengths.sample(rng, 1)[0])) / 1000)
        due = when + gap * host.scale

        def fire() -> None:
            state = host.procs[wid].state
            if state == "dead":
                return
            act(wid, duration)
            schedule(due + duration * host.scale if state == "alive" else due)

        host.at(due, fire)

    schedule(start)
