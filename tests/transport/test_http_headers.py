"""HeaderPlan: the headers each message gets over HTTP, and what answers teach it. Pure."""

from __future__ import annotations

import logging

import orjson
import pytest

from trunkline import _codec
from trunkline.protocol.headers import HeaderValueError
from trunkline.protocol.header_plan import ACCEPT, HeaderPlan, Outgoing

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN}


def out(method: str, params: dict | None = None, id_: int | None = 1) -> Outgoing:
    message = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    line = orjson.dumps(message)
    kind = _codec.KIND_REQUEST if id_ is not None else _codec.KIND_NOTIFICATION
    return Outgoing(line, kind, id_, method, params)


def tools_answer(*tools: dict) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 2, "result": {
        "resultType": "complete", "tools": list(tools), "ttlMs": 0}}) + b"\n"


HEADERED = {"name": "h", "inputSchema": {"type": "object", "properties": {
    "region": {"type": "string", "x-mcp-header": "Region"},
    "opts": {"type": "object", "properties": {
        "n": {"type": "integer", "x-mcp-header": "N"}}}}}}
INVALID = {"name": "bad", "inputSchema": {"type": "object", "properties": {
    "x": {"type": "number", "x-mcp-header": "X"}}}}


def test_modern_request_headers_come_from_the_message_itself():
    plan = HeaderPlan({"Authorization": "Bearer t"})
    headers = plan.request(out("resources/read", {"uri": "file:///a b", "_meta": META}))
    assert headers == {"Authorization": "Bearer t", "Accept": ACCEPT,
                       "Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
                       "Mcp-Method": "resources/read", "Mcp-Name": "file:///a b"}
    # A name that is not plain ASCII goes base64, like any header value.
    named = plan.request(out("prompts/get", {"name": "résumé", "_meta": META}))
    assert named["Mcp-Name"].startswith("=?base64?")


def test_param_headers_follow_the_learned_annotations():
    plan = HeaderPlan({})
    call = out("tools/call", {"name": "h", "arguments": {"region": "eu", "opts": {"n": 5}},
                              "_meta": META})
    assert "Mcp-Param-Region" not in plan.request(call)  # nothing learned yet
    assert plan.learn("tools/list", tools_answer(HEADERED)) == tools_answer(HEADERED)
    headers = plan.request(call)
    assert (headers["Mcp-Param-Region"], headers["Mcp-Param-N"]) == ("eu", "5")
    absent = plan.request(out("tools/call", {"name": "h", "arguments": {"region": None},
                                             "_meta": META}))
    assert not any(k.startswith("Mcp-Param-") for k in absent)
    with pytest.raises(HeaderValueError):
        plan.request(out("tools/call", {"name": "h", "arguments": {"region": {"no": 1}},
                                        "_meta": META}))
    # Re-listed without annotations: the old table entry must not linger.
    plan.learn("tools/list", tools_answer({"name": "h", "inputSchema": {"type": "object"}}))
    assert not any(k.startswith("Mcp-Param-") for k in plan.request(call))


def test_invalid_annotations_drop_the_tool_from_the_answer(caplog):
    plan = HeaderPlan({}, server="srv")
    with caplog.at_level(logging.WARNING, logger="trunkline.transports.http"):
        line = plan.learn("tools/list", tools_answer(INVALID, HEADERED))
    kept = orjson.loads(line)["result"]
    assert [t["name"] for t in kept["tools"]] == ["h"] and kept["ttlMs"] == 0
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert any("'srv'" in r.getMessage() and "'bad'" in r.getMessage() for r in caplog.records)


def test_legacy_session_headers_after_initialize():
    plan = HeaderPlan({"X-Team": "a"})
    assert not plan.legacy
    init = out("initialize", {"protocolVersion": "2025-11-25"})
    assert "MCP-Protocol-Version" not in plan.request(init)
    plan.learn("initialize", orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {
            "name": "s", "version": "1"}}}))
    plan.session_id = "abc"
    assert plan.legacy
    headers = plan.request(out("tools/list", {}))
    assert (headers["MCP-Protocol-Version"], headers["Mcp-Session-Id"]) == ("2025-11-25", "abc")
    assert "Mcp-Method" not in headers
    stream = plan.stream("ev-7")
    assert stream["Accept"] == "text/event-stream" and "Content-Type" not in stream
    assert (stream["Last-Event-ID"], stream["Mcp-Session-Id"], stream["X-Team"]) == (
        "ev-7", "abc", "a")
    assert "Last-Event-ID" not in plan.stream(None)
