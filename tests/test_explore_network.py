"""`explore` with the network settings whose timing matters (issue 25): `Network(max_retries_per_request=n)`
(ioredis rejects the commands waiting at its queue flushes during an outage: a finish is failed or lost) and
`Network(resend_twice=True)` (a command whose reply a drop caught runs again: a finish's copy is refused and
the job its fetchNext took is orphaned). Each is checked against its closed form at every explored timing:
`faults.finish_fate` and `Client.resent_at`."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from emqsim.cli.app import main
from emqsim.client import Client
from emqsim.errors import ConfigError
from emqsim.explore import (
    NO_DUPLICATE_EXECUTION,
    NO_FINISH_LOST,
    FaultSpec,
    Property,
    default_properties,
    explore,
    space,
)
from emqsim.faults import finish_fate, reconnect_after_ms
from emqsim.presets import preset
from emqsim.records import COMPLETED, FAILED, FINISH_REJECTED, Run

RTT_MS = 10  # a round trip long enough for a reply to be caught on its way back (5 ms each way)
DURATION_MS = 1000  # the job's work: its finish is sent at 1.02 s


def _drop(run: Run) -> int | None:
    """When worker 0's connection dropped (ms), if it did."""
    return next(
        (round(e.time * 1000) for e in run.worker_events if e.worker == 0 and e.kind == "disconnect"), None
    )


def _fate(run: Run) -> str:
    """What became of job 0's first finish: "waits" (completed once), "failed" or "lost" (it ran again)."""
    first, *again = [a for a in run.attempts if a.job == "0"]
    if first.outcome == COMPLETED and not again:
        return "waits"
    if first.outcome == FAILED and not again:
        return "failed"
    if first.outcome == FINISH_REJECTED and [a.outcome for a in again] == [COMPLETED]:
        return "lost"
    return f"unexpected {[a.outcome for a in (first, *again)]}"


def _closed_form(n: int, sent: int, drop: int, down: int) -> str:
    """`finish_fate` for a finish sent at `sent` (ms) and a drop at `drop` lasting `down`: a finish that
    reached Redis before the drop has run (its record stays completed, whatever ioredis does with the
    reply); one on the wire is `sent_ms` -1; one sent at or after the drop waits in the offline queue."""
    if sent + RTT_MS // 2 < drop:
        return "waits"
    if sent < drop:
        return finish_fate(n, down)
    return finish_fate(n, down, sent - drop)


@dataclass(frozen=True)
class _MeetsFinishFate:
    n: int

    def __call__(self, run: Run) -> bool:
        drop = _drop(run)
        if drop is None:  # every job settled before the drop: the finish was read before it
            return _fate(run) == "waits" and run.ended_by == "done"
        first = run.attempts[0]
        assert first.job == "0" and first.worker == 0 and first.finished_at is not None
        sent = round(first.finished_at * 1000)
        outages = _outages(run)
        if not outages:  # the run settled while the connection was down: only if the finish ran before it
            return _fate(run) == "waits" and sent + RTT_MS // 2 < drop
        return _fate(run) == _closed_form(self.n, sent, drop, round(outages[0] * 1000))


def _outages(run: Run) -> list[float]:
    """Each of worker 0's outages' lengths (s): disconnect -> network back."""
    ups = [e.time for e in run.worker_events if e.worker == 0 and e.kind == "network_up"]
    downs = [e.time for e in run.worker_events if e.worker == 0 and e.kind == "disconnect"]
    return [u - d for d, u in zip(downs, ups, strict=False)]


def _finish_sent_ms(sp) -> int:  # type: ignore[no-untyped-def]
    """The finish's send time (ms): the same at every point, the drop coming after the job's start."""
    run = sp.run(tuple(d.lo for d in sp.dims))
    return round(run.attempts[0].finished_at * 1000)


ORDER = ("waits", "failed", "lost")


def _count_fates(n: int, sent: int, drops: tuple[int, int], lengths: tuple[int, int]) -> dict[str, int]:
    """How many (drop, length) points of the ranges have each fate, by the closed form. For one drop the
    fate only worsens with the length (the reconnect comes later, past more flushes), so each drop's two
    thresholds are found by bisection (checked at both sides) instead of calling `finish_fate` per point."""
    counts = dict.fromkeys(ORDER, 0)
    for drop in range(drops[0], drops[1] + 1):
        rank = [lengths[0]]  # the first length of each fate from the second on
        for worse in ORDER[1:]:
            lo, hi = rank[-1], lengths[1] + 1  # the first length at least as bad as `worse`, in lo..hi
            while lo < hi:
                mid = (lo + hi) // 2
                if ORDER.index(_closed_form(n, sent, drop, mid)) >= ORDER.index(worse):
                    hi = mid
                else:
                    lo = mid + 1
            rank.append(lo)
        rank.append(lengths[1] + 1)
        for i, fate in enumerate(ORDER):
            if rank[i + 1] > rank[i]:
                first, last = max(rank[i], lengths[0]), rank[i + 1] - 1
                assert _closed_form(n, sent, drop, first) == _closed_form(n, sent, drop, last) == fate
            counts[fate] += max(0, rank[i + 1] - max(rank[i], lengths[0]))
    return counts


