"""The bundled demo servers (``python -m trunkline.demo.server``), spoken to over real
pipes with real JSON-RPC lines. Every server result is validated against the official
schema of its era; requests the tests send on purpose as valid are validated too."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

import mcp_schema
from conftest import run
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline.demo import DemoServer, demo_servers
from trunkline.errors import EraRefused
from trunkline.params import stdio
from trunkline.protocol import Era, NegotiationConfig
from trunkline.worker.peer import Peer

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/serverInfo"
META = {
    PV: MODERN,
    CAPS: {},
    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
}
LEGACY_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
TIMEOUT = 10.0


# --- schema ------------------------------------------------------------------------


def conforms(revision: str, definition: str, value: Any) -> Any:
    return mcp_schema.conforms(value, revision, definition)


# --- a server under test -----------------------------------------------------------


class Server:
    """One demo server subprocess. Reads stdout on a thread so every wait is bounded."""

    def __init__(self, profile: str, *flags: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trunkline.demo.server", "--profile", profile, *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stderr = bytearray()
        self.next_id = 0
        self._threads = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump_stdout(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.put(line)

    def _pump_stderr(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr += chunk

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        # One compact JSON-RPC message per line, terminated by \n alone.
        assert line.endswith(b"\n") and not line.endswith(b"\r\n"), line
        message = json.loads(line)
        assert line[:-1] == json.dumps(message, separators=(",", ":")).encode(), "not compact"
        assert message["jsonrpc"] == "2.0" and "method" not in message, message
        assert ("result" in message) != ("error" in message), message
        return message

    def request(self, method: str, params: dict[str, Any] | None = None, *,
                revision: str | None = None) -> dict[str, Any]:
        """Send one request and return its response. With ``revision`` the request is
        first validated against that schema (i.e. it is a well-formed request)."""
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        if revision is not None:
            validate_message(message, revision)
        self.send(message)
        response = self.recv()
        assert response["id"] == self.next_id, response
        return response

    def call(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        response = self.request(method, params, **kw)
        assert "result" in response, response
        return response["result"]

    def error(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        response = self.request(method, params, **kw)
        assert "error" in response, response
        conforms(MODERN, "JSONRPCErrorResponse", response)
        return response["error"]

    def silent(self, wait: float = 0.3) -> bool:
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            return True
        pytest.fail(f"unexpected output: {line!r}")

    def close(self, timeout: float = 5.0) -> int:
        """Close stdin (the stdio shutdown signal) and wait for the exit code."""
        self.proc.stdin.close()
        return self.proc.wait(timeout)

    def reap(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)
        for t in self._threads:
            t.join(TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            pipe.close()


@pytest.fixture
def spawn() -> Iterator[Any]:
    servers: list[Server] = []

    def start(profile: str, *flags: str) -> Server:
        server = Server(profile, *flags)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.reap()
    for server in servers:
        # Quiet by default: nothing on stderr without -v, whatever the test sent.
        assert bytes(server.stderr) == b"", bytes(server.stderr)


def modern_params(**params: Any) -> dict[str, Any]:
    return {**params, "_meta": dict(META)}


def init_params(version: str = LEGACY) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "tests", "version": "0"}}


def legacy_ready(spawn: Any) -> Server:
    server = spawn("archive")
    server.call("initialize", init_params(), revision=LEGACY)
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return server


def tools_call(server: Server, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A valid tools/call in the server's era; the result is schema-checked."""
    if server_modern(server):
        result = server.call(
            "tools/call", modern_params(name=name, arguments=arguments), revision=MODERN
        )
        return conforms(MODERN, "CallToolResult", result)
    result = server.call("tools/call", {"name": name, "arguments": arguments}, revision=LEGACY)
    return conforms(LEGACY, "CallToolResult", result)


def server_modern(server: Server) -> bool:
    return "archive" not in server.proc.args


def tool_list(server: Server) -> list[dict[str, Any]]:
    if server_modern(server):
        return conforms(
            MODERN, "ListToolsResult", server.call("tools/list", modern_params(), revision=MODERN)
        )["tools"]
    return conforms(LEGACY, "ListToolsResult", server.call("tools/list", {}, revision=LEGACY))[
        "tools"
    ]


MODERN_PROFILES = ["web", "docs"]


# --- modern: discover, stamping, versions -------------------------------------------


