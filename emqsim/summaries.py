"""simulate_summary: a run folded into its summary job by job, keeping no records (what sweeps run)."""

from __future__ import annotations

from emqsim.engine import Simulation
from emqsim.policies import ReclaimPolicy
from emqsim.scenario import Scenario
from emqsim.stats import RunSummary, SummaryBuilder


def simulate_summary(
    scenario: Scenario, policy: ReclaimPolicy, seed: int = 0, replication: int = 0
) -> RunSummary:
    """`summarize(simulate(...))` without keeping the records: each job is folded into the summary as soon as
    it is final, so memory follows the jobs in flight (with `Scenario.remove_on_complete`, Redis's too).
    The same summary as `summarize(simulate(scenario, policy, seed, replication))`, bit for bit."""
    builder = SummaryBuilder(scenario.jobs)
    simulation = Simulation(scenario, policy, seed, replication, job_sink=builder.add_job)
    run = simulation.run()
    return builder.result(run, arrived=simulation.arrived)
