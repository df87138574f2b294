"""Where a live run's Redis comes from: a private throwaway `redis-server`, or the user's, checked first.

A private server listens only on a unix socket in a temporary directory, saves nothing on its own (only a
restart's `SHUTDOWN SAVE` writes its data, to load it again), and is stopped (and its directory removed) when
the run ends. A user's Redis (`redis_url`) is used only if it holds no
key outside the run's own prefix, unless the caller allows sharing; the run deletes its own keys after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from emqsim.errors import ConfigError
from emqsim.processes import die_with_parent

INSTALL_HINT = "redis-server was not found on PATH; install it with `apt-get install redis-server`"
MIN_VERSION = (6, 2)  # LMOVE
# Every Redis call gives up after this many real seconds without a reply: Redis answers in microseconds, so a
# silence this long means the server is stopped (SIGSTOP), hung or gone, and the run ends with one line.
SOCKET_TIMEOUT = 5.0


def no_retry() -> Retry:
    """redis-py (8.x) retries a timed-out call 10 times by default: 10 x SOCKET_TIMEOUT of silence before an
    error. The runner's calls are not retried, so a stopped Redis is reported after one timeout."""
    return Retry(NoBackoff(), 0)


class RedisUnavailable(RuntimeError):
    """Redis stopped answering or went away during a live run (one line, for the command line)."""


def redis_server_path() -> str | None:
    """The redis-server binary, or None (`EMQSIM_REDIS_SERVER` overrides the PATH lookup)."""
    return os.environ.get("EMQSIM_REDIS_SERVER") or shutil.which("redis-server")


class PrivateRedis:
    """A redis-server on a unix socket in its own temporary directory; `stop()` kills it and cleans up."""

    def __init__(self, *extra_args: str) -> None:
        binary = redis_server_path()
        if binary is None:
            raise ConfigError(INSTALL_HINT)
        self.binary = binary
        self.extra_args = extra_args
        self.workdir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> str:
        assert self.workdir is not None
        return str(self.workdir / "redis.sock")

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self, timeout: float = 15.0) -> PrivateRedis:
        """Start the server and wait until it answers PING."""
        self.workdir = Path(tempfile.mkdtemp(prefix="emqsim-live-"))
        return self._launch(timeout)

    def shut_down(self, timeout: float = 15.0) -> None:
        """Take the server down as a restart does: `SHUTDOWN SAVE` (its data written to dump.rdb in its
        directory, every client's connection closed), then wait for the process to end."""
        assert self.proc is not None
        client = self.client(socket_timeout=timeout)
        try:
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass  # the reply to a successful SHUTDOWN is the closed connection
        finally:
            client.close()
        self.proc.wait(timeout=timeout)
        self.proc = None

    def start_again(self, timeout: float = 15.0) -> PrivateRedis:
        """Start the server again on the same socket and directory; it loads dump.rdb, leaving out every key
        whose (absolute) expiry passed while it was down."""
        assert self.workdir is not None and self.proc is None
        return self._launch(timeout)

    def _launch(self, timeout: float) -> PrivateRedis:
        assert self.workdir is not None
        cmd = [
            self.binary,
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", str(self.workdir),
            "--logfile", str(self.workdir / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
        deadline = time.monotonic() + timeout
        probe = redis.Redis(unix_socket_path=self.socket_path, socket_connect_timeout=1.0)
        try:
            while True:
                if self.proc.poll() is not None:
                    log = self._log_tail()
                    self.stop()
                    raise RuntimeError(f"redis-server exited at start:\n{log}")
                try:
                    if probe.ping():
                        return self
                except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
                    pass
                if time.monotonic() > deadline:
                    log = self._log_tail()
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer within {timeout} s:\n{log}")
                time.sleep(0.01)
        finally:
            probe.close()

    def client(self, **kwargs: object) -> redis.Redis:
        """A decoded client whose every call times out after SOCKET_TIMEOUT real seconds."""
        kwargs.setdefault("socket_timeout", SOCKET_TIMEOUT)
        kwargs.setdefault("socket_connect_timeout", SOCKET_TIMEOUT)
        kwargs.setdefault("retry", no_retry())
        return redis.Redis(unix_socket_path=self.socket_path, decode_responses=True, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        """SIGTERM (and SIGCONT, so a stopped server can act on it), SIGKILL after 5 s; then remove the
        temporary directory, whatever happened."""
        proc, self.proc = self.proc, None
        try:
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                    proc.send_signal(signal.SIGCONT)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            assert self.workdir is not None
            return "\n".join((self.workdir / "redis.log").read_text(errors="replace").splitlines()[-lines:])
        except (OSError, AssertionError):
            return "(no log)"

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def connect(url: str) -> redis.Redis:
    """A decoded client for `url` (redis://, rediss://, unix://), checked with PING and a version check."""
    try:
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=SOCKET_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            retry=no_retry(),
        )
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {url!r}: {exc}") from None
    try:
        client.ping()
        version = str(client.info("server").get("redis_version", "0"))
    except redis.RedisError as exc:
        client.close()
        raise ConfigError(f"cannot use Redis at {url}: {str(exc).splitlines()[0]}") from None
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        client.close()
        raise ConfigError(f"Redis at {url} is {version}; live mode needs Redis >= 6.2 (LMOVE)")
    return client


def glob_escape(text: str) -> str:
    """Escape Redis glob characters so a key prefix matches literally in SCAN MATCH."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def foreign_keys(client: redis.Redis, prefix: str, limit: int = 3) -> tuple[int, list[str]]:
    """How many keys of the selected database lie outside `prefix` (counting stops early), and examples."""
    if client.dbsize() == 0:
        return 0, []
    count, examples = 0, list[str]()
    for key in client.scan_iter(count=1000):
        if not key.startswith(prefix):
            count += 1
            if len(examples) < limit:
                examples.append(key)
            if count >= 1000:
                break
    return count, examples


def check_no_foreign_keys(client: redis.Redis, prefix: str, url: str) -> None:
    """Refuse (ConfigError) to run against a Redis that holds keys outside the run's prefix."""
    count, examples = foreign_keys(client, prefix)
    if count:
        shown = ", ".join(repr(k) for k in examples)
        more = "+" if count >= 1000 else ""
        raise ConfigError(
            f"Redis at {url} holds {count}{more} key(s) outside this run's prefix {prefix!r} (e.g. {shown}); "
            "use an empty database (e.g. redis://host:6379/15) or pass --allow-foreign-keys "
            "(allow_foreign_keys=True) to share it: the run only writes and deletes keys under its prefix"
        )


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    """Delete every key under `prefix` (SCAN MATCH + UNLINK); returns how many were deleted."""
    deleted = 0
    batch: list[str] = []
    for key in client.scan_iter(match=glob_escape(prefix) + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += client.unlink(*batch)
    return deleted
