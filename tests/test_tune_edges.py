"""tune's "what would change the answer" thresholds, checked against the simulator at 1 ms (issue 28).

Each statement is the simulator's own rule: a pause lapses the lock iff u + pause > lease (u = time since the
worker sent the request that last set the lock; the take counts); before a job's first renewal u reaches the
first-renewal gap G, not the renewal period B; BullMQ's after-reply lock manager sleeps a tick after a reply
it reads late; an outage loses a renewal sent within half a round trip of its start. The worlds are explore's
(one job, fixed 2 ms round trip, timer phases pinned), run point by point and along the offset by explore.
"""

import dataclasses

import numpy as np
import pytest

from emqsim import analytic
from emqsim.distributions import Fixed
from emqsim.explore import FaultSpec, Property, explore, space
from emqsim.tune import Candidate, Limits, Workload, longest_safe_outage, predict

FIXED = Candidate("lease", 10.0, 5.0, 5.0)  # EchoMQ's fixed-rate lease: renew on every 5 s tick
BULLMQ = Candidate("lease", 10.0, 2.5, 5.0, preset="bullmq")  # the README's recommendation
RTT = 0.002


def _kept(run) -> bool:
    return not any(e.kind == "expired" and e.token == "0:1" for e in run.lock_events)


def _space(c: Candidate, kind: str, offset: tuple[int, int], length: int, renew_phase: int | None = None):
    sp = space(
        c.policy(),
        [FaultSpec(kind, offset=offset, params={"length": (length, length)})],
        sweep_phases=False,
        duration=offset[1] / 1000 + 12,
        properties=[Property("kept", _kept, "the job's first lock never lapsed")],
    )
    if renew_phase is not None:
        sp = dataclasses.replace(sp, pinned={**sp.pinned, "renew.0": renew_phase})
    return sp


def lapses(c: Candidate, kind: str, offset_ms: int, length_ms: int, renew_phase: int | None = None) -> bool:
    """One run: does a fault of `length_ms` starting `offset_ms` into the job lapse its lock?"""
    return not _kept(_space(c, kind, (offset_ms, offset_ms), length_ms, renew_phase).run(()))


def lapses_anywhere(
    c: Candidate, kind: str, offsets: tuple[int, int], length_ms: int, renew_phase=None
) -> bool:
    """explore along every offset (1 ms apart) of the window: does any lapse the lock?"""
    result = explore(_space(c, kind, offsets, length_ms, renew_phase), ties=False)
    return result.counts["kept"] < offsets[1] - offsets[0] + 1


def _predicted(c: Candidate) -> dict:
    w = Workload(duration=Fixed(30.0), rtt=Fixed(RTT))
    predict(c, w, Limits(), np.array([1.0]))
    return c.predicted


def test_first_renewal_gap_closed_form():
    assert analytic.first_renewal_gap(FIXED.policy().renewal, rtt=RTT) == pytest.approx(5.002)
    assert analytic.first_renewal_gap(BULLMQ.policy().renewal, rtt=RTT) == pytest.approx(5.004)


def test_fixed_rate_pause_in_steady_state_follows_lease_minus_B():
    """Steady state (explore's window after the first renewal): a pause of L - B never lapses the lock, a
    longer one can; the rule u + pause > lease holds at a renewal's reply in flight too."""
    p = _predicted(FIXED)
    assert p["pause_safe_up_to"] == pytest.approx(5.0)
    window = (5000, 10000)  # the job starts at 2 ms, renews at 5000 ms (sent) and every 5 s after
    assert not lapses_anywhere(FIXED, "freeze", window, 5000)
    # the longest u in the default same-ms order is B - 1 ms (at 9999 ms; the 10000 ms tick goes first), so
    # 5.002 s lapses there; a fault ordered before a tick in its ms (u = B) makes 5.001 s lapse too
    assert lapses(FIXED, "freeze", 9997, 5002) and not lapses(FIXED, "freeze", 9997, 5001)
    # explore's search assumes no lapse narrower than its step hides between samples: the ms around each
    # renewal's send, where u is largest, one by one
    assert not any(lapses(FIXED, "freeze", t - 2, 5000) for t in range(9990, 10006))
    # a pause starting with the renewal sent at 10000 ms still on the wire (u = 1, 2 ms): the plain rule
    for u in (1, 2, 3):
        t = 10000 + u
        assert lapses(FIXED, "freeze", t - 2, 10000 - u + 1) and not lapses(FIXED, "freeze", t - 2, 10000 - u)


