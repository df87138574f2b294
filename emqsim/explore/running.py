"""`explore`: the search of a space, split in chunks over processes or an executor, folded into one result."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import numpy as np

from emqsim.errors import ConfigError, require_whole
from emqsim.explore.aggregate import _Aggregate, _key_from_order, estimate_runs
from emqsim.explore.report import _tie_text
from emqsim.explore.results import Boundary, Counterexample, Exploration, TieDependence
from emqsim.explore.search import _Search
from emqsim.explore.space import Space
from emqsim.pools import gather, owned_pool, submit_all
from emqsim.server import TieBreak

# A big search cuts its outermost coordinate in PARTS parts, which processes can share; any other is one part.
# Each part finds its own edges (a few lines of the coordinate), so parts cost runs: little in a big search, up to
# PARTS times the runs where the coordinate has few values. Big means an estimate of SPLIT_RUNS runs or more
# (`estimate_runs`) and at least MIN_PART values of the coordinate per part. The rule reads the space alone, not
# the processes, so every machine and every --jobs prints the same exploration, its runs included.
PARTS = 4
SPLIT_RUNS = 100_000
MIN_PART = 1_000

# In a pool's worker process: the parent's count of runs, for its progress bar (`_count_runs_in`).
_runs_done: Any = None


def _count_runs_in(counter: Any) -> None:
    """A pool worker's setup: count this process's runs in the parent's shared `counter`."""
    global _runs_done
    _runs_done = counter


def _one_more_run() -> None:
    with _runs_done.get_lock():
        _runs_done.value += 1


def _chunk(
    args: tuple[Space, int, int, bool], on_run: Callable[[], None] | None = None
) -> tuple[_Aggregate, int, list, dict]:
    """Explore the outermost coordinate from lo to hi and sum it up (module-level, so process pools can
    pickle it). `on_run` (in this process) or the pool's shared counter is told of every run."""
    sp, lo, hi, ties = args
    search = _Search(sp, ties)
    search.eval.on_run = on_run if on_run is not None or _runs_done is None else _one_more_run
    structure = search.level((), 0, lo, hi) if len(sp.dims) > 1 else search.line(())
    agg = _Aggregate(sp)
    agg.structure(structure, len(sp.dims) - 1)
    agg.space = None  # not sent back
    return agg, search.eval.runs, search.tie_findings, search.tie_latencies


def _parts(sp: Space, ties: bool) -> int:
    """How many parts the search of `sp` is cut in (see PARTS)."""
    big = sp.dims[0].size >= PARTS * MIN_PART and estimate_runs(sp, ties) >= SPLIT_RUNS
    return PARTS if big else 1


def explore(
    sp: Space,
    *,
    jobs: int | None = 1,
    executor: Executor | None = None,
    ties: bool = True,
    progress: Callable[[int], None] | None = None,
    parts: int | None = None,
) -> Exploration:
    """Search every point of `sp` (see the module docstring); a big search's parts (`PARTS`; `parts` sets
    their number instead) are shared by `jobs` processes (None: one per core) or an `executor` (e.g. Dask's),
    and the result is the same either way. `ties`: also run the points around every flip of a property under
    the other same-millisecond orders (`TIE_VARIANTS`). `progress(n)` is told of n more runs as they happen
    (run by run in this process or a pool of ours, part by part on an executor)."""
    if not sp.dims:
        raise ConfigError("explore: every coordinate is pinned; nothing to search")
    outer = sp.dims[0]
    require_whole("explore: parts", parts, low=1, none=True)
    parts = 1 if len(sp.dims) == 1 else min(_parts(sp, ties) if parts is None else parts, outer.size)
    edges = np.linspace(outer.lo, outer.hi + 1, parts + 1).round().astype(int).tolist()
    tasks = [(sp, lo, hi - 1, ties) for lo, hi in zip(edges, edges[1:], strict=False) if hi - 1 >= lo]
    processes = min(len(tasks), jobs if jobs is not None else (os.cpu_count() or 1))
    if executor is not None:
        results = gather(submit_all(executor, _chunk, tasks))
        if progress is not None:
            progress(sum(r[1] for r in results))
    elif processes <= 1:
        tick = None if progress is None else (lambda: progress(1))
        results = [_chunk(t, tick) for t in tasks]
    else:
        counter = multiprocessing.Value("q", 0)
        told = 0  # runs already passed on to `progress`

        def tell() -> None:
            nonlocal told
            if progress is not None and counter.value > told:
                progress(counter.value - told)
                told = counter.value

        with owned_pool(processes, _count_runs_in, (counter,)) as pool:
            results = gather(submit_all(pool, _chunk, tasks), between=tell)
    agg = _Aggregate(sp)
    runs = 0
    tie_findings = []
    tie_latencies: dict[TieBreak, list] = {}
    for part, n, found, extremes in results:
        runs += n
        agg.merge(part)
        tie_findings += found
        for tie, pair in extremes.items():
            both = tie_latencies.get(tie, []) + pair
            tie_latencies[tie] = [min(both), max(both)]
    values, weights = agg.histogram()
    key = _key_from_order(agg.order)
    counterexamples = [
        Counterexample(name, sp.coords(agg.best[i]), agg.best[i])
        for i, name in enumerate(agg.names)
        if i in agg.best
    ]
    boundaries = []
    for i, name in enumerate(agg.names):
        flips = agg.flips.get(i)
        if flips:
            first = min(flips, key=lambda f: (f[0], key(f[1] + (f[0],))))
            last = max(flips, key=lambda f: f[0])
            boundaries.append(
                Boundary(
                    name, sp.dims[-1].role, first[0], last[0],
                    sp.coords(first[1] + (first[0],)), sp.coords(last[1] + (last[0],)),
                )
            )  # fmt: skip
    any_order = {
        _tie_text(tie): {"min": (lo[0], sp.coords(lo[1])), "max": (hi[0], sp.coords(hi[1]))}
        for tie, (lo, hi) in sorted(tie_latencies.items(), key=lambda kv: _tie_text(kv[0]))
    }
    ties_out = [TieDependence(sp.coords(point), _tie_text(tie), props) for point, tie, props in tie_findings]
    return Exploration(
        space=sp,
        points=agg.total,
        runs=runs,
        counts=dict(zip(agg.names, agg.held, strict=True)),
        latency_values=values,
        latency_weights=weights,
        never_reclaimed=agg.never,
        counterexamples=counterexamples,
        boundaries=boundaries,
        tie_dependent=ties_out,
        tie_extremes=any_order,
    )
