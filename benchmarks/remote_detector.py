"""A student's detector simulated across the grading wire, against the same detector in one process.

    python benchmarks/remote_detector.py                 # 15 replications of `slow-alive`
    python benchmarks/remote_detector.py --replications 5

The agent answers in a forked process, as it does in a student's kernel, and the simulation runs here with the
grader's stand-in for the student's class (`emqsim.grading.trusted.RemotePolicy`), as `emqsim grade` runs
assignment 03's checks. Prints the wall time, each side's CPU, the requests the grader sent and the time per
request, then the same runs in one process; the runs must agree record for record.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from emqsim import Detector, simulate, standard  # noqa: E402
from emqsim.grading.agent import Agent  # noqa: E402
from emqsim.grading.trusted import Channel  # noqa: E402
from emqsim.grading.wire import receive, send  # noqa: E402


class GapDetector(Detector):
    """A detector of the shape assignment 03 asks for: it suspects a silence much longer than the recent gaps."""

    def __init__(self, beat: float = 10.0, scan: float = 5.0) -> None:
        super().__init__(beat=beat, scan=scan)
        self.last: dict[str, float] = {}
        self.gaps: dict[str, list[float]] = {}

    def taken(self, job: str, now: float) -> None:
        self.last[job] = now

    def heartbeat(self, job: str, now: float) -> None:
        self.gaps.setdefault(job, []).append(now - self.last.get(job, now))
        self.last[job] = now

    def suspect(self, job: str, now: float) -> bool:
        return now - self.last.get(job, now) > 2.5 * max([*self.gaps.get(job, [])[-5:], 10.0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replications", type=int, default=15, help="runs of slow-alive (default 15)")
    args = parser.parse_args()
    if args.replications < 1:
        parser.error("--replications must be at least 1")
    world = standard("slow-alive", duration=900.0, workers=2)
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the kernel's part
        ours.close()
        started = time.process_time()
        Agent(theirs, {"GapDetector": GapDetector}).loop()
        send(theirs, {"cpu": time.process_time() - started})
        os._exit(0)
    theirs.close()
    channel = Channel(ours)
    remote_class = channel.lookup("GapDetector")
    wall, cpu = time.perf_counter(), time.process_time()
    remote = [simulate(world, remote_class(), seed=0, replication=r) for r in range(args.replications)]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    calls = channel.calls
    send(ours, {"op": "bye", "id": 0})  # as Channel.close says it, keeping the socket for the agent's CPU
    agent_cpu = receive(ours)["cpu"]
    ours.close()
    os.waitpid(pid, 0)
    local_wall = time.perf_counter()
    local = [simulate(world, GapDetector(), seed=0, replication=r) for r in range(args.replications)]
    local_wall = time.perf_counter() - local_wall
    same = all(
        (a.attempts, a.lock_events, a.sweeps) == (b.attempts, b.lock_events, b.sweeps)
        for a, b in zip(remote, local, strict=True)
    )
    print(
        f"across the wire: {args.replications} runs in {wall:.2f} s wall, grader CPU {cpu:.2f} s, agent CPU "
        f"{agent_cpu:.2f} s, {calls} requests ({1e6 * wall / calls:.0f} us each)"
    )
    print(f"in one process:  {local_wall:.3f} s wall; the runs agree record for record: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
