"""The examples in the package's docstrings run as written (doctest): a reader pastes them first."""

from __future__ import annotations

import doctest

import emqsim


def test_the_package_docstring_example_runs():
    """emqsim/__init__.py's example once raised NameError (it used a name it had not imported)."""
    result = doctest.testmod(emqsim, verbose=False, report=True, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 4
    assert result.failed == 0
