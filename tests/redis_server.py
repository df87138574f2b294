"""A throwaway real redis-server for differential tests: unix socket only, persistence off.

    with RedisServer() as server:
        client = server.client()          # raw RESP2 replies, exact error texts via error_text()

`client()` returns a redis-py client that speaks RESP2 and has its response callbacks removed, so replies have
exactly the shapes `emqsim.store.KeyStore.execute` returns ("OK", int, str, None, list) instead of redis-py's
conveniences (bool for SET, dict for HGETALL, set for SMEMBERS).
"""

from __future__ import annotations

import redis

from emqsim.live.server import PrivateRedis, redis_server_path

REDIS_SERVER = redis_server_path()
INSTALL_HINT = "redis-server is not on PATH; install it with `apt-get install redis-server` (Debian: 7.0.x)"


def error_text(exc: redis.ResponseError) -> str:
    """The error line as the server sent it. redis-py before 8.2 moves a known code like "ERR " out of the
    message into status_code; 8.2 keeps it in the message as well."""
    code = getattr(exc, "status_code", None)
    text = str(exc)
    return f"{code} {text}" if code and not text.startswith(f"{code} ") else text


class RedisServer(PrivateRedis):
    """The live mode's private redis-server, with DEBUG enabled over the unix socket (so the time-free
    differential test can switch active expiry off) and a raw-reply client."""

    def __init__(self, *extra_args: str) -> None:
        super().__init__("--enable-debug-command", "local", *extra_args)

    def client(self, **kwargs: object) -> redis.Redis:
        """A RESP2 client with no response callbacks: replies are the server's raw shapes, decoded to str."""
        options: dict = {"decode_responses": True, "protocol": 2, **kwargs}
        client = redis.Redis(unix_socket_path=self.socket_path, **options)
        client.response_callbacks.clear()
        return client