@pytest.mark.parametrize("profile", MODERN_PROFILES)
def test_modern_discover_result(spawn, profile):
    server = spawn(profile)
    result = conforms(
        MODERN, "DiscoverResult", server.call("server/discover", modern_params(), revision=MODERN)
    )
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [MODERN]
    skills = {"resources": {}, "extensions": {"io.modelcontextprotocol/skills": {}}}
    assert result["capabilities"] == {"tools": {"listChanged": False},
                                      **(skills if profile == "docs" else {})}
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    assert result["cacheScope"] == "public"
    assert result["_meta"][INFO] == {"name": profile, "version": "1.0.0"}
    assert server.close() == 0


@pytest.mark.parametrize("profile", MODERN_PROFILES)
@pytest.mark.parametrize("method", ["server/discover", "tools/list", "tools/call"])
@pytest.mark.parametrize(
    "meta",
    [None, {}, {CAPS: {}}, {PV: MODERN}, {PV: 20260728, CAPS: {}}, {PV: MODERN, CAPS: []}],
    ids=[
        "no-params",
        "empty-meta",
        "no-version",
        "no-caps",
        "version-not-string",
        "caps-not-object",
    ],
)
def test_modern_requires_the_meta_stamp(spawn, profile, method, meta):
    server = spawn(profile)
    params = None if meta is None else {"_meta": meta}
    if method == "tools/call" and params is not None:
        params["name"] = "search"
        params["arguments"] = {"query": "x"}
    assert server.error(method, params)["code"] == -32602
    # The server keeps serving after a malformed request.
    conforms(
        MODERN, "DiscoverResult", server.call("server/discover", modern_params(), revision=MODERN)
    )


@pytest.mark.parametrize("profile", MODERN_PROFILES)
@pytest.mark.parametrize("version", ["2025-11-25", "2027-01-01", ""])
def test_modern_wrong_version_is_32022(spawn, profile, version):
    server = spawn(profile)
    response = server.request("tools/list", {"_meta": {PV: version, CAPS: {}}})
    conforms(MODERN, "UnsupportedProtocolVersionError", response)
    assert response["error"]["data"] == {"supported": [MODERN], "requested": version}


@pytest.mark.parametrize("profile", MODERN_PROFILES)
def test_modern_initialize_is_32022(spawn, profile):
    server = spawn(profile)
    response = server.request("initialize", init_params("2025-06-18"), revision=LEGACY)
    conforms(MODERN, "UnsupportedProtocolVersionError", response)
    assert response["error"]["data"] == {"supported": [MODERN], "requested": "2025-06-18"}
    # Even without a usable protocolVersion the error keeps its schema shape.
    response = server.request("initialize", {})
    conforms(MODERN, "UnsupportedProtocolVersionError", response)


@pytest.mark.parametrize("profile", MODERN_PROFILES)
def test_modern_results_carry_result_type_and_server_info(spawn, profile):
    server = spawn(profile, "--name", "renamed")
    tools = conforms(
        MODERN, "ListToolsResult", server.call("tools/list", modern_params(), revision=MODERN)
    )
    assert (
        tools["resultType"] == "complete"
        and tools["cacheScope"] == "public"
        and tools["ttlMs"] >= 0
    )
    call = tools_call(server, "search", {"query": "caching"})
    ping = conforms(MODERN, "EmptyResult", server.call("ping"))
    for result in (tools, call, ping):
        assert result["resultType"] == "complete"
        assert result["_meta"][INFO] == {"name": "renamed", "version": "1.0.0"}


# --- legacy: the archive --------------------------------------------------------------


def test_archive_answers_discover_with_method_not_found(spawn):
    server = spawn("archive")
    error = server.error("server/discover", modern_params(), revision=MODERN)
    assert error["code"] == -32601
    # Still fresh: the handshake works afterwards (what a dual-era client does next).
    conforms(LEGACY, "InitializeResult", server.call("initialize", init_params(), revision=LEGACY))


@pytest.mark.parametrize("requested,expected", [(v, v) for v in LEGACY_VERSIONS]
                         + [("2026-07-28", "2025-11-25"), ("1999-01-01", "2025-11-25")])
