"""ClockWatch (emqsim.live.clockwatch): a live run knows when the machine, not the protocol, moved its timings.

Scripted clocks check the arithmetic; a real SIGSTOP of a child process checks that a real stall is seen; a
live run whose watch saw a stall warns (LiveDisturbed, and `emqsim live` prints it); the tests' steady_live
fixture runs a disturbed live run again and fails when every attempt was disturbed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import pytest

from emqsim import LeasePolicy, standard
from emqsim.live import (
    ClockWatch,
    Disturbed,
    LiveDisturbed,
    LiveSettings,
    NotJudged,
    Steadiness,
    until_steady,
)
from emqsim.live import runner as live_runner


def watch_scripted(ticks: list[tuple[float, float]], period: float = 0.01) -> Steadiness:
    """Feed a ClockWatch readings one period apart, each wake-up `stall` late and the wall clock stepped by
    `step`: ticks are (stall, step)."""
    watch = ClockWatch(period)
    mono, offset = 100.0, 1_700_000_000.0
    watch.observe(mono, mono + offset)
    for stall, step in ticks:
        mono += period + stall
        offset += step
        watch.observe(mono, mono + offset)
    return watch.result()


def test_a_steady_machine_shows_no_stall_and_no_step():
    seen = watch_scripted([(0.0, 0.0)] * 20)
    assert seen.stall == pytest.approx(0.0, abs=1e-9) and seen.clock_step == pytest.approx(0.0, abs=1e-9)
    assert not seen.disturbed(0.001)


def test_the_worst_stall_and_the_worst_clock_step_are_kept():
    seen = watch_scripted([(0.0, 0.0), (0.25, 0.0), (0.0, 0.0), (0.05, 0.0), (0.0, 11.0), (0.0, -0.5)])
    assert seen.stall == pytest.approx(0.25) and seen.clock_step == pytest.approx(11.0)
    assert seen.disturbed(0.1) and not seen.disturbed(12.0)
    assert "250 ms" in seen.describe() and "11000 ms" in seen.describe()


def test_the_period_is_checked():
    for bad in (0, -1, 2, float("nan"), "0.01"):
        with pytest.raises(ValueError, match="period must be in"):
            ClockWatch(bad)


def test_a_real_stop_of_the_watching_process_is_seen():
    """SIGSTOP the watching process for 0.4 s: it cannot wake meanwhile, as on a paused machine."""
    with ClockWatch() as watch:
        assert watch.pid is not None and watch.pid != os.getpid()
        time.sleep(0.1)
        os.kill(watch.pid, signal.SIGSTOP)
        time.sleep(0.4)
        os.kill(watch.pid, signal.SIGCONT)
        time.sleep(0.1)
    seen = watch.result()
    assert seen.stall >= 0.4 - 0.01 - 0.02  # the stop, less one period, less the kill's own latency
    assert seen.watched >= 0.6


def test_the_watching_process_ignores_ctrl_c_and_ends_with_the_block():
    """A Ctrl-C at a terminal reaches the whole foreground group: the watch must not die of it (nor print a
    traceback); it ends, and reports, when the block does."""
    with ClockWatch() as watch:
        os.kill(watch.pid, signal.SIGINT)
        time.sleep(0.1)
    assert watch.result().watched >= 0.1
    assert watch._child is not None and watch._child.returncode == 0


def test_a_busy_watching_program_is_not_a_stalled_machine():
    """Threads of the watching program that keep its interpreter lock busy do not delay the watch."""

    def spin(until: float) -> None:
        while time.monotonic() < until:
            sum(range(1000))

    until = time.monotonic() + 0.5
    with ClockWatch() as watch:
        threads = [threading.Thread(target=spin, args=(until,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    with ClockWatch(in_process=True) as inside:
        until = time.monotonic() + 0.5
        threads = [threading.Thread(target=spin, args=(until,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert watch.result().stall < inside.result().stall


def test_the_timing_margin_is_half_the_shortest_timer():
    live = LiveSettings.from_policy(LeasePolicy(lease=30, beat=10, scan=5), 0.02)
    assert live.timing_margin_ms == 50  # scan 5 s -> 100 ms real; the tick is 200 ms


class DisturbedWatch:
    """Stands in for ClockWatch inside the live runner: every run it watches was disturbed."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self) -> DisturbedWatch:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def result(self) -> Steadiness:
        return Steadiness(stall=1.5, clock_step=0.0, watched=3.0)


@pytest.mark.redis
def test_a_disturbed_live_run_warns_and_the_cli_prints_it(need_redis, monkeypatch, capsys):
    from emqsim.cli.app import main

    monkeypatch.setattr(live_runner, "ClockWatch", DisturbedWatch)
    with pytest.warns(LiveDisturbed, match="stalled for up to 1500 ms") as caught:
        live_runner.run_live(standard("fast-dead", duration=5), LeasePolicy(30, 10, 10), time_scale=0.02)
    assert "timing margin of 100 ms" in str(caught[0].message)
    assert main(["live", "--scenario", "fast-dead", "--lease", "30", "--beat", "10", "--scan", "10"]) == 0
    err = capsys.readouterr().err
    assert "emqsim live: warning: the machine stalled for up to 1500 ms" in err


@pytest.mark.redis
def test_steady_live_runs_a_disturbed_run_again_and_fails_when_every_one_was(
    need_redis, steady_live, monkeypatch
):
    calls = []
    real_watch = live_runner.ClockWatch

    def disturbed_twice(*args, **kwargs):
        calls.append(1)
        return DisturbedWatch() if len(calls) <= 2 else real_watch(*args, **kwargs)

    monkeypatch.setattr(live_runner, "ClockWatch", disturbed_twice)
    cleared = []
    with warnings.catch_warnings(record=True) as caught:  # kept here: they are this test's, not the suite's
        warnings.simplefilter("always")
        run = steady_live(
            standard("fast-dead", duration=5),
            LeasePolicy(30, 10, 10),
            time_scale=0.02,
            before_each=lambda: cleared.append(1),
        )
    assert run.ended_by == "done" and len(calls) == len(cleared) == 3
    not_judged = [str(w.message) for w in caught if w.category is NotJudged]
    assert len(not_judged) == 2 and all(
        m.startswith("live run not judged (150 ms margin): the machine stalled") for m in not_judged
    )
    monkeypatch.setattr(live_runner, "ClockWatch", DisturbedWatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(
            pytest.fail.Exception,
            match="all 3 attempts were disturbed; the last: live run not judged .150 ms margin.: the machine",
        ):
            steady_live(standard("fast-dead", duration=5), LeasePolicy(30, 10, 10), time_scale=0.02)
    assert sum(w.category is LiveDisturbed for w in caught) == 3


def test_until_steady_returns_the_first_steady_attempt_and_says_each_disturbed_one():
    said = []
    outcomes = {0: "paused 11 s", 1: "stalled 200 ms", 2: None}
    assert until_steady(lambda k: k, outcomes.get, notice=said.append) == 2
    assert said == ["paused 11 s", "stalled 200 ms"]
    with pytest.raises(Disturbed, match="all 2 attempts were disturbed; the last: late 1"):
        until_steady(lambda k: k, lambda k: f"late {k}", attempts=2, notice=said.append)
    for bad in (0, -1, 1.5, None):
        with pytest.raises(ValueError, match="attempts must be a whole number >= 1"):
            until_steady(lambda k: k, lambda k: None, attempts=bad)
