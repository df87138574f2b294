"""The command line: `python -m emqsim sweep --lease 30 --beat 10` and friends.

Every flag is checked before anything runs; bad input gets one line on stderr (`emqsim: error: ...`) naming
the flag, the value and the fix, and exit status 2.

    argtypes    each flag's type: parses its text or says how to fix it
    parser      every subcommand and flag
    building    scenarios and policies from the flags (presets included)
    work        bounded work: the estimate before any run, cores, Dask, progress
    tables      numbers, intervals and tables as text
    saving      result files with their provenance
    process     signals during a sweep, standard output that fails cleanly
    commands    the subcommands
    app         `main`: dispatch, one-line errors, exit statuses
"""

from emqsim.cli.app import main
from emqsim.cli.argtypes import (
    CONFIG_HELP,
    MAX_COUNT,
    distribution,
    example_files,
    existing_file,
    grid,
    missing_extra,
    output_path,
    preset_name,
    probability,
    rate,
    scenario_name,
    seconds,
    seconds_or_zero,
    span,
    timeouts,
    whole,
    writable_folder,
)
from emqsim.cli.building import (
    DEFAULT_SCENARIOS,
    DEFAULT_TIMEOUTS,
    lease_policies,
    run_scenario,
    single_policy,
    timeout_policies,
    with_fault_flags,
    with_model_options,
)
from emqsim.cli.commands import COMMANDS
from emqsim.cli.parser import RUN_REPLICATIONS, Parser, add_policy_flags, build_parser
from emqsim.cli.saving import CSV_PROVENANCE_PREFIX, provenance, write_rows
from emqsim.cli.tables import TABLE_COLUMNS, format_table, paired_text, scenario_summary, text_timeline
from emqsim.cli.work import MAX_COMMANDS, check_work, commands_per_run, dask_executor, policy_grid
from emqsim.verdict import HOSTAGE_AFTER

_dask_executor = dask_executor  # the 0.2 name
_policy_grid = policy_grid

__all__ = [
    "CONFIG_HELP",
    "COMMANDS",
    "CSV_PROVENANCE_PREFIX",
    "DEFAULT_SCENARIOS",
    "DEFAULT_TIMEOUTS",
    "HOSTAGE_AFTER",
    "MAX_COMMANDS",
    "MAX_COUNT",
    "RUN_REPLICATIONS",
    "TABLE_COLUMNS",
    "Parser",
    "add_policy_flags",
    "build_parser",
    "check_work",
    "commands_per_run",
    "dask_executor",
    "distribution",
    "example_files",
    "existing_file",
    "format_table",
    "grid",
    "lease_policies",
    "main",
    "missing_extra",
    "output_path",
    "paired_text",
    "policy_grid",
    "preset_name",
    "probability",
    "provenance",
    "rate",
    "run_scenario",
    "scenario_name",
    "scenario_summary",
    "seconds",
    "seconds_or_zero",
    "single_policy",
    "span",
    "text_timeline",
    "timeout_policies",
    "timeouts",
    "whole",
    "with_fault_flags",
    "with_model_options",
    "writable_folder",
    "write_rows",
]
