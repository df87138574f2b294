"""run_sweep: seeds from (cell, replication) not order, serial == process pool, the resume cache, Ctrl-C."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import emqsim.sweep as sweep_module
from emqsim import LeasePolicy, TimeoutPolicy, standard
from emqsim.sweep import Cell, SweepResult, run_sweep

REPS = 3


def small_cells() -> list[Cell]:
    """Six cheap cells: two one-job scenarios and a small production fleet, each under lease and timeout."""
    scenarios = [standard("fast-dead"), standard("frozen"), standard("production", workers=4, jobs=20)]
    policies = [LeasePolicy(30, 10, 5), TimeoutPolicy(60, 5)]
    return [Cell(s, p) for s in scenarios for p in policies]


def sweep(cells: list[Cell], **kw: Any) -> SweepResult:
    kw.setdefault("replications", REPS)
    kw.setdefault("jobs", 1)
    return run_sweep(cells, progress=False, **kw)


@pytest.fixture(scope="module")
def serial() -> SweepResult:
    return sweep(small_cells())


def test_shuffled_cell_order_gives_the_same_rows_per_cell(serial: SweepResult) -> None:
    cells = small_cells()
    order = list(range(len(cells)))
    random.Random(3).shuffle(order)
    assert order != sorted(order)
    shuffled = sweep([cells[i] for i in order])
    assert shuffled.complete
    for position, original in enumerate(order):
        assert shuffled.rows[position] == serial.rows[original]
        assert shuffled.summaries[position] == serial.summaries[original]


def test_a_cell_alone_equals_the_same_cell_in_a_grid(serial: SweepResult) -> None:
    cells = small_cells()
    alone = sweep([cells[4]])
    assert alone.rows == [serial.rows[4]]


def test_replication_r_is_the_same_run_whatever_the_number_of_replications(serial: SweepResult) -> None:
    fewer = sweep(small_cells()[4:6], replications=2)
    assert fewer.summaries == [s[:2] for s in serial.summaries[4:6]]


def test_seed_changes_the_runs(serial: SweepResult) -> None:
    other = sweep(small_cells()[4:5], seed=1)
    assert other.summaries[0] != serial.summaries[4]


def test_every_replication_is_seeded_differently(serial: SweepResult) -> None:
    production = serial.summaries[4]
    assert [s.replication for s in production] == list(range(REPS))
    assert len({json.dumps(s.job_latencies) for s in production}) == REPS


def test_serial_equals_process_pool(serial: SweepResult) -> None:
    pooled = sweep(small_cells(), jobs=2)
    assert pooled.complete
    assert pooled.rows == serial.rows
    assert pooled.summaries == serial.summaries


def test_any_executor_gives_the_serial_rows(serial: SweepResult) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = sweep(small_cells(), executor=pool)
    assert threaded.rows == serial.rows


def test_replications_must_be_positive() -> None:
    with pytest.raises(ValueError, match="replications"):
        sweep(small_cells()[:1], replications=0)


# -- the resume cache --------------------------------------------------------------------------------------------
def forbid_running(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(tasks: Any) -> Any:
        raise AssertionError("a cached cell was simulated again")

    monkeypatch.setattr(sweep_module, "run_batch", fail)


def count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the cell index of every task the sweep simulates."""
    seen: list[int] = []
    real = sweep_module.run_batch

    def counting(tasks: Any) -> Any:
        seen.extend(task[0] for task in tasks)
        return real(tasks)

    monkeypatch.setattr(sweep_module, "run_batch", counting)
    return seen


def test_cache_hit_reuses_every_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    cells = small_cells()
    first = sweep(cells, cache_dir=tmp_path)
    assert first.cached_cells == 0 and first.rows == serial.rows
    assert len(list(tmp_path.glob("*.json"))) == len(cells)
    forbid_running(monkeypatch)
    second = sweep(cells, cache_dir=tmp_path)
    assert second.cached_cells == len(cells)
    assert second.rows == serial.rows and second.summaries == serial.summaries


