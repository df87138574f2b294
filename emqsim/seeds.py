"""Named random streams from one seed: `numpy.random.SeedSequence` only, no global RNG.

A stream is keyed by (seed, replication, stream name, indices), never by execution order, so the same seed
gives the same workload and faults under every policy (common random numbers) and in any process.
"""

from __future__ import annotations

from typing import cast

import numpy as np

# Fixed codes: never renumber, or every seeded result changes.
STREAMS = {"arrivals": 1, "durations": 2, "faults": 3, "network": 4, "phases": 5, "store": 6, "job_faults": 7}
STREAMS["memory"] = 8  # maxmemory eviction's samples and LFU draws (8, 0), the other tenant's writes (8, 1)
STREAMS["ticks"] = 9  # Network.skipped_ticks: a worker's renewal-timer skips (9, wid), drawn only when > 0


def stream(seed: int, replication: int, name: str, *index: int) -> np.random.Generator:
    """An independent generator for one named purpose (and optionally one worker or job)."""
    sequence = np.random.SeedSequence(entropy=int(seed), spawn_key=_spawn_key(seed, replication, name, index))
    return np.random.Generator(np.random.PCG64(sequence))


def _spawn_key(seed: int, replication: int, name: str, index: tuple[int, ...]) -> tuple[int, ...]:
    """The stream's key under `seed`; a seed below 0 or an unknown name is refused here."""
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    return (int(replication), STREAMS[name], *index)


class _StreamOnFirstUse:
    """`stream(seed, replication, name, *index)`, made when first used. A run names a dozen streams and a small
    run uses few of them (explore's runs use a quarter), while making a `SeedSequence` and its `PCG64` costs
    about 20 us each. The generator is the same whenever it is made, so every draw is the stream's."""

    def __init__(self, seed: int, replication: int, name: str, index: tuple[int, ...]) -> None:
        _spawn_key(seed, replication, name, index)  # refused now, as `stream` refuses it
        self._key = (seed, replication, name, index)

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__") or attribute == "_key":
            raise AttributeError(attribute)
        seed, replication, name, index = self._key
        generator = stream(seed, replication, name, *index)
        value = getattr(generator, attribute)
        for method in ("random", "integers", "exponential", "lognormal", "uniform", "choice", "normal"):
            setattr(self, method, getattr(generator, method))  # later draws skip this lookup
        setattr(self, attribute, value)
        return value


def stream_on_first_use(seed: int, replication: int, name: str, *index: int) -> np.random.Generator:
    """`stream(...)` made only when a draw needs it (see `_StreamOnFirstUse`); it answers the Generator methods
    the model calls, with the same draws."""
    return cast(np.random.Generator, _StreamOnFirstUse(seed, replication, name, index))
