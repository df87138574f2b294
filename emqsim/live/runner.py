"""run_live(scenario, policy) -> Run: the lease protocol on a real Redis with real worker processes.

The parent process owns the run: it starts (or checks) Redis, loads the Lua scripts, spawns one OS process
per worker (plus a reaper process when the policy has one), adds the jobs at their arrival times, carries
out the faults with real signals (crash = SIGKILL, freeze = SIGSTOP then SIGCONT), and reads every
worker's report lines from its stdout pipe. At the end it turns those reports and its own fault timeline
into the same `Run` records the simulator produces, in the scenario's seconds, so `emqsim.stats` works on
both.

Time scaling: every duration of the scenario and the policy is multiplied by `time_scale` on the way in
(lease 30 s at 0.02 is a 600 ms PX) and every measured time divided by it on the way out. Times are
client wall-clock readings (`time.time()`); a server-side time (taken, reclaimed, finish applied) is the
time the request was sent, which is also the `now` the script receives.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import selectors
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from emqsim.errors import ConfigError
from emqsim.faults import (
    NEVER_MS,
    Block,
    ChildCrash,
    Crash,
    Freeze,
    MemoryPressure,
    Outage,
    OutageWindow,
    disconnect_detail,
    never_recovers,
    outage_spans,
    outage_windows,
    redis_down_windows,
)
from emqsim.keys import QueueKeys
from emqsim.live.admin import RedisAdmin
from emqsim.live.children import SPARES, ChildProcesses
from emqsim.live.clockwatch import ClockWatch, Steadiness
from emqsim.live.failover import Failover, check_failover, failovers_of
from emqsim.live.faults import FaultInjection, memory_pressure
from emqsim.live.flushes import flush_spans, round_trip_ms
from emqsim.live.partition import Partitions, check_partitions
from emqsim.live.records import Proc, build_run
from emqsim.live.resend import catch_windows, check_resend, in_flight_warning, rtt_ms
from emqsim.live.scripts import LuaQueue
from emqsim.live.server import (
    PrivateRedis,
    RedisUnavailable,
    delete_prefix,
)
from emqsim.live.settings import DEFAULT_TIME_SCALE, LiveDisturbed, LiveSettings, LiveWarning
from emqsim.policies import ReclaimPolicy
from emqsim.records import Run
from emqsim.scenario import Scenario
from emqsim.seeds import stream
from emqsim.units import to_ms


class LiveRun(ChildProcesses, RedisAdmin, FaultInjection):
    """One live run. Build it, call `run()` once."""

    def __init__(
        self,
        scenario: Scenario,
        policy: ReclaimPolicy,
        *,
        seed: int = 0,
        replication: int = 0,
        redis_url: str | None = None,
        time_scale: float = DEFAULT_TIME_SCALE,
        allow_foreign_keys: bool = False,
        poll: float = 0.005,
        record_locks: bool = True,
        startup_timeout: float = 30.0,
    ) -> None:
        if not isinstance(scenario, Scenario):
            raise ConfigError(f"scenario must be an emqsim Scenario, got {type(scenario).__name__}")
        if not isinstance(policy, ReclaimPolicy):
            raise ConfigError(f"policy must be a LeasePolicy or TimeoutPolicy, got {policy!r}")
        if not (isinstance(time_scale, int | float) and math.isfinite(time_scale) and time_scale > 0):
            raise ConfigError(f"time_scale must be a positive number, got {time_scale!r}")
        if not (isinstance(poll, int | float) and 0 < poll <= 1):
            raise ConfigError(f"poll must be in (0, 1] real seconds, got {poll!r}")
        self.scenario = scenario
        self.policy = policy
        self.seed = seed
        self.replication = replication
        self.redis_url = redis_url
        self.scale = float(time_scale)
        self.allow_foreign_keys = allow_foreign_keys
        self.poll = float(poll)
        self.record_locks = record_locks
        self.startup_timeout = startup_timeout
        self.live = LiveSettings.from_policy(policy, self.scale)
        if self.live.renewal is not None and self.live.renewal["tick_ms"] < 20:
            warnings.warn(
                f"the heartbeat ticks every {self.live.renewal['tick_ms']} ms real: scheduling jitter on a "
                "busy machine is of that order; prefer a larger time_scale",
                LiveWarning,
                stacklevel=3,
            )
        run_id = uuid.uuid4().hex[:8]
        self.keys = QueueKeys(f"{scenario.queue}-live-{run_id}")
        self.prefix = self.keys.base + ":"
        # Workload and faults from the same named streams as the simulator: same seed, same jobs.
        works = scenario.duration.sample(stream(seed, replication, "durations"), scenario.jobs)
        self.works_s = [to_ms(float(w)) / 1000 for w in works]  # scenario seconds, ms-rounded as the sim
        rate = scenario.arrival_rate
        if rate is None:
            self.arrival_s = [0.0] * scenario.jobs
        else:
            gaps = stream(seed, replication, "arrivals").exponential(1 / rate, scenario.jobs)
            self.arrival_s = [ms / 1000 for ms in itertools.accumulate(to_ms(float(g)) for g in gaps)]
        check_failover(scenario.faults, redis_url)  # a failover on its own servers (emqsim.live.failover)
        check_partitions(
            scenario.faults, redis_url
        )  # silent partitions through proxies (emqsim.live.partition)
        self.partitions = Partitions(scenario.faults)
        if failovers_of(scenario.faults) and self.live.swept_by == "reaper":
            raise ConfigError(
                "live mode fails over runs swept by the workers; a policy with a separate reaper (whose "
                "connection would stay on the demoted primary) fails over in the simulator only"
            )
        check_resend(scenario.network, scenario.faults)  # a resent command runs twice (emqsim.live.resend)
        in_flight = in_flight_warning(scenario.network, self.scale)
        if in_flight is not None:
            warnings.warn(in_flight, LiveWarning, stacklevel=3)
        # Connection outages: each worker's windows come from the simulator's own function and streams.
        self.outage_spans = outage_spans(scenario.faults)
        # Redis restarts: the parent really stops its private redis-server and starts it again on its data.
        self.restarts: list[OutageWindow] = redis_down_windows(scenario.faults, to_ms(scenario.horizon))
        if self.restarts and redis_url is not None:
            raise ConfigError(
                "live mode restarts only its own private redis-server (Outage redis_restart), never the one at "
                f"{redis_url}: leave out the Redis URL, or the restart (emqsim live --without-outages)"
            )
        under_pressure = any(isinstance(f, MemoryPressure) for f in scenario.faults)
        if redis_url is not None and under_pressure:
            raise ConfigError(
                "live mode sets maxmemory only on its own private redis-server (MemoryPressure), never on the "
                f"one at {redis_url}: leave out the Redis URL, or the memory pressure"
            )
        if under_pressure and getattr(policy, "redis_commands", None):
            raise ConfigError(
                "live mode runs emqsim's own scripts, not the client library whose command names the policy's "
                "redis_commands lists (their latency histograms take memory under MemoryPressure): use the "
                "policy with redis_commands=() (dataclasses.replace), or leave out the memory pressure"
            )
        self.redis_down = False  # the private server is down (between a restart's SHUTDOWN and its start)
        self.after_restart: list[Callable[[], None]] = []  # Redis reads that waited for it to be back
        self.commands_before_restarts = 0  # protocol commands counted by servers since shut down
        rf = scenario.random_faults
        self.has_outages = bool(self.outage_spans) or (rf is not None and rf.outage_rate > 0)
        # A job's faults in the simulator's order: the i-th draws from its ("job_faults", job, i) stream.
        self.job_faults: dict[int, list[Crash | Freeze | Block | ChildCrash]] = {}
        for fault in scenario.faults:
            if fault.job is not None and not isinstance(fault, Outage):
                self.job_faults.setdefault(fault.job, []).append(fault)
        # Sandboxed processors (as the simulator, when the scenario has a ChildCrash): every job runs in a
        # child process of its worker; `children` maps a running job's token to its child's pid.
        self.sandboxed = any(isinstance(f, ChildCrash) for f in scenario.faults)
        self.children: dict[str, int] = {}
        # real (from, until) around a failover's move of the workers off the demoted primary (`Failover`)
        self.switch_times: list[tuple[float, float]] = []
        # Run state.
        self.procs: dict[int, Proc] = {}  # started processes by worker id (-1: the reaper)
        self.all_procs: list[Proc] = []  # including the idle spare
        self.spawned = 0
        self.pending_restarts: list[int] = []
        self.stopping = False
        self.restart_requested: dict[int, float] = {}
        self.next_wid = scenario.workers
        self.events: list[dict[str, Any]] = []
        self.worker_events: list[tuple[float, int, str, str]] = []
        self.schedule: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.t0 = 0.0
        self.arrived: list[float] = []
        self.settled = 0
        self.executing: dict[str, int] = {}  # token -> worker, attempts taken and not yet over
        self.first_taken: set[str] = set()
        self.synthetic_takes: list[dict[str, Any]] = []
        self.evictions: list[tuple[float, str]] = []
        self.memory_evictions: list[tuple[float, str]] = []  # keys maxmemory evicted (MemoryPressure)
        self.resident_peak = 0
        self.selector = selectors.DefaultSelector()
        self.tmpdir: Path | None = None
        self.steadiness: Steadiness | None = None  # what the ClockWatch saw during the run
        self.server: PrivateRedis | None = None
        self.client: redis.Redis | None = None
        self.restart_watcher: Callable[[], object] | None = None
        self.commands_before = 0
        self.connections_dropped = 0  # worker connections closed at outages' disconnects
        found = failovers_of(scenario.faults)
        self.failover: Failover | None = Failover(self, found[0]) if found else None

    # -- helpers -------------------------------------------------------------------------------------------
    def at(self, when: float, action: Callable[..., None]) -> None:
        self.seq += 1
        heapq.heappush(self.schedule, (when, self.seq, action))

    def sim_s(self, real_t: float) -> float:
        """A real wall-clock time -> scenario seconds since the start (microsecond resolution)."""
        return round((real_t - self.t0) / self.scale, 6)

    def _rng(self, name: str, *index: int):
        return stream(self.seed, self.replication, name, *index)

    def outages_of(
        self, proc: Proc, wid: int, t_go: float, restarted: bool
    ) -> list[tuple[float, float, float]]:
        """The worker's connection outages in real time (disconnected, network back, reconnected), from the
        simulator's `outage_windows` (same spans, same seeded stream): the worker process holds its requests
        back while disconnected (its offline queue), and the parent records the connection events. The
        reaper, as in the simulator, never loses its connection."""
        if not self.has_outages:
            return []
        start_ms = to_ms((t_go - self.t0) / self.scale) if restarted else 0
        windows = outage_windows(
            self.outage_spans,
            wid,
            start_ms,
            restarted,
            self.scenario.random_faults,
            to_ms(self.scenario.horizon),
            lambda: self._rng("faults", wid, 3),
        )
        windows = never_recovers(windows, self.scenario.faults, wid, restarted)  # Outage(recovers=False)
        real = []
        seen = []  # every window, the partitions' too: the worker is `disconnected` in all of them
        for begin_ms, up_ms, back_ms in windows:
            begin, up, back = self.real_window((begin_ms, up_ms, min(back_ms, up_ms)))
            if back_ms >= NEVER_MS:  # never back: past the run's end, so the worker's client waits it out
                back = self.t0 + self.scenario.horizon * self.scale + 86_400.0
            else:
                back = self.real_window((begin_ms, up_ms, back_ms))[2]
            seen.append((begin, back))
            # a silent partition: its proxy holds the connection; the worker holds requests only after a give-up
            own = self.partitions.plan(
                wid, (begin_ms, up_ms, back_ms), lambda ms: self.t0 + ms / 1000 * self.scale, self.at
            )
            if own is not None:
                real.append(self.real_window(own) if own != (begin_ms, up_ms, back_ms) else (begin, up, back))
            if own != (begin_ms, up_ms, back_ms):  # what the worker sends meanwhile reaches Redis at `back`:
                proc.held.append((begin, back))  # let go by the proxy, or resent after TCP gave up
            wait = (back_ms - up_ms) / 1000
            detail = disconnect_detail((begin_ms, up_ms, back_ms), self.restarts)
            self.connection_event(proc, wid, begin, "disconnect", detail)
            if own == (begin_ms, up_ms, back_ms) and not self.redis_down_within(begin, back):
                self.at(begin, lambda w=wid, p=proc: self.drop_connections(p, w))  # (a restart closes them)
            if back_ms >= NEVER_MS:  # the client never recovers: it stays cut off
                self.connection_event(proc, wid, up, "network_up", "the client never reconnects")
                continue
            self.connection_event(proc, wid, up, "network_up", f"reconnect in {wait:g} s")
            self.connection_event(proc, wid, back, "reconnect", "resending queued commands")
        proc.outages = seen
        if self.scenario.network.resend_twice:  # the requests a drop catches run twice (emqsim.live.resend)
            to_real = self.real_window
            proc.resend = [
                to_real((a, b, c)) for a, b, c in catch_windows(windows, rtt_ms(self.scenario.network))
            ]
        n = self.scenario.network.max_retries_per_request
        if n is not None:  # the requests a flush rejects (emqsim.live.flushes), up to the run's horizon
            horizon_ms, rtt = to_ms(self.scenario.horizon) + 1, round_trip_ms(self.scenario.network)
            proc.flushes = [
                (*self.real_window((a, b, f)), ran)
                for a, b, f, ran in flush_spans(windows, n, rtt, horizon_ms)
            ]
        return real

    def connection_event(self, proc: Proc, wid: int, when: float, kind: str, detail: str) -> None:
        """Records only, as the simulator's: a connection event of a worker that is not dead by then."""

        def record() -> None:
            if proc.state != "dead":
                self.worker_events.append((when, wid, kind, detail))

        self.at(when, record)

    # -- the run -------------------------------------------------------------------------------------------
    def run(self) -> Run:
        stop_watch = threading.Event()
        watcher = None
        try:
            self.tmpdir = Path(tempfile.mkdtemp(prefix="emqsim-live-run-"))
            self.open_redis()
            if self.failover is not None:
                self.failover.start()
            watcher = self.watch_evictions(stop_watch)
            with ClockWatch() as clock:
                run = self._run()
            try:
                self.steadiness = clock.result()
            except RuntimeError as exc:  # the watch itself was lost (killed): say so, keep the run
                warnings.warn(f"{exc}; this run's steadiness is unknown", LiveWarning, stacklevel=2)
            margin = self.live.timing_margin_ms / 1000
            if self.steadiness is not None and self.steadiness.disturbed(margin):
                warnings.warn(
                    f"{self.steadiness.describe()}, against a timing margin of {margin * 1000:.0f} ms (half "
                    "the shortest timer): this run's timings may differ from the simulator's for reasons "
                    "outside the protocol; run it again on a quieter machine",
                    LiveDisturbed,
                    stacklevel=2,
                )
            return run
        except (redis.RedisError, RuntimeError, OSError) as exc:
            gone = self.redis_failure()
            if gone is not None:
                raise RedisUnavailable(gone) from None
            if isinstance(exc, redis.RedisError):
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise RedisUnavailable(
                    f"Redis failed during the live run ({first}); the run was stopped"
                ) from None
            raise
        finally:
            stop_watch.set()
            self.stop_all()
            if watcher is not None:
                watcher.join(timeout=1)
            if self.client is not None:
                with contextlib.suppress(redis.RedisError):
                    if self.server is None:
                        delete_prefix(self.client, self.prefix)
                self.client.close()
            if self.failover is not None:  # first: a primary with a replica attached waits for it on SIGTERM
                self.failover.stop()
            self.partitions.close()
            if self.server is not None:
                self.server.stop()
            if self.tmpdir is not None:
                shutil.rmtree(self.tmpdir, ignore_errors=True)

    def _run(self) -> Run:
        scenario = self.scenario
        assert self.client is not None
        self.commands_before = self.command_total()
        initial = [self.spawn("worker") for _ in range(scenario.workers)]
        reaper = self.spawn("reaper") if self.live.swept_by == "reaper" else None
        if self.can_restart():
            for _ in range(min(SPARES, scenario.workers)):
                self.spawn("worker")
        deadline = time.time() + self.startup_timeout
        while not all(p.ready for p in self.all_procs):
            for p in self.all_procs:
                if p.popen.poll() is not None and not p.ready:
                    self.pump(0)
                    raise RuntimeError(f"a {p.role} process exited at start:\n{self.log_tail(p)}")
            if time.time() > deadline:
                raise RuntimeError(f"worker processes did not start within {self.startup_timeout} s")
            self.pump(0.01)
        self.t0 = time.time() + 0.05
        if self.failover is not None:  # the workers' `go` carries its switch times
            self.switch_times = self.failover.switches(self.t0)
        for wid, proc in enumerate(initial):
            self.start(proc, wid, self.t0)
        if reaper is not None:
            self.start(reaper, -1, self.t0)
        for fault in scenario.faults:
            if fault.worker is not None and fault.at is not None and not isinstance(fault, Outage):
                self.at(
                    self.t0 + fault.at * self.scale,
                    lambda f=fault: self.apply(f.worker, f, self._rng("faults", f.worker, 2)),
                )
        for wid in range(scenario.workers):
            self.random_faults(wid, self.t0)
        memory_pressure(self, self.t0)
        if self.failover is not None:  # after the outages' disconnects: at the same time, those go first
            self.failover.schedule(self.t0)
        for window in self.restarts:
            begin, up, _ = self.real_window(window)
            self.at(begin, self.redis_stop)
            self.at(up, self.redis_start)
        self.queue = LuaQueue(self.client, self.keys)
        horizon = self.t0 + scenario.horizon * self.scale
        next_job = 0
        next_sample = 0.0
        ended_by = "horizon"
        while True:
            now = time.time()
            while next_job < scenario.jobs and self.t0 + self.arrival_s[next_job] * self.scale <= now:
                planned = self.t0 + self.arrival_s[next_job] * self.scale
                back = self.producer_back(planned)
                if back is not None and (now < back or self.redis_down):
                    break  # the producer's offline queue: sent in order once it reconnects
                self.queue.add(str(next_job))
                self.arrived.append(time.time() if back is None else planned)
                next_job += 1
            while self.schedule and self.schedule[0][0] <= now:
                _, _, action = heapq.heappop(self.schedule)
                action()
            if now >= next_sample and not self.redis_down:
                self.resident_peak = max(self.resident_peak, int(self.client.dbsize()) - self.foreign)
                next_sample = now + 0.05
            lost = len(self.failover.lost_adds) if self.failover is not None else 0  # adds a failover lost
            if next_job == scenario.jobs and self.settled + lost >= scenario.jobs and not self.executing:
                ended_by = "done"
                break
            if now >= horizon:
                break
            wake = min(
                horizon,
                now + 0.05,
                self.schedule[0][0] if self.schedule else math.inf,
                self.next_add(next_job) if next_job < scenario.jobs else math.inf,
            )
            self.pump(wake - time.time())
        end = time.time()
        if self.redis_down:  # the run ended while Redis restarts: read the final state from its saved data
            self.redis_start()
        # Each empty poll ran one LMOVE inside `take`; the simulator's blocking take parks instead.
        polls = sum(p.counts.get("poll", 0) for p in self.all_procs)
        self.redis_commands = max(
            0, self.commands_before_restarts + self.command_total() - self.commands_before - polls
        )
        x = self.client
        self.final_state = {
            "wait": int(x.llen(self.keys.wait)),
            "active": int(x.llen(self.keys.active)),
            "completed": int(x.scard(self.keys.completed)),
            "failed": int(x.scard(self.keys.failed)),
        }
        self.stop_all()
        return build_run(self, end, ended_by)

    def next_add(self, job: int) -> float:
        """When the producer next sends an add: at the job's arrival, or at its reconnect after a restart."""
        planned = self.t0 + self.arrival_s[job] * self.scale
        back = self.producer_back(planned)
        return planned if back is None else back