def test_cache_key_covers_every_parameter() -> None:
    cell = Cell(standard("fast-dead"), LeasePolicy(30, 10, 5))
    base = cell.key(0, REPS, "1.0")
    variants = [
        cell.key(1, REPS, "1.0"),  # seed
        cell.key(0, REPS + 1, "1.0"),  # replications
        cell.key(0, REPS, "1.1"),  # version
        Cell(standard("fast-dead", die_after=2.0), cell.policy).key(0, REPS, "1.0"),  # a scenario knob
        Cell(cell.scenario, LeasePolicy(30, 5, 5)).key(0, REPS, "1.0"),  # a policy setting
        Cell(cell.scenario, LeasePolicy(30, 10, 5, two_phase=False)).key(0, REPS, "1.0"),  # a policy option
        Cell(cell.scenario, TimeoutPolicy(30, 5)).key(0, REPS, "1.0"),  # the policy class
    ]
    assert len({base, *variants}) == 1 + len(variants)
    assert Cell(standard("fast-dead"), LeasePolicy(30, 10, 5)).key(0, REPS, "1.0") == base  # stable


def test_cache_miss_on_other_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = small_cells()[:2]
    sweep(cells, cache_dir=tmp_path)
    seen = count_runs(monkeypatch)
    other_seed = sweep(cells, cache_dir=tmp_path, seed=5)
    assert other_seed.cached_cells == 0 and len(seen) == 2 * REPS
    other_policy = sweep([Cell(cells[0].scenario, LeasePolicy(20, 5, 5))], cache_dir=tmp_path)
    assert other_policy.cached_cells == 0
    assert len(list(tmp_path.glob("*.json"))) == 2 + 2 + 1


def test_new_version_recomputes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = small_cells()[:2]
    old = sweep(cells, cache_dir=tmp_path, version="0.0.1")
    seen = count_runs(monkeypatch)
    new = sweep(cells, cache_dir=tmp_path, version="0.0.2")
    assert new.cached_cells == 0 and sorted(set(seen)) == [0, 1]
    assert new.rows == old.rows  # same code, so same numbers; but they were computed again
    assert len(list(tmp_path.glob("*.json"))) == 4
    again = sweep(cells, cache_dir=tmp_path, version="0.0.1")
    assert again.cached_cells == 2


@pytest.mark.parametrize(
    "damage",
    ["{not json", "", "[1, 2, 3]", '{"a": 1}', '[{"scenario": "x"}]', "null"],
    ids=["garbage", "empty", "numbers", "object", "missing-fields", "null"],
)
def test_damaged_cache_entry_is_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, serial: SweepResult
) -> None:
    cells = small_cells()[:2]
    sweep(cells, cache_dir=tmp_path)
    damaged = tmp_path / f"{cells[1].key(0, REPS, _version())}.json"
    assert damaged.exists()
    damaged.write_text(damage)
    seen = count_runs(monkeypatch)
    result = sweep(cells, cache_dir=tmp_path)
    assert result.cached_cells == 1 and set(seen) == {1}
    assert result.rows == serial.rows[:2]
    json.loads(damaged.read_text())  # rewritten whole


def test_short_cache_entry_is_recomputed(tmp_path: Path, serial: SweepResult) -> None:
    cells = small_cells()[:1]
    sweep(cells, cache_dir=tmp_path)
    path = tmp_path / f"{cells[0].key(0, REPS, _version())}.json"
    entry = json.loads(path.read_text())
    entry["summaries"] = entry["summaries"][:1]  # valid JSON, one summary of three
    path.write_text(json.dumps(entry))
    result = sweep(cells, cache_dir=tmp_path)
    assert result.cached_cells == 0
    assert result.rows == serial.rows[:1]


