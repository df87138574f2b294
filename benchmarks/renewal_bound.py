"""The most that computing renewals ahead (issue 27's second item) could save on the standard workload.

    python benchmarks/renewal_bound.py --repeat 3     # base, bound and plan, alternating, CPU seconds

Neither `bound` nor `plan` is a model. `bound`: each lock-manager tick that has locks to renew runs the
renewal at Redis at once, with no queue entry for the request reaching Redis and none for the reply (its round
trip is still drawn, its request and commands still counted, and it never meets a freeze, an outage or a
loss): what a computed renewal would cost if knowing when it may be computed and catching it up before
whatever reads the lock cost nothing, so it bounds the gain from above. `plan`: the least of that catching
up, renewals held in a heap by the time they reach Redis and applied there, at their own time, before the next
request that runs at Redis and before each active expire cycle. Results differ from the model's (a renewal's
reply is not read at its own time). Each run is a fresh interpreter (`--child`), as in bench.py; results and
the instruction counts measured with it are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _inline_renewals() -> None:
    """Replace the lock manager's send-and-read of a renewal by the renewal run at once (see the docstring)."""
    from emqsim import worker

    def fire(self: Any) -> None:
        client, server = self.worker, self.server
        now = self.fired_at = int(client.env._now)
        tracked = client.tracked
        due = [(h.job, token) for token, h in tracked.items() if self.rule.due(now, h.ts)]
        if due:
            for _, token in due:
                tracked[token].ts = now
            client._rtt_ms()
            server.requests["renew"] = server.requests.get("renew", 0) + 1
            for token in server.renew(due, now):
                tracked.pop(token, None)
        self._next()

    worker._LockManager._fire = fire  # type: ignore[method-assign]


def _planned_renewals() -> None:
    """`bound`, plus the bookkeeping a computed renewal needs at the least: each one waits in a heap by the
    time it reaches Redis and is applied there (at that time, by its own clock reading) before the next
    request that runs at Redis or the next active expire cycle; a failed lock is dropped then."""
    from heapq import heappop, heappush
    from itertools import count

    from emqsim import server as server_module
    from emqsim import worker

    pending: list[tuple[int, int, Any, list[tuple[str, str]]]] = []
    order = count()
    cls = server_module.Server
    renew, send, send_split, take, active_expire = (
        cls.renew, cls.send, cls.send_split, cls._take, cls.active_expire,
    )  # fmt: skip

    def catch_up(server: Any) -> None:
        env = server.env
        now = env._now
        while pending and pending[0][0] <= now:
            at, _, manager, due = heappop(pending)
            env._now = at  # the store reads the clock from here: the renewal runs at its own time
            failed = renew(server, due, at)
            env._now = now
            for token in failed:
                manager.worker.tracked.pop(token, None)

    def fire(self: Any) -> None:
        client, server = self.worker, self.server
        now = self.fired_at = int(client.env._now)
        tracked = client.tracked
        due = [(h.job, token) for token, h in tracked.items() if self.rule.due(now, h.ts)]
        if due:
            for _, token in due:
                tracked[token].ts = now
            server.requests["renew"] = server.requests.get("renew", 0) + 1
            heappush(pending, (now + client._rtt_ms() // 2, next(order), self, due))
        self._next()

    def caught_up(op: Any, server: Any) -> Any:
        def run(now: int) -> Any:
            catch_up(server)
            return op(now)

        return run

    cls.send = lambda self, kind, op, rtt_ms, lost: send(self, kind, caught_up(op, self), rtt_ms, lost)
    cls.send_split = lambda self, kind, op, out_ms, back_ms: send_split(
        self, kind, caught_up(op, self), out_ms, back_ms
    )
    cls._take = lambda self, *args: (catch_up(self), take(self, *args))[1]
    cls.active_expire = lambda self: (catch_up(self), active_expire(self))[1]
    worker._LockManager._fire = fire  # type: ignore[method-assign]


def child(mode: str, jobs: int) -> dict[str, Any]:
    """One standard-workload run, streaming, as bench.py's `model (streaming)`."""
    from bench import standard_workload

    from emqsim import LeasePolicy
    from emqsim.engine import Simulation
    from emqsim.stats import SummaryBuilder

    if mode == "bound":
        _inline_renewals()
    elif mode == "plan":
        _planned_renewals()
    builder = SummaryBuilder(jobs)
    scenario = standard_workload(jobs).with_(remove_on_complete=True)
    sim = Simulation(scenario, LeasePolicy(30, 10, 5), 0, 0, job_sink=builder.add_job)
    cpu0 = time.process_time()
    run = sim.run()
    cpu = time.process_time() - cpu0
    return {
        "mode": mode,
        "cpu_s": cpu,
        "events": next(sim.env._eid),
        "end_s": run.end,
        "renew": run.requests["renew"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the standard workload (10,000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each mode, alternating (3)")
    parser.add_argument("--child", choices=("base", "bound", "plan"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        print(
            f"error: --jobs and --repeat must be at least 1, got {args.jobs} and {args.repeat}",
            file=sys.stderr,
        )
        return 2
    if args.child:
        print(json.dumps(child(args.child, args.jobs)))
        return 0
    cpu: dict[str, list[float]] = {"base": [], "bound": [], "plan": []}
    for _ in range(args.repeat):
        for mode in cpu:
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--jobs", str(args.jobs)],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(out.stdout)
            cpu[mode].append(result["cpu_s"])
            print(
                f"{mode:5}  cpu {result['cpu_s']:.2f} s  events {result['events']:,}  "
                f"simulated {result['end_s']:,.0f} s  renew requests {result['renew']:,}"
            )
    base = min(cpu["base"])
    for mode in ("bound", "plan"):
        best = min(cpu[mode])
        print(f"CPU min: base {base:.2f} s, {mode} {best:.2f} s ({(best - base) / base:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
