"""One TOML schema, derived from the dataclasses: every public field of every scenario, fault and policy type
round-trips through a scenario file (written by `to_toml`, read back by `load_config`, equal), and a key the
types do not have, or a value of the wrong type, is refused with one line naming the file, the key and what
is expected."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from emqsim.config import KEY_TYPES, RENEWAL_KEYS, load_config, to_toml
from emqsim.distributions import Empirical, Exponential, Fixed, LogNormal, Uniform
from emqsim.errors import ConfigError
from emqsim.faults import (
    Block,
    ChildCrash,
    Crash,
    Freeze,
    MemoryPressure,
    Network,
    Outage,
    Partition,
    RandomFaults,
)
from emqsim.policies import LeasePolicy, RenewalRule, TimeoutPolicy
from emqsim.presets import PRESETS, preset
from emqsim.scenario import STANDARD, Scenario, standard

# For every type, records that together give each of its init fields a value other than its default.
FAULTS = (
    Crash(worker=1, at=2.5, restart_after=3.0),
    Crash(job=1, after=Uniform(0.5, 1.5)),
    Freeze(duration=LogNormal(2.0, 0.5), job=0, after=1.25),
    Freeze(duration=4.0, worker=0, at=1.0),
    Block(duration=Exponential(3.0), worker=1, at=0.5),
    Block(duration=2.0, job=1, after=Fixed(0.25)),
    Outage(at=10.0, duration=2.0, worker=1),
    Outage(at=11.0, duration=3.0, lost_writes=0.5),
    Outage(at=20.0, duration=4.0, redis_restart=True),
    Outage(at=30.0, duration=1.0, recovers=False),
    Outage(at=40.0, duration=2.0, lost_writes=0.25, readonly=3.5),
    Partition(at=50.0, duration=5.0, worker=0, give_up=60.0, connect_timeout=2.0, retransmit=False),
    MemoryPressure(
        maxmemory=2_000_000,
        policy="allkeys-lfu",
        samples=10,
        cache_rate=5.0,
        cache_bytes=500,
        cache_ttl=60.0,
        latency_tracking=False,
    ),
    ChildCrash(job=1, after=0.75),
)
SCENARIOS = (
    Scenario(
        name="every-field", workers=3, concurrency=2, jobs=4, arrival_rate=0.5,
        duration=Empirical((1.0, 2.5, 7.0)), faults=FAULTS,
        random_faults=RandomFaults(
            crash_rate=1.5, restart_after=None, freeze_rate=2.0, freeze_duration=Uniform(0.1, 0.2),
            block_rate=0.5, block_duration=Fixed(0.3), outage_rate=0.25, outage_duration=Exponential(2.0),
        ),
        network=Network(
            rtt=LogNormal(0.003, 0.4), loss=0.125, loss_on="all", command_timeout=2.0, resend_twice=True,
            skipped_ticks=0.25,
        ),
        phases="aligned", horizon=900.0, hz=20, queue="mail", remove_on_complete=True, attempts=3,
    ),
    Scenario(random_faults=RandomFaults(restart_after=7.0)),
    *(standard(name) for name in STANDARD),
)  # fmt: skip
POLICIES = (
    LeasePolicy(
        12.0, 3.0, 2.0, two_phase=False, max_stalled=None, swept_by="reaper", name="mine",
        take_mode="after-wakeup", drain_delay=1.5, lazy_fail=True, track_by="job", fetch_next=True,
        redis_commands=("evalsha", "client|setname"),
        renewal=RenewalRule(2500, 1000, strict=False, after_reply=False, per_job=True, recreate_missing=True),
    ),
    LeasePolicy(20, 5, 1, max_stalled=3),
    TimeoutPolicy(90.0, 2.0, fenced=True, max_stalled=2, swept_by="workers", name="reaper-90"),
    *(preset(name) for name in PRESETS),
)  # fmt: skip


def _varied(records: tuple[Any, ...], owner: type) -> set[str]:
    """The init fields of `owner` that some record of that exact type sets to a non-default value."""
    default = {f.name: f.default for f in dataclasses.fields(owner)}
    out = set()
    for record in records:
        if type(record) is not owner:
            continue
        for f in dataclasses.fields(owner):
            value = getattr(record, f.name)
            changed = f.default is dataclasses.MISSING or value != default[f.name]
            if f.default_factory is not dataclasses.MISSING:
                changed = value != f.default_factory()
            if f.init and changed:
                out.add(f.name)
    return out


@pytest.mark.parametrize(
    ("owner", "records"),
    [
        (Scenario, SCENARIOS),
        (RandomFaults, tuple(s.random_faults for s in SCENARIOS if s.random_faults)),
        (Network, tuple(s.network for s in SCENARIOS)),
        *((kind, FAULTS) for kind in (Crash, Freeze, Block, Outage, ChildCrash)),
        (LeasePolicy, POLICIES),
        (TimeoutPolicy, POLICIES),
        (RenewalRule, tuple(p.renewal for p in POLICIES if p.renewal)),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)
def test_the_round_trip_records_set_every_public_field(owner, records):
    every = {f.name for f in dataclasses.fields(owner) if f.init}
    assert _varied(records, owner) == every


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_round_trips_through_toml(scenario: Scenario, tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(to_toml(scenario))
    assert load_config(path) == (scenario, None)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_every_policy_round_trips_through_toml(policy, tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(to_toml(SCENARIOS[0], policy))
    scenario, back = load_config(path)
    assert scenario == SCENARIOS[0] and back == policy and repr(back) == repr(policy)


def test_the_schema_is_the_dataclasses_fields():
    """The keys a file may use are the types' init fields (the keys KEY_TYPES lacked before included)."""
    assert set(KEY_TYPES["scenario"]) == {f.name for f in dataclasses.fields(Scenario)}
    assert {"take_mode", "drain_delay", "lazy_fail", "track_by", "renewal"} <= set(KEY_TYPES["policy"])
    assert {"block_rate", "block_duration", "outage_rate", "outage_duration"} <= set(
        KEY_TYPES["random_faults"]
    )
    assert {"lost_writes", "redis_restart"} <= set(KEY_TYPES["fault"])
    assert set(RENEWAL_KEYS) == {f.name for f in dataclasses.fields(RenewalRule)}
    assert KEY_TYPES["scenario"]["workers"] == "count" and KEY_TYPES["fault"]["job"] == "index"
    assert (
        KEY_TYPES["random_faults"]["block_rate"] == "hourly"
        and KEY_TYPES["scenario"]["arrival_rate"] == "rate"
    )


