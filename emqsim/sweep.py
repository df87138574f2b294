"""Grids of (scenario, policy) cells run over replications: seeds, executors, a resume cache, progress.

Seeds derive from (seed, replication) only, never from the policy or execution order: every policy sees the
same workload and faults in replication r (common random numbers), and serial, process-pool and Dask runs
give identical rows.

The resume cache cannot serve wrong numbers: an entry's name is a digest of everything that determines the
cell's results (scenario, policy, seed, replications, `RESULTS_SCHEMA`, a digest of emqsim's own source files
and of any user class the cell holds, such as a `Detector` subclass, and the versions of Python and the
libraries that compute), and the entry itself holds that identity in full and is checked against it, field by
field and type by type, before it is used; it carries a checksum of its content and may hold no NaN or
infinity. Anything else (unreadable, damaged, edited, another cell's, a folder) is recomputed with a one-line
notice.

Ctrl-C (KeyboardInterrupt) ends a sweep promptly: pool workers ignore SIGINT and are killed, not waited for;
cells that finished, including ones whose results arrived while stopping, are kept; a second Ctrl-C while
stopping is noted and does not cut the cleanup short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import platform
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from emqsim.errors import require_instance, require_whole
from emqsim.fileio import write_atomically
from emqsim.policies import ReclaimPolicy
from emqsim.pools import SignalsHeld, batches, result_of, start_pool, stop_pool, submit_all, wait_some
from emqsim.records import RESULTS_SCHEMA
from emqsim.scenario import Scenario
from emqsim.stats import RunSummary, aggregate, paired_difference
from emqsim.summaries import simulate_summary
from emqsim.user_code import PREFIX as USER_FILES

CACHE_FORMAT = 3  # the layout of a cache entry (identity + summaries + checksum)
COMPUTING_LIBRARIES = ("simpy", "numpy", "scipy")  # their versions are part of every cache key


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
            "code": code_digest(),
            "user_code": user_code_digest(self),
            "python": platform.python_version(),
            "libraries": library_versions(),
        }

    def key(self, seed: int, replications: int, version: str, schema: int = RESULTS_SCHEMA) -> str:
        """A digest of `identity` (the cache entry's file name)."""
        return _digest(self.identity(seed, replications, version, schema))


def _policy_state(policy: ReclaimPolicy) -> dict[str, str]:
    return {k: repr(v) for k, v in sorted(vars(policy).items())}


_PACKAGE = Path(__file__).resolve().parent
_CODE_SUFFIXES = (".py", ".lua")


@functools.cache
def code_digest() -> str:
    """A digest of emqsim's own source files (every .py and .lua in the package, by path and content), so a
    cache filled by an edited copy of emqsim is never served by another. Computed once per process (~1 MB)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in _PACKAGE.rglob("*") if p.suffix in _CODE_SUFFIXES and p.is_file()):
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@functools.cache
def library_versions() -> dict[str, str | None]:
    """The installed versions of the libraries a run computes with."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in COMPUTING_LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def user_code_digest(cell: Cell) -> str | None:
    """A digest of the code of every class outside emqsim that the cell's policy or scenario is made of (a
    `Detector` subclass, a user distribution), None when there is none. Per class: its file (helpers beside it
    count too), its source as `inspect.getsource` finds it (a notebook cell), and the compiled code of each of
    its methods with the simple values its closures and globals give them (two classes of one name in one
    file, or made by one factory with other numbers, differ there)."""
    classes = sorted(
        _user_classes((cell.scenario, cell.policy)), key=lambda c: (c.__module__, c.__qualname__)
    )
    if not classes:
        return None
    digest = hashlib.sha256()
    for cls in classes:
        digest.update(f"{cls.__module__}.{cls.__qualname__}\0".encode())
        _hash_class(digest, cls)
    return digest.hexdigest()


def _hash_class(digest: Any, cls: type) -> None:
    import inspect

    filename = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if filename:
        with contextlib.suppress(OSError):
            digest.update(hashlib.sha256(Path(filename).read_bytes()).digest())
    with contextlib.suppress(OSError, TypeError):
        digest.update(inspect.getsource(cls).encode())
    for name, member in sorted(vars(cls).items()):
        for function in _functions_of(member):
            code = function.__code__
            digest.update(name.encode() + b"\0" + _code_text(code).encode())
            cells = [c.cell_contents for c in function.__closure__ or () if _has_contents(c)]
            digest.update(repr([v for v in cells if _simple(v)]).encode())
            names = sorted(_names_used(code))
            digest.update(repr([(n, function.__globals__[n]) for n in names
                                if _simple(function.__globals__.get(n, object))]).encode())  # fmt: skip


def _functions_of(member: Any) -> list[Any]:
    if isinstance(member, staticmethod | classmethod):
        member = member.__func__
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if hasattr(f, "__code__")]
    return [member] if hasattr(member, "__code__") else []


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def _simple(value: Any) -> bool:
    if isinstance(value, tuple | list):  # not sets: their repr's order changes with PYTHONHASHSEED
        return all(_simple(v) for v in value)
    return isinstance(value, str | bytes | int | float | bool | type(None))


def _code_text(code: Any) -> str:
    """A code object as text that is the same in every process (marshal writes a frozenset constant in its
    hash order, which PYTHONHASHSEED changes): its bytecode, names and constants, nested code included."""
    consts = []
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            consts.append(_code_text(const))
        elif isinstance(const, frozenset):
            consts.append(repr(sorted(map(repr, const))))
        else:
            consts.append(repr(const))
    return repr((code.co_code.hex(), code.co_names, code.co_varnames, code.co_freevars, consts))


