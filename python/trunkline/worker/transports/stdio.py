"""The stdio transport: one MCP server as a child process, bytes in and out.

This module knows nothing about JSON-RPC. It spawns the server from an argv list (never a
shell) in its own process group with a minimal environment, hands every stdout chunk to
its owner as it arrives, drains stderr into a bounded ring buffer so a flood can never
block the server, coalesces writes to one syscall per loop tick, reports the end of the
transport at once, and shuts the child down with a bounded ladder:
close stdin -> wait -> SIGTERM to the group -> wait -> SIGKILL to the group -> reap.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from typing import cast

from ...errors import SpawnFailed
from ...loop.batching import TickBatcher
from ...params import StdioParams

#: Variables a server inherits from the host's environment; everything else must be
#: configured explicitly. The same short list the official SDKs use on POSIX.
INHERITED_ENV_VARS: tuple[str, ...] = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")

#: How long one end of a dying child (stdout EOF, process exit) waits for the other
#: before the transport is reported closed: enough to learn the exit status and to read
#: the last lines, never long enough to hang on a grandchild holding the pipe open.
_END_GRACE_S = 0.1


def server_environment(configured: Mapping[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in INHERITED_ENV_VARS if k in os.environ}
    env.update(configured)
    return env


#: Pipe capacity asked for on Linux (the unprivileged maximum by default): a 64 KiB
#: result then moves in one read instead of several wake-ups. Only the stock asyncio loop
#: gives a server pipes: under uvloop (what workers run) its stdio are socket pairs, which
#: hold ~208 KiB already (the kernel's default socket buffer), and there is nothing to
#: widen (``_widen_pipe`` finds no pipe and does nothing).
_PIPE_BYTES = 1 << 20


def _widen_pipe(pipe: asyncio.BaseTransport | None) -> None:
    if pipe is None or not hasattr(fcntl, "F_SETPIPE_SZ"):
        return
    obj = pipe.get_extra_info("pipe")
    if obj is None:
        return
    try:
        fcntl.fcntl(obj.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except OSError:
        pass  # over /proc/sys/fs/pipe-max-size: the default capacity still works


class StderrRing:
    """The last ``limit`` bytes a server wrote to stderr."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buf = bytearray()
        self.total = 0

    def append(self, data: bytes) -> None:
        self.total += len(data)
        if len(data) >= self._limit:
            self._buf[:] = data[-self._limit :]
            return
        self._buf += data
        excess = len(self._buf) - self._limit
        if excess > 0:
            del self._buf[:excess]

    def tail(self, max_lines: int = 20) -> str:
        text = self._buf.decode("utf-8", "replace")
        lines = text.splitlines()
        return "\n".join(lines[-max_lines:])


