"""Why the settings came out as they did: what ruled the leases out, and what would change the answer."""

from __future__ import annotations

from collections.abc import Sequence

from emqsim import analytic
from emqsim.tune.candidates import Candidate, _typical_rtt
from emqsim.tune.measure import objective
from emqsim.tune.results import TuneResult


def binding_causes(candidates: Sequence[Candidate]) -> list[str]:
    """Why the lease settings were ruled out, by limit: how many each limit ruled out (closed form or
    simulated) and how many stayed undecided at the budget, with an example of each."""
    kinds = {
        "false reclaims": "the false-reclaim limit",
        "detection": "the detection limit",
        "requests": "the Redis budget",
    }
    counts: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.kind != "lease" or c.status not in ("pruned", "fails", "open", "undecided"):
            continue
        if c.status in ("pruned", "fails"):
            text = c.reason.lower()
            key = next((v for k, v in kinds.items() if k in text), "another limit")
        else:
            key = "undecided at the budget (an interval still straddles a limit)"
        counts.setdefault(key, []).append(c)
    out = []
    for key, cs in sorted(counts.items(), key=lambda kv: -len(kv[1])):
        example = cs[0]
        why = f": e.g. {example.label()}, {example.reason}" if example.reason else ""
        label = key if key.startswith("undecided") else f"ruled out by {key}"
        out.append(f"{len(cs)} lease setting(s) {label}{why}")
    return out


def what_would_change(r: TuneResult) -> list[str]:
    """Closed-form thresholds and data-driven alternatives around the recommendation."""
    best = r.recommended
    if best is None:
        return ["no lease setting was decided feasible: loosen a limit, widen the search space or raise "
                "max_replications", *binding_causes(r.candidates)]  # fmt: skip
    w, limits = r.workload, r.limits
    p = best.predicted
    safe, first = p["pause_safe_up_to"], p["pause_safe_up_to_first"]
    assert safe is not None and first is not None  # predicted for every lease candidate
    rule = best.policy().renewal
    assert rule is not None  # the recommendation is a lease
    rtt = _typical_rtt(w.rtt)
    reply = (
        f"; a pause that starts while a renewal's reply is on its way counts one tick "
        f"({rule.tick_ms / 1000:g} s) longer (the lock manager sleeps a tick after reading the reply)"
        if rule.after_reply
        else ""
    )
    out = [
        f"a pause (GC, blocked event loop) longer than {safe:g} s can lapse this lease ({first:g} s before a "
        f"job's first renewal), and one longer than {best.lease:g} s always does: it lapses iff u + pause > "
        f"lease, u = time since the worker sent the request that last set the lock (the take counts){reply}; "
        f"your pauses exceed {safe:g} s with probability {w.pause_length.survival(safe):.2g} and {first:g} s "
        f"with {w.pause_length.survival(first):.2g}"
    ]
    k = analytic.losses_to_lapse(best.lease_s, rule, rtt=rtt, command_timeout=w.command_timeout)
    k0 = p["losses_to_lapse_first"]
    out.append(
        f"{k} renewals lost in a row lapse it ({k0:g} for a job's first renewals); at loss {w.loss:g} per "
        f"renewal that is {w.loss**k:.2g} per renewal window"
    )
    out.append(
        f"a connection outage longer than {p['outage_safe_up_to']:g} s can lapse it "
        f"({p['outage_safe_up_to_first']:g} s before a job's first renewal): it lapses iff u + R > lease, R = "
        f"when BullMQ's reconnect backoff brings the client back, u = time since the last renewal "
        f"that reached Redis was sent (one sent within half a round trip of the outage is lost); "
        + (
            f"your outages exceed that with probability {w.outage_length.survival(p['outage_safe_up_to'] or 0.0):.2g}"
            if w.outage_rate > 0
            else "no outages were given (--outage-rate)"
        )
    )
    lo = min(p["detection_lo"] or 0.0, p["detection_lo_first"] or 0.0)
    out.append(
        f"a crash is detected {lo:.4g} to {p['detection_hi']:.4g} s later ({p['detection_lo']:.4g} s at the "
        f"soonest once a job has renewed; closed form, mean "
        f"{'' if p['detection_mean_exact'] else 'at least '}{p['detection_mean']:.2f} s): a detection limit "
        f"below {lo:.4g} s needs a shorter lease"
    )
    sims = [c for c in r.candidates if c.kind == "lease" and c.metrics and c is not best]
    req = best.metrics["requests_per_s"].value or 0.0
    cheaper = [
        c for c in sims if c.status in ("feasible",) and (c.metrics["requests_per_s"].value or 0.0) < req
    ]
    if cheaper:
        alt = min(cheaper, key=lambda c: objective(c, limits))
        out.append(
            f"a Redis budget under {req:.3g} requests/s rules this out; the best decided-feasible setting under it "
            f"was {alt.label()} ({alt.metrics['requests_per_s'].value:.3g} req/s, detection "
            f"{limits.detection_stat} {objective(alt, limits):.3g} s)"
        )
    fails = [c for c in sims if c.status == "fails" and objective(c, limits) < objective(best, limits)]
    if fails:
        alt = min(fails, key=lambda c: objective(c, limits))
        out.append(
            f"a looser limit would allow faster detection: {alt.label()} was ruled out because {alt.reason}"
        )
    t = r.timeout.best
    if t is not None:
        out.append(
            f"the best fixed timeout ({t.timeout:g} s) detects a crash after up to {t.timeout:g} s and falsely "
            f"reclaims every job that runs longer (P(duration > {t.timeout:g} s) = {w.duration.survival(t.timeout_s):.2g})"
        )
    return out
