"""A real redis-server for the tests that share a store through Redis (tokens, pins):
``redis_server`` (a fixture) starts one on 127.0.0.1, a free port, a temporary directory,
no persistence. redis-server comes from .ci/install-system."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from conftest import stop_process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server, ours: loopback only, nothing written to disk."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.log = directory / "redis.log"
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(directory), "--logfile", str(self.log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start: {self.log.read_text()}")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def admin(self) -> Any:
        """A client outside any store, for the test's own looks."""
        return redis.asyncio.Redis(host="127.0.0.1", port=self.port)

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture
def redis_server(no_leaks: None, tmp_path: Path) -> Iterator[RedisServer]:
    """Stopped before ``no_leaks`` (which this depends on) looks for children."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(directory)
    yield server
    server.stop()


