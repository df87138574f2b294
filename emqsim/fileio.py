"""Writing output files so that a reader never sees half a file and permissions stay what the user expects.

A file is written to a temporary name beside its destination, flushed to disk, given its final mode, then
renamed over the destination (an atomic step on POSIX). A new file gets the mode an ordinary `open()` would
give it (0666 minus the umask); a file being replaced keeps its own mode.
"""

from __future__ import annotations

import os
import stat
import tempfile

NEW_FILE_MODE = 0o666


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux /proc), else set and reset."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def target_mode(path: str | os.PathLike) -> int:
    """The mode `path` should end with: its current mode if it exists, else 0666 minus the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return NEW_FILE_MODE & ~current_umask()


def write_atomically(path: str | os.PathLike, text: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename: a crash or interrupt never leaves half a file.

    A symbolic link at `path` is followed (its target is replaced, the link stays). The file's mode is the
    umask's for a new file and the old file's for a replaced one; the temporary file never outlives a failure.
    """
    path = os.path.realpath(os.fspath(path))
    folder = os.path.dirname(path)
    mode = target_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=".emqsim-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