def test_cache_key_changes_with_the_results_schema() -> None:
    """A result-changing commit bumps RESULTS_SCHEMA (tests/test_golden.py refuses changed digests under an
    unchanged schema), and every cache entry written before it stops matching."""
    from emqsim import RESULTS_SCHEMA

    cell = Cell(standard("fast-dead"), LeasePolicy(30, 10, 5))
    assert cell.key(0, REPS, "1.0") == cell.key(0, REPS, "1.0", RESULTS_SCHEMA)
    assert cell.key(0, REPS, "1.0", RESULTS_SCHEMA + 1) != cell.key(0, REPS, "1.0")
    assert cell.identity(0, REPS, "1.0")["results_schema"] == RESULTS_SCHEMA


def test_a_cache_written_under_an_older_schema_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emqsim import RESULTS_SCHEMA

    cells = small_cells()[:1]
    monkeypatch.setattr(sweep_module, "RESULTS_SCHEMA", RESULTS_SCHEMA - 1)
    monkeypatch.setattr(Cell.identity, "__defaults__", (RESULTS_SCHEMA - 1,))
    monkeypatch.setattr(Cell.key, "__defaults__", (RESULTS_SCHEMA - 1,))
    sweep(cells, cache_dir=tmp_path)
    monkeypatch.undo()
    seen = count_runs(monkeypatch)
    result = sweep(cells, cache_dir=tmp_path)
    assert result.cached_cells == 0 and len(seen) == REPS


def test_an_entry_copied_from_another_cell_is_detected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    cells = small_cells()[:2]
    sweep(cells, cache_dir=tmp_path)
    first, second = (tmp_path / f"{c.key(0, REPS, _version())}.json" for c in cells)
    second.write_bytes(first.read_bytes())  # cell 0's numbers under cell 1's name
    notices: list[str] = []
    seen = count_runs(monkeypatch)
    result = sweep(cells, cache_dir=tmp_path, on_notice=notices.append)
    assert result.cached_cells == 1 and set(seen) == {1}
    assert result.rows == serial.rows[:2]
    assert len(notices) == 1 and "another cell" in notices[0] and "\n" not in notices[0]


def test_an_entry_whose_identity_was_edited_to_match_but_whose_runs_differ_is_detected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    cells = [
        Cell(standard("fast-dead"), LeasePolicy(30, 10, 5)),
        Cell(standard("frozen"), LeasePolicy(30, 10, 5)),
    ]
    sweep(cells, cache_dir=tmp_path)
    first, second = (tmp_path / f"{c.key(0, REPS, _version())}.json" for c in cells)
    forged = json.loads(first.read_text())
    forged["identity"] = json.loads(second.read_text())["identity"]
    second.write_text(json.dumps(forged))
    notices: list[str] = []
    result = sweep(cells, cache_dir=tmp_path, on_notice=notices.append)
    assert result.cached_cells == 1 and len(notices) == 1 and "another cell" in notices[0]


@pytest.mark.parametrize("field,value", [("false_reclaims", "3"), ("end", True), ("detection_latencies", [1]),
                                         ("reclaims", 1.5), ("scenario", 7), ("policy", [])])  # fmt: skip
def test_a_wrong_typed_cache_entry_is_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serial: SweepResult, field: str, value: Any
) -> None:
    cells = small_cells()[:1]
    sweep(cells, cache_dir=tmp_path)
    path = tmp_path / f"{cells[0].key(0, REPS, _version())}.json"
    entry = json.loads(path.read_text())
    entry["summaries"][1][field] = value
    path.write_text(json.dumps(entry))
    notices: list[str] = []
    result = sweep(cells, cache_dir=tmp_path, on_notice=notices.append)
    assert result.cached_cells == 0 and result.rows == serial.rows[:1]
    assert len(notices) == 1 and "recomputing" in notices[0]