REFUSED = {
    "unknown key": ("[scenario]\nworkerz = 2\n", "s.toml:2: scenario.workerz: unknown key; allowed: "),
    "mistyped count": ("[scenario]\nworkers = 1.5\n", "s.toml:2: scenario.workers: must be a whole number"),
    "mistyped bool": ("[scenario]\nremove_on_complete = 'yes'\n", "s.toml:2: scenario.remove_on_complete: must be true or false"),
    "mistyped choice": ("[scenario]\nphases = 'sometimes'\n", "s.toml:2: scenario.phases: phases must be 'random' or 'aligned'"),
    "take mode": ("[scenario]\n[policy]\ntake_mode = 'eager'\n", "s.toml:3: policy.take_mode: take_mode must be 'atomic' or 'after-wakeup'"),
    "take (older key)": ("[scenario]\n[policy]\ntake = 'eager'\n", "s.toml:3: policy.take: take must be 'atomic' or 'after-wakeup'"),
    "track_by": ("[scenario]\n[policy]\ntrack_by = 'id'\n", "s.toml:3: policy.track_by: track_by must be 'token' or 'job'"),
    "drain_delay": ("[scenario]\n[policy]\ndrain_delay = 'long'\n", "s.toml:3: policy.drain_delay: must be a number of seconds"),
    "lazy_fail": ("[scenario]\n[policy]\nlazy_fail = 1\n", "s.toml:3: policy.lazy_fail: must be true or false"),
    "timeout key of a lease": ("[scenario]\n[policy]\ntimeout = 60\n", "s.toml:3: policy.timeout: unknown key; allowed: "),
    "renewal key": ("[scenario]\n[policy]\n[policy.renewal]\ntick = 3\n", "s.toml:4: policy.renewal.tick: unknown key"),
    "block rate": ("[scenario]\n[scenario.random_faults]\nblock_rate = -1\n", "s.toml:3: scenario.random_faults.block_rate: must be a number >= 0 per worker-hour"),
    "outage duration": ("[scenario]\n[scenario.random_faults]\noutage_duration = true\n", "s.toml:3: scenario.random_faults.outage_duration: expected seconds or a distribution"),
    "lost_writes": ("[scenario]\n[[scenario.faults]]\nkind = 'outage'\nat = 1\nduration = 2\nlost_writes = 'x'\n", "s.toml:6: scenario.faults[0].lost_writes: must be a number of seconds"),
    "redis_restart on a crash": ("[scenario]\n[[scenario.faults]]\nkind = 'crash'\nworker = 0\nat = 1\nredis_restart = true\n", "s.toml:6: scenario.faults[0].redis_restart: only an outage has redis_restart"),
    "outage needs at": ("[scenario]\n[[scenario.faults]]\nkind = 'outage'\nduration = 2\n", "s.toml:3: scenario.faults[0].kind: an outage needs at = ..."),
    "none where None is not allowed": ("[scenario]\nhorizon = 'none'\n", "s.toml:2: scenario.horizon: must be a number of seconds"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_an_unknown_or_mistyped_key_is_refused_with_one_line(case: str, tmp_path: Path) -> None:
    text, expected = REFUSED[case]
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert expected in message and "\n" not in message, message


def test_docs_config_lists_every_key_of_the_schema():
    rows = [line for line in (Path(__file__).parent.parent / "docs" / "config.md").read_text().splitlines()
            if line.startswith("| `[")]  # fmt: skip
    listed = {row.split("`")[1].strip("[]"): row.rsplit("|", 2)[1] for row in rows}
    tables = {"scenario": "scenario", "fault": "scenario.faults", "random_faults": "scenario.random_faults",
              "network": "scenario.network", "policy": "policy", "renewal": "policy.renewal"}  # fmt: skip
    for table, keys in {**KEY_TYPES, "renewal": RENEWAL_KEYS}.items():
        named = {k.strip().split(" ")[0] for k in listed[tables[table]].split(",")}
        nested = {t.split(".", 1)[1] for t in listed if t.startswith(f"{table}.")}
        assert set(keys) == named | nested, f"docs/config.md's [{tables[table]}] row lists other keys"
