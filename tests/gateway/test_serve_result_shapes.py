"""Every result ``trunkline serve`` forwards has the shape of its client's era, whatever era
the server behind speaks. Behind it: the real ``server-everything`` (TS SDK 1.x, a
2025-11-25 server, allowlisted), which gives no ``resultType`` and no caching hints; in
front: a 2026-07-28 client (each result validated against that schema, which requires
``ttlMs`` and ``cacheScope`` on a ``resources/read``) and a 2025-11-25 one (against
2025-11-25), on both faces."""

from __future__ import annotations

from typing import Any

import pytest

import realpeers
from conftest import run
from gateways import HttpGateway, StdioGateway, fleet_config, modern_meta, real_server
from mcp_schema import LEGACY, MODERN, conforms

pytestmark = pytest.mark.real_servers

STATIC = "demo://resource/static/document/architecture.md"
TEMPLATE = "demo://resource/dynamic/text/{resourceId}"

#: (method, params, the result's definition in both schemas): every kind of result the
#: gateway forwards from behind it, and its own merged lists.
REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("tools/list", {}, "ListToolsResult"),
    ("tools/call", {"name": "echo", "arguments": {"message": "hi"}}, "CallToolResult"),
    ("prompts/list", {}, "ListPromptsResult"),
    ("prompts/get", {"name": "simple-prompt"}, "GetPromptResult"),
    ("prompts/get", {"name": "args-prompt", "arguments": {"city": "Oslo"}}, "GetPromptResult"),
    ("resources/list", {}, "ListResourcesResult"),
    ("resources/templates/list", {}, "ListResourceTemplatesResult"),
    ("resources/read", {"uri": STATIC}, "ReadResourceResult"),
    ("resources/read", {"uri": "demo://resource/dynamic/text/3"}, "ReadResourceResult"),
    ("resources/read", {"uri": "demo://resource/dynamic/blob/3"}, "ReadResourceResult"),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "completable-prompt"},
                             "argument": {"name": "department", "value": "E"}},
     "CompleteResult"),
    ("completion/complete", {"ref": {"type": "ref/resource", "uri": TEMPLATE},
                             "argument": {"name": "resourceId", "value": "1"}},
     "CompleteResult"),
]


def everything(tmp_path):
    return fleet_config(tmp_path, {"ev": real_server(realpeers.require(
        realpeers.LEGACY_TS_EVERYTHING))}, allow_legacy=("ev",))


def check(results: list[dict[str, Any]], revision: str) -> None:
    """Each answer is a result of its request's definition in ``revision``."""
    for (method, params, definition), answer in zip(REQUESTS, results, strict=True):
        assert "result" in answer, (method, params, answer)
        conforms(answer["result"], revision, definition)
        if revision == LEGACY:
            assert "resultType" not in answer["result"], (method, answer)
    reads = [
        a["result"] for (m, _, _), a in zip(REQUESTS, results, strict=True) if m == "resources/read"
    ]
    assert STATIC in str(reads[0]["contents"]) and len(reads) == 3
    if revision == MODERN:
        # A legacy server gives no caching hints: the conservative ones.
        assert all((r["ttlMs"], r["cacheScope"]) == (0, "private") for r in reads)


def test_over_http_both_eras_get_results_of_their_own_schema(gateways, tmp_path):
    path = everything(tmp_path)

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        gw = await HttpGateway.start(path, gateways)
        modern = []
        for method, params, _ in REQUESTS:
            status, answer = await gw.modern(method, params)
            assert status == 200, answer
            modern.append(answer)
        session, _ = await gw.legacy_session()
        legacy = []
        for method, params, _ in REQUESTS:
            _, answer, _ = await gw.post(gw.message(method, params), session)
            legacy.append(answer)
        assert await gw.stop() == 0
        return modern, legacy

    modern, legacy = run(main(), timeout=180)
    check(modern, MODERN)
    check(legacy, LEGACY)


def test_over_stdio_both_eras_get_results_of_their_own_schema(gateways, tmp_path):
    path = everything(tmp_path)

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        gw = await StdioGateway.start(path, gateways)
        modern = [await gw.call(method, {**params, "_meta": modern_meta()})
                  for method, params, _ in REQUESTS]
        init = await gw.call("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "old", "version": "1"}})
        assert "result" in init, init
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        legacy = [await gw.call(method, params) for method, params, _ in REQUESTS]
        assert await gw.close() == 0
        return modern, legacy

    modern, legacy = run(main(), timeout=180)
    check(modern, MODERN)
    check(legacy, LEGACY)