def test_a_folder_where_an_entry_should_be_is_recomputed_with_a_notice(
    tmp_path: Path, serial: SweepResult
) -> None:
    cells = small_cells()[:1]
    (tmp_path / f"{cells[0].key(0, REPS, _version())}.json").mkdir()
    notices: list[str] = []
    result = sweep(cells, cache_dir=tmp_path, on_notice=notices.append)
    assert result.complete and result.rows == serial.rows[:1]
    assert len(notices) == 2  # not usable; and could not be stored over the folder
    assert "not a regular file" in notices[0] and "not cached" in notices[1]


def test_an_unreadable_entry_is_recomputed(tmp_path: Path, serial: SweepResult) -> None:
    cells = small_cells()[:1]
    sweep(cells, cache_dir=tmp_path)
    path = tmp_path / f"{cells[0].key(0, REPS, _version())}.json"
    path.write_bytes(b"\xff\xfe not utf-8")
    notices: list[str] = []
    result = sweep(cells, cache_dir=tmp_path, on_notice=notices.append)
    assert result.cached_cells == 0 and result.rows == serial.rows[:1] and len(notices) == 1


def _version() -> str:
    from emqsim import __version__

    return __version__


# -- Ctrl-C ----------------------------------------------------------------------------------------------------
def interrupt_at_cell(monkeypatch: pytest.MonkeyPatch, stop_cell: int) -> None:
    """The first task of `stop_cell` raises KeyboardInterrupt, as Ctrl-C in the middle of a serial sweep."""
    real = sweep_module.run_batch

    def batch(tasks: Any) -> Any:
        if any(task[0] == stop_cell for task in tasks):
            raise KeyboardInterrupt
        return real(tasks)

    monkeypatch.setattr(sweep_module, "run_batch", batch)


