"""A client that reads its stream slowly, or not at all, through ``trunkline serve``
(``gateway/outbox.py``): the gateway holds no more for it than its backlog (a call's
progress coalesced to the latest value), ends the stream of a reader that stays behind
(the call behind cancelled, as if the client went away), and answers everyone else
meanwhile. The server behind is tests/peers/scripted.py, whose ``sleep`` tool sends a
flood of progress notifications on demand; its tap shows what it was sent."""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import orjson
import taplog

from conftest import run, scripted
from gateways import HttpGateway, fleet_config, modern_meta

#: Progress notifications of one call, each with a message of PAD bytes: some 12 MB, far
#: more than the kernel's socket and pipe buffers hold for a reader that does not read.
FLOOD, PAD = 3000, 4000


def flood_call(gw: Any, **arguments: Any) -> dict[str, Any]:
    return gw.message("tools/call", {"name": "sleep", "arguments": arguments,
                                     "_meta": modern_meta(progressToken="flood")})


def cancelled(tap: Any) -> list[Any]:
    """Why each request the server behind was told is cancelled was."""
    return [m["params"].get("reason") for m in taplog.messages(tap, taplog.IN)
            if m.get("method") == "notifications/cancelled"]


def answered(tap: Any, text: str) -> bool:
    """Whether the server behind wrote the answer whose text is ``text``."""
    return any(text.encode() in line and b'"result"' in line
               for line in taplog.lines(tap, taplog.OUT))


async def until(predicate: Any, what: str, timeout: float = 30) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


class SlowReader:
    """A raw HTTP/1.1 client with a small receive buffer, that reads only when told."""

    def __init__(self, gw: HttpGateway) -> None:
        host, port = gw.url.split("//")[1].split("/")[0].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((self.host, self.port))
        self.sock.setblocking(False)

    async def post(self, message: dict[str, Any]) -> None:
        body = orjson.dumps(message)
        head = "".join(f"{k}: {v}\r\n" for k, v in {
            "Host": f"{self.host}:{self.port}", "Content-Length": str(len(body)),
            **HttpGateway.modern_headers(message)}.items())
        await asyncio.get_running_loop().sock_sendall(
            self.sock, b"POST /mcp HTTP/1.1\r\n" + head.encode() + b"\r\n" + body)

    async def read_until(self, done: Any, most: int = 64 << 20) -> tuple[bytes, bool]:
        """Everything until ``done(data)``, the connection's end or ``most`` bytes;
        whether it ended."""
        loop = asyncio.get_running_loop()
        data = b""
        while not done(data) and len(data) < most:
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(self.sock, 1 << 16), 30)
            except ConnectionResetError:
                return data, True
            if not chunk:
                return data, True
            data += chunk
        return data, False

    def close(self) -> None:
        self.sock.close()


def sse_events(data: bytes) -> list[dict[str, Any]]:
    """The complete JSON-RPC messages of an SSE body (a cut-off last one left out)."""
    events = []
    for line in data.split(b"\n"):
        if line.startswith(b"data: "):
            try:
                events.append(orjson.loads(line[6:]))
            except orjson.JSONDecodeError:
                pass
    return events


def result_event_read(data: bytes) -> bool:
    """The result's event is in ``data`` whole (its text, then the blank line that ends an
    SSE event), not only its first bytes."""
    at = data.find(b'"slept 0s"')
    return at >= 0 and b"\n\n" in data[at:]


def progress_values(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["params"]["progress"] for m in messages
            if m.get("method") == "notifications/progress"]


def test_a_calls_progress_waits_for_its_reader_coalesced_to_the_latest(gateways, tmp_path,
                                                                      tap):
    path = fleet_config(tmp_path, {"s": scripted(tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "stream_backlog=8")
        slow = SlowReader(gw)
        try:
            call = flood_call(gw, seconds=0, progress=FLOOD, pad=PAD)
            await slow.post(call)
            await until(lambda: answered(tap, "slept 0s"), "the server behind answered")
            # Another client's call, answered after the flood on the same server: by
            # then every progress notification reached the gateway.
            _, other = await gw.modern("tools/call", {"name": "echo", "arguments": {"n": 1}})
            assert "result" in other, other
            data, ended = await slow.read_until(result_event_read)
            assert not ended
            messages = sse_events(data)
            values = progress_values(messages)
            assert len(values) < FLOOD, "what the reader was too slow for was coalesced"
            assert values == sorted(values) and values[-1] == FLOOD, "the latest kept"
            assert messages[-1]["id"] == call["id"] and "result" in messages[-1]
        finally:
            slow.close()
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_call_whose_reader_stays_behind_is_cancelled(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"s": scripted(tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "stream_backlog=8",
                                     "--limit", "stream_behind_s=1")
        slow = SlowReader(gw)
        try:
            # Progress every 10 ms, 64 KiB each, for as long as the call runs (2 minutes).
            call = flood_call(gw, seconds=120, progress=100000, pad=65536, every=0.01)
            await slow.post(call)
            await until(lambda: cancelled(tap), "the call behind was cancelled")
            assert cancelled(tap) == ["cancelled by the caller"]  # not its deadline
            # The call behind was cancelled as if its client had gone: the connection
            # is dropped, and the client reads what the kernel held, then the end.
            data, ended = await slow.read_until(lambda _d: False)
            assert ended
            assert not any("id" in m for m in sse_events(data)), "no answer came"
            _, other = await gw.modern("tools/call", {"name": "echo", "arguments": {"n": 1}})
            assert "result" in other, other
        finally:
            slow.close()
        assert await gw.stop() == 0
        assert b"a call's stream ended: its reader took nothing for 1 s " \
               b"(limit stream_behind_s)" in gw.stderr
    run(main(), timeout=120)


def test_a_stdio_client_that_does_not_read_holds_its_backlog(gateways, tmp_path, tap):
    """Over stdio the client is the gateway's only one: it is not ended for being
    behind, but what waits for it is its backlog, progress coalesced."""
    path = fleet_config(tmp_path, {"s": scripted(tap=tap)})

    async def main():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trunkline", "serve", str(path), "--stdio",
            "--limit", "stream_backlog=8", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        gateways.add(proc.pid)
        assert proc.stdin is not None and proc.stdout is not None
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "sleep", "arguments": {"seconds": 0, "progress": FLOOD, "pad": PAD},
            "_meta": modern_meta(progressToken="flood")}}
        proc.stdin.write(orjson.dumps(call) + b"\n")
        await proc.stdin.drain()
        # Nothing is read until the server behind has answered.
        await until(lambda: answered(tap, "slept 0s"), "the server behind answered")
        messages = []
        while not messages or "id" not in messages[-1]:
            messages.append(orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 30)))
        values = progress_values(messages)
        assert len(values) < FLOOD, "what the reader was too slow for was coalesced"
        assert values == sorted(values) and values[-1] == FLOOD, "the latest kept"
        assert messages[-1]["id"] == 1 and "result" in messages[-1]
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    run(main(), timeout=120)
