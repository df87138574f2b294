"""A throwaway real redis-server for differential tests: unix socket only, persistence off.

    with RedisServer(tmp_dir) as server:
        client = server.client()          # raw RESP2 replies, exact error texts via error_text()

`client()` returns a redis-py client that speaks RESP2 and has its response callbacks removed, so replies have
exactly the shapes `emqsim.store.KeyStore.execute` returns ("OK", int, str, None, list) instead of redis-py's
conveniences (bool for SET, dict for HGETALL, set for SMEMBERS).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

REDIS_SERVER = shutil.which("redis-server")
INSTALL_HINT = "redis-server is not on PATH; install it with `apt-get install redis-server` (Debian: 7.0.x)"


def error_text(exc: redis.ResponseError) -> str:
    """The error line as the server sent it (redis-py moves a known code like "ERR " to status_code)."""
    code = getattr(exc, "status_code", None)
    return f"{code} {exc}" if code else str(exc)


class RedisServer:
    """One redis-server process listening only on ``<workdir>/redis.sock``."""

    def __init__(self, workdir: Path, *extra_args: str) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError(INSTALL_HINT)
        self.workdir = Path(workdir)
        self.socket_path = str(self.workdir / "redis.sock")
        self.log_path = self.workdir / "redis.log"
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and wait until it answers PING (raises with its log if it does not)."""
        cmd = [
            REDIS_SERVER,
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", str(self.workdir),
            "--logfile", str(self.log_path),
            # lets the time-free differential test switch active expiry off (DEBUG SET-ACTIVE-EXPIRE 0);
            # "local" = only over the unix socket / loopback
            "--enable-debug-command", "local",
            *self.extra_args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        probe = redis.Redis(unix_socket_path=self.socket_path, socket_connect_timeout=1.0)
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"redis-server exited with {self.proc.returncode}:\n{self._log_tail()}"
                    )
                try:
                    if probe.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer within {timeout}s:\n{self._log_tail()}")
                time.sleep(0.02)
        finally:
            probe.close()

    def client(self, **kwargs: object) -> redis.Redis:
        """A RESP2 client with no response callbacks: replies are the server's raw shapes, decoded to str."""
        options: dict = {"decode_responses": True, "protocol": 2, **kwargs}
        client = redis.Redis(unix_socket_path=self.socket_path, **options)
        client.response_callbacks.clear()
        return client

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