def _names_used(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names_used(const)
    return names


def _user_classes(root: object) -> set[type]:
    """Classes defined outside emqsim, the standard library and the computing libraries, of every object
    reachable from `root` through containers, dataclass fields and instance attributes (and their bases)."""
    found: set[type] = set()
    seen: set[int] = set()
    stack: list[tuple[object, int]] = [(root, 0)]
    while stack:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > 20:
            continue
        seen.add(id(obj))
        for cls in type(obj).__mro__:
            if _is_user_class(cls):
                found.add(cls)
        if isinstance(obj, str | bytes | int | float | bool | type(None)):
            continue
        if isinstance(obj, dict):
            stack.extend((v, depth + 1) for item in obj.items() for v in item)
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend((v, depth + 1) for v in obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.extend((v, depth + 1) for v in vars(obj).values())
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            stack.extend((getattr(obj, f.name, None), depth + 1) for f in dataclasses.fields(obj))
    return found


_LIBRARY_ROOTS = frozenset({"emqsim", "builtins", "numpy", "scipy", "simpy", "abc", "typing", "enum"})


def _is_user_class(cls: type) -> bool:
    if cls.__module__.startswith(USER_FILES):  # a detector imported from its file (emqsim.user_code)
        return True
    root = cls.__module__.split(".")[0]
    return not (root in _LIBRARY_ROOTS or root in sys.stdlib_module_names)


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
    require_whole("replications", replications, low=1)
    require_whole("seed", seed)
    require_whole("jobs", jobs, low=1, none=True)
    for index, cell in enumerate(cells):
        require_instance(f"cells[{index}]", cell, Cell, "a Cell(scenario, policy)")
        require_instance(f"cells[{index}].scenario", cell.scenario, Scenario, "a Scenario")
        require_instance(f"cells[{index}].policy", cell.policy, ReclaimPolicy, "a ReclaimPolicy")
    cache = Path(cache_dir) if cache_dir is not None else None
    per_cell: list[list[RunSummary | None]] = [[None] * replications for _ in cells]
    cached = 0
    stored: set[int] = set()  # cells in the cache: loaded from it, or stored when they finished
    todo: list[tuple[int, Scenario, ReclaimPolicy, int, int]] = []
    for index, cell in enumerate(cells):
        hit = _load(cache, cell, seed, replications, version, notice) if cache else None
        if hit is not None:
            per_cell[index] = hit  # type: ignore[assignment]
            cached += 1
            stored.add(index)
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
                stored.add(index)
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
            finished = [i for i, summaries in enumerate(per_cell) if all(x is not None for x in summaries)]
            if cache is not None:  # an interrupt inside `absorb` can land after a cell's last summary and
                for index in finished:  # before (or inside) its store: every cell the result keeps is cached
                    if index not in stored:
                        _store(cache, cells[index], seed, replications, version, per_cell[index], notice)
                        stored.add(index)
            if on_interrupt is not None:
                on_interrupt(len(finished), len(cells))
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
    identity = cell.identity(seed, replications, version)
    path = cache / f"{_digest(identity)}.json"
    try:
        if not path.exists() and not path.is_symlink():
            return None
        if not path.is_file():
            raise _BadEntry("not a regular file")
        data = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_refuse_constant)
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            raise _BadEntry("an old or unknown layout")
        if data.get("identity") != identity:
            raise _BadEntry("it belongs to another cell")
        items = data.get("summaries")
        if not isinstance(items, list) or len(items) != replications:
            raise _BadEntry(f"it does not hold {replications} runs")
        summaries = [_summary(item) for item in items]
        for rep, summary in enumerate(summaries):
            if (summary.replication, summary.seed, summary.scenario) != (rep, seed, cell.scenario.name):
                raise _BadEntry(f"run {rep} is another cell's or replication's")
        if data.get("checksum") != _checksum(identity, items):
            raise _BadEntry("its checksum does not match its content: edited or damaged")
        return summaries
    except (_BadEntry, OSError, ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, _BadEntry) else f"unreadable: {type(exc).__name__}"
        notice(f"cache entry {path} is not usable ({reason}); recomputing that cell")
        return None


class _BadEntry(Exception):
    pass


def _refuse_constant(name: str) -> Any:
    """json's hook for NaN, Infinity and -Infinity: no cache entry can hold them (they are stored with
    allow_nan=False), so one that does was written by someone else."""
    raise _BadEntry(f"it holds {name}, which no run can produce")


def _digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def _checksum(identity: dict[str, Any], summaries: Any) -> str:
    """A SHA-256 of an entry's identity and runs: a hand edit or a damaged byte no longer matches it."""
    text = json.dumps({"identity": identity, "summaries": summaries}, sort_keys=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


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
    identity = cell.identity(seed, replications, version)
    items = [asdict(s) for s in summaries]  # type: ignore[arg-type]
    path = cache / f"{_digest(identity)}.json"
    try:
        entry = {
            "format": CACHE_FORMAT,
            "identity": identity,
            "summaries": items,
            "checksum": _checksum(identity, items),
        }
        cache.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(entry, allow_nan=False))
    except (OSError, ValueError) as exc:
        notice(f"could not store cache entry {path} ({type(exc).__name__}: {exc}); the cell is not cached")
