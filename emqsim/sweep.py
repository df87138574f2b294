"""Grids of (scenario, policy) cells run over replications: seeds, executors, a resume cache, progress.

Seeds derive from (seed, replication) only, never from the policy or execution order: every policy sees the
same workload and faults in replication r (common random numbers), and serial, process-pool and Dask runs
give identical rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from emqsim.policies import ReclaimPolicy
from emqsim.scenario import Scenario
from emqsim.stats import RunSummary, aggregate, paired_difference, simulate_summary, write_atomically


@dataclass
class Cell:
    """One (scenario, policy) combination; its rows aggregate `replications` runs."""

    scenario: Scenario
    policy: ReclaimPolicy
    extra: dict[str, Any] = field(default_factory=dict)

    def key(self, seed: int, replications: int, version: str) -> str:
        """A digest of everything that determines this cell's results (for the resume cache)."""
        text = json.dumps(
            {
                "scenario": repr(self.scenario),
                "policy": [type(self.policy).__qualname__, _policy_state(self.policy)],
                "seed": seed,
                "replications": replications,
                "version": version,
            },
            sort_keys=True,
        )
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
) -> SweepResult:
    """Run every cell `replications` times and aggregate each into a row.

    jobs      worker processes (default: all cores; 1 runs in this process); ignored with `executor`
    executor  any concurrent.futures-style executor (e.g. a Dask `Client.get_executor()`)
    progress  a tqdm bar on stderr (default: only when stderr is a terminal)
    cache_dir finished cells are stored here and reused when the same cell is asked for again
    """
    from emqsim import __version__

    version = version or __version__
    if replications < 1:
        raise ValueError("replications must be >= 1")
    cache = Path(cache_dir) if cache_dir is not None else None
    per_cell: list[list[RunSummary | None]] = [[None] * replications for _ in cells]
    cached = 0
    todo: list[tuple[int, Scenario, ReclaimPolicy, int, int]] = []
    for index, cell in enumerate(cells):
        hit = _load(cache, cell.key(seed, replications, version)) if cache else None
        if hit is not None and [s.replication for s in hit] == list(range(replications)):
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
                _store(cache, cells[index].key(seed, replications, version), per_cell[index])
            bar.update(1)

    own_pool = None
    try:
        workers = jobs if jobs is not None else (os.cpu_count() or 1)
        if executor is None and (workers <= 1 or len(todo) <= 1):
            for task in todo:
                absorb(run_batch([task]))
        else:
            if executor is None:
                own_pool = executor = ProcessPoolExecutor(max_workers=workers)
            batches = _batches(todo, parts=64 * max(1, workers))
            futures: list[Future] = [executor.submit(run_batch, b) for b in batches]
            for future in as_completed(futures):
                absorb(future.result())
    except KeyboardInterrupt:
        complete = False
        if own_pool is not None:
            own_pool.shutdown(wait=False, cancel_futures=True)
            own_pool = None
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


def _batches(todo: list, parts: int) -> list[list]:
    size = max(1, -(-len(todo) // parts))
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def _progress_bar(total: int, enabled: bool | None):
    from tqdm.auto import tqdm

    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, disable=not enabled, unit="run", file=sys.stderr, desc="simulating", leave=False)


def _load(cache: Path, key: str) -> list[RunSummary] | None:
    path = cache / f"{key}.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return [RunSummary(**item) for item in data]
    except (ValueError, TypeError):
        return None  # a damaged entry is recomputed


def _store(cache: Path, key: str, summaries: Sequence[RunSummary | None]) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    write_atomically(cache / f"{key}.json", json.dumps([asdict(s) for s in summaries], allow_nan=False))  # type: ignore[arg-type]
