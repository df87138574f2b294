"""BullMQ's moveToFinished takes the next job in the same script (issue 25, item 5): `fetch_next`.

Under a backlog the finish locks the next waiting job to the same worker at Redis; a worker that freezes
before it reads the reply holds a lock it does not renew. Checked against the closed form
(`analytic_stalls.fetched_lock_lapses`: u + X > L) to the millisecond, and against the separate take (no lapse).
"""

from __future__ import annotations

import dataclasses

import pytest

from emqsim import LeasePolicy, simulate, standard
from emqsim.analytic_stalls import fetched_lock_lapses
from emqsim.presets import preset
from emqsim.stats import summarize
from emqsim.summaries import simulate_summary


def _bullmq(fetch_next: bool) -> LeasePolicy:
    policy = preset("bullmq")
    assert isinstance(policy, LeasePolicy)
    return dataclasses.replace(policy, fetch_next=fetch_next)


def test_the_bullmq_preset_fetches_next_and_a_plain_lease_does_not() -> None:
    assert preset("bullmq").fetch_next is True
    assert LeasePolicy().fetch_next is False


@pytest.mark.parametrize("freeze", [29.998, 29.999, 30.0, 30.001, 45.0])
def test_a_freeze_right_after_a_finish_lapses_the_fetched_lock_exactly_as_the_closed_form(
    freeze: float,
) -> None:
    # The freeze starts 1 ms after the finish was sent (the scenario's `after` = duration + 1 ms).
    lapses = fetched_lock_lapses(30.0, 0.001, freeze)
    for rep in range(3):
        run = simulate(standard("finish-takes-next", freeze_for=freeze), _bullmq(True), 0, rep)
        reclaimed = [a for a in run.attempts if a.reclaimed_at is not None]
        assert bool(reclaimed) == lapses, (freeze, rep)
        for a in reclaimed:  # the fetched job of the frozen worker: taken by the finish, at its arrival
            assert a.worker_state_at_reclaim in ("frozen", "alive")
            first = next(b for b in run.attempts if b.job == "0" and b.attempt == 1)
            assert a.worker == first.worker and a.taken_at == first.finish_applied_at
    assert lapses == (freeze >= 30.0)


@pytest.mark.parametrize("freeze", [30.0, 45.0, 120.0])
def test_without_fetch_next_the_same_freeze_lapses_nothing(freeze: float) -> None:
    for rep in range(3):
        run = simulate(standard("finish-takes-next", freeze_for=freeze), _bullmq(False), 0, rep)
        assert not [a for a in run.attempts if a.reclaimed_at is not None]


def test_every_job_completes_once_and_streaming_agrees() -> None:
    scenario = standard("finish-takes-next")
    for fetch in (True, False):
        run = simulate(scenario, _bullmq(fetch), 3, 0)
        completed = sorted(a.job for a in run.attempts if a.outcome == "completed")
        assert completed == [str(i) for i in range(scenario.jobs)]
        assert summarize(run) == simulate_summary(scenario, _bullmq(fetch), 3, 0)


def test_fetch_next_saves_the_take_round_trips_under_a_backlog() -> None:
    scenario = standard("finish-takes-next", freeze_for=1.0, jobs=20)
    with_fetch = simulate(scenario, _bullmq(True), 0, 0).requests
    without = simulate(scenario, _bullmq(False), 0, 0).requests
    assert with_fetch["finish"] == without["finish"] == 20
    assert with_fetch.get("take", 0) < without["take"]


def test_a_crash_right_after_a_finish_leaves_the_fetched_job_held_for_the_lease() -> None:
    # SIGKILL 1 ms after the finish was sent: Redis still runs the script in full and locks the next job to
    # the dead worker; it waits out the lease and a sweep (without fetch_next, another worker takes it).
    from emqsim.faults import Crash

    scenario = standard("finish-takes-next").with_(faults=(Crash(job=0, after=20.001),))
    run = simulate(scenario, _bullmq(True), 0, 0)
    held = [a for a in run.attempts if a.died_at is not None and a.reclaimed_at is not None]
    assert len(held) == 1 and held[0].worker_state_at_reclaim == "dead" and held[0].started_at is None
    assert held[0].reclaimed_at - held[0].taken_at >= 30.0
    assert not [a for a in simulate(scenario, _bullmq(False), 0, 0).attempts if a.reclaimed_at is not None]


def test_the_toml_key_and_the_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emqsim.cli.building import with_model_options
    from emqsim.cli.parser import build_parser
    from emqsim.config import load_config

    path = tmp_path / "s.toml"
    path.write_text('[scenario]\njobs = 2\n[policy]\nkind = "lease"\nfetch_next = true\n')
    assert load_config(path)[1].fetch_next is True  # type: ignore[union-attr]
    args = build_parser().parse_args(["run", "--preset", "bullmq", "--fetch-next", "off"])
    assert with_model_options(preset("bullmq"), args).fetch_next is False


def test_bad_flag_value_is_one_line_and_exit_2(capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli(capsys, "run", "--scenario", "finish-takes-next", "--fetch-next", "maybe")
    assert code == 2 and "--fetch-next" in err and "Traceback" not in err


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The command line in this process (as tests/test_newcomer.py runs it): exit code, stdout, stderr."""
    from emqsim.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err
