"""Silent partitions (issue 25, item 4): packets dropped without a FIN, so ioredis sees no close.

Held requests flow at the first TCP retransmission after the partition (Linux: RTO from 200 ms doubling to
120 s) while TCP has not given up (tcp_retries2 = 15: 924.6 s); after that, the close and BullMQ's reconnect
backoff with ioredis's 10 s connectTimeout per attempt made while the partition lasts. Checked: the timing
rules, the exact lapse boundary against `analytic_stalls.partition_lapses`, the lapse probability against the
closed form, the contrast with an `Outage` of the same length, TOML and the flags.
"""

from __future__ import annotations

import pytest

from emqsim import Fixed, LeasePolicy, RenewalRule, Scenario, simulate, standard
from emqsim.analytic import outage_lapses, reconnect_time
from emqsim.analytic_stalls import partition_lapse_probability, partition_lapses, partition_recovery
from emqsim.errors import ConfigError
from emqsim.faults import Outage, Partition, partition_recovery_ms, tcp_retransmissions_ms
from emqsim.stats import wilson_ci


def test_tcp_gives_up_at_the_kernels_documented_924_6_s() -> None:
    times = tcp_retransmissions_ms()
    assert times[:4] == [200, 600, 1400, 3000] and times[9] == 204_600 and times[-1] == 924_600


@pytest.mark.parametrize(
    ("length", "retransmit", "give_up", "expected"),
    [
        (15.0, True, 924.6, 25.4),  # next retransmission after 15 s: 200 ms * (2^7 - 1)
        (15.0, False, 924.6, 15.0),  # bytes held, not dropped (a proxy that stops forwarding)
        (60.0, True, 924.6, 102.2),
        (924.599, True, 924.6, 925.6),  # no retransmission left: closed at 924.6 s, reconnect 1 s later
        (
            45.0,
            False,
            20.0,
            45.0,
        ),  # closed at 20 s; attempts at 21, 32, 43, 54 s: the 54 s one connects at 45 s
        (
            1000.0,
            True,
            924.6,
            1004.676,
        ),  # attempts every delay + 10 s connectTimeout; a SYN retry gets through
    ],
)
def test_partition_recovery_follows_tcp_and_ioredis(length, retransmit, give_up, expected) -> None:  # type: ignore[no-untyped-def]
    assert partition_recovery(length, give_up=give_up, retransmit=retransmit) == expected
    assert partition_recovery_ms(int(length * 1000), int(give_up * 1000), 10_000, retransmit) >= length * 1000


@pytest.mark.parametrize("fault", [Partition(at=30, duration=15, worker=0), Partition(at=30, duration=1000)])
def test_the_run_disconnects_and_reconnects_when_the_closed_form_says(fault) -> None:  # type: ignore[no-untyped-def]
    run = simulate(
        Scenario(workers=2, jobs=1, duration=Fixed(1500), faults=(fault,), horizon=4000), LeasePolicy(), 0
    )
    times = {e.kind: e.time for e in run.worker_events if e.worker == 0}
    assert times["disconnect"] == 30.0 and times["network_up"] == 30.0 + fault.duration
    assert times["reconnect"] == pytest.approx(30.0 + partition_recovery(fault.duration), abs=1e-9)


@pytest.mark.parametrize("delta_ms", [-1, 0, 1, 2])
def test_a_partition_lapses_exactly_when_u_plus_its_recovery_exceeds_the_lease(delta_ms: int) -> None:
    lease, length = 30, 15.0  # R_P(15 s) = 25.4 s; the last renewal before it is sent at 20 s (aligned ticks)
    at = round(20 + lease - partition_recovery(length) + delta_ms / 1000, 3)
    policy = LeasePolicy(lease, 10, 5, swept_by="reaper")
    sc = Scenario(
        workers=1, jobs=1, duration=Fixed(100), faults=(Partition(at=at, duration=length),), phases="aligned"
    )
    run = simulate(sc, policy, seed=1)
    lapsed = any(e.kind == "renew_failed" for e in run.lock_events)
    assert lapsed == partition_lapses(lease, at - 20, length) == (delta_ms > 0)


def test_a_15_s_partition_lapses_a_lease_that_a_15_s_outage_keeps() -> None:
    assert reconnect_time(15.0) == 18.179 and partition_recovery(15.0) == 25.4
    assert partition_lapses(30, 5.0, 15.0) and not outage_lapses(30, 5.0, 15.0)
    policy = LeasePolicy(30, 10, 5, swept_by="reaper")
    for fault, lapses in ((Partition(at=25.0, duration=15.0), True), (Outage(at=25.0, duration=15.0), False)):
        sc = Scenario(workers=2, jobs=1, duration=Fixed(100), faults=(fault,), phases="aligned")
        first = simulate(sc, policy, seed=0).attempts[0]
        assert first.false_reclaim == lapses
        if lapses:
            assert first.worker_state_at_reclaim in ("alive", "disconnected")


@pytest.mark.slow  # 120 simulated runs (about 3 s on a quiet box, 8 s on a loaded one)
def test_the_lapse_probability_matches_the_closed_form() -> None:
    # The silent-partition scenario (15 s at 20 s into a 120 s job) under a 30/10 lease: u is uniform over
    # the renewal period, so P = clip((25.4 - (30 - 10)) / 10, 0, 1) = 0.54 (the exact grid form below).
    policy = LeasePolicy(30, 10, 5)
    p = partition_lapse_probability(30, RenewalRule.every(10), 15.0)
    assert 0.5 < p < 0.6
    n = 120
    lapsed = sum(
        simulate(standard("silent-partition"), policy, 7, r).attempts[0].false_reclaim for r in range(n)
    )
    _, lo, hi = wilson_ci(lapsed, n, 0.999)
    assert lo <= p <= hi, (lapsed, n, p)


def test_partition_is_checked_and_read_from_toml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from emqsim.config import load_config

    with pytest.raises(ConfigError, match="give_up"):
        Partition(at=1, duration=5, give_up=0)
    with pytest.raises(ConfigError, match="lost_writes"):
        Partition(at=1, duration=5, lost_writes=1)
    path = tmp_path / "s.toml"
    path.write_text(
        '[scenario]\nworkers = 2\n[[scenario.faults]]\nkind = "partition"\nat = 5\nduration = 30\n'
        "worker = 1\ngive_up = 20\nretransmit = false\n"
    )
    (fault,) = load_config(path)[0].faults
    assert fault == Partition(at=5, duration=30, worker=1, give_up=20.0, retransmit=False)
    path.write_text('[scenario]\n[[scenario.faults]]\nkind = "outage"\nat = 5\nduration = 3\ngive_up = 2\n')
    with pytest.raises(ConfigError, match="only a partition has give_up"):
        load_config(path)


def test_the_flags_and_their_one_line_errors(capsys) -> None:  # type: ignore[no-untyped-def]
    args = ("run", "--scenario", "fast-dead", "--replications", "1")
    code, out, err = run_cli(capsys, *args, "--partition-at", "5", "--partition-for", "20", "--json")
    assert code == 0, err
    code, _, err = run_cli(capsys, *args, "--partition-at", "5")
    assert code == 2 and "--partition-for" in err and "Traceback" not in err


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The command line in this process (as tests/test_newcomer.py runs it): exit code, stdout, stderr."""
    from emqsim.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err
