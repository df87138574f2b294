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


def read_regular_text(path: str | os.PathLike, limit: int, what: str) -> str:
    """The UTF-8 text of `path`, which must be a regular file of at most `limit` bytes; anything else (a
    named pipe, a device such as /dev/zero, a folder, too large, not UTF-8, unreadable) is a ConfigError that
    names `what`, the file and the fix. Opened without blocking, so a pipe nobody writes to cannot hang it."""
    from emqsim.errors import ConfigError

    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{what} {name!r} does not exist; check the path") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {name!r} ({exc.strerror}); check the path") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{what} {name!r} is a folder; give a file")
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {name!r} is not a regular file (a pipe or a device); give a file")
        if info.st_size > limit:
            raise ConfigError(f"{what} {name!r} is {info.st_size:,} bytes; at most {limit:,} are read")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read {what} {name!r} ({exc.strerror}); check the file") from None
    if len(data) > limit:
        raise ConfigError(f"{what} {name!r} is over {limit:,} bytes; give a smaller file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {what} {name!r} ({exc}); give a UTF-8 text file") from None


def name_max(folder: str | os.PathLike) -> int:
    """The longest file name `folder`'s file system takes (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def writable_problem(path: str | os.PathLike, *names: str) -> str | None:
    """Why a file named `path` (and `names` beside it, such as a `.partial` file) cannot be written, or None.

    Checked by doing it: the destination is resolved through symbolic links (a link into a missing folder
    fails here, not after the work), every name must fit the file system, and a temporary file is created and
    removed in the folder (so a read-only mount, a full inode table or a root-only folder count, even for
    root, whom `os.access` always says yes to)."""
    try:
        real = os.path.realpath(os.fspath(path))
        folder = os.path.dirname(real) or "."
        if not os.path.isdir(folder):
            return f"folder {folder!r} does not exist; create it first"
        longest = max(len(os.fsencode(n)) for n in (os.path.basename(real), *names))
        if longest + 12 > name_max(folder):  # +12: the temporary file's `.emqsim-XXXXXXXX` beside it
            return (
                f"the file name is too long for its file system (at most {name_max(folder) - 12} bytes here)"
            )
        fd, tmp = tempfile.mkstemp(prefix=".emqsim-probe-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why a folder at `path` cannot be used to write files in (created if missing), or None; checked by
    creating and removing a temporary file in it, or a temporary folder in its nearest existing parent."""
    try:
        name = os.path.abspath(os.fspath(path))
        if os.path.lexists(name) and not os.path.isdir(name):
            return "it is a file, not a folder"
        parent = name
        while not os.path.isdir(parent):
            if os.path.lexists(parent):
                return f"{parent!r} is not a folder"
            parent = os.path.dirname(parent)
        if parent == name:
            fd, tmp = tempfile.mkstemp(prefix=".emqsim-probe-", dir=name)
            os.close(fd)
            os.unlink(tmp)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".emqsim-probe-", dir=parent))
            if len(os.fsencode(os.path.basename(name))) > name_max(parent):
                return "the folder name is too long for its file system"
    except OSError as exc:
        return f"cannot write there ({exc.strerror or exc})"
    return None