@pytest.mark.parametrize(
    ("n", "around"),
    [
        (0, 0),  # the disconnect's own flush: on the wire, at Redis, sent in the drop's ms
        (0, 1000),  # a finish sent in the second flush's millisecond waits for the third
        (
            1,
            0,
        ),  # n = 1: the first flush is the first failed reconnect attempt's (1 s), then the third's (3 s)
        (1, 1000),
    ],
)
def test_max_retries_explore_meets_finish_fate(n: int, around: int) -> None:
    """Every outage offset (finish sent from 15 ms before the drop to 15 ms after `around`) and length: the
    finish is lost, failed or waits exactly where `finish_fate` says (checked at every point by a property,
    and counted), and explore's properties say so: a lost finish runs the job twice, a failed one is lost
    work too."""
    policy = preset("bullmq")
    probe = space(
        policy,
        [FaultSpec("outage", offset=(500, 500), params={"length": (900, 900)})],
        duration=2 * DURATION_MS / 1000,
        rtt=RTT_MS / 1000,
        sweep_phases=False,
        max_retries_per_request=n,
    )  # fmt: skip  (2 s of work: a drop 1 s before the finish comes after the job's start)
    sent = _finish_sent_ms(probe)
    lengths = (900, 3100)  # each fate, for n = 0 and 1
    drops = (sent - around - 15, sent - around + 15)
    offsets = (drops[0] - RTT_MS, drops[1] - RTT_MS)  # the space places the drop at start (one rtt) + offset
    agrees = Property("meets_finish_fate", _MeetsFinishFate(n))
    sp = space(
        policy, [FaultSpec("outage", offset=offsets, params={"length": lengths})],
        duration=2 * DURATION_MS / 1000, rtt=RTT_MS / 1000, sweep_phases=False, max_retries_per_request=n,
        properties=[*default_properties(executions=True), agrees],
    )  # fmt: skip
    result = explore(sp, ties=False)
    assert result.counts["meets_finish_fate"] == result.points
    fates = _count_fates(n, sent, drops, lengths)
    assert result.points == sum(fates.values())
    assert result.points - result.counts["no_duplicate_execution"] == fates["lost"]
    assert result.points - result.counts["no_finish_lost"] == fates["lost"] + fates["failed"]
    assert (
        result.points - result.counts["live_never_reclaimed"] == fates["lost"]
    )  # reclaimed from a live worker
    assert result.counts["no_job_lost"] == result.counts["no_duplicate_completion"] == result.points
    assert result.reclaimed == fates["lost"]  # a failure the worker sent (moveToFailed) is not a reclaim
    assert fates["failed"] and fates["waits"] and fates["lost"]


@dataclass(frozen=True)
class _MeetsResentAt:
    """The job job 0's finish took (fetchNext) is orphaned (reclaimed from a live worker without ever
    starting) iff `Client.resent_at` says a drop caught the finish's reply."""

    def __call__(self, run: Run) -> bool:
        first = run.attempts[0]
        drop = _drop(run)
        if drop is None:  # every job settled before the drop
            return run.ended_by == "done" and all(a.outcome == COMPLETED for a in run.attempts)
        assert first.job == "0" and first.finished_at is not None
        outages = _outages(run)
        if not outages:  # the run settled while the connection was down: nothing was caught
            return all(a.outcome == COMPLETED for a in run.attempts)
        back = drop + reconnect_after_ms(round(outages[0] * 1000))
        caught = Client.resent_at(round(first.finished_at * 1000), RTT_MS, [(drop, back, back)]) is not None
        orphans = [
            a for a in run.attempts
            if a.started_at is None and a.worker_state_at_reclaim == "alive" and a.taken_at == first.finish_applied_at
        ]  # fmt: skip
        return caught == bool(orphans)


