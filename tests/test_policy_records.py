"""The built-in policies and presets are frozen, validated records: their repr and settings() name every
option, so two policies that behave differently never print or record the same; changes go through
`dataclasses.replace`, which validates again."""

from __future__ import annotations

import dataclasses

import pytest

from emqsim import Detector, simulate, standard
from emqsim.errors import ConfigError
from emqsim.policies import LeasePolicy, RenewalRule, TimeoutPolicy
from emqsim.presets import PRESETS, preset
from emqsim.sweep import Cell


def test_a_preset_and_a_plain_lease_of_the_same_numbers_print_and_record_differently():
    bullmq, plain = preset("bullmq"), LeasePolicy(30, 7.5, 30)
    assert repr(bullmq) != repr(plain)
    for option in ("take_mode='after-wakeup'", "lazy_fail=True", "track_by='job'", "min_age_ms=7500"):
        assert option in repr(bullmq) and option not in repr(plain)
    differ = {k for k in bullmq.settings() if bullmq.settings()[k] != plain.settings()[k]}
    assert differ >= {"policy", "take_mode", "lazy_fail", "track_by", "renew_min_age", "renew_after_reply"}
    assert bullmq != plain


def test_every_option_is_in_the_repr_and_in_settings():
    fields = [f.name for f in dataclasses.fields(LeasePolicy) if f.repr]
    assert fields == [
        "lease", "beat", "scan", "two_phase", "max_stalled", "swept_by", "renewal", "name", "take_mode",
        "drain_delay", "lazy_fail", "track_by", "fetch_next", "redis_commands",
    ]  # fmt: skip
    text = repr(LeasePolicy())
    assert all(f"{name}=" in text for name in fields)
    settings = LeasePolicy().settings()
    assert {k for k in fields if k != "renewal"} - {"name"} <= set(settings)
    assert {"renew_tick", "renew_min_age", "renew_strict", "renew_after_reply", "renew_per_job"} <= set(
        settings
    )
    assert set(TimeoutPolicy().settings()) >= {"timeout", "scan", "fenced", "max_stalled", "swept_by"}


def test_the_presets_are_all_distinct_records():
    policies = {name: preset(name) for name in PRESETS}
    assert len({repr(p) for p in policies.values()}) == len(PRESETS)
    with pytest.raises(TypeError):
        PRESETS["bullmq"].defaults["lease"] = 1.0  # type: ignore[index]


def test_policies_are_frozen_and_replace_validates_again():
    policy = LeasePolicy(30, 10, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.lease = 60  # type: ignore[misc]
    changed = dataclasses.replace(policy, take_mode="after-wakeup", track_by="job")
    assert changed.take_after_wakeup and changed.renewal is not None and changed.renewal.track_by == "job"
    assert not policy.take_after_wakeup and policy.renewal is not None and policy.renewal.track_by == "token"
    with pytest.raises(ConfigError, match="take_mode must be 'atomic' or 'after-wakeup'"):
        dataclasses.replace(policy, take_mode="eager")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="beat .* must be shorter than the lease"):
        dataclasses.replace(policy, lease=5)
    with pytest.raises(ConfigError, match="swept_by must be 'workers' or 'reaper'"):
        TimeoutPolicy(600, swept_by="everyone")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="track_by must be 'token' or 'job'"):
        RenewalRule(1000, track_by="id")  # type: ignore[arg-type]


def test_seconds_are_kept_on_the_clocks_milliseconds_so_equal_settings_are_equal():
    assert LeasePolicy(30, 10, 5) == LeasePolicy(30.0, 10.0, 5.0)
    assert LeasePolicy(30, 10, 5).lease_ms == 30_000 and TimeoutPolicy(0.0015).timeout == 0.002
    assert LeasePolicy(30, 10, 5) != LeasePolicy(30, 10, 5, lazy_fail=True)


def test_run_records_keep_the_table_settings_so_results_and_tables_are_unchanged():
    run = simulate(standard("fast-dead"), preset("bullmq"), seed=1)
    assert run.policy == {"policy": "bullmq", "lease": 30.0, "beat": 7.5, "scan": 30.0, "timeout": None}
    assert run.policy == preset("bullmq").table_settings()


def test_the_cache_key_tells_every_option_apart():
    scenario = standard("fast-dead")
    base = LeasePolicy(30, 10, 5)
    variants = [
        base,
        dataclasses.replace(base, take_mode="after-wakeup"),
        dataclasses.replace(base, lazy_fail=True),
        dataclasses.replace(base, track_by="job"),
        dataclasses.replace(base, drain_delay=2.0),
        preset("echomq"),
    ]
    keys = {Cell(scenario, p).key(0, 2, "x") for p in variants}
    assert len(keys) == len(variants)


class Counting(Detector):
    name = "counting"

    def __init__(self, beat: float = 2.0, scan: float = 1.0) -> None:
        super().__init__(beat, scan)
        self.taken_jobs: list[str] = []

    def taken(self, job: str, now: float) -> None:
        self.taken_jobs.append(job)

    def suspect(self, job: str, now: float) -> bool:
        return False


def test_a_detector_keeps_its_per_run_state_on_self_and_the_engine_works_on_a_copy():
    detector = Counting()
    assert not dataclasses.is_dataclass(detector)  # a user's detector stays an ordinary object
    run = simulate(standard("slow-alive", duration=5.0), detector, seed=0)
    assert run.attempts[0].outcome == "completed"
    assert detector.taken_jobs == []  # the run's state lived on the engine's fresh copy
    assert detector.settings()["beat"] == 2.0 and run.policy["policy"] == "counting"
