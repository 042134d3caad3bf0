"""HeaderPlan: the headers each message gets over HTTP, and what answers teach it. Pure."""

from __future__ import annotations

import logging

import orjson
import pytest

from trunkline import _codec
from trunkline.protocol.header_plan import ACCEPT, HeaderPlan, Outgoing
from trunkline.protocol.headers import HeaderValueError

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN}


def out(method: str, params: dict | None = None, id_: int | None = 1) -> Outgoing:
    """The message as the transport classifies it (a request keeps only some members)."""
    message = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return Outgoing.classify(orjson.dumps(message) + b"\n")


def decoded_whole(line: bytes) -> Outgoing:
    """The message with its params decoded whole, the way the transport once did it."""
    message = orjson.loads(line)
    kind = _codec.KIND_REQUEST if "id" in message else _codec.KIND_NOTIFICATION
    params = message.get("params")
    return Outgoing(line, kind, message.get("id"), message["method"],
                    params if isinstance(params, dict) else None)


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


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
def test_a_tasks_request_is_named_by_its_task_id(method):
    """ext-tasks, "Streamable HTTP: Routing Headers": Mcp-Name is params.taskId, so an
    intermediary routes every request about one task to the instance holding it."""
    plan = HeaderPlan({})
    headers = plan.request(out(method, {"taskId": "t-1", "inputResponses": {},
                                        "_meta": META}))
    assert (headers["Mcp-Method"], headers["Mcp-Name"]) == (method, "t-1")
    assert "Mcp-Name" not in plan.request(out(method, {"taskId": 7, "_meta": META}))


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


def test_a_request_keeps_only_the_members_it_is_routed_by():
    arguments = {"text": "x" * 65536, "name": "not the tool", "region": "eu"}
    call = out("tools/call", {"arguments": arguments, "name": "h", "_meta": META, "task": {}})
    assert call.params == {"name": "h", "_meta": META}
    assert call.all_params() == {"arguments": arguments, "name": "h", "_meta": META, "task": {}}
    read = out("resources/read", {"uri": "file:///a", "_meta": META})
    assert read.params == {"uri": "file:///a", "_meta": META} == read.all_params()
    cancel = out("notifications/cancelled", {"requestId": 4, "reason": "r"}, id_=None)
    assert cancel.params == {"requestId": 4, "reason": "r"} == cancel.all_params()
    assert out("tools/list").params is None
    assert Outgoing.classify(b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}').params is None
    assert Outgoing.classify(b'{"jsonrpc":"2.0","id":1,"result":{}}').params is None


# Params a peer may write that decode the same in ways a byte search would miss (escaped
# keys, a repeated key whose last value counts, look-alikes nested in the arguments), and
# whether they call the annotated tool "h" with a region (None: a name that is no table key).
SPELLINGS = {
    "escaped name": (b'"n\\u0061me":"h","arguments":{"region":"eu","opts":{"n":5}}', True),
    "escaped meta": (b'"name":"h","\\u005fmeta":{"io.modelcontextprotocol/protocolVersion":"%s"},'
                     b'"arguments":{"region":"eu"}', True),
    "repeated name": (b'"name":"other","arguments":{"region":"eu"},"name":"h"', True),
    "name in arguments": (b'"arguments":{"name":"h","region":"eu"},"name":"other"', False),
    "spaced": (b' "arguments" : { "region" : "eu" } , "name" : "h" ', True),
    "name not a string": (b'"name":["h"],"arguments":{"region":"eu"}', None),
}


@pytest.mark.parametrize("members,calls_h", SPELLINGS.values(), ids=SPELLINGS.keys())
@pytest.mark.parametrize("learned", [False, True])
def test_headers_of_a_classified_request_are_those_of_its_whole_params(members, calls_h, learned):
    plan = HeaderPlan({})
    if learned:
        plan.learn("tools/list", tools_answer(HEADERED))
    if b"%s" in members:
        params = members % MODERN.encode()
    else:
        params = b'"_meta":{"io.modelcontextprotocol/protocolVersion":"%s"},%s' % (
            MODERN.encode(), members)
    line = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{%s}}\n' % params
    if calls_h is None:
        for message in (decoded_whole(line), Outgoing.classify(line)):
            with pytest.raises(TypeError):  # unhashable: the table lookup fails alike
                plan.request(message)
        return
    want = plan.request(decoded_whole(line))
    assert want["MCP-Protocol-Version"] == MODERN
    assert plan.request(Outgoing.classify(line)) == want
    assert ("Mcp-Param-Region" in want) == (learned and calls_h)


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
