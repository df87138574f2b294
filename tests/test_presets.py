"""Real systems' presets: settings, sources, derived rules kept under overrides."""

import pytest

from emqsim import ConfigError, LeasePolicy, TimeoutPolicy
from emqsim.presets import PRESETS, preset, presets_table

REQUIRED = {"bullmq", "echomq", "celery-redis", "sqs", "faktory", "oban-lifeline", "k8s-node-lease"}


def test_every_required_preset_exists_with_a_source():
    assert set(PRESETS) >= REQUIRED
    for row in presets_table():
        assert row["source"] and row["description"] and row["system"]


def test_bullmq_defaults_and_derived_rules():
    p = preset("bullmq")
    assert isinstance(p, LeasePolicy) and p.two_phase and p.max_stalled == 1 and p.swept_by == "workers"
    assert (p.lease_ms, p.sweep_interval_ms) == (30_000, 30_000)
    assert (p.renewal.tick_ms, p.renewal.min_age_ms, p.renewal.strict, p.renewal.after_reply) == (
        7500,
        7500,
        True,
        True,
    )
    small = preset("bullmq", lease=2.0)  # renew = lock/2 and tick = renew/2 are kept
    assert (small.lease_ms, small.renewal.tick_ms, small.renewal.min_age_ms) == (2000, 500, 500)


def test_timeout_presets():
    celery = preset("celery-redis")
    assert isinstance(celery, TimeoutPolicy) and celery.timeout_ms == 3_600_000 and not celery.fenced
    assert preset("faktory").timeout_ms == 1_800_000 and preset("faktory").sweep_interval_ms == 15_000
    assert preset("sqs").timeout_ms == 30_000
    assert preset("celery-redis", timeout=600).timeout_ms == 600_000


def test_echomq_and_k8s():
    e = preset("echomq")
    assert (e.lease_ms, e.beat_ms) == (30_000, 10_000)
    k = preset("k8s-node-lease")
    assert (k.lease_ms, k.beat_ms, k.sweep_interval_ms, k.two_phase, k.swept_by) == (
        40_000,
        10_000,
        5_000,
        False,
        "reaper",
    )


def test_bad_preset_names_and_settings():
    with pytest.raises(ConfigError, match="unknown preset 'nope'; choose one of: bullmq"):
        preset("nope")
    with pytest.raises(ConfigError, match="has no setting beat"):
        preset("bullmq", beat=5)
    assert preset("echomq").name == "echomq"


def test_echomq_code_renews_on_bullmqs_rule_and_never_recovers_a_dead_workers_job():
    from emqsim import standard
    from emqsim.engine import simulate

    policy = preset("echomq-code")
    assert policy.renewal.tick_ms == 7500 and policy.renewal.track_by == "job" and policy.renewal.strict
    dead = simulate(standard("fast-dead"), policy, seed=0)
    assert dead.ended_by == "horizon" and dead.attempts[0].outcome == "held"
    alive = simulate(standard("slow-alive"), policy, seed=0)
    assert [a.outcome for a in alive.attempts] == ["completed"]
