"""The subcommands: `sweep`, `run`, `compare`, `timeline` and the listings; each takes the parsed flags and
returns an exit status."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from emqsim.cli.argtypes import example_files, missing_extra
from emqsim.cli.building import (
    DEFAULT_SCENARIOS,
    fail,
    lease_policies,
    policy_overrides,
    run_scenario,
    single_policy,
    timeout_policies,
    with_fault_flags,
    with_model_options,
)
from emqsim.cli.process import StopSignals
from emqsim.cli.saving import RowsNotWritten, save_rows
from emqsim.cli.tables import (
    FIELDS_HINT,
    TABLE_WIDTH,
    ci_text,
    format_table,
    indented,
    print_paired,
    run_report,
    scenario_summary,
    text_timeline,
    wrap,
)
from emqsim.cli.work import (
    check_sweep_work,
    check_work,
    clamp_jobs,
    close_dask,
    commands_per_run,
    dask_executor,
    progress,
)
from emqsim.errors import ConfigError
from emqsim.policies import LeasePolicy, ReclaimPolicy, TimeoutPolicy
from emqsim.presets import presets_table
from emqsim.scenario import STANDARD, standard
from emqsim.stats import to_json
from emqsim.verdict import compare_verdict


def cmd_sweep(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.sweep import Cell, run_sweep

    if args.config and args.scenario:
        fail("--config", "give either --config FILE or --scenario NAME, not both")
    config_policy = None
    if args.config:
        from emqsim.config import load_config, load_policies

        scenario, config_policy = load_config(args.config)
        scenarios = [scenario]
    else:
        scenarios = [standard(name) for name in (args.scenario or DEFAULT_SCENARIOS)]
    if args.duration is not None:  # measured or fitted job lengths in every scenario of the sweep
        scenarios = [s.with_(duration=args.duration) for s in scenarios]
    scenarios = [with_fault_flags(s, args) for s in scenarios]
    chosen = args.policy  # lease, timeout, a user's detector (built from its file), or None: both
    if isinstance(chosen, ReclaimPolicy):
        config_policy = chosen  # a detector replaces the file's table, as --preset does
        for flag in ("preset", "lease", "beat"):
            if getattr(args, flag):
                fail(
                    f"--{flag}", "a detector takes its own settings: --policy 'FILE.py:Class(beat=2, scan=1)'"
                )
    use_config_policy = config_policy is not None and not args.preset  # a --preset replaces the table
    check_sweep_work(args, scenarios, config_policy if use_config_policy else None)
    policies: list[ReclaimPolicy]
    if isinstance(chosen, ReclaimPolicy):
        policies = [chosen] + ([] if args.timeout is None else timeout_policies(args))
    elif chosen is not None:
        policies = lease_policies(args) if chosen == "lease" else timeout_policies(args)
    elif use_config_policy:
        # --lease, --beat and --scan given explicitly win over the file's [policy] settings, value by value
        policies = load_policies(args.config, policy_overrides(args, ("lease", "beat", "scan")))[1]
        policies += timeout_policies(args)
    else:
        policies = lease_policies(args) + (
            [] if args.preset and args.timeout is None else timeout_policies(args)
        )
    if args.take or args.track_by or args.lazy_fail or args.fetch_next:
        policies = [with_model_options(p, args) if p.renewal is not None else p for p in policies]
    cells = [Cell(s, p) for s in scenarios for p in policies]
    jobs = clamp_jobs(args.jobs) if not args.dask else args.jobs
    executor = None
    client = None
    if args.dask:
        executor, client = dask_executor(args.dask)
    interrupted: list[str] = []
    stop = StopSignals()

    def on_interrupt(done: int, total: int) -> None:
        word = "terminated" if stop.signum == signal.SIGTERM else "interrupted"
        interrupted.append(f"emqsim: {word}: kept the {done} of {total} cells that finished")

    with stop.installed():
        try:
            result = run_sweep(
                cells,
                replications=args.replications,
                seed=args.seed,
                jobs=jobs,
                executor=executor,
                progress=False if args.quiet else None,
                cache_dir=args.cache,
                on_interrupt=on_interrupt,
                stop_requested=stop.requested,
            )
        finally:
            stop.defer()  # from here on a signal is noted, never raised: the finished rows get written
            if client is not None:
                close_dask(client)
        rows = result.rows
        header = {"version": __version__, "seed": args.seed, "replications": args.replications}
        failures: list[str] = []  # outputs that could not be written after the work: said last, status 1
        try:
            saved = save_rows(args, rows, header, complete=result.complete)
        except RowsNotWritten as exc:
            saved = f"; {exc}"  # an interrupted sweep says it on its `interrupted` line
            failures += [] if interrupted else [str(exc)]
        if args.plot and rows and result.complete:
            from emqsim.plots import frontier, savefig

            try:
                savefig(frontier(rows).figure, args.plot)
            except OSError as exc:
                failures.append(f"could not write the figure {args.plot} ({exc.strerror or exc})")
        for line in interrupted:
            print(line + saved, file=sys.stderr)
        if args.json:
            sys.stdout.write(to_json(rows, **header))
        else:
            print(format_table(rows, wide=args.wide))
            print_paired(result, cells)
        for failure in failures:
            print(f"emqsim sweep: error: {failure}", file=sys.stderr)
    if interrupted or stop.signum is not None:
        return 143 if stop.signum == signal.SIGTERM else 130
    return 1 if failures else 0


def cmd_run(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.stats import aggregate
    from emqsim.summaries import simulate_summary

    scenario = run_scenario(args)
    config_policy = None
    if args.config:  # flags given explicitly win over the file's [policy] settings
        from emqsim.config import load_config

        config_policy = load_config(args.config, policy_overrides(args))[1]
    policy = with_model_options(config_policy or single_policy(args), args)
    settings = policy.settings()
    check_work(
        args,
        commands_per_run(scenario, settings["beat"], settings["scan"] or 5.0) * args.replications,
        f"this run ({args.replications} replication(s))",
    )
    summaries = [
        simulate_summary(scenario, policy, args.seed, r)
        for r in progress(range(args.replications), args.quiet or args.replications < 2)
    ]
    row = aggregate(summaries)
    if args.json:
        sys.stdout.write(to_json([row], version=__version__, seed=args.seed, replications=args.replications))
        return 0
    print(wrap(f"{scenario.name} under {policy!r}", 0, TABLE_WIDTH - 2).replace("\n", "\n  "))  # every option
    print(f"{args.replications} replication(s), seed {args.seed}; 95% CIs over replications", end="")
    print(" (none with one replication)" if args.replications < 2 else "")
    print(run_report(row))
    print(FIELDS_HINT)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from emqsim import __version__
    from emqsim.engine import simulate
    from emqsim.stats import aggregate, summarize

    policies: dict[str, ReclaimPolicy] = {
        "timeout": TimeoutPolicy(args.timeout, args.scan),
        "lease": LeasePolicy(args.lease, args.beat, args.scan),
    }
    if isinstance(args.policy, ReclaimPolicy):  # a user's detector (built from its file): a third rule
        policies["detector"] = args.policy
    elif args.policy is not None:
        fail("--policy", "compare always runs the timeout and the lease; give your detector as FILE.py:Class")
    worlds = {
        "slow-but-alive": standard("slow-alive", duration=args.slow_duration),
        "fast-but-dead": standard("fast-dead", die_after=args.die_after),
    }
    per_rule = []
    for policy in policies.values():
        beat, scan = policy.settings()["beat"] or args.beat, policy.settings()["scan"] or args.scan
        per_rule.append(sum(commands_per_run(sc, beat, scan) for sc in worlds.values()))
    check_work(
        args,
        sum(per_rule) * args.replications,
        f"this comparison ({2 * len(policies)} x {args.replications} replications)",
    )
    keys = [(world, rule) for world in worlds for rule in policies]
    summaries: dict[tuple[str, str], list[Any]] = {key: [] for key in keys}
    reclaim_ages: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    # one bar over all 4 (6 with a detector) x replications runs (on a terminal, unless --quiet): ~8 s at the defaults
    for (world, rule), r in progress([(k, r) for k in keys for r in range(args.replications)], args.quiet):
        run = simulate(worlds[world], policies[rule], args.seed, r)
        summaries[world, rule].append(summarize(run))
        first = run.attempts[0]
        if first.reclaimed_at is not None:
            reclaim_ages[world, rule].append(first.reclaimed_at - first.taken_at)
    rows = []
    for world, rule in keys:
        ages = reclaim_ages[world, rule]
        row = aggregate(summaries[world, rule], world=world, rule=rule)
        row["reclaimed_fraction"] = len(ages) / args.replications
        row["reclaimed_after_mean"] = sum(ages) / len(ages) if ages else None
        if rule == "detector":
            row["detector"] = repr(policies[rule])  # the class and its parameters
        rows.append(row)
    if args.json:
        sys.stdout.write(to_json(rows, version=__version__, seed=args.seed, replications=args.replications))
        return 0
    cells = {}
    for row in rows:
        latency = row["detection_latency_mean_s"]
        text = compare_verdict(
            row["world"] == "slow-but-alive",
            reclaimed_fraction=row["reclaimed_fraction"],
            reclaimed_after=row["reclaimed_after_mean"],
            latency=latency,
            latency_text=ci_text(
                latency,
                row["detection_latency_mean_s_ci"],
                lower_bound=bool(row["detection_latency_censored"]),
            ),
        ).text
        cells[(row["world"], row["rule"])] = text
    print(f"timeout {args.timeout:g} s vs lease {args.lease:g} s / beat {args.beat:g} s (scan {args.scan:g} s), "
          f"{args.replications} runs each")  # fmt: skip
    if "detector" in policies:
        print(wrap(f"your detector: {policies['detector']!r}", 0, TABLE_WIDTH))
    names = {"timeout": "timeout rule", "lease": "lease rule", "detector": "your detector"}
    for world in worlds:
        print(f"\n{world}")
        for rule in policies:
            print(wrap(f"{names[rule]:13} {cells[(world, rule)]}", 2, TABLE_WIDTH))
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from emqsim.engine import simulate

    config_policy = None
    if args.config:  # the file's [policy] too (a detector it names), flags given winning, as in `run`
        from emqsim.config import load_config

        scenario, config_policy = load_config(args.config, policy_overrides(args))
    else:
        scenario = standard(args.scenario)
    policy = config_policy or single_policy(args)
    settings = policy.settings()
    check_work(
        args, commands_per_run(scenario, settings["beat"], settings["scan"] or 5.0), "this timeline's run"
    )
    run = simulate(scenario, policy, args.seed)
    if args.out and args.out.suffix.lower() == ".html":
        from emqsim.timeline_html import write_timeline_html

        write_timeline_html(run, args.out)
        print(f"wrote {args.out}")
        return 0
    if args.out:
        from emqsim.plots import savefig, timeline

        savefig(timeline(run).figure, args.out)
        print(f"wrote {args.out}")
        return 0
    print(text_timeline(run))
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    from emqsim.cli.explore import cmd_explore as run_explore

    if not args.dask:
        args.jobs = clamp_jobs(args.jobs)  # 40 processes on 2 cores only wait for each other
    return run_explore(args)


def cmd_presets(args: argparse.Namespace) -> int:
    rows = presets_table()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    for row in rows:
        settings = ", ".join(
            f"{k} {v:g}" for k, v in row.items() if k in ("lease", "beat", "scan", "timeout", "max_stalled")
        )
        print(wrap(f"{row['name']}: {row['system']}: {row['mechanism']}", 0))
        for text in (f"settings (s): {settings}", row["description"], f"source: {row['source']}"):
            print(wrap(text, 4))
        print()
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    import inspect

    for name, factory in STANDARD.items():
        knobs = ", ".join(f"{p.name}={p.default!r}" for p in inspect.signature(factory).parameters.values())
        print(f"{name}\n" + indented(scenario_summary(factory)) + "\n" + indented(f"knobs: {knobs}"))
    return 0


def cmd_fields(args: argparse.Namespace) -> int:
    from emqsim.fields import FIELDS

    if args.json:
        sys.stdout.write(json.dumps([f.__dict__ for f in FIELDS], indent=2) + "\n")
        return 0
    for f in FIELDS:
        old = f" (was {', '.join(f.deprecated)})" if f.deprecated else ""
        print(wrap(f"{f.name}{old}", 0))
        print(wrap(f"{f.meaning} Interval: {f.interval}", 4))
    print(wrap("Deprecated keys are still written, with the same values, until 0.4; methods and coverage: "
                "docs/statistics.md.", 0))  # fmt: skip
    from emqsim.cli.tables import SETTINGS_KEY, column_headings

    print("\nthe sweep table's columns (heading: JSON field):")
    for heading, name in column_headings():
        print(wrap(f"{heading}: {name}", 4))
    print(wrap(f"settings: {SETTINGS_KEY}", 4))
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from emqsim.figures import generate_all

    if args.out.exists() and not args.out.is_dir():
        fail("--out", f"{str(args.out)!r} is a file; give a folder")
    paths = generate_all(args.out, quick=args.quick, progress=not args.quiet)
    for path in paths:
        print(path)
    return 0


def cmd_examples(args: argparse.Namespace) -> int:
    """Each shipped example scenario: its name (usable as `--config NAME`), its leading comment (the whole
    description, however many lines), its path; then the data files beside them (e.g. durations.csv)."""
    examples = example_files()
    for name, path in examples.items():
        about = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            if not line.lstrip().startswith("#"):
                break
            about.append(line.lstrip("# ").strip())
        print(f"{name}\n{indented(' '.join(about))}\n  {path}")
    folder = next(iter(examples.values())).parent if examples else None
    data = sorted(folder.glob("*.csv")) if folder is not None else []
    for path in data:
        print(f"\ndata file {path.name} (measured job durations, for --duration file:PATH):\n  {path}")
    example = "gc-pauses" if "gc-pauses" in examples else next(iter(examples))
    print(f"\nuse one with --config NAME (e.g. --config {example}); copy a file to change it")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    problem = missing_extra("notebooks")
    if problem:
        raise ConfigError(problem)
    from emqsim.grading import grade_notebooks

    return grade_notebooks(
        args.notebook,
        timeout=args.timeout,
        time_limit=args.time_limit,
        student=args.student,
        against=args.against,
        progress=not args.quiet,
    )


def cmd_assignments(args: argparse.Namespace) -> int:
    from emqsim.assignments import main_assignments

    return main_assignments(args)


def cmd_tune(args: argparse.Namespace) -> int:
    from emqsim.cli.tune import cmd_tune as tune_command

    return tune_command(args)


COMMANDS = {
    "sweep": cmd_sweep,
    "run": cmd_run,
    "compare": cmd_compare,
    "timeline": cmd_timeline,
    "explore": cmd_explore,
    "presets": cmd_presets,
    "scenarios": cmd_scenarios,
    "examples": cmd_examples,
    "fields": cmd_fields,
    "figures": cmd_figures,
    "grade": cmd_grade,
    "assignments": cmd_assignments,
    "tune": cmd_tune,
}
