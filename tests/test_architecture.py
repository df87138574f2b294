"""Imports go one way: core (store <- protocol <- policies <- server <- workers <- engine <- stats) <- features
(sweep, explore, tune, grading, live, ...) <- front ends (cli, plots, figures, timeline_html, notebooks).

Every module under emqsim/ is parsed with `ast`; every import counts, at the top, inside functions and under
`if TYPE_CHECKING:` (a type-level cycle is still a cycle for a reader). A module may import its own layer or
the layers below it, never above, and no two modules may import each other, directly or round a loop. So a
feature never imports a front end, not even for a type: its results are plain data that the front ends print
and draw. (The notebooks import the library from outside the package: nothing in emqsim/ imports them.)
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "emqsim"
MAX_LINES = (
    700  # a module longer than this does more than one job: split it (docs/model.md's map of the code)
)

# Bottom to top. A module belongs to the layer of the longest name listed that is it or its package.
CORE: list[tuple[str, list[str]]] = [
    (
        "foundation",
        [
            "emqsim._simpy_fast",
            "emqsim.errors",
            "emqsim.watchdog",  # stops a detector whose suspect() blocks (standard library only)
            "emqsim._quiet_start",
            "emqsim.units",
            "emqsim.keys",
            "emqsim.records",
            "emqsim.seeds",
            "emqsim.fields",
            "emqsim.fileio",
            "emqsim.pools",
            "emqsim.processes",  # process groups and parent-death signals (standard library only)
            "emqsim.distributions",
            "emqsim.palette",  # the timelines' shared colours (standard library only)
            "emqsim.live.lua",
            "emqsim.live.clockwatch",  # standard library only: it also runs as a script, in a process of its own
        ],
    ),
    ("store", ["emqsim.store"]),
    ("model inputs", ["emqsim.faults", "emqsim.scenario"]),
    ("protocol", ["emqsim.protocol"]),
    ("policies", ["emqsim.policies", "emqsim.presets", "emqsim.ledger", "emqsim.user_code"]),
    ("server", ["emqsim.server"]),
    ("workers", ["emqsim.client", "emqsim.checks", "emqsim.worker"]),
    ("engine", ["emqsim.engine"]),
    ("stats", ["emqsim.stats", "emqsim.analytic", "emqsim.analytic_stalls", "emqsim.fencing"]),
    ("summaries", ["emqsim.summaries"]),
    ("scenario files", ["emqsim.config"]),  # TOML in, the model's inputs out: features may read them too
]
# What the library does with the core: each answers one kind of question, and returns plain data.
FEATURES = [
    "emqsim.sweep",
    "emqsim.explore",
    "emqsim.tune",
    "emqsim.grading",
    "emqsim.live",  # the same protocol on a real Redis with real processes (its command line is a front end)
    "emqsim.assignments",
    "emqsim.verdict",
    "emqsim.lessons",  # the lessons' answers to a prediction (notebooks/0*.ipynb)
]
# What people use: the command line, figures, the HTML timeline, the package's front door (and the notebooks).
FRONT_ENDS = [
    "emqsim",  # the package's front door re-exports the public names of every layer
    "emqsim.__main__",
    "emqsim.cli",
    "emqsim.plots",
    "emqsim.figures",
    "emqsim.timeline_html",
    "emqsim.tune_cli",  # the tune command's old import path (emqsim.cli.tune)
    "emqsim.live.cli",  # `python -m emqsim live`
    "emqsim.live.arguments",  # its --help, readable without the live extra
    "emqsim.examples",  # written as a reader would: from the front door
    "emqsim.lesson_widgets",  # the lessons' explorer (notebooks/0*.ipynb)
]
LAYERS: list[tuple[str, list[str]]] = [*CORE, ("features", FEATURES), ("front ends", FRONT_ENDS)]
# Plain constants defined in emqsim/__init__.py itself (pyproject.toml reads the version from there).
ROOT_CONSTANTS = {"__version__"}
# Modules over MAX_LINES still to split: none (emqsim/worker.py was split into client.py and worker.py).
KNOWN_LONG: set[str] = set()
LAYER_OF_NAME = {name: index for index, (_, names) in enumerate(LAYERS) for name in names}

# Imports that close cycles among the command-line modules, to be removed. None left: the subcommands import
# their argument helpers from the cli package's leaf modules (emqsim.cli.argtypes, ...). Nothing may be added.
KNOWN_CLI_BACK_EDGES: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    name = module
    while name not in LAYER_OF_NAME:
        if "." not in name:
            raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_architecture.py")
        name = name.rsplit(".", 1)[0]
    return LAYER_OF_NAME[name]


def _defined_in_package_root(known: dict[str, Path]) -> dict[str, str]:
    """Names the package's __init__ re-exports -> the module that defines them."""
    tree = ast.parse(known["emqsim"].read_text())
    return {
        (alias.asname or alias.name): node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("emqsim.")
        for alias in node.names
    }