class _ChildProtocol(asyncio.SubprocessProtocol):
    def __init__(self, owner: StdioTransport) -> None:
        self._owner = owner

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._owner._on_stdout(data)
        else:
            self._owner.stderr.append(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._owner._on_stdout_eof()

    def process_exited(self) -> None:
        self._owner._on_process_exit()


class StdioTransport:
    """One child process. ``on_data`` gets every stdout chunk; ``on_closed`` is called
    exactly once when the transport can carry no more replies (stdout EOF, or process
    exit plus a short drain), with a one-line description of why."""

    #: A run of request lines goes to the server's stdin in one write.
    lines_apart = False

    def __init__(
        self,
        params: StdioParams,
        *,
        on_data: Callable[[bytes], None],
        on_closed: Callable[[str], None],
        stderr_limit: int = 64 * 1024,
        close_wait_s: float = 2.0,
        term_timeout_s: float = 2.0,
    ) -> None:
        self.params = params
        self.stderr = StderrRing(stderr_limit)
        self._on_data = on_data
        self._on_closed_cb = on_closed
        self._close_wait_s = close_wait_s
        self._term_timeout_s = term_timeout_s
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._writes: TickBatcher | None = None
        self._exited: asyncio.Future[int | None] | None = None
        self._closed_reported = False
        self._stdout_eof = False
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pid: int | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        # Kept: asyncio.get_running_loop() costs a getpid() syscall, on the hot path.
        self._loop = loop = asyncio.get_running_loop()
        self._exited = loop.create_future()
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: _ChildProtocol(self),
                *self.params.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=server_environment(self.params.env),
                cwd=self.params.cwd,
                # Its own session, hence its own process group: the shutdown ladder signals
                # the whole group, so grandchildren (npx -> node) go too.
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            raise SpawnFailed(f"could not start {self.params.describe()!r}: {exc}") from exc
        self._transport = transport
        # Pipe 0 is the child's stdin, which the loop opens for writing (typeshed says
        # only BaseTransport | None).
        self._stdin = cast("asyncio.WriteTransport", transport.get_pipe_transport(0))
        self._writes = TickBatcher(loop)
        self._writes.attach(self._stdin)
        self.pid = transport.get_pid()
        for fd in (0, 1):
            _widen_pipe(transport.get_pipe_transport(fd))

    @property
    def returncode(self) -> int | None:
        return None if self._transport is None else self._transport.get_returncode()

    @property
    def alive(self) -> bool:
        return self._transport is not None and self._transport.get_returncode() is None

    def stderr_tail(self, max_lines: int = 20) -> str:
        return self.stderr.tail(max_lines)

    # -- writing -----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue bytes for the child's stdin; everything queued in one loop tick goes out
        in one write."""
        assert self._writes is not None, "write() before start()"
        self._writes.push(data)

    # -- events from the child ---------------------------------------------------------

    def _on_stdout(self, data: bytes) -> None:
        if not self._closed_reported:
            self._on_data(data)

    def _on_stdout_eof(self) -> None:
        self._stdout_eof = True
        if self.returncode is not None:
            self._report_closed(self._describe_end("exited"))
        else:
            # A dying server closes stdout a moment before its exit status is known: wait
            # briefly so the report can say how it ended. A server that closed stdout but
            # lives on is reported (and later stopped by the ladder) after the grace.
            asyncio.get_running_loop().call_later(
                _END_GRACE_S, self._report_closed_described, "closed its stdout"
            )

    def _on_process_exit(self) -> None:
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(self.returncode)
        if self._stdout_eof:
            self._report_closed(self._describe_end("exited"))
        else:
            # Give stdout a moment to deliver what the child wrote before it died; if a
            # grandchild holds the pipe open, do not wait for EOF forever.
            asyncio.get_running_loop().call_later(
                _END_GRACE_S, self._report_closed_described, "exited"
            )

    def _report_closed_described(self, what: str) -> None:
        self._report_closed(self._describe_end("exited" if self.returncode is not None else what))

    def _describe_end(self, what: str) -> str:
        code = self.returncode
        if code is None:
            return f"server {what}"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"server {what} (killed by {name})"
        return f"server {what} (exit code {code})"

    def _report_closed(self, detail: str) -> None:
        if self._closed_reported:
            return
        self._closed_reported = True
        if self._stopping:
            detail = "transport closed by the client"
        self._on_closed_cb(detail)

    # -- shutdown ----------------------------------------------------------------------

    async def close(self) -> int | None:
        """Stop the child with the bounded ladder and reap it. Idempotent."""
        self._stopping = True
        transport = self._transport
        if transport is None:
            return None
        assert self._exited is not None
        if self._writes is not None:
            self._writes.flush()
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()
        if not await self._wait_exit(self._close_wait_s):
            self._signal_group(signal.SIGTERM)
            if not await self._wait_exit(self._term_timeout_s):
                self._signal_group(signal.SIGKILL)
                await self._wait_exit(None)
        # The leader is gone; anything it left in its group goes too.
        self._signal_group(signal.SIGKILL)
        transport.close()
        self._report_closed("transport closed by the client")
        self._transport = None
        # Let the event loop finish closing the pipe transports before we return, so no
        # file descriptor outlives close().
        await asyncio.sleep(0)
        return self._exited.result() if self._exited.done() else None

    async def _wait_exit(self, timeout: float | None) -> bool:
        assert self._exited is not None
        if self._exited.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), timeout)
            return True
        except TimeoutError:
            return False

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, sig)  # the child leads its own group (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass
