"""`python -m emqsim explore`: its arguments (`--fault` specs, the policy flags, the limits) and the command."""

from __future__ import annotations

from typing import Any

from emqsim.errors import ConfigError
from emqsim.explore import (
    FAULT_KINDS,
    HOLDER,
    OTHER,
    FaultSpec,
    default_properties,
    estimate_runs,
    explore,
    space,
)
from emqsim.explore.report import _where, as_json, format_exploration
from emqsim.explore.space import _check_network
from emqsim.policies import ReclaimPolicy


# -- the command line -------------------------------------------------------------------------------------------
def fault_spec(text: str) -> FaultSpec:
    """`KIND[,name=A[:B]...][,offset=A:B][,target=holder|other]`, seconds (an argparse type):
    `crash`, `freeze,length=20:31`, `crash,target=other,offset=0:10`."""
    import argparse

    from emqsim.cli.argtypes import span
    from emqsim.units import to_ms

    kind, *items = [part.strip() for part in text.split(",")]
    if kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(f"unknown fault {kind!r}; choose one of: {', '.join(FAULT_KINDS)}")
    target, offset, params = HOLDER, None, {}
    given: set[str] = set()
    for item in items:
        name, eq, value = item.partition("=")
        if not eq:
            raise argparse.ArgumentTypeError(f"{item!r} in {text!r} must be name=value, e.g. length=20:31")
        if name in given:
            raise argparse.ArgumentTypeError(f"{name!r} is given twice in {text!r}; give each setting once")
        given.add(name)
        if name == "target":
            if not FAULT_KINDS[kind].targeted:
                raise argparse.ArgumentTypeError(
                    f"fault {kind!r} hits every worker at once: leave target out"
                )
            if value not in (HOLDER, OTHER):
                raise argparse.ArgumentTypeError(f"target must be {HOLDER} or {OTHER}, got {value!r}")
            target = value
            continue
        if name != "offset" and name not in FAULT_KINDS[kind].params:
            need = ", ".join(
                (*FAULT_KINDS[kind].params, "offset", *(["target"] if FAULT_KINDS[kind].targeted else []))
            )
            raise argparse.ArgumentTypeError(f"fault {kind!r} takes {need}; not {name!r}")
        low, high = span(value)
        pair = (to_ms(low), to_ms(high))
        if name == "offset":
            offset = pair
        else:
            params[name] = pair
    missing = [n for n in FAULT_KINDS[kind].params if n not in params]
    if missing:
        raise argparse.ArgumentTypeError(
            f"fault {kind!r} needs {', '.join(missing)}, e.g. {kind},{missing[0]}=20:31 (seconds, A or A:B)"
        )
    try:
        return FaultSpec(kind, target, offset, params)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_RUNS = 1_000_000
MAX_RUN_TICKS = 1e6  # simulated timer steps of one run (several CPU-seconds) before --yes is asked for
MAX_WORKERS = 1000  # an explored world is small: every run simulates each worker's timers


