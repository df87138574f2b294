"""The live run's child processes: spawn a worker (or the reaper) process, start it with the simulator's timer
phases, keep spares for restarts, read the report lines from its stdout, and stop them all at the end."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from emqsim.faults import (
    Crash,
    OutageWindow,
)
from emqsim.keys import QueueKeys
from emqsim.live.flushes import max_retries_error, rejected_kinds
from emqsim.live.lua import key_names
from emqsim.live.partition import Partitions
from emqsim.live.records import Proc
from emqsim.live.resend import resent_kinds
from emqsim.live.server import PrivateRedis
from emqsim.live.settings import LiveSettings
from emqsim.policies import ReclaimPolicy
from emqsim.processes import die_with_parent, signal_group
from emqsim.scenario import Scenario
from emqsim.units import to_ms

WORKER_SCRIPT = Path(__file__).with_name("worker.py")
SPARES = 2  # idle worker processes kept ready when the scenario restarts crashed workers


class ChildHost(Protocol):
    """What the processes side uses of the live run (`LiveRun` is one)."""

    scenario: Scenario
    policy: ReclaimPolicy
    live: LiveSettings
    keys: QueueKeys
    scale: float
    poll: float
    url: str
    shas: dict[str, str]
    works_s: list[float]
    restarts: list[OutageWindow]
    t0: float
    tmpdir: Path | None
    spawned: int
    stopping: bool
    settled: int
    selector: selectors.DefaultSelector
    procs: dict[int, Proc]
    all_procs: list[Proc]
    pending_restarts: list[int]
    events: list[dict[str, Any]]
    worker_events: list[tuple[float, int, str, str]]
    executing: dict[str, int]
    first_taken: set[str]
    sandboxed: bool
    children: dict[str, int]
    switch_times: list[tuple[float, float]]
    partitions: Partitions
    server: PrivateRedis | None

    def _rng(self, name: str, *index: int) -> np.random.Generator: ...
    def outages_of(
        self, proc: Proc, wid: int, t_go: float, restarted: bool
    ) -> list[tuple[float, float, float]]: ...
    def real_window(self, window: OutageWindow) -> tuple[float, float, float]: ...
    def redis_down_within(self, begin: float, back: float) -> bool: ...
    def skipped_ticks(self, wid: int) -> str: ...
    def random_faults(self, wid: int, now: float) -> None: ...
    def job_started(self, proc: Proc, job: int, started: float, token: str = "") -> None: ...
    def spawn(self, role: str) -> Proc: ...
    def start(self, proc: Proc, wid: int, t_go: float, restarted: bool = False) -> None: ...
    def send(self, proc: Proc, line: str) -> None: ...
    def phases(self, wid: int) -> tuple[int, int]: ...
    def can_restart(self) -> bool: ...
    def spare(self) -> None: ...
    def start_pending(self) -> None: ...
    def read_from(self, proc: Proc, final: bool = False) -> None: ...
    def on_event(self, proc: Proc, ev: dict[str, Any]) -> None: ...
    def log_tail(self, proc: Proc) -> str: ...


class ChildProcesses:
    """The processes side of `LiveRun` (a mixin)."""

    # what its methods set (the run's __init__ sets them first)
    spawned: int
    stopping: bool
    settled: int

    # -- processes -----------------------------------------------------------------------------------------
    def spawn(self: ChildHost, role: str) -> Proc:
        """Start a worker (or reaper) process; it connects, reports `ready` and waits for `start`."""
        live = self.live
        sweep = None
        if role == "reaper" or live.swept_by == "workers":
            sweep = {
                "kind": live.sweep_kind,
                "interval_ms": live.sweep_ms,
                "max_stalled": live.max_stalled,
                "lazy_fail": live.lazy_fail,
                "timeout_ms": live.timeout_ms,
            }
        network = self.scenario.network
        cfg = {
            "role": role,
            "redis": self.url,
            "keys": key_names(self.keys.base),
            "shas": self.shas,
            "concurrency": self.scenario.concurrency,
            "take": {"lock_ms": live.lock_ms, "set_lock": live.set_lock},
            "fenced": live.fenced,
            "fetch_next": live.fetch_next,
            "sandboxed": self.sandboxed,
            "lazy_fail": live.lazy_fail and live.sweep_kind == "two_phase",  # the two-phase sweep marks
            "attempts": self.scenario.attempts,
            "remove_on_complete": self.scenario.remove_on_complete,
            "renewal": live.renewal if role == "worker" else None,
            "sweep": sweep,
            "works": [w * self.scale for w in self.works_s],
            "poll_s": self.poll,
            "chunk_s": min(0.02, max(0.002, 0.25 * (live.renewal or {}).get("tick_ms", 80) / 1000)),
            "slack_s": 0.005,
            "resend_kinds": resent_kinds(self.policy) if network.resend_twice else [],
            # Network.max_retries_per_request: what a flush rejects, and ioredis's error (emqsim.live.flushes)
            "reject_kinds": [] if network.max_retries_per_request is None else rejected_kinds(self.policy),
            "error": max_retries_error(network),
            "network": {
                "loss": network.loss,
                "loss_on": network.loss_on,
                "command_timeout_s": network.command_timeout * self.scale,
            },
        }
        assert self.tmpdir is not None
        self.spawned += 1
        log_path = self.tmpdir / f"process-{self.spawned}.log"
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGKILL),
            )
        assert popen.stdin is not None and popen.stdout is not None
        popen.stdin.write((json.dumps(cfg) + "\n").encode())
        popen.stdin.flush()
        os.set_blocking(popen.stdout.fileno(), False)
        proc = Proc(None, popen, role, log_path=log_path)
        self.all_procs.append(proc)
        self.selector.register(popen.stdout, selectors.EVENT_READ, proc)
        return proc

    def start(self: ChildHost, proc: Proc, wid: int, t_go: float, restarted: bool = False) -> None:
        """Give a ready process its identity and start time; its timers' phases are the simulator's."""
        proc.wid = wid
        proc.started = True
        self.procs[wid] = proc
        if proc.role == "reaper":
            aligned = self.scenario.phases == "aligned"
            first_renew = 0
            first_sweep = (
                0 if aligned else int(self._rng("phases", 0).integers(0, self.policy.sweep_interval_ms))
            )
        else:
            first_renew, first_sweep = self.phases(wid)
        url = None
        if proc.role == "worker":
            assert self.server is not None or not self.partitions.faults  # (refused with a Redis URL)
            if self.server is not None:
                url = self.partitions.url_for(wid, self.server.socket_path)  # a partition's proxy
            outages = self.outages_of(proc, wid, t_go, restarted)
        else:  # the reaper is cut off only while Redis itself restarts
            outages = [self.real_window(w) for w in self.restarts]
        go = {
            "wid": wid,
            "t0": t_go,
            "first_renew_ms": round(first_renew * self.scale),
            "first_sweep_ms": round(first_sweep * self.scale),
            "seed": int(self._rng("network", wid if wid >= 0 else 10**9).integers(0, 2**31)),
            "outages": [[begin, back, self.redis_down_within(begin, back)] for begin, _, back in outages],
            "switches": self.switch_times,  # a failover's clients moved off the demoted primary
            "redis": url,  # the worker's own address (a partition's proxy), if not the run's
            "held": proc.held,  # its partitions: what it sends meanwhile reaches Redis at their end
            "resend": proc.resend,  # Network(resend_twice): what it sends then runs twice (emqsim.live.resend)
            "flushes": proc.flushes,  # Network(max_retries_per_request): what a flush rejects (live.flushes)
            # Network.skipped_ticks: which of its due renewal ticks renew nothing, the simulator's own draws
            # (its "ticks" stream, one per due tick), drawn here: the worker imports no NumPy
            "skips": self.skipped_ticks(wid) if proc.role == "worker" else "",
        }
        self.send(proc, "go " + json.dumps(go))
        if proc.role == "worker":
            self.worker_events.append((t_go, wid, "restart" if restarted else "start", ""))

    def skipped_ticks(self: ChildHost, wid: int) -> str:
        """Worker `wid`'s due ticks in order, "1" for one that `Network.skipped_ticks` skips: the simulator's
        draws (one per due tick, as `emqsim.worker.Worker.tick_skipped` makes them)."""
        p = self.scenario.network.skipped_ticks
        tick_ms = (self.live.renewal or {}).get("tick_ms")
        if p <= 0 or not tick_ms:
            return ""
        ticks = int(to_ms(self.scenario.horizon) * self.scale // tick_ms) + 2  # more than the run can fire
        return "".join("1" if skip else "0" for skip in self._rng("ticks", wid).random(ticks) < p)

    def send(self: ChildHost, proc: Proc, line: str) -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            assert proc.popen.stdin is not None
            proc.popen.stdin.write((line + "\n").encode())
            proc.popen.stdin.flush()

    def phases(self: ChildHost, wid: int) -> tuple[int, int]:
        """First renewal tick and first sweep, scenario ms after start (the simulator's draws)."""
        aligned = self.scenario.phases == "aligned"
        rng = self._rng("phases", wid + 1)
        policy = self.policy
        first_renew = 0
        if policy.renewal is not None:
            tick = policy.renewal.tick_ms
            first_renew = tick if aligned else int(rng.integers(1, tick + 1))
        first_sweep = 0
        if policy.swept_by == "workers":
            first_sweep = 0 if aligned else int(rng.integers(0, policy.sweep_interval_ms))
        return first_renew, first_sweep

    def can_restart(self: ChildHost) -> bool:
        rf = self.scenario.random_faults
        if rf is not None and rf.crash_rate > 0 and rf.restart_after is not None:
            return True
        return any(isinstance(f, Crash) and f.restart_after is not None for f in self.scenario.faults)

    def spare(self: ChildHost) -> None:
        """Keep idle processes ready (`SPARES`), so a restart does not pay Python's start-up time."""
        idle = sum(p.role == "worker" and not p.started and p.popen.poll() is None for p in self.all_procs)
        for _ in range(min(SPARES, self.scenario.workers) - idle):
            self.spawn("worker")

    def start_pending(self: ChildHost) -> None:
        for proc in self.all_procs:
            if not self.pending_restarts:
                break
            if proc.role == "worker" and proc.ready and not proc.started and proc.popen.poll() is None:
                wid = self.pending_restarts.pop(0)
                now = time.time()
                self.start(proc, wid, now, restarted=True)
                self.random_faults(wid, now)
        if self.can_restart():
            self.spare()

    # -- reading reports -----------------------------------------------------------------------------------
    def pump(self: ChildHost, timeout: float) -> None:
        """Read whatever the processes reported, waiting at most `timeout` seconds."""
        for key, _ in self.selector.select(max(0.0, timeout)):
            self.read_from(key.data)

    def read_from(self: ChildHost, proc: Proc, final: bool = False) -> None:
        stream_ = proc.popen.stdout
        assert stream_ is not None
        ended = False
        while True:
            try:
                chunk = os.read(stream_.fileno(), 65536)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(stream_)
                proc.open_eof = False
                ended = True
                break
            proc.buffer += chunk
        *lines, proc.buffer = proc.buffer.split(b"\n")
        for raw in lines:  # first what it said before it ended (an "error" event says why)
            if raw.strip():
                self.on_event(proc, json.loads(raw))
        if ended and proc.state != "dead" and not self.stopping and not final:
            proc.popen.wait()
            raise RuntimeError(
                f"a {proc.role} process exited unexpectedly ({proc.popen.returncode}):\n"
                + self.log_tail(proc)
            )
        if final:
            proc.buffer = b""  # a half line from a killed process is dropped

    def on_event(self: ChildHost, proc: Proc, ev: dict[str, Any]) -> None:
        kind = ev["e"]
        if kind == "error":
            refused = ev.get("refused")
            if refused:  # Redis refused the command (READONLY, OOM, ...): say what Redis said
                raise RuntimeError(
                    f"{proc.role} {proc.wid} failed: Redis refused its command: {refused}\n{ev['msg']}"
                )
            raise RuntimeError(f"{proc.role} {proc.wid} failed:\n{ev['msg']}")
        if kind == "ready":
            proc.ready = True
            if self.t0:
                self.start_pending()
            return
        if kind == "counts":
            proc.counts = ev["counts"]
            return
        if kind == "bye":
            return
        if kind == "child":  # a sandboxed job's child process (its pid, for a ChildCrash to kill)
            self.children[ev["token"]] = int(ev["pid"])
            return
        self.events.append(ev)
        if kind == "take" and ev.get("orphan"):  # run twice, the first run's job never reaches the worker
            pass  # (resend_twice): not executing, never started; a sweep moves it back
        elif kind == "take":
            assert proc.wid is not None  # workers take; the reaper does not
            self.executing[ev["token"]] = proc.wid
            if ev["job"] not in self.first_taken:
                self.first_taken.add(ev["job"])
                self.job_started(proc, int(ev["job"]), ev["s"], ev["token"])
        elif kind in ("finishing", "failing"):
            self.children.pop(ev["token"], None)
        elif kind == "finished":
            self.executing.pop(ev["token"], None)
            if ev["active"]:
                self.settled += 1
        elif kind == "given_up":  # its finish and moveToFailed rejected (live.flushes): a sweep takes it back
            self.executing.pop(ev["token"], None)
        elif kind == "failed":  # a holder's failure: the job failed, or with attempts left went back to wait
            self.executing.pop(ev["token"], None)
            if ev["active"] and not ev["retried"]:
                self.settled += 1
        elif kind == "child_exit":
            assert proc.wid is not None
            self.worker_events.append((ev["t"], proc.wid, "child_crash", f"job {ev['job']}"))
        elif kind == "sweep":
            self.settled += len(ev["failed"])

    def log_tail(self: ChildHost, proc: Proc) -> str:
        try:
            assert proc.log_path is not None
            return proc.log_path.read_text(errors="replace")[-2000:]
        except (OSError, AssertionError):
            return "(no log)"

    def stop_all(self: ChildHost) -> None:
        """Ask every process to stop, then SIGKILL its process group whatever it did; read its last words."""
        self.stopping = True
        procs = [p for p in self.all_procs if p.popen.poll() is None]
        for p in procs:
            if p.state == "frozen":
                signal_group(p.popen.pid, signal.SIGCONT)
            self.send(p, "stop")
        deadline = time.time() + 1.0
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=max(0.0, deadline - time.time()))
        for p in self.all_procs:
            if p.popen.poll() is None:
                signal_group(p.popen.pid, signal.SIGKILL)
                p.popen.wait()
            if p.open_eof:
                with contextlib.suppress(Exception):
                    self.read_from(p, final=True)
            with contextlib.suppress(Exception):
                assert p.popen.stdin is not None
                p.popen.stdin.close()
            with contextlib.suppress(Exception):
                assert p.popen.stdout is not None
                p.popen.stdout.close()
