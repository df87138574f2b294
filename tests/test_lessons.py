"""The lessons' answers to a prediction read as English in every case a guess can produce (unset, zero, one,
none, all, the wrong type), and the generated lessons ask each prediction before anything answers it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emqsim import lessons
from emqsim.lessons import chance, choice, count, join, names, number, plural, report, spread_labels, times

ROOT = Path(__file__).resolve().parents[1]
WHY = "the lock lives one lease after its last renewal."


def test_join_plural_times():
    assert join([]) == "none" and join([], empty="no system") == "no system"
    assert join(["a"]) == "a" and join(["a", "b"]) == "a and b" and join(["a", "b", "c"]) == "a, b and c"
    assert join([1, 2], conjunction="or") == "1 or 2"
    assert [plural(n, "job") for n in (0, 1, 2)] == ["0 jobs", "1 job", "2 jobs"]
    assert plural(1, "was", "were") == "1 was" and plural(3, "was", "were") == "3 were"
    assert [times(n) for n in (0, 1, 2, 3)] == ["never", "once", "twice", "3 times"]


def test_number():
    unset = number("seconds saved", "seconds_saved", None, 2.5, why=WHY)
    assert (
        not unset.answered
        and "set `seconds_saved` in its cell" in unset.verdict
        and unset.guess == "(not set)"
    )
    assert number("q", "x", 2.5, 2.5, why=WHY).verdict == "right"
    assert number("q", "x", 2, 2.5, why=WHY, tolerance=0.5).verdict == "right (within 0.5 s)"
    assert number("q", "x", 10, 2.5, why=WHY).verdict == "7.5 s too high"
    assert number("q", "x", 0, 2.5, why=WHY).verdict == "2.5 s too low"
    assert number("q", "x", 0, 0.0, why=WHY).verdict == "right"
    assert number("q", "x", -0.01, 0.0, why=WHY).guess == "0.0 s"  # never "-0.0 s"
    assert number("q", "x", 2, 1, why=WHY, unit="").guess == "2.0"  # no trailing space without a unit
    assert number("q", "x", "ten", 2.5, why=WHY).verdict == "`x` = 'ten' is not a number"
    assert number("q", "x", True, 2.5, why=WHY).verdict == "`x` = True is not a number"
    assert number("q", "x", float("nan"), 2.5, why=WHY).verdict == "`x` = nan is not a number"
    assert number("q", "x", 1, 2.5, why=WHY, result="2.5 s (simulated)").result == "2.5 s (simulated)"


def test_choice():
    options = {True: "taken back", False: "left alone"}
    assert choice("q", "x", True, True, why=WHY, options=options).verdict == "right"
    assert choice("q", "x", False, True, why=WHY, options=options).verdict == "not left alone: taken back"
    assert choice("q", "x", 1, True, why=WHY, options=options).verdict == "`x` should be True or False"
    assert choice("q", "x", "yes", True, why=WHY, options=options).verdict == "`x` should be True or False"
    assert not choice("q", "x", None, True, why=WHY, options=options).answered
    words = {"mine": "the blocked worker's", "other": "the other worker's", "both": "both"}
    assert choice("q", "x", " Other", "other", why=WHY, options=words).verdict == "right"
    assert choice("q", "x", "both", "other", why=WHY, options=words).verdict == "not both: the other worker's"
    assert "'mine', 'other' or 'both'" in choice("q", "x", "x", "other", why=WHY, options=words).verdict


@pytest.mark.parametrize(
    ("guess", "p", "verdict"),
    [
        (True, 1.0, "right"),
        (False, 0.0, "right"),
        ("sometimes", 0.5, "right"),
        ("Sometimes ", 0.5, "right"),
        (True, 0.5, "not always: sometimes (50%)"),
        (False, 1.0, "not never: always (100%)"),
        ("sometimes", 0.0, "not sometimes: never (0%)"),
        (0.5, 0.5, "right"),
        (0.2, 0.5, "30 percentage points too low"),
        (1, 0.25, "75 percentage points too high"),
        (0, 0.0, "right"),
        (2, 0.5, '`x` should be True, False, "sometimes" or a probability between 0 and 1'),
        ("maybe", 0.5, '`x` should be True, False, "sometimes" or a probability between 0 and 1'),
    ],
)
def test_chance(guess, p, verdict):
    assert chance("q", "x", guess, p, why=WHY).verdict == verdict


def test_names_and_count():
    right = ["bullmq", "echomq"]
    assert names("q", "x", ["echomq", "bullmq"], right, why=WHY).verdict == "right"
    assert names("q", "x", [], [], why=WHY).verdict == "right"
    assert names("q", "x", [], [], why=WHY).guess == "none"
    assert names("q", "x", "bullmq", right, why=WHY).verdict == "you left out echomq"
    assert (
        names("q", "x", ["sqs"], right, why=WHY).verdict
        == "sqs is not among them; you left out bullmq and echomq"
    )
    assert (
        names("q", "x", ["sqs", "oban", *right], right, why=WHY).verdict == "sqs and oban are not among them"
    )
    assert names("q", "x", [], right, why=WHY).verdict == "you left out bullmq and echomq"
    assert names("q", "x", 3, right, why=WHY).verdict == "`x` should be a list of names"
    assert not names("q", "x", None, right, why=WHY).answered
    assert count("q", "x", 2, 2, why=WHY).verdict == "right"
    assert count("q", "x", 3, 2, why=WHY).verdict == "1 time too many"
    assert count("q", "x", 0, 2, why=WHY, word="run").verdict == "2 runs too few"
    assert count("q", "x", 1.5, 2, why=WHY).verdict == "`x` should be a whole number"


def test_report_is_one_table_and_the_reasons():
    text = report(number("a | b", "x", 1, 2, why="because."), chance("c", "y", None, 0.5, why="so."))
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 4 and all(
        len(re.findall(r"(?<!\\)\|", row)) == 5 for row in rows
    )  # the | in a question is escaped
    assert "* **a | b**: because." in text and "* **c**: so." in text


def test_templates_never_produce_broken_english():
    """Every verdict over a grid of guesses: no doubled spaces, no `None`, no empty parts."""
    samples = [None, 0, 1, 0.5, -3, 1e9, True, False, "sometimes", "", [], ["a"], ["a", "b", "c"]]
    for g in samples:
        for check in (
            number("q", "x", g, 0.0, why=WHY),
            number("q", "x", g, 12.5, why=WHY, tolerance=0.5),
            chance("q", "x", g, 0.0, why=WHY),
            chance("q", "x", g, 0.37, why=WHY),
            names("q", "x", g, [], why=WHY),
            names("q", "x", g, ["a"], why=WHY),
            count("q", "x", g, 1, why=WHY),
        ):
            for text in (check.verdict, check.guess, check.result):
                assert text and "  " not in text and "None" not in text and not re.search(r"\s[,.;:]", text)


def test_spread_labels_leaves_no_two_labels_overlapping():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    for name in ("celery-redis", "oban-lifeline", "echomq-code"):
        ax.annotate(name, (3600, 0), xytext=(5, 6), textcoords="offset points")
    ax.annotate("alone", (10, 1), xytext=(5, 6), textcoords="offset points")
    ax.set_xlim(0, 4000)
    ax.set_ylim(0, 2)
    assert spread_labels(ax) == 2
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    plt.close(fig)


def test_lessons_module_is_a_front_end():
    assert not [n for n in vars(lessons) if n in ("simulate", "np")]  # nothing from the simulator


# -- the generated lessons ------------------------------------------------------------------------------------
nbformat = pytest.importorskip("nbformat")
LESSONS = sorted((ROOT / "notebooks").glob("0*.ipynb"))


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


SOURCES = sorted((ROOT / "notebooks" / "src").glob("0*.py"))


def test_every_lesson_has_one_source():
    """Each lesson notebooks/NN-name.ipynb is built from notebooks/src/NN-name.py, and nothing else is."""
    assert [p.stem for p in SOURCES] == [p.stem for p in LESSONS] and len(LESSONS) == 6


def test_lessons_are_rebuilt_from_their_source(tmp_path, capsys):
    """notebooks/_build.py builds the lessons from their jupytext sources: rebuilding changes no byte, and
    `--check` agrees."""
    pytest.importorskip("jupytext")
    spec = importlib.util.spec_from_file_location("lessons_build", ROOT / "notebooks" / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.main([str(tmp_path)]) == 0
    for path in LESSONS:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), (
            f"{path.name} differs from notebooks/src/{path.stem}.py: run python notebooks/_build.py"
        )
    assert build.main(["--check"]) == 0
    assert build.main(["--bad"]) == 2 and capsys.readouterr().err.count("\n") == 1


def test_notebook_sources_pass_the_linter():
    """`ruff check` covers the notebooks' sources and builders (notebooks/ruff.toml turns off only the rules a
    notebook breaks on purpose, and says why)."""
    ruff = pytest.importorskip("ruff")
    del ruff
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "notebooks"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--show-files", "notebooks"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    for source in SOURCES:
        assert str(source) in checked, f"ruff does not check {source.name}"


@pytest.mark.slow  # mypy reads emqsim for its types: 10 to 30 s
def test_notebook_sources_pass_the_type_checker():
    """mypy checks the lessons' and assignments' sources with notebooks/mypy.ini (which relaxes two rules for
    notebook code and says why)."""
    pytest.importorskip("mypy")
    folders = ["notebooks/src", "notebooks/assignments/src"]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "notebooks/mypy.ini", *folders],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert f"in {len(SOURCES) + 6} source files" in proc.stdout, proc.stdout[-500:]


def test_the_explorer_is_written_once():
    """Every lesson's "Try it" imports the one explorer (emqsim.lesson_widgets); none carries its own copy."""
    for path in LESSONS:
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        assert "from emqsim.lesson_widgets import explorer" in text, path.name
        assert "def explorer" not in text and "widgets.IntSlider" not in text, (
            f"{path.name}: a pasted explorer"
        )


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_prediction_is_asked_before_it_is_answered(path):
    """Each prediction `predict:NAME` comes before every cell tagged `reveal:NAME` (a table, plot, formula
    or widget that gives it away) and before the cell `answer:NAME` that puts the guess beside the result;
    every answer follows a reveal; and the explorer (its default state can show an answer) follows the first
    answer."""
    nb = nbformat.read(path, as_version=4)
    where: dict[str, dict[str, list[int]]] = {}
    for i, cell in enumerate(nb.cells):
        for tag in tags(cell):
            kind, _, name = tag.partition(":")
            if kind in ("predict", "reveal", "answer"):
                where.setdefault(name, {"predict": [], "reveal": [], "answer": []})[kind].append(i)
    assert where, f"{path.name}: no tagged prediction"
    for name, at in where.items():
        assert len(at["predict"]) == 1, f"{path.name}: prediction {name} asked {len(at['predict'])} times"
        assert at["reveal"] and at["answer"], f"{path.name}: prediction {name} is never revealed or answered"
        (asked,) = at["predict"]
        assert asked < min(at["reveal"]), f"{path.name}: {name} is revealed (cell {min(at['reveal'])}) first"
        assert min(at["reveal"]) < min(at["answer"]), f"{path.name}: {name} is answered before its reveal"
        answer = "\n".join(nb.cells[i].source for i in at["answer"])
        variables = re.findall(r"^(\w+)\s*=", nb.cells[asked].source, re.M)
        assert variables and all(v in answer for v in variables), (
            f"{path.name}: {name}'s answer ignores a guess"
        )
    explorer = next(
        i for i, c in enumerate(nb.cells) if "from emqsim.lesson_widgets import explorer" in c.source
    )
    first_answer = min(min(at["answer"]) for at in where.values())
    first_prediction = min(at["predict"][0] for at in where.values())
    assert first_prediction < explorer and first_answer < explorer, (
        f"{path.name}: the explorer comes too early"
    )


