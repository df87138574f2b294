"""Golden results: "same results" is checked, not claimed.

The digests of a check corpus (standard scenarios x plain policies and every preset x 2 replications) and a
small sweep table are stored in tests/golden/results.json. A change that alters any of them must bump
`emqsim.RESULTS_SCHEMA` and regenerate the file with `python tests/golden/corpus.py --write`, which refuses to
record changed results under an unchanged schema number.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))
import corpus  # noqa: E402

from emqsim import RESULTS_SCHEMA  # noqa: E402

GOLDEN = json.loads(corpus.GOLDEN.read_text())
HOW = "if the change is meant to alter results: bump RESULTS_SCHEMA, then `python tests/golden/corpus.py --write`"


def test_the_golden_file_belongs_to_the_current_results_schema():
    assert GOLDEN["results_schema"] == RESULTS_SCHEMA, HOW
    assert GOLDEN["schema_history"][str(RESULTS_SCHEMA)] == GOLDEN["corpus_sha"]
    # one corpus per schema number, and never the same corpus under two numbers
    assert len(set(GOLDEN["schema_history"].values())) == len(GOLDEN["schema_history"])


def test_every_corpus_run_has_its_golden_digest():
    now = corpus.corpus_digests()
    assert set(now) == set(GOLDEN["digests"]), "the corpus changed shape; " + HOW
    changed = sorted(k for k in now if now[k] != GOLDEN["digests"][k])
    assert not changed, f"{len(changed)} runs changed, e.g. {changed[:5]}; {HOW}"
    assert corpus.corpus_sha(now) == GOLDEN["corpus_sha"]


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


@pytest.fixture(scope="module")
def sweep_rows():
    return corpus.sweep_table()


@pytest.mark.parametrize("index", range(len(GOLDEN["sweep_table"])))
def test_sweep_table_rows_match_to_a_tight_tolerance(sweep_rows, index):
    row = sweep_rows[index]
    golden = GOLDEN["sweep_table"][index]
    assert row.keys() == golden.keys(), HOW
    differ = [k for k in row if not _close(row[k], golden[k])]
    assert not differ, f"fields {differ} differ; {HOW}"
