"""A small HTTP/1.1 keep-alive JSON-RPC echo server for ``bench_http_client.py`` and
``bench_http_fanout.py``.

Raw asyncio protocol on uvloop, stdlib + orjson only, so that the server costs far less
per request than either client it measures. Binds 127.0.0.1 on an ephemeral port, prints
``PORT <n>`` on stdout, and exits on stdin EOF (so it dies with its parent) or SIGTERM.

Routes (the path picks the response shape; the JSON-RPC id is echoed verbatim):

* ``POST /mcp/small``  ``application/json``, ~200 B: the result text is ``r<id> `` padded
  with ``.`` to 100 characters.
* ``POST /mcp/large``  ``application/json``, the result text is ``r<id> `` padded with
  ``.`` to 65,536 characters.
* ``POST /mcp/sse``    ``text/event-stream``, chunked: two ``notifications/progress``
  events (``progressToken`` = the id, progress 1 and 2), then the final response (the
  small result), each event one chunk and one write; then the terminating chunk.
* ``POST /mcp/slow-sse``  headers and the first progress event, then nothing for 60 s.
* ``POST /mcp/slow-head`` nothing (no status line) for 60 s.
  The two slow routes record their request id: ``waiting`` / ``streaming`` until the
  client closes the connection (``closed``, with the server's ``time.monotonic()``,
  which on Linux is the same clock in every process, and how: ``eof`` for a FIN,
  ``reset`` for an RST).
* ``POST /mcp/echo``  a minimal MCP 2026-07-28 server (``bench_http_fanout.py``), JSON
  answers only: ``server/discover`` (a DiscoverResult), ``tools/list`` (one tool, ``echo``
  ``{text: string}``), ``tools/call`` ``echo`` (a CallToolResult whose text is the
  argument, verbatim); any other request gets -32601 with HTTP 404 (so
  ``subscriptions/listen`` is refused), a bad ``echo`` call -32602 with 400, a
  notification 202. Nothing else is validated, except that every request carries
  ``MCP-Protocol-Version: 2026-07-28`` and an ``Mcp-Method`` equal to its method: each
  one that does not is counted in ``/stats`` (``header_violations``, with a few samples)
  and still answered. No credential is required; each ``tools/call``'s ``Authorization``
  value is counted (``/stats`` ``echo_authorizations``: value -> calls), so a gateway's
  client can be checked to send each user's own token.
* ``GET /slow?prefix=P`` JSON: the state counts of the slow requests whose (string) id
  starts with P, how the closed ones were closed, and their close times.
* ``GET /stats`` JSON: ``mcp_connections`` (connections that carried a ``/mcp`` request),
  ``open_mcp`` (those still open), ``peak_open_mcp`` (the most open at once since the last
  ``GET /stats?reset-peak``, which sets it to ``open_mcp``), ``requests``, ``cpu_s`` (this
  process, user + sys); for ``/mcp/echo``: ``echo_methods`` (requests per JSON-RPC
  method), ``echo_notifications``, ``header_violations``, ``violation_samples``,
  ``echo_authorizations``.

No chunked request bodies, no pipelining beyond what arrives in order, no TLS: neither
client needs them for this traffic.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sys
import time
from typing import Any

import orjson

SMALL_TEXT_LEN = 100
LARGE_TEXT_LEN = 65536
SLOW_HOLD_S = 60.0
PAD = "."


def small_text(rid: Any) -> str:
    return f"r{rid} ".ljust(SMALL_TEXT_LEN, PAD)


def large_text(rid: Any) -> str:
    return f"r{rid} ".ljust(LARGE_TEXT_LEN, PAD)


def _result(rid: Any, text: str) -> bytes:
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "result": {
                "content": [{"type": "text", "text": text}],
                "isError": False,
                "resultType": "complete",
            },
        }
    )


def _progress(rid: Any, n: int) -> bytes:
    return orjson.dumps({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": rid, "progress": n, "total": 3},
    })


def _event(seq: int, data: bytes) -> bytes:
    ev = b"event: message\nid: %d\ndata: %s\n\n" % (seq, data)
    return b"%x\r\n%s\r\n" % (len(ev), ev)


JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
LAST_CHUNK = b"0\r\n\r\n"


# ---------------------------------------------- /mcp/echo: a minimal 2026-07-28 server

MODERN = "2026-07-28"
MODERN_BYTES = MODERN.encode()
TTL_MS = 300_000  # no re-listing during a run
_COMPLETE = {
    "resultType": "complete",
    "_meta": {
        "io.modelcontextprotocol/serverInfo": {
            "name": "trunkline-bench-http-echo",
            "version": "0.1.0",
        }
    },
}
ECHO_TOOL = {
    "name": "echo",
    "description": "Returns its text argument.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}
_FIXED_RESULTS = {
    "server/discover": {**_COMPLETE, "supportedVersions": [MODERN], "capabilities": {"tools": {}},
                        "ttlMs": TTL_MS, "cacheScope": "public"},
    "tools/list": {**_COMPLETE, "tools": [ECHO_TOOL], "ttlMs": TTL_MS, "cacheScope": "public"},
}
ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
RPC_STATUS = {400: b"400 Bad Request", 404: b"404 Not Found"}
MAX_VIOLATION_SAMPLES = 5


def _rpc_error(status: int, rid: Any, code: int, message: str) -> bytes:
    out = orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        RPC_STATUS[status], len(out), out)


def mcp_echo(body: bytes, version: bytes | None, method_header: bytes | None,
             authorization: bytes | None = None) -> bytes:
    """The whole HTTP response to one POST /mcp/echo (keep-alive in every case)."""
    try:
        msg = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _rpc_error(400, None, -32700, "Parse error")
    if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
        return _rpc_error(400, None, -32600, "Invalid request")
    method = msg["method"]
    if "id" not in msg:
        STATE.echo_notifications += 1
        return ACCEPTED
    rid = msg["id"]
    counts = STATE.echo_methods
    counts[method] = counts.get(method, 0) + 1
    if version != MODERN_BYTES or method_header != method.encode():
        STATE.header_violations += 1
        if len(STATE.violation_samples) < MAX_VIOLATION_SAMPLES:
            STATE.violation_samples.append({
                "method": method,
                "MCP-Protocol-Version": None if version is None else version.decode("latin-1"),
                "Mcp-Method": None if method_header is None else method_header.decode("latin-1"),
            })
    if method == "tools/call":
        params = msg.get("params")
        args = params.get("arguments") if isinstance(params, dict) else None
        text = args.get("text") if isinstance(args, dict) and params.get("name") == "echo" else None
        if not isinstance(text, str):
            return _rpc_error(400, rid, -32602, "tools/call: only echo {text: string} is served")
        if authorization is not None:
            held = STATE.echo_authorizations
            value = authorization.decode("latin-1")
            held[value] = held.get(value, 0) + 1
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False,
                                  "resultType": "complete"}
    elif method in _FIXED_RESULTS:
        result = _FIXED_RESULTS[method]
    else:
        return _rpc_error(404, rid, -32601, f"Method not found: {method}")
    out = orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})
    return JSON_HEAD % len(out) + out


class State:
    def __init__(self) -> None:
        self.mcp_connections = 0
        self.open_mcp = 0
        self.peak_open_mcp = 0
        self.requests = 0
        self.echo_methods: dict[str, int] = {}  # /mcp/echo requests per JSON-RPC method
        self.echo_notifications = 0
        self.header_violations = 0
        self.violation_samples: list[dict[str, Any]] = []
        self.echo_authorizations: dict[str, int] = {}  # tools/call per Authorization value
        # slow request id (str) -> {"state": ..., "closed_at": float | None}
        self.slow: dict[str, dict[str, Any]] = {}


STATE = State()


class Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.need: int | None = None  # body bytes awaited for the parsed head, or None
        self.method = b""
        self.path = b""
        self.close_after = False
        self.version_header: bytes | None = None  # MCP-Protocol-Version of this request
        self.method_header: bytes | None = None  # Mcp-Method of this request
        self.authorization: bytes | None = None  # Authorization of this request
        self.mcp = False
        self.slow_id: str | None = None  # the slow request this connection is holding
        self.slow_task: asyncio.Task[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.got_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a socket transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.mcp:
            STATE.open_mcp -= 1
        if self.slow_id is not None:
            entry = STATE.slow[self.slow_id]
            entry["state"] = "closed"
            entry["closed_at"] = time.monotonic()
            entry["how"] = "eof" if self.got_eof else "reset" if exc is not None else "closed"
        if self.slow_task is not None:
            self.slow_task.cancel()
        self.transport = None

    def eof_received(self) -> bool:
        self.got_eof = True  # the client closed (FIN), as opposed to aborting (RST)
        return False  # close our side too: connection_lost follows

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.slow_task is None:
            self._process()

    def _process(self) -> None:
        buf = self.buf
        while self.transport is not None and self.slow_task is None:
            if self.need is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[:end])
                del buf[: end + 4]
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                if len(parts) != 3:
                    self._reply(400, b"bad request line")
                    return
                self.method, self.path = parts[0], parts[1]
                length = 0
                self.close_after = parts[2] == b"HTTP/1.0"
                self.version_header = self.method_header = self.authorization = None
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value)
                    elif name == b"connection":
                        v = value.strip().lower()
                        self.close_after = v == b"close" or (
                            self.close_after and v != b"keep-alive"
                        )
                    elif name == b"mcp-protocol-version":
                        self.version_header = value.strip()
                    elif name == b"mcp-method":
                        self.method_header = value.strip()
                    elif name == b"authorization":
                        self.authorization = value.strip()
                    elif name == b"transfer-encoding":
                        self._reply(501, b"chunked request bodies are not supported")
                        return
                self.need = length
            if len(buf) < self.need:
                return
            body = bytes(buf[: self.need])
            del buf[: self.need]
            self.need = None
            self._handle(body)

    def _reply(
        self, status: int, body: bytes, ctype: bytes = b"text/plain", close: bool = False
    ) -> None:
        assert self.transport is not None
        reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 501: b"Not Implemented"}[
            status
        ]
        close = close or self.close_after or status != 200
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s"
            % (status, reason, ctype, len(body), b"Connection: close\r\n" if close else b"", body)
        )
        if close:
            self.transport.close()

    def _handle(self, body: bytes) -> None:
        path, method = self.path, self.method
        if method == b"GET":
            if path in (b"/stats", b"/stats?reset-peak"):
                if path.endswith(b"reset-peak"):
                    STATE.peak_open_mcp = STATE.open_mcp
                ru = resource.getrusage(resource.RUSAGE_SELF)
                doc = {
                    "mcp_connections": STATE.mcp_connections,
                    "open_mcp": STATE.open_mcp,
                    "peak_open_mcp": STATE.peak_open_mcp,
                    "requests": STATE.requests,
                    "cpu_s": ru.ru_utime + ru.ru_stime,
                    "echo_methods": STATE.echo_methods,
                    "echo_notifications": STATE.echo_notifications,
                    "header_violations": STATE.header_violations,
                    "violation_samples": STATE.violation_samples,
                    "echo_authorizations": STATE.echo_authorizations,
                }
                self._reply(200, orjson.dumps(doc), b"application/json")
            elif path.startswith(b"/slow?prefix="):
                prefix = path[len(b"/slow?prefix="):].decode()
                counts: dict[str, int] = {}
                how: dict[str, int] = {}
                closed_at = []
                for rid, entry in STATE.slow.items():
                    if rid.startswith(prefix):
                        counts[entry["state"]] = counts.get(entry["state"], 0) + 1
                        if entry["closed_at"] is not None:
                            closed_at.append(entry["closed_at"])
                            how[entry["how"]] = how.get(entry["how"], 0) + 1
                doc = {"counts": counts, "how": how, "closed_at": closed_at}
                self._reply(200, orjson.dumps(doc), b"application/json")
            else:
                self._reply(404, b"not found")
            return
        if method != b"POST" or not path.startswith(b"/mcp/"):
            self._reply(404, b"not found")
            return
        if not self.mcp:
            self.mcp = True
            STATE.mcp_connections += 1
            STATE.open_mcp += 1
            STATE.peak_open_mcp = max(STATE.peak_open_mcp, STATE.open_mcp)
        STATE.requests += 1
        t = self.transport
        assert t is not None
        if path == b"/mcp/echo":
            t.write(mcp_echo(body, self.version_header, self.method_header, self.authorization))
            if self.close_after:
                t.close()
            return
        try:
            rid = orjson.loads(body)["id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self._reply(400, b"not a JSON-RPC request")
            return
        mode = path[5:]
        if mode == b"small":
            out = _result(rid, small_text(rid))
            t.write(JSON_HEAD % len(out) + out)
        elif mode == b"large":
            out = _result(rid, large_text(rid))
            t.write(JSON_HEAD % len(out) + out)
        elif mode == b"sse":
            t.write(SSE_HEAD + _event(1, _progress(rid, 1)))
            t.write(_event(2, _progress(rid, 2)))
            t.write(_event(3, _result(rid, small_text(rid))))
            t.write(LAST_CHUNK)
        elif mode in (b"slow-sse", b"slow-head"):
            sid = str(rid)
            streaming = mode == b"slow-sse"
            STATE.slow[sid] = {"state": "streaming" if streaming else "waiting", "closed_at": None}
            self.slow_id = sid
            if streaming:
                t.write(SSE_HEAD + _event(1, _progress(rid, 1)))
            self.slow_task = asyncio.get_running_loop().create_task(self._hold(rid, streaming))
            return
        else:
            self._reply(404, b"unknown mode")
            return
        if self.close_after:
            t.close()

    async def _hold(self, rid: Any, streaming: bool) -> None:
        await asyncio.sleep(SLOW_HOLD_S)
        t = self.transport
        if t is None:
            return
        assert self.slow_id is not None
        STATE.slow[self.slow_id]["state"] = "completed"
        self.slow_id = None
        if not streaming:
            t.write(SSE_HEAD + _event(1, _progress(rid, 1)))
        t.write(_event(2, _result(rid, small_text(rid))) + LAST_CHUNK)
        self.slow_task = None
        self._process()


async def main() -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def stop() -> None:
        if not done.done():
            done.set_result(None)

    class StdinWatch(asyncio.Protocol):
        def connection_lost(self, exc: Exception | None) -> None:
            stop()

    await loop.connect_read_pipe(StdinWatch, sys.stdin)
    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    server = await loop.create_server(Conn, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    os.write(1, b"PORT %d\n" % port)
    await done
    server.close()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:  # still correct on the stock loop, only slower
        asyncio.run(main())
    else:
        uvloop.run(main())
