"""`Network(skipped_ticks=p)`: BullMQ's lock manager skips the odd tick (issue 25, item 6).

A tick with jobs due renews nothing with probability p (drawn from each worker's own "ticks" stream, only when
p > 0): the jobs keep their `ts`, the next tick renews them, and the skip is a `renew_skipped` lock event.
Checked here: the option's validation (API, TOML, flags), that p = 0 draws nothing, the skip's timing under
BullMQ's after-reply timer and a fixed-rate one, the measured rate, live mode skipping the simulator's ticks,
the closed forms (`analytic_stalls.skipped_tick_freeze_lapse_probability`, `analytic.lost_renewal_lapse_probability`
with `skipped`) against the simulator (the replication as the unit), and explore's `skip` fault.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import binom

from emqsim import simulate, standard
from emqsim.analytic import freeze_lapse_probability
from emqsim.analytic_stalls import skipped_tick_freeze_lapse_probability
from emqsim.distributions import Fixed, Uniform
from emqsim.errors import ConfigError
from emqsim.faults import Freeze, Network
from emqsim.policies import LeasePolicy, RenewalRule
from emqsim.presets import preset
from emqsim.scenario import Scenario
from emqsim.seeds import STREAMS


# -- the option ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-0.01, 1.0, 1.5, float("nan"), float("inf")])
def test_a_skip_rate_outside_0_1_is_refused_in_one_line(bad: float) -> None:
    with pytest.raises(ConfigError, match="skipped_ticks must be a probability in") as info:
        Network(skipped_ticks=bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", ["0.01", True, None])
def test_a_skip_rate_that_is_not_a_number_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="Network.skipped_ticks must be a number"):
        Network(skipped_ticks=bad)  # type: ignore[arg-type]


def test_the_ticks_stream_has_a_code_of_its_own() -> None:
    assert len(set(STREAMS.values())) == len(STREAMS) and STREAMS["ticks"] == 9


def test_skipped_ticks_is_read_from_toml_and_the_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emqsim.cli.building import with_fault_flags
    from emqsim.cli.parser import build_parser
    from emqsim.config import load_config

    path = tmp_path / "s.toml"
    path.write_text("[scenario]\n[scenario.network]\nskipped_ticks = 0.01\n")
    assert load_config(path)[0].network.skipped_ticks == 0.01
    path.write_text("[scenario]\n[scenario.network]\nskipped_ticks = 1.0\n")
    with pytest.raises(ConfigError, match="skipped_ticks") as info:
        load_config(path)
    assert "\n" not in str(info.value)
    args = build_parser().parse_args(["run", "--skipped-ticks", "0.02", "--resend-twice"])
    assert with_fault_flags(Scenario(), args).network == Network(skipped_ticks=0.02, resend_twice=True)


def test_the_loss_and_rtt_flags_keep_the_scenarios_skip_rate() -> None:
    from emqsim.cli.building import run_scenario
    from emqsim.cli.parser import build_parser

    scenario = run_scenario(
        build_parser().parse_args(["run", "--scenario", "skipped-ticks", "--loss", "0.1"])
    )
    assert scenario.network.skipped_ticks == 0.01 and scenario.network.loss == 0.1


@pytest.mark.parametrize("value", ["1", "-0.1", "nan", "x"])
def test_the_cli_refuses_a_bad_rate_in_one_line(value: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from emqsim.cli import main

    config = tmp_path / "s.toml"
    config.write_text(f"[scenario]\n[scenario.network]\nskipped_ticks = {value if value != 'x' else 2}\n")
    for argv in (["run", "--skipped-ticks", value], ["run", "--config", str(config)]):
        with pytest.raises(SystemExit) as exc:
            sys.exit(main(argv))
        out, err = capsys.readouterr()
        assert exc.value.code == 2 and "Traceback" not in err and out == ""
        assert len(err.strip().splitlines()) == 1 and "skipped" in err, err


def _due_tick_outcomes(run, token: str) -> list[bool]:  # type: ignore[no-untyped-def]
    """A take's due renewal ticks in order: True for a skipped one."""
    kinds = ("renewed", "renew_failed", "renew_lost", "renew_skipped")
    events = sorted(
        (e for e in run.lock_events if e.token == token and e.kind in kinds), key=lambda e: e.time
    )
    return [e.kind == "renew_skipped" for e in events]


@pytest.mark.redis
@pytest.mark.slow
def test_live_workers_skip_the_simulators_ticks(need_redis, steady_live) -> None:  # type: ignore[no-untyped-def]
    """Live mode skips the same due ticks as the simulator (the worker is handed the "ticks" stream's draws):
    a 60 s job of one worker under the bullmq preset at time_scale 0.02 (a 150 ms tick), skips at 0.3."""
    sc = Scenario(workers=1, jobs=1, duration=Fixed(60.0), network=Network(skipped_ticks=0.3))
    policy = preset("bullmq")
    live = steady_live(sc, policy, time_scale=0.02)
    sim = simulate(sc, policy, 0, 0)
    token = live.attempts[0].token
    assert token == sim.attempts[0].token
    seen, expected = _due_tick_outcomes(live, token), _due_tick_outcomes(sim, token)
    n = min(len(seen), len(expected))
    assert n >= 5 and any(expected[:n]), (seen, expected)
    assert seen[:n] == expected[:n], (seen, expected)


