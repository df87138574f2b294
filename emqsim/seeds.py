"""Named random streams from one seed: `numpy.random.SeedSequence` only, no global RNG.

A stream is keyed by (seed, replication, stream name, indices), never by execution order, so the same seed
gives the same workload and faults under every policy (common random numbers) and in any process.
"""

from __future__ import annotations

import numpy as np

# Fixed codes: never renumber, or every seeded result changes.
STREAMS = {"arrivals": 1, "durations": 2, "faults": 3, "network": 4, "phases": 5, "store": 6, "job_faults": 7}
STREAMS["memory"] = 8  # maxmemory eviction's samples and LFU draws (8, 0), the other tenant's writes (8, 1)
STREAMS["ticks"] = 9  # Network.skipped_ticks: a worker's renewal-timer skips (9, wid), drawn only when > 0


def stream(seed: int, replication: int, name: str, *index: int) -> np.random.Generator:
    """An independent generator for one named purpose (and optionally one worker or job)."""
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    sequence = np.random.SeedSequence(entropy=int(seed), spawn_key=(int(replication), STREAMS[name], *index))
    return np.random.Generator(np.random.PCG64(sequence))
