"""The `tune` command's old home, kept so old imports work: it lives in `emqsim.cli.tune`."""

from emqsim.cli.tune import add_tune_arguments, build_inputs, cmd_tune, load_tune_config, tune_commands

__all__ = ["add_tune_arguments", "build_inputs", "cmd_tune", "load_tune_config", "tune_commands"]