def run_live(
    scenario: Scenario,
    policy: ReclaimPolicy,
    *,
    redis_url: str | None = None,
    time_scale: float = DEFAULT_TIME_SCALE,
    allow_foreign_keys: bool = False,
    seed: int = 0,
    replication: int = 0,
    poll: float = 0.005,
    record_locks: bool = True,
) -> Run:
    """Run `scenario` under `policy` on a real Redis with real worker processes; records in scenario seconds.

    Without `redis_url`, a private redis-server is started in a temporary directory and stopped afterwards.
    With one, the run refuses (ConfigError) a database holding keys outside its own prefix unless
    `allow_foreign_keys`, and deletes its own keys afterwards. `time_scale` multiplies every duration of the
    scenario and the policy (0.02: lease 30 s -> 600 ms real); pass 1.0 and small settings to run unscaled.
    `poll` is how often (real seconds) an idle worker retries `take` while `wait` is empty. The workload and
    the fault draws come from the simulator's seeded streams, so `seed` gives the same jobs as `simulate`.
    """
    return LiveRun(
        scenario,
        policy,
        seed=seed,
        replication=replication,
        redis_url=redis_url,
        time_scale=time_scale,
        allow_foreign_keys=allow_foreign_keys,
        poll=poll,
        record_locks=record_locks,
    ).run()
