"""Validate the `bullmq` preset against the real library: BullMQ 6 workers on a real Redis, real faults.

    python validation/validate_bullmq.py crash --victims 24 --rounds 3
    python validation/validate_bullmq.py freeze --lengths 1.2,1.4,1.6,1.8,2.0,2.2 --per-length 12
    python validation/validate_bullmq.py block --lengths 1.2,1.4,1.6,1.8,2.0,2.2 --per-length 12
    python validation/validate_bullmq.py all --json validation.json    (what docs/bullmq-validation.md reports)

A round starts `victims` queues on one private redis-server (unix socket, no persistence). Each queue gets one
job, one victim worker process (`worker.mjs`: a BullMQ `Worker`, concurrency 1, a processor that sleeps) and
`survivors` more Workers that only sweep and never take a job: each in its own process, as emqsim's workers
are (crash rounds), or `survivors` processes hosting one Worker per queue (`shared`: far fewer processes;
freeze rounds, whose outcome does not depend on who sweeps when). The queues are independent, so their
measurements are too. Every Worker is created at a
random offset in [0, stalledInterval), so its lock-manager and stalled-check timers have arbitrary phases; the
jobs are added once all have run their first sweep. `after` seconds into its job, the victim gets its fault:
SIGKILL (a crash), or SIGSTOP for `freeze` seconds and then SIGCONT, or (a block) a synchronous busy loop of
that many seconds in the victim's process, which blocks its event loop as a CPU-bound job does. A crash's detection latency is the Redis
time of the job's `stalled` event (`observer.mjs` reads the queue's event stream) minus the time the SIGKILL
was sent; a freeze "loses" its job if a `stalled` event comes for it. All clocks are the machine's one wall
clock (`time.time()`, `Date.now()`, Redis stream ids).

The same scenario runs in emqsim under `preset("bullmq", lease=..., scan=...)`: 1 + survivors workers, one
job, the fault drawn from the same range, random timer phases, one replication per sample. Crash latencies
are compared by their means with 95% intervals, [min, max] and the two-sample Kolmogorov-Smirnov and Welch
tests; freezes by the fraction of jobs lost per freeze length (a binomial test of the real count against the
simulated fraction, next to `emqsim.analytic`'s prediction). Wrong models (BullMQ's renewal rule replaced by
a renewal every lockRenewTime; a single-phase sweep) go through the same comparison, to show it can tell
them apart. Each job is also replayed: from its measured renewals and sweeps, BullMQ's rules say when it
must come back, and that is checked to the millisecond.

It lives beside its node scripts (validation/bullmq), outside the installed package: run it from a checkout,
with emqsim importable (`pip install -e .`). Importing it needs neither node nor redis:
`requirements_missing()` says what is absent.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as st

from emqsim.analytic import freeze_lapse_probability, lease_detection, renewal_period
from emqsim.distributions import Fixed, Uniform
from emqsim.engine import simulate
from emqsim.faults import Block, Crash, Freeze, Network
from emqsim.live.clockwatch import ClockWatch, Steadiness
from emqsim.live.server import PrivateRedis, redis_server_path
from emqsim.policies import LeasePolicy, ReclaimPolicy, RenewalRule
from emqsim.presets import preset
from emqsim.processes import kill_group, set_parent_death_signal
from emqsim.scenario import Scenario
from emqsim.stats import mean_ci, wilson_ci

SCRIPTS_DIR = Path(os.environ.get("EMQSIM_BULLMQ_DIR", Path(__file__).resolve().parent / "bullmq"))
INSTALL_HINT = (
    "install the node deps with `npm ci --prefix validation/bullmq --ignore-scripts` (node >= 18.3, npm)"
)
MODELS = ("bullmq", "renew-every-lockRenewTime", "single-phase")
SIM_RTT = 0.002  # emqsim's default round trip (Network().rtt); the measured one is reported next to it
ALPHA = 0.001  # a comparison "agrees" unless a test rejects at this level (see `latencies_agree`)
LATE_SLACK = 0.3  # s: the real max may exceed the simulated one by this much, or by the run's own measured
# timer lateness if larger (see `latencies_agree` and `timer_lateness`)
CRASH_AFTER = (1.2, 3.2)  # s into the job: after its first renewal (which comes 0.5..1 s in)
FREEZE_AFTER = (1.2, 2.2)
FREEZE_LENGTHS = (1.2, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.2, 2.5)
# s: a 1.4 s freeze's distance to L - B = 1.5 s. A shorter stall or wall-clock step cannot by itself lapse such
# a freeze's lock (it has at least that long left at the resume); rounds that saw a longer one are run again.
STEADY_MARGIN = 0.1
# Rounds the machine disturbed are run again, each at most this many times in all: a round is judged only when
# its own attempt was steady (on a loaded 2-core CI machine a 9 s round sees a 100 ms stall now and then).
STEADY_ATTEMPTS = 6


# -- what is needed --------------------------------------------------------------------------------------------
def requirements_missing() -> str | None:
    """Why the real validation cannot run here (node, the installed node_modules, redis-server), or None."""
    if shutil.which("node") is None:
        return f"`node` is not on PATH; {INSTALL_HINT}"
    if not (SCRIPTS_DIR / "node_modules" / "bullmq" / "package.json").exists():
        return f"{SCRIPTS_DIR / 'node_modules'} has no bullmq; {INSTALL_HINT}"
    if not (SCRIPTS_DIR / "node_modules" / "ioredis" / "package.json").exists():
        return f"{SCRIPTS_DIR / 'node_modules'} has no ioredis; {INSTALL_HINT}"
    if redis_server_path() is None:
        return "redis-server is not on PATH; install it with `apt-get install redis-server` (Debian: 7.0.x)"
    return None


def bullmq_version() -> str | None:
    try:
        return json.loads((SCRIPTS_DIR / "node_modules" / "bullmq" / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


# -- settings and plans ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """BullMQ's worker options, in ms (lockRenewTime = lockDuration / 2, as BullMQ derives it)."""

    lock_ms: int = 2000
    stalled_ms: int = 2000
    max_stalled: int = 1

    @property
    def lease(self) -> float:
        return self.lock_ms / 1000

    @property
    def scan(self) -> float:
        return self.stalled_ms / 1000

    @property
    def renew(self) -> float:
        return self.lock_ms / 2000

    @property
    def window(self) -> float:
        """Seconds after a worker stops in which its job must be reclaimed: two-phase worst case plus a
        hand-over to another sweeper (max(L, S) + 2 S), plus 4 s for timers and scheduling (on a loaded box
        sweep timers were measured up to 1 s late; with 1.5 s a 2.4 s block twice counted as not lost, most
        likely because the round ended before a late sweep moved it back: inferred, not caught). A round
        waits this long only for a job that has not settled, so the margin costs nothing when all goes well."""
        return max(self.lease, self.scan) + 2 * self.scan + 4.0


@dataclass(frozen=True)
class JobPlan:
    """Job i's fault: `after` s into the job, SIGKILL (`freeze` None) or SIGSTOP for `freeze` s, or with
    `block` a busy loop of `freeze` s blocking the victim's event loop."""

    i: int
    after: float
    freeze: float | None = None
    block: bool = False


def plan_crashes(n: int, after: tuple[float, float], rng: np.random.Generator) -> list[JobPlan]:
    return [JobPlan(k, float(rng.uniform(*after))) for k in range(n)]


def plan_freezes(
    lengths: Sequence[float],
    per_length: int,
    after: tuple[float, float],
    rng: np.random.Generator,
    block: bool = False,
) -> list[JobPlan]:
    """`per_length` freezes (or blocks) of each length, shuffled (so every round mixes lengths)."""
    freezes = [f for f in lengths for _ in range(per_length)]
    rng.shuffle(freezes)
    return [JobPlan(i, float(rng.uniform(*after)), float(f), block) for i, f in enumerate(freezes)]


