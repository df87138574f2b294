"""Every Redis key name the protocol uses, built in one place (EchoMQ's `emq:{queue}:...` layout)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names for one queue. The braces make a Redis Cluster hash tag, as in EchoMQ and BullMQ."""

    queue: str = "default"
    prefix: str = "emq"

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.queue}}}"

    @property
    def wait(self) -> str:
        return f"{self.base}:wait"

    @property
    def active(self) -> str:
        return f"{self.base}:active"

    @property
    def stalled(self) -> str:
        return f"{self.base}:stalled"

    @property
    def stalled_check(self) -> str:
        return f"{self.base}:stalled-check"

    @property
    def completed(self) -> str:
        return f"{self.base}:completed"

    @property
    def failed(self) -> str:
        return f"{self.base}:failed"

    def job(self, job_id: str) -> str:
        """The job's hash (attempt counter `ats`, stalled counter `stc`, `processedOn`)."""
        return f"{self.base}:{job_id}"

    def lock(self, job_id: str) -> str:
        """The job's lock: `emq:{queue}:<id>:lock`, value = the holder's token, PX = the lease."""
        return f"{self.base}:{job_id}:lock"

    def job_id_of_lock(self, lock_key: str) -> str | None:
        """Inverse of `lock`, for records of evicted keys; None for keys that are not locks."""
        head = self.base + ":"
        if lock_key.startswith(head) and lock_key.endswith(":lock"):
            return lock_key[len(head) : -len(":lock")]
        return None
