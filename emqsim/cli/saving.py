"""Result files (--out): rows with their provenance, written atomically; an interrupted sweep never replaces a
file that held more rows."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from emqsim.fileio import write_atomically
from emqsim.stats import to_csv, to_json

PROVENANCE_LIBRARIES = ("simpy", "numpy", "scipy", "matplotlib")


def provenance(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    """What produced a result: emqsim's version, the seed, `fields`, the command line, Python's and the
    libraries' versions. A FILE.json written by --out carries it as top-level keys, a FILE.csv as its first
    line (`--json` on stdout keeps only version, seed and replications, so equal runs print equal text)."""
    import platform
    import shlex
    from importlib.metadata import PackageNotFoundError, version

    from emqsim import __version__

    libraries: dict[str, str | None] = {}
    for name in PROVENANCE_LIBRARIES:
        try:
            libraries[name] = version(name)
        except PackageNotFoundError:
            libraries[name] = None
    argv = getattr(args, "argv", None)
    return {
        "version": __version__,
        "seed": getattr(args, "seed", None),
        **fields,
        "command": shlex.join(["emqsim", *argv]) if argv is not None else None,
        "python": platform.python_version(),
        "libraries": libraries,
    }


CSV_PROVENANCE_PREFIX = "# emqsim provenance: "


def write_rows(path: Path, rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    """FILE.json: `{**header, "rows": [...]}`. FILE.csv: one comment line `# emqsim provenance: {JSON header}`,
    then the rows (`pandas.read_csv(path, comment="#")` skips the comment)."""
    if path.suffix.lower() == ".json":
        text = to_json(rows, **header)
    else:
        text = CSV_PROVENANCE_PREFIX + json.dumps(header, separators=(", ", ": ")) + "\n" + to_csv(rows)
    write_atomically(path, text)


def rows_in(path: Path) -> float | None:
    """How many result rows an existing --out file holds: None if there is no file, inf if it cannot be read
    as results (it is then never replaced by a partial sweep)."""
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            return float(len(json.loads(text)["rows"]))
        import csv
        import io

        body = [line for line in text.splitlines() if not line.startswith(CSV_PROVENANCE_PREFIX)]
        return float(max(0, sum(1 for _ in csv.reader(io.StringIO("\n".join(body)))) - 1))
    except (OSError, ValueError, KeyError, TypeError):
        return math.inf


def save_rows(
    args: argparse.Namespace, rows: list[dict[str, Any]], header: dict[str, Any], complete: bool
) -> str:
    """Write --out. A complete sweep replaces the file; an interrupted one never replaces a file that held
    more rows (unless --force): its rows go beside it, to NAME.partial.csv|json. Says what it did.

    The rows are never lost: when the file cannot be written after the work (its folder removed meanwhile, a
    full disk, a file size limit), they go to a fallback file in the temporary folder, and, when even that
    fails, to standard output; `RowsNotWritten` then carries the one line saying where."""
    if not args.out:
        return ""
    if not rows:
        return f"; no cell finished, {args.out} not written"
    old = rows_in(args.out)
    meta = provenance(args, replications=header["replications"])
    if not complete and old is not None and len(rows) < old and not args.force:
        partial = args.out.with_name(f"{args.out.stem}.partial{args.out.suffix}")
        _write_or_fall_back(partial, rows, meta)
        held = "rows it cannot read" if math.isinf(old) else f"{old:.0f} rows"
        return f"; {args.out} kept ({held}); the {len(rows)} finished rows are in {partial} (--force replaces it)"
    _write_or_fall_back(args.out, rows, meta)
    return f"; rows written to {args.out}"


class RowsNotWritten(OSError):
    """The results file could not be written after the work; the message says where the rows went instead."""


def _write_or_fall_back(path: Path, rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    try:
        write_rows(path, rows, header)
        return
    except OSError as exc:
        failure = f"could not write {path} ({exc.strerror or exc})"
    import os
    import sys
    import tempfile
    import time

    fallback = Path(tempfile.gettempdir()) / f"emqsim-rows-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    fallback = fallback.with_suffix(path.suffix if path.suffix.lower() in (".csv", ".json") else ".csv")
    try:
        write_rows(fallback, rows, header)
    except OSError:
        text = to_json(rows, **header) if fallback.suffix == ".json" else to_csv(rows)
        sys.stdout.write(text)
        sys.stdout.flush()
        raise RowsNotWritten(f"{failure}; {_the_rows(len(rows))} on standard output above") from None
    raise RowsNotWritten(f"{failure}; {_the_rows(len(rows))} in {fallback}")


def _the_rows(n: int) -> str:
    return "the 1 row is" if n == 1 else f"the {n} rows are"
