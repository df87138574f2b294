"""`python -m emqsim assignments`: the instructor's side of the graded notebooks in notebooks/assignments/.

    python -m emqsim assignments release --out DIR   # student versions: no solutions, no hidden tests
    python -m emqsim assignments check               # every solution passes, every release scores 0

`release` writes DIR/<assignment>/<assignment>.ipynb (nbgrader's `release/` layout) and the students' guide
DIR/STUDENTS.md. `check` grades each source notebook and its student version with `emqsim.grading.grade` and
prints how long each solution took to run. Needs the notebooks extra (nbformat, nbclient, ipykernel); without
it the command says so in one line.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emqsim.errors import ConfigError

STUDENT_GUIDE = "STUDENTS.md"


def default_source() -> Path:
    """notebooks/assignments/ of the emqsim checkout this package runs from."""
    return Path(__file__).resolve().parents[1] / "notebooks" / "assignments"


def sources(folder: Path | None) -> list[Path]:
    """The source notebooks in `folder` (default: the checkout's), or a one-line ConfigError."""
    if folder is None and not default_source().is_dir():
        # an installed package (not an editable checkout) has no notebooks beside it: naming the folder it
        # looked in would name one that can never exist
        raise ConfigError(
            "the assignment notebooks come with an emqsim checkout, not with the installed package; give "
            "--source DIR (a checkout's notebooks/assignments folder) or run from a checkout (pip install -e .)"
        )
    folder = default_source() if folder is None else Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"no assignment folder {str(folder)!r}; give --source DIR with the .ipynb files")
    found = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if not found:
        raise ConfigError(f"no notebooks (*.ipynb) in {str(folder)!r}; give --source DIR")
    return found


def _require_notebook_tools() -> None:
    for module in ("nbformat", "nbclient", "ipykernel"):
        try:
            __import__(module)
        except ImportError:
            raise ConfigError(
                f"the assignments need {module}: pip install 'emqsim[notebooks]' (or -e '.[notebooks]')"
            ) from None


def release(out: Path, source: Path | None = None) -> list[Path]:
    """Write the student version of every assignment to out/<name>/<name>.ipynb, and the students' guide."""
    from emqsim.grading import generate_student_version

    _require_notebook_tools()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file; give a folder")
    notebooks = sources(source)
    written = []
    for src in notebooks:
        dst = out / src.stem / src.name
        generate_student_version(src, dst)
        written.append(dst)
    guide = notebooks[0].parent / STUDENT_GUIDE
    if guide.is_file():
        (out / STUDENT_GUIDE).write_text(guide.read_text(encoding="utf-8"), encoding="utf-8")
        written.append(out / STUDENT_GUIDE)
    return written


@dataclass(frozen=True)
class CheckRow:
    """One assignment's check: the solution's and the release's autograded points, and the solution's run time."""

    name: str
    solution: tuple[float, float]
    release: tuple[float, float]
    seconds: float
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(
    source: Path | None = None,
    *,
    timeout: float = 600,
    student: str = "instructor-check",
    progress: bool = False,
) -> list[CheckRow]:
    """Grade every source notebook (it must pass every check) and its student version (it must score 0).
    `progress`: a bar on stderr over the gradings when stderr is a terminal (the check takes minutes)."""
    import sys
    import tempfile

    from tqdm.auto import tqdm

    from emqsim.grading import generate_student_version, grade

    _require_notebook_tools()
    rows = []
    notebooks = sources(source)
    bar = tqdm(
        total=2 * len(notebooks),
        disable=not (progress and sys.stderr.isatty()),
        unit="notebook",
        file=sys.stderr,
        desc="grading",
        leave=False,
    )
    for src in notebooks:
        problems = []
        started = time.monotonic()
        bar.set_postfix_str(src.name)
        solved = grade(src, timeout=timeout, student=student)
        bar.update()
        seconds = time.monotonic() - started
        if not solved.passed:
            failing = [c.grade_id for c in solved.autograded if c.status != "pass"]
            problems.append(f"the solution fails {', '.join(failing)}")
        problems += [f"the solution: {note}" for note in solved.notes]
        with tempfile.TemporaryDirectory(prefix="emqsim-release-") as tmp:
            student_version = Path(tmp) / src.name
            generate_student_version(src, student_version)
            released = grade(student_version, timeout=timeout, student=student)
        bar.update()
        if released.score[0] != 0:
            problems.append(f"the student version scores {released.score[0]:g} before any answer")
        rows.append(CheckRow(src.name, solved.score, released.score, seconds, tuple(problems)))
    bar.close()
    return rows


@dataclass(frozen=True)
class Recorded:
    """One submission whose trusted scores went into nbgrader's gradebook."""

    student: str
    notebook: str
    score: tuple[float, float]
    nbgrader: float  # what nbgrader's own autograde had recorded for the same cells


