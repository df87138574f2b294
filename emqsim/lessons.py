"""The lessons' side of a prediction: the student's guess beside the result, in English.

The teaching notebooks (notebooks/0*.ipynb) ask a question, let the student write a guess into a variable, run
the experiment, and then answer the guess. This module turns a guess and a result into that answer: a verdict
(right, how far off, or not answered) and the lesson's own sentence on why the result is what it is, rendered as
Markdown. The wording is generated for every case a guess can produce (none, zero, one, all, wrong type), so the
lessons stay English whatever the student writes; tests/test_lessons.py tries those cases.

A front end (like `emqsim.plots`): it imports nothing from the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "Check",
    "chance",
    "choice",
    "count",
    "join",
    "names",
    "number",
    "plural",
    "report",
    "spread_labels",
    "times",
]


def join(items: Iterable[Any], empty: str = "none", conjunction: str = "and") -> str:
    """`a`, `a and b`, `a, b and c`; `empty` for no items: a list in a sentence."""
    words = [str(x) for x in items]
    if not words:
        return empty
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 job`, `0 jobs`, `3 jobs` (`many` for an irregular plural)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def times(n: int) -> str:
    """`never`, `once`, `twice`, `3 times`: how often something happened."""
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


@dataclass(frozen=True)
class Check:
    """One prediction answered: what was asked, the guess and the result as shown, the verdict and why."""

    question: str
    guess: str
    result: str
    verdict: str
    why: str
    answered: bool
    right: bool


def _unanswered(question: str, variable: str, result: str, why: str) -> Check:
    return Check(
        question,
        "(not set)",
        result,
        f"not set: set `{variable}` in its cell and run again",
        why,
        answered=False,
        right=False,
    )


def _as_number(guess: Any) -> float | None:
    if isinstance(guess, bool) or not isinstance(guess, int | float):
        return None
    value = float(guess)
    return value if math.isfinite(value) else None


def number(
    question: str,
    variable: str,
    guess: Any,
    actual: float,
    *,
    why: str,
    unit: str = "s",
    tolerance: float = 0.0,
    digits: int = 1,
    result: str | None = None,
) -> Check:
    """A numeric guess against `actual`: right within `tolerance`, else how far too high or too low."""

    def show(x: float) -> str:
        text = f"{x:,.{digits}f}"
        if float(text.replace(",", "")) == 0:
            text = f"{0:.{digits}f}"  # no "-0.0"
        return f"{text} {unit}".rstrip()

    shown = result if result is not None else show(actual)
    if guess is None:
        return _unanswered(question, variable, shown, why)
    value = _as_number(guess)
    if value is None:
        return Check(
            question, repr(guess), shown, f"`{variable}` = {guess!r} is not a number", why, True, False
        )
    off = value - actual
    if abs(off) <= tolerance:
        verdict = "right" if tolerance == 0 else f"right (within {show(tolerance)})"
        return Check(question, show(value), shown, verdict, why, True, True)
    verdict = f"{show(abs(off))} too {'high' if off > 0 else 'low'}"
    return Check(question, show(value), shown, verdict, why, True, False)


def choice(
    question: str,
    variable: str,
    guess: Any,
    actual: Any,
    *,
    why: str,
    options: Mapping[Any, str],
) -> Check:
    """A guess among `options` (value -> how to say it) against the option that happened."""
    shown = options[actual]
    if guess is None:
        return _unanswered(question, variable, shown, why)
    key = guess.strip().lower() if isinstance(guess, str) else guess
    known = {(k.lower() if isinstance(k, str) else k): k for k in options}
    if key not in known or (isinstance(guess, bool) != isinstance(known[key], bool)):
        allowed = join((repr(k) for k in options), conjunction="or")
        return Check(question, repr(guess), shown, f"`{variable}` should be {allowed}", why, True, False)
    picked = known[key]
    right = picked == actual
    verdict = "right" if right else f"not {options[picked]}: {shown}"
    return Check(question, options[picked], shown, verdict, why, True, right)


def chance(
    question: str, variable: str, guess: Any, probability: float, *, why: str, digits: int = 0
) -> Check:
    """A guess of *whether* something happens (True: always, False: never, "sometimes", or a probability
    between 0 and 1) against its measured or exact `probability`."""
    percent = f"{100 * probability:.{digits}f}%"
    kind = "never" if probability <= 0 else "always" if probability >= 1 else "sometimes"
    shown = {"never": "never (0%)", "always": "always (100%)", "sometimes": f"sometimes ({percent})"}[kind]
    if guess is None:
        return _unanswered(question, variable, shown, why)
    value = _as_number(guess)
    if isinstance(guess, bool):
        said = "always" if guess else "never"
    elif isinstance(guess, str) and guess.strip().lower() in ("sometimes", "always", "never"):
        said = guess.strip().lower()
    elif value is not None and 0 <= value <= 1:
        off = 100 * (value - probability)
        verdict = (
            "right"
            if round(off, digits) == 0
            else f"{abs(off):.{digits}f} percentage points too {'high' if off > 0 else 'low'}"
        )
        return Check(question, f"{100 * value:.{digits}f}%", shown, verdict, why, True, verdict == "right")
    else:
        return Check(
            question,
            repr(guess),
            shown,
            f'`{variable}` should be True, False, "sometimes" or a probability between 0 and 1',
            why,
            True,
            False,
        )
    right = said == kind
    return Check(question, said, shown, "right" if right else f"not {said}: {shown}", why, True, right)


def names(question: str, variable: str, guess: Any, actual: Iterable[str], *, why: str) -> Check:
    """A guessed set of names (a list, or one name) against the names that are right."""
    want = list(dict.fromkeys(actual))
    shown = join(want)
    if guess is None:
        return _unanswered(question, variable, shown, why)
    picked = ([guess] if guess.strip() else []) if isinstance(guess, str) else guess
    if not isinstance(picked, list | tuple | set) or not all(isinstance(x, str) for x in picked):
        return Check(
            question, repr(guess), shown, f"`{variable}` should be a list of names", why, True, False
        )
    given = list(dict.fromkeys(x.strip() for x in picked if x.strip()))
    extra = [x for x in given if x not in want]
    missed = [x for x in want if x not in given]
    if not extra and not missed:
        return Check(question, join(given), shown, "right", why, True, True)
    parts = []
    if extra:
        parts.append(f"{join(extra)} {'is' if len(extra) == 1 else 'are'} not among them")
    if missed:
        parts.append(f"you left out {join(missed)}")
    return Check(question, join(given), shown, "; ".join(parts), why, True, False)


def count(question: str, variable: str, guess: Any, actual: int, *, why: str, word: str = "time") -> Check:
    """A guessed whole number (how many runs, how many workers) against `actual`."""
    shown = str(actual)
    if guess is None:
        return _unanswered(question, variable, shown, why)
    value = _as_number(guess)
    if value is None or value != int(value):
        return Check(question, repr(guess), shown, f"`{variable}` should be a whole number", why, True, False)
    n = int(value)
    if n == actual:
        return Check(question, str(n), shown, "right", why, True, True)
    return Check(
        question,
        str(n),
        shown,
        f"{plural(abs(n - actual), word)} too {'many' if n > actual else 'few'}",
        why,
        True,
        False,
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report(*checks: Check) -> str:
    """The answers as Markdown: a table of guess beside result and verdict, then each result's reason."""
    lines = ["| prediction | your guess | result | verdict |", "|---|---|---|---|"]
    lines += [
        f"| {_cell(c.question)} | {_cell(c.guess)} | {_cell(c.result)} | {_cell(c.verdict)} |" for c in checks
    ]
    lines.append("")
    lines += [f"* **{c.question}**: {c.why}" for c in checks]
    return "\n".join(lines)


def spread_labels(ax: Axes, step: float = 9.0, tries: int = 30) -> int:
    """Move the point labels (annotations) of `ax` up, `step` points at a time, until none overlaps another
    label drawn before it; returns how many moved. Points that sit together (several systems at the same
    latency) then get a readable stack of names instead of one smudge."""
    from matplotlib.text import Annotation

    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    notes = [t for t in ax.texts if isinstance(t, Annotation) and t.get_text()]
    notes.sort(key=lambda t: (t.get_window_extent(renderer).y0, t.get_window_extent(renderer).x0))
    placed: list[Any] = []
    moved = 0
    for note in notes:
        for attempt in range(tries):
            box = note.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
            x, y = note.xyann
            note.xyann = (x, y + step)
            moved += attempt == 0
        placed.append(note.get_window_extent(renderer))
    return moved
