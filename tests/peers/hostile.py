#!/usr/bin/env python3
"""A hostile MCP server on stdio (stdlib only): one mode per way a server behind the
gateway can try to take it from everyone else (issue 36), so a test can set one against
a good server and a legitimate client.

Tests spawn it as ``sys.executable tests/peers/hostile.py [flags]``. It reads one
JSON-RPC message per line on stdin and writes one per line on stdout. Apart from the
misbehaviour its flags pick, it is a plain server with one tool, ``echo`` (returns its
arguments as JSON text), so the same program is also the good server of a test.

ERA
  --era modern (default)  answers server/discover (supportedVersions 2026-07-28, the
                          tools capability with listChanged) and refuses initialize with
                          -32022, as scripted.py's modern peer does; a modern request's
                          results carry resultType and _meta serverInfo
  --era legacy            -32601 to server/discover, an InitializeResult (2025-11-25) to
                          initialize (the gateway needs "allowLegacy": true for it)

MODES (each a finding of issue 36; add new ones here, one line each)
  --tools-list MODE       how tools/list is answered:
    result                  (default) one page listing echo
    cursor-loop             every page's nextCursor is "same": from page 2 it repeats
    cursor-endless          every page's nextCursor is new ("page-2", "page-3", ...):
                            the list never ends (echo on page 1, no tool after)
    huge-line:BYTES         one answer line of BYTES bytes: a valid result whose one
                            tool's description is padded to size
    crash                   exit (code 4) on reading it
    deep:N                  a valid result whose echo carries an "x-deep" value nested N
                            arrays deep ([[[...]]])
  --bad-listings N        the --tools-list mode for the first N listings of this process
                          only, then plain ones (default: every listing): a server that
                          recovers
  --churn MS:N            every MS milliseconds announce notifications/tools/list_changed
                          (on every listen stream of a modern client, plainly to a legacy
                          one after notifications/initialized), and list, besides echo, N
                          tools whose names are new at every listing (churn-<listing>-<i>,
                          listing counted from 1), tool i always with the description
                          "Churn tool i.": each listing renames the last one's tools

BYTES values accept k/M/G suffixes (powers of 1024).

TAP
  If $TRUNKLINE_TAP names a file, every line received on stdin ("in") and every line
  written to stdout ("out") is appended to it as JSONL (taplog.py): a test counts the
  listings it was asked for there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

import taplog  # sibling module: sys.path[0] is this directory when run as a script

Json = dict[str, Any]

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO = {"name": "hostile-peer", "version": "1.0.0"}
CAPABILITIES = {"tools": {"listChanged": True}}
CRASH_EXIT_CODE = 4

ECHO = {"name": "echo", "description": "Returns its arguments as JSON text.",
        "inputSchema": {"type": "object"}}

#: --tools-list modes, and whether ":ARG" is required.
TOOLS_LIST_MODES = {"result": False, "cursor-loop": False, "cursor-endless": False,
                    "huge-line": True, "crash": False, "deep": True}


def parse_bytes(text: str) -> int:
    """'4096', '64k', '16M', '1G' (powers of 1024)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    scale = units.get(text[-1:].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad byte count {text!r}") from None


def tools_list_mode(text: str) -> tuple[str, int]:
    mode, sep, arg = text.partition(":")
    if mode not in TOOLS_LIST_MODES:
        raise argparse.ArgumentTypeError(f"unknown --tools-list mode {mode!r}; known: "
                                         f"{', '.join(TOOLS_LIST_MODES)}")
    if TOOLS_LIST_MODES[mode] != bool(sep and arg):
        raise argparse.ArgumentTypeError(
            f"--tools-list {mode} {'needs' if TOOLS_LIST_MODES[mode] else 'takes no'} ':ARG'")
    return mode, (parse_bytes(arg) if mode == "huge-line" else int(arg) if arg else 0)


def churn(text: str) -> tuple[float, int]:
    ms, sep, count = text.partition(":")
    try:
        period, tools = float(ms) / 1000, int(count)
    except ValueError:
        period, tools = 0.0, 0
    if not sep or period <= 0 or tools < 0:
        raise argparse.ArgumentTypeError(f"--churn MS:N, not {text!r}")
    return period, tools


class Stdout:
    """Whole lines to fd 1, one writer at a time (the churn thread writes too)."""

    def __init__(self, tap: taplog.TapWriter | None) -> None:
        self._tap = tap
        self._lock = threading.Lock()

    def send(self, message: Json) -> None:
        self.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._tap:
                self._tap.record(taplog.OUT, data)
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(1, view):]
            except OSError:  # the client closed our stdout: nobody is listening
                os._exit(0)