def test_interrupted_serial_sweep_keeps_finished_cells(
    monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    interrupt_at_cell(monkeypatch, 2)
    calls: list[tuple[int, int]] = []
    result = sweep(small_cells(), on_interrupt=lambda done, total: calls.append((done, total)))
    assert not result.complete
    assert result.rows == serial.rows[:2]
    assert result.summaries[:2] == serial.summaries[:2]
    assert result.summaries[2:] == [[]] * 4
    assert calls == [(2, 6)]


def test_interrupted_sweep_resumes_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    interrupt_at_cell(monkeypatch, 3)
    partial = sweep(small_cells(), cache_dir=tmp_path)
    assert not partial.complete and len(partial.rows) == 3
    assert len(list(tmp_path.glob("*.json"))) == 3  # only finished cells are stored
    monkeypatch.undo()
    seen = count_runs(monkeypatch)
    resumed = sweep(small_cells(), cache_dir=tmp_path)
    assert resumed.complete and resumed.cached_cells == 3
    assert set(seen) == {3, 4, 5}
    assert resumed.rows == serial.rows


def test_an_interrupt_inside_a_cells_store_still_caches_every_row_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    """Ctrl-C held down can land between a cell's last summary and its cache entry (inside the atomic write):
    the sweep stores that cell while it stops, so every row it returns is cached too (CI24 caught 3 rows and
    2 cache entries once)."""
    real = sweep_module.write_atomically
    calls = []

    def write(path: Any, text: Any) -> None:
        calls.append(path)
        if len(calls) == 2:  # the second cell's store, interrupted before anything is written
            raise KeyboardInterrupt
        real(path, text)

    monkeypatch.setattr(sweep_module, "write_atomically", write)
    result = sweep(small_cells(), cache_dir=tmp_path)
    assert not result.complete and len(result.rows) == 2
    assert result.rows == serial.rows[:2]
    assert len(list(tmp_path.glob("*.json"))) == 2  # the interrupted store was done again while stopping
    assert not list(tmp_path.glob(".emqsim-*"))


class InterruptingExecutor(Executor):
    """Runs each batch at once; the batch holding `stop_cell` comes back as a Ctrl-C."""

    def __init__(self, stop_cell: int) -> None:
        self.stop_cell = stop_cell

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        if any(task[0] == self.stop_cell for task in args[0]):
            future.set_exception(KeyboardInterrupt())
        else:
            future.set_result(fn(*args, **kwargs))
        return future


def test_interrupted_executor_sweep_keeps_only_whole_cells(serial: SweepResult) -> None:
    result = run_sweep(
        small_cells(), replications=REPS, executor=InterruptingExecutor(stop_cell=4), progress=False
    )
    assert not result.complete
    assert result.summaries[4] == []
    kept = [i for i, s in enumerate(result.summaries) if s]
    assert result.rows == [serial.rows[i] for i in kept]
    assert all(result.summaries[i] == serial.summaries[i] for i in kept)


def test_interrupted_process_pool_returns_promptly(
    monkeypatch: pytest.MonkeyPatch, serial: SweepResult
) -> None:
    """Ctrl-C while waiting on the pool: the pool is cancelled; the first finished cell is kept, and so is any
    other whose result had already arrived when the interrupt was handled (how many depends on timing)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    calls: list[int] = []

    def one_then_interrupt(futures: Any, **kwargs: Any) -> Any:
        if calls:  # the wait after the first finished batch is interrupted
            raise KeyboardInterrupt
        done, pending = wait(futures, return_when=FIRST_COMPLETED)  # until a batch finishes
        calls.append(len(done))
        return done, pending

    monkeypatch.setattr(sweep_module, "wait_some", one_then_interrupt)
    result = sweep(small_cells(), replications=1, jobs=2)
    assert not result.complete
    kept = [i for i, s in enumerate(result.summaries) if s]
    assert len(kept) >= 1 and len(result.rows) == len(kept)  # one batch = one single-replication cell
    single = sweep(small_cells(), replications=1)
    assert result.rows == [single.rows[i] for i in kept]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_stop_request_ends_the_sweep_like_ctrl_c(jobs: int) -> None:
    """A Ctrl-C whose KeyboardInterrupt Python swallowed (it landed in an at-fork hook) still stops the sweep:
    `stop_requested` is polled while waiting, and what finished is kept."""
    cells = [Cell(standard("production", jobs=400), LeasePolicy(30, 10, 5))] * 3
    polls: list[int] = []
    interrupted: list[tuple[int, int]] = []

    def stop() -> bool:
        polls.append(1)
        return len(polls) > 1

    result = run_sweep(
        cells, replications=50, jobs=jobs, progress=False, stop_requested=stop,
        on_interrupt=lambda done, total: interrupted.append((done, total)),
    )  # fmt: skip
    assert not result.complete and interrupted and interrupted[0][1] == 3
    assert len(result.rows) == interrupted[0][0] < 3


# -- the cache proves what it serves (issue 30) ----------------------------------------------------------------
@pytest.mark.slow  # a second Python process importing a copy of the package: about 5 s
def test_an_edited_copy_of_emqsim_does_not_fill_the_real_ones_cache(tmp_path: Path) -> None:
    """A copy of the package with one result-changing edit (same version, same RESULTS_SCHEMA, same policy
    attributes) fills a cache folder; the real package finds nothing there to serve: its source differs."""
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "copy"
    shutil.copytree(
        Path(sweep_module.__file__).parent, copy / "emqsim", ignore=shutil.ignore_patterns("__pycache__")
    )
    stats = copy / "emqsim" / "stats.py"
    text = stats.read_text()
    assert text.count("self.detection_latencies.append(latency)") == 1
    stats.write_text(
        text.replace(
            "self.detection_latencies.append(latency)", "self.detection_latencies.append(latency + 5.0)"
        )
    )
    cache = tmp_path / "cache"
    program = (
        "import emqsim, json; from emqsim import LeasePolicy, standard; from emqsim.sweep import Cell, run_sweep\n"
        f"r = run_sweep([Cell(standard('fast-dead'), LeasePolicy(30, 10, 5))], replications=2, jobs=1, progress=False, cache_dir={str(cache)!r})\n"
        "print(json.dumps([emqsim.__file__, r.rows[0]['detection_latency_mean_s']]))"
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=copy, capture_output=True, text=True, timeout=120
    )
    where, edited = json.loads(done.stdout)
    assert where.startswith(str(copy)) and len(list(cache.glob("*.json"))) == 1
    real = sweep([Cell(standard("fast-dead"), LeasePolicy(30, 10, 5))], replications=2, cache_dir=cache)
    assert real.cached_cells == 0
    assert real.rows[0]["detection_latency_mean_s"] == pytest.approx(edited - 5.0)
    assert len(list(cache.glob("*.json"))) == 2


DETECTOR_SOURCE = """
class Suspicious(Detector):
    def suspect(self, job, now):
        return {rule}
"""


def user_detector(rule: str) -> type:
    """A Detector subclass named Suspicious in a module `userdet` that has no file (as in a notebook)."""
    from emqsim import Detector

    namespace: dict[str, Any] = {"__name__": "userdet", "Detector": Detector}
    exec(DETECTOR_SOURCE.format(rule=rule), namespace)
    return namespace["Suspicious"]


def test_two_detectors_of_one_name_and_parameters_but_another_suspect_do_not_share_entries(
    tmp_path: Path,
) -> None:
    quick, never = user_detector("now > 3"), user_detector("False")
    assert quick.__qualname__ == never.__qualname__ and quick.__module__ == never.__module__
    scenario = standard("fast-dead", horizon=120.0)
    first = sweep([Cell(scenario, quick(beat=2.0, scan=1.0))], cache_dir=tmp_path)
    second = sweep([Cell(scenario, never(beat=2.0, scan=1.0))], cache_dir=tmp_path)
    assert second.cached_cells == 0
    assert first.rows != second.rows  # a shared entry would have served the first detector's numbers
    again = sweep([Cell(scenario, user_detector("now > 3")(beat=2.0, scan=1.0))], cache_dir=tmp_path)
    assert again.cached_cells == 1 and again.rows == first.rows  # the same code hits


def test_the_key_holds_the_code_and_the_libraries() -> None:
    identity = Cell(standard("fast-dead"), LeasePolicy(30, 10, 5)).identity(0, REPS, "1.0")
    assert len(identity["code"]) == 64 and identity["user_code"] is None
    assert set(identity["libraries"]) == {"simpy", "numpy", "scipy"} and identity["python"]


def _edit_runs(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    entry = json.loads(path.read_text())
    for run in entry["summaries"]:
        edit(run)
    path.write_text(json.dumps(entry))


def _plus(run: dict[str, Any]) -> None:
    for name in ("reclaims", "false_reclaims", "completed_jobs", "attempts"):
        run[name] += 7
    run["detection_latencies"] = [x + 1000.0 for x in run["detection_latencies"]]


def _nan(run: dict[str, Any]) -> None:
    run["hostage_time"] = float("nan")


@pytest.mark.parametrize("edit,reason", [(_plus, "checksum"), (_nan, "NaN")], ids=["edited", "nan"])
def test_a_tampered_or_nan_entry_is_recomputed_with_a_note(
    tmp_path: Path, serial: SweepResult, edit: Callable[[dict[str, Any]], None], reason: str
) -> None:
    cells = small_cells()[:1]
    sweep(cells, cache_dir=tmp_path)
    path = tmp_path / f"{cells[0].key(0, REPS, _version())}.json"
    _edit_runs(path, edit)
    notices: list[str] = []
    result = sweep(cells, cache_dir=tmp_path, on_notice=notices.append)
    assert result.cached_cells == 0 and result.rows == serial.rows[:1]
    assert len(notices) == 1 and reason in notices[0] and "recomputing" in notices[0]
    assert sweep(cells, cache_dir=tmp_path).cached_cells == 1  # rewritten, and good again