def test_no_lesson_gives_away_an_assignment_answer():
    """Lesson 06 no longer explores assignment 06's own question (a fixed timeout, a freeze 5 s into the job,
    the shortest freeze that completes it twice) nor prints its model solution."""
    text = "\n".join(c.source for p in LESSONS for c in nbformat.read(p, as_version=4).cells)
    assert "offset=(5000, 5000)" not in text and "shortest_pause" not in text
    assert "except none" not in text
    six = "\n".join(c.source for c in nbformat.read(LESSONS[5], as_version=4).cells)
    assert "TimeoutPolicy(timeout=60" not in six and 'property == "no_duplicate_completion"' not in six


@pytest.mark.slow  # imports ipywidgets and matplotlib and draws two timelines: about 3.5 s
def test_the_explorer_redraws_and_names_a_bad_setting(monkeypatch, capsys):
    """The lessons' explorer (emqsim.lesson_widgets) runs its first setting at once and says what happened;
    a control moved to a setting the policy refuses gets one line saying why, not a traceback."""
    pytest.importorskip("ipywidgets")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    from emqsim.lesson_widgets import explorer

    box = explorer(column="slow-alive", rule="lease", lease=30, beat=10, freeze=25, job=120)
    status, (lease, beat, _timeout) = box.children[3], box.children[1].children
    assert status.value.startswith("wrongly reclaimed") and "redrawn in" in status.value
    beat.value = lease.value + 10  # a beat longer than the lease
    assert status.value.startswith("not a valid setting: beat (40 s) must be shorter than the lease")
    capsys.readouterr()