def test_fixed_rate_pause_before_the_first_renewal_uses_the_first_renewal_gap():
    """A tick exactly at the job's start does not renew it (age 0): the first renewal is sent a tick later,
    G = tick + rtt after the take was sent, and a pause of L - G + 2 ms at the last ms before it lapses."""
    p = _predicted(FIXED)
    assert p["pause_safe_up_to_first"] == pytest.approx(4.998)
    phase = 2  # the worker's tick lands on the job's start (2 ms: the take was sent at 0)
    assert lapses(FIXED, "freeze", 4999, 5000, phase)  # u = 5001 ms: 5001 + 5000 > 10000
    assert not lapses(FIXED, "freeze", 4999, 4999, phase)
    assert lapses(FIXED, "freeze", 4999, round(1000 * p["pause_safe_up_to_first"]) + 2, phase)
    # never below the stated threshold, anywhere before the first renewal
    assert not lapses_anywhere(FIXED, "freeze", (0, 5000), round(1000 * p["pause_safe_up_to_first"]), phase)
    assert not any(lapses(FIXED, "freeze", t - 2, 4998, phase) for t in range(4994, 5006))


def test_bullmq_pause_at_a_reply_in_flight_counts_one_tick_longer():
    """BullMQ's lock manager sleeps a tick after it reads a renewal's reply: a pause that starts while the
    reply is on its way delays the next renewal by that tick, so u + tick + pause > lease lapses it."""
    # renewals sent at 5000 and 7502 ms (job start 4 ms); the 7502 reply arrives at 7504
    t, u, tick = 7504, 2, 2500
    assert lapses(BULLMQ, "freeze", t - 4, 10000 - u - tick + 1)
    assert not lapses(BULLMQ, "freeze", t - 4, 10000 - u - tick)
    # a ms later the reply was read: the plain rule again
    assert not lapses(BULLMQ, "freeze", t - 3, 10000 - (u + 1))
    assert lapses(BULLMQ, "freeze", t - 3, 10000 - (u + 1) + 1)
    # and the steady-state threshold L - B (B = tick + rtt) is still the shortest pause that can lapse it
    p = _predicted(BULLMQ)
    assert p["pause_safe_up_to"] == pytest.approx(7.498)
    assert not lapses_anywhere(BULLMQ, "freeze", (5000, 12503), 7498)
    assert not any(lapses(BULLMQ, "freeze", t - 4, 7498) for t in range(7497, 7510))
    assert lapses(BULLMQ, "freeze", 7500, 7499)  # u = 2 at the reply in flight: 2 + 2500 + 7499 > 10000


def test_bullmq_pause_before_the_first_renewal():
    """BullMQ renews a job only once it is older than a tick: the first renewal can come two ticks after the
    start, so pauses far shorter than L - B lapse a young job (issue 28: stated 7.5 s, lapsed near 5 s)."""
    p = _predicted(BULLMQ)
    assert p["pause_safe_up_to_first"] == pytest.approx(4.996)
    phase = 4  # a tick at the job's start (4 ms): not due at 2504 (age 2500), renewed at 5004
    assert lapses(BULLMQ, "freeze", 4999, 5000, phase)  # u = 5001 (the take was sent at 2 ms)
    assert not lapses(BULLMQ, "freeze", 4999, 4999, phase)
    assert not lapses_anywhere(BULLMQ, "freeze", (0, 5000), round(1000 * p["pause_safe_up_to_first"]), phase)
    assert not any(lapses(BULLMQ, "freeze", t - 4, 4996, phase) for t in range(4996, 5008))


