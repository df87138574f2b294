"""Tune lease, beat and sweep interval from a team's own measurements (`python -m emqsim tune`).

Input: a `Workload` (job durations, pauses, crashes, network, fleet) and `Limits` (false reclaims per job or
per hour, detection latency mean or p99, a Redis request budget). Output: the settings with the fastest
detection that meet every limit at the requested confidence, with intervals, the Pareto frontier, the best
fixed timeout for comparison, why the runner-up lost and what would change the answer (docs/tune.md).

How the search works:
  1. candidates: lease x beat (lease/ratio) x sweep interval (or BullMQ's rules with `preset="bullmq"`), and
     fixed timeouts for comparison;
  2. closed forms (emqsim.analytic) prune what cannot meet a limit: a detection-latency lower bound over the
     limit, or a predicted false-reclaim rate from pauses (freeze_lapse_probability) far over the limit;
     they also give each candidate's predicted metrics;
  3. racing on the simulator: every candidate left runs `min_replications`; then the leader (fastest decided
     feasible) and its contenders get more replications, all on the same seeds (common random numbers:
     a run's seeds derive from (seed, replication) only), until every contender is either decided
     infeasible or decided not better than the leader by more than the indifference margin, or reaches
     `max_replications`;
  4. verification on fresh seeds: the race's best runs again on a root seed the search never used,
     sequentially (`verify_on_fresh_seeds`), and gives way to the next decided-feasible setting if it is not
     confirmed. The work is bounded: at most candidates x max_replications + 3 x verify_max runs, stated up
     front.

Intervals (the replication is the unit; `rate_interval`, `ratio_interval` and `paired_interval` are
emqsim.stats' functions, docs/statistics.md; `bootstrap_interval` is tune's own):
  rates      false reclaims: quasi-Poisson Garwood interval, dispersion measured from the per-run counts;
             no event in any run: the Poisson bound on the exposure times the largest cluster one fault
             can cause (a worker's concurrency: a pause or a lost renewal lapses all of one worker's locks)
  means      detection latency and Redis requests/s: ratio estimator with a cluster-robust t interval
  p99        percentile bootstrap over replications (seeded, so deterministic)
  paired     candidate minus leader on the same seeds: t over per-replication differences (mean) or a
             paired bootstrap (p99)
A limit is met when the upper end of a two-sided interval at level 1 - 2(1 - confidence)/k (k limits,
Bonferroni) is within it: the k one-sided bounds then hold together at `confidence`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor

from emqsim.errors import ConfigError, require_instance
from emqsim.policies import ReclaimPolicy
from emqsim.tune.candidates import (
    Candidate,
    Metric,
    _alive_fraction,
    _busy_workers,
    _outage_sample,
    _p99_lower_bound,
    _pause_sample,
    _typical_rtt,
    build_candidates,
    longest_safe_outage,
    predict,
    prune,
)
from emqsim.tune.explain import binding_causes, what_would_change
from emqsim.tune.inputs import (
    DEFAULT_BEAT_RATIOS,
    DEFAULT_LEASES,
    DEFAULT_SCANS,
    DEFAULT_TIMEOUTS,
    PRUNE_FACTOR,
    TIMEOUT_SCAN,
    VERIFY_CANDIDATES,
    VERIFY_SEED_OFFSET,
    Limits,
    SearchSpace,
    Workload,
    _random_faults,
    distribution_spec,
    read_durations,
)
from emqsim.tune.measure import (
    Group,
    _fmt,
    _p99,
    bootstrap_interval,
    bootstrap_p99,
    bootstrap_p99_difference,
    check_limits,
    measure,
    objective,
    paired_interval,
    rate_interval,
    ratio_interval,
)
from emqsim.tune.race import (
    WAVE,
    _paired_objective,
    _race,
    _Runner,
    _why_lost,
    check_certifiable,
    detection_floor,
    max_runs,
    verification_sizes,
    verify_on_fresh_seeds,
    zero_event_bound,
)
from emqsim.tune.report import (
    _bullet,
    _fmt_upper,
    _prose,
    _row,
    _table,
    bullmq_settings,
    lock_renew_note,
    report,
    scenario_toml,
    to_json_dict,
)
from emqsim.tune.results import Race, TuneResult


def tune(
    workload: Workload,
    limits: Limits,
    space: SearchSpace = SearchSpace(),  # noqa: B008 - a frozen dataclass
    *,
    seed: int = 0,
    jobs: int = 1,
    verify: int = 10,
    verify_max: int | None = None,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
    executor: Executor | None = None,
    detector: ReclaimPolicy | None = None,
) -> TuneResult:
    """Search lease, beat and sweep interval (and the best fixed timeout, for comparison); see the module doc.

    At the end the race's best runs again on fresh seeds (seed + 1000003): `verify` replications, doubled while
    undecided up to `verify_max` (default 8 x verify); if it is not confirmed, the next decided-feasible
    settings are tried (`verify_on_fresh_seeds`). `verify=0` skips this. Same inputs and seed give the same
    result with any `jobs`."""
    say = say or (lambda _msg: None)
    if detector is not None:
        require_instance("detector", detector, ReclaimPolicy, "a Detector (or another ReclaimPolicy)")
    if verify_max is None:
        verify_max = 8 * verify
    if verify and verify_max < verify:
        raise ConfigError(f"verify_max ({verify_max}) must be at least verify ({verify})")
    # a limit the budget could not certify even with no false reclaim at all: refused before any work
    check_certifiable(workload, limits, space.max_replications, limits.level, "max_replications")
    if verify:
        looks = len(verification_sizes(verify, verify_max)) * VERIFY_CANDIDATES
        check_certifiable(workload, limits, verify_max, 1 - (1 - limits.level) / looks, "verify_max")
    scenario = workload.scenario()
    candidates = build_candidates(space)
    pauses, outages = _pause_sample(workload), _outage_sample(workload)  # drawn once for every candidate
    for c in candidates:
        predict(c, workload, limits, pauses, outages)
        prune(c, limits)
    bound = max_runs(candidates, space, verify_max if verify else 0)
    mine = Candidate.of_detector(detector) if detector is not None else None
    bound += space.max_replications if mine is not None else 0
    say(
        f"tune: {len(candidates)} candidates, {sum(c.status == 'pruned' for c in candidates)} ruled out by the "
        f"closed forms; at most {bound} runs ({space.min_replications} to {space.max_replications} replications "
        f"each{f', plus {verify} to {verify_max} on fresh seeds for up to {VERIFY_CANDIDATES} settings' if verify else ''})"
    )
    indexed = list(enumerate(candidates))
    with _Runner(scenario, seed, jobs, progress, executor) as runner:
        lease_race = _race(
            [p for p in indexed if p[1].kind == "lease"],
            runner,
            limits,
            workload,
            space,
            seed,
            "lease",
            say,
            WAVE,
        )
        timeout_race = _race(
            [p for p in indexed if p[1].kind == "timeout"],
            runner,
            limits,
            workload,
            space,
            seed,
            "timeout",
            say,
            WAVE,  # read here, so a caller may set emqsim.tune.WAVE
        )
        if mine is not None:  # its own family of one, keyed past the candidates, on the same seeds
            _race([(len(candidates), mine)], runner, limits, workload, space, seed, "detector", say, WAVE)
        verifications: list[Candidate] = []
        level = None
        if verify and lease_race.best is not None:
            others = sorted(
                (
                    c
                    for c in candidates
                    if c.kind == "lease"
                    and c is not lease_race.best
                    and c.metrics
                    and check_limits(c, limits)[0] == "meets"  # decided feasible (some were then beaten)
                ),
                key=lambda c: (objective(c, limits), candidates.index(c)),
            )
            order = [lease_race.best, *others][:VERIFY_CANDIDATES]
            verifications, level = verify_on_fresh_seeds(
                order, runner, limits, workload, seed, verification_sizes(verify, verify_max), say
            )
        runs = runner.count
    result = TuneResult(
        workload,
        limits,
        space,
        seed,
        candidates,
        lease_race,
        timeout_race,
        runs,
        bound,
        verifications,
        [],
        level,
        mine,
    )
    result.what_would_change = what_would_change(result)
    return result


__all__ = [
    "Candidate",
    "DEFAULT_BEAT_RATIOS",
    "DEFAULT_LEASES",
    "DEFAULT_SCANS",
    "DEFAULT_TIMEOUTS",
    "Group",
    "Limits",
    "Metric",
    "PRUNE_FACTOR",
    "Race",
    "SearchSpace",
    "TIMEOUT_SCAN",
    "TuneResult",
    "VERIFY_CANDIDATES",
    "VERIFY_SEED_OFFSET",
    "WAVE",
    "Workload",
    "_Runner",
    "_alive_fraction",
    "_bullet",
    "_busy_workers",
    "_fmt",
    "_fmt_upper",
    "_outage_sample",
    "_p99",
    "_p99_lower_bound",
    "_paired_objective",
    "_pause_sample",
    "_prose",
    "_race",
    "_random_faults",
    "_row",
    "_table",
    "_typical_rtt",
    "_why_lost",
    "binding_causes",
    "bootstrap_interval",
    "bootstrap_p99",
    "bootstrap_p99_difference",
    "build_candidates",
    "bullmq_settings",
    "check_certifiable",
    "check_limits",
    "detection_floor",
    "distribution_spec",
    "lock_renew_note",
    "longest_safe_outage",
    "max_runs",
    "measure",
    "objective",
    "paired_interval",
    "predict",
    "prune",
    "rate_interval",
    "ratio_interval",
    "read_durations",
    "report",
    "scenario_toml",
    "to_json_dict",
    "tune",
    "verification_sizes",
    "verify_on_fresh_seeds",
    "what_would_change",
    "zero_event_bound",
]
