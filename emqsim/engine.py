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
from typing import Any

import numpy as np
import simpy

from emqsim.faults import Crash, Freeze, as_distribution
from emqsim.keys import QueueKeys
from emqsim.policies import ReclaimPolicy
from emqsim.records import (
    COMPLETED,
    DUPLICATE_COMPLETION,
    FAILED,
    FINISH_REJECTED,
    HELD,
    RECLAIMED,
    RUNNING,
    Attempt,
    Run,
    WorkerEvent,
    with_expiries,
)
from emqsim.scenario import Scenario
from emqsim.seeds import stream
from emqsim.server import Server
from emqsim.units import to_ms
from emqsim.worker import DEAD, Reaper, Worker

HOUR_MS = 3_600_000


class Simulation:
    """One run. Build it, call `run()` once."""

    def __init__(
        self,
        scenario: Scenario,
        policy: ReclaimPolicy,
        seed: int = 0,
        replication: int = 0,
        *,
        record_locks: bool = True,
    ) -> None:
        if not isinstance(policy, ReclaimPolicy):
            raise TypeError(
                f"policy must be a ReclaimPolicy (LeasePolicy, TimeoutPolicy, ...), got {policy!r}"
            )
        self.scenario = scenario
        self.policy = copy.deepcopy(policy)  # per-run state of a custom policy never leaks between runs
        self.seed = seed
        self.replication = replication
        self.env = simpy.Environment()
        self.server = Server(
            self.env,
            self.policy,
            QueueKeys(scenario.queue),
            self._rng("store"),
            record_locks=record_locks,
            remove_on_complete=scenario.remove_on_complete,
        )
        self.server.worker_state = self.worker_state
        self._expire_planned: int | None = None
        self._expire_wakeup = self.env.event()
        self.server.store.on_ttl = self._ttl_set
        self.server.on_settle = self._check_done
        self.workers: dict[int, Worker] = {}
        self.worker_events: list[WorkerEvent] = []
        self.executing = 0
        self.arrived = 0
        self.arrival_times: list[float] = []
        self.done = self.env.event()
        self.next_worker_id = scenario.workers
        self.job_faults: dict[int, list[Crash | Freeze]] = {}
        for fault in scenario.faults:
            if fault.job is not None:
                self.job_faults.setdefault(fault.job, []).append(fault)

    def _rng(self, name: str, *index: int) -> np.random.Generator:
        return stream(self.seed, self.replication, name, *index)

    # -- bookkeeping the workers call ----------------------------------------------------------------------
    def worker_state(self, wid: int) -> str:
        return self.workers[wid].state

    def attempts_started(self, n: int) -> None:
        self.executing += n

    def attempts_stopped(self, n: int) -> None:
        self.executing -= n
        self._check_done()

    def _check_done(self) -> None:
        if (
            not self.done.triggered
            and self.arrived == self.scenario.jobs
            and self.server.settled == self.scenario.jobs
            and self.executing == 0
        ):
            self.done.succeed()

    def worker_crashed(self, worker: Worker) -> None:
        if worker.restart_after_ms is not None:
            self.env.process(self._restart(worker.restart_after_ms))

    def job_started(self, worker: Worker, attempt: Attempt) -> None:
        if attempt.attempt != 1:
            return
        for i, fault in enumerate(self.job_faults.get(int(attempt.job), ())):
            rng = self._rng("job_faults", int(attempt.job), i)
            after = to_ms(float(as_distribution(fault.after, "after").sample(rng, 1)[0]))
            self.env.process(self._fault_later(worker, fault, after, rng))

    # -- processes ---------------------------------------------------------------------------------------
    def _fault_later(self, worker: Worker, fault: Crash | Freeze, delay_ms: int, rng: np.random.Generator):
        yield self.env.timeout(delay_ms)
        if isinstance(fault, Crash):
            if fault.restart_after is not None:
                worker.restart_after_ms = to_ms(fault.restart_after)
            worker.crash()
        else:
            duration = to_ms(float(as_distribution(fault.duration, "duration").sample(rng, 1)[0]))
            yield from worker.freeze(duration)

    def _restart(self, delay_ms: int):
        yield self.env.timeout(delay_ms)
        wid = self.next_worker_id
        self.next_worker_id += 1
        self._start_worker(wid, restarted=True)

    def _random_crashes(self, worker: Worker, rng: np.random.Generator):
        faults = self.scenario.random_faults
        yield self.env.timeout(max(1, to_ms(rng.exponential(HOUR_MS / 1000 / faults.crash_rate))))
        if worker.state == DEAD:
            return
        if faults.restart_after is not None:
            worker.restart_after_ms = to_ms(faults.restart_after)
        worker.crash()

    def _random_freezes(self, worker: Worker, rng: np.random.Generator):
        faults = self.scenario.random_faults
        mean_gap_s = HOUR_MS / 1000 / faults.freeze_rate
        while True:
            yield self.env.timeout(max(1, to_ms(rng.exponential(mean_gap_s))))
            if worker.state == DEAD:
                return
            duration = max(1, to_ms(float(faults.freeze_duration.sample(rng, 1)[0])))
            yield from worker.freeze(duration)

    def _arrivals(self, works_ms: np.ndarray):
        rate = self.scenario.arrival_rate
        gaps = (
            np.zeros(len(works_ms), dtype=np.int64)
            if rate is None
            else np.array([to_ms(g) for g in self._rng("arrivals").exponential(1 / rate, len(works_ms))])
        )
        for index, (gap, work) in enumerate(zip(gaps, works_ms, strict=True)):
            if gap:
                yield self.env.timeout(int(gap))
            self.arrived += 1
            self.arrival_times.append(self.env.now / 1000)
            self.server.add_job(str(index), int(work) / 1000)

    def _expire_cycle(self):
        """Redis's active expire cycle, `hz` times a second on the tick grid. Ticks that provably find no
        logically expired key (none has `now > expire_at`) are skipped: they would evict nothing."""
        period = max(1, 1000 // self.scenario.hz)
        store = self.server.store
        env = self.env
        while True:
            now = int(env.now)
            next_tick = (now // period + 1) * period
            earliest = store.next_expiry()
            if earliest is None:
                self._expire_planned = None
            else:
                first_useful = (earliest // period + 1) * period  # the first tick with now > earliest
                next_tick = max(next_tick, first_useful)
                self._expire_planned = next_tick
            self._expire_wakeup = env.event()
            if earliest is None:
                yield self._expire_wakeup
                continue
            timer = env.timeout(next_tick - now)
            yield timer | self._expire_wakeup
            if timer.processed:
                self.server.active_expire()

    def _ttl_set(self, when: int) -> None:
        """A key got an expiry: wake the expire cycle if that key expires before its planned tick."""
        planned = self._expire_planned
        if (planned is None or when < planned) and not self._expire_wakeup.triggered:
            self._expire_wakeup.succeed()

    def _start_worker(self, wid: int, restarted: bool = False) -> Worker:
        worker = Worker(self, wid, self._rng("network", wid), self._rng("network", wid, 1))
        self.workers[wid] = worker
        worker._event("restart" if restarted else "start")
        phases = self._rng("phases", wid + 1)
        policy = self.policy
        aligned = self.scenario.phases == "aligned"
        # Timers start when the worker starts: a restarted worker's now; the first workers started at
        # arbitrary moments before the run, so their phases are drawn (unless the scenario aligns them).
        if policy.renewal is not None and not policy.renewal.per_job:
            tick = policy.renewal.tick_ms
            first = tick if aligned or restarted else int(phases.integers(1, tick + 1))
            self.env.process(worker.lock_manager(first))
        if policy.swept_by == "workers":
            # BullMQ's stalled checker runs once as soon as the worker starts
            first = 0 if aligned or restarted else int(phases.integers(0, policy.sweep_interval_ms))
            self.env.process(worker.sweeper(first))
        for _ in range(self.scenario.concurrency):
            self.env.process(worker.slot())
        faults = self.scenario.random_faults
        if faults is not None:
            fault_rng = self._rng("faults", wid)
            if faults.crash_rate > 0:
                self.env.process(self._random_crashes(worker, fault_rng))
            if faults.freeze_rate > 0:
                self.env.process(self._random_freezes(worker, self._rng("faults", wid, 1)))
        return worker

    def _worker_fault(self, fault: Crash | Freeze):
        yield self.env.timeout(to_ms(fault.at))
        worker = self.workers[fault.worker]
        if isinstance(fault, Crash):
            if fault.restart_after is not None:
                worker.restart_after_ms = to_ms(fault.restart_after)
            worker.crash()
        else:
            rng = self._rng("faults", fault.worker, 2)
            yield from worker.freeze(
                to_ms(float(as_distribution(fault.duration, "duration").sample(rng, 1)[0]))
            )

    # -- the run -----------------------------------------------------------------------------------------
    def run(self) -> Run:
        scenario = self.scenario
        works = scenario.duration.sample(self._rng("durations"), scenario.jobs)
        works_ms = np.array([to_ms(float(w)) for w in works], dtype=np.int64)
        for wid in range(scenario.workers):
            self._start_worker(wid)
        if self.policy.swept_by == "reaper":
            reaper = Reaper(self, self._rng("network", 10**9), self._rng("network", 10**9, 1))
            phases = self._rng("phases", 0)
            first = (
                0 if scenario.phases == "aligned" else int(phases.integers(0, self.policy.sweep_interval_ms))
            )
            self.env.process(reaper.sweeper(first))
        for fault in scenario.faults:
            if fault.worker is not None:
                self.env.process(self._worker_fault(fault))
        self.env.process(self._arrivals(works_ms))
        self.env.process(self._expire_cycle())
        horizon = self.env.timeout(to_ms(scenario.horizon))
        self.env.run(until=self.env.any_of([self.done, horizon]))
        return self._finish_run(ended_by="done" if self.done.triggered else "horizon")

    def _finish_run(self, ended_by: str) -> Run:
        end_ms = int(self.env.now)
        server = self.server
        for worker in self.workers.values():
            for attempt in worker.running.values():
                if attempt.started_at is not None:
                    attempt.work_done = min(attempt.work, _ran_for(worker, attempt, end_ms))
        for attempt in server.attempts:
            if attempt.finished_at is not None:
                attempt.work_done = attempt.work
            attempt.outcome = _outcome(attempt)
        _mark_duplicates(server.attempts)
        redis_commands = server.store.commands_executed
        keys = server.keys
        x = server.store.execute
        final_state = {
            "wait": x("LLEN", keys.wait),
            "active": x("LLEN", keys.active),
            "completed": x("SCARD", keys.completed),
            "failed": x("SCARD", keys.failed),
        }
        lock_events = with_expiries(server.lock_events, end_ms / 1000) if server.record_locks else []
        return Run(
            scenario=self.scenario.name,
            policy=self.policy.settings(),
            seed=self.seed,
            replication=self.replication,
            end=end_ms / 1000,
            ended_by=ended_by,
            jobs=self.scenario.jobs,
            arrivals=self.arrival_times,
            attempts=server.attempts,
            worker_events=self.worker_events,
            lock_events=lock_events,
            sweeps=server.sweeps,
            requests=dict(sorted(server.requests.items())),
            redis_commands=redis_commands,
            resident_keys_peak=server.resident_peak,
            final_state=final_state,
        )


def _ran_for(worker: Worker, attempt: Attempt, until_ms: int) -> float:
    """Seconds of work the worker did on an unfinished attempt (wall time since start less frozen time)."""
    start = worker.started_ms.get(attempt.token)
    if start is None:
        return 0.0
    start_ms, frozen_at_start = start
    frozen = worker.frozen_total() - frozen_at_start
    return max(0, until_ms - start_ms - frozen) / 1000


def _outcome(a: Attempt) -> str:
    if a.finish_result == "accepted":
        return COMPLETED  # a later accepted completion of the same job becomes a duplicate below
    if a.finish_result is not None:
        return FINISH_REJECTED
    if a.failed_at is not None:
        return FAILED
    if a.reclaimed_at is not None:
        return RECLAIMED
    return HELD if a.died_at is not None else RUNNING


def _mark_duplicates(attempts: list[Attempt]) -> None:
    """A second accepted completion of the same job is a duplicate, whichever attempt it came from."""
    completed: set[str] = set()
    for a in sorted(
        (a for a in attempts if a.finish_result == "accepted"),
        key=lambda a: (a.finish_applied_at, a.job, a.attempt),
    ):
        if a.job in completed:
            a.outcome = DUPLICATE_COMPLETION
        completed.add(a.job)


def simulate(
    scenario: Scenario, policy: ReclaimPolicy, seed: int = 0, replication: int = 0, **options: Any
) -> Run:
    """Run one scenario under one policy. Same arguments -> bit-identical `Run` (see `Run.digest`)."""
    return Simulation(scenario, policy, seed, replication, **options).run()
