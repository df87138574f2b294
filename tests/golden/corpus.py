"""The check corpus behind the golden files: which runs and which sweep table pin emqsim's results.

`python tests/golden/corpus.py --write` regenerates `tests/golden/results.json`. It refuses to record changed
results under the same `emqsim.RESULTS_SCHEMA`: a change that alters any result must bump that number (which
also invalidates every sweep cache entry) and say so in its commit message.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from emqsim import RESULTS_SCHEMA, LeasePolicy, TimeoutPolicy, simulate, standard
from emqsim.presets import PRESETS, preset
from emqsim.scenario import STANDARD
from emqsim.stats import RunSummary, aggregate
from emqsim.summaries import simulate_summary

GOLDEN = Path(__file__).with_name("results.json")
REPLICATIONS = (0, 1)
SEED = 11
# Standard scenarios added under the current RESULTS_SCHEMA without a new corpus (the corpus of a schema is
# fixed): each is pinned by its own tests until the next schema bump records it here too.
NOT_YET_IN_CORPUS: frozenset[str] = frozenset()


def corpus_policies() -> dict[str, Any]:
    """The plain policies plus every preset, by a stable label."""
    policies: dict[str, Any] = {
        "lease-30-10-5": LeasePolicy(30, 10, 5),
        "lease-10-5-1": LeasePolicy(10, 5, 1),
        "timeout-600-5": TimeoutPolicy(600, 5),
        "timeout-30-5": TimeoutPolicy(30, 5),
    }
    for name in sorted(PRESETS):
        policies[f"preset-{name}"] = preset(name)
    return policies


def corpus_digests() -> dict[str, str]:
    """`Run.digest()` for every standard scenario x policy x replication (small scenarios, a few seconds)."""
    out: dict[str, str] = {}
    for scenario_name in sorted(set(STANDARD) - NOT_YET_IN_CORPUS):
        knobs = {"jobs": 60, "workers": 4} if scenario_name == "production" else {}
        if scenario_name in ("memory-pressure", "failover"):  # every cache write / READONLY retry is a step
            knobs = {"jobs": 4, "horizon": 300.0}
        scenario = standard(scenario_name, **knobs)
        for label, policy in corpus_policies().items():
            for rep in REPLICATIONS:
                out[f"{scenario_name}/{label}/{rep}"] = simulate(
                    scenario, policy, seed=SEED, replication=rep
                ).digest()
    return out


def sweep_table() -> list[dict[str, Any]]:
    """A small sweep's rows (floats compared to a tight relative tolerance: NumPy releases move last bits)."""
    rows = []
    for scenario_name in ("fast-dead", "frozen"):
        scenario = standard(scenario_name)
        for policy in (LeasePolicy(30, 10, 5), TimeoutPolicy(600, 5)):
            summaries = [simulate_summary(scenario, policy, SEED, rep) for rep in range(4)]
            rows.append(json.loads(json.dumps(aggregate(summaries), allow_nan=True)))
    return rows


def corpus_sha(digests: dict[str, str]) -> str:
    """One digest of the runs' digests and of the fields a run summary holds: a change to what summaries (and
    so every sweep cache entry) hold needs a new schema number too, even when the simulated records do not
    change (schemas 1 to 4 hashed the run digests alone)."""
    summary_fields = [f.name for f in dataclasses.fields(RunSummary)]
    text = json.dumps({"digests": digests, "summary_fields": summary_fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the current results as the golden ones")
    args = parser.parse_args(argv)
    digests = corpus_digests()
    sha = corpus_sha(digests)
    old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else None
    history: dict[str, str] = dict(old["schema_history"]) if old else {}
    if str(RESULTS_SCHEMA) in history and history[str(RESULTS_SCHEMA)] != sha:
        print(
            f"results changed but emqsim.RESULTS_SCHEMA is still {RESULTS_SCHEMA}: bump it in emqsim/records.py "
            "(this invalidates stale sweep caches), say so in the commit message, then run this again",
            file=sys.stderr,
        )
        return 1
    if sha in history.values() and history.get(str(RESULTS_SCHEMA)) != sha:
        print("these results were recorded under another RESULTS_SCHEMA; nothing written", file=sys.stderr)
        return 1
    if not args.write:
        print(f"corpus {sha} (schema {RESULTS_SCHEMA}); pass --write to record it")
        return 0
    history[str(RESULTS_SCHEMA)] = sha
    data = {
        "results_schema": RESULTS_SCHEMA,
        "schema_history": history,
        "corpus_sha": sha,
        "digests": digests,
        "sweep_table": sweep_table(),
    }
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(digests)} digests, schema {RESULTS_SCHEMA})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
