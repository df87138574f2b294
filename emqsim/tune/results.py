"""What `tune` returns: the race of each family of candidates and the whole result (its frontier included)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from emqsim.tune.candidates import Candidate
from emqsim.tune.inputs import Limits, SearchSpace, Workload
from emqsim.tune.measure import objective


@dataclass
class Race:
    """The outcome of racing one family of candidates (leases, or timeouts)."""

    best: Candidate | None
    runner_up: Candidate | None
    why_runner_up_lost: str
    decided: bool


@dataclass
class TuneResult:
    workload: Workload
    limits: Limits
    space: SearchSpace
    seed: int
    candidates: list[Candidate]
    lease: Race
    timeout: Race
    runs: int
    max_runs: int
    # fresh-seed measurements, in the order tried (see `verify_on_fresh_seeds`)
    verifications: list[Candidate]
    what_would_change: list[str]
    verify_level: float | None = None  # the two-sided level of every fresh-seed interval
    detector: Candidate | None = (
        None  # a user's detector, measured on the same seeds and limits (not recommended)
    )

    @property
    def confirmed(self) -> Candidate | None:
        """The first setting tried whose fresh-seed runs met every limit, as simulated in the race."""
        for v in self.verifications:
            if v.status == "confirmed":
                return next(c for c in self.candidates if c.label() == v.label() and c.kind == v.kind)
        return None

    @property
    def recommended(self) -> Candidate | None:
        """The confirmed setting; without verification (or none confirmed), the race's best."""
        return self.confirmed or self.lease.best

    @property
    def verification(self) -> Candidate | None:
        """The fresh-seed measurement of the recommended setting, if it was verified."""
        best = self.recommended
        return next((v for v in self.verifications if best is not None and v.label() == best.label()), None)

    def frontier(self) -> list[Candidate]:
        """Simulated lease candidates no other one beats on all three of false reclaims, detection, requests."""
        pts = [
            c
            for c in self.candidates
            if c.kind == "lease" and c.metrics and objective(c, self.limits) < math.inf
        ]

        def key(c: Candidate) -> tuple[float, float, float]:
            return (
                c.metrics["false_reclaims"].value or 0.0,
                objective(c, self.limits),
                c.metrics["requests_per_s"].value or 0.0,
            )

        out = []
        for c in pts:
            kc = key(c)
            if not any(all(a <= b for a, b in zip(key(o), kc, strict=True)) and key(o) != kc for o in pts):
                out.append(c)
        return sorted(out, key=lambda c: (objective(c, self.limits), c.lease, c.beat, c.scan))