def add_explore_arguments(p: Any) -> None:
    from emqsim.cli.argtypes import POLICY_HELP, add_policy_flags, output_path, policy_choice, seconds, whole

    p.add_argument(
        "--policy",
        type=policy_choice,
        default="lease",
        metavar="POLICY",
        help=POLICY_HELP + "; a detector is explored as it is: every run asks its suspect() (no closed form)",
    )
    add_policy_flags(p, gridded=False)
    p.add_argument("--swept-by", choices=("workers", "reaper"), help="who sweeps (default: the policy's)")
    p.add_argument("--single-phase", action="store_true", help="the lease's single-pass sweep")
    p.add_argument(
        "--fault",
        type=fault_spec,
        action="append",
        metavar="SPEC",
        help=" or ".join(name for name, kind in FAULT_KINDS.items() if not kind.params)
        + ", or KIND,length=A:B (seconds) with KIND one of "
        + ", ".join(name for name, kind in FAULT_KINDS.items() if kind.params)
        + "; options offset=A:B, target=holder|other (not for restart); give one or two",
    )
    p.add_argument(
        "--workers",
        type=whole(2, MAX_WORKERS),
        default=2,
        help=f"workers in the explored world (default 2, at most {MAX_WORKERS:,})",
    )
    p.add_argument("--duration", type=seconds, help="the job's work (default: 1 s past the latest offset)")
    p.add_argument("--rtt", type=seconds, default=0.002, help="fixed round trip (default 0.002)")
    p.add_argument(
        "--resend-twice",
        action="store_true",
        help="ioredis resends a command whose reply a drop caught, so it runs twice (Network.resend_twice; "
        "needs an outage, restart or failover fault; the world gets a backlog of 3 jobs)",
    )
    p.add_argument(
        "--max-retries-per-request",
        type=whole(0),
        metavar="N",
        help="the workers' ioredis maxRetriesPerRequest: a drop rejects waiting commands at every (N+1)-th "
        "reconnect attempt (Network.max_retries_per_request; needs an outage, restart or failover fault)",
    )
    p.add_argument("--bound", type=seconds, help="check that a dead worker's job is reclaimed within BOUND s")
    p.add_argument("--vary-renewal", action="store_true", help="also search the job's worker's renewal phase")
    p.add_argument("--pin-sweeps", action="store_true", help="pin every sweep phase to 0 (fewer runs)")
    p.add_argument("--no-ties", action="store_true", help="skip the other same-millisecond orders")
    p.add_argument(
        "--jobs",
        type=whole(1),
        help="parallel processes (default: one per core, at most 4: a big search is cut in 4 parts, a small "
        "one is not, whatever the processes, so every --jobs gives the same result)",
    )
    p.add_argument("--dask", metavar="ADDRESS", help="run on a Dask scheduler ('local' for a LocalCluster)")
    p.add_argument(
        "--max-runs", type=whole(1), default=MAX_RUNS, help=f"refuse bigger (default {MAX_RUNS:,})"
    )
    p.add_argument("--yes", action="store_true", help="run even if the estimate is over --max-runs")
    p.add_argument("--quiet", action="store_true", help="no progress bar (shown on a terminal's stderr)")
    p.add_argument(
        "--plot",
        type=output_path(".png", ".svg", ".html"),
        help="draw each violated property's smallest counterexample (FILE-<property>.png|svg, or .html: the "
        "interactive timeline)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _policy(args: Any) -> ReclaimPolicy:
    from emqsim.cli.building import single_policy
    from emqsim.policies import LeasePolicy, TimeoutPolicy

    policy = single_policy(args)  # a user's detector: the lease flags and --preset refused there
    if isinstance(args.policy, ReclaimPolicy):
        for flag, given in (("--swept-by", args.swept_by), ("--single-phase", args.single_phase)):
            if given:
                raise ConfigError(
                    f"{flag}: a detector sweeps from one reaper, its own way (Detector.sweep); drop {flag}"
                )
        return policy
    if isinstance(policy, LeasePolicy) and (args.swept_by or args.single_phase) and not args.preset:
        return LeasePolicy(
            policy.lease_ms / 1000,
            policy.beat_ms / 1000,
            policy.sweep_interval_ms / 1000,
            two_phase=not args.single_phase,
            swept_by=args.swept_by or policy.swept_by,
        )
    if isinstance(policy, TimeoutPolicy) and args.swept_by and not args.preset:
        return TimeoutPolicy(
            policy.timeout_ms / 1000, policy.sweep_interval_ms / 1000, swept_by=args.swept_by
        )
    if args.single_phase and not isinstance(policy, LeasePolicy):
        raise ConfigError("--single-phase: only the lease policy has a two-phase sweep; drop it")
    return policy


def cmd_explore(args: Any) -> int:
    import json
    import sys
    from pathlib import Path

    faults = args.fault or [FaultSpec("crash")]
    if len(faults) > 2:
        raise ConfigError(f"--fault: give one fault or a pair, not {len(faults)}")
    _check_network(faults, args.resend_twice, args.max_retries_per_request, flags=True)
    if args.plot:  # the files it may write, checked before the exploration rather than after it
        from emqsim.fileio import writable_problem

        path = Path(args.plot)
        executions = args.resend_twice or args.max_retries_per_request is not None
        names = [
            f"{path.stem}-{p.name}{path.suffix}"
            for p in default_properties(args.bound, executions=executions)
        ]
        problem = writable_problem(path, *names)
        if problem:
            raise ConfigError(f"--plot: {names[0]} and the like cannot be written: {problem}")
    sp = space(
        _policy(args),
        faults,
        workers=args.workers,
        duration=args.duration,
        rtt=args.rtt,
        vary_renewal=args.vary_renewal,
        sweep_phases=not args.pin_sweeps,
        bound=args.bound,
        resend_twice=args.resend_twice,
        max_retries_per_request=args.max_retries_per_request,
    )
    estimate = estimate_runs(sp, ties=not args.no_ties)
    if estimate > args.max_runs and not args.yes:
        raise ConfigError(
            f"about {estimate:,} runs (an upper estimate) is over --max-runs {args.max_runs:,}; narrow the "
            "ranges, add --pin-sweeps or --no-ties, or pass --yes"
        )
    # each run lasts to a horizon that grows with the faults' lengths, every worker's timers ticking to it
    tick_ms = sp.policy.renewal.tick_ms if sp.policy.renewal is not None else sp.policy.sweep_interval_ms
    ticks = sp.horizon_ms / max(1, min(tick_ms, sp.policy.sweep_interval_ms)) * sp.workers * 3
    if ticks > MAX_RUN_TICKS and not args.yes:
        raise ConfigError(
            f"each run lasts up to {sp.horizon_ms / 1000:,.0f} simulated s (the faults' lengths set it): "
            f"about {ticks:.1e} timer steps per run, over {MAX_RUN_TICKS:.0e} (several CPU-seconds per run); "
            "shorten the fault lengths or --duration, or pass --yes"
        )
    from emqsim.cli.work import processes

    jobs = processes(args)
    executor = client = None
    if args.dask:
        from emqsim.cli.work import dask_executor as _dask_executor

        executor, client = _dask_executor(args.dask)
    from emqsim.sweep import _progress_bar

    # progress on stderr (a terminal only, unless --quiet): the total is the upper estimate of the runs
    bar = _progress_bar(estimate, None if not args.quiet else False)
    bar.set_description("exploring")
    try:
        result = explore(sp, jobs=jobs, executor=executor, ties=not args.no_ties, progress=bar.update)
    finally:
        bar.close()
        if client is not None:
            from emqsim.cli.work import close_dask

            close_dask(client)
    if args.json:
        sys.stdout.write(json.dumps(as_json(result), indent=1) + "\n")
    else:
        print(format_exploration(result))
    from emqsim.cli.tables import text_timeline

    shown: dict[tuple[int, ...], str] = {}
    for c in result.counterexamples:
        run = sp.run(c.coords)
        if not args.json:
            print(f"\nsmallest counterexample of {c.property}:")
            print(f"(the same run as for {shown[c.coords]})" if c.coords in shown else text_timeline(run))
        shown.setdefault(c.coords, c.property)
        if args.plot:
            path = Path(args.plot)
            out = path.with_name(f"{path.stem}-{c.property}{path.suffix}")
            if out.suffix.lower() == ".html":
                from emqsim.timeline_html import write_timeline_html

                write_timeline_html(run, out)
            else:
                from emqsim.plots import savefig, timeline

                title = f"smallest counterexample of {c.property}: {_where(c.point)}"
                savefig(timeline(run, title=title).figure, out)
            print(f"wrote {out}", file=sys.stderr)
    return 0
