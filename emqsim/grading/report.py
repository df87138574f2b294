"""A graded notebook's report: each cell's points and why, and how an error or a partial score is read from a
cell's outputs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


# -- grading --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellGrade:
    """One graded cell: its id, points earned (None: graded by hand) out of `max_points`, a status and why."""

    grade_id: str
    points: float | None
    max_points: float
    status: str  # pass, partial, fail, manual
    detail: str = ""


@dataclass(frozen=True)
class GradeReport:
    """Every graded cell of one notebook, in order, plus errors raised outside the test cells."""

    notebook: str
    cells: list[CellGrade]
    notes: list[str] = field(default_factory=list)

    @property
    def autograded(self) -> list[CellGrade]:
        return [c for c in self.cells if c.status != "manual"]

    @property
    def passed(self) -> bool:
        return all(c.status == "pass" for c in self.autograded)

    @property
    def score(self) -> tuple[float, float]:
        auto = self.autograded
        return sum(c.points or 0.0 for c in auto), sum(c.max_points for c in auto)

    def text(self) -> str:
        """The report `python -m emqsim grade` prints (no times or paths: same notebook, same text)."""
        width = max([len("question")] + [len(c.grade_id) for c in self.cells])
        lines = [f"{self.notebook}", f"{'question':<{width}}  {'points':>9}  status"]
        for c in self.cells:
            shown = "-" if c.points is None else f"{c.points:g}"
            detail = f"  {c.detail}" if c.detail else ""
            lines.append(
                f"{c.grade_id:<{width}}  {shown + ' / ' + format(c.max_points, 'g'):>9}  {c.status}{detail}"
            )
        got, total = self.score
        manual = sum(c.max_points for c in self.cells if c.status == "manual")
        summary = f"{'autograded':<{width}}  {format(got, 'g') + ' / ' + format(total, 'g'):>9}"
        summary += "  all checks pass" if self.passed else "  some checks fail"
        if manual:
            summary += f" ({manual:g} more points graded by hand)"
        lines.append(summary)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


_HEX = re.compile(r"0x[0-9a-fA-F]+")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(text: str, limit: int = 100) -> str:
    text = _HEX.sub("0x...", _ANSI.sub("", text)).strip()
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _error_of(outputs: list[Any], reply_error: str | None) -> str | None:
    """What made a cell fail by nbgrader's rule (an error output or anything on stderr), or None."""
    for out in outputs:
        if out.get("output_type") == "error":
            return _one_line(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}".rstrip(": "))
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return _one_line(f"wrote to stderr: {out.get('text', '')}")
    return reply_error


def _partial(outputs: list[Any], max_points: float) -> float | None:
    """nbgrader's partial credit: a test cell whose result is a number in [0, max] scores that number."""
    for out in outputs:
        if out.get("output_type") == "execute_result":
            text = out.get("data", {}).get("text/plain", "")
            if isinstance(text, list):
                if len(text) != 1:
                    return None
                text = text[0]
            try:
                value = float(text)
            except (TypeError, ValueError):
                return None
            return value if 0 <= value <= max_points else None
    return None
