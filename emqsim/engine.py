"""simulate(scenario, policy, seed) -> Run: wires the store, the workers, the faults and the clock together.

Follow one job: `Simulation._arrivals` adds it (server.add_job), a worker's `slot` takes it (server._take sets
the lock), its `lock_manager` renews it (server.renew), and either the worker finishes it (server.finish) or a
sweep reclaims it (server.sweep -> policy.sweep -> protocol.Queue) and another worker takes it again.

Same-millisecond rule: requests reaching Redis in the same millisecond run in the order they were sent, and a
key is visible while `now <= expire_at`, so a renewal arriving exactly at the expiry millisecond still finds
its lock; one millisecond later it does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from emqsim.client import DEAD, Reaper
from emqsim.errors import require_instance, require_whole
from emqsim.faults import (
    NEVER_MS,
    Block,
    ChildCrash,
    Crash,
    Freeze,
    MemoryPressure,
    Outage,
    OutageWindow,
    as_distribution,
    disconnect_detail,
    never_recovers,
    outage_spans,
    outage_windows,
    redis_down_windows,
)
from emqsim.keys import QueueKeys
from emqsim.ledger import AttemptDraft, Ledger
from emqsim.policies import LeasePolicy, ReclaimPolicy, TimeoutPolicy
from emqsim.records import Attempt, Run, WorkerEvent, with_expiries
from emqsim.scenario import Scenario
from emqsim.seeds import stream_on_first_use
from emqsim.server import Server, TieBreak
from emqsim.store.eviction import Eviction
from emqsim.units import to_ms, to_ms_array
from emqsim.worker import Worker

HOUR_MS = 3_600_000


JobSink = Callable[[list[Attempt], float, "float | None"], None]
REAPER = -1  # the reaper's id in `timer_phases`


class Simulation:
    """One run. Build it, call `run()` once.

    With a `job_sink` the run streams: it keeps no records, and hands each job's attempts, final, to
    `job_sink(attempts, arrival, end)` as soon as nothing can change them any more (the job completed or
    failed, and every attempt of it finished at Redis or lost its worker), so memory follows the jobs in
    flight, not the jobs run. `end` is None for a job closed during the run; jobs still open when the run
    stops are handed over then, with the run's end. `emqsim.summaries.simulate_summary` is the usual sink.
    """

    def __init__(
        self,
        scenario: Scenario,
        policy: ReclaimPolicy,
        seed: int = 0,
        replication: int = 0,
        *,
        record_locks: bool = True,
        job_sink: JobSink | None = None,
        timer_phases: dict[tuple[str, int], int] | None = None,
        tie_break: TieBreak | None = None,
        skipped_ticks_at: tuple[int, ...] = (),
    ) -> None:
        """`timer_phases` pins the first tick of chosen timers instead of drawing it, in ms:
        {("renew", wid): first renewal tick (>= 1), ("sweep", wid or REAPER): first sweep (>= 0)}; timers not
        named keep their draws. `tie_break` reorders same-millisecond steps at Redis (default: the fixed
        rule). `skipped_ticks_at` places skipped ticks instead of drawing them (`Network.skipped_ticks`): for
        each offset (ms into job 0's first attempt), the holder's first renewal tick with jobs due at or after
        it renews nothing. All are for `emqsim.explore`; without them a run is what it always was."""
        require_instance(
            "scenario", scenario, Scenario, "a Scenario, e.g. standard('fast-dead') (not its name)"
        )
        if not isinstance(policy, ReclaimPolicy):
            raise TypeError(
                f"policy must be a ReclaimPolicy (LeasePolicy, TimeoutPolicy, ...), got {policy!r}"
            )
        require_whole("seed", seed)
        require_whole("replication", replication)
        self.scenario = scenario
        # per-run state of a custom policy never leaks between runs; the library's own policies are frozen
        # dataclasses of immutable values, so they have none (and copying them cost explore 4% of its time)
        self.policy = policy if type(policy) in (LeasePolicy, TimeoutPolicy) else copy.deepcopy(policy)
        self.seed = seed
        self.replication = replication
        self.failovers = sorted(
            (to_ms(f.at), to_ms(f.lost_writes))
            for f in scenario.faults
            if isinstance(f, Outage) and f.lost_writes
        )
        pressure = [f for f in scenario.faults if isinstance(f, MemoryPressure)]
        self.memory: MemoryPressure | None = pressure[-1] if pressure else None
        self._failovers_left = len(self.failovers)
        self._lag_windows_open = 0  # failovers whose lag window has begun: the run cannot end before them
        self.env = simpy.Environment()
        self.ledger = Ledger(record_locks=record_locks and job_sink is None, streaming=job_sink is not None)
        self.server = Server(
            self.env,
            self.policy,
            QueueKeys(scenario.queue),
            self._rng("store"),
            self.ledger,
            self,
            remove_on_complete=scenario.remove_on_complete,
            tie_break=tie_break,
            hz=scenario.hz,
            eviction=None
            if self.memory is None
            else Eviction(
                self.memory.maxmemory,
                self.memory.policy,
                self.memory.samples,
                latency_tracking=self.memory.latency_tracking,
                client_commands=frozenset(getattr(self.policy, "redis_commands", ())),
            ),
            eviction_rng=None if self.memory is None else self._rng("memory", 0),
        )
        self.server.readonly = sorted(
            (
                to_ms(f.at + f.duration),
                NEVER_MS
                if not f.at + f.duration + f.readonly <= scenario.horizon  # (inf included)
                else to_ms(f.at + f.duration + f.readonly),
            )
            for f in scenario.faults
            if isinstance(f, Outage) and f.readonly > 0
        )
        self.timer_phases = timer_phases or {}
        self.skipped_ticks_at = tuple(sorted(skipped_ticks_at))
        self.fault_last = tie_break is not None and tie_break.fault_last
        self.job_sink = job_sink
        self.keep_records = job_sink is None
        self._settled_open: set[str] = set()  # streaming: settled jobs with an attempt that may still change
        self._arrival_of: dict[str, float] = {}  # streaming: arrival times of jobs not yet closed
        self.workers: dict[int, Worker] = {}  # the workers that have not crashed
        # the ids of those that did: a crashed worker never lives again (a restart is a new worker), so the run
        # lets it go (its outage windows to the horizon, round-trip draws and streams: a long run replaces
        # thousands) and keeps only that it is dead
        self.departed: set[int] = set()
        self._sweeper_phase: tuple[int, int] | None = None  # see _sweep_phases
        self.worker_events: list[WorkerEvent] = []
        self.executing = 0
        self.arrived = 0
        self.arrival_times: list[float] = []
        self.done = self.env.event()
        self.next_worker_id = scenario.workers
        self.job_faults: dict[int, list[Crash | Freeze | Block | ChildCrash]] = {}
        for fault in scenario.faults:
            if fault.job is not None:
                self.job_faults.setdefault(fault.job, []).append(fault)
        self.child_crashes = any(isinstance(f, ChildCrash) for f in scenario.faults)
        self.outages = outage_spans(scenario.faults)
        # Redis restarts cut off the producer and the reaper too (the workers' windows include them already)
        self.redis_down = redis_down_windows(scenario.faults, to_ms(scenario.horizon))

    def _rng(self, name: str, *index: int) -> np.random.Generator:
        return stream_on_first_use(self.seed, self.replication, name, *index)

    # -- what the server and the workers ask of the run (ServerHost, WorkerHost) ----------------------------------------------------------------------
    def worker_event(self, wid: int, kind: str, detail: str = "") -> None:
        if self.keep_records:
            self.worker_events.append(WorkerEvent(self.env.now / 1000, wid, kind, detail))

    def worker_state(self, wid: int) -> str:
        return DEAD if wid in self.departed else self.workers[wid].state_at(int(self.env.now))

    def attempts_started(self, n: int) -> None:
        self.executing += n

    def attempts_stopped(self, n: int) -> None:
        self.executing -= n
        self._check_done()

    def _check_done(self) -> None:
        if (
            not self.done.triggered
            and self.arrived == self.scenario.jobs
            and self.server.settled + len(self.server.lost_jobs) == self.scenario.jobs
            and self.executing == 0
            and not self._lag_windows_open  # a failover to come may undo a finish of its window
        ):
            self.done.succeed()

    def worker_crashed(self, worker: Worker, stopped: list[AttemptDraft]) -> None:
        del self.workers[worker.wid]
        self.departed.add(worker.wid)
        if worker.restart_after_ms is not None:
            self.env.process(self._restart(worker.restart_after_ms))
        if self.job_sink is not None:
            for attempt in stopped:
                if attempt.job in self._settled_open:
                    self._try_close(attempt.job)

    # -- streaming: hand over each job once it is final -----------------------------------------------------
    def job_settled(self, job_id: str) -> None:
        if self.job_sink is not None:
            self._settled_open.add(job_id)
            self._try_close(job_id)
        self._check_done()

    def finish_applied(self, job_id: str) -> None:
        if job_id in self._settled_open:
            self._try_close(job_id)

    def _try_close(self, job_id: str) -> None:
        """Hand a settled job to the sink if none of its attempts can change any more (`Ledger.close_if_final`)."""
        if self._failovers_left:
            return  # a failover to come may undo its finish: the job stays open until it is past
        attempts = self.ledger.close_if_final(job_id, self._worker_dead)
        if attempts is None:
            return
        self._settled_open.discard(job_id)
        sink = self.job_sink
        assert sink is not None  # jobs are closed only when streaming
        sink(attempts, self._arrival_of.pop(job_id), None)

    def _worker_dead(self, wid: int) -> bool:
        return wid in self.departed or self.workers[wid].state == DEAD

    def job_started(self, worker: Worker, attempt: AttemptDraft) -> None:
        if attempt.attempt != 1:
            return
        if self.skipped_ticks_at and attempt.job == "0":  # explore's placed skips (see __init__)
            worker.skip_at += [int(self.env.now) + ms for ms in self.skipped_ticks_at]
        for i, fault in enumerate(self.job_faults.get(int(attempt.job), ())):
            rng = self._rng("job_faults", int(attempt.job), i)
            after = to_ms(float(as_distribution(fault.after, "after").sample(rng, 1)[0]))
            self.env.process(self._fault_later(worker, fault, after, rng, attempt.token))

    # -- processes ---------------------------------------------------------------------------------------
    def _fault_later(self, worker: Worker, fault: Any, delay_ms: int, rng: np.random.Generator, token: str):
        yield self.env.timeout(delay_ms)
        if self.fault_last:
            yield self.env.timeout(0)  # after the events already due in this millisecond
        if isinstance(fault, Crash):
            worker.crash(_restart_ms(fault.restart_after))
        elif isinstance(fault, ChildCrash):
            worker.child_crash(token)
        else:
            duration = to_ms(float(as_distribution(fault.duration, "duration").sample(rng, 1)[0]))
            if isinstance(fault, Block):
                yield from worker.block(duration)
            else:
                yield from worker.freeze(duration)

    def _restart(self, delay_ms: int):
        yield self.env.timeout(delay_ms)
        wid = self.next_worker_id
        self.next_worker_id += 1
        self._start_worker(wid, restarted=True)

    def _random_crashes(self, worker: Worker, rng: np.random.Generator):
        faults = self.scenario.random_faults
        assert faults is not None
        yield self.env.timeout(max(1, to_ms(rng.exponential(HOUR_MS / 1000 / faults.crash_rate))))
        if worker.state == DEAD:
            return
        worker.crash(_restart_ms(faults.restart_after))

    def _random_freezes(self, worker: Worker, rng: np.random.Generator):
        faults = self.scenario.random_faults
        assert faults is not None
        mean_gap_s = HOUR_MS / 1000 / faults.freeze_rate
        while True:
            yield self.env.timeout(max(1, to_ms(rng.exponential(mean_gap_s))))
            if worker.state == DEAD:
                return
            duration = max(1, to_ms(float(faults.freeze_duration.sample(rng, 1)[0])))
            yield from worker.freeze(duration)

    def _random_blocks(self, worker: Worker, rng: np.random.Generator):
        faults = self.scenario.random_faults
        assert faults is not None  # started only when the scenario has random faults
        mean_gap_s = HOUR_MS / 1000 / faults.block_rate
        while True:
            yield self.env.timeout(max(1, to_ms(rng.exponential(mean_gap_s))))
            if worker.state == DEAD:
                return
            duration = max(1, to_ms(float(faults.block_duration.sample(rng, 1)[0])))
            yield from worker.block(duration)

    def _outage_windows(self, worker: Worker, start_ms: int, restarted: bool) -> list[OutageWindow]:
        """The worker's connection outages (`emqsim.faults.outage_windows`, which the live mode uses too)."""
        windows = outage_windows(
            self.outages,
            worker.wid,
            start_ms,
            restarted,
            self.scenario.random_faults,
            to_ms(self.scenario.horizon),
            lambda: self._rng("faults", worker.wid, 3),
        )
        return never_recovers(windows, self.scenario.faults, worker.wid, restarted)

    def _connection_events(self, worker: Worker, windows: list[tuple[int, int, int]]):
        """Records only: when the worker's connection dropped, the network came back, and it reconnected."""
        for begin, up, back in windows:
            yield self.env.timeout(begin - int(self.env.now))
            if worker.state == DEAD:
                return
            self.worker_event(worker.wid, "disconnect", disconnect_detail((begin, up, back), self.redis_down))
            yield self.env.timeout(up - begin)
            if worker.state == DEAD:
                return
            if back >= NEVER_MS:
                self.worker_event(worker.wid, "network_up", "the client never reconnects")
                return
            self.worker_event(worker.wid, "network_up", f"reconnect in {(back - up) / 1000:g} s")
            yield self.env.timeout(back - up)
            if worker.state == DEAD:
                return
            self.worker_event(worker.wid, "reconnect", "resending queued commands")

    def _failover(self, at_ms: int, lag_ms: int):
        """At `at_ms` Redis fails over to a replica that lacks every write of the last `lag_ms` (the window
        is journaled from `at_ms - lag_ms`): a lost finish makes its job unsettled again (it runs again), a
        lost add loses its job; streaming holds settled jobs open until the last failover is past."""
        if at_ms - lag_ms > 0:
            yield self.env.timeout(at_ms - lag_ms)
        self.server.start_lag_window()  # (a window from before the run's start: at once, before any add)
        self._lag_windows_open += 1
        yield self.env.timeout(at_ms - int(self.env.now))
        for kind, job_id in self.server.fail_over():
            if kind == "settled":
                self._settled_open.discard(job_id)
        self._lag_windows_open -= 1
        self._failovers_left -= 1
        if not self._failovers_left and self.job_sink is not None:
            for job_id in list(self._settled_open):
                self._try_close(job_id)
        self._check_done()

    def _cache_writes(self, pressure: MemoryPressure):
        """The other tenant of a Redis under memory pressure: `SET cache:n <cache_bytes> PX cache_ttl` at
        Poisson times (`cache_rate` a second, drawn from the run's "memory" stream)."""
        rng = self._rng("memory", 1)
        value = "x" * pressure.cache_bytes
        ttl_ms = max(1, to_ms(pressure.cache_ttl))
        mean_gap_s = 1.0 / pressure.cache_rate
        n = 0
        while True:
            for gap in to_ms_array(rng.exponential(mean_gap_s, 1024)).tolist():
                yield self.env.timeout(max(1, gap))
                self.server.cache_write(f"cache:{n}", value, ttl_ms)
                n += 1

    def _arrivals(self, works_ms: np.ndarray):
        rate = self.scenario.arrival_rate
        gaps = (
            np.zeros(len(works_ms), dtype=np.int64)
            if rate is None
            else to_ms_array(self._rng("arrivals").exponential(1 / rate, len(works_ms)))
        )
        arrival_ms = 0
        for index, (gap, work) in enumerate(zip(gaps, works_ms, strict=True)):
            arrival_ms += int(gap)
            if arrival_ms > self.env.now:
                yield self.env.timeout(arrival_ms - int(self.env.now))
            # the producer's add waits in its offline queue while Redis restarts (sent in order at its reconnect)
            for down, _, back in self.redis_down:
                if down <= arrival_ms < back and self.env.now < back:
                    yield self.env.timeout(back - int(self.env.now))
            self.arrived += 1
            if self.job_sink is None:
                self.arrival_times.append(arrival_ms / 1000)
            else:
                self._arrival_of[str(index)] = arrival_ms / 1000
            self.server.add_job(str(index), int(work) / 1000)

    def _start_worker(self, wid: int, restarted: bool = False) -> Worker:
        worker = Worker(self, wid, self._rng("network", wid), self._rng("network", wid, 1))
        self.workers[wid] = worker
        if self.scenario.network.skipped_ticks > 0:  # its own stream, so runs without skips draw as before
            worker.skip_rng = self._rng("ticks", wid)
        self.worker_event(wid, "restart" if restarted else "start")
        if self.child_crashes:
            worker.slot_procs = {}
        faults = self.scenario.random_faults
        if self.outages or (faults is not None and faults.outage_rate > 0):
            worker.outages = self._outage_windows(worker, int(self.env.now), restarted)
            if worker.outages and self.keep_records:
                self.env.process(self._connection_events(worker, list(worker.outages)))
        phases = self._rng("phases", wid + 1)
        policy = self.policy
        pinned = self.timer_phases  # explore sets the phases it searches (a restarted worker's are its start)
        drawn = not (self.scenario.phases == "aligned" or restarted)
        renewal = policy.renewal if policy.renewal is not None and not policy.renewal.per_job else None
        # The phases stream holds the renewal timer's draw, then the sweep timer's: a draw is made only if its
        # value is used or a later draw needs its place (a stream is made at its first draw: explore, which
        # pins every timer, makes none).
        draw_sweep = drawn and policy.swept_by == "workers" and ("sweep", wid) not in pinned
        draw_renew = drawn and renewal is not None and (("renew", wid) not in pinned or draw_sweep)
        # Timers start when the worker starts: a restarted worker's now; the first workers started at
        # arbitrary moments before the run, so their phases are drawn (unless the scenario aligns them).
        if renewal is not None:  # one timer for the worker's leases (not one per job)
            tick = renewal.tick_ms
            first = int(phases.integers(1, tick + 1)) if draw_renew else tick
            if not restarted:
                first = pinned.get(("renew", wid), first)
            worker.start_lock_manager(first)
        if policy.swept_by == "workers":
            # BullMQ's stalled checker runs once as soon as the worker starts. Workers started at independent
            # arbitrary moments: the one that sweeps (rate limit held) is a random one, the others' attempts
            # fall at independent uniform offsets in (0, scan] after each of its sweeps (one later than scan
            # would take over), so a hand-over after the sweeper dies waits the least of those offsets.
            first = 0
            if draw_sweep:
                incumbent, phase = self._sweep_phases()
                offset = int(phases.integers(1, policy.sweep_interval_ms + 1))
                first = phase if wid == incumbent else phase + offset
            if not restarted:
                first = pinned.get(("sweep", wid), first)
            worker.start_sweeper(first, self._rng("network", wid, 2))  # its checks' own round trips
        for _ in range(self.scenario.concurrency):
            self.env.process(worker.slot())
        faults = self.scenario.random_faults
        if faults is not None:
            fault_rng = self._rng("faults", wid)
            if faults.crash_rate > 0:
                self.env.process(self._random_crashes(worker, fault_rng))
            if faults.freeze_rate > 0:
                self.env.process(self._random_freezes(worker, self._rng("faults", wid, 1)))
            if faults.block_rate > 0:
                self.env.process(self._random_blocks(worker, self._rng("faults", wid, 4)))
        return worker

    def _sweep_phases(self) -> tuple[int, int]:
        """(the worker sweeping when the run starts, the ms of its first sweep), drawn once per run."""
        if self._sweeper_phase is None:
            rng = self._rng("phases", 0, 1)
            self._sweeper_phase = (
                int(rng.integers(0, self.scenario.workers)),
                int(rng.integers(0, self.policy.sweep_interval_ms)),
            )
        return self._sweeper_phase

    def _worker_fault(self, fault: Crash | Freeze | Block):
        assert fault.at is not None and fault.worker is not None  # a fault at a time on a worker
        yield self.env.timeout(to_ms(fault.at))
        if self.fault_last:
            yield self.env.timeout(0)  # after the events already due in this millisecond
        worker = self.workers.get(fault.worker)
        if worker is None:  # it crashed before: nothing to do to a dead worker
            return
        if isinstance(fault, Crash):
            worker.crash(_restart_ms(fault.restart_after))
        else:
            rng = self._rng("faults", fault.worker, 2)
            duration = to_ms(float(as_distribution(fault.duration, "duration").sample(rng, 1)[0]))
            if isinstance(fault, Block):
                yield from worker.block(duration)
            else:
                yield from worker.freeze(duration)

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> Run:
        scenario = self.scenario
        works = scenario.duration.sample(self._rng("durations"), scenario.jobs)
        works_ms = to_ms_array(works)
        for wid in range(scenario.workers):
            self._start_worker(wid)
        if self.policy.swept_by == "reaper":
            reaper = Reaper(self, self._rng("network", 10**9), self._rng("network", 10**9, 1))
            reaper.outages = list(self.redis_down)
            first = self.timer_phases.get(("sweep", REAPER), 0)
            if scenario.phases != "aligned" and ("sweep", REAPER) not in self.timer_phases:
                first = int(self._rng("phases", 0).integers(0, self.policy.sweep_interval_ms))
            reaper.start_sweeper(first)
        for fault in scenario.faults:
            if fault.worker is not None and not isinstance(fault, Outage):
                self.env.process(self._worker_fault(fault))
        for at_ms, lag_ms in self.failovers:
            self.env.process(self._failover(at_ms, lag_ms))
        self.env.process(self._arrivals(works_ms))
        if self.memory is not None and self.memory.cache_rate > 0:
            self.env.process(self._cache_writes(self.memory))
        self.env.process(self.server.expire_cycle())
        horizon = self.env.timeout(to_ms(scenario.horizon))
        self.env.run(until=self.env.any_of([self.done, horizon]))
        return self._finish_run(ended_by="done" if self.done.triggered else "horizon")

    def _finish_run(self, ended_by: str) -> Run:
        end_ms = int(self.env.now)
        server = self.server
        ledger = self.ledger
        for worker in self.workers.values():
            for token, attempt in worker.running.items():
                ran = worker.ran_ms(token)
                if ran is not None:
                    ledger.ran(attempt, ran)
        if self.job_sink is None:
            attempts = ledger.attempts()
        else:
            attempts = []
            for job_id, final in ledger.open_jobs():
                self.job_sink(final, self._arrival_of[job_id], end_ms / 1000)
        if server.rate_limit_watcher is not None:
            server.rate_limit_watcher.flush()  # the refused stalled checks it has not counted yet
        redis_commands = server.store.commands_executed
        keys = server.keys
        x = server.store.execute
        final_state = {
            "wait": x("LLEN", keys.wait),
            "active": x("LLEN", keys.active),
            "completed": x("SCARD", keys.completed),
            "failed": x("SCARD", keys.failed),
        }
        lock_events = with_expiries(ledger.lock_events, end_ms / 1000) if ledger.record_locks else []
        return Run(
            scenario=self.scenario.name,
            policy=self.policy.table_settings(),
            seed=self.seed,
            replication=self.replication,
            end=end_ms / 1000,
            ended_by=ended_by,
            jobs=self.scenario.jobs,
            arrivals=self.arrival_times,
            attempts=attempts,
            worker_events=self.worker_events,
            lock_events=lock_events,
            sweeps=ledger.sweeps,
            requests=dict(sorted(server.requests.items())),
            redis_commands=redis_commands,
            resident_keys_peak=server.resident_peak,
            final_state=final_state,
        )


def _restart_ms(restart_after: float | None) -> int | None:
    return None if restart_after is None else to_ms(restart_after)


def simulate(
    scenario: Scenario, policy: ReclaimPolicy, seed: int = 0, replication: int = 0, **options: Any
) -> Run:
    """Run one scenario under one policy. Same arguments -> bit-identical `Run` (see `Run.digest`)."""
    return Simulation(scenario, policy, seed, replication, **options).run()