def imports(module: str, path: Path, known: dict[str, Path], root_names: dict[str, str]) -> set[str]:
    """Every emqsim module `module` imports, anywhere in the file."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "emqsim")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "emqsim":
                continue
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if source == "emqsim" and alias.name in ROOT_CONSTANTS:
                    continue  # a constant the front door defines, not a use of what it re-exports
                if target in known:
                    found.add(target)  # a submodule
                elif source == "emqsim" and alias.name in root_names:
                    found.add(root_names[alias.name])  # a name the package's front door re-exports
                else:
                    found.add(source)
    found.discard(module)
    return found


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    known = modules()
    root_names = _defined_in_package_root(known)
    return {m: frozenset(imports(m, p, known, root_names)) for m, p in known.items()}


def graph() -> dict[str, set[str]]:
    """Module -> the emqsim modules it imports (parsed once per test session; a fresh copy each call)."""
    return {m: set(targets) for m, targets in _graph().items()}


def cycles(g: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer():
    for module in modules():
        layer(module)


def test_no_module_imports_a_layer_above_its_own():
    wrong = [
        f"{m} ({LAYERS[layer(m)][0]}) imports {t} ({LAYERS[layer(t)][0]})"
        for m, targets in graph().items()
        for t in sorted(targets)
        if layer(t) > layer(m)
    ]
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_no_import_cycles():
    g = graph()
    for source, target in KNOWN_CLI_BACK_EDGES:
        g[source].discard(target)
    found = cycles(g)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_known_cli_back_edges_still_close_a_cycle():
    """When one is gone, drop it from KNOWN_CLI_BACK_EDGES so it cannot come back unnoticed."""
    g = graph()
    in_cycles = set().union(*cycles(g))
    for source, target in KNOWN_CLI_BACK_EDGES:
        assert target in g[source] and {source, target} <= in_cycles, (
            f"{source} -> {target} no longer closes a cycle: remove it from KNOWN_CLI_BACK_EDGES"
        )


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [("emqsim.stats", "emqsim.engine"), ("emqsim.live.runner", "emqsim.engine")],
)
def test_named_boundaries(module, forbidden):
    assert forbidden not in graph()[module]


def test_no_feature_imports_a_front_end():
    """Said on its own, for the error message: the features' command lines, tables, progress bars and figures
    live under emqsim/cli and emqsim/plots, never the other way round."""
    front = LAYERS.index(("front ends", FRONT_ENDS))
    wrong = sorted(
        f"{m} imports {t}"
        for m, targets in graph().items()
        if layer(m) < front
        for t in targets
        if layer(t) == front
    )
    assert not wrong, "a feature (or the core) imports a front end:\n" + "\n".join(wrong)


def test_every_feature_and_front_end_the_design_names_is_placed():
    names = {n for _, layer_names in LAYERS for n in layer_names}
    for feature in ("emqsim.sweep", "emqsim.explore", "emqsim.tune", "emqsim.grading", "emqsim.live"):
        assert layer(feature) == len(CORE), feature
    for front in ("emqsim.cli", "emqsim.plots", "emqsim.figures", "emqsim.timeline_html"):
        assert front in names and layer(front) == len(CORE) + 1, front
    assert layer("emqsim.live.runner") == len(CORE) and layer("emqsim.live.cli") == len(CORE) + 1


def _long_modules() -> dict[str, int]:
    return {
        p.relative_to(PACKAGE.parent).as_posix(): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }


def test_no_module_is_over_700_lines():
    """One concern per module: none over MAX_LINES lines (split a bigger one into a package, as explore, tune
    and grading are). KNOWN_LONG lists the ones still to split; nothing may be added."""
    long = {path: n for path, n in _long_modules().items() if path not in KNOWN_LONG}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_known_long_modules_are_still_long():
    """When one is split, drop it from KNOWN_LONG so it cannot grow back unnoticed."""
    long = _long_modules()
    for path in KNOWN_LONG:
        assert path in long, f"{path} is no longer over {MAX_LINES} lines: remove it from KNOWN_LONG"


def test_the_checker_sees_imports_under_type_checking_and_inside_functions(tmp_path):
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from emqsim.engine import Simulation\n"
        "def f():\n    from emqsim.stats import summarize\n"
        "from . import keys\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    found = imports("emqsim.probe", path, modules(), {})
    assert {"emqsim.engine", "emqsim.stats", "emqsim.keys"} <= found
    # a feature importing a front end only for a type, or only inside a function, is caught all the same
    probe = tmp_path / "feature.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from emqsim.plots import RC\n"
        "def f():\n    from emqsim.cli.tables import text_timeline\n"
    )
    found = imports("emqsim.tune.probe", probe, modules(), {})
    assert {"emqsim.plots", "emqsim.cli.tables"} <= found
    assert all(layer(t) > layer("emqsim.tune.probe") for t in found)
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_the_map_of_the_code_matches_the_tree():
    """docs/model.md's map names files that exist, and the job's path names functions that exist."""
    import importlib
    import re

    doc = (PACKAGE.parent / "docs" / "model.md").read_text()
    section = doc[doc.index("## Map of the code") : doc.index("## Time")]
    listed = set(re.findall(r"\b([a-z_]+\.py)\b", section)) - {"store.py", "test_architecture.py"}
    for name in listed:  # (store.py may become a package)
        assert any(p.name == name for p in PACKAGE.rglob(name)), f"docs/model.md names {name}: not in emqsim/"
    classes = {}
    for module in ("engine", "worker", "server", "protocol", "ledger", "policies", "stats"):
        mod = importlib.import_module(f"emqsim.{module}")
        classes.update({n: c for n, c in vars(mod).items() if isinstance(c, type)})
    path = section[section.index("## Following one job") :]
    named = re.findall(r"`([A-Z][A-Za-z]+)\.([a-z_]+)`", path)
    assert len(named) >= 10
    for cls, method in named:
        assert hasattr(classes[cls], method), f"docs/model.md names {cls}.{method}: it does not exist"
    files = re.findall(r"^\d\. \*\*([a-z_]+\.py)\*\*", path, re.M)
    assert len(files) <= 5 and len(set(files)) == len(files)


def test_only_the_ledger_writes_attempts():
    """One writer for records: no module but ledger.py assigns an attempt's facts (the live builder too tells
    the ledger), and the records handed out are frozen, with the draft's fields in the record's order."""
    import dataclasses

    from emqsim.ledger import AttemptDraft
    from emqsim.records import Attempt

    facts = {f.name for f in dataclasses.fields(Attempt)} - {"job", "attempt", "worker", "token", "work"}
    writers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for target in targets:
                own = isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self"
                if isinstance(target, ast.Attribute) and target.attr in facts and not own:
                    writers.add(path.relative_to(PACKAGE).as_posix())
    assert writers == {"ledger.py"}
    assert Attempt.__dataclass_params__.frozen
    assert AttemptDraft.__slots__ == tuple(f.name for f in dataclasses.fields(Attempt) if f.name != "outcome")
