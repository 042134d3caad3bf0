"""A flag-driven, possibly hostile MCP Streamable HTTP server for the tests (aiohttp.web).

Run with the dev venv's python (it needs aiohttp):

    .venv/bin/python tests/peers/http_scripted.py [flags]

It binds 127.0.0.1 on an ephemeral port and prints exactly one line,
``LISTENING http://127.0.0.1:<port>/mcp``, once the socket accepts connections.
SIGTERM/SIGINT stop it cleanly.

By default it is a strict modern (2026-07-28) server: one POST per message; GET and
DELETE get 405. Every request needs the `_meta` envelope (else 400 -32602), and the
headers must agree with the body (else 400 -32020 HeaderMismatch with a `data`
object {"header", "expected", "received"}):
  MCP-Protocol-Version == _meta protocolVersion (a matching but unknown version -> 400
  -32022), Mcp-Method == method, Mcp-Name == params.name / params.uri (tools/call,
  prompts/get, resources/read), and for tools/call one Mcp-Param-<Name> per
  `x-mcp-header` property present and non-null in the arguments (and none for absent
  ones). Header values may use the `=?base64?...?=` form, and must where the spec says so
  (non-ASCII, control characters, leading/trailing blanks, sentinel look-alikes). Accept must
  list application/json and text/event-stream (else 406 -32600). Unknown method -> 404
  -32601; unknown tool or bad arguments -> 400 -32602; notification POSTs -> 202.

Methods: server/discover, tools/list, tools/call. Tools:
  echo {text}                         -> text
  slow {seconds}                      -> sleeps, then "slept <seconds>"; a client that
                                         disconnects first is logged as an "event" record
  headered {region, count?, flag?}    -> "region=<r> count=<c> flag=<f>"; the three are
                                         annotated x-mcp-header Region / Count / Flag
  bad_header {x} (--invalid-header-tool) x-mcp-header on a `number`: an invalid tool

Flags:
  --record PATH       append one JSON line per HTTP request: {"method", "path",
                      "headers" (lower-cased names), "body" (parsed JSON or null)};
                      a handler cancelled by a client disconnect adds
                      {"event": "cancelled", "id": <JSON-RPC id>}
  --status CODE       answer every POST with CODE and a short text/plain body (401 also
                      sends `WWW-Authenticate: Bearer realm="test"`)
  --status-for METHOD  apply --status only to POSTs of that JSON-RPC method (e.g. tools/call)
  --tls CERT KEY      serve https with that PEM certificate chain and key
  --stray-events      (with --sse) before each response event: progress for a token
                      nobody sent, and a response with an id nobody used (424242)
  --annotate-echo-after-list  after serving tools/list once, echo's `text` is annotated
                      x-mcp-header Text (stale client definitions then get -32020)
  --require-bearer T  401 (as above) unless `Authorization: Bearer T`
  --sse               answer requests with text/event-stream: `: keep-alive`, then (for
                      tools/call with _meta.progressToken) notifications/progress, then
                      the response event
  --drop-mid-call     tools/call: SSE headers, one progress notification, then the
                      connection is closed without a response
  --garbage           200 application/json with a body that is not JSON
  --malformed-echo    echo {"text": "malformed"} answers with both "result" and "error" (a
                      malformed answer); with --sse, as the stream's last event, the
                      stream then held open (a server that thinks it answered) until the
                      client goes, which is recorded as {"event": "closed", "id": <id>}
  --invalid-header-tool  also list bad_header
  --legacy            a 2025-11-25 Streamable HTTP server instead: initialize returns an
                      InitializeResult and an Mcp-Session-Id; later requests need that id
                      (missing -> 400 with mcp 1.x's -32000 body, unknown -> 404) and an
                      MCP-Protocol-Version header (missing/unsupported -> 400);
                      notifications and responses -> 202; DELETE with the id -> 200 and
                      the session is forgotten; server/discover without a session -> the
                      same 400 as mcp 1.x, with a session -> -32601
  --expire-session-after N  (legacy) the session answers N POSTs after initialize
                      (notifications included), then 404 and is forgotten
  --redirect STATUS LOCATION  every request to /mcp gets STATUS with that Location
                      (absolute, or a path on this server); any other path is served
                      as /mcp would be
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import socket
import ssl
import sys
import uuid
from typing import Any

from aiohttp import web

MODERN = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
PV_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = {"name": "trunkline-http-scripted", "version": "0.1.0"}
NO_SESSION = {"jsonrpc": "2.0", "id": None,
              "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}}
SESSION_NOT_FOUND = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {"code": -32001, "message": "Session not found"},
}


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": "Return text unchanged",
     "inputSchema": _schema({"text": {"type": "string"}}, ["text"])},
    {"name": "slow", "description": "Sleep `seconds`, then answer",
     "inputSchema": _schema({"seconds": {"type": "number"}}, ["seconds"])},
    {"name": "headered", "description": "Arguments mirrored into Mcp-Param-* headers",
     "inputSchema": _schema({"region": {"type": "string", "x-mcp-header": "Region"},
                             "count": {"type": "integer", "x-mcp-header": "Count"},
                             "flag": {"type": "boolean", "x-mcp-header": "Flag"}}, ["region"])},
]
INVALID_TOOL = {"name": "bad_header", "description": "x-mcp-header on a number (invalid)",
                "inputSchema": _schema({"x": {"type": "number", "x-mcp-header": "X"}}, ["x"])}


def _with_text_header(tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool["inputSchema"]
    text = {**schema["properties"]["text"], "x-mcp-header": "Text"}
    return {**tool, "inputSchema": {**schema, "properties": {**schema["properties"], "text": text}}}


class RpcError(Exception):
    def __init__(self, status: int, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.status, self.code, self.data = status, code, data


def decode_header(value: str) -> str:
    if value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11:
        return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
    return value


def needs_base64(value: str) -> bool:
    """A plain value the spec says must travel as =?base64?...?= instead."""
    plain = all(c in "\t " or "\x21" <= c <= "\x7e" for c in value)
    return not plain or value != value.strip(" \t") or (
        value.startswith("=?base64?") and value.endswith("?="))


def header_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def expect_header(request: web.Request, name: str, expected: str | None) -> None:
    """400 -32020 unless header `name` carries `expected` (None: must be absent)."""
    raw = request.headers.get(name)
    try:
        got = None if raw is None else decode_header(raw)
    except (ValueError, UnicodeDecodeError):
        got = "<undecodable>"
    if raw is not None and got == raw and needs_base64(raw):
        got = "<should have been base64>"
    if got != expected:
        raise RpcError(400, -32020, f"Header mismatch: {name} is {raw!r}, body says {expected!r}",
                       {"header": name, "expected": expected, "received": raw})


class Peer:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.tools = TOOLS + ([INVALID_TOOL] if args.invalid_header_tool else [])
        self.sessions: dict[str, int] = {}  # legacy: session id -> requests answered

    def record(self, entry: dict[str, Any]) -> None:
        if self.args.record:
            with open(self.args.record, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    # ---- HTTP entry ----------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.record({"method": request.method, "path": request.path,
                     "headers": {k.lower(): v for k, v in request.headers.items()}, "body": body})
        a = self.args
        if a.redirect and request.path == "/mcp":
            status, location = a.redirect
            return web.Response(status=int(status), headers={"Location": location},
                                text=f"moved to {location}\n")
        status_applies = a.status is not None and (
            a.status_for is None or (isinstance(body, dict) and body.get("method") == a.status_for))
        if status_applies or (a.require_bearer is not None and
                              request.headers.get("Authorization") != f"Bearer {a.require_bearer}"):
            status = a.status or 401
            hdrs = {"WWW-Authenticate": 'Bearer realm="test"'} if status == 401 else {}
            return web.Response(status=status, text=f"{status} from http_scripted\n", headers=hdrs)
        if a.garbage:
            return web.Response(status=200, content_type="application/json", text="<html>not json")
        if a.legacy:
            return await self.legacy(request, body)
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST"})
        if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
            return rpc_error(None, RpcError(400, *((-32700, "Parse error") if body is None
                                                    else (-32600, "Invalid request"))))
        if "id" not in body:
            return web.Response(status=202)
        accept = request.headers.get("Accept", "")
        if "application/json" not in accept or "text/event-stream" not in accept:
            return rpc_error(
                body.get("id"),
                RpcError(
                    406,
                    -32600,
                    "Not Acceptable: Accept must list application/json and text/event-stream",
                ),
            )
        try:
            self.check_modern(request, body)
            return await self.dispatch(request, body, modern=True)
        except RpcError as e:
            return rpc_error(body.get("id"), e)

    def check_modern(self, request: web.Request, body: dict[str, Any]) -> None:
        params = body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if not isinstance(meta, dict) or PV_KEY not in meta or CAPS_KEY not in meta:
            raise RpcError(400, -32602, "params._meta lacks the required envelope keys")
        expect_header(request, "MCP-Protocol-Version", meta[PV_KEY])
        if meta[PV_KEY] != MODERN:
            raise RpcError(400, -32022, "Unsupported protocol version",
                           {"supported": [MODERN], "requested": meta[PV_KEY]})
        method = body.get("method")
        expect_header(request, "Mcp-Method", method)
        if method in ("tools/call", "prompts/get", "resources/read"):
            key = "uri" if method == "resources/read" else "name"
            expect_header(request, "Mcp-Name", header_text(params.get(key)))
        if method == "tools/call":
            tool = next((t for t in self.tools if t["name"] == params.get("name")), None)
            arguments = params.get("arguments") or {}
            for prop, schema in (tool["inputSchema"]["properties"].items() if tool else ()):
                if "x-mcp-header" in schema:
                    value = arguments.get(prop)
                    expect_header(request, "Mcp-Param-" + schema["x-mcp-header"],
                                  None if value is None else header_text(value))

    # ---- methods -------------------------------------------------------------------
    async def dispatch(self, request: web.Request, body: dict[str, Any], modern: bool
                       ) -> web.StreamResponse:
        method, params, rid = body.get("method"), body.get("params") or {}, body.get("id")
        stamp = {
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
        }
        if not modern:
            stamp = {}
        if method == "server/discover" and modern:
            result = {**stamp, "supportedVersions": [MODERN], "capabilities": {"tools": {}},
                      "ttlMs": 0, "cacheScope": "private"}
        elif method == "tools/list":
            cache = {"ttlMs": 0, "cacheScope": "private"} if modern else {}
            result = {**stamp, **cache, "tools": self.tools}
            if self.args.annotate_echo_after_list:
                # The definitions change under the client: from now on echo's `text`
                # travels in Mcp-Param-Text, and a call without it gets -32020.
                self.tools = [_with_text_header(t) if t["name"] == "echo" else t
                              for t in self.tools]
        elif method == "ping" and not modern:
            result = {}
        elif method == "tools/call":
            return await self.call_tool(request, rid, params, stamp)
        else:
            raise RpcError(404 if modern else 200, -32601, "Method not found", method)
        return await self.respond(request, {"jsonrpc": "2.0", "id": rid, "result": result})

    async def call_tool(self, request: web.Request, rid: Any, params: dict[str, Any],
                        stamp: dict[str, Any]) -> web.StreamResponse:
        name, args = params.get("name"), params.get("arguments") or {}
        valid = {"echo": isinstance(args.get("text"), str),
                 "slow": isinstance(args.get("seconds"), (int, float)) and not isinstance(
                     args.get("seconds"), bool),
                 "headered": isinstance(args.get("region"), str)}
        if name not in {t["name"] for t in self.tools}:
            raise RpcError(400, -32602, f"Unknown tool: {name}")
        if not valid.get(name) and not self.args.drop_mid_call:
            raise RpcError(400, -32602, f"Invalid arguments for tool {name}")
        token = (params.get("_meta") or {}).get("progressToken")
        progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {
            "progressToken": rid if token is None else token, "progress": 1, "total": 2,
            "message": "started"}}
        resp = await sse_open(request) if self.args.sse or self.args.drop_mid_call else None
        if resp is not None and (token is not None or self.args.drop_mid_call):
            await resp.write(sse_event(progress))
        if self.args.drop_mid_call:
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.close()  # the chunked body is never terminated: no response
            raise asyncio.CancelledError
        if name == "slow":
            try:  # in SSE mode a keep-alive comment every 0.5 s while "working"
                left = min(float(args["seconds"]), 600.0)
                while left > 0:
                    await asyncio.sleep(min(left, 0.5))
                    left -= 0.5
                    if resp is not None and left > 0:
                        await resp.write(b": keep-alive\n\n")
            except (asyncio.CancelledError, ConnectionError):
                self.record({"event": "cancelled", "id": rid})
                raise
            text = f"slept {args['seconds']}"
        elif name == "headered":
            text = " ".join(f"{k}={header_text(args[k])}" for k in ("region", "count", "flag")
                            if args.get(k) is not None)
        else:
            text = args["text"]
        answer = {"jsonrpc": "2.0", "id": rid, "result": {
            **stamp, "content": [{"type": "text", "text": text}], "isError": False}}
        if self.args.malformed_echo and name == "echo" and text == "malformed":
            answer["error"] = {"code": -32603, "message": "and an error too"}
            if resp is not None:
                await resp.write(sse_event(answer))
                try:
                    while True:
                        await asyncio.sleep(0.5)
                        await resp.write(b": keep-alive\n\n")
                except (asyncio.CancelledError, ConnectionError):
                    self.record({"event": "closed", "id": rid})
                    raise
        return await self.respond(request, answer, resp)

    async def respond(self, request: web.Request, message: dict[str, Any],
                      resp: web.StreamResponse | None = None) -> web.StreamResponse:
        """The response as JSON, or as the last event of an SSE stream (opened if need be)."""
        if resp is None and not self.args.sse:
            return web.json_response(message)
        resp = resp or await sse_open(request)
        if self.args.stray_events and "id" in message:
            # What a confused or hostile server might interleave: progress for a token
            # this request never sent, and an answer to some other request.
            await resp.write(sse_event({"jsonrpc": "2.0", "method": "notifications/progress",
                                        "params": {"progressToken": "not-yours", "progress": 1}}))
            await resp.write(sse_event({"jsonrpc": "2.0", "id": 424242,
                                        "result": {"resultType": "complete", "content": []}}))
        await resp.write(sse_event(message))
        await resp.write_eof()
        return resp

    # ---- legacy 2025-11-25 -----------------------------------------------------------
    async def legacy(self, request: web.Request, body: Any) -> web.StreamResponse:
        sid = request.headers.get("Mcp-Session-Id")
        if (
            request.method == "POST"
            and isinstance(body, dict)
            and body.get("method") == "initialize"
        ):
            sid = uuid.uuid4().hex
            self.sessions[sid] = 0
            result = {
                "protocolVersion": LEGACY_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": SERVER_INFO,
            }
            return web.json_response({"jsonrpc": "2.0", "id": body.get("id"), "result": result},
                                     headers={"Mcp-Session-Id": sid})
        if request.method not in ("POST", "DELETE"):
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        if sid is None:
            return web.json_response(NO_SESSION, status=400)
        if sid not in self.sessions:
            return web.json_response(SESSION_NOT_FOUND, status=404)
        if request.method == "DELETE":
            del self.sessions[sid]
            return web.Response(status=200)
        limit = self.args.expire_session_after
        self.sessions[sid] += 1
        if limit is not None and self.sessions[sid] > limit:
            del self.sessions[sid]
            return web.json_response(SESSION_NOT_FOUND, status=404)
        if request.headers.get("MCP-Protocol-Version") not in LEGACY_VERSIONS:
            return web.json_response(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": -32000,
                        "message": "Bad Request: Unsupported protocol version",
                    },
                },
                status=400,
            )
        if not isinstance(body, dict) or "method" not in body or "id" not in body:
            return web.Response(status=202)  # notifications and client responses
        try:
            return await self.dispatch(request, body, modern=False)
        except RpcError as e:
            return rpc_error(body.get("id"), e)


def rpc_error(rid: Any, e: RpcError) -> web.Response:
    error: dict[str, Any] = {"code": e.code, "message": str(e)}
    if e.data is not None:
        error["data"] = e.data
    return web.json_response({"jsonrpc": "2.0", "id": rid, "error": error}, status=e.status)


async def sse_open(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    await resp.write(b": keep-alive\n\n")
    return resp


def sse_event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


async def main(args: argparse.Namespace) -> None:
    peer = Peer(args)
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", peer.handle)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    tls = None
    if args.tls:  # serve https with this certificate chain and key (PEM files)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(*args.tls)
    site = web.SockSite(runner, sock, ssl_context=tls)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    scheme = "https" if tls else "http"
    print(f"LISTENING {scheme}://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--record")
    p.add_argument("--status", type=int)
    p.add_argument("--status-for")
    p.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    p.add_argument("--annotate-echo-after-list", action="store_true")
    p.add_argument("--stray-events", action="store_true")
    p.add_argument("--require-bearer")
    p.add_argument("--sse", action="store_true")
    p.add_argument("--drop-mid-call", action="store_true")
    p.add_argument("--garbage", action="store_true")
    p.add_argument("--malformed-echo", action="store_true")
    p.add_argument("--invalid-header-tool", action="store_true")
    p.add_argument("--legacy", action="store_true")
    p.add_argument("--expire-session-after", type=int)
    p.add_argument("--redirect", nargs=2, metavar=("STATUS", "LOCATION"))
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
