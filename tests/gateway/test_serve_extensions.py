"""MCP extensions through ``trunkline serve --http`` (``gateway/extensions.py``): skills
(SEP-2640) and MCP Apps (``io.modelcontextprotocol/ui``) relayed from fastmcp 4.2.3
servers behind the gateway (tests/peers/fastmcp_skills.py), read by the official mcp 2.x
Python client and by raw HTTP; any other extension a server declares left out, and said
so in ``/status``. Every message the gateway writes is schema-checked."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from gateways import HttpGateway, fleet_config, modern_meta, real_server
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline.params import StdioParams

pytestmark = pytest.mark.real_servers

SKILLS = "io.modelcontextprotocol/skills"
UI = "io.modelcontextprotocol/ui"
OTHER = "com.example/telemetry"
SKILL_MD = """---
name: {name}
description: {description}
---

# {name}
"""


def skill(root: Path, name: str, description: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(SKILL_MD.format(name=name, description=description))


def fleet(tmp_path: Path, tap: Path | None = None) -> Path:
    """alpha: a skill and the clock app (behind tests/peers/tap.py, with ``tap``); beta:
    the same skill path (another skill), a skill of its own, and an extension the gateway
    does not relay."""
    skill(tmp_path / "a", "git-workflow", "Alpha's Git conventions")
    skill(tmp_path / "b", "git-workflow", "Beta's Git conventions")
    skill(tmp_path / "b", "release-notes", "Write the release notes")
    server = realpeers.require(realpeers.FASTMCP_SKILLS)
    alpha = real_server(server, "--skills", str(tmp_path / "a"), "--app")
    if tap is not None:
        alpha = StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                             alpha.command, *alpha.args), alpha.env)
    return fleet_config(tmp_path, {
        "alpha": alpha,
        "beta": real_server(server, "--skills", str(tmp_path / "b"), "--extension", OTHER)})


async def modern(gateway: HttpGateway, method: str, params: dict[str, Any]) -> dict[str, Any]:
    message = gateway.message(method, {**params, "_meta": modern_meta()})
    status, answer, _ = await gateway.post(message, gateway.modern_headers(message))
    # an unknown method is 404, as the gateway answers one
    assert status == (404 if answer.get("error", {}).get("code") == -32601 else 200), answer
    validate_message(answer, MODERN)
    return answer


def test_the_sdk_client_gets_skills_and_apps_through_the_gateway(tmp_path, tap, gateways):
    python = realpeers.PY_MODERN_VENV / "bin" / "python"

    async def main() -> None:
        gateway = await HttpGateway.start(fleet(tmp_path, tap), gateways)
        try:
            proc = await asyncio.create_subprocess_exec(
                str(python), str(PEERS / "sdk_extensions_client.py"), gateway.url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()
            got = json.loads(out)
        finally:
            await gateway.stop()
        assert got["protocol"] == "2026-07-28"
        # relayed: skills and MCP Apps; tasks, the gateway's own; beta's own extension is
        # left out
        assert got["extensions"] == {SKILLS: {}, UI: {}, "io.modelcontextprotocol/tasks": {}}
        clock = next(t for t in got["tools"] if t["name"] == "clock")
        assert clock["_meta"]["ui"] == {"resourceUri": "ui://clock/view"}
        tick = next(t for t in got["tools"] if t["name"] == "clock_tick")
        assert tick["_meta"]["ui"] == {"resourceUri": "ui://clock/view", "visibility": ["app"]}
        [view] = got["views"]["ui://clock/view"]
        assert view["mimeType"] == "text/html;profile=mcp-app"
        assert view["text"].startswith("<!DOCTYPE html>")
        # one origin to its client: of the two servers' skill://git-workflow, alpha's
        # (configured first) is served and read; beta's own skill beside it
        assert [(s["uri"], s["frontmatter"]["description"]) for s in got["skills"]] == [
            ("skill://git-workflow/SKILL.md", "Alpha's Git conventions"),
            ("skill://release-notes/SKILL.md", "Write the release notes")]
        assert "Alpha's Git conventions" in got["skill"][0]["text"]
        # The gateway's host told the server behind that its client renders MCP Apps.
        [discover] = [m for m in map(orjson.loads, taplog.lines(tap, taplog.IN))
                      if m.get("method") == "server/discover"]
        declared = discover["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert declared["extensions"] == {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}

    run(main())


def test_skills_are_routed_and_left_out_where_the_spec_says(tmp_path, gateways):
    async def main() -> None:
        gateway = await HttpGateway.start(fleet(tmp_path), gateways)
        try:
            got = await modern(gateway, "skills/get", {"uri": "skill://release-notes/SKILL.md"})
            entry = got["result"]["skill"]
            assert entry["frontmatter"]["description"] == "Write the release notes"
            assert got["result"]["resultType"] == "complete"
            assert "ttlMs" in got["result"] and "cacheScope" in got["result"]
            unknown = await modern(gateway, "skills/get", {"uri": "skill://nope/SKILL.md"})
            assert unknown["error"]["code"] == -32602
            bad = await modern(gateway, "skills/list", {"cursor": "not ours"})
            assert bad["error"]["code"] == -32602
            # No server behind declared directoryRead: the gateway does not serve it.
            directory = await modern(gateway, "resources/directory/read",
                                     {"uri": "skill://git-workflow"})
            assert directory["error"] == {"code": -32601, "message":
                                          "Method not found: resources/directory/read"}
            # A 2025-11-25 client: MCP Apps yes, skills no (specified from 2026-07-28).
            headers, init = await gateway.legacy_session()
            validate_message(init, LEGACY)
            assert init["result"]["capabilities"]["extensions"] == {UI: {}}
            status, listed, _ = await gateway.post(gateway.message("skills/list", {}), headers)
            assert status == 404 and listed["error"]["code"] == -32601
            status, read, _ = await gateway.post(
                gateway.message("resources/read", {"uri": "ui://clock/view"}), headers)
            assert read["result"]["contents"][0]["mimeType"] == "text/html;profile=mcp-app"
            async with gateway.http.get(f"{gateway.base}/status") as response:
                document = await response.json()
        finally:
            await gateway.stop()
        assert {s["name"]: s["extensions"] for s in document["servers"]} == {
            "alpha": [{"id": UI, "gateway": "relayed"}, {"id": SKILLS, "gateway": "relayed"}],
            "beta": [{"id": UI, "gateway": "relayed"}, {"id": OTHER, "gateway": "left out"},
                     {"id": SKILLS, "gateway": "relayed"}]}
        said = [line for line in gateway.stderr.decode().splitlines() if OTHER in line]
        assert len(said) == 1 and "'beta'" in said[0] and "left out" in said[0]

    run(main())
