"""Era verdicts against REAL MCP servers (installed by .ci/install-peers), each with and
without the legacy allowlist, asserting both the verdict and the exact messages that
reached the server (recorded by tests/peers/tap.py)."""

from __future__ import annotations

import sys
from dataclasses import replace

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, group_alive, run
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline.errors import EraRefused
from trunkline.params import stdio
from trunkline.protocol import Era, NegotiationConfig
from trunkline.worker.peer import Peer

pytestmark = pytest.mark.real_servers

# Python servers start in 0.9-2.9 s here under load: a generous probe deadline keeps a
# slow start from looking like a silent legacy server.
CONFIG = NegotiationConfig(discover_timeout_s=20.0, legacy_probe_timeout_s=20.0)


def tapped(server: realpeers.RealServer, log) -> object:
    realpeers.require(server)
    return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(log), "--",
                 *server.argv, env=dict(server.env))


def sent(log) -> list[dict]:
    return [orjson.loads(line) for line in taplog.lines(log, taplog.IN)]


# (server, a tool call that works on it)
MODERN_SERVERS = {
    "modern-py-time": (realpeers.MODERN_PY_TIME,
                       ("get_current_time", {"timezone": "UTC"})),
    "modern-py-echo": (realpeers.MODERN_PY_ECHO, ("echo", {"text": "hello trunkline"})),
    "modern-ts": (realpeers.MODERN_TS, ("echo", {"text": "hello trunkline"})),
    "modern-ts-strict": (realpeers.MODERN_TS_STRICT, ("echo", {"text": "hello trunkline"})),
}
LEGACY_SERVERS = {
    "legacy-py-time": (realpeers.LEGACY_PY_TIME, -32602,
                       ("get_current_time", {"timezone": "UTC"})),
    "legacy-ts-everything": (realpeers.LEGACY_TS_EVERYTHING, -32601,
                             ("echo", {"message": "hello trunkline"})),
}


@pytest.mark.parametrize("allow_legacy", [False, True], ids=["strict", "allowlisted"])
@pytest.mark.parametrize("name", list(MODERN_SERVERS))
def test_modern_server_is_modern_and_never_sees_initialize(tap, no_leaks, name, allow_legacy):
    server, (tool, args) = MODERN_SERVERS[name]
    async def main():
        peer = Peer(
            name, tapped(server, tap), negotiation=replace(CONFIG, allow_legacy=allow_legacy)
        )
        async with peer:
            assert peer.era is Era.MODERN
            assert peer.verdict.version == MODERN
            listed = await peer.call("tools/list", {}, timeout=20)
            assert tool in {t["name"] for t in listed["tools"]}
            result = await peer.call("tools/call", {"name": tool, "arguments": args}, timeout=20)
            assert result.get("isError") is not True, result
            assert result["content"], result
    run(main())
    msgs = sent(tap)
    assert [m["method"] for m in msgs] == ["server/discover", "tools/list", "tools/call"]
    for m in msgs:
        validate_message(m, MODERN)
        assert m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN


@pytest.mark.parametrize("name", list(LEGACY_SERVERS))
def test_legacy_server_without_allowlist_fails_closed(tap, no_leaks, name):
    server, code, _ = LEGACY_SERVERS[name]
    async def main():
        peer = Peer(name, tapped(server, tap), negotiation=CONFIG)
        with pytest.raises(EraRefused) as info:
            async with peer:
                pass
        assert any(str(code) in line for line in info.value.evidence), info.value.evidence
        assert "allow_legacy=False" in info.value.message
        assert not group_alive(peer.pid)
    run(main())
    msgs = sent(tap)
    # Only the probe: no initialize, and no tools/* before (or without) a verdict.
    assert [m["method"] for m in msgs] == ["server/discover"]
    validate_message(msgs[0], MODERN)


@pytest.mark.parametrize("name", list(LEGACY_SERVERS))
def test_allowlisted_legacy_server_becomes_legacy(tap, no_leaks, name):
    server, code, (tool, args) = LEGACY_SERVERS[name]
    async def main():
        peer = Peer(name, tapped(server, tap), negotiation=replace(CONFIG, allow_legacy=True))
        async with peer:
            assert peer.era is Era.LEGACY
            assert peer.verdict.version in CONFIG.legacy_versions
            assert any(str(code) in line for line in peer.evidence)
            listed = await peer.call("tools/list", {}, timeout=20)
            assert tool in {t["name"] for t in listed["tools"]}
            result = await peer.call("tools/call", {"name": tool, "arguments": args}, timeout=20)
            assert result.get("isError") is not True, result
    run(main())
    msgs = sent(tap)
    requests = [m.get("method") for m in msgs]
    assert requests[:3] == ["server/discover", "initialize", "notifications/initialized"]
    assert requests.count("initialize") == 1
    validate_message(msgs[0], MODERN)
    for m in msgs[1:]:
        validate_message(m, LEGACY)