def test_archive_initialize_echoes_known_versions(spawn, requested, expected):
    server = spawn("archive")
    result = conforms(
        LEGACY,
        "InitializeResult",
        server.call("initialize", init_params(requested), revision=LEGACY),
    )
    assert result["protocolVersion"] == expected
    assert result["capabilities"] == {
        "tools": {}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}}
    assert result["serverInfo"] == {"name": "archive", "version": "1.0.0"}
    assert "resultType" not in result


def test_archive_refuses_work_until_initialized(spawn):
    server = spawn("archive")
    stamped = modern_params(name="lookup", arguments={"id": "rfc-2119"})
    assert server.error("tools/call", stamped, revision=MODERN)["code"] == -32600
    assert server.error("tools/list", {})["code"] == -32600
    assert server.call("ping") == {}
    server.call("initialize", init_params(), revision=LEGACY)
    # InitializeResult sent, but no notifications/initialized yet.
    assert server.error("tools/list", {})["code"] == -32600
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert {t["name"] for t in tool_list(server)} == {"lookup", "search", "digest"}
    # A second handshake on the same process is refused.
    assert server.error("initialize", init_params(), revision=LEGACY)["code"] == -32600


def test_archive_runs_digest_as_a_task_when_asked(spawn):
    """MCP 2025-11-25 core tasks: ``digest`` (``taskSupport: optional``) answers a call
    carrying ``task`` with the task, which moves through its stages to its result
    (``tasks/result`` waits for it); without ``task`` it answers at once."""
    server = legacy_ready(spawn)
    [digest] = [t for t in tool_list(server) if t["name"] == "digest"]
    assert digest["execution"] == {"taskSupport": "optional"}
    plain = tools_call(server, "digest", {"year": 1997})
    assert plain["content"][0]["text"].startswith("Digest of 1 archived records")

    created = conforms(LEGACY, "CreateTaskResult", server.call(
        "tools/call", {"name": "digest", "arguments": {}, "task": {}}, revision=LEGACY))
    task = created["task"]
    assert task["status"] == "working" and task["statusMessage"] == "Reading the records..."
    assert (task["ttl"], task["pollInterval"]) == (60_000, 200)
    looked = conforms(LEGACY, "GetTaskResult", server.call(
        "tasks/get", {"taskId": task["taskId"]}))
    assert looked["taskId"] == task["taskId"] and looked["createdAt"] == task["createdAt"]
    # tasks/result waits for the end; the answer names its task.
    result = conforms(LEGACY, "CallToolResult", server.call(
        "tasks/result", {"taskId": task["taskId"]}))
    assert result["content"][0]["text"].startswith("Digest of 6 archived records")
    assert result["_meta"] == {"io.modelcontextprotocol/related-task": {
        "taskId": task["taskId"]}}
    ended = server.call("tasks/get", {"taskId": task["taskId"]})
    assert ended["status"] == "completed"
    assert server.error("tasks/cancel", {"taskId": task["taskId"]})["code"] == -32602

    other = server.call("tools/call", {"name": "digest", "arguments": {}, "task": {}})["task"]
    cancelled = conforms(LEGACY, "CancelTaskResult", server.call(
        "tasks/cancel", {"taskId": other["taskId"]}))
    assert cancelled["status"] == "cancelled"
    assert server.error("tasks/result", {"taskId": other["taskId"]})["code"] == -32600
    assert server.error("tasks/get", {"taskId": "no-such-task"})["code"] == -32602
    # A tool that runs no task answers as ever, task or not.
    looked_up = server.call("tools/call", {"name": "lookup", "arguments": {"id": "rfc-2119"},
                                           "task": {}})
    assert "task" not in looked_up and looked_up["structuredContent"]["id"] == "rfc-2119"


def test_archive_bad_initialize_params(spawn):
    server = spawn("archive")
    for params in ({}, {"protocolVersion": LEGACY}, {**init_params(), "clientInfo": {"name": "x"}}):
        assert server.error("initialize", params)["code"] == -32602
    # A failed initialize leaves the server uninitialized, so a good one still works.
    conforms(LEGACY, "InitializeResult", server.call("initialize", init_params(), revision=LEGACY))


def test_archive_results_have_the_legacy_shape(spawn):
    server = legacy_ready(spawn)
    result = server.call("tools/list", {}, revision=LEGACY)
    assert set(result) == {"tools"}  # no resultType, ttlMs, cacheScope or _meta
    call = tools_call(server, "lookup", {"id": "mcp-2025-06-18"})
    assert set(call) == {"content", "structuredContent"}


