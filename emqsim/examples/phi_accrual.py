import math
from statistics import fmean, pstdev

from emqsim import Detector


class PhiAccrual(Detector):
    """Phi accrual (Hayashibara et al., 2004): suspect a job's worker once the silence since its last
    heartbeat is improbable, phi = -log10 P(gap > silence), gaps ~ Normal(mean, sd) of the gaps seen."""

    name = "phi-accrual"

    def __init__(self, beat=2.0, scan=1.0, threshold=8.0, window=100) -> None:
        super().__init__(beat, scan)
        self.threshold, self.window = threshold, window
        self.last: dict[str, float] = {}  # job -> time of its last heartbeat (or take)
        self.gaps: list[float] = []  # the latest `window` gaps between heartbeats, all jobs

    def taken(self, job: str, now: float) -> None:
        self.last[job] = now

    def heartbeat(self, job: str, now: float) -> None:
        self.gaps = (self.gaps + [now - self.last[job]])[-self.window :]
        self.last[job] = now

    def suspect(self, job: str, now: float) -> bool:
        few = len(self.gaps) < 10  # too few gaps to trust: assume the nominal beat
        mean = self.beat if few else fmean(self.gaps)
        sd = max(0.0 if few else pstdev(self.gaps), mean / 4)
        p_later = 0.5 * math.erfc((now - self.last[job] - mean) / (sd * math.sqrt(2)))
        return p_later == 0 or -math.log10(p_later) > self.threshold
