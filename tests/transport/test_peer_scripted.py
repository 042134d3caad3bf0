"""A Peer against tests/peers/scripted.py: era verdicts and the bytes that reached the
server, for behaviour no real server shows on demand (silence, garbage, crashes, wrong
ids, late answers, floods)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import orjson
import pytest
import taplog

from conftest import group_alive, run, scripted
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline.errors import EraRefused, RequestTimeout, TransportLost
from trunkline.protocol import ClientIdentity, Era, NegotiationConfig
from trunkline.worker.peer import Peer, PeerState

FAST = NegotiationConfig(discover_timeout_s=1.0, legacy_probe_timeout_s=1.0)
META_KEYS = {
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
}


def sent(tap) -> list[dict]:
    """Every message the server received, decoded, in order."""
    return [orjson.loads(line) for line in taplog.lines(tap, taplog.IN)]


def methods(tap) -> list[str]:
    return [m.get("method", "<response>") for m in sent(tap)]


async def refused(params, *, allow_legacy=False, config=FAST, **kw) -> tuple[EraRefused, Peer]:
    peer = Peer("hostile", params, negotiation=replace(config, allow_legacy=allow_legacy), **kw)
    try:
        with pytest.raises(EraRefused) as info:
            await peer.start()
        assert peer.state is PeerState.REFUSED
    finally:
        # start() reports the verdict without waiting for the server's stop ladder;
        # closing the peer runs it.
        await peer.aclose()
    assert not group_alive(peer.pid), "a refused peer's process group must be gone"
    return info.value, peer


# --- modern ----------------------------------------------------------------------------


def test_modern_peer_every_request_stamped_and_schema_valid(tap, no_leaks):
    async def main():
        async with Peer("modern", scripted("--era", "modern", tap=tap), negotiation=FAST) as peer:
            assert peer.era is Era.MODERN and peer.verdict.version == MODERN
            tools = await peer.call("tools/list", {}, timeout=5)
            assert {"echo", "search"} <= {t["name"] for t in tools["tools"]}
            result = await peer.call(
                "tools/call", {"name": "echo", "arguments": {"x": 1}}, timeout=5
            )
            assert result["isError"] is False
            assert orjson.loads(result["content"][0]["text"]) == {"x": 1}
    run(main())
    msgs = sent(tap)
    assert [m["method"] for m in msgs] == ["server/discover", "tools/list", "tools/call"]
    for m in msgs:
        assert set(m["params"]["_meta"]) >= META_KEYS, m
        assert m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN
        validate_message(m, MODERN)
    assert len({m["id"] for m in msgs}) == 3


def test_32022_retries_discover_with_a_new_id_and_never_initializes(tap, no_leaks):
    config = NegotiationConfig(modern_versions=("2027-01-01", MODERN), discover_timeout_s=2)
    async def main():
        peer = Peer("m", scripted("--era", "modern", "--supported", MODERN, tap=tap),
                    negotiation=replace(config, allow_legacy=True))
        async with peer:
            assert peer.verdict.version == MODERN
    run(main())
    msgs = sent(tap)
    assert [m["method"] for m in msgs] == ["server/discover", "server/discover"]
    versions = [m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] for m in msgs]
    assert versions == ["2027-01-01", MODERN]
    assert msgs[0]["id"] != msgs[1]["id"]


@pytest.mark.parametrize("allow_legacy", [False, True])
def test_32022_without_shared_version_fails_without_initialize(tap, no_leaks, allow_legacy):
    """A -32022 naming only revisions we do not speak: refused, never initialize."""
    async def main():
        err, _ = await refused(scripted("--discover", "error-32022:2099-01-01", tap=tap),
                               allow_legacy=allow_legacy)
        assert "2099-01-01" in err.message and MODERN in err.message
    run(main())
    assert methods(tap) == ["server/discover"]


# --- ambiguous answers without the allowlist -----------------------------------------


AMBIGUOUS = {
    "silence": (["--discover", "silence"], "no answer within"),
    "exit": (["--discover", "exit"], "exit code 3"),
    "empty-line": (["--discover", "empty-line"], "no answer within"),
    "garbage": (["--discover", "garbage"], "not a JSON-RPC message"),
    "invalid-json": (["--discover", "invalid-json"], "not a JSON-RPC message"),
    "wrong-id": (["--discover", "wrong-id"], "never sent"),
    "server-request": (["--discover", "server-request"], "sent a 'sampling/createMessage' request"),
    "-32601": (["--discover", "error:-32601"], "-32601"),
    "-32602": (["--discover", "error:-32602"], "-32602"),
    "malformed": (["--discover", "malformed"], "not a JSON-RPC message"),
    "legacy-era": (["--era", "legacy"], "-32601"),
}


@pytest.mark.parametrize("name", list(AMBIGUOUS))
def test_ambiguous_peer_fails_closed_without_allowlist(tap, no_leaks, name):
    flags, evidence = AMBIGUOUS[name]
    async def main():
        err, _ = await refused(scripted(*flags, tap=tap))
        assert "allow_legacy=False" in err.message or "closed" in err.message
        assert any(evidence in line for line in err.evidence), err.evidence
    run(main())
    assert methods(tap) == ["server/discover"], "only the probe may reach an unproven peer"


def test_stdout_garbage_before_the_answer_is_not_tolerated(tap, no_leaks):
    async def main():
        await refused(scripted("--stdout-garbage-first", tap=tap))
    run(main())
    assert "initialize" not in methods(tap)


def test_oversized_line_during_probe_is_reported_and_bounded(tap, no_leaks):
    async def main():
        err, _ = await refused(scripted("--oversized-line", "2M", tap=tap),
                               max_line_bytes=1 << 20)
        assert any("over the line limit" in line for line in err.evidence)
    run(main())


# --- the allowlisted legacy branch ----------------------------------------------------


def test_allowlisted_legacy_peer_becomes_legacy_after_valid_initialize(tap, no_leaks):
    async def main():
        peer = Peer(
            "legacy",
            scripted("--era", "legacy", tap=tap),
            negotiation=replace(FAST, allow_legacy=True),
        )
        async with peer:
            assert peer.era is Era.LEGACY and peer.verdict.version == "2025-11-25"
            assert peer.verdict.server_info["name"] == "scripted-peer"
            tools = await peer.call("tools/list", {}, timeout=5)
            assert tools["tools"]
    run(main())
    msgs = sent(tap)
    assert [m["method"] for m in msgs] == [
        "server/discover", "initialize", "notifications/initialized", "tools/list"]
    validate_message(msgs[0], MODERN)
    for m in msgs[1:]:
        validate_message(m, LEGACY)
        assert "io.modelcontextprotocol/protocolVersion" not in m.get("params", {}).get("_meta", {})


def test_silent_until_initialize_becomes_legacy_only_when_allowlisted(tap, no_leaks):
    async def main():
        peer = Peer("slow", scripted("--discover", "silence", "--initialize", "result", tap=tap),
                    negotiation=replace(FAST, allow_legacy=True))
        async with peer:
            assert peer.era is Era.LEGACY
    run(main())
    assert methods(tap)[:3] == ["server/discover", "initialize", "notifications/initialized"]


@pytest.mark.parametrize("behaviour", [
    "empty-server-version", "empty-server-name", "no-server-info", "bad-version",
    "no-capabilities", "capabilities-list", "malformed", "wrong-id", "silence", "exit",
    "error:-32602", "garbage",
])
def test_bad_legacy_result_leaves_peer_unavailable(tap, no_leaks, behaviour):
    async def main():
        await refused(scripted("--era", "legacy", "--initialize", behaviour, tap=tap),
                      allow_legacy=True)
    run(main())
    sent_methods = methods(tap)
    assert sent_methods.count("initialize") == 1
    assert "notifications/initialized" not in sent_methods
    assert "tools/list" not in sent_methods


def test_a_discover_answer_and_an_accepted_initialize_are_two_sessions(tap, no_leaks):
    """Issue 11, defect 3: a slow server answers the discover *and* accepts the late
    initialize. Its connection now holds a legacy session too, so no call is served over
    it: the peer gives it up, proven modern, and never sends notifications/initialized."""
    config = NegotiationConfig(discover_timeout_s=0.3, legacy_probe_timeout_s=5.0,
                               allow_legacy=True)
    async def main():
        err, _peer = await refused(scripted("--era", "dual", "--discover", "late:1.0",
                                            "--initialize", "late:1.5", tap=tap), config=config,
                                   allow_legacy=True)
        assert err.renegotiate and err.proven_modern and not err.retry_later
        assert "two sessions" in err.message
        assert any("DiscoverResult arrived while initialize was outstanding" in line
                   for line in err.evidence)
    run(main())
    assert methods(tap) == ["server/discover", "initialize"]


def test_a_modern_error_to_the_late_initialize_proves_modern(tap, no_leaks):
    """Issue 11, defect 2: the allowlisted server's discover answer is slow, so the one
    initialize goes out; it answers that with -32022 listing only modern revisions, which
    proves it modern; the DiscoverResult that follows is taken, not dropped."""
    config = NegotiationConfig(discover_timeout_s=0.5, legacy_probe_timeout_s=5.0)
    async def main():
        peer = Peer("slow", scripted("--era", "modern", "--discover", "late:0.8", tap=tap),
                    negotiation=replace(config, allow_legacy=True))
        async with peer:
            assert peer.era is Era.MODERN
            assert any("a modern error, so the peer is modern" in line
                       for line in peer.evidence)
            await peer.call("tools/list", {}, timeout=5)
    run(main())
    sent_methods = methods(tap)
    assert sent_methods[:3] == ["server/discover", "initialize", "server/discover"]
    assert sent_methods.count("initialize") == 1
    assert "notifications/initialized" not in sent_methods
    assert sent(tap)[-1]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN


def test_legacy_duties_ping_and_server_requests(tap, no_leaks):
    asked = []
    async def sampling(params):
        asked.append(params)
        return {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
    identity = ClientIdentity(capabilities={"sampling": {}})
    async def main():
        peer = Peer("legacy", scripted("--era", "legacy", "--ping-first",
                                       "--server-request", "roots/list",
                                       "--server-request", "sampling/createMessage", tap=tap),
                    negotiation=replace(FAST, allow_legacy=True), identity=identity,
                    input_handlers={"sampling/createMessage": sampling})
        async with peer:
            for _ in range(100):
                if len([m for m in sent(tap) if "method" not in m]) >= 3:
                    break
                await asyncio.sleep(0.05)
    run(main())
    answers = [m for m in sent(tap) if "method" not in m]
    assert len(answers) == 3, sent(tap)
    for answer in answers:
        validate_message(answer, LEGACY)
    by_kind = {("error" in a): a for a in answers}
    assert by_kind[True]["error"]["code"] == -32601  # roots/list: no handler, not declared
    results = [a["result"] for a in answers if "result" in a]
    assert {} in results  # ping
    assert any(r.get("model") == "m" for r in results)
    assert asked and asked[0]["maxTokens"] == 16


def test_modern_server_request_is_never_answered(tap, no_leaks):
    async def main():
        async with Peer("m", scripted("--tools-call", "server-request", tap=tap),
                        negotiation=FAST) as peer:
            with pytest.raises(RequestTimeout):
                await peer.call("tools/call", {"name": "echo", "arguments": {}}, timeout=0.5)
            assert peer.protocol_violations == 1
    run(main())
    assert all("method" in m for m in sent(tap)), "a modern client never writes a response"


# --- verdict lifetime, failures after the verdict ---------------------------------------


def test_verdict_is_cached_for_the_transport_lifetime(tap, no_leaks):
    async def main():
        async with Peer("m", scripted(tap=tap), negotiation=FAST) as peer:
            for _ in range(5):
                await peer.call("tools/list", {}, timeout=5)
    run(main())
    assert methods(tap).count("server/discover") == 1


def test_crash_mid_call_fails_pending_with_exit_code_and_stderr(no_leaks):
    async def main():
        async with Peer("c", scripted("--stderr-flood", "10k"), negotiation=FAST) as peer:
            with pytest.raises(TransportLost) as info:
                await peer.call("tools/call", {"name": "crash", "arguments": {}}, timeout=10)
            assert info.value.exit_code == 4
            assert "exit code 4" in str(info.value)
            assert info.value.stderr_tail
            assert peer.state is PeerState.CLOSED
    run(main())


def test_timeout_sends_cancelled_and_resolves_the_caller(tap, no_leaks):
    async def main():
        async with Peer("t", scripted(tap=tap), negotiation=FAST) as peer:
            started = time.monotonic()
            with pytest.raises(RequestTimeout):
                await peer.call("tools/call", {"name": "sleep", "arguments": {}}, timeout=0.3)
            assert time.monotonic() - started < 5
            assert peer.pending == 0
            await asyncio.sleep(0.2)
    run(main())
    msgs = sent(tap)
    call = next(m for m in msgs if m.get("method") == "tools/call")
    cancel = next(m for m in msgs if m.get("method") == "notifications/cancelled")
    assert cancel["params"]["requestId"] == call["id"]
    validate_message(cancel, MODERN)


def test_stderr_flood_never_blocks_negotiation_or_calls(no_leaks):
    async def main():
        async with Peer("f", scripted("--stderr-flood", "64M"), negotiation=FAST) as peer:
            for i in range(20):
                await peer.call("tools/call", {"name": "echo", "arguments": {"i": i}}, timeout=10)
            assert len(peer.stderr_tail(5).splitlines()) <= 5
    run(main())


def test_a_late_reply_after_a_timeout_is_dropped_and_counted(tap, no_leaks):
    async def main():
        async with Peer("late", scripted("--ignore-cancel", tap=tap), negotiation=FAST) as peer:
            with pytest.raises(RequestTimeout):
                await peer.call("tools/call", {"name": "sleep", "arguments": {"seconds": 0.4}},
                                timeout=0.1)
            await asyncio.sleep(0.8)  # the server answers anyway
            assert peer.late_replies == 1
            assert peer.protocol_violations == 0
            # The peer is unharmed: the next call is answered normally.
            assert (await peer.call("tools/call", {"name": "echo", "arguments": {}},
                                    timeout=5))["isError"] is False
    run(main())
    late = [m for m in map(orjson.loads, taplog.lines(tap, taplog.OUT))
            if m.get("result", {}).get("content", [{}])[0].get("text") == "slept 0.4s"]
    assert len(late) == 1, "the server did send the late reply"
