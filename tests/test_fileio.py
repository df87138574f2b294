"""write_atomically: whole files or none, the umask for new files, the old mode for replaced ones."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import emqsim.fileio as fileio
from emqsim.fileio import current_umask, write_atomically


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test, then put it back."""
    saved = os.umask(0o022)
    os.umask(saved)

    def set_to(mask: int) -> None:
        os.umask(mask)

    yield set_to
    os.umask(saved)


@pytest.mark.parametrize("mask,expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664), (0o000, 0o666)])
def test_a_new_file_gets_the_umask_mode(tmp_path: Path, umask, mask: int, expected: int) -> None:
    umask(mask)
    assert current_umask() == mask
    path = tmp_path / "rows.csv"
    write_atomically(path, "a,b\n")
    assert mode(path) == expected
    assert path.read_text() == "a,b\n"


@pytest.mark.parametrize("old_mode", [0o640, 0o600, 0o755, 0o444])
def test_replacing_a_file_keeps_its_mode(tmp_path: Path, umask, old_mode: int) -> None:
    umask(0o077)
    path = tmp_path / "rows.csv"
    path.write_text("old\n")
    path.chmod(old_mode)
    write_atomically(path, "new\n")
    assert mode(path) == old_mode and path.read_text() == "new\n"


def test_text_is_written_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_atomically(path, "a\r\nb\nü\n")
    assert path.read_bytes() == "a\r\nb\nü\n".encode()
    write_atomically(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("{}")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomically(link, '{"rows": []}')
    assert link.is_symlink() and target.read_text() == '{"rows": []}' and mode(target) == 0o640


@pytest.mark.parametrize("failure", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("old\n")

    def fail(src: str, dst: str) -> None:
        raise failure

    monkeypatch.setattr(fileio.os, "replace", fail)
    with pytest.raises(type(failure)):
        write_atomically(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]


def test_stats_still_exports_write_atomically() -> None:
    from emqsim.stats import write_atomically as from_stats

    assert from_stats is write_atomically


def test_the_cli_writes_results_with_the_umask_mode(tmp_path: Path, umask) -> None:
    from emqsim.cli import main

    umask(0o022)
    out = tmp_path / "rows.csv"
    assert main(["sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "2", "--jobs", "1",
                 "--quiet", "--out", str(out)]) == 0  # fmt: skip
    assert mode(out) == 0o644
    out.chmod(0o640)
    assert main(["sweep", "--scenario", "fast-dead", "--timeout", "600", "--replications", "2", "--jobs", "1",
                 "--quiet", "--out", str(out)]) == 0  # fmt: skip
    assert mode(out) == 0o640