def test_archive_lookup_conforms_to_its_output_schema(spawn):
    server = legacy_ready(spawn)
    lookup = next(t for t in tool_list(server) if t["name"] == "lookup")
    result = tools_call(server, "lookup", {"id": "rfc-2119"})
    jsonschema.Draft202012Validator(lookup["outputSchema"]).validate(result["structuredContent"])
    assert result["structuredContent"]["year"] == 1997
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    missing = tools_call(server, "lookup", {"id": "nope"})
    assert missing["isError"] is True and "rfc-2119" in missing["content"][0]["text"]


def test_archive_search(spawn):
    server = legacy_ready(spawn)
    result = tools_call(server, "search", {"query": "structured output elicitation"})
    assert result["content"][0]["text"].splitlines()[0].startswith("mcp-2025-06-18:")


# --- tools ------------------------------------------------------------------------------


def test_all_three_profiles_expose_search(spawn):
    """The demo's collision showcase: one tool name, three servers, three meanings."""
    catalogs = {p: tool_list(spawn(p)) for p in MODERN_PROFILES}
    catalogs["archive"] = tool_list(legacy_ready(spawn))
    names = {p: [t["name"] for t in tools] for p, tools in catalogs.items()}
    assert names == {"web": ["search", "fetch"], "docs": ["search", "summarize"],
                     "archive": ["lookup", "search", "digest"]}
    descriptions = {next(t["description"] for t in tools if t["name"] == "search")
                    for tools in catalogs.values()}
    assert len(descriptions) == 3
    for tools in catalogs.values():
        for tool in tools:
            jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
            if "outputSchema" in tool:
                jsonschema.Draft202012Validator.check_schema(tool["outputSchema"])


@pytest.mark.parametrize(
    "query,limit", [("model context protocol", None), ("caching", 1), ("x", 10), ("élan ✓", 4)]
)
def test_web_search_structured_content_conforms(spawn, query, limit):
    server = spawn("web")
    search = next(t for t in tool_list(server) if t["name"] == "search")
    arguments = {"query": query} if limit is None else {"query": query, "limit": limit}
    result = tools_call(server, "search", arguments)
    assert not result.get("isError")
    structured = result["structuredContent"]
    jsonschema.Draft202012Validator(search["outputSchema"]).validate(structured)
    assert len(structured["results"]) == (3 if limit is None else limit)
    assert all(r["url"].startswith("https://") for r in structured["results"])
    assert json.loads(result["content"][0]["text"]) == structured
    # Deterministic: the same call gives the same answer.
    assert tools_call(server, "search", arguments)["structuredContent"] == structured


def test_web_fetch(spawn):
    server = spawn("web")
    result = tools_call(server, "fetch", {"url": "https://example.com/a"})
    assert "https://example.com/a" in result["content"][0]["text"] and not result.get("isError")
    bad = tools_call(server, "fetch", {"url": "file:///etc/passwd"})
    assert bad["isError"] is True


def test_docs_search_and_summarize(spawn):
    server = spawn("docs")
    hits = tools_call(server, "search", {"query": "ttlMs cacheScope caching", "limit": 2})
    assert "structuredContent" not in hits and len(hits["content"]) <= 2
    assert hits["content"][0]["text"].startswith("Caching with ttlMs and cacheScope:")
    none = tools_call(server, "search", {"query": "zzzz"})
    assert not none.get("isError") and "No documentation" in none["content"][0]["text"]
    text = "First one here.  Second one? Third!"
    assert (
        tools_call(server, "summarize", {"text": text})["content"][0]["text"] == "First one here."
    )
    assert (
        tools_call(server, "summarize", {"text": "no stop\nat all"})["content"][0]["text"]
        == "no stop at all"
    )
    assert tools_call(server, "summarize", {"text": "   "})["isError"] is True


@pytest.mark.parametrize("arguments", [{}, {"query": 3}, {"query": ""}, {"query": "x", "limit": 0},
                                       {"query": "x", "limit": 11}, {"query": "x", "limit": True},
                                       {"query": "x", "extra": 1}])
def test_bad_arguments_are_tool_execution_errors(spawn, arguments):
    server = spawn("web")
    result = tools_call(server, "search", arguments)
    assert result["isError"] is True and result["content"][0]["text"]