class Peer:
    def __init__(self, ns: argparse.Namespace, out: Stdout,
                 tap: taplog.TapWriter | None) -> None:
        self.era = ns.era
        self.mode, self.mode_arg = ns.tools_list
        self.churn = ns.churn
        self.bad_listings = ns.bad_listings
        self.out = out
        self.tap = tap
        self.listings = 0
        self.streams: list[Any] = []  # ids of open subscriptions/listen requests
        self.initialized = False
        self._lock = threading.Lock()

    # -- input

    def handle_line(self, raw: bytes) -> None:
        if self.tap:
            self.tap.record(taplog.IN, raw)
        try:
            message = json.loads(raw)
        except ValueError:
            return
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return  # answers to nothing we asked, batches: not this peer's business
        if "id" not in message:
            if message["method"] == "notifications/initialized":
                self.initialized = True
            return
        try:
            result = self.result_for(message)
        except RpcError as error:
            self.out.send({"jsonrpc": "2.0", "id": message["id"], "error": error.json()})
            return
        if result is not None:
            self.reply(message, result)

    def reply(self, request: Json, result: Json) -> None:
        self.out.send(_answer(request, result))

    def result_for(self, request: Json) -> Json | None:
        method = request["method"]
        params = request.get("params") if isinstance(request.get("params"), dict) else {}
        if method == "ping":
            return {}
        if method == "server/discover":
            if self.era == "legacy":
                raise RpcError(-32601, "Method not found")
            return {"supportedVersions": [MODERN_VERSION], "capabilities": CAPABILITIES,
                    "ttlMs": 0, "cacheScope": "public"}
        if method == "initialize":
            if self.era == "modern":
                raise RpcError(-32022, "Unsupported protocol version",
                               {"supported": [MODERN_VERSION],
                                "requested": str(params.get("protocolVersion", ""))})
            return {"protocolVersion": LEGACY_VERSION, "capabilities": CAPABILITIES,
                    "serverInfo": dict(SERVER_INFO)}
        if method == "tools/list":
            return self.tools_list(request, params)
        if method == "tools/call":
            if params.get("name") not in ("echo",):
                raise RpcError(-32602, f"Unknown tool: {params.get('name')}")
            arguments = params.get("arguments") or {}
            return {"content": [{"type": "text", "text": json.dumps(
                arguments, separators=(",", ":"), sort_keys=True)}], "isError": False}
        if method == "subscriptions/listen" and _modern(request):
            asked = params.get("notifications") or {}
            granted = {"toolsListChanged": True} if asked.get("toolsListChanged") else {}
            with self._lock:
                self.streams.append(request["id"])
            self.out.send(_notification("notifications/subscriptions/acknowledged", {
                "notifications": granted, "_meta": {SUBSCRIPTION_KEY: request["id"]}}))
            return None  # open until the client goes
        raise RpcError(-32601, "Method not found")

    # -- tools/list, as the mode says

    def tools_list(self, request: Json, params: Json) -> Json | None:
        cursor = params.get("cursor")
        listed = self.listed_tools() if cursor is None else []
        mode = self.mode
        if self.bad_listings is not None and self.listings > self.bad_listings:
            mode = "result"
        if mode == "crash":
            os._exit(CRASH_EXIT_CODE)
        if mode == "cursor-loop":
            return {**self._page(listed, request), "nextCursor": "same"}
        if mode == "cursor-endless":
            page = int(cursor.removeprefix("page-")) if isinstance(cursor, str) \
                and cursor.startswith("page-") else 1
            return {**self._page(listed, request), "nextCursor": f"page-{page + 1}"}
        if mode == "huge-line":
            self.out.write(self.huge_line(request))
            return None
        if mode == "deep":
            depth = self.mode_arg
            deep_echo = json.dumps({**ECHO, "x-deep": 0}, separators=(",", ":")).replace(
                '"x-deep":0', '"x-deep":' + "[" * depth + "]" * depth)
            head = json.dumps(_answer(request, self._page(["ECHO"], request)),
                              separators=(",", ":"))
            self.out.write(head.replace('"ECHO"', deep_echo).encode() + b"\n")
            return None
        return self._page(listed, request)

    def listed_tools(self) -> list[Json]:
        """The tools of one listing: echo, or with --churn N fresh names."""
        with self._lock:
            self.listings += 1
            listing = self.listings
        if self.churn is None:
            return [ECHO]
        return [ECHO, *({"name": f"churn-{listing:06d}-{i:04d}",
                         "description": f"Churn tool {i}.", "inputSchema": {"type": "object"}}
                        for i in range(1, self.churn[1] + 1))]

    def _page(self, tools: list[Json], request: Json) -> Json:
        page: Json = {"tools": tools}
        if _modern(request):
            page.update(ttlMs=0, cacheScope="public")
        return page

    def huge_line(self, request: Json) -> bytes:
        size = self.mode_arg
        line = json.dumps(_answer(request, self._page([{**ECHO, "description": "PAD"}],
                                                      request)),
                          separators=(",", ":")).encode()
        before, _, after = line.partition(b"PAD")
        pad = max(size - len(before) - len(after) - 1, 0)
        return before + b"x" * pad + after + b"\n"

    # -- --churn

    def announce_forever(self) -> None:
        period = self.churn[0]
        stop = threading.Event()
        while not stop.wait(period):
            if self.era == "legacy":
                if self.initialized:
                    self.out.send(_notification("notifications/tools/list_changed", {}))
                continue
            with self._lock:
                streams = list(self.streams)
            for stream in streams:
                self.out.send(_notification("notifications/tools/list_changed",
                                            {"_meta": {SUBSCRIPTION_KEY: stream}}))


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.data = code, data

    def json(self) -> Json:
        error: Json = {"code": self.code, "message": str(self)}
        if self.data is not None:
            error["data"] = self.data
        return error


def _modern(request: Json) -> bool:
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def _answer(request: Json, result: Json) -> Json:
    """The response to ``request``: a modern request's result with resultType and the
    serverInfo in _meta."""
    if _modern(request):
        result = {"resultType": "complete", **result,
                  "_meta": {SERVER_INFO_KEY: dict(SERVER_INFO)}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def _notification(method: str, params: Json) -> Json:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="A hostile MCP stdio server (see the module docstring for every mode).")
    p.add_argument("--era", choices=("modern", "legacy"), default="modern")
    p.add_argument("--tools-list", type=tools_list_mode, default=("result", 0),
                   metavar="MODE")
    p.add_argument("--bad-listings", type=int, default=None, metavar="N")
    p.add_argument("--churn", type=churn, default=None, metavar="MS:N")
    return p


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    tap = taplog.writer_from_env("hostile")
    peer = Peer(ns, Stdout(tap), tap)
    if ns.churn is not None:
        threading.Thread(target=peer.announce_forever, daemon=True).start()
    stdin = sys.stdin.buffer
    while raw := stdin.readline():
        peer.handle_line(raw)
    os._exit(0)  # skip joining the churn thread


if __name__ == "__main__":
    main()
