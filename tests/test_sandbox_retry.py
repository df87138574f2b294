"""A sandboxed child's crash is retried while the job's `attempts` last (issue 25, item 6).

BullMQ rejects the job with "Unexpected exit code" when the child exits (sandbox.js:12-13), and
`moveToFailed` retries it (retryJob: back to the end of `wait`) while `attemptsMade + 1 < attempts`
(job.js:452); only then is it failed. The default `attempts` = 1 fails it at once, as before.
"""

from __future__ import annotations

import pytest

from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.presets import preset
from emqsim.stats import summarize
from emqsim.summaries import simulate_summary


@pytest.mark.parametrize("policy", [preset("bullmq"), LeasePolicy(30, 10, 5), TimeoutPolicy(600, 5)])
@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_the_crashed_job_is_retried_once_then_completes_or_failed_with_one_attempt(policy, attempts) -> None:  # type: ignore[no-untyped-def]
    scenario = standard("child-crash", attempts=attempts)
    run = simulate(scenario, policy, 0, 0)
    job0 = [a for a in run.attempts if a.job == "0"]
    assert job0[0].outcome == "failed" and job0[0].failed_at is not None and job0[0].reclaimed_at is None
    if attempts == 1:
        assert len(job0) == 1  # failed for good, at once
    else:  # the child crashes on the first attempt only: the retry completes
        assert [a.outcome for a in job0] == ["failed", "completed"]
        # retried at the back of `wait`: jobs 1 and 2, already waiting, are taken before it
        assert job0[1].taken_at >= max(a.taken_at for a in run.attempts if a.job == "2")
    assert not [a for a in run.attempts if a.reclaimed_at is not None]  # no lease is waited out
    assert summarize(run) == simulate_summary(scenario, policy, 0, 0)


def test_attempts_is_validated_and_read_from_toml_and_the_flag(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from emqsim.config import load_config
    from emqsim.errors import ConfigError

    with pytest.raises(ConfigError, match="attempts"):
        standard("child-crash", attempts=0)
    path = tmp_path / "s.toml"
    path.write_text("[scenario]\njobs = 2\nattempts = 3\n")
    assert load_config(path)[0].attempts == 3
    code, _, err = run_cli(capsys, "run", "--scenario", "child-crash", "--attempts", "0")
    assert code == 2 and "--attempts" in err and "Traceback" not in err


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The command line in this process (as tests/test_newcomer.py runs it): exit code, stdout, stderr."""
    from emqsim.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err
