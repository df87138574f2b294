"""Live settings: a policy's protocol parameters in real milliseconds, and what live mode refuses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emqsim.errors import ConfigError
from emqsim.policies import LeasePolicy, ReclaimPolicy, TimeoutPolicy

DEFAULT_TIME_SCALE = 0.02
MIN_TIMER_MS = 5  # real milliseconds: below this, OS scheduling jitter is the whole signal


class LiveWarning(UserWarning):
    """Live settings that run but measure mostly the machine (timers near the OS's scheduling jitter)."""


class LiveDisturbed(LiveWarning):
    """The machine stalled, or its wall clock stepped, by at least the run's timing margin during a live run:
    its timings may differ from the simulator's for reasons outside the protocol."""


@dataclass(frozen=True)
class LiveSettings:
    """The policy's protocol parameters, in real milliseconds after time scaling."""

    kind: str  # "lease" or "timeout"
    lock_ms: int | None  # PX set by take (None: a lock without expiry, or none at all)
    set_lock: bool
    fenced: bool
    renewal: dict[str, Any] | None
    sweep_kind: str  # two_phase, single_phase, reap
    sweep_ms: int
    swept_by: str
    max_stalled: int | None
    timeout_ms: int | None
    fetch_next: bool = False  # an accepted finish takes the slot's next job in the same script (finish.lua)
    lazy_fail: bool = False  # past max_stalled the sweep marks the job (`defa`); its next taker fails it

    @property
    def timing_margin_ms(self) -> float:
        """Half the shortest real timer period (heartbeat tick, sweep): a stall or clock step that long moves a
        renewal or a sweep by half a period, enough to change what the run measures."""
        periods = [self.sweep_ms] + ([self.renewal["tick_ms"]] if self.renewal is not None else [])
        return min(periods) / 2

    @classmethod
    def from_policy(cls, policy: ReclaimPolicy, time_scale: float) -> LiveSettings:
        def real(name: str, ms: int) -> int:
            scaled = round(ms * time_scale)
            if scaled < MIN_TIMER_MS:
                raise ConfigError(
                    f"{name} {ms / 1000:g} s x time_scale {time_scale:g} = {ms * time_scale:.3g} ms real; live "
                    f"timers need >= {MIN_TIMER_MS} ms: raise --time-scale or the setting"
                )
            return scaled

        _check_steps(policy)
        if isinstance(policy, LeasePolicy):
            rule = policy.renewal
            if rule is None or rule.per_job:
                raise ConfigError(
                    "live mode runs one lock-manager timer per worker; per_job renewal is sim-only"
                )
            lease = real("lease", policy.lease_ms)
            tick = real("renewal tick", rule.tick_ms)
            renewal = {
                "lease_ms": lease,
                "tick_ms": tick,
                "min_age_ms": round(rule.min_age_ms * time_scale),
                "strict": rule.strict,
                "after_reply": rule.after_reply,
                "recreate_missing": rule.recreate_missing,
                "track_by": rule.track_by,
            }
            return cls(
                kind="lease",
                lock_ms=lease,
                set_lock=True,
                fenced=True,
                renewal=renewal,
                sweep_kind="two_phase" if policy.two_phase else "single_phase",
                sweep_ms=real("scan", policy.sweep_interval_ms),
                swept_by=policy.swept_by,
                max_stalled=policy.max_stalled,
                timeout_ms=None,
                fetch_next=policy.fetch_next,
                lazy_fail=policy.lazy_fail,
            )
        if isinstance(policy, TimeoutPolicy):
            return cls(
                kind="timeout",
                lock_ms=None,
                set_lock=policy.fenced,
                fenced=policy.fenced,
                renewal=None,
                sweep_kind="reap",
                sweep_ms=real("scan", policy.sweep_interval_ms),
                swept_by=policy.swept_by,
                max_stalled=policy.max_stalled,
                timeout_ms=real("timeout", policy.timeout_ms),
                fetch_next=policy.fetch_next,
            )
        raise ConfigError(
            f"live mode runs LeasePolicy or TimeoutPolicy (their Lua scripts), got {type(policy).__name__}"
        )


def _check_steps(policy: ReclaimPolicy) -> None:
    """A subclass that changes a server-side step has no Lua script: refuse rather than run the base's."""
    base = LeasePolicy if isinstance(policy, LeasePolicy) else TimeoutPolicy
    for step in ("take", "renew", "finish", "sweep"):
        if isinstance(policy, base) and getattr(type(policy), step) is not getattr(base, step):
            raise ConfigError(
                f"{type(policy).__name__} overrides {step}(); live mode can only run the stock steps as Lua"
            )
