"""The trusted side of grading, without a kernel: what may cross from the student's process (bounded plain
data, emqsim's own result types rebuilt from their fields, proxies), what the student's code may reach of the
grader's objects, and the static own-work check that reads the answer cells."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from emqsim import Detector, LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.grading import folder_student, sandbox_env, student_id, student_seed, written_in_notebook
from emqsim.grading.agent import Agent
from emqsim.grading.checks import run_trusted_checks, trusted_context
from emqsim.grading.trusted import Channel, RemoteError, RemoteFunction, RemotePolicy
from emqsim.grading.wire import MAX_INT_BITS, WireError, check_shape
from emqsim.protocol import SweepReply
from emqsim.watchdog import DetectorBlocked

ROOT = Path(__file__).resolve().parents[1]


def _channel() -> Channel:
    a, _ = socket.socketpair()
    return Channel(a)


@pytest.mark.parametrize(
    "value, why",
    [
        ({"$dc": "os:system", "f": {}}, "result types"),
        ({"$dc": "emqsim.grading.checks:TrustedVerdict", "f": {"ok": True, "message": "x"}}, "result types"),
        ({"$dc": "emqsim.protocol:SweepReply", "f": {"skipped": False, "bogus": 1}}, "unknown fields"),
        ({"$frac": [1, 0]}, "fraction"),
        ({"$frac": [1.5, 2]}, "fraction"),
        ({"$pol": "LeasePolicy", "state": {"$d": [["lease_ms", "30"]]}}, "must be a int"),
        ({"$pol": "LeasePolicy", "state": {"$d": [["code", 1]]}}, "unknown settings"),
        ({"$pickle": "gASV"}, "unknown value"),
        ({"$d": [[[1, 2], 3]]}, "hashable"),
    ],
)
def test_the_grader_refuses_what_is_not_plain_data(value, why):
    with pytest.raises(WireError, match=why):
        _channel().decode(value)


def test_numbers_fractions_and_results_cross_as_values():
    channel = _channel()
    assert channel.decode({"$frac": [55, 2]}) == Fraction(55, 2)
    assert channel.decode({"$t": [1, 2.5, "x", None, True]}) == (1, 2.5, "x", None, True)
    reply = channel.decode(
        {"$dc": "emqsim.protocol:SweepReply", "f": {"skipped": False, "reclaimed": {"$t": ["1"]}}}
    )
    assert reply == SweepReply(skipped=False, reclaimed=("1",))
    policy = channel.decode(Agent(None, {}).encode(LeasePolicy(40, 5, 5)))  # type: ignore[arg-type]
    assert type(policy) is LeasePolicy and vars(policy) == vars(LeasePolicy(40, 5, 5))
    timeout = channel.decode(Agent(None, {}).encode(TimeoutPolicy(60, fenced=True)))  # type: ignore[arg-type]
    assert type(timeout) is TimeoutPolicy and vars(timeout) == vars(TimeoutPolicy(60, fenced=True))


def test_the_agent_converts_numpy_and_hands_out_handles():
    import numpy as np

    agent = Agent(None, {})  # type: ignore[arg-type]
    assert agent.encode(np.float32(1.5)) == 1.5 and type(agent.encode(np.int64(3))) is int
    assert agent.encode(np.bool_(True)) is True
    assert agent.encode(Fraction(1, 3)) == {"$frac": [1, 3]}
    assert "$fn" in agent.encode(len) and "$cls" in agent.encode(dict)


def test_message_shape_is_bounded():
    with pytest.raises(WireError, match="bits"):
        check_shape({"x": 1 << (MAX_INT_BITS + 1)})
    deep: list = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(WireError, match="deeper"):
        check_shape({"x": deep})


def _pair(namespace: dict) -> tuple[Channel, threading.Thread]:
    """A grader's channel to an agent serving `namespace` in a thread (the kernel's part, without a kernel)."""
    ours, theirs = socket.socketpair()
    agent = Agent(theirs, namespace)
    thread = threading.Thread(target=agent.loop, daemon=True)
    thread.start()
    return Channel(ours, call_timeout=20), thread


def test_calls_cross_the_boundary_and_replies_are_checked():
    class Detector(__import__("emqsim").ReclaimPolicy):
        def __init__(self):
            self.renewal = None
            self.sweep_interval_ms = 1000

        def suspect(self, job_id, now_ms):
            return "yes"  # not a bool

        def take(self, queue, token, now_ms):
            return queue.take(token, now_ms, lock_ms=None)

    namespace = {"f": lambda x: [x, x * 2], "Detector": Detector, "n": 3}
    channel, _ = _pair(namespace)
    f = channel.lookup("f")
    assert isinstance(f, RemoteFunction) and f(Fraction(1, 2)) == [Fraction(1, 2), Fraction(1)]
    assert channel.lookup("n") == 3
    cls = channel.lookup("Detector")
    made = cls()
    assert isinstance(made, RemotePolicy) and made.sweep_interval_ms == 1000
    with pytest.raises(RemoteError, match="True or False"):
        made.suspect("1", 5)
    with pytest.raises(RemoteError, match="NameError"):
        channel.lookup("missing")
    channel.close()


def test_the_students_code_reaches_only_public_methods_of_the_graders_queue():
    from emqsim.keys import QueueKeys
    from emqsim.protocol import Queue
    from emqsim.store.keystore import KeyStore

    def probe(queue):
        found = {"take": queue.take("t", 0, lock_ms=None)}
        for name in ("_commands", "store.on_ttl", "__class__"):
            try:
                target = queue
                for part in name.split("."):
                    target = getattr(target, part)
                found[name] = repr(target)
            except Exception as exc:
                found[name] = type(exc).__name__
        return found

    channel, _ = _pair({"probe": probe})
    queue = Queue(KeyStore(lambda: 0), QueueKeys("q"))
    queue.add("0")
    got = channel.lookup("probe")(queue)
    assert got["take"] == "0"
    assert got["_commands"] == "AttributeError" and got["__class__"] != repr(Queue)
    assert got["store.on_ttl"] in ("RuntimeError", "None") or "refused" in got["store.on_ttl"]
    channel.close()


def test_a_types_methods_cross_once_and_its_later_objects_still_have_them(monkeypatch):
    """A policy's every step hands over its queue: the queue's (and its store's and keys') public methods go
    with the first handle of each type, later handles name the type by number, and the student's side still
    calls those methods directly (no attribute lookup first) and reads the attributes that change, sent
    afresh with each handle."""
    import emqsim.grading.trusted as trusted
    from emqsim.keys import QueueKeys
    from emqsim.protocol import Queue
    from emqsim.store.keystore import KeyStore

    def probe(queue):
        return [queue.take("t", 0, lock_ms=None), queue.store.commands_executed, sorted(queue.active_jobs())]

    sent: list[dict] = []
    real_send = trusted.send
    monkeypatch.setattr(
        trusted, "send", lambda sock, message: sent.append(message) or real_send(sock, message)
    )
    channel, _ = _pair({"probe": probe})
    served: list[tuple] = []
    real_perform = channel._perform
    monkeypatch.setattr(
        channel, "_perform", lambda m: served.append((m.get("op"), m.get("name"))) or real_perform(m)
    )
    function = channel.lookup("probe")
    first, second = (Queue(KeyStore(lambda: 0), QueueKeys(name)) for name in ("a", "b"))
    for queue, job, active in ((first, "1", ["1"]), (second, "2", ["2"]), (first, "3", ["1", "3"])):
        queue.add(job)
        count = queue.store.commands_executed  # as the handle carries it: read when the call is made
        assert function(queue) == [job, count, active]
    handles = [m["args"][0] for m in sent if m.get("op") == "call"]
    assert len(handles) == 3 and "methods" in handles[0] and "methods" in handles[0]["attrs"]["store"]
    assert all("methods" not in h and "methods" not in h["attrs"]["store"] for h in handles[1:])
    assert handles[0]["tid"] == handles[1]["tid"] == handles[2]["tid"]
    assert handles[0]["$tobj"] == handles[2]["$tobj"] != handles[1]["$tobj"]
    assert served == [("method", "take"), ("method", "active_jobs")] * 3
    channel.close()


class LearningDetector(Detector):
    """A student's detector of the usual shape: it keeps each job's heartbeat gaps and suspects a silence much
    longer than the recent ones."""

    def __init__(self, beat=10.0, scan=5.0):
        super().__init__(beat=beat, scan=scan, max_stalled=1)
        self.last: dict[str, float] = {}
        self.gaps: dict[str, list[float]] = {}

    def taken(self, job, now):
        self.last[job] = now

    def heartbeat(self, job, now):
        self.gaps.setdefault(job, []).append(now - self.last.get(job, now))
        self.last[job] = now

    def suspect(self, job, now):
        return now - self.last.get(job, now) > 2.5 * max([*self.gaps.get(job, [])[-5:], 10.0])


class SweepingItself(LearningDetector):
    """One that writes its own sweep (the library's, called back): that step is the student's to run."""

    def sweep(self, queue, now_ms):
        return super().sweep(queue, now_ms)


class Vague(LearningDetector):
    def suspect(self, job, now):
        return 1  # not a bool


class Sleepy(LearningDetector):
    answer_within = 0.5

    def suspect(self, job, now):
        time.sleep(30)
        return False


def _same_runs(first, second):
    return (first.attempts, first.lock_events, first.sweeps) == (
        second.attempts,
        second.lock_events,
        second.sweeps,
    )


def test_a_students_detector_runs_the_librarys_steps_here_and_is_asked_only_its_own(monkeypatch):
    """The engine steps a student's Detector leaves to the library run in the grader, on its own queue, and ask
    the student's object only `taken`, `heartbeat` and `suspect` (one round trip each, no call-backs); a step
    the student wrote still runs in the kernel. Either way the runs are those of the detector in one process,
    record for record."""
    import emqsim.grading.trusted as trusted

    sent: list[dict] = []
    real_send = trusted.send
    monkeypatch.setattr(
        trusted, "send", lambda sock, message: sent.append(message) or real_send(sock, message)
    )
    channel, _ = _pair({"LearningDetector": LearningDetector, "SweepingItself": SweepingItself})
    served: list[tuple] = []
    real_perform = channel._perform
    monkeypatch.setattr(
        channel, "_perform", lambda m: served.append((m.get("op"), m.get("name"))) or real_perform(m)
    )
    worlds = [
        standard("slow-alive", duration=900.0, workers=2),
        standard("fast-dead", die_after=1.0, duration=60.0, workers=2),
        standard("frozen", freeze_for=70.0, freeze_after=5.0, duration=40.0, workers=2),
    ]
    for name, local in (("LearningDetector", LearningDetector), ("SweepingItself", SweepingItself)):
        remote = channel.lookup(name)
        sent.clear()
        served.clear()
        for world in worlds:
            for replication in range(2):
                assert _same_runs(
                    simulate(world, remote(), seed=7, replication=replication),
                    simulate(world, local(), seed=7, replication=replication),
                ), (name, world.name, replication)
        asked = {m["name"] for m in sent if m.get("op") == "method"}
        if name == "LearningDetector":  # (settings: once a run, for its provenance)
            assert asked == {"taken", "heartbeat", "suspect", "settings"} and served == []
        else:  # its own sweep asks suspect in the kernel, and calls the queue back
            assert (
                asked == {"taken", "heartbeat", "sweep", "settings"} and ("method", "active_jobs") in served
            )
    channel.close()


def test_a_students_suspect_is_checked_as_in_one_process():
    channel, _ = _pair({"Vague": Vague})
    world = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
    with pytest.raises(TypeError) as local:
        simulate(world, Vague(), seed=1)
    with pytest.raises(TypeError) as remote:
        simulate(world, channel.lookup("Vague")(), seed=1)
    assert str(remote.value) == str(local.value) and "returned 1; it must return True or False" in str(
        local.value
    )
    channel.close()


def test_a_detector_that_outlasts_answer_within_stops_the_run_as_in_one_process():
    """The library's sweep run in the grader asks the student's `suspect` in the kernel within the detector's
    `answer_within`: a call that sleeps is interrupted there, and the run stops with the message the detector
    gives in one process; the connection stays usable for the next question."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the kernel's part, in a process that SIGINT interrupts as it does a kernel
        ours.close()
        try:
            Agent(theirs, {"Sleepy": Sleepy, "n": 3}).loop()
        finally:
            os._exit(0)
    theirs.close()

    def interrupt() -> bool:
        os.kill(pid, signal.SIGINT)
        return True

    channel = Channel(ours, call_timeout=20, interrupt=interrupt)
    try:
        world = standard("fast-dead", die_after=1.0, duration=60.0, workers=2)
        with pytest.raises(DetectorBlocked) as local:
            simulate(world, Sleepy(), seed=1)
        started = time.monotonic()
        with pytest.raises(DetectorBlocked) as remote:
            simulate(world, channel.lookup("Sleepy")(), seed=1)
        assert time.monotonic() - started < 10
        assert str(remote.value) == str(local.value)
        assert "was stopped after 0.5 s" in str(remote.value)
        assert channel.lookup("n") == 3 and not channel.broken
    finally:
        channel.close()
        os.waitpid(pid, 0)


def test_checks_run_here_with_the_graders_student_id(monkeypatch):
    monkeypatch.setenv("EMQSIM_STUDENT_ID", "mallory")
    channel, _ = _pair({"x": 1})
    verdicts = run_trusted_checks(
        channel,
        [("t1", ["x"], "from emqsim.grading import student_id\nassert student_id() == 'bob', student_id()"),
         ("t2", ["y"], "pass")],
        student="bob",
        answers={},
    )  # fmt: skip
    assert verdicts["t1"].ok, verdicts["t1"].message
    assert not verdicts["t2"].ok and "y not defined" in verdicts["t2"].message
    assert student_id() == "mallory"  # outside the checks, the process's own id again
    assert student_seed("a", "bob") == student_seed("a", "bob")
    channel.close()


@pytest.mark.parametrize(
    "source, ok",
    [
        ("def accept(a, b):\n    return a is None or b > a", True),
        ("import emqsim.fencing\n\ndef accept(a, b):\n    return emqsim.fencing.fenced(a, b)", False),
        ("from emqsim.fencing import fenced as f\n\ndef accept(a, b):\n    return f(a, b)", False),
        ("from emqsim.fencing import fenced as accept", False),
        ("def accept(a, b):\n    return True\n\naccept = __import__('emqsim.fencing').fencing.fenced", False),
        ("import emqsim.fencing as m\n\ng = m.fenced\n\ndef accept(a, b):\n    return g(a, b)", False),
        ("def accept(a, b):\n    return getattr(__import__('emqsim'), 'x')(a, b)", False),
    ],
)
def test_written_in_notebook_reads_the_answer_cells(source, ok):
    with trusted_context("bob", {"q5": source}):
        if ok:
            written_in_notebook("accept", forbidden=("fenced", "emqsim.fencing"))
        else:
            with pytest.raises(AssertionError):
                written_in_notebook("accept", forbidden=("fenced", "emqsim.fencing"))


def test_a_class_must_derive_from_the_named_base():
    with (
        trusted_context("bob", {"q1": "class D(LeasePolicy):\n    pass"}),
        pytest.raises(AssertionError, match="derive from ReclaimPolicy"),
    ):
        written_in_notebook("D", kind="class", base="ReclaimPolicy")
    with (
        trusted_context("bob", {"q1": "class D(ReclaimPolicy):\n    x = LeasePolicy"}),
        pytest.raises(AssertionError, match="LeasePolicy"),
    ):
        written_in_notebook("D", kind="class", base="ReclaimPolicy", forbidden=("LeasePolicy",))


def test_identity_comes_from_the_folder_layout_and_the_sandbox_has_no_grader_variables(
    tmp_path: Path, monkeypatch
):
    path = tmp_path / "autograded" / "alice" / "01-x" / "01-x.ipynb"
    assert folder_student(path) == "alice"
    assert folder_student(tmp_path / "x" / "01-x.ipynb") is None
    monkeypatch.setenv("EMQSIM_GRADING", "external")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    env = sandbox_env(tmp_path, "alice")
    assert env["HOME"] == str(tmp_path) and env["EMQSIM_STUDENT_ID"] == "alice"
    assert "EMQSIM_GRADING" not in env and "AWS_SECRET_ACCESS_KEY" not in env


def test_written_in_notebook_reads_through_cell_magics_that_run_python():
    with trusted_context(
        "bob", {"q2": "%%time\nfrom fractions import Fraction\n\n\ndef f(x):\n    return x"}
    ):
        written_in_notebook("f")


def test_reading_a_classs_annotations_is_not_taken_for_tampering():
    """Python 3.10+ creates an empty `__annotations__` on a class the first time it is read; the library's own
    argument checks may read it while the checks run (nbgrader's route failed every solution's later questions
    that way). A real change to a class is still seen."""
    from emqsim.distributions import Distribution
    from emqsim.grading import _changed, _snapshot

    snap = _snapshot()
    Distribution.__annotations__  # noqa: B018
    assert _changed(snap) is None
    Distribution.forged = True  # type: ignore[attr-defined]
    try:
        assert "Distribution" in (_changed(snap) or "")
    finally:
        del Distribution.forged  # type: ignore[attr-defined]


def test_reading_a_notebook_puts_off_the_iri_grammar_and_keeps_its_checks() -> None:
    """Reading a notebook does not build rfc3987_syntax's grammar (about 2 s of CPU per grading process), and
    jsonschema's `iri` format checks still give the real answers once something asks for them."""
    notebook = ROOT / "notebooks" / "assignments" / "01-detection-latency.ipynb"
    read = f"import sys\nfrom emqsim.grading.notebooks import _read\n_read({str(notebook)!r})\n"
    seen = "print('rfc3987_syntax.syntax_helpers' in sys.modules)\n"
    check = (
        "from jsonschema import FormatChecker\n"
        "checker = FormatChecker()\n"
        "cases = [('http://a/b?c#d', 'iri'), ('http://[x', 'iri'), ('a b', 'iri-reference'), ('../x', 'iri-reference')]\n"
        "print([checker.conforms(value, form) for value, form in cases])\n"
    )

    def run(code: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    deferred, answers = run(read + seen + check)
    assert deferred == "False"
    assert answers == run(check)[0] == "[True, False, False, True]"  # as without the stand-in


def test_a_detector_simulated_in_an_answer_cell_is_not_a_change_to_emqsim(tmp_path: Path) -> None:
    """Running a `Detector` starts the blocked-call watchdog (emqsim.watchdog), in an answer cell too: the
    checks' guard against answers that modify emqsim does not take that for a change, in a fresh process per
    test cell or in one process that forks at each."""
    nbformat = pytest.importorskip("nbformat")
    from emqsim.grading import run_checks, run_checks_in_order

    def cell(source: str, grade_id: str, **meta: Any) -> Any:
        made = nbformat.v4.new_code_cell(source)
        made.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": False, "grade_id": grade_id,
                                     "schema_version": 3, **meta}  # fmt: skip
        return made

    answer = (
        "from emqsim import Detector, simulate, standard\n"
        "class Never(Detector):\n"
        "    def suspect(self, job, now):\n"
        "        return False\n"
        "run = simulate(standard('fast-dead'), Never(), seed=1)\n"
    )
    nb = nbformat.v4.new_notebook(
        cells=[cell(answer, "q1", solution=True), cell("", "t1", grade=True, points=1)]
    )
    for index, made in enumerate(nb.cells):
        made.id = f"c{index}"
    path = tmp_path / "detector.ipynb"
    nbformat.write(nb, path)
    checks = "assert run.jobs == 1"
    assert run_checks(path, "t1", ["run"], checks, timeout=120).ok
    assert run_checks_in_order(path, [("t1", ["run"], checks)], timeout=120)["t1"].ok