# -- real processes --------------------------------------------------------------------------------------------
def _lowest_priority_dying_with_parent() -> None:
    """preexec_fn of a victim whose processor spins: nice 19, so that its busy loop, however many run at
    once, never keeps redis-server, the sweepers or the harness from a core (a renewal the victim sent just
    before its block must reach Redis then, not when a core frees). The victim has its own session, and with
    Linux's autogroup scheduling (on by default) a session's processes share one CPU share against every other
    session whatever their nice value: the session's own nice is set too. Without it, 20 spinning victims
    took 20 shares and, beside a CPU hog, kept the round's clock watch from a core for up to 122 ms."""
    os.nice(19)
    # (no autogroup file: the scheduler has no autogroups to weigh)
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as autogroup:
        autogroup.write("19")
    set_parent_death_signal()


class NodeProcess:
    """One node script; every JSON line it prints goes to `on_message(self, msg)` from a reader thread."""

    def __init__(
        self,
        name: str,
        script: str,
        args: Sequence[str],
        log: Path,
        on_message: Callable[..., None],
        spins: bool = False,
    ) -> None:
        self.name = name
        self.on_message = on_message
        self._log = open(log, "w")  # noqa: SIM115 (closed in kill())
        self.proc = subprocess.Popen(
            ["node", str(SCRIPTS_DIR / script), *args],
            cwd=SCRIPTS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=_lowest_priority_dying_with_parent if spins else set_parent_death_signal,
        )
        self.pid = self.proc.pid
        self.reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            self.on_message(self, msg)

    def send(self, obj: dict[str, Any]) -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()

    def signal(self, sig: int) -> float:
        """Send `sig` to the process group; returns the wall-clock time just before sending."""
        t = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)
        return t

    def kill(self) -> None:
        kill_group(self.proc, wait=5)
        self._log.close()


class Timeline:
    """Runs callbacks at wall-clock times on one thread (the faults' clock)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._count = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="timeline", daemon=True)
        self._thread.start()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._count), fn))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.time()):
                    delay = None if not self._heap else self._heap[0][0] - time.time()
                    self._cond.wait(delay)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            try:
                fn()
            except BaseException as exc:  # report, keep the clock running
                self.errors.append(exc)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)


# -- one real round --------------------------------------------------------------------------------------------
@dataclass
class JobRecord:
    """One queue's job and its victim in a real round (times: epoch seconds)."""

    i: int
    queue: str
    after: float
    freeze: float | None
    victim_pid: int | None = None
    started: float | None = None  # the processor began (worker clock)
    fault_at: float | None = None  # SIGKILL or SIGSTOP sent
    resumed_at: float | None = None  # SIGCONT sent
    stalled_at: float | None = None  # Redis time of the job's first `stalled` event
    stalled_by: str | None = None  # "victim" or "survivor": whose sweep moved it
    renewals: list[float] = field(default_factory=list)  # reply times of the victim's renewals
    renew_failed: list[float] = field(default_factory=list)  # lockRenewalFailed times
    # (sent, renewed) for each renewal of the victim's lock whose reply came: the send time, as the worker read it
    renew_replies: list[tuple[float, bool]] = field(default_factory=list)
    sweeps: list[float] = field(default_factory=list)  # the queue's sweeps that ran (their send times)
    # every stalled check a Worker of this queue started, run or rate-limited: (who, sent, replied)
    attempts: list[tuple[str, float, float]] = field(default_factory=list)
    block: bool = False  # the fault is a busy loop (fault_at, resumed_at: its start and end), not SIGSTOP
    # when Redis last set the lock before the fault: read from the lock's PTTL just after the fault (a renewal
    # can reach Redis and be applied while its reply, and so its `renewed` line, dies with a killed worker)
    lock_set_at: float | None = None
    lock_read_at: float | None = None  # when the harness read that PTTL (epoch s)
    woke_at: float | None = None  # a SIGSTOPped victim's JavaScript ran again after the SIGCONT (its clock)

    @property
    def latency(self) -> float | None:
        """Crash -> moved back to wait (crashes only)."""
        if self.freeze is not None or self.fault_at is None or self.stalled_at is None:
            return None
        return self.stalled_at - self.fault_at

    @property
    def frozen_for(self) -> float | None:
        if self.freeze is None or self.fault_at is None or self.resumed_at is None:
            return None
        return self.resumed_at - self.fault_at

    @property
    def lost(self) -> bool:
        return self.stalled_at is not None

    @property
    def last_lock_set(self) -> float | None:
        """When the lock was last set before the fault: as Redis says (`lock_set_at`), else the last renewal's
        reply, else the job's start."""
        if self.lock_set_at is not None:
            return self.lock_set_at
        return self.last_reply

    @property
    def last_reply(self) -> float | None:
        """The victim's last renewal reply before the fault, else the job's start (what the victim saw)."""
        if self.fault_at is None or self.started is None:
            return None
        before = [t for t in self.renewals if t <= self.fault_at]
        return before[-1] if before else self.started

    @property
    def renewal_after_resume(self) -> str | None:
        """The frozen worker's first renewal sent after SIGCONT (or the block's end): "renewed", "failed" (the
        lock had lapsed). By send time: a renewal sent just before the fault can reach Redis in time while its
        reply is handled only after the worker resumes, and it says nothing about the lock after that."""
        if self.resumed_at is None:
            return None
        after = sorted((sent, ok) for sent, ok in self.renew_replies if sent >= self.resumed_at)
        if not after:
            return None
        return "renewed" if after[0][1] else "failed"

    def replay(self, lease: float, tol: float = 0.002) -> list[float]:
        """When BullMQ's rules say the job comes back, from the measured renewals and sweeps alone: the first
        sweep after the lock lapsed that follows a sweep which marked the job after its last renewal. Both
        answers when a sweep lies within `tol` of a boundary (the clocks read whole ms on either side)."""
        last = self.last_lock_set
        if last is None:
            return []
        out = set()
        sweeps = sorted(self.sweeps)
        for mark_after in (last - tol, last + tol):
            mark = next((t for t in sweeps if t >= mark_after), None)
            for lapse_after in (last + lease - tol, last + lease + tol):
                found = next((t for t in sweeps if mark is not None and t > mark and t >= lapse_after), None)
                if found is not None:
                    out.add(found)
        return sorted(out)

    def renewal_intervals(self) -> list[float]:
        """Gaps between successive renewals, leaving out the one that spans a freeze."""
        out = []
        for a, b in itertools.pairwise(self.renewals):
            if self.fault_at is not None and a <= (self.resumed_at or math.inf) and b >= self.fault_at:
                continue
            out.append(b - a)
        return out


@dataclass
class RoundResult:
    settings: Settings
    survivors: int
    jobs: list[JobRecord]
    errors: list[str]
    wall: float
    steadiness: Steadiness | None = None  # the machine's clocks from the jobs' adds to the last detection

    @property
    def harness_late(self) -> float:
        """How late (s) the steps a judgement times by came: the harness's own timeline's SIGCONT after its
        freeze's planned length (the freeze was that much longer than planned), a lock's PTTL read after its
        LOCK_READ_DELAY (a late one finds the lock gone), a busy loop ending after its planned length (its
        victim was kept from a core as the time came), and a SIGSTOPped victim's JavaScript running again after
        the SIGCONT (a victim kept from a core renews late). The timeline is a thread of this process: with 64
        node processes' output to parse it can wait for the interpreter lock while the machine (and the
        out-of-process ClockWatch) is steady; a victim can wait for a core while the watch's process is served."""
        late = 0.0
        for rec in self.jobs:
            if rec.fault_at is None:
                continue
            if rec.freeze is not None and rec.resumed_at is not None:
                # SIGCONT after the plan (a SIGSTOP), or a busy loop that ended late (kept from a core)
                late = max(late, rec.resumed_at - rec.fault_at - rec.freeze)
                if rec.woke_at is not None:
                    late = max(late, rec.woke_at - rec.resumed_at)
            if rec.lock_read_at is not None:
                late = max(late, rec.lock_read_at - rec.fault_at - Round.LOCK_READ_DELAY)
        return late


