"""The right/wrong rule is one rule: the `emqsim compare` table and the two-columns figure give every cell the
same verdict, and the hostage threshold reads the same on both sides of its boundary."""

from __future__ import annotations

import pytest

from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.cli import main
from emqsim.figures import SEED, two_column_runs
from emqsim.verdict import HOSTAGE_AFTER, compare_verdict, held_hostage, verdict

WORLD = {"slow-but-alive": "slow-alive", "fast-but-dead": "fast-dead"}


def compare_cells(capsys, *argv: str) -> dict[tuple[str, str], str]:
    """(kind, rule) -> the verdict text `emqsim compare` prints for that cell."""
    assert main(["compare", *argv]) == 0
    out = capsys.readouterr().out
    cells, world = {}, None
    for line in out.splitlines():
        if line.strip() in WORLD:
            world = WORLD[line.strip()]
        elif world and line.strip().startswith(("timeout rule", "lease rule")):
            rule, text = line.strip().split(" rule", 1)
            cells[(world, rule)] = text.strip()
    assert len(cells) == 4, out
    return cells


def test_compare_table_and_two_columns_figure_agree_on_every_cell(capsys):
    cells = compare_cells(capsys, "--replications", "1", "--seed", str(SEED))
    figure = two_column_runs(SEED)
    for cell, text in cells.items():
        assert text.startswith(("right:", "WRONG:")), text
        assert text.startswith("right:") == verdict(figure[cell]).good, (cell, text, verdict(figure[cell]))
    # The figure's story: the timeout is wrong twice (takes the live job, holds the dead one hostage).
    assert [cell for cell, text in cells.items() if text.startswith("WRONG")] == [
        ("slow-alive", "timeout"),
        ("fast-dead", "timeout"),
    ]


@pytest.mark.parametrize("timeout", [60.0, 119.0, 200.0])
def test_agreement_holds_around_the_hostage_threshold(capsys, timeout):
    """Timeouts whose recovery lands below and above HOSTAGE_AFTER: table and single-run verdict agree."""
    cells = compare_cells(capsys, "--replications", "1", "--timeout", f"{timeout:g}", "--slow-duration", "90")
    runs = {
        ("slow-alive", "timeout"): simulate(
            standard("slow-alive", duration=90.0), TimeoutPolicy(timeout, 5), 0
        ),
        ("fast-dead", "timeout"): simulate(standard("fast-dead"), TimeoutPolicy(timeout, 5), 0),
        ("slow-alive", "lease"): simulate(standard("slow-alive", duration=90.0), LeasePolicy(30, 10, 5), 0),
        ("fast-dead", "lease"): simulate(standard("fast-dead"), LeasePolicy(30, 10, 5), 0),
    }
    for cell, run in runs.items():
        assert cells[cell].startswith("right:") == verdict(run).good, (cell, cells[cell], verdict(run))


def test_the_threshold_itself_is_right_and_just_above_it_is_hostage():
    assert not held_hostage(HOSTAGE_AFTER) and held_hostage(HOSTAGE_AFTER + 1e-9)
    at = compare_verdict(False, reclaimed_fraction=1.0, reclaimed_after=HOSTAGE_AFTER, latency=HOSTAGE_AFTER)
    above = compare_verdict(False, reclaimed_fraction=1.0, reclaimed_after=200.0, latency=HOSTAGE_AFTER + 1)
    assert at.good and at.text.startswith("right: recovered")
    assert not above.good and above.text.startswith("WRONG: held hostage")


def test_compare_verdict_words():
    live_taken = compare_verdict(True, reclaimed_fraction=0.5, reclaimed_after=600.0, latency=None)
    assert not live_taken.good
    assert (
        live_taken.text
        == "WRONG: reclaimed from a live worker; the job runs twice (at 600 s, in 50% of runs)"
    )
    assert compare_verdict(True, reclaimed_fraction=0.0, reclaimed_after=None, latency=None).good
    lost = compare_verdict(False, reclaimed_fraction=0.0, reclaimed_after=None, latency=None)
    assert lost == ("WRONG: not recovered by the horizon", False)