# -- the simulator --------------------------------------------------------------------------------------------
def test_no_skip_rate_draws_nothing_and_changes_nothing() -> None:
    """p = 0 makes no draw (the golden digests pin it too); p > 0 leaves every other stream's draws alone:
    the same arrivals, durations and timer phases."""
    base = standard("skipped-ticks", skipped=0.0)
    plain = simulate(replace(base, network=Network()), preset("bullmq"), 3, 0)
    assert simulate(base, preset("bullmq"), 3, 0).digest() == plain.digest()
    assert not any(e.kind == "renew_skipped" for e in plain.lock_events)
    skipping = simulate(standard("skipped-ticks", skipped=0.5), preset("bullmq"), 3, 0)
    assert any(e.kind == "renew_skipped" for e in skipping.lock_events)
    assert skipping.arrivals == plain.arrivals
    assert skipping.attempts[0].taken_at == plain.attempts[0].taken_at


def _gaps_after_skips(policy: LeasePolicy, p: float, seed: int) -> tuple[list[float], int, int]:
    """(for each skip, the time to its take's next renewal, skipped or sent), skips, renewals sent, for one
    long job (a lapse, three skips in a row here, ends its take: the re-run is another take)."""
    sc = Scenario(workers=1, jobs=1, duration=Fixed(60.0), network=Network(skipped_ticks=p))
    run = simulate(sc, policy, seed=seed)
    kinds = ("renewed", "renew_failed", "renew_skipped")
    gaps: list[float] = []
    skips = sent = 0
    for token in {e.token for e in run.lock_events}:
        events = [e for e in run.lock_events if e.kind in kinds and e.token == token]
        gaps += [
            round(b.time - a.time, 3)
            for a, b in zip(events, events[1:], strict=False)
            if a.kind == "renew_skipped"
        ]
        skips += sum(e.kind == "renew_skipped" for e in events)
        sent += sum(e.kind != "renew_skipped" for e in events)
    return gaps, skips, sent


def test_a_skipped_bullmq_tick_renews_nothing_and_the_next_tick_does() -> None:
    """BullMQ's after-reply timer: a skipped tick sends nothing, so the next comes one tick later (no round
    trip), finds the job due and renews it (reaching Redis h = 1 ms after its send), or is skipped too."""
    policy = preset("bullmq", lease=2.0)
    gaps, skips, renewals = _gaps_after_skips(policy, 0.3, seed=1)  # type: ignore[arg-type]
    assert skips > 10 and set(gaps) == {0.5, 0.501}, sorted(set(gaps))
    # the skipped share of the ticks with a job due, within its binomial band
    lo, hi = binom.interval(0.999, skips + renewals, 0.3)
    assert lo <= skips <= hi, (skips, renewals)


def test_a_skipped_fixed_rate_beat_is_not_sent() -> None:
    """A plain lease's fixed-rate timer: that beat's batch is not sent; the next beat on the grid sends one."""
    gaps, skips, _ = _gaps_after_skips(LeasePolicy(3.0, 1.0, 1.0), 0.3, seed=2)
    assert skips > 10 and set(gaps) == {1.0, 1.001}, sorted(set(gaps))


def test_per_job_renewers_skip_too() -> None:
    rule = RenewalRule.every(1.0, per_job=True)
    gaps, skips, _ = _gaps_after_skips(LeasePolicy(3.0, 1.0, 1.0, renewal=rule), 0.3, seed=3)
    assert skips > 10 and set(gaps) <= {1.0, 1.001}, sorted(set(gaps))