class Round:
    """`len(plans)` queues, each with one job, one victim and `survivors` sweep-only Workers."""

    def __init__(
        self,
        redis_socket: str,
        workdir: Path,
        name: str,
        settings: Settings,
        plans: Sequence[JobPlan],
        survivors: int,
        rng: np.random.Generator,
        job_seconds: float = 60.0,
        shared: bool = True,
        block_wait: bool = False,
    ) -> None:
        self.socket = redis_socket
        self.workdir = workdir
        self.name = name
        self.settings = settings
        self.plans = list(plans)
        self.survivors = survivors
        self.rng = rng
        self.job_seconds = job_seconds
        self.shared = shared
        self.block_wait = block_wait
        self.records = {
            f"{name}-{p.i}": JobRecord(p.i, f"{name}-{p.i}", p.after, p.freeze, block=p.block) for p in plans
        }
        self.changed = threading.Condition()
        self.loaded: set[str] = set()
        self.started: set[tuple[str, str]] = set()  # (process, queue)
        self.procs: list[NodeProcess] = []
        self.victim_pids: set[int] = set()
        self.errors: list[str] = []
        self.timeline = Timeline()

    def _on_message(self, proc: NodeProcess, msg: dict[str, Any]) -> None:
        """A line from a node process (called on its reader thread)."""
        ev = msg.get("ev")
        t = msg.get("t", 0) / 1000
        with self.changed:
            rec = self.records.get(msg.get("queue", ""))
            if ev == "loaded":
                self.loaded.add(proc.name)
            elif ev == "worker_started":
                self.started.add((proc.name, msg["queue"]))
            elif ev == "error" and not str(msg.get("error")).startswith("could not renew lock"):
                self.errors.append(f"{proc.name}: {msg.get('error')}")  # (a lapsed lock: see renew_failed)
            elif rec is None:
                pass
            elif ev == "resumed" and rec.resumed_at is not None and rec.woke_at is None:
                rec.woke_at = t
            elif ev == "busy_start" and rec.block:
                rec.fault_at = t
                self._read_lock_later(rec, t)
            elif ev == "busy_end" and rec.block:
                rec.resumed_at = t
            elif ev == "start" and rec.started is None:
                rec.victim_pid, rec.started = proc.pid, t
                if not rec.block:  # a CPU-bound job blocks its own loop (its data says when and how long)
                    self.timeline.at(t + rec.after, lambda: self._fault(proc, rec))
            elif ev == "renewed":
                rec.renewals.append(t)
            elif ev == "renew_failed":
                rec.renew_failed.append(t)
            elif ev == "renew_reply":  # the queue's one job, renewed by its victim (survivors take none)
                rec.renew_replies.append((msg["sent"] / 1000, not msg.get("failed")))
            elif ev == "queue_stalled" and rec.stalled_at is None:
                rec.stalled_at = t
            elif ev == "stalled" and rec.stalled_by is None:
                rec.stalled_by = "victim" if proc.pid in self.victim_pids else "survivor"
            elif ev == "sweep":
                rec.sweeps.append(msg["at"] / 1000)
            elif ev == "sweep_attempt":
                who = "victim" if proc.pid in self.victim_pids else proc.name.rsplit("-", 1)[-1]
                rec.attempts.append((who, msg["sent"] / 1000, t))
            self.changed.notify_all()

    def _fault(self, proc: NodeProcess, rec: JobRecord) -> None:
        if rec.freeze is None:
            t = proc.signal(signal.SIGKILL)
            with self.changed:
                rec.fault_at = t
            self._read_lock_later(rec, t)
            return
        t = proc.signal(signal.SIGSTOP)
        with self.changed:
            rec.fault_at = t
        self._read_lock_later(rec, t)

        def resume() -> None:
            t2 = proc.signal(signal.SIGCONT)
            with self.changed:
                rec.resumed_at = t2
                self.changed.notify_all()

        self.timeline.at(t + rec.freeze, resume)

    LOCK_READ_DELAY = 0.05  # s after the fault: a renewal already sent by then has reached Redis

    def _read_lock_later(self, rec: JobRecord, fault_at: float) -> None:
        """When Redis last set the job's lock before the fault, from its PTTL read just after (Redis's clock
        and the processes' Date.now() are the same wall clock)."""

        def read() -> None:
            import redis  # the live extra; only the real rounds need it

            with self.changed:
                rec.lock_read_at = time.time()
            client = redis.Redis(unix_socket_path=self.socket)
            try:
                pipe = client.pipeline(transaction=True)
                pipe.time()
                pipe.pttl(f"bull:{rec.queue}:j{rec.i}:lock")
                (seconds, micros), pttl = pipe.execute()
            finally:
                client.close()
            if pttl >= 0:
                expires = seconds + micros / 1e6 + pttl / 1000
                with self.changed:
                    rec.lock_set_at = expires - self.settings.lock_ms / 1000

        self.timeline.at(fault_at + self.LOCK_READ_DELAY, read)

    def _job(self, rec: JobRecord, ms: int) -> dict[str, Any]:
        """The job to add for a queue; a blocking one busy-loops `freeze` s, `after` s into itself."""
        job: dict[str, Any] = {"queue": rec.queue, "i": rec.i, "ms": ms}
        if rec.block:
            job.update(busyAfter=int(round(rec.after * 1000)), busyMs=int(round((rec.freeze or 0.0) * 1000)))
            if self.block_wait:
                job["busyWait"] = True
        return job

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"round {self.name}: timed out waiting for {what}")
                self.changed.wait(min(left, 0.25))

    def _done(self) -> bool:
        """Every job is reclaimed, or known safe (a frozen worker renewed its lock after it resumed), or its
        window passed."""
        now, window = time.time(), self.settings.window
        for rec in self.records.values():
            if rec.fault_at is None or (rec.freeze is not None and rec.resumed_at is None):
                return False
            settled = rec.stalled_at is not None or rec.renewal_after_resume == "renewed"
            if not settled and now < rec.fault_at + window:
                return False
        return True

    def _spawn(self, name: str, script: str, args: list[str], spins: bool = False) -> NodeProcess:
        proc = NodeProcess(name, script, args, self.workdir / f"{name}.log", self._on_message, spins)
        self.procs.append(proc)
        return proc

    def run(self) -> RoundResult:
        t0 = time.time()
        s = self.settings
        queues = list(self.records)
        options = [
            "--socket", self.socket,
            "--lock-duration", str(s.lock_ms),
            "--stalled-interval", str(s.stalled_ms),
            "--max-stalled-count", str(s.max_stalled),
        ]  # fmt: skip
        try:
            observer = self._spawn(f"{self.name}-observer", "observer.mjs",
                                   ["--socket", self.socket, "--queues", ",".join(queues)])  # fmt: skip
            # a victim's processor spins in a block round (unless its blocks wait: `block_wait`)
            spins = any(plan.block for plan in self.plans) and not self.block_wait
            for q in queues:
                delay = str(int(self.rng.integers(0, s.stalled_ms)))
                victim = self._spawn(q, "worker.mjs", [*options, "--queues", q, "--delays", delay], spins)
                self.victim_pids.add(victim.pid)
            # survivors: `survivors` processes with one Worker per queue (shared), or one process per Worker
            groups = [queues] if self.shared else [[q] for q in queues]
            for g, group in enumerate(groups):
                for k in range(self.survivors):
                    delays = ",".join(str(int(d)) for d in self.rng.integers(0, s.stalled_ms, len(group)))
                    name = f"{self.name}-{g}-survivor{k}" if not self.shared else f"{self.name}-survivor{k}"
                    self._spawn(name, "worker.mjs",
                                [*options, "--queues", ",".join(group), "--delays", delays, "--sweep-only"])  # fmt: skip
            n = len(self.procs)
            self._wait(lambda: len(self.loaded) == n, 60 + n, "node to load")
            go = time.time() + 0.2
            for proc in self.procs[1:]:
                proc.send({"go": int(go * 1000)})
            workers = len(queues) * (1 + self.survivors)
            self._wait(lambda: len(self.started) == workers, 30 + s.scan, "the Workers to start")
            time.sleep(max(0.0, go + s.scan + 0.2 - time.time()))  # every Worker has run its first sweep
            ms = int(self.job_seconds * 1000)
            longest = max(r.after + (r.freeze or 0.0) for r in self.records.values())
            with ClockWatch() as clock:  # the timed part: from the jobs' adds to the last detection
                observer.send({"add": [self._job(r, ms) for r in self.records.values()]})
                self._wait(self._done, 30 + longest + s.window, "the faults and their detection")
            try:
                steadiness: Steadiness | None = clock.result()
            except RuntimeError as lost:  # the watch itself was lost: the round stands, unwatched
                print(f"round {self.name} not watched: {lost}", file=sys.stderr)
                steadiness = None
            for exc in self.timeline.errors:
                raise RuntimeError(f"round {self.name}: a fault failed: {exc!r}") from exc
            time.sleep(0.15)  # the observer polls stalled-check every 20 ms: let it see the last sweeps
            observer.send({"quit": True})
        finally:
            self.timeline.stop()
            for proc in self.procs:
                proc.kill()
        with self.changed:
            return RoundResult(
                s,
                self.survivors,
                list(self.records.values()),
                list(self.errors),
                time.time() - t0,
                steadiness,
            )