def record(
    course: Path, assignment: str, *, course_id: str | None = None, timeout: float = 600
) -> list[Recorded]:
    """Grade every submission `course/submitted/<id>/<assignment>/*.ipynb` with the trusted grader, against the
    source `course/source/<assignment>/`, as student `<id>`, and write its autograded scores into the course's
    nbgrader gradebook in place of the scores `nbgrader autograde` recorded (which come from the student's
    kernel). Run `nbgrader autograde` first: it creates the gradebook's records this fills in."""
    import re

    from emqsim.grading import grade

    _require_notebook_tools()
    course = Path(course)
    database = course / "gradebook.db"
    if not database.is_file():
        raise ConfigError(
            f"no gradebook.db in {str(course)!r}; run nbgrader autograde {assignment} there first"
        )
    if course_id is None:
        config = course / "nbgrader_config.py"
        found = (
            re.search(r"course_id\s*=\s*[\"']([^\"']+)[\"']", config.read_text())
            if config.is_file()
            else None
        )
        if found is None:
            raise ConfigError(f"no course_id in {str(config)!r}; give --course-id")
        course_id = found.group(1)
    sources = sorted((course / "source" / assignment).glob("*.ipynb"))
    if not sources:
        raise ConfigError(
            f"no source notebooks in {str(course / 'source' / assignment)!r}; check the assignment name"
        )
    try:
        from nbgrader.api import Gradebook, MissingEntry  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError("recording into a gradebook needs nbgrader: pip install nbgrader") from None
    out = []
    with Gradebook(f"sqlite:///{database}", course_id) as gb:
        for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
            student = folder.parent.name
            for src in sources:
                submitted = folder / src.name
                if not submitted.is_file():
                    continue
                try:
                    book = gb.find_submission_notebook(src.stem, assignment, student)
                except MissingEntry:
                    raise ConfigError(
                        f"{student}/{src.name} is not in the gradebook; run nbgrader autograde {assignment} first"
                    ) from None
                report = grade(submitted, timeout=timeout, student=student, against=src)
                trusted = {c.grade_id: c.points or 0.0 for c in report.autograded}
                before = 0.0
                for entry in book.grades:
                    if entry.cell.name in trusted:
                        before += entry.auto_score or 0.0
                        entry.auto_score = trusted[entry.cell.name]
                gb.db.commit()
                out.append(Recorded(student, src.name, report.score, before))
    return out


def add_assignments_parser(sub: Any) -> None:
    """Register `assignments release` and `assignments check` on the CLI's subparsers."""
    p = sub.add_parser(
        "assignments",
        help="instructors: release the student versions, check the assignments",
        description="The graded notebooks of notebooks/assignments/: release the student versions (no "
        "solutions, no hidden tests) and check that every solution passes and every release scores 0.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", help="release, check or record")
    actions.required = True
    r = actions.add_parser("release", help="write the student versions to a folder")
    r.add_argument("--out", type=Path, required=True, help="folder for <assignment>/<assignment>.ipynb")
    r.add_argument("--source", type=Path, help="the source notebooks (default: notebooks/assignments/)")
    c = actions.add_parser("check", help="solutions pass, releases score 0; prints each solution's run time")
    c.add_argument("--source", type=Path, help="the source notebooks (default: notebooks/assignments/)")
    c.add_argument("--timeout", type=float, default=600.0, help="per-cell timeout in seconds (default 600)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    g = actions.add_parser(
        "record",
        help="write trusted scores into nbgrader's gradebook (after nbgrader autograde)",
        description="Grade every submission of ASSIGNMENT in an nbgrader course with the trusted grader "
        "(python -m emqsim grade --against the source, as the student of the submitted/<id>/ folder) and write "
        "its autograded scores into gradebook.db in place of nbgrader's own, which come from the student's "
        "kernel. Run nbgrader autograde ASSIGNMENT first; nbgrader export then exports the trusted scores.",
    )
    g.add_argument("assignment", help="the assignment's name (its folder under source/)")
    g.add_argument(
        "--course", type=Path, default=Path("."), help="the nbgrader course folder (default: here)"
    )
    g.add_argument("--course-id", help="nbgrader's course id (default: read from nbgrader_config.py)")
    g.add_argument("--timeout", type=float, default=600.0, help="per-cell timeout in seconds (default 600)")


def main_assignments(args: argparse.Namespace) -> int:
    if args.action == "release":
        for path in release(args.out, args.source):
            print(path)
        return 0
    if not (args.timeout > 0):
        raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.action == "record":
        recorded = record(args.course, args.assignment, course_id=args.course_id, timeout=args.timeout)
        if not recorded:
            raise ConfigError(
                f"no submissions of {args.assignment!r} under {str(args.course / 'submitted')!r}"
            )
        for done in recorded:
            print(
                f"{done.student}  {done.notebook}  trusted {done.score[0]:g} / {done.score[1]:g}  "
                f"(nbgrader autograde had {done.nbgrader:g})"
            )
        return 0
    rows = check(args.source, timeout=args.timeout, progress=not args.quiet)
    width = max(len(r.name) for r in rows)
    print(f"{'assignment':<{width}}  {'solution':>9}  {'release':>9}  {'runs in':>8}  verdict")
    for r in rows:
        verdict = "ok" if r.ok else "; ".join(r.problems)
        print(
            f"{r.name:<{width}}  {r.solution[0]:>4g} / {r.solution[1]:<3g}  {r.release[0]:>4g} / "
            f"{r.release[1]:<3g}  {r.seconds:>6.0f} s  {verdict}"
        )
    print("run times are this machine's execution of the model solutions, checks included")
    return 0 if all(r.ok for r in rows) else 1


__all__ = [
    "CheckRow",
    "Recorded",
    "add_assignments_parser",
    "check",
    "default_source",
    "main_assignments",
    "record",
    "release",
]