# -- the closed form ----------------------------------------------------------------------------------------------
def test_the_closed_form_is_the_freeze_rule_without_skips_and_grows_with_them() -> None:
    rule = RenewalRule.bullmq(2.0)
    for freeze in (1.0, 1.4, 1.6, 1.8, 2.0, 2.2):
        plain = freeze_lapse_probability(2.0, rule, freeze)
        # without skips: the freeze rule, but for a freeze in the rtt before the reply (1 ms of B = 502 ms)
        assert abs(skipped_tick_freeze_lapse_probability(2.0, rule, freeze, 0.0) - plain) <= 1 / 502 + 1e-12
        assert skipped_tick_freeze_lapse_probability(2.0, rule, freeze, 0.01) >= plain
    # below L - B a freeze lapses only after a skip: about 1.6 p at the real test's 1.4 s
    assert skipped_tick_freeze_lapse_probability(2.0, rule, 1.4, 0.0) == 0.0
    assert skipped_tick_freeze_lapse_probability(2.0, rule, 1.4, 0.01) == pytest.approx(0.016, abs=0.0005)
    with pytest.raises(ValueError, match="probability"):
        skipped_tick_freeze_lapse_probability(2.0, rule, 1.4, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize(("freeze", "p"), [(1.4, 0.05), (1.55, 0.05)])
def test_the_closed_form_matches_the_simulator(freeze: float, p: float) -> None:
    """One freeze per replication, well past the job's first renewals (the closed form is the steady state);
    a lapse is a run whose first attempt lost its lock. At p = 0.05 three skips in a row (which lapse the
    2 s lock without any freeze) come once in 8,000 cycles: too rare to move the count."""
    policy = preset("bullmq", lease=2.0, scan=1.0)
    n = 1000
    lapsed = 0
    for rep in range(n):
        sc = Scenario(
            workers=2,
            jobs=1,
            duration=Fixed(3.0 + freeze + 1.2),
            faults=(Freeze(job=0, after=Uniform(2.0, 3.0), duration=freeze),),
            network=Network(skipped_ticks=p),
        )
        run = simulate(sc, policy, seed=5, replication=rep)
        lapsed += any(e.kind == "renew_failed" for e in run.lock_events) or run.attempts[0].false_reclaim
    expected = skipped_tick_freeze_lapse_probability(2.0, RenewalRule.bullmq(2.0), freeze, p)
    lo, hi = binom.interval(0.999, n, expected)
    assert lo <= lapsed <= hi, (lapsed, n, expected)
    assert np.isfinite(expected) and expected > freeze_lapse_probability(2.0, RenewalRule.bullmq(2.0), freeze)


# -- explore: a freeze after a skipped tick ------------------------------------------------------------------------
def test_explore_finds_the_freezes_below_the_threshold_that_a_skipped_tick_lapses() -> None:
    """`--fault skip --fault freeze,length=1.4`: the skip (the holder's first due tick from its offset on renews
    nothing) and the freeze each over one renewal period. The freeze alone never lapses a 2 s BullMQ lock
    (below L - B); after a skip the timings where it does are found, each a run with a `renew_skipped` event.
    A skip alone lapses nothing (one skip leaves B + T = 1.002 s < L)."""
    from emqsim.explore import LIVE_NEVER_RECLAIMED, FaultSpec, counterexample_run, explore, space

    policy = preset("bullmq", lease=2.0, scan=2.0)
    freeze = FaultSpec("freeze", params={"length": (1400, 1400)})
    alone = explore(space(policy, [freeze], sweep_phases=False), ties=False)
    assert alone.counts[LIVE_NEVER_RECLAIMED.name] == alone.points
    skipped = explore(space(policy, [FaultSpec("skip")], sweep_phases=False), ties=False)
    assert skipped.counts[LIVE_NEVER_RECLAIMED.name] == skipped.points
    both = explore(space(policy, [FaultSpec("skip"), freeze], sweep_phases=False), ties=False)
    failing = both.points - both.counts[LIVE_NEVER_RECLAIMED.name]
    assert 0 < failing < both.points
    run = counterexample_run(both, LIVE_NEVER_RECLAIMED.name)
    assert any(e.kind == "renew_skipped" for e in run.lock_events)
    assert any(a.false_reclaim for a in run.attempts)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lease", "renewal", "p"),
    [(0.4, RenewalRule.bullmq(0.4), 0.3), (0.3, RenewalRule.every(0.1), 0.3)],
    ids=["bullmq", "fixed-rate"],
)
def test_a_live_workers_lapse_from_skips_alone_matches_the_closed_form(
    lease: float, renewal: RenewalRule, p: float
) -> None:
    """No fault: a job of 1.2 s loses its lock only on enough consecutive skips (3 here: B + 3 T > L), at the
    rate `analytic.lost_renewal_lapse_probability(..., loss=0, skipped=p)` gives (one job per replication)."""
    from emqsim.analytic import lost_renewal_lapse_probability

    policy = LeasePolicy(lease, lease / 4, 0.05, swept_by="reaper", max_stalled=0, renewal=renewal)
    sc = Scenario(workers=2, jobs=1, duration=Fixed(1.2), network=Network(skipped_ticks=p))
    n = 1000
    hits = sum(simulate(sc, policy, 9, rep, record_locks=False).attempts[0].false_reclaim for rep in range(n))
    expected = lost_renewal_lapse_probability(lease, renewal, 1.2, 0.0, skipped=p)
    lo, hi = binom.interval(0.999, n, expected)
    assert 0.02 < expected < 0.5 and lo <= hits <= hi, (hits, n, expected)
    assert lost_renewal_lapse_probability(lease, renewal, 1.2, 0.0) == 0.0