@contextlib.contextmanager
def real_redis(workdir: Path | None = None) -> Iterator[tuple[str, Path]]:
    """A private redis-server for a session of rounds: yields (socket path, working directory).

    Sessions on one machine run one at a time (`one_session_at_a_time`): pytest runs test files in parallel,
    and the dozens of node processes of one real-BullMQ session (tests/test_bullmq_real.py,
    tests/test_bullmq_real_client.py) would otherwise disturb another's timing."""
    reason = requirements_missing()
    if reason:
        raise RuntimeError(reason)
    with contextlib.ExitStack() as stack:
        stack.enter_context(one_session_at_a_time())
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="emqsim-bullmq-")))
        server = PrivateRedis().start()  # the live mode's private server: unix socket, no persistence
        stack.callback(server.stop)
        yield server.socket_path, workdir


def binomial_band(n: int, p: float, level: float = 0.999) -> tuple[int, int]:
    """The counts out of `n` that a probability `p` makes likely: `binom.interval(level, n, p)` as whole
    counts, the band every real-BullMQ count is judged by (tests/test_bullmq_real_*.py)."""
    lo, hi = st.binom.interval(level, n, p)
    return int(lo), int(hi)


def start_sweeper(
    common: Sequence[str], queues: Sequence[str], log: Path, on_message: Callable[[Any, dict[str, Any]], Any]
) -> NodeProcess:
    """A sweep-only Worker (worker.mjs) on its own direct connection that runs BullMQ's stalled check on every
    queue of `queues` from now on: the healthy sweeper of the client-side experiments
    (tests/test_bullmq_real_client.py, _stuck.py, _resend.py)."""
    sweeper = NodeProcess(
        "sweeper",
        "worker.mjs",
        [*common, "--queues", ",".join(queues), "--delays", ",".join("0" for _ in queues), "--sweep-only"],
        log,
        on_message,
    )
    try:
        sweeper.send({"go": int(time.time() * 1000)})
    except BaseException:
        sweeper.kill()
        raise
    return sweeper


def end_session(
    timers: Sequence[threading.Timer], procs: Sequence[NodeProcess], proxies: Sequence[Any]
) -> None:
    """Stop a client-side experiment: cancel its timers, wake any stopped node process (SIGCONT to its group)
    and kill it, close the proxies (None entries skipped)."""
    for timer in timers:
        timer.cancel()
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGCONT)
        p.kill()
    for proxy in proxies:
        if proxy is not None:
            proxy.close()


def later(timers: list[threading.Timer], delay: float, fn: Callable[[], Any]) -> None:
    """Run `fn` in `delay` s (at once if it is past) on a daemon timer kept in `timers` (for `end_session`)."""
    timer = threading.Timer(max(0.0, delay), fn)
    timer.daemon = True
    timers.append(timer)
    timer.start()


def run_behind_proxies(
    sock: str,
    workdir: Path,
    victims: Sequence[Any],
    settings: tuple[int, int],
    worker_args: Callable[[Any], Sequence[str]],
    on_message: Callable[[Any, dict[str, Any]], Any],
    deadline: float,
    timers: Sequence[threading.Timer] = (),
) -> None:
    """A client-side experiment (tests/test_bullmq_real_stuck.py, _maxretries.py, _resend.py): the healthy
    sweeper on every victim's queue, and one stalls.mjs Worker per victim talking to Redis at `sock` through a
    `RedisProxy` of its own (set as `victim.proxy`) with `worker_args(victim)` (its jobs and options); every
    message of a victim's queue goes to `on_message(victim, message)`. Returns once every victim's `done` is
    set or `deadline` s passed, and 0.3 s more for late events, with every process stopped and every proxy
    closed (`end_session`, which also cancels `timers`). `settings`: (lockDuration, stalledInterval) in ms."""
    from emqsim.live.proxy import RedisProxy

    lock_ms, stalled_ms = settings
    common = ["--socket", sock, "--lock-duration", str(lock_ms), "--stalled-interval", str(stalled_ms)]
    procs: list[NodeProcess] = []
    try:
        procs.append(
            start_sweeper(
                common,
                [v.queue for v in victims],
                workdir / "sweeper.log",
                lambda p, m: [on_message(v, m) for v in victims if v.queue == m.get("queue")],
            )
        )
        for v in victims:
            v.proxy = RedisProxy(sock)
            procs.append(
                NodeProcess(
                    v.queue,
                    "stalls.mjs",
                    [*common, "--queue", v.queue, "--port", str(v.proxy.port), *worker_args(v)],
                    workdir / f"{v.queue}.log",
                    lambda p, m, v=v: on_message(v, m),
                )
            )
        end = time.time() + deadline
        for v in victims:
            v.done.wait(max(0.0, end - time.time()))
        time.sleep(0.3)  # late events
    finally:
        end_session(timers, procs, [v.proxy for v in victims])


def job_state(rdb: Any, queue: str, job: str) -> str | None:
    """Which of BullMQ's completed, failed, active and wait sets holds `job` of `queue` (the last listed, if
    several do), or None: a client-side experiment's final state of a job, read from Redis."""
    found = None
    for state in ("completed", "failed", "active", "wait"):
        key = f"bull:{queue}:{state}"
        members = rdb.lrange(key, 0, -1) if rdb.type(key) == b"list" else rdb.zrange(key, 0, -1)
        if job.encode() in members:
            found = state
    return found


