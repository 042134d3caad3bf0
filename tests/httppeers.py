"""Start MCP Streamable HTTP test servers as subprocesses, and never leak one.

Every server the tests talk to over HTTP prints one line ``LISTENING <url>`` on stdout
once its 127.0.0.1 socket accepts connections: tests/peers/http_scripted.py, the SDK
scripts of tests/realpeers.py (``realpeers.HTTP``) and server-everything through
tests/peers/loopback-only.cjs. :func:`start_http_peer` spawns one in its own process
group, waits for that line and returns an :class:`HttpPeerProcess`::

    with start_http_peer(*scripted("--sse"), record=tmp_path / "rec.jsonl") as peer:
        ... POST to peer.url ...
        assert peer.records()[0]["headers"]["mcp-method"] == "server/discover"

    # or, with the real servers (pytest.fail when one is not installed):
    with start_http_peer(*real(realpeers.PY_HTTP_MODERN), record=...) as peer: ...

``stop()`` (also on ``__exit__`` and on any start failure) kills the whole process
group, reaps the child and closes its pipes. stdout after the LISTENING line and stderr
keep being drained in the background (server-everything logs every request on stdout),
so a chatty server cannot block on a full pipe; their tails go into failure messages.
The ``http_peer`` fixture starts any number of peers and stops them all at teardown.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

import pytest

import realpeers
from conftest import group_alive

PEERS = Path(__file__).resolve().parent / "peers"
_TAIL = 200  # lines of stdout/stderr kept for failure messages


class HttpPeerProcess:
    """A running HTTP test server: ``url``, its records, and ``stop()``."""

    def __init__(
        self, proc: subprocess.Popen[bytes], argv: Sequence[str], record_path: Path | None
    ):
        self.proc = proc
        self.argv = list(argv)
        self.record_path = record_path
        self.url: str = ""
        self._stdout: collections.deque[str] = collections.deque(maxlen=_TAIL)
        self._stderr: collections.deque[str] = collections.deque(maxlen=_TAIL)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._threads = [self._drain(proc.stdout, self._stdout, self._lines),
                         self._drain(proc.stderr, self._stderr, None)]

    @staticmethod
    def _drain(pipe: IO[bytes] | None, tail: collections.deque[str],
               lines: queue.Queue[str | None] | None) -> threading.Thread:
        def run() -> None:
            assert pipe is not None
            try:
                for raw in iter(pipe.readline, b""):
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    tail.append(line)
                    if lines is not None:
                        lines.put(line)
            except (OSError, ValueError):  # the pipe was closed under us by stop()
                pass
            finally:
                if lines is not None:
                    lines.put(None)

        thread = threading.Thread(target=run, name="httppeer-drain", daemon=True)
        thread.start()
        return thread

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no LISTENING line within {timeout} s\n{self.describe()}")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(timeout=5)
                raise RuntimeError(f"exited with {self.proc.returncode} before LISTENING\n"
                                   f"{self.describe()}")
            if line.startswith("LISTENING "):
                self.url = line.split(" ", 1)[1].strip()
                return

    def describe(self) -> str:
        """argv plus the tails of stdout and stderr, for assertion messages."""
        return (f"argv: {' '.join(self.argv)}\n--- stdout (tail)\n" + "\n".join(self._stdout)
                + "\n--- stderr (tail)\n" + "\n".join(self._stderr))

    @property
    def stderr(self) -> str:
        return "\n".join(self._stderr)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read_record_lines(self) -> list[dict[str, Any]]:
        if self.record_path is None:
            raise ValueError("this peer was started without a record file")
        try:
            text = self.record_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # a line still being written
                pass
        return out

    def records(self) -> list[dict[str, Any]]:
        """One dict per HTTP request received so far: method, path, headers, body."""
        return [r for r in self._read_record_lines() if "event" not in r]

    def events(self) -> list[dict[str, Any]]:
        """Non-request records (http_scripted.py: {"event": "cancelled", "id": ...})."""
        return [r for r in self._read_record_lines() if "event" in r]

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace`` s; reap; close the pipes.
        Idempotent."""
        pgid = self.proc.pid  # start_new_session: the child leads its own group
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + wait
            while group_alive(pgid) and time.monotonic() < deadline:
                if self.proc.poll() is None:
                    try:
                        self.proc.wait(timeout=0.05)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.02)
            if not group_alive(pgid):
                break
        self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=2)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_http_peer(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 20,
                    record: Path | str | None = None, cwd: Path | None = None) -> HttpPeerProcess:
    """Spawn ``argv`` (``--record <record>`` appended when given) in a new session with
    ``os.environ`` + ``env``; return once it printed ``LISTENING <url>``. On a timeout or an
    early exit the process group is killed and RuntimeError carries its output."""
    argv = list(argv)
    record_path = None
    if record is not None:
        record_path = Path(record)
        argv += ["--record", str(record_path)]
    elif "--record" in argv[:-1]:
        record_path = Path(argv[argv.index("--record") + 1])
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.Popen(
        argv,
        env=full_env,
        cwd=cwd or realpeers.REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    peer = HttpPeerProcess(proc, argv, record_path)
    try:
        peer._wait_listening(timeout)
    except BaseException:
        peer.stop(grace=0.5)
        raise
    return peer


# ---- argv/env of each server ----------------------------------------------------------

def scripted(*flags: str) -> tuple[list[str], dict[str, str]]:
    """tests/peers/http_scripted.py with ``flags``, on this interpreter (it has aiohttp)."""
    return [sys.executable, str(PEERS / "http_scripted.py"), *flags], {"PYTHONUNBUFFERED": "1"}


def real(server: realpeers.RealServer, *extra: str) -> tuple[list[str], dict[str, str]]:
    """A server of ``realpeers.HTTP``: its argv (+ ``extra``) and env overrides;
    ``pytest.fail`` when it is not installed at its pinned version."""
    realpeers.require(server)
    return [*server.argv, *extra], dict(server.env)


def py_http_modern(*extra: str) -> tuple[list[str], dict[str, str]]:
    return real(realpeers.PY_HTTP_MODERN, *extra)


def py_http_legacy(*extra: str) -> tuple[list[str], dict[str, str]]:
    return real(realpeers.PY_HTTP_LEGACY, *extra)


def fastmcp_http(*extra: str) -> tuple[list[str], dict[str, str]]:
    return real(realpeers.FASTMCP_HTTP, *extra)


def ts_everything_http() -> tuple[list[str], dict[str, str]]:
    """server-everything streamableHttp (no --record: it is not our script)."""
    return real(realpeers.TS_EVERYTHING_HTTP)


@pytest.fixture
def http_peer() -> Iterator[Callable[..., HttpPeerProcess]]:
    """``http_peer(argv, env=None, **kw)`` starts a peer; all are stopped at teardown.
    Use it from a test module with ``from httppeers import http_peer``."""
    started: list[HttpPeerProcess] = []

    def start(
        argv: Sequence[str], env: Mapping[str, str] | None = None, **kw: Any
    ) -> HttpPeerProcess:
        peer = start_http_peer(argv, env, **kw)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()
