"""The split into the quick suite and the slow one (tests/conftest.py) names only files and tests that exist,
and CI runs both."""

import ast
from pathlib import Path

from conftest import LONGEST_FIRST, SLOW_ENV, SLOW_FILES, SLOW_TESTS

TESTS = Path(__file__).parent
ROOT = TESTS.parent


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def test_every_slow_file_exists():
    missing = sorted(name for name in SLOW_FILES if not (TESTS / name).is_file())
    assert not missing, f"SLOW_FILES names files that do not exist: {missing}"


def test_every_slow_test_exists_and_is_not_in_a_slow_file_already():
    for entry in sorted(SLOW_TESTS):
        file, name = entry.split("::")
        assert file not in SLOW_FILES, f"{entry}: its whole file is slow already"
        assert name in _test_functions(TESTS / file), f"{entry}: no such test function"


def test_ci_runs_the_slow_suite_and_the_readme_says_how():
    assert f"export {SLOW_ENV}=1" in (ROOT / ".ci" / "run").read_text()
    assert f"{SLOW_ENV}=1 python -m pytest -q" in (ROOT / "README.md").read_text()


def test_the_longest_first_list_names_files_that_exist_once():
    missing = sorted(name for name in LONGEST_FIRST if not (TESTS / name).is_file())
    assert not missing, f"LONGEST_FIRST names files that do not exist: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