@pytest.mark.parametrize(
    "params", [{"name": "nope"}, {}, {"name": 3}, {"name": "search", "arguments": []}]
)
def test_protocol_errors_on_tools_call(spawn, params):
    server = spawn("docs")
    assert server.error("tools/call", {**params, "_meta": dict(META)})["code"] == -32602


def test_unknown_methods_and_cursor(spawn):
    for profile in ("web", "docs", "archive"):
        server = spawn(profile)
        # the docs profile serves resources (its skill's files): resources/list is known
        unknown = ("prompts/list", "tools/frobnicate",
                   *(() if profile == "docs" else ("resources/list", "skills/list")))
        for method in unknown:
            assert server.error(method, modern_params())["code"] == -32601
    server = spawn("web")
    assert server.error("tools/list", modern_params(cursor="abc"))["code"] == -32602


# --- stream behaviour -----------------------------------------------------------------


@pytest.mark.parametrize("profile", ["web", "docs", "archive"])
def test_eof_exits_promptly(spawn, profile):
    server = spawn(profile)
    assert server.proc.poll() is None
    started = time.monotonic()
    assert server.close() == 0
    assert time.monotonic() - started < 2.0
    assert server.lines.empty()


def test_eof_exits_even_with_a_slow_call_pending(spawn):
    server = spawn("web")
    server.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": modern_params(
                name="fetch", arguments={"url": "https://a.example", "delayMs": 30000}
            ),
        }
    )
    started = time.monotonic()
    assert server.close() == 0
    assert time.monotonic() - started < 2.0


def test_notifications_get_no_answer_and_junk_gets_errors(spawn):
    server = spawn("web")
    server.send(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}
    )
    server.send({"jsonrpc": "2.0", "method": "notifications/whatever"})
    server.send({"jsonrpc": "2.0", "id": 5, "result": {}})  # a response from the client: ignored
    server.send_raw(b"\n  \n")
    assert server.silent()
    server.send_raw(b"{not json\n")
    parse = server.recv()
    assert parse["error"]["code"] == -32700 and "id" not in parse
    conforms(MODERN, "JSONRPCErrorResponse", parse)
    server.send_raw(b"[1,2]\n")
    assert server.recv()["error"]["code"] == -32600
    server.send({"jsonrpc": "1.0", "id": 7, "method": "ping"})
    assert server.recv() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32600, "message": "Invalid request: bad jsonrpc or id"},
    }
    server.send_raw(b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":NaN}}\n')
    assert server.recv()["error"]["code"] == -32700
    # String ids are echoed as strings.
    server.send({"jsonrpc": "2.0", "id": "abc", "method": "ping"})
    assert server.recv()["id"] == "abc"
    assert server.close() == 0


def test_stdout_has_exactly_one_line_per_request(spawn):
    server = legacy_ready(spawn)
    for _ in range(20):
        tools_call(server, "search", {"query": "mcp"})
    assert server.silent()
    assert server.close() == 0
    assert server.lines.empty()


def test_cancelled_slow_call_is_never_answered(spawn):
    server = spawn("web")
    slow = {"url": "https://slow.example", "delayMs": 800}
    server.send({"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call",
                 "params": modern_params(name="fetch", arguments=slow)})
    server.send({"jsonrpc": "2.0", "id": "slow-2", "method": "tools/call",
                 "params": modern_params(name="fetch", arguments=slow)})
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": "slow-1", "reason": "test"}}
    validate_message(cancel, MODERN)
    server.send(cancel)
    # Other requests are answered while the slow ones wait.
    server.send({"jsonrpc": "2.0", "id": "fast", "method": "tools/call",
                 "params": modern_params(name="search", arguments={"query": "q"})})
    assert server.recv(timeout=0.7)["id"] == "fast"
    answer = server.recv(timeout=5)
    assert answer["id"] == "slow-2"
    conforms(MODERN, "CallToolResult", answer["result"])
    assert server.silent(wait=1.0)  # slow-1 was cancelled: nothing, ever


def test_pending_id_cannot_be_reused(spawn):
    server = spawn("web")
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": modern_params(
            name="fetch", arguments={"url": "https://a.example", "delayMs": 500}
        ),
    }
    server.send(request)
    server.send(request)
    assert server.recv()["error"]["code"] == -32600
    assert "result" in server.recv(timeout=5)