def test_resend_twice_explore_meets_the_catch_window() -> None:
    """A drop catching the finish's reply (after it ran at Redis, before it is read: the `Client.resent_at`
    window, 5 ms at a 10 ms round trip) orphans the job the finish's fetchNext took: a false reclaim at every
    length, and nowhere else; without resend_twice the same space holds everywhere."""
    policy = preset("bullmq")
    offsets, lengths = (1000, 1030), (500, 1500)
    faults = [FaultSpec("outage", offset=offsets, params={"length": lengths})]
    common = {"duration": DURATION_MS / 1000, "rtt": RTT_MS / 1000, "sweep_phases": False}
    sp = space(
        policy, faults, resend_twice=True,
        properties=[*default_properties(executions=True), Property("meets_resent_at", _MeetsResentAt())],
        **common,  # type: ignore[arg-type]
    )  # fmt: skip
    assert sp.jobs == 3
    result = explore(sp, ties=False)
    assert result.counts["meets_resent_at"] == result.points
    sent = _finish_sent_ms(sp)
    caught = []
    for offset in range(offsets[0], offsets[1] + 1):
        drop = RTT_MS + offset
        back = drop + reconnect_after_ms(lengths[0])
        if Client.resent_at(sent, RTT_MS, [(drop, back, back)]) is not None:
            caught.append(offset)
    assert caught == list(range(caught[0], caught[0] + RTT_MS // 2))  # after it ran, until its reply is read
    failing = result.points - result.counts["live_never_reclaimed"]
    assert failing == len(caught) * (lengths[1] - lengths[0] + 1)
    (c,) = [c for c in result.counterexamples if c.property == "live_never_reclaimed"]
    assert c.point["fault0.offset"] == caught[0] and c.point["fault0.length"] == lengths[0]
    assert result.counts["no_duplicate_execution"] == result.counts["no_finish_lost"] == result.points
    plain = explore(space(policy, faults, **common), ties=False)  # type: ignore[arg-type]
    assert plain.violated() == [] and plain.space.jobs == 1


def test_network_settings_refused_where_they_change_nothing() -> None:
    policy = preset("bullmq")
    for kind, params in (("crash", {}), ("freeze", {"length": (1, 2)})):
        with pytest.raises(ConfigError, match="resend_twice: it acts only on a dropped connection"):
            space(policy, [FaultSpec(kind, params=params)], resend_twice=True)
    with pytest.raises(ConfigError, match="silent partition"):
        space(policy, [FaultSpec("partition", params={"length": (1, 2)})], max_retries_per_request=0)
    with pytest.raises(ConfigError, match="max_retries_per_request"):
        space(policy, [FaultSpec("outage", params={"length": (1, 2)})], max_retries_per_request=-1)
    assert [p.name for p in default_properties(executions=True)][-2:] == [
        NO_DUPLICATE_EXECUTION.name,
        NO_FINISH_LOST.name,
    ]


def test_cli_explore_with_max_retries_and_resend(capsys) -> None:  # type: ignore[no-untyped-def]
    args = [
        "explore", "--preset", "bullmq", "--duration", "1", "--rtt", "0.01", "--pin-sweeps", "--no-ties",
        "--quiet", "--fault", "outage,length=0.9:2.1,offset=0.995:1.02",
    ]  # fmt: skip
    assert main([*args, "--max-retries-per-request", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["network"] == {"resend_twice": False, "max_retries_per_request": 0} and out["jobs"] == 1
    assert out["properties"]["no_duplicate_execution"]["fails_at"] > 0
    assert "no_duplicate_execution" in out["counterexamples"]
    assert main([*args, "--resend-twice"]) == 0
    text = capsys.readouterr().out
    assert "network: a command whose reply a drop caught runs twice (resend_twice; 3 jobs)" in text
    assert "no_duplicate_execution       holds everywhere" in text
    # the catch window: the drop 1.026 .. 1.030 s (offset + rtt), after the finish ran, until its reply is read
    assert "live_never_reclaimed         FAILS at 6,005 timings" in text  # 5 offsets x 1,201 lengths
    assert (
        "smallest counterexample of live_never_reclaimed: fault0.length 0.9 s, fault0.offset 1.016 s" in text
    )
    for bad, why in (
        (["--fault", "crash", "--resend-twice"], "--resend-twice: it acts only on a dropped connection"),
        (["--fault", "partition,length=1", "--max-retries-per-request", "0"], "silent partition"),
    ):
        assert main(["explore", "--quiet", *bad]) == 2
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        main(["explore", "--fault", "outage,length=1", "--max-retries-per-request", "-1"])
    assert exc.value.code == 2
    assert "must be >= 0" in capsys.readouterr().err


def test_a_redis_restart_meets_the_same_fates_as_an_outage_of_the_workers_connection() -> None:
    """A restart drops every client, the job's worker's too: with maxRetriesPerRequest 0 its finish is lost,
    failed or waits at exactly as many timings as under an outage of that worker's connection alone, and
    with null (the default) nothing fails."""
    policy, length = preset("bullmq"), {"length": (900, 3100)}
    common = {"duration": 2 * DURATION_MS / 1000, "rtt": RTT_MS / 1000, "sweep_phases": False}
    counts = {}
    for kind in ("outage", "restart"):
        fault = FaultSpec(kind, offset=(1995, 2025), params=length)
        result = explore(space(policy, [fault], max_retries_per_request=0, **common), ties=False)  # type: ignore[arg-type]
        counts[kind] = result.counts
    assert counts["restart"] == counts["outage"]
    assert counts["outage"]["no_finish_lost"] < counts["outage"]["no_duplicate_execution"] < 31 * 2201
    fault = FaultSpec("restart", offset=(1995, 2025), params=length)
    assert explore(space(policy, [fault], **common), ties=False).violated() == []  # type: ignore[arg-type]
