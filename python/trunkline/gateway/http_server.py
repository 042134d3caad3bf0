"""The HTTP/1.1 server under the gateway's face: uvicorn (httptools' parser) serving one
ASGI app on a listening socket, in the running loop.

Why uvicorn: measured on the gateway's traffic (``benches/http_server_candidates.py``,
``benches/README.md``) it costs about half of aiohttp's server per request at 64 in flight
and answers sooner at 1; granian costs as little at 64 but more at 1 (a hand-off between
its threads and the loop's), and its in-loop mode is marked experimental.

Rules: the gateway's own signal handling stops the server (uvicorn installs none);
uvicorn's access log and start-up messages stay off; ``stop_accepting`` closes the
listening socket at once; ``stop`` closes it and the idle connections, lets responses
under way finish within the drain deadline, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

#: How long a keep-alive connection may sit idle (aiohttp's default, kept).
KEEP_ALIVE_S = 75


class _InLoop(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the gateway's SIGTERM handling drains (``HttpFace.stop``)


class HttpServer:
    """``app`` served on ``sock`` until ``stop``."""

    def __init__(self, app: Any, sock: socket.socket, drain_s: float) -> None:
        config = uvicorn.Config(
            app, http="httptools", loop="none", lifespan="off", ws="none",
            interface="asgi3", access_log=False, log_config=None, proxy_headers=False,
            server_header=False, timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=max(drain_s, 0.1), backlog=1024)
        self._server = _InLoop(config)
        self._sock = sock
        self._task: asyncio.Task[None] | None = None
        # uvicorn says "started" and "shutting down" at INFO: the gateway says its own.
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]),
                                         name="gateway http server")
        while not self._server.started:
            if self._task.done():
                await self._task  # its failure
                raise RuntimeError("the HTTP server stopped while starting")
            await asyncio.sleep(0.005)

    def stop_accepting(self) -> None:
        """Close the listening socket now: a load balancer's next connect fails and goes
        to another replica (uvicorn's own shutdown would close it only at its next tick)."""
        for server in getattr(self._server, "servers", ()):
            server.close()

    async def stop(self) -> None:
        if self._task is None:
            return
        self.stop_accepting()
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._task = None
            self._sock.close()
