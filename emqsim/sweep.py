"""Grids of (scenario, policy) cells run over replications: seeds, executors, a resume cache, progress.

Seeds derive from (seed, replication) only, never from the policy or execution order: every policy sees the
same workload and faults in replication r (common random numbers), and serial, process-pool and Dask runs
give identical rows.

The resume cache cannot serve wrong numbers: an entry's name is a digest of everything that determines the
cell's results (scenario, policy, seed, replications, `RESULTS_SCHEMA`), and the entry itself holds that
identity in full and is checked against it, field by field and type by type, before it is used. Anything
else (unreadable, damaged, another cell's, a folder) is recomputed with a one-line notice.

Ctrl-C (KeyboardInterrupt) ends a sweep promptly: pool workers ignore SIGINT and are killed, not waited for;
cells that finished, including ones whose results arrived while stopping, are kept; a second Ctrl-C while
stopping is noted and does not cut the cleanup short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from emqsim.fileio import write_atomically
from emqsim.policies import ReclaimPolicy
from emqsim.pools import SignalsHeld, batches, result_of, start_pool, stop_pool, submit_all, wait_some
from emqsim.records import RESULTS_SCHEMA
from emqsim.scenario import Scenario
from emqsim.stats import RunSummary, aggregate, paired_difference
from emqsim.summaries import simulate_summary

CACHE_FORMAT = 2  # the layout of a cache entry (identity + summaries)


@dataclass
class Cell:
    """One (scenario, policy) combination; its rows aggregate `replications` runs."""

    scenario: Scenario
    policy: ReclaimPolicy
    extra: dict[str, Any] = field(default_factory=dict)

    def identity(
        self, seed: int, replications: int, version: str, schema: int = RESULTS_SCHEMA
    ) -> dict[str, Any]:
        """Everything that determines this cell's results, as plain JSON data (stored in its cache entry)."""
        return {
            "scenario": repr(self.scenario),
            "policy": [type(self.policy).__qualname__, _policy_state(self.policy)],
            "seed": seed,
            "replications": replications,
            "results_schema": schema,
            "version": version,
        }

    def key(self, seed: int, replications: int, version: str, schema: int = RESULTS_SCHEMA) -> str:
        """A digest of `identity` (the cache entry's file name)."""
        text = json.dumps(self.identity(seed, replications, version, schema), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _policy_state(policy: ReclaimPolicy) -> dict[str, str]:
    return {k: repr(v) for k, v in sorted(vars(policy).items())}


def run_batch(tasks: Sequence[tuple[int, Scenario, ReclaimPolicy, int, int]]) -> list[tuple[int, RunSummary]]:
    """Run some (cell index, scenario, policy, seed, replication) tasks; module-level so pools can pickle it.
    Runs stream (no records kept): the summaries are those of the full records, bit for bit."""
    return [(index, simulate_summary(sc, pol, seed, rep)) for index, sc, pol, seed, rep in tasks]


@dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    summaries: list[list[RunSummary]]  # per cell, by replication
    complete: bool  # False if interrupted: rows hold the cells that finished
    cached_cells: int = 0

    def paired(self, a: int, b: int, metric: str) -> dict[str, Any]:
        """Paired difference metric(cell a) - metric(cell b) over the same seeds."""
        return paired_difference(self.summaries[a], self.summaries[b], metric)


def run_sweep(
    cells: Sequence[Cell],
    *,
    replications: int = 20,
    seed: int = 0,
    jobs: int | None = None,
    executor: Executor | None = None,
    progress: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
    version: str | None = None,
    on_interrupt: Callable[[int, int], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
    stop_requested: Callable[[], bool] | None = None,
) -> SweepResult:
    """Run every cell `replications` times and aggregate each into a row.

    jobs      worker processes (default: all cores; 1 runs in this process); ignored with `executor`
    executor  any concurrent.futures-style executor (e.g. a Dask `Client.get_executor()`)
    progress  a tqdm bar on stderr (default: only when stderr is a terminal)
    cache_dir finished cells are stored here and reused when the same cell is asked for again
    on_interrupt  called with (finished cells, cells) after a Ctrl-C
    on_notice     receives one-line notices (a cache entry recomputed or not stored); default: stderr
    stop_requested  polled while waiting: True stops the sweep as a Ctrl-C does (a signal handler's
                  KeyboardInterrupt can be swallowed when it lands in a callback that ignores exceptions)
    """
    from emqsim import __version__

    version = version or __version__
    notice = on_notice or _print_notice
    if replications < 1:
        raise ValueError("replications must be >= 1")
    cache = Path(cache_dir) if cache_dir is not None else None
    per_cell: list[list[RunSummary | None]] = [[None] * replications for _ in cells]
    cached = 0
    todo: list[tuple[int, Scenario, ReclaimPolicy, int, int]] = []
    for index, cell in enumerate(cells):
        hit = _load(cache, cell, seed, replications, version, notice) if cache else None
        if hit is not None:
            per_cell[index] = hit  # type: ignore[assignment]
            cached += 1
            continue
        todo.extend((index, cell.scenario, cell.policy, seed, rep) for rep in range(replications))

    remaining = [replications if per_cell[i][0] is None else 0 for i in range(len(cells))]
    complete = True
    bar = _progress_bar(len(todo), progress)

    def absorb(results: Iterable[tuple[int, RunSummary]]) -> None:
        for index, summary in results:
            per_cell[index][summary.replication] = summary
            remaining[index] -= 1
            if remaining[index] == 0 and cache is not None:
                _store(cache, cells[index], seed, replications, version, per_cell[index], notice)
            bar.update(1)

    own_pool: ProcessPoolExecutor | None = None
    futures: list[Future] = []
    absorbed: set[int] = set()
    try:
        workers = jobs if jobs is not None else (os.cpu_count() or 1)
        if executor is None and (workers <= 1 or len(todo) <= 1):
            for task in todo:
                if stop_requested is not None and stop_requested():
                    raise KeyboardInterrupt
                absorb(run_batch([task]))
        else:
            if executor is None:
                own_pool = executor = start_pool(workers)
            futures = submit_all(executor, run_batch, batches(todo, parts=64 * max(1, workers)))
            pending = set(futures)
            while pending:
                done, pending = wait_some(pending)
                for future in done:
                    absorbed.add(id(future))
                    absorb(result_of(future))
                if stop_requested is not None and stop_requested():
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        complete = False
        with _signals_deferred():
            for future in futures:  # results that arrived while stopping still count
                if id(future) not in absorbed and future.done() and not future.cancelled():
                    with contextlib.suppress(BaseException):
                        absorb(result_of(future))
            if own_pool is not None:
                # its queued tasks are cancelled by its own thread: a future cancelled from here while that
                # thread finds the pool broken makes it fail (InvalidStateError, a traceback on stderr)
                stop_pool(own_pool)
                own_pool = None
            else:
                with SignalsHeld():
                    for future in futures:
                        future.cancel()
            if on_interrupt is not None:
                on_interrupt(sum(r == 0 for r in remaining), len(cells))
    finally:
        bar.close()
        if own_pool is not None:
            own_pool.shutdown()

    rows: list[dict[str, Any]] = []
    kept: list[list[RunSummary]] = []
    for cell, summaries in zip(cells, per_cell, strict=True):
        if any(s is None for s in summaries):
            kept.append([])
            continue
        kept.append(summaries)  # type: ignore[arg-type]
        rows.append(aggregate(summaries, **cell.extra))  # type: ignore[arg-type]
    return SweepResult(rows=rows, summaries=kept, complete=complete, cached_cells=cached)


def _print_notice(text: str) -> None:
    print(f"emqsim: note: {text}", file=sys.stderr)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """While stopping after a Ctrl-C: a further SIGINT is ignored (the cleanup is bounded, a few seconds),
    so a second Ctrl-C cannot cut it short and lose the finished cells. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _progress_bar(total: int, enabled: bool | None):
    from tqdm.auto import tqdm

    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, disable=not enabled, unit="run", file=sys.stderr, desc="simulating", leave=False)


def _load(
    cache: Path,
    cell: Cell,
    seed: int,
    replications: int,
    version: str,
    notice: Callable[[str], None],
) -> list[RunSummary] | None:
    """The cell's cached summaries, or None (missing, or unusable: then recomputed with a notice)."""
    path = cache / f"{cell.key(seed, replications, version)}.json"
    try:
        if not path.exists() and not path.is_symlink():
            return None
        if not path.is_file():
            raise _BadEntry("not a regular file")
        data = json.loads(path.read_bytes().decode("utf-8"))
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            raise _BadEntry("an old or unknown layout")
        if data.get("identity") != cell.identity(seed, replications, version):
            raise _BadEntry("it belongs to another cell")
        items = data.get("summaries")
        if not isinstance(items, list) or len(items) != replications:
            raise _BadEntry(f"it does not hold {replications} runs")
        summaries = [_summary(item) for item in items]
        for rep, summary in enumerate(summaries):
            if (summary.replication, summary.seed, summary.scenario) != (rep, seed, cell.scenario.name):
                raise _BadEntry(f"run {rep} is another cell's or replication's")
        return summaries
    except (_BadEntry, OSError, ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, _BadEntry) else f"unreadable: {type(exc).__name__}"
        notice(f"cache entry {path} is not usable ({reason}); recomputing that cell")
        return None


class _BadEntry(Exception):
    pass


_SUMMARY_FIELDS = {f.name: f for f in dataclasses.fields(RunSummary)}


def _summary(item: Any) -> RunSummary:
    """A RunSummary from its JSON form, with every field present and of its declared type."""
    if not isinstance(item, dict) or set(item) != set(_SUMMARY_FIELDS):
        raise _BadEntry("a run has missing or extra fields")
    for name, value in item.items():
        kind = str(_SUMMARY_FIELDS[name].type)
        ok = {
            "str": lambda v: isinstance(v, str),
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "float": lambda v: isinstance(v, float),
            "list[float]": lambda v: isinstance(v, list) and all(isinstance(x, float) for x in v),
            "dict[str, Any]": lambda v: isinstance(v, dict),
        }.get(kind, lambda v: False)(value)
        if not ok:
            raise _BadEntry(f"field {name} has the wrong type")
    return RunSummary(**item)


def _store(
    cache: Path,
    cell: Cell,
    seed: int,
    replications: int,
    version: str,
    summaries: Sequence[RunSummary | None],
    notice: Callable[[str], None],
) -> None:
    entry = {
        "format": CACHE_FORMAT,
        "identity": cell.identity(seed, replications, version),
        "summaries": [asdict(s) for s in summaries],  # type: ignore[arg-type]
    }
    path = cache / f"{cell.key(seed, replications, version)}.json"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(entry, allow_nan=False))
    except (OSError, ValueError) as exc:
        notice(f"could not store cache entry {path} ({type(exc).__name__}: {exc}); the cell is not cached")
