"""`LuaQueue`: `emqsim.protocol.Queue`'s operations run as Lua scripts on a real Redis, same replies.

Method for method and argument for argument the same as the Python protocol, returning the same reply
types (`FinishReply`, `SweepReply`), so a test, the live runner or a notebook can swap one for the other.
"""

from __future__ import annotations

import redis

from emqsim.keys import QueueKeys
from emqsim.live.lua import SCRIPT_NAMES, RawScripts, key_names, script_source
from emqsim.protocol import FinishReply, SweepReply

__all__ = ["SCRIPT_NAMES", "LuaQueue", "script_source"]


def _sweep_reply(raw: list) -> SweepReply:
    skipped, reclaimed, failed, marked = raw
    return SweepReply(bool(skipped), tuple(reclaimed), tuple(failed), tuple(marked))


class LuaQueue:
    """One queue's atomic operations as EVALSHA calls (scripts loaded once with SCRIPT LOAD).

    The client must decode responses (`decode_responses=True`) so ids and tokens come back as `str`.
    """

    def __init__(self, client: redis.Redis, keys: QueueKeys, remove_on_complete: bool = False) -> None:
        self.client = client
        self.keys = keys
        self.remove_on_complete = remove_on_complete
        self.raw = RawScripts(client, key_names(keys.base))

    @property
    def shas(self) -> dict[str, str]:
        """Script name -> SHA1 as loaded (workers call the scripts by these)."""
        return dict(self.raw.shas)

    def add(self, job_id: str) -> None:
        self.raw.add(job_id)

    def take(self, token: str, now_ms: int, lock_ms: int | None, set_lock: bool = True) -> str | None:
        return self.raw.take(token, now_ms, lock_ms, set_lock)

    def extend_locks(
        self, held: list[tuple[str, str]], lock_ms: int, recreate_missing: bool = False
    ) -> list[str]:
        return list(self.raw.extend_locks(held, lock_ms, recreate_missing))

    def finish(self, job_id: str, token: str, check_token: bool) -> FinishReply:
        code, was_active = self.raw.finish(job_id, token, check_token, self.remove_on_complete)
        return FinishReply(job_id, int(code), was_active=bool(was_active))

    def fail(self, job_id: str, token: str, check_token: bool = True, attempts: int = 1) -> FinishReply:
        code, was_active, retried, _ = self.raw.fail(job_id, token, check_token, attempts)
        return FinishReply(job_id, int(code), was_active=bool(was_active), retried=bool(retried))

    def sweep_two_phase(
        self, now_ms: int, interval_ms: int, max_stalled: int | None, lazy_fail: bool = False
    ) -> SweepReply:
        return _sweep_reply(self.raw.sweep_two_phase(now_ms, interval_ms, max_stalled, lazy_fail))

    def sweep_single_phase(self, now_ms: int, interval_ms: int, max_stalled: int | None) -> SweepReply:
        return _sweep_reply(self.raw.sweep_single_phase(now_ms, interval_ms, max_stalled))

    def reap(self, now_ms: int, timeout_ms: int, max_stalled: int | None = None) -> SweepReply:
        _, reclaimed, failed, _ = self.raw.reap(now_ms, timeout_ms, max_stalled)
        return SweepReply(False, tuple(reclaimed), tuple(failed))
