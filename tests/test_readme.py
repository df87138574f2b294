"""The README's promises: the two fresh-machine commands exist, and CI runs the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [line for line in re.findall(r"```bash\n(.*?)\n```", text, re.S)]


def test_readme_has_the_two_commands():
    commands = readme_commands()
    assert any(c.endswith("python -m emqsim sweep --lease 30 --beat 10") for c in commands)
    assert any('pip install -q -e ".[test]"' in c and c.endswith("python -m pytest -q") for c in commands)


def test_ci_runs_the_readme_test_command():
    test_command = next(c for c in readme_commands() if c.endswith("python -m pytest -q"))
    assert test_command in (ROOT / ".ci" / "run").read_text()
