"""Same inputs and seed -> bit-identical records, in any process; different seeds -> different runs."""

import os
import subprocess
import sys

from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard

SCRIPT = """
from emqsim import LeasePolicy, TimeoutPolicy, simulate, standard
for policy in (LeasePolicy(30, 10, 5), TimeoutPolicy(600, 5)):
    for name in ("production", "frozen", "flaky-network"):
        print(simulate(standard(name), policy, seed=7, replication=2).digest())
"""


def digests_in_fresh_interpreter(hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_records_are_bit_identical_across_processes_and_hash_seeds():
    first = digests_in_fresh_interpreter("1")
    second = digests_in_fresh_interpreter("4242")
    assert len(first) == 6 and first == second
    here = [
        simulate(standard(name), policy, seed=7, replication=2).digest()
        for policy in (LeasePolicy(30, 10, 5), TimeoutPolicy(600, 5))
        for name in ("production", "frozen", "flaky-network")
    ]
    assert here == first


def test_seed_and_replication_change_the_run():
    base = simulate(standard("production"), LeasePolicy(), seed=1)
    assert simulate(standard("production"), LeasePolicy(), seed=2).digest() != base.digest()
    assert simulate(standard("production"), LeasePolicy(), seed=1, replication=1).digest() != base.digest()


def test_common_random_numbers_give_both_policies_the_same_faults():
    lease = simulate(standard("production"), LeasePolicy(), seed=3)
    timeout = simulate(standard("production"), TimeoutPolicy(), seed=3)
    assert lease.arrivals == timeout.arrivals
    freezes = [(e.worker, e.time) for e in lease.worker_events if e.kind in ("freeze", "crash")]
    same = [(e.worker, e.time) for e in timeout.worker_events if e.kind in ("freeze", "crash")]
    # the first faults of every original worker happen at the same moments (later ones may differ once
    # the workers' histories diverge, e.g. a freeze skipped because the worker was already dead)
    assert freezes[:3] == same[:3]


def test_a_stream_made_on_first_use_draws_what_the_stream_draws():
    """`seeds.stream_on_first_use` (a run's streams, most of them never drawn from in a small run) gives the
    draws of `seeds.stream`, in any order of methods, and refuses what `stream` refuses, at once."""
    import numpy as np
    import pytest

    from emqsim.seeds import stream, stream_on_first_use

    for calls in (("random", "exponential", "integers"), ("lognormal", "random", "choice"), ("uniform",)):
        eager, lazy = stream(7, 3, "network", 2, 1), stream_on_first_use(7, 3, "network", 2, 1)
        for name in calls + calls:
            args = {
                "exponential": (2.0, 5),
                "integers": (0, 9, 4),
                "lognormal": (0.0, 1.5, 3),
                "choice": (5, 2),
            }
            a, b = getattr(eager, name)(*args.get(name, ())), getattr(lazy, name)(*args.get(name, ()))
            assert np.array_equal(a, b)
    with pytest.raises(KeyError):
        stream_on_first_use(0, 0, "no-such-stream")
    with pytest.raises(ValueError, match="seed must be"):
        stream_on_first_use(-1, 0, "network")