def test_crash_after(spawn):
    server = spawn("docs", "--crash-after", "2")
    tools_call(server, "summarize", {"text": "One. Two."})
    server.error("tools/call", modern_params(name="nope"))  # an error answer counts too
    assert server.proc.wait(TIMEOUT) == 1


def test_usage_errors_go_to_stderr_only():
    proc = subprocess.run([sys.executable, "-m", "trunkline.demo.server", "--profile", "nope"],
                          capture_output=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == b"" and b"--profile" in proc.stderr


def test_verbose_logs_to_stderr_not_stdout(spawn):
    server = Server("web", "-v")
    try:
        server.send_raw(b"junk\n")
        assert server.recv()["error"]["code"] == -32700
        assert server.close() == 0
        server._threads[1].join(TIMEOUT)
        assert b"unparseable" in server.stderr and b"stdin closed" in server.stderr
    finally:
        server.reap()


def test_sigterm_stops_the_server(spawn):
    server = spawn("archive")
    server.call("ping")
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(TIMEOUT) == -signal.SIGTERM


# --- the DemoServer API and trunkline itself -------------------------------------------


def test_demo_servers_api():
    servers = demo_servers()
    assert [s.name for s in servers] == ["web", "docs", "archive"]
    assert [s.allow_legacy for s in servers] == [False, False, True]
    for s in servers:
        assert isinstance(s, DemoServer)
        assert s.argv == (sys.executable, "-m", "trunkline.demo.server", "--profile", s.name)
        assert s.description and "\n" not in s.description
    with pytest.raises(AttributeError):
        servers[0].name = "x"  # frozen


def test_module_run_is_quick_and_warning_free():
    """``python -m`` must not make runpy warn (stderr) and must start fast."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "trunkline.demo.server", "--profile", "web"],
                          input=b"", capture_output=True, timeout=TIMEOUT)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert elapsed < 3.0, elapsed  # generous: loaded CI machines


FAST = NegotiationConfig(discover_timeout_s=5.0, legacy_probe_timeout_s=5.0)


@pytest.mark.parametrize("server", demo_servers(), ids=lambda s: s.name)
def test_trunkline_peer_talks_to_each_demo_server(server: DemoServer):
    """End to end through trunkline's own era negotiation, as ``trunkline demo`` will."""
    async def main():
        async with Peer(
            server.name,
            stdio(*server.argv),
            negotiation=replace(FAST, allow_legacy=server.allow_legacy),
        ) as peer:
            assert peer.era is (Era.LEGACY if server.allow_legacy else Era.MODERN)
            tools = await peer.call("tools/list", {}, timeout=5)
            assert "search" in {t["name"] for t in tools["tools"]}
            result = await peer.call(
                "tools/call", {"name": "search", "arguments": {"query": "mcp"}}, timeout=5
            )
            assert not result.get("isError") and result["content"]
    run(main(), timeout=30)


def test_trunkline_refuses_the_archive_unless_allowlisted():
    archive = demo_servers()[2]

    async def main():
        peer = Peer("archive", stdio(*archive.argv), negotiation=replace(FAST, allow_legacy=False))
        with pytest.raises(EraRefused):
            await peer.start()
        await peer.aclose()
    run(main(), timeout=30)


def test_the_docs_profile_serves_a_skill_whose_entry_describes_its_files(spawn):
    import hashlib

    server = spawn("docs")
    # (the schema has no skills/ requests to check these against)
    [entry] = server.call("skills/list", modern_params())["skills"]
    assert entry["uri"] == "skill://mcp-eras/SKILL.md"
    assert entry["frontmatter"]["name"] == "mcp-eras"
    for listed in entry["resources"]:
        read = server.call("resources/read", modern_params(uri=listed["uri"]), revision=MODERN)
        data = read["contents"][0]["text"].encode()
        assert (len(data), "sha256:" + hashlib.sha256(data).hexdigest()) == (
            listed["size"], listed["digest"])
    assert server.call("skills/get", modern_params(uri=entry["uri"]))["skill"] == entry
    assert server.error("skills/get", modern_params(uri="skill://nope/SKILL.md"))["code"] \
        == -32602
    assert server.error("resources/read", modern_params(uri="skill://nope/x"))["code"] \
        == -32602
    assert server.close() == 0
