"""Every Redis key name the protocol uses, built in one place (EchoMQ's `emq:{queue}:...` layout)."""

from __future__ import annotations


class QueueKeys:
    """Key names for one queue. The braces make a Redis Cluster hash tag, as in EchoMQ and BullMQ.

    The fixed names are built once; `job` and `lock` are per job id.
    """

    __slots__ = (
        "queue",
        "prefix",
        "base",
        "wait",
        "active",
        "stalled",
        "stalled_check",
        "completed",
        "failed",
    )

    def __init__(self, queue: str = "default", prefix: str = "emq") -> None:
        self.queue = queue
        self.prefix = prefix
        self.base = f"{prefix}:{{{queue}}}"
        self.wait = f"{self.base}:wait"
        self.active = f"{self.base}:active"
        self.stalled = f"{self.base}:stalled"
        self.stalled_check = f"{self.base}:stalled-check"
        self.completed = f"{self.base}:completed"
        self.failed = f"{self.base}:failed"

    def __repr__(self) -> str:
        return f"QueueKeys(queue={self.queue!r}, prefix={self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueKeys) and (self.queue, self.prefix) == (other.queue, other.prefix)

    def __hash__(self) -> int:
        return hash((self.queue, self.prefix))

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
