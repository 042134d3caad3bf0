"""The gateway's protocol half alone: what a downstream message is, and the answers that
need nothing behind the gateway."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_schema import LEGACY, MODERN, conforms
from trunkline.catalog import ToolEntry
from trunkline.errors import (
    RequestTimeout,
    ServerError,
    ServerUnavailable,
    ToolCandidate,
    UnknownTool,
)
from trunkline.gateway import protocol as p

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"


def test_a_request_with_a_modern_meta_is_modern_whatever_the_session():
    for session in (None, "2025-06-18"):
        r = p.read({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                    "params": {"_meta": {PV: MODERN, CAPS: {}}}}, session)
        assert isinstance(r, p.Request) and r.era is p.ClientEra.MODERN and r.version == MODERN


def test_a_modern_request_without_client_capabilities_is_invalid():
    for meta in ({PV: MODERN}, {PV: MODERN, CAPS: "all"}):
        r = p.read({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                    "params": {"_meta": meta}}, None)
        assert isinstance(r, p.Refused) and r.id == 2 and r.error["code"] == -32602


def test_the_version_header_must_agree_with_the_body():
    from trunkline.gateway.http_rules import check_version_header

    def body(meta):
        return {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": meta}}
    assert check_version_header(MODERN, body({PV: MODERN, CAPS: {}})) is None
    assert check_version_header(None, body({})) is None
    assert check_version_header("2025-11-25", body({})) is None, "a legacy session's rules"
    assert check_version_header(MODERN, body({}))["error"]["code"] == -32602
    other = check_version_header(MODERN, body({PV: "v999.0.0", CAPS: {}}))
    assert other["error"]["code"] == -32020 and other["id"] == 3
    assert other["error"]["data"]["header"] == "MCP-Protocol-Version"


def test_an_unserved_revision_gets_32022_with_what_is_served():
    r = p.read({"jsonrpc": "2.0", "id": "a", "method": "tools/list",
                "params": {"_meta": {PV: "2030-01-01"}}}, None)
    assert isinstance(r, p.Refused) and r.id == "a"
    assert r.error == {"code": -32022, "message": "Unsupported protocol version",
                       "data": {"supported": [MODERN], "requested": "2030-01-01"}}


def test_without_a_modern_meta_only_a_legacy_session_is_served():
    plain = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    refused = p.read(plain, None)
    assert isinstance(refused, p.Refused) and refused.error["code"] == -32600
    served = p.read(plain, "2025-06-18")
    assert isinstance(served, p.Request) and served.era is p.ClientEra.LEGACY
    assert served.version == "2025-06-18"
    for method in ("initialize", "ping", "server/discover"):
        assert isinstance(p.read({"jsonrpc": "2.0", "id": 3, "method": method}, None), p.Request)


@pytest.mark.parametrize("message,code", [
    ([1, 2], -32600),
    ({"jsonrpc": "1.0", "id": 1, "method": "x"}, -32600),
    ({"jsonrpc": "2.0", "id": 1}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]}, -32602),
    ({"jsonrpc": "2.0", "id": True, "method": "x"}, -32600),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "x"}, -32600),
])
def test_malformed_messages_are_refused_precisely(message, code):
    refused = p.read(message, None)
    assert isinstance(refused, p.Refused) and refused.error["code"] == code


def test_notifications_and_client_responses():
    note = p.read({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": 4}}, None)
    assert note == p.Notification("notifications/cancelled", {"requestId": 4})
    assert p.read({"jsonrpc": "2.0", "id": 9, "result": {}}, None) == p.Response(9, {}, None)
    failed = p.read({"jsonrpc": "2.0", "id": "x", "error": {"code": -1, "message": "no"}}, None)
    assert failed == p.Response("x", None, {"code": -1, "message": "no"})


def test_the_answers_conform_to_their_schemas():
    info = {"name": "trunkline", "version": "0.1.0"}
    conforms(p.discover_result(info, "Use the tools."), MODERN, "DiscoverResult")
    conforms(p.initialize_result("2025-11-25", info, None), LEGACY, "InitializeResult")
    assert p.initialize_result("2024-11-05", info, None)["protocolVersion"] == "2024-11-05"
    assert p.initialize_result("1999-01-01", info, None)["protocolVersion"] == LEGACY
    conforms(p.list_result("tools", [], p.ClientEra.MODERN), MODERN, "ListToolsResult")
    conforms(p.error_response(None, p.error(-32700, "Parse error")), MODERN,
             "JSONRPCErrorResponse")


def test_a_served_tool_is_the_upstream_definition_under_the_catalogs_name():
    raw = {"name": "search", "description": "d", "inputSchema": {"type": "object"},
           "_meta": {"x.example/tag": 1}}
    entry = ToolEntry("docs/search", "docs", "search", None, "d", raw["inputSchema"], raw=raw,
                      alias="docs_2fsearch_1234")
    assert p.served_tool(entry) == {**raw, "name": "docs_2fsearch_1234"}


@pytest.mark.parametrize("support", ["required", "optional", "forbidden", None])
def test_a_legacy_client_is_served_every_tool_as_an_optional_task(support):
    """The gateway runs any call of a legacy client as a task when asked (a result its
    server gives at once is held as an ended task), and answers any call whole when not:
    every tool is ``optional``, never ``required`` (which a client that runs no tasks
    refuses to call); the rest of ``execution`` goes on."""
    raw: dict[str, Any] = {"name": "research", "inputSchema": {"type": "object"}}
    if support is not None:
        raw["execution"] = {"taskSupport": support}
    entry = ToolEntry("ev/research", "ev", "research", None, None, raw["inputSchema"],
                      raw=raw)
    legacy = p.served_tool(entry, p.ClientEra.LEGACY)
    assert legacy == {"name": "ev/research", "inputSchema": {"type": "object"},
                      "execution": {"taskSupport": "optional"}}
    conforms(p.list_result("tools", [legacy], p.ClientEra.LEGACY), LEGACY, "ListToolsResult")
    more = {**raw, "execution": {**raw.get("execution", {}), "x.example/more": 1}}
    entry = ToolEntry("ev/research", "ev", "research", None, None, raw["inputSchema"],
                      raw=more)
    assert p.served_tool(entry, p.ClientEra.LEGACY)["execution"] == {
        "x.example/more": 1, "taskSupport": "optional"}
    assert p.served_tool(entry, p.ClientEra.MODERN)["execution"] == more["execution"]


def test_a_legacy_client_is_told_the_gateway_s_tasks():
    tasks = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    result = p.initialize_result("2025-11-25", {"name": "gw", "version": "1"}, None,
                                 tasks=tasks)
    assert result["capabilities"]["tasks"] == tasks
    conforms(result, LEGACY, "InitializeResult")


def test_a_call_result_keeps_the_servers_meta_but_not_the_hops():
    raw = {"content": [], "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "up"},
                                    "x.example/trace": "t"}}
    assert p.served_result(raw, p.ClientEra.MODERN, "tools/call") == {
        "content": [], "_meta": {"x.example/trace": "t"}, "resultType": "complete"}
    assert p.served_result({"content": [], "resultType": "complete"}, p.ClientEra.LEGACY,
                           "tools/call") == {"content": []}


def test_a_modern_client_gets_a_read_with_caching_hints_whatever_the_server_gave():
    text = [{"uri": "demo://a", "text": "a"}]
    # A legacy server's read: no resultType, no hints. The conservative ones are added.
    legacy_read = p.served_result({"contents": text}, p.ClientEra.MODERN, "resources/read")
    assert legacy_read == {"contents": text, "resultType": "complete", "ttlMs": 0,
                           "cacheScope": "private"}
    conforms(legacy_read, MODERN, "ReadResourceResult")
    # A modern server's own hints are kept; what is not a hint is replaced.
    hinted = {"contents": text, "resultType": "complete", "ttlMs": 60000, "cacheScope": "public"}
    assert p.served_result(hinted, p.ClientEra.MODERN, "resources/read") == hinted
    for ttl, scope in ((-1, "shared"), (True, None), ("60", "PUBLIC"), (1.5, 3)):
        sloppy = {"contents": text, "ttlMs": ttl, "cacheScope": scope}
        served = p.served_result(sloppy, p.ClientEra.MODERN, "resources/read")
        assert (served["ttlMs"], served["cacheScope"]) == (0, "private"), (ttl, scope)
    half = p.served_result({"contents": text, "ttlMs": 5000}, p.ClientEra.MODERN,
                           "resources/read")
    assert (half["ttlMs"], half["cacheScope"]) == (5000, "private")
    # Every list result is cacheable too; the other results are not.
    for method, member in (("tools/list", "tools"), ("prompts/list", "prompts"),
                           ("resources/list", "resources"),
                           ("resources/templates/list", "resourceTemplates")):
        listed = p.served_result({member: []}, p.ClientEra.MODERN, method)
        assert (listed["ttlMs"], listed["cacheScope"]) == (0, "private"), method
    for method, raw in (("tools/call", {"content": []}),
                        ("prompts/get", {"messages": []}),
                        ("completion/complete", {"completion": {"values": []}})):
        assert p.served_result(raw, p.ClientEra.MODERN, method) == {
            **raw, "resultType": "complete"}, method
    # A legacy client gets the read as 2025-11-25 has it; input_required passes as it is.
    assert p.served_result({"contents": text, "resultType": "complete"}, p.ClientEra.LEGACY,
                           "resources/read") == {"contents": text}
    asking = {"resultType": "input_required", "inputRequests": {}}
    assert p.served_result(asking, p.ClientEra.MODERN, "resources/read") == asking


def test_the_gateway_says_it_announces_changes_of_every_list_it_serves():
    info = {"name": "trunkline", "version": "0.1.0"}
    for result in (p.discover_result(info, None),
                   p.initialize_result("2025-11-25", info, None)):
        capabilities = result["capabilities"]
        assert capabilities["prompts"] == {"listChanged": True}
        assert capabilities["resources"] == {"subscribe": True, "listChanged": True}
    assert p.list_changed("prompts", 7) == {
        "jsonrpc": "2.0", "method": "notifications/prompts/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 7}}}
    conforms(p.list_changed("resources", "s"), MODERN, "ResourceListChangedNotification")
    conforms(p.list_changed("prompts"), LEGACY, "PromptListChangedNotification")


def test_failures_behind_the_gateway_become_errors_that_name_the_server():
    assert p.error_for(ServerError("nope", code=-32042, data={"a": 1})) == {
        "code": -32042, "message": "nope", "data": {"a": 1}}
    assert p.error_for(UnknownTool("no tool named 'x'")) == {
        "code": -32602, "message": "no tool named 'x'"}
    maybe = p.error_for(UnknownTool("no tool named 'x'; ...", candidates=[
        ToolCandidate("s", "unavailable", "era refused: ...", "it answered ...")]))
    assert maybe["data"] == {"candidates": [{"server": "s", "state": "unavailable",
                                             "listed": False}]}
    down = p.error_for(ServerUnavailable("server is unavailable: crash loop", server="s",
                                         state="unavailable", stderr_tail="SECRET"))
    assert down["code"] == -32603 and "server 's'" in down["message"]
    assert down["data"] == {"server": "s", "kind": "ServerUnavailable", "state": "unavailable"}
    assert "SECRET" not in str(down), "a server's stderr is the operator's, not the client's"
    slow = p.error_for(RequestTimeout("no reply", timeout_s=2.0, server="s"))
    assert slow["data"]["timeoutS"] == 2.0


def test_admission_bounds_each_server_and_the_whole_gateway():
    from trunkline.gateway.admission import Admission, retry_after
    from trunkline.gateway.http_rules import status_for

    gate = Admission(total=3, per_server=2)
    assert gate.enter("a") is None and gate.enter("a") is None
    busy = gate.enter("a")
    assert busy["data"]["scope"] == "server" and busy["data"]["server"] == "a"
    assert status_for(busy) == 429 and retry_after(busy) == 1
    assert gate.enter(None) is None, "a list, to no one server, counts toward the total"
    full = gate.enter("b")
    assert full["data"]["scope"] == "gateway" and status_for(full) == 503
    assert gate.in_flight == 3
    gate.leave("a")
    assert gate.enter("b") is None
    gate.leave("b"), gate.leave(None), gate.leave("a")
    assert gate.in_flight == 0 and gate.enter("a") is None
    assert retry_after(p.error(p.INTERNAL_ERROR, "other")) is None


def test_admission_gives_each_client_a_share_of_a_server_and_a_budget_in_all():
    from trunkline.gateway.admission import Admission, retry_after
    from trunkline.gateway.http_rules import status_for

    now = [100.0]
    timeouts = {"a": 60.0, "b": 10.0, None: 30.0}
    gate = Admission(total=100, per_server=4, client_calls=3, client_server_share=0.5,
                     timeout_of=timeouts.__getitem__, clock=lambda: now[0])
    assert gate.client_share("a") == 2
    hog, other = object(), object()
    assert gate.enter("a", hog, "h1") is None
    now[0] = 110.0
    assert gate.enter("a", hog, "h2") is None
    # Its share of a: refused, naming its own budget; back when its oldest call's
    # deadline (100 + 60) has passed, 50 s from now.
    over = gate.enter("a", hog, "h3")
    assert over["data"] == {"kind": "Overloaded", "scope": "client", "limit": 2,
                            "budget": "client_server_share", "server": "a",
                            "retryAfterS": 50}
    assert status_for(over) == 429 and retry_after(over) == 50
    assert "this client" in over["message"] and "client_server_share" in over["message"]
    # The server still has room for others, and for this client's calls elsewhere.
    assert gate.enter("a", other, "o1") is None and gate.enter("a", other, "o2") is None
    assert gate.enter("b", hog, "h4") is None
    assert (gate.held_by(hog), gate.held_by(hog, "a"), gate.in_flight) == (3, 2, 5)
    # Its budget in all: the earliest deadline of all its calls is b's (110 + 10).
    over = gate.enter(None, hog, "h5")
    assert over["data"] == {"kind": "Overloaded", "scope": "client", "limit": 3,
                            "budget": "client_calls", "retryAfterS": 10}
    assert "client_calls" in over["message"]
    # A deadline already passed (the call is late ending): come back in a second.
    now[0] = 500.0
    assert retry_after(gate.enter(None, hog, "h5")) == 1
    # The server's own bound, met by others: its scope and 1 s, as before.
    assert gate.enter("a", object(), "x")["data"]["scope"] == "server"
    gate.leave("a", hog, "h1")
    assert gate.enter("a", hog, "h3") is None, "a call ended: a place of its own again"
    for server, ticket in (("a", "h2"), ("a", "h3"), ("b", "h4")):
        gate.leave(server, hog, ticket)
    gate.leave("a", other, "o1"), gate.leave("a", other, "o2")
    assert gate.in_flight == 0 and gate.held_by(hog) == 0 and gate.held_by(other) == 0


def test_a_clients_share_is_of_the_places_a_server_has_and_at_least_one():
    from trunkline.gateway.admission import Admission

    assert Admission(total=10, per_server=1, client_server_share=0.01).client_share("a") == 1
    # The gateway's defaults: 2048 requests per server, but a server runs 1024 at once
    # (its max_in_flight; the rest wait): half of those, so no client can fill them all.
    gate = Admission(total=16384, per_server=2048, slots_of={"a": 1024, "b": 4096}.get)
    assert (gate.places("a"), gate.client_share("a")) == (1024, 512)
    assert (gate.places("b"), gate.client_share("b")) == (2048, 1024)