@contextlib.contextmanager
def one_session_at_a_time(path: Path | None = None) -> Iterator[None]:
    """Hold an exclusive lock (flock) on a file in the temporary folder for a real-BullMQ session: a second
    session, from another pytest worker or another run on the machine, waits until the first has ended."""
    import fcntl

    lock = path or Path(tempfile.gettempdir()) / "emqsim-bullmq-session.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class RoundSpec:
    """A round to run: its queues' plans, and how many sweep-only Workers each queue gets. `shared`: the
    survivors are `survivors` processes with one Worker per queue; else one process per Worker (as separate
    machines would be, at `len(plans) * survivors` more processes)."""

    name: str
    settings: Settings
    plans: Sequence[JobPlan]
    survivors: int = 2
    shared: bool = True
    # blocks wait synchronously (Atomics.wait) instead of spinning: see `Round`
    block_wait: bool = False


def run_rounds(
    socket_path: str,
    workdir: Path,
    rounds: Sequence[RoundSpec],
    seed: int,
    indices: Sequence[int] | None = None,
) -> list[RoundResult]:
    """Run rounds at the same time on one Redis (each on its own thread); results in the given order. Round k
    draws from `np.random.default_rng([seed, indices[k]])` (`indices`: by default 0, 1, ...), so a round run
    again alone draws what it drew beside the others."""
    keys = list(range(len(rounds))) if indices is None else list(indices)
    built = [
        Round(
            socket_path,
            workdir,
            r.name,
            r.settings,
            r.plans,
            r.survivors,
            np.random.default_rng([seed, key]),
            shared=r.shared,
            block_wait=r.block_wait,
        )  # fmt: skip
        for key, r in zip(keys, rounds, strict=True)
    ]
    if len(built) == 1:
        return [built[0].run()]
    results: list[RoundResult | None] = [None] * len(built)
    errors: list[BaseException] = []

    def go(k: int) -> None:
        try:
            results[k] = built[k].run()
        except BaseException as exc:
            errors.append(exc)

    # PR_SET_PDEATHSIG follows the thread that spawned the child: each round's thread outlives its processes.
    threads = [threading.Thread(target=go, args=(k,), name=f"round-{k}") for k in range(len(built))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def run_steady_rounds(
    socket_path: str,
    workdir: Path,
    rounds: Sequence[RoundSpec],
    seed: int,
    attempts: int = STEADY_ATTEMPTS,
    margin: float = STEADY_MARGIN,
    notice: Callable[[str], None] | None = None,
) -> list[RoundResult]:
    """`run_rounds`, with every round the machine disturbed (it stalled or stepped its wall clock by `margin` s
    during it, or the harness ran late) run again under fresh queue names, each round at most `attempts` times
    in all: such a round times the machine, not BullMQ, and is not judged; the steady ones are kept. Each
    discarded attempt is said on stderr (or to `notice`); `emqsim.live.Disturbed` when a round was disturbed
    every time."""
    from emqsim.live import Disturbed

    say = notice if notice is not None else lambda text: print(text, file=sys.stderr)
    final: list[RoundResult | None] = [None] * len(rounds)
    todo = list(range(len(rounds)))
    last = ""
    for k in range(attempts):
        specs = [rounds[i] if k == 0 else replace(rounds[i], name=f"{rounds[i].name}-retry{k}") for i in todo]
        results = run_rounds(socket_path, workdir, specs, seed, todo)
        still: list[int] = []
        seen: list[str] = []
        for i, spec, r in zip(todo, specs, results, strict=True):
            why = _disturbance(spec, r, margin)
            if why is None:
                final[i] = r
            else:
                still.append(i)
                seen.append(why)
        if not still:
            return [r for r in final if r is not None]
        names = ", ".join(specs[todo.index(i)].name for i in still)
        last = f"rounds {names} not judged ({margin * 1000:.0f} ms margin): {'; '.join(seen)}"
        say(last)
        todo = still
    raise Disturbed(f"all {attempts} attempts were disturbed; the last: {last}")


def _disturbance(spec: RoundSpec, r: RoundResult, margin: float) -> str | None:
    """Why round `spec`'s result times the machine rather than BullMQ, or None when it was steady."""
    why = []
    if r.steadiness is not None and r.steadiness.disturbed(margin):
        why.append(f"round {spec.name}: {r.steadiness.describe()}")
    if r.harness_late >= margin:
        why.append(
            f"round {spec.name}: a step came up to {r.harness_late * 1000:.0f} ms late (the harness's SIGCONT or "
            "lock read, or a resumed victim's wake-up)"
        )
    return "; ".join(why) or None


def steadiness_summary(results: Sequence[RoundResult]) -> dict[str, float] | None:
    """The worst stall and clock step over the rounds (seconds), as their ClockWatch saw them."""
    seen = [r.steadiness for r in results if r.steadiness is not None]
    if not seen:
        return None
    return {"stall": max(x.stall for x in seen), "clock_step": max(x.clock_step for x in seen)}


# -- the same scenario in emqsim --------------------------------------------------------------------------------
def policy_for(model: str, settings: Settings) -> ReclaimPolicy:
    """The `bullmq` preset, or one of the wrong models the comparison must reject."""
    L, S = settings.lease, settings.scan
    if model == "bullmq":
        return preset("bullmq", lease=L, scan=S, max_stalled=settings.max_stalled)
    if model == "renew-every-lockRenewTime":
        rule = RenewalRule(tick_ms=settings.lock_ms // 2, min_age_ms=0, after_reply=True)
        return LeasePolicy(lease=L, beat=settings.renew, scan=S, max_stalled=settings.max_stalled,
                           swept_by="workers", renewal=rule, name=model)  # fmt: skip
    if model == "single-phase":
        rule = RenewalRule.bullmq(L)
        return LeasePolicy(lease=L, beat=rule.tick_ms / 1000, scan=S, two_phase=False,
                           max_stalled=settings.max_stalled, swept_by="workers", renewal=rule, name=model)  # fmt: skip
    raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")


def queue_scenario(
    settings: Settings,
    survivors: int,
    after: tuple[float, float],
    freeze: float | None = None,
    rtt: float = SIM_RTT,
    block: bool = False,
) -> Scenario:
    """One real queue in emqsim: 1 + survivors workers, one job whose worker crashes (or freezes for `freeze`
    s, or with `block` has its event loop blocked that long) `after` into it; random timer phases."""
    if freeze is None:
        fault: Crash | Freeze | Block = Crash(job=0, after=Uniform(*after))
    elif block:
        fault = Block(job=0, after=Uniform(*after), duration=freeze)
    else:
        fault = Freeze(job=0, after=Uniform(*after), duration=freeze)
    return Scenario(
        name="bullmq-crash" if freeze is None else "bullmq-freeze",
        workers=1 + survivors,
        jobs=1,
        duration=Fixed(60.0),
        faults=(fault,),
        network=Network(rtt=Fixed(rtt)),
        phases="random",
        horizon=after[1] + (freeze or 0.0) + settings.window + 1.0,
    )


@dataclass
class SimCrashes:
    latencies: np.ndarray
    sweep_gaps: np.ndarray


def simulate_crashes(
    settings: Settings,
    survivors: int,
    after: tuple[float, float],
    *,
    model: str = "bullmq",
    samples: int = 2000,
    seed: int = 0,
    rtt: float = SIM_RTT,
) -> SimCrashes:
    """`samples` replications of one queue: detection latencies (s) and the gaps between sweeps that ran."""
    scenario = queue_scenario(settings, survivors, after, rtt=rtt)
    policy = policy_for(model, settings)
    latencies: list[float] = []
    gaps: list[float] = []
    for rep in range(samples):
        run = simulate(scenario, policy, seed=seed, replication=rep, record_locks=False)
        latencies += [a.detection_latency for a in run.attempts if a.detection_latency is not None]
        gaps += np.diff([s.time for s in run.sweeps if not s.skipped]).tolist()
    return SimCrashes(np.asarray(latencies), np.asarray(gaps))


def simulate_freezes(
    settings: Settings,
    survivors: int,
    after: tuple[float, float],
    freeze: float,
    *,
    model: str = "bullmq",
    samples: int = 1000,
    seed: int = 0,
    rtt: float = SIM_RTT,
    block: bool = False,
) -> tuple[int, int]:
    """(lost, samples): replications whose frozen (or blocked) worker's job was reclaimed (a false reclaim)."""
    scenario = queue_scenario(settings, survivors, after, freeze, rtt, block=block)
    policy = policy_for(model, settings)
    lost = 0
    for rep in range(samples):
        run = simulate(scenario, policy, seed=seed, replication=rep, record_locks=False)
        lost += any(a.attempt == 1 and a.false_reclaim for a in run.attempts)
    return lost, samples


def analytic_freeze(settings: Settings, freeze: float, model: str = "bullmq", rtt: float = SIM_RTT) -> float:
    """emqsim.analytic's P(lapse) for a freeze at a uniform moment of the renewal cycle."""
    renewal = policy_for(model, settings).renewal
    assert renewal is not None
    return freeze_lapse_probability(settings.lease, renewal, freeze, rtt=rtt)


# -- comparisons ----------------------------------------------------------------------------------------------
def compare_latencies(
    real: Sequence[float] | np.ndarray, sim: Sequence[float] | np.ndarray
) -> dict[str, Any]:
    """Means with 95% intervals, [min, max], Welch's t test and the two-sample KS test."""
    r, s = np.asarray(real, dtype=float), np.asarray(sim, dtype=float)
    m_r, lo_r, hi_r = mean_ci(r)  # type: ignore[arg-type]  # an array is a sequence of floats
    m_s, lo_s, hi_s = mean_ci(s)  # type: ignore[arg-type]
    ks = st.ks_2samp(r, s)
    return {
        "real_n": int(r.size),
        "real_mean": m_r,
        "real_mean_ci": [lo_r, hi_r],
        "real_range": [float(r.min()), float(r.max())],
        "sim_n": int(s.size),
        "sim_mean": m_s,
        "sim_mean_ci": [lo_s, hi_s],
        "sim_range": [float(s.min()), float(s.max())],
        "mean_difference": m_r - m_s,
        "welch_p": float(st.ttest_ind(r, s, equal_var=False).pvalue),
        "ks_statistic": float(ks.statistic),
        "ks_p": float(ks.pvalue),
    }


def latencies_agree(cmp: dict[str, Any], tick: float, alpha: float = ALPHA, late: float = LATE_SLACK) -> bool:
    """Neither KS nor Welch rejects at `alpha`, and the real [min, max] lies in the simulated one widened by
    one LockManager `tick` below (a tick BullMQ's strict rule skips, which the model never does: see
    `renewal_summary`) and by `late` above (timers firing late on a loaded box)."""
    lo, hi = cmp["sim_range"]
    r_lo, r_hi = cmp["real_range"]
    return cmp["ks_p"] >= alpha and cmp["welch_p"] >= alpha and r_lo >= lo - tick and r_hi <= hi + late


def compare_freeze(real_lost: int, real_n: int, sim_lost: int, sim_n: int) -> dict[str, Any]:
    """Real fraction lost (Wilson interval) against the simulated one; binomial test of the real count under
    the simulated probability, clipped to [0.01, 0.99] (a finite simulation cannot prove a 0 or a 1)."""
    p_real, lo, hi = wilson_ci(real_lost, real_n)
    p_sim = sim_lost / sim_n
    return {
        "real_lost": real_lost,
        "real_n": real_n,
        "real_fraction": p_real,
        "real_fraction_ci": [lo, hi],
        "sim_fraction": p_sim,
        "sim_n": sim_n,
        "binomial_p": float(st.binomtest(real_lost, real_n, min(0.99, max(0.01, p_sim))).pvalue),
    }


def freezes_agree(rows: Sequence[dict[str, Any]], alpha: float = ALPHA) -> bool:
    return all(row["binomial_p"] >= alpha for row in rows)


# -- reports ------------------------------------------------------------------------------------------------------
def _quantiles(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return {"n": 0}
    q = np.percentile(x, [0, 1, 50, 99, 100])
    keys = ("min", "p1", "p50", "p99", "max")
    return {"n": int(x.size), "mean": float(x.mean()), **{k: float(v) for k, v in zip(keys, q, strict=True)}}


def _sweep_run(j: JobRecord, at: float, clock: float = 0.002) -> tuple[float, float]:
    """The sweep whose `stalled-check` value is `at`: from when its Worker sent it to when the reply came back
    (the script ran in between), else `at` itself."""
    runs = [(sent, replied) for _, sent, replied in j.attempts if sent - clock <= at <= replied + clock]
    return min(runs, key=lambda r: r[1] - r[0]) if runs else (at, at)


def _replay_summary(jobs: Sequence[JobRecord], lease: float, match: float = 0.005) -> dict[str, Any]:
    """Reclaims against BullMQ's rules replayed on the measured lock sets and sweeps: how many came from a
    replayed sweep (the `stalled` event's Redis time lies within `match` s of the sweep's send time, or between
    its send and its reply: a loaded box runs the script late), the error to the nearest replayed time (ms),
    how many had two candidate times (a sweep within a ms or two of the last lock set or of the lock's expiry),
    and how many faults came while a renewal was in flight (Redis set the lock after the last reply seen)."""
    errors, ties, matched, unmatched = [], 0, 0, []
    for j in jobs:
        candidates = j.replay(lease)
        if j.stalled_at is None or not candidates:
            continue
        ties += len(candidates) > 1
        error = min((j.stalled_at - c for c in candidates), key=abs)
        errors.append(error)
        runs = [_sweep_run(j, c) for c in candidates]
        if abs(error) <= match or any(
            sent - match <= j.stalled_at <= replied + match for sent, replied in runs
        ):
            matched += 1
        else:
            unmatched.append({"queue": j.queue, "error_ms": round(error * 1000, 1), "runs": runs})
    in_flight = sum(
        j.lock_set_at is not None and j.last_reply is not None and j.lock_set_at > j.last_reply + 0.002
        for j in jobs
    )
    return {
        "lost": sum(j.lost for j in jobs),
        "checked": len(errors),
        "matched": matched,
        "unmatched": unmatched,
        "ties": ties,
        "in_flight": in_flight,
        "lock_read": sum(j.lock_set_at is not None for j in jobs),
        "error_ms": _quantiles([e * 1000 for e in errors]),
    }


def _lapse_rule_summary(jobs: Sequence[JobRecord], lease: float, tol: float = 0.005) -> dict[str, Any]:
    """Job by job, the rule `u + F > L` (u: time from the last lock set to SIGSTOP, F: the measured freeze)
    against whether the job was lost; `ambiguous` when u + F is within `tol` of L."""
    out: dict[str, Any] = {"of": 0, "agree": 0, "ambiguous": 0, "disagree": []}
    for j in jobs:
        last, frozen = j.last_lock_set, j.frozen_for
        if last is None or frozen is None or j.fault_at is None:
            continue
        out["of"] += 1
        margin = (j.fault_at - last) + frozen - lease
        if abs(margin) < tol:
            out["ambiguous"] += 1
        elif (margin > 0) == j.lost:
            out["agree"] += 1
        else:  # what the next look needs: when the lock was set, by what evidence, and what followed
            out["disagree"].append(
                {
                    "queue": j.queue,
                    "u": round(j.fault_at - last, 4),
                    "frozen_for": round(frozen, 4),
                    "lock_read": j.lock_set_at is not None,
                    "lost": j.lost,
                    "renewal_after_resume": j.renewal_after_resume,
                    "renewals_after_fault": [round(t - j.fault_at, 4) for t in j.renewals if t > j.fault_at][
                        :3
                    ],
                    "renewals_sent_after_fault": [
                        (round(sent - j.fault_at, 4), ok) for sent, ok in j.renew_replies if sent > j.fault_at
                    ][:3],
                }
            )
    return out


def renewal_summary(jobs: Sequence[JobRecord], settings: Settings) -> dict[str, Any]:
    """The measured renewal period next to the model's (`analytic.renewal_period`, emqsim's default rtt).
    `skipped_ticks` counts periods of two ticks: the strict `ts + renew/2 < now` declining a tick."""
    x = np.asarray([d for j in jobs for d in j.renewal_intervals()])
    out: dict[str, Any] = _quantiles(x)
    out["skipped_ticks"] = int((x > 0.75 * settings.renew).sum()) if x.size else 0
    out["model"] = renewal_period(RenewalRule.bullmq(settings.lease), rtt=SIM_RTT)
    return out


def timer_lateness(jobs: Sequence[JobRecord], scan: float) -> float:
    """The worst lateness of a sweep timer in the round, measured: after a crash only the queue's survivors
    sweep, and with one survivor (the test's layout) every gap between two sweeps that ran after the crash is
    one period of its timer, `scan` plus how late it fired (0 when there are no such gaps); with more
    survivors a gap is the lateness of whichever swept first."""
    gaps = [
        g
        for j in jobs
        if j.fault_at is not None
        for g in np.diff(sorted(t for t in j.sweeps if t > j.fault_at))
    ]
    return max(0.0, max(gaps, default=scan) - scan)


def crash_report(
    results: Sequence[RoundResult],
    after: tuple[float, float],
    *,
    seed: int = 1,
    samples: int = 2000,
    models: Sequence[str] = MODELS,
) -> dict[str, Any]:
    """Real crashes against emqsim under each model (see the module doc)."""
    settings, survivors = results[0].settings, results[0].survivors
    jobs = [j for r in results for j in r.jobs if j.freeze is None]
    latencies = [j.latency for j in jobs if j.latency is not None]
    report: dict[str, Any] = {
        "settings": asdict(settings),
        "survivors": survivors,
        "after": list(after),
        "crashes": len(jobs),
        "undetected": sum(j.latency is None for j in jobs),
        "stalled_by_survivor": sum(j.stalled_by == "survivor" for j in jobs),
        "latencies": latencies,
        "renewal": renewal_summary(jobs, settings),
        "replay": _replay_summary(jobs, settings.lease),
        "sweep_gaps": _quantiles([g for j in jobs for g in np.diff(j.sweeps)]),
        "analytic": asdict(
            lease_detection(settings.lease, RenewalRule.bullmq(settings.lease), settings.scan, rtt=SIM_RTT)
        ),
        "real_wall_seconds": max(r.wall for r in results),
        "steadiness": steadiness_summary(results),
        "timer_lateness": timer_lateness(jobs, settings.scan),
        "errors": sorted({e for r in results for e in r.errors})[:10],
        "models": {},
    }
    for model in models:
        sim = simulate_crashes(settings, survivors, after, model=model, samples=samples, seed=seed)
        cmp = compare_latencies(latencies, sim.latencies)
        late = max(LATE_SLACK, report["timer_lateness"])  # a real latency is late by as much as its sweep
        cmp["agrees"] = latencies_agree(cmp, tick=settings.renew / 2, late=late)
        if model == "bullmq":
            report["sim_sweep_gaps"] = _quantiles(sim.sweep_gaps)
        report["models"][model] = cmp
    report["jobs"] = [asdict(j) for j in jobs]
    return report


def freeze_report(
    results: Sequence[RoundResult],
    after: tuple[float, float],
    *,
    seed: int = 2,
    samples: int = 1000,
    models: Sequence[str] = MODELS,
) -> dict[str, Any]:
    """Real freezes against emqsim under each model, per freeze length."""
    settings, survivors = results[0].settings, results[0].survivors
    jobs = [j for r in results for j in r.jobs if j.freeze is not None and j.frozen_for is not None]
    block = any(j.block for j in jobs)
    rows = []
    for f in sorted({j.freeze for j in jobs if j.freeze is not None}):
        mine = [j for j in jobs if j.freeze == f]
        lost = sum(j.lost for j in mine)
        row: dict[str, Any] = {
            "freeze": f,
            "frozen_for": _quantiles([j.frozen_for for j in mine if j.frozen_for is not None]),
            "lost": lost,
            "n": len(mine),
            "lost_while_frozen": sum(
                j.lost and j.stalled_at is not None and j.stalled_at < (j.resumed_at or 0.0) for j in mine
            ),
            "renewal_failed_after_resume": sum(j.renewal_after_resume == "failed" for j in mine),
            "models": {},
        }
        for model in models:
            sim_lost, sim_n = simulate_freezes(
                settings, survivors, after, f, model=model, samples=samples, seed=seed, block=block
            )
            cmp = compare_freeze(lost, len(mine), sim_lost, sim_n)
            cmp["analytic"] = analytic_freeze(settings, f, model)
            row["models"][model] = cmp
        rows.append(row)
    return {
        "kind": "block" if block else "freeze",
        "settings": asdict(settings),
        "survivors": survivors,
        "after": list(after),
        "freezes": len(jobs),
        "renewal": renewal_summary(jobs, settings),
        # a lapse is seen twice: the resumed worker's renewal fails, and the sweep moves the job
        "lapse_evidence_agrees": sum(j.lost == (j.renewal_after_resume == "failed") for j in jobs),
        "lapse_rule": _lapse_rule_summary(jobs, settings.lease),
        "replay": _replay_summary(jobs, settings.lease),
        "rows": rows,
        "agrees": {m: freezes_agree([row["models"][m] for row in rows]) for m in models},
        "real_wall_seconds": max(r.wall for r in results),
        "steadiness": steadiness_summary(results),
        "errors": sorted({e for r in results for e in r.errors})[:10],
        "jobs": [asdict(j) for j in jobs],
    }


# -- whole experiments -------------------------------------------------------------------------------------------
def crash_experiment(
    socket_path: str,
    workdir: Path,
    settings: Settings,
    *,
    victims: int = 24,
    survivors: int = 2,
    rounds: int = 1,
    after: tuple[float, float] = CRASH_AFTER,
    seed: int = 1,
    samples: int = 2000,
    models: Sequence[str] = MODELS,
    name: str = "crash",
    shared: bool = True,
) -> dict[str, Any]:
    """`rounds` real rounds of `victims` crashes (one after another), then the comparison."""
    rng = np.random.default_rng([seed, 1])
    results = []
    for k in range(rounds):
        plans = plan_crashes(victims, after, rng)
        spec = RoundSpec(f"{name}{k}", settings, plans, survivors, shared)
        results += run_steady_rounds(socket_path, workdir, [spec], seed + k)
    return crash_report(results, after, seed=seed, samples=samples, models=models)


def freeze_experiment(
    socket_path: str,
    workdir: Path,
    settings: Settings,
    lengths: Sequence[float],
    *,
    per_length: int = 12,
    victims: int = 24,
    survivors: int = 2,
    after: tuple[float, float] = FREEZE_AFTER,
    seed: int = 2,
    samples: int = 1000,
    models: Sequence[str] = MODELS,
    name: str = "freeze",
    shared: bool = True,
    block: bool = False,
) -> dict[str, Any]:
    """`per_length` real freezes (or event-loop blocks) of each length, `victims` at a time, then the
    comparison."""
    plans = plan_freezes(lengths, per_length, after, np.random.default_rng([seed, 2]), block=block)
    results = []
    for k, start in enumerate(range(0, len(plans), victims)):
        chunk = plans[start : start + victims]
        spec = RoundSpec(f"{name}{k}", settings, chunk, survivors, shared)
        results += run_steady_rounds(socket_path, workdir, [spec], seed + k)
    return freeze_report(results, after, seed=seed, samples=samples, models=models)


# -- command line -----------------------------------------------------------------------------------------------
def _lengths(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def replay_line(rp: dict[str, Any]) -> str:
    e = rp["error_ms"]
    return (
        f"replay: {rp['matched']} of {rp['lost']} reclaims came from the sweep BullMQ's rules give for the "
        f"measured lock sets and sweeps (error {e.get('min', 0):+.0f}..{e.get('max', 0):+.0f} ms, {rp['ties']} ms "
        f"ties; {rp.get('in_flight', 0)} faults with a renewal in flight)"
    )


def steadiness_line(report: dict[str, Any]) -> str:
    seen = report.get("steadiness")
    if seen is None:
        return "machine: not watched"
    return (
        f"machine: stalled up to {seen['stall'] * 1000:.0f} ms, wall clock stepped up to "
        f"{seen['clock_step'] * 1000:.0f} ms (rounds past {STEADY_MARGIN * 1000:.0f} ms are run again)"
    )


def print_crash(report: dict[str, Any]) -> None:
    s = report["settings"]
    print(
        f"crash: lockDuration {s['lock_ms']} ms, stalledInterval {s['stalled_ms']} ms, {report['survivors']} "
        f"survivors per queue, {report['crashes']} crashes ({report['undetected']} undetected)"
    )
    b, rp = report["renewal"], report["replay"]
    print(
        f"  renewal period: real median {b['p50'] * 1000:.1f} ms (max {b['max'] * 1000:.0f}, "
        f"{b['skipped_ticks']} of {b['n']} skipped a tick), model {b['model'] * 1000:.0f} ms"
    )
    g, sg = report["sweep_gaps"], report["sim_sweep_gaps"]
    print(
        f"  sweep gaps: real median {g['p50']:.3f} s, mean {g['mean']:.3f}, max {g['max']:.3f} | "
        f"sim median {sg['p50']:.3f} s, mean {sg['mean']:.3f}, max {sg['max']:.3f}"
    )
    print("  " + replay_line(rp))
    print("  " + steadiness_line(report))
    print(
        f"  sweep timers fired up to {report['timer_lateness'] * 1000:.0f} ms late (allowed above the sim's max)"
    )
    a = report["analytic"]
    print(f"  analytic lease_detection: mean {a['mean']:.3f} s (lower bound), [{a['lo']:.3f}, {a['hi']:.3f}]")
    for model, c in report["models"].items():
        print(
            f"  {model:26s} real {c['real_mean']:.3f} [{c['real_mean_ci'][0]:.3f}, {c['real_mean_ci'][1]:.3f}] "
            f"range [{c['real_range'][0]:.3f}, {c['real_range'][1]:.3f}] | sim {c['sim_mean']:.3f} "
            f"[{c['sim_mean_ci'][0]:.3f}, {c['sim_mean_ci'][1]:.3f}] range [{c['sim_range'][0]:.3f}, "
            f"{c['sim_range'][1]:.3f}] | KS p {c['ks_p']:.3g}, Welch p {c['welch_p']:.3g}: "
            f"{'agrees' if c['agrees'] else 'DISAGREES'}"
        )


def print_freeze(report: dict[str, Any]) -> None:
    s = report["settings"]
    kind = report.get("kind", "freeze")
    print(
        f"{kind}: lockDuration {s['lock_ms']} ms, stalledInterval {s['stalled_ms']} ms, {report['freezes']} "
        f"{kind}s; lapse seen by both the sweep and the resumed worker's renewal in "
        f"{report['lapse_evidence_agrees']} of {report['freezes']}"
    )
    rule = report["lapse_rule"]
    print(
        f"  rule u + F > L (u: last lock set to SIGSTOP) decides the job's fate in {rule['agree']} of "
        f"{rule['of']} freezes ({rule['ambiguous']} within 5 ms of L)"
    )
    print("  " + replay_line(report["replay"]))
    print("  " + steadiness_line(report))
    for row in report["rows"]:
        c = row["models"]["bullmq"] if "bullmq" in row["models"] else next(iter(row["models"].values()))
        models = "; ".join(
            f"{m} sim {x['sim_fraction']:.2f} (analytic {x['analytic']:.2f}) p {x['binomial_p']:.2g}"
            for m, x in row["models"].items()
        )
        print(
            f"  F {row['freeze']:.2f} s: real lost {row['lost']}/{row['n']} "
            f"[{c['real_fraction_ci'][0]:.2f}, {c['real_fraction_ci'][1]:.2f}] | {models}"
        )
    print("  agrees: " + ", ".join(f"{m} {'yes' if ok else 'NO'}" for m, ok in report["agrees"].items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python validation/validate_bullmq.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "what", choices=("crash", "freeze", "block", "all"), help="all: crash, crash at 1.5x, freeze, block"
    )
    parser.add_argument("--lock", type=int, default=2000, help="lockDuration, ms (default 2000)")
    parser.add_argument("--stalled", type=int, default=2000, help="stalledInterval, ms (default 2000)")
    parser.add_argument("--victims", type=int, default=24, help="queues (one fault each) per round")
    parser.add_argument("--survivors", type=int, default=2, help="sweep-only Workers per queue")
    parser.add_argument(
        "--shared-survivors", action="store_true", help="crash rounds: survivors share processes"
    )
    parser.add_argument("--rounds", type=int, default=3, help="crash rounds, one after another")
    parser.add_argument("--lengths", type=_lengths, default=list(FREEZE_LENGTHS), help="freeze lengths, s")
    parser.add_argument("--per-length", type=int, default=12, help="freezes per length")
    parser.add_argument("--samples", type=int, default=2000, help="emqsim replications per crash comparison")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the full report (every job's times) here")
    args = parser.parse_args(argv)
    reason = requirements_missing()
    if reason:
        print(f"validate_bullmq: {reason}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"bullmq": bullmq_version(), "node": _node_version(), "redis": _redis_version()}
    settings = Settings(args.lock, args.stalled)
    crash = {"victims": args.victims, "survivors": args.survivors, "samples": args.samples,
             "rounds": args.rounds, "shared": args.shared_survivors}  # fmt: skip
    t0 = time.time()
    with real_redis() as (sock, workdir):
        if args.what in ("crash", "all"):
            report["crash"] = crash_experiment(sock, workdir, settings, seed=args.seed, **crash)
            print_crash(report["crash"])
        if args.what == "all":
            slow = Settings(args.lock, args.lock * 3 // 2)  # a sweep slower than the lease: two-phase shows
            report["crash_slow_sweep"] = crash_experiment(sock, workdir, slow, seed=args.seed + 100, name="slow",
                                                          **crash)  # fmt: skip
            print_crash(report["crash_slow_sweep"])
        if args.what in ("freeze", "all"):
            report["freeze"] = freeze_experiment(
                sock, workdir, settings, args.lengths, per_length=args.per_length, seed=args.seed + 200,
                victims=args.victims, survivors=args.survivors, samples=max(200, args.samples // 2),
            )  # fmt: skip
            print_freeze(report["freeze"])
        if args.what in ("block", "all"):
            report["block"] = freeze_experiment(
                sock, workdir, settings, args.lengths, per_length=args.per_length, seed=args.seed + 300,
                victims=args.victims, survivors=args.survivors, samples=max(200, args.samples // 2),
                name="block", block=True,
            )  # fmt: skip
            print_freeze(report["block"])
    report["wall_seconds"] = time.time() - t0
    print(f"total {report['wall_seconds']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _node_version() -> str | None:
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip()


def _redis_version() -> str | None:
    binary = redis_server_path()
    if binary is None:
        return None
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((w.split("=")[1] for w in out.split() if w.startswith("v=")), out.strip())


if __name__ == "__main__":
    raise SystemExit(main())
