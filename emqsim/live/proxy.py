"""A TCP proxy on loopback in front of a redis-server's unix socket, which a harness can hold, cut and re-point.

A failover on real redis-servers needs two things Redis alone does not give: a replica that lags (its
replication link goes through a proxy that stops forwarding: `hold`, then `cut` drops what was held), and
clients that move from one server to another under the same address (their connections go through a proxy
that is `cut`, closing every connection with a FIN as a failed server or a Sentinel's switch does, and
`point`ed at the next server; ioredis reconnects by its retry strategy and lands on whatever the proxy points
at). `hold_replies` stops only the server-to-client direction: a command still reaches Redis and runs, and a
`cut` then drops its reply (and ends that hold), so ioredis resends it after its reconnect and it runs
twice (issue 25, item 6; tests/test_bullmq_real_resend.py). The proxy runs its own asyncio loop on a daemon
thread; every method is safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

__all__ = ["RedisProxy"]

_CHUNK = 65536


class RedisProxy:
    """`127.0.0.1:port` -> the unix socket `upstream` (see the module's docstring)."""

    def __init__(self, upstream: str) -> None:
        self.upstream: str | None = upstream
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="redis-proxy", daemon=True)
        self.thread.start()
        self._gate = asyncio.Event()
        self._replies = asyncio.Event()  # cleared by `hold_replies`: the server-to-client direction only
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0  # connections forwarded (a refused one is not counted)
        # wall-clock time (time.time()) of the last `cut`, when it took effect on the loop
        self.cut_at: float | None = None
        self._call(self._gate.set)
        self._call(self._replies.set)
        self._server = self._run(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    def _run(self, coro, timeout: float = 5.0):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _call(self, fn) -> None:  # type: ignore[no-untyped-def]
        self.loop.call_soon_threadsafe(fn)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool = False
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
            while True:
                await self._gate.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self._gate.wait()  # a chunk read just before a hold waits for the release (or a cut)
                if replies:
                    await self._replies.wait()
                if writer.is_closing():
                    break
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = self.upstream
        if upstream is None:  # cut: the connection is accepted by the kernel, then closed at once
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(upstream)
        except OSError:
            writer.close()
            return
        self.accepted += 1
        pair = {writer, up_writer}
        self._writers |= pair
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer, replies=True))
        except asyncio.CancelledError:
            pass  # `close` with the connection still open: it ends here, without a logged traceback
        finally:
            self._writers -= pair

    def hold(self) -> None:
        """Stop forwarding both ways without closing anything (the kernel still acknowledges what is sent)."""
        self._call(self._gate.clear)

    def release(self) -> None:
        """Forward again, what was held first."""
        self._call(self._gate.set)

    def hold_replies(self) -> None:
        """Stop forwarding replies (server to client) only: commands still reach Redis and run. In force
        when this returns (a command sent after it finds its reply held); `release_replies` or `cut` ends it."""

        async def hold() -> None:
            self._replies.clear()

        self._run(hold())

    def release_replies(self) -> None:
        """Forward replies again, what was held first."""
        self._call(self._replies.set)

    def cut(self) -> None:
        """Close every connection (a FIN both ways; bytes held are dropped) and refuse new ones until `point`."""

        async def cut() -> None:
            self.upstream = None
            # the moment the cut takes effect, on the proxy's own loop: a caller's clock read before `cut`
            # is early by however long this loop took to run it (a busy process's threads share one GIL)
            self.cut_at = time.time()
            for writer in list(self._writers):
                writer.close()
            self._writers.clear()
            self._gate.set()  # held pumps wake, find their writer closed and end
            self._replies.set()

        self._run(cut())

    def point(self, upstream: str) -> None:
        """Forward new connections to `upstream` (connections already open stay where they are)."""

        async def point() -> None:
            self.upstream = upstream

        self._run(point())

    def close(self) -> None:
        """Cut everything and stop the loop."""

        async def close() -> None:
            self._server.close()
            self.upstream = None
            for writer in list(self._writers):
                writer.close()
            self._gate.set()
            self._replies.set()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._run(close())
        self._call(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()