def test_outage_loses_a_renewal_sent_within_half_a_round_trip():
    """Issue 28: lease 10 / beat 5 said an outage "longer than 5 s can lapse it"; a 4.001 s outage that starts
    1 ms after a renewal was sent does (the renewal is lost: u = B + h)."""
    p = _predicted(FIXED)
    assert p["outage_safe_up_to"] == pytest.approx(4.0)
    assert analytic.reconnect_time(4.001) == 5.0 and analytic.reconnect_time(4.0) == 4.0
    assert lapses(FIXED, "outage", 9999, 4001)  # starts at 10001 ms; the 10000 ms renewal is lost
    assert not lapses(FIXED, "outage", 9999, 4000)
    assert not lapses_anywhere(FIXED, "outage", (5000, 10000), 4000)
    assert not any(lapses(FIXED, "outage", t - 2, 4000) for t in range(9995, 10006))
    assert p["outage_safe_up_to_first"] == longest_safe_outage(10.0 - 5.002 - 0.001)


def test_lost_renewals_and_detection_before_the_first_renewal():
    p = _predicted(BULLMQ)
    assert p["losses_to_lapse_first"] <= analytic.losses_to_lapse(10.0, BULLMQ.policy().renewal, rtt=RTT)
    assert p["detection_lo_first"] == pytest.approx(p["detection_lo"] - (5.004 - 2.502))


# -- messages: the unit, the binding limit, and what cannot be certified -----------------------------------------
def _cli_error(capsys, argv: list[str]) -> str:
    from emqsim.cli import main

    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["tune", *argv]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_a_zero_false_reclaim_limit_is_refused_in_its_own_unit(capsys):
    err = _cli_error(capsys, ["--max-false-reclaims", "0"])
    assert "false reclaims per job" in err and "seconds" not in err
    assert "exactly 0" in err
    err = _cli_error(capsys, ["--max-requests", "0"])
    assert "Redis requests per second" in err and "seconds" not in err


def test_a_limit_the_budget_cannot_certify_is_refused_before_any_run(capsys):
    """Issue 28: 0.002 false reclaims per job with 30 runs of 100 jobs (2 per worker) and two limits: zero
    events still bound the rate at 0.00246, so no setting could ever be decided; say so, with the runs."""
    from emqsim.errors import ConfigError
    from emqsim.tune import SearchSpace, check_certifiable, tune, zero_event_bound

    limits = Limits(false_reclaims=0.002, requests_per_s=5.0)
    w = Workload()
    assert zero_event_bound(w, limits, 30, limits.level) == pytest.approx(-np.log(0.025) * 2 / 3000)
    err = _cli_error(capsys, ["--max-false-reclaims", "0.002", "--max-requests", "5", "--quiet"])
    assert "0.002 false reclaims per job cannot be shown with 30 runs" in err
    assert "--max-replications 37" in err and "0.00246" in err
    # the runs it names are enough
    check_certifiable(w, limits, 37, limits.level, "max_replications")
    with pytest.raises(ConfigError, match="verify_max"):
        tune(w, limits, SearchSpace(max_replications=40), verify=3)
    # per hour: the exposure is the horizon
    hourly = Limits(false_reclaims=0.001, false_reclaims_per="hour")
    with pytest.raises(ConfigError, match="per hour cannot be shown"):
        check_certifiable(w, hourly, 30, hourly.level, "max_replications")


def test_nothing_feasible_names_the_binding_limit():
    from emqsim.tune import binding_causes

    a = Candidate("lease", 5.0, 1.25, 1.0, preset="bullmq", status="pruned")
    a.reason = "closed form: sweeps alone send 4.4 requests/s > budget 2"
    b = Candidate("lease", 10.0, 2.5, 5.0, preset="bullmq", status="fails")
    b.reason = "Redis requests/s 2.3 [2.2, 2.4] is over the limit 2"
    c = Candidate("lease", 20.0, 5.0, 5.0, preset="bullmq", status="open")
    c.reason = "undecided after 30 replications: false reclaims per job 0.001 [0, 0.012] vs limit 0.01"
    lines = binding_causes([a, b, c, Candidate("timeout", scan=5.0, timeout=600.0, status="fails")])
    assert lines[0].startswith("2 lease setting(s) ruled out by the Redis budget: e.g. lease 5 s")
    assert lines[1].startswith("1 lease setting(s) undecided at the budget")
    assert len(lines) == 2
