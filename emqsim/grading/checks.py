"""Running a test cell's checks in the trusted process, on the student's answers as they came over the wire.

The checks' source comes from the notebook the grader was told to trust (the instructor's SOURCE notebook
under `grade --against`). The names they use are looked up one by one in the student's kernel: a name the
student's cells did not define fails the questions that use it, and no other. The student id the checks'
seeds derive from is the grader's (`--student`, nbgrader's folder), set here for the checks' duration.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from emqsim.grading.trusted import Channel, RemoteError

# What the checks' helpers read while they run: the grader's student id, the answer cells' source.
CONTEXT: dict[str, Any] = {}


@dataclass(frozen=True)
class TrustedVerdict:
    ok: bool
    message: str


@contextlib.contextmanager
def trusted_context(student: str, answers: dict[str, str]) -> Iterator[None]:
    """`student_id()` is `student` and `defined_in_notebook` reads `answers` (answer cell id -> source)."""
    saved = dict(CONTEXT)
    CONTEXT.clear()
    CONTEXT.update({"student": student, "answers": answers})
    try:
        yield
    finally:
        CONTEXT.clear()
        CONTEXT.update(saved)


def run_trusted_checks(
    channel: Channel,
    calls: Sequence[tuple[str, Sequence[str], str]],
    *,
    student: str,
    answers: dict[str, str],
) -> dict[str, TrustedVerdict]:
    """The verdict of every test cell's checks (test id, answer names, checks source), in order."""
    out: dict[str, TrustedVerdict] = {}
    with trusted_context(student, answers):
        for test_id, names, checks in calls:
            out[test_id] = _one(channel, test_id, names, checks)
    return out


def _one(channel: Channel, test_id: str, names: Sequence[str], checks: str) -> TrustedVerdict:
    scope: dict[str, Any] = {"__name__": "__checks__"}
    missing = []
    for name in names:
        try:
            scope[name] = channel.lookup(name)
        except RemoteError as exc:
            if "NameError" in str(exc):
                missing.append(name)
            else:
                return TrustedVerdict(False, f"{name}: {exc}")
    if missing:
        return TrustedVerdict(
            False, f"{', '.join(missing)} not defined by the answer cells (run top to bottom)"
        )
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")
            exec(compile(checks, f"<{test_id} checks>", "exec"), scope)
    except Exception as exc:
        import traceback

        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith("checks>")]
        where = f" (check line {frames[-1].lineno})" if frames else ""
        text = str(exc) if isinstance(exc, AssertionError) and str(exc) else f"{type(exc).__name__}: {exc}"
        return TrustedVerdict(False, f"{text}{where}")
    shown = printed.getvalue().strip().splitlines()[:12]
    return TrustedVerdict(True, "\n".join([*shown, f"{test_id}: all checks pass"]))
