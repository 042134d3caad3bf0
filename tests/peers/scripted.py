#!/usr/bin/env python3
"""A configurable, deliberately misbehaving MCP server on stdio (stdlib only).

Tests spawn it as ``sys.executable tests/peers/scripted.py [flags]``. It reads
one JSON-RPC message per line on stdin and writes one per line on stdout. Each
flag picks how it behaves for one method, so one program covers good, legacy,
broken and hostile peers.

ACTIONS (value of --discover / --initialize / --tools-list / --tools-call)
  result                 answer normally (see "Normal answers" below)
  error[:CODE]           JSON-RPC error with CODE (default -32603; e.g. error:-32601)
  error-32022[:CSV]      -32022 UnsupportedProtocolVersion, data.supported = CSV
                         (default: --supported), data.requested = the version asked
  silence                read the request, never answer it
  exit[:CODE]            exit immediately with CODE (default 3) on reading it
  garbage                write a non-JSON text line instead of the answer
  invalid-json           write a truncated JSON line (looks like a response, isn't)
  empty-line             write a bare "\\n" instead of the answer
  wrong-id               the normal answer, but with a different id
  late:SECONDS           the normal answer, after SECONDS (reading goes on meanwhile)
  server-request[:METHOD]  send a JSON-RPC *request* (default sampling/createMessage)
                         instead of answering
  malformed              the normal answer with both "result" and "error"
  bad-utf8               the normal answer with a byte that is not UTF-8 (0xff) in a string
  surrogate              the normal answer with a lone surrogate escape ("\\ud800") in a string
  deep[:LEVELS]          the normal answer with a member "deep" of LEVELS nested arrays
                         in its result (default 200)
  raw:TEXT               write TEXT as one line; "$ID" becomes the request id (JSON)
  Result variants (the normal answer, then one field broken):
  bad-version            protocolVersion / supportedVersions -> "1999-01-01"
  empty-server-name      serverInfo.name -> ""
  empty-server-version   serverInfo.version -> ""
  no-server-info         serverInfo removed (legacy field or modern _meta key)
  no-capabilities        "capabilities" removed
  capabilities-list      "capabilities" -> []
  no-result-type         "resultType" removed
  unknown-result-type    "resultType" -> "bogus"

METHOD FLAGS
  --era {modern,legacy,dual}  defaults for the two below (default modern):
                         modern: discover=result, initialize=error-32022
                         legacy: discover=error:-32601, initialize=result
                         dual:   both result
  --discover ACTION      server/discover
  --initialize ACTION    initialize
  --tools-list ACTION    tools/list (default result)
  --tools-call ACTION    tools/call (default result)
  --tool-action NAME=ACTION  a tools/call of tool NAME gets ACTION instead (repeatable):
                         one tool misbehaves while the others answer
  Any other request gets -32601; ping gets {}. Notifications get no answer.

NORMAL ANSWERS
  A request is "modern" when params._meta carries
  io.modelcontextprotocol/protocolVersion; its results get resultType
  "complete" and _meta serverInfo (tools/list also ttlMs/cacheScope). A modern
  request for a version not in --supported gets -32022, as a real server would.
  --supported CSV        DiscoverResult.supportedVersions (default 2026-07-28)
  --legacy-version V     InitializeResult.protocolVersion (default 2025-11-25)
  --name N / --server-version V   serverInfo (default scripted-peer / 1.0.0)
  --capabilities JSON    server capabilities (default {"tools":{"listChanged":true}})
  --ttl-ms N             ttlMs on cacheable modern results (default 0)
  --strict-meta          modern-style check: a request (other than initialize and
                         ping) without protocolVersion + clientCapabilities in
                         params._meta gets -32602
  --tools CSV            which built-in tools tools/list shows (default all):
                         echo    returns its arguments as JSON text content
                         search  returns one text block mentioning "query"
                         sleep   answers after arguments.seconds; never if absent
                                 (with a progressToken: progress 0 "sleeping" first, or
                                 with arguments.progress N: progress 1..N, each message
                                 arguments.pad bytes long, a flood for slow readers; with
                                 arguments.every S too, one each S seconds until the
                                 answer or the call's cancellation)
                         crash   exits (code 4) mid-call; with {"partial":true}
                                 first writes half a response line
                         big     returns arguments.bytes bytes of text
                         Unknown tools get -32602.
  --extra-tools N        also list N echo-like tools named tool-0001...

SERVER-INITIATED REQUESTS (legacy)
  --ping-first           send a "ping" request right after the InitializeResult
  --server-request METHOD  after notifications/initialized, send METHOD
                         (ping, roots/list, sampling/createMessage,
                         elicitation/create, or anything); repeatable.
  The client's answers are recorded by the tap (and logged with -v).
  --notify-after-call METHOD  after handling each tools/call, send notification METHOD
                         (e.g. notifications/tools/list_changed); repeatable.

PROCESS AND STREAM BEHAVIOUR
  --startup-delay S      sleep S seconds before reading stdin
  --startup-delay-once PATH  only the first start that finds no PATH sleeps (it creates
                         PATH): a cold start that is slow, then warm ones that are not
  --stdout-garbage-first print a non-JSON banner line on stdout at start
  --oversized-line BYTES before the first answer, write one line of BYTES bytes
                         (a valid notifications/message padded to size)
  --stderr-flood BYTES   write BYTES ("inf" = forever) to stderr from a
                         background thread: answers on stdout never wait for it
                         (the flood stops when the process exits)
  --stderr-flood-blocking  write the flood on the main thread *before* serving,
                         so a client that does not drain stderr deadlocks
  --exit-on-eof (default) / --ignore-eof   on stdin EOF exit 0, or keep running
  --ignore-sigterm       ignore SIGTERM (only SIGKILL stops it then)
  --pid-file PATH        write this process's pid to PATH at start
  -v / --verbose         diagnostics on stderr (off by default: stderr writes
                         could block when the client does not drain stderr)
  BYTES values accept k/M/G suffixes (powers of 1024).

TAP
  If $TRUNKLINE_TAP names a file, every line received on stdin ("in") and every
  line written to stdout ("out") is appended to it as JSONL: see taplog.py.

notifications/cancelled cancels a pending sleep/late answer for that id, unless
--ignore-cancel (then the late answer still comes: a client must drop it).

A modern subscriptions/listen request is acknowledged at once with the list changes it
asked for, or, with --hold-listen-acks, only when the tool `ack-listens` is called (then
granting its resourceSubscriptions too): a stream whose acknowledgement is in flight.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import taplog  # sibling module: sys.path[0] is this directory when run as a script

Json = dict[str, Any]

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"

CRASH_EXIT_CODE = 4
DEFAULT_EXIT_CODE = 3

ERROR_MESSAGES = {
    -32700: "Parse error",
    -32600: "Invalid Request",
    -32601: "Method not found",
    -32602: "Invalid params",
    -32603: "Internal error",
    -32022: "Unsupported protocol version",
}

SERVER_REQUEST_PARAMS: dict[str, Json | None] = {
    "ping": None,
    "roots/list": {},
    "sampling/createMessage": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "scripted peer asks"}}],
        "maxTokens": 16,
    },
    "elicitation/create": {
        "mode": "form",
        "message": "scripted peer asks",
        "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}}},
    },
}

BUILTIN_TOOLS: list[Json] = [
    {
        "name": "echo",
        "description": "Returns its arguments as JSON text.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "search",
        "description": "Pretends to search.",
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
    {
        "name": "sleep",
        "description": "Answers after `seconds`; never answers without it.",
        "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
    },
    {
        "name": "crash",
        "description": "Exits the server mid-call.",
        "inputSchema": {"type": "object", "properties": {"partial": {"type": "boolean"}}},
    },
    {
        "name": "chatty",
        "description": "Reports progress 1..3 of 3 on the call's progressToken (plus one "
        "on a token nobody asked for), logs one message when the call set a logLevel, "
        "and `arguments.unasked` (a string) as a message whether it did or not (a server "
        "that logs unasked), then returns its arguments.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "ask",
        "description": "Multi round-trip: round 1 asks for sampling, round 2 for an elicitation "
        "(or `arguments.kinds`, a list of 'sampling'/'elicitation'/'url'/'roots' per round), "
        "each with a requestState holding escapes; then returns the responses it got.",
        "inputSchema": {"type": "object"},
    },
    {"name": "mutate", "description": "Announces a tools/list change on every listen "
     "stream (and a stray one for no stream).", "inputSchema": {"type": "object"}},
    {"name": "end-listen", "description": "Closes every listen stream with its result.",
     "inputSchema": {"type": "object"}},
    {"name": "end-listen-cancel", "description": "Closes every listen stream with "
     "notifications/cancelled.", "inputSchema": {"type": "object"}},
    {"name": "ack-listens", "description": "Acknowledges the listen streams held by "
     "--hold-listen-acks.", "inputSchema": {"type": "object"}},
    {
        "name": "big",
        "description": "Returns `bytes` bytes of text.",
        "inputSchema": {
            "type": "object",
            "properties": {"bytes": {"type": "integer", "minimum": 0}},
            "required": ["bytes"],
        },
    },
]


class RpcError(Exception):
    """Raised by a handler to answer with a JSON-RPC error."""

    def __init__(self, code: int, message: str | None = None, data: Any = None) -> None:
        super().__init__(message or ERROR_MESSAGES.get(code, "Scripted error"))
        self.code = code
        self.data = data

    def to_json(self) -> Json:
        err: Json = {"code": self.code, "message": str(self)}
        if self.data is not None:
            err["data"] = self.data
        return err


# ------------------------------------------------------------------ actions


def _break_version(r: Json) -> None:
    if "protocolVersion" in r:
        r["protocolVersion"] = "1999-01-01"
    if "supportedVersions" in r:
        r["supportedVersions"] = ["1999-01-01"]


def _server_info_of(r: Json) -> Json | None:
    info = r.get("serverInfo") or r.get("_meta", {}).get(SERVER_INFO_KEY)
    return info if isinstance(info, dict) else None


def _set_server_info_field(field: str, value: str) -> Callable[[Json], None]:
    def mutate(r: Json) -> None:
        info = _server_info_of(r)
        if info is not None:
            info[field] = value

    return mutate


def _drop_server_info(r: Json) -> None:
    r.pop("serverInfo", None)
    r.get("_meta", {}).pop(SERVER_INFO_KEY, None)


def _set(key: str, value: Any) -> Callable[[Json], None]:
    def mutate(r: Json) -> None:
        r[key] = value

    return mutate


def _drop(key: str) -> Callable[[Json], None]:
    def mutate(r: Json) -> None:
        r.pop(key, None)

    return mutate


# Result variants: the normal result, then one field broken in place.
VARIANTS: dict[str, Callable[[Json], None]] = {
    "bad-version": _break_version,
    "empty-server-name": _set_server_info_field("name", ""),
    "empty-server-version": _set_server_info_field("version", ""),
    "no-server-info": _drop_server_info,
    "no-capabilities": _drop("capabilities"),
    "capabilities-list": _set("capabilities", []),
    "no-result-type": _drop("resultType"),
    "unknown-result-type": _set("resultType", "bogus"),
}

# kind -> whether ":ARG" is "required", "optional" or "none".
ACTION_ARGS: dict[str, str] = {
    "result": "none",
    "error": "optional",
    "error-32022": "optional",
    "silence": "none",
    "exit": "optional",
    "garbage": "none",
    "invalid-json": "none",
    "empty-line": "none",
    "wrong-id": "none",
    "late": "required",
    "server-request": "optional",
    "malformed": "none",
    "bad-utf8": "none",
    "surrogate": "none",
    "deep": "optional",
    "raw": "required",
    **{name: "none" for name in VARIANTS},
}


@dataclass(frozen=True)
class Action:
    kind: str
    arg: str | None = None

    @classmethod
    def parse(cls, text: str) -> Action:
        kind, sep, arg = text.partition(":")
        rule = ACTION_ARGS.get(kind)
        if rule is None:
            raise argparse.ArgumentTypeError(f"unknown action {kind!r}")
        if rule == "required" and not arg:
            raise argparse.ArgumentTypeError(f"action {kind!r} needs ':ARG'")
        if rule == "none" and sep:
            raise argparse.ArgumentTypeError(f"action {kind!r} takes no argument")
        if kind in ("error", "exit", "deep") and arg:
            int(arg)  # ValueError -> argparse reports "invalid parse value"
        if kind == "late":
            float(arg or "")
        return cls(kind, arg if sep else None)


ERA_DEFAULTS = {
    "modern": ("result", "error-32022"),
    "legacy": ("error:-32601", "result"),
    "dual": ("result", "result"),
}


# ------------------------------------------------------------------ output


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def encode(msg: Json) -> bytes:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class Stdout:
    """Serialises whole-line writes to fd 1 (answers may come from timer threads)."""

    def __init__(self, tap: taplog.TapWriter | None, oversized: int) -> None:
        self._tap = tap
        self._oversized = oversized
        self._lock = threading.Lock()

    def send(self, msg: Json) -> None:
        self.write(encode(msg))

    def write(self, data: bytes, *, prelude: bool = False) -> None:
        with self._lock:
            if self._oversized and not prelude:
                big, self._oversized = oversized_line(self._oversized), 0
                self._emit(big)
            self._emit(data)

    def _emit(self, data: bytes) -> None:
        if self._tap:
            self._tap.record(taplog.OUT, data)
        try:
            _write_all(1, data)
        except OSError:  # the client closed our stdout: nobody is listening
            os._exit(0)


def oversized_line(size: int) -> bytes:
    """A valid JSON-RPC notification padded to exactly ``size`` bytes (with \\n).

    Valid JSON on purpose: the client should reject it for its size alone.
    """
    head = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"'
    tail = b'"}}\n'
    pad = size - len(head) - len(tail)
    if pad < 0:
        return b"x" * max(size - 1, 0) + b"\n"
    return head + b"x" * pad + tail


# ------------------------------------------------------------------ the peer


@dataclass
class Config:
    actions: dict[str, Action]
    tool_actions: dict[str, Action]
    supported: list[str]
    legacy_version: str
    server_info: Json
    capabilities: Json
    ttl_ms: int
    strict_meta: bool
    tools: list[Json]
    ping_first: bool
    server_requests: list[str]
    notify_after_call: list[str]
    ignore_cancel: bool
    hold_listen_acks: bool
    exit_on_eof: bool
    verbose: bool


def id_key(req_id: Any) -> str:
    return json.dumps(req_id)


def other_id(req_id: Any) -> Any:
    if isinstance(req_id, bool) or not isinstance(req_id, (int, str)):
        return 999_999
    return req_id + 1000 if isinstance(req_id, int) else f"{req_id}-wrong"


def request_meta(req: Json) -> Json:
    params = req.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else {}


def is_modern(req: Json) -> bool:
    return PROTOCOL_VERSION_KEY in request_meta(req)


def requested_version(req: Json) -> str:
    params = req.get("params")
    if req.get("method") == "initialize" and isinstance(params, dict):
        return str(params.get("protocolVersion", ""))
    return str(request_meta(req).get(PROTOCOL_VERSION_KEY, ""))


def tool_arguments(req: Json) -> Json:
    params = req.get("params") or {}
    args = params.get("arguments") if isinstance(params, dict) else None
    return args if isinstance(args, dict) else {}


class Peer:
    def __init__(self, cfg: Config, out: Stdout, tap: taplog.TapWriter | None) -> None:
        self.cfg = cfg
        self.out = out
        self.tap = tap
        self._timers: dict[str, threading.Timer] = {}
        self._timers_lock = threading.Lock()
        self._server_ids = itertools.count(1)
        self._awaiting: dict[str, str] = {}  # id_key(our request id) -> method
        self.listens: list[Any] = []  # ids of open subscriptions/listen requests
        self.held_acks: list[tuple[Any, Json]] = []  # --hold-listen-acks: not yet sent

    def log(self, text: str) -> None:
        if self.cfg.verbose:
            _write_all(2, f"scripted[{os.getpid()}]: {text}\n".encode())

    # ---- input

    def handle_line(self, raw: bytes) -> None:
        if self.tap:
            self.tap.record(taplog.IN, raw)
        if not raw.strip():
            return
        try:
            msg = json.loads(raw)
        except ValueError:
            self.out.send(self.error_envelope(None, RpcError(-32700)))
            return
        if not isinstance(msg, dict):  # e.g. a batch: not used by MCP
            self.out.send(self.error_envelope(None, RpcError(-32600)))
        elif "method" in msg and "id" in msg:
            self.on_request(msg)
        elif "method" in msg:
            self.on_notification(msg)
        elif "id" in msg:
            self.on_answer(msg)

    def on_request(self, req: Json) -> None:
        if not isinstance(req["method"], str):
            self.out.send(self.error_envelope(req["id"], RpcError(-32600)))
            return
        action = self.cfg.actions.get(req["method"], Action("result"))
        if req["method"] == "tools/call":
            params = req.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str):
                action = self.cfg.tool_actions.get(name, action)
        self.log(f"request {req['method']} id={req['id']!r} -> {action.kind}")
        self.perform(action, req)
        if req["method"] == "tools/call":
            for method in self.cfg.notify_after_call:
                self.out.send({"jsonrpc": "2.0", "method": method})

    def on_notification(self, msg: Json) -> None:
        method = msg["method"]
        self.log(f"notification {method}")
        if method == "notifications/initialized":
            for server_method in self.cfg.server_requests:
                self.send_server_request(server_method)
        elif method == "notifications/cancelled" and not self.cfg.ignore_cancel:
            params = msg.get("params") or {}
            if isinstance(params, dict) and "requestId" in params:
                self.cancel_timer(id_key(params["requestId"]))

    def on_answer(self, msg: Json) -> None:
        method = self._awaiting.pop(id_key(msg.get("id")), "<unknown request>")
        self.log(f"client answered {method}: {json.dumps(msg)}")

    # ---- actions

    def perform(self, action: Action, req: Json) -> None:
        kind, arg = action.kind, action.arg
        req_id = req["id"]
        if kind == "result":
            self.send_reply(req, self.answer(req))
        elif kind in VARIANTS:
            self.send_reply(req, self.answer(req, mutate=VARIANTS[kind]))
        elif kind == "error":
            self.out.send(self.error_envelope(req_id, RpcError(int(arg) if arg else -32603)))
        elif kind == "error-32022":
            supported = arg.split(",") if arg else self.cfg.supported
            self.out.send(self.error_envelope(req_id, self.unsupported_version(req, supported)))
        elif kind == "silence":
            pass
        elif kind == "exit":
            os._exit(int(arg) if arg else DEFAULT_EXIT_CODE)
        elif kind == "garbage":
            self.out.write(b"scripted peer says: this line is not JSON\n")
        elif kind == "invalid-json":
            self.out.write(
                b'{"jsonrpc":"2.0","id":' + id_key(req_id).encode() + b',"result":{"resultTy\n'
            )
        elif kind == "empty-line":
            self.out.write(b"\n")
        elif kind == "wrong-id":
            envelope = self.answer(req)
            if envelope is not None:
                envelope["id"] = other_id(req_id)
            self.send_reply(req, envelope)
        elif kind == "late":
            self.start_timer(
                req_id, float(arg or 0), lambda: self.send_reply(req, self.answer(req))
            )
        elif kind == "server-request":
            self.send_server_request(arg or "sampling/createMessage")
        elif kind == "malformed":
            envelope = self.answer(req)
            if envelope is not None:
                envelope.setdefault("result", {})
                envelope.setdefault("error", RpcError(-32603).to_json())
            self.send_reply(req, envelope)
        elif kind in ("bad-utf8", "surrogate"):
            broken = {"bad-utf8": "\udcff", "surrogate": "\ud800"}[kind]
            envelope = self.answer(req, mutate=_set("broken", broken))
            if envelope is not None:
                # surrogateescape writes "\udcff" as the byte 0xff; ensure_ascii writes
                # "\ud800" as its escape, which no decoder may accept alone.
                text = json.dumps(envelope, separators=(",", ":"),
                                  ensure_ascii=kind == "surrogate")
                self.out.write(text.encode("utf-8", "surrogateescape") + b"\n")
        elif kind == "deep":
            levels = int(arg) if arg else 200
            envelope = self.answer(req)
            if envelope is not None and isinstance(envelope.get("result"), dict):
                envelope["result"]["deep"] = "@DEEP@"
                line = encode(envelope)
                self.out.write(line.replace(b'"@DEEP@"', b"[" * levels + b"]" * levels))
            else:
                self.send_reply(req, envelope)
        elif kind == "raw":
            self.out.write((arg or "").replace("$ID", id_key(req_id)).encode() + b"\n")
        else:  # pragma: no cover - Action.parse rejects unknown kinds
            raise AssertionError(kind)

    def send_reply(self, req: Json, envelope: Json | None) -> None:
        if envelope is None:
            return
        self.out.send(envelope)
        if req["method"] == "initialize" and "result" in envelope and self.cfg.ping_first:
            self.send_server_request("ping")

    def send_server_request(self, method: str) -> None:
        req_id = f"srv-{next(self._server_ids)}"
        self._awaiting[id_key(req_id)] = method
        msg: Json = {"jsonrpc": "2.0", "id": req_id, "method": method}
        params = SERVER_REQUEST_PARAMS.get(method, {})
        if params is not None:
            msg["params"] = params
        self.out.send(msg)

    # ---- timers (late answers, the sleep tool), cancellable by id

    def start_timer(self, req_id: Any, seconds: float, fire: Callable[[], None]) -> None:
        key = id_key(req_id)

        def run() -> None:
            with self._timers_lock:
                if self._timers.pop(key, None) is None:
                    return  # cancelled meanwhile
            fire()

        timer = threading.Timer(seconds, run)
        timer.daemon = True
        with self._timers_lock:
            self._timers[key] = timer
        timer.start()

    def cancel_timer(self, key: str) -> None:
        with self._timers_lock:
            timer = self._timers.pop(key, None)
        if timer:
            timer.cancel()
            self.log(f"cancelled pending answer for id {key}")

    # ---- normal answers

    def answer(self, req: Json, mutate: Callable[[Json], None] | None = None) -> Json | None:
        """The normal response envelope, or None when this request gets none (yet)."""
        try:
            result = self.result_for(req)
        except RpcError as err:
            return self.error_envelope(req["id"], err)
        if result is None:
            return None
        if mutate:
            mutate(result)
        return {"jsonrpc": "2.0", "id": req["id"], "result": result}

    def result_for(self, req: Json) -> Json | None:
        method = req["method"]
        modern = is_modern(req)
        if method in ("initialize", "ping"):
            return self.initialize_result() if method == "initialize" else {}
        if self.cfg.strict_meta:
            meta = request_meta(req)
            if PROTOCOL_VERSION_KEY not in meta or CLIENT_CAPS_KEY not in meta:
                raise RpcError(-32602, "Missing required _meta keys")
        if modern and requested_version(req) not in self.cfg.supported:
            raise self.unsupported_version(req, self.cfg.supported)
        if method == "server/discover":
            result = self.discover_result()
        elif method == "tools/list":
            result = self.tools_list_result(modern)
        elif method in ("resources/read", "prompts/get") and modern:
            # Both answer through the same MRTR script as the "ask" tool: two rounds
            # (sampling, then elicitation), then the responses of the last round.
            answered = self.ask_tool(req, {})
            if answered is None:
                return None
            text = answered["content"][0]["text"]
            if method == "resources/read":
                uri = (req.get("params") or {}).get("uri")
                result = {"contents": [{"uri": uri, "mimeType": "application/json",
                                        "text": text}]}
            else:
                result = {"messages": [{"role": "user",
                                        "content": {"type": "text", "text": text}}]}
        elif method == "subscriptions/listen" and modern:
            self.open_listen(req)
            return None  # the listen request stays open until the stream ends
        elif method == "tools/call":
            call = self.tools_call_result(req)
            if call is None:
                return None
            result = call
        else:
            raise RpcError(-32601)
        return self.stamp(result) if modern else result

    def stamp(self, result: Json) -> Json:
        stamped: Json = {"resultType": "complete", **result}
        stamped.setdefault("_meta", {})[SERVER_INFO_KEY] = dict(self.cfg.server_info)
        return stamped

    def unsupported_version(self, req: Json, supported: list[str]) -> RpcError:
        return RpcError(-32022, data={"supported": supported, "requested": requested_version(req)})

    def discover_result(self) -> Json:
        return {
            "supportedVersions": list(self.cfg.supported),
            "capabilities": json.loads(json.dumps(self.cfg.capabilities)),
            "ttlMs": self.cfg.ttl_ms,
            "cacheScope": "public",
        }

    def initialize_result(self) -> Json:
        return {
            "protocolVersion": self.cfg.legacy_version,
            "capabilities": json.loads(json.dumps(self.cfg.capabilities)),
            "serverInfo": dict(self.cfg.server_info),
        }

    def tools_list_result(self, modern: bool) -> Json:
        result: Json = {"tools": self.cfg.tools}
        if modern:
            result.update(ttlMs=self.cfg.ttl_ms, cacheScope="public")
        return result

    def tools_call_result(self, req: Json) -> Json | None:
        params = req.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not any(tool["name"] == name for tool in self.cfg.tools):
            raise RpcError(-32602, f"Unknown tool: {name}")
        args = tool_arguments(req)
        if name == "search":
            return text_result(f"scripted search result for {args.get('query')!r}")
        if name == "sleep":
            self.sleep_tool(req, args)
            return None  # answered by a timer, or never
        if name == "crash":
            if args.get("partial"):
                self.out.write(b'{"jsonrpc":"2.0","id":' + id_key(req["id"]).encode(), prelude=True)
            os._exit(CRASH_EXIT_CODE)
        if name == "ask":
            return self.ask_tool(req, args)
        if name == "ack-listens":
            return text_result(f"acknowledged {self.release_acks()} stream(s)")
        if name in ("mutate", "end-listen", "end-listen-cancel"):
            self.listen_event(name)
            return text_result(f"{name}: {len(self.listens)} stream(s) open")
        if name == "chatty":
            self.chatter(req)
            return text_result(json.dumps(args, separators=(",", ":"), sort_keys=True))
        if name == "big":
            size = args.get("bytes")
            if not isinstance(size, int) or size < 0:
                raise RpcError(-32602, "big needs a non-negative integer 'bytes'")
            return text_result("x" * size)
        return text_result(json.dumps(args, separators=(",", ":"), sort_keys=True))  # echo & extras

    INPUT_REQUESTS: ClassVar[dict[str, Json]] = {
        "sampling": {"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}],
            "maxTokens": 8}},
        "elicitation": {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Your name?",
            "requestedSchema": {"type": "object",
                                "properties": {"name": {"type": "string"}}}}},
        "url": {"method": "elicitation/create", "params": {
            "mode": "url", "message": "Sign in", "url": "https://example.com/login",
            "elicitationId": "e-1"}},
        "roots": {"method": "roots/list"},
    }

    def ask_tool(self, req: Json, args: Json) -> Json | None:
        """MRTR: the round is carried in requestState; the responses come back in
        params.inputResponses. The input_required answer is written with ASCII escapes
        (``\\u00e9`` for the é in the state), which a client that decodes and re-encodes
        the state instead of echoing its bytes would change: the tap shows which."""
        params = req.get("params") or {}
        kinds = args.get("kinds") or ["sampling", "elicitation"]
        state = params.get("requestState")
        round_no = int(state.rsplit("/", 1)[-1]) if isinstance(state, str) else 0
        seen = params.get("inputResponses") or {}
        if round_no >= len(kinds):
            return text_result(json.dumps({"rounds": round_no, "last": seen}, sort_keys=True))
        kind = kinds[round_no]
        result = {"resultType": "input_required",
                  "inputRequests": {f"{kind}-{round_no}": self.INPUT_REQUESTS[kind]},
                  "requestState": f"st\u00e9/{round_no + 1}"}
        envelope = {"jsonrpc": "2.0", "id": req["id"], "result": result}
        self.out.write(json.dumps(envelope, separators=(",", ":")).encode() + b"\n")
        return None

    def open_listen(self, req: Json) -> None:
        """Acknowledge with what was asked for (tools/prompts/resources list changes), in
        the stream's first message, tagged with the listen request's id."""
        asked = (req.get("params") or {}).get("notifications") or {}
        granted = {k: True for k in ("toolsListChanged", "promptsListChanged",
                                     "resourcesListChanged") if asked.get(k) is True}
        self.listens.append(req["id"])
        if self.cfg.hold_listen_acks:
            uris = asked.get("resourceSubscriptions")
            if isinstance(uris, list):
                granted["resourceSubscriptions"] = uris
            self.held_acks.append((req["id"], granted))
            return
        self.out.send(_notification("notifications/subscriptions/acknowledged", {
            "notifications": granted, "_meta": {SUBSCRIPTION_KEY: req["id"]}}))

    def release_acks(self) -> int:
        """Tool `ack-listens`: acknowledge every listen request held so far."""
        held, self.held_acks = self.held_acks, []
        for sid, granted in held:
            self.out.send(_notification("notifications/subscriptions/acknowledged", {
                "notifications": granted, "_meta": {SUBSCRIPTION_KEY: sid}}))
        return len(held)

    def listen_event(self, name: str) -> None:
        """Tools `mutate` (announce a tools/list change on every stream, plus a stray one
        with an id that is no stream's) and `end-listen` (close every stream gracefully
        with the listen result, or by `notifications/cancelled` when `cancel` is set)."""
        for sid in list(self.listens):
            if name == "mutate":
                self.out.send(_notification("notifications/tools/list_changed",
                                            {"_meta": {SUBSCRIPTION_KEY: sid}}))
            elif name == "end-listen-cancel":
                self.out.send(_notification("notifications/cancelled",
                                            {"requestId": sid, "reason": "shutting down"}))
                self.listens.remove(sid)
            else:
                self.out.send({"jsonrpc": "2.0", "id": sid, "result": self.stamp(
                    {"_meta": {SUBSCRIPTION_KEY: sid}})})
                self.listens.remove(sid)
        if name == "mutate":
            self.out.send(_notification("notifications/tools/list_changed",
                                        {"_meta": {SUBSCRIPTION_KEY: "not-a-stream"}}))

    def chatter(self, req: Json) -> None:
        meta = request_meta(req)
        token = meta.get("progressToken")
        if token is not None:
            self.out.send(_notification("notifications/progress",
                                        {"progressToken": f"{token}-not-ours", "progress": 99}))
            for step in (1, 2, 3):
                self.out.send(_notification("notifications/progress", {
                    "progressToken": token, "progress": step, "total": 3,
                    "message": f"step {step}"}))
        level = meta.get("io.modelcontextprotocol/logLevel")
        if level is not None:
            self.out.send(_notification("notifications/message", {
                "level": "info", "logger": "chatty", "data": f"asked for level {level}"}))
        unasked = tool_arguments(req).get("unasked")
        if isinstance(unasked, str):
            self.out.send(_notification("notifications/message", {
                "level": "warning", "logger": "chatty", "data": unasked}))

    def sleep_tool(self, req: Json, args: Json) -> None:
        seconds = args.get("seconds")
        token = (req.get("params", {}).get("_meta") or {}).get("progressToken")
        flood = args.get("progress")
        every = args.get("every")
        if token is not None and isinstance(flood, int) and not isinstance(every, (int, float)):
            pad = "p" * int(args.get("pad") or 0)
            for step in range(1, flood + 1):
                self.out.send(_notification("notifications/progress", {
                    "progressToken": token, "progress": step, "total": flood,
                    "message": pad}))
        elif token is not None and not isinstance(flood, int):
            # "started": a streamed call has its stream open
            self.out.send(_notification("notifications/progress", {
                "progressToken": token, "progress": 0, "message": "sleeping"}))
        if isinstance(seconds, (int, float)):
            result = text_result(f"slept {seconds}s")
            envelope: Json = {"jsonrpc": "2.0", "id": req["id"]}
            envelope["result"] = self.stamp(result) if is_modern(req) else result
            self.start_timer(req["id"], float(seconds), lambda: self.out.send(envelope))
            if token is not None and isinstance(flood, int) and isinstance(every, (int, float)):
                threading.Thread(target=self.trickle, daemon=True, args=(
                    id_key(req["id"]), token, flood, int(args.get("pad") or 0),
                    float(every))).start()

    def trickle(self, key: str, token: Any, steps: int, pad: int, every: float) -> None:
        """Progress 1..steps, one each ``every`` seconds, while the call it belongs to
        waits for its answer (neither answered nor cancelled)."""
        for step in range(1, steps + 1):
            with self._timers_lock:
                if key not in self._timers:
                    return
            self.out.send(_notification("notifications/progress", {
                "progressToken": token, "progress": step, "total": steps,
                "message": "p" * pad}))
            time.sleep(every)

    @staticmethod
    def error_envelope(req_id: Any, err: RpcError) -> Json:
        return {"jsonrpc": "2.0", "id": req_id, "error": err.to_json()}


def _notification(method: str, params: Json) -> Json:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def text_result(text: str) -> Json:
    # isError is optional (absent means false); the SDKs send it explicitly, so do we.
    return {"content": [{"type": "text", "text": text}], "isError": False}


# ------------------------------------------------------------------ startup


def parse_flood(text: str) -> float:
    """A byte count, or 'inf' for a flood that never ends."""
    return math.inf if text.lower() == "inf" else parse_bytes(text)


def parse_bytes(text: str) -> int:
    """'4096', '64k', '16M', '1G' (powers of 1024)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    scale = units.get(text[-1:].lower(), 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad byte count {text!r}") from None


def parse_json_object(text: str) -> Json:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def parse_tool_action(text: str) -> tuple[str, Action]:
    name, sep, action = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME=ACTION")
    return name, Action.parse(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Scripted MCP stdio peer (see the module docstring for every flag).",
    )
    p.add_argument("--era", choices=sorted(ERA_DEFAULTS), default="modern")
    for method in ("discover", "initialize", "tools-list", "tools-call"):
        p.add_argument(f"--{method}", type=Action.parse, metavar="ACTION")
    p.add_argument("--tool-action", type=parse_tool_action, action="append", default=[],
                   metavar="NAME=ACTION")
    p.add_argument("--supported", default=MODERN_VERSION, metavar="CSV")
    p.add_argument("--legacy-version", default=LEGACY_VERSION)
    p.add_argument("--name", default="scripted-peer")
    p.add_argument("--server-version", default="1.0.0")
    p.add_argument(
        "--capabilities", type=parse_json_object, default={"tools": {"listChanged": True}}
    )
    p.add_argument("--ttl-ms", type=int, default=0)
    p.add_argument("--strict-meta", action="store_true")
    p.add_argument("--tools", metavar="CSV", help="built-in tools to list (default: all)")
    p.add_argument("--extra-tools", type=int, default=0, metavar="N")
    p.add_argument("--ping-first", action="store_true")
    p.add_argument("--server-request", action="append", default=[], metavar="METHOD")
    p.add_argument("--notify-after-call", action="append", default=[], metavar="METHOD")
    p.add_argument("--ignore-cancel", action="store_true")
    p.add_argument("--hold-listen-acks", action="store_true")
    p.add_argument("--startup-delay", type=float, default=0.0, metavar="SECONDS")
    p.add_argument("--startup-delay-once", default=None, metavar="PATH")
    p.add_argument("--stdout-garbage-first", action="store_true")
    p.add_argument("--oversized-line", type=parse_bytes, default=0, metavar="BYTES")
    p.add_argument("--stderr-flood", type=parse_flood, default=0, metavar="BYTES")
    p.add_argument("--stderr-flood-blocking", action="store_true")
    eof = p.add_mutually_exclusive_group()
    eof.add_argument("--exit-on-eof", dest="exit_on_eof", action="store_true", default=True)
    eof.add_argument("--ignore-eof", dest="exit_on_eof", action="store_false")
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--pid-file")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def select_tools(names_csv: str | None, extra: int) -> list[Json]:
    by_name = {tool["name"]: tool for tool in BUILTIN_TOOLS}
    names = names_csv.split(",") if names_csv is not None else list(by_name)
    unknown = [n for n in names if n and n not in by_name]
    if unknown:
        raise SystemExit(f"scripted.py: unknown --tools {unknown}; known: {sorted(by_name)}")
    tools = [by_name[n] for n in names if n]
    tools += [
        {
            "name": f"tool-{i:04d}",
            "description": "Echo-like filler tool.",
            "inputSchema": {"type": "object"},
        }
        for i in range(1, extra + 1)
    ]
    return tools


def config_from(ns: argparse.Namespace) -> Config:
    discover_default, initialize_default = ERA_DEFAULTS[ns.era]
    actions = {
        "server/discover": ns.discover or Action.parse(discover_default),
        "initialize": ns.initialize or Action.parse(initialize_default),
        "tools/list": ns.tools_list or Action("result"),
        "tools/call": ns.tools_call or Action("result"),
    }
    return Config(
        actions=actions,
        tool_actions=dict(ns.tool_action),
        supported=[v for v in ns.supported.split(",") if v],
        legacy_version=ns.legacy_version,
        server_info={"name": ns.name, "version": ns.server_version},
        capabilities=ns.capabilities,
        ttl_ms=ns.ttl_ms,
        strict_meta=ns.strict_meta,
        tools=select_tools(ns.tools, ns.extra_tools),
        ping_first=ns.ping_first,
        server_requests=ns.server_request,
        notify_after_call=ns.notify_after_call,
        ignore_cancel=ns.ignore_cancel,
        hold_listen_acks=ns.hold_listen_acks,
        exit_on_eof=ns.exit_on_eof,
        verbose=ns.verbose,
    )


def flood_stderr(total: float) -> None:
    """Write ``total`` bytes of 1 KiB lines to fd 2 (forever if inf).

    Raw os.write, not sys.stderr: a daemon thread blocked inside a buffered
    writer's lock would make interpreter shutdown abort.
    """
    line = b"scripted peer stderr flood " + b"." * 996 + b"\n"
    remaining = total
    try:
        while remaining > 0:
            chunk = line if remaining >= len(line) else line[: int(remaining)]
            _write_all(2, chunk)
            remaining -= len(chunk)
    except OSError:
        pass  # the client closed our stderr; the protocol goes on


def serve(peer: Peer, exit_on_eof: bool) -> None:
    stdin = sys.stdin.buffer
    while raw := stdin.readline():
        peer.handle_line(raw)
    peer.log("stdin EOF")
    if exit_on_eof:
        os._exit(0)  # skip joining daemon timer/flood threads
    while True:  # --ignore-eof: linger until killed
        time.sleep(3600)


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    cfg = config_from(ns)
    if ns.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if ns.pid_file:
        with open(ns.pid_file, "w") as fh:
            fh.write(f"{os.getpid()}\n")
    tap = taplog.writer_from_env("scripted")
    out = Stdout(tap, ns.oversized_line)
    if ns.stdout_garbage_first:
        out.write(b"scripted peer starting up... (this banner is not JSON)\n", prelude=True)
    if ns.stderr_flood and ns.stderr_flood_blocking:
        flood_stderr(ns.stderr_flood)
    elif ns.stderr_flood:
        threading.Thread(target=flood_stderr, args=(ns.stderr_flood,), daemon=True).start()
    if ns.startup_delay and not (ns.startup_delay_once and os.path.exists(ns.startup_delay_once)):
        if ns.startup_delay_once:
            open(ns.startup_delay_once, "w").close()
        time.sleep(ns.startup_delay)
    serve(Peer(cfg, out, tap), cfg.exit_on_eof)


if __name__ == "__main__":
    main()
