"""The Streamable HTTP transport under a Peer, against tests/peers/http_scripted.py.

What the server received is read back from its ``--record`` file: the headers of every
POST (checked against the body they came with), the bodies (validated against the
official schema), which methods were never sent (no ``initialize`` without positive
evidence and the allowlist), and which exchanges the client closed (cancellation).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import subprocess
from dataclasses import replace

import pytest

import httppeers
from conftest import run
from httppeers import http_peer  # noqa: F401 - a fixture
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline import http
from trunkline.errors import (
    AuthenticationFailed,
    ConfigurationError,
    EraRefused,
    RequestTimeout,
    StreamBroken,
    TransportLost,
)
from trunkline.protocol.era import Era, NegotiationConfig
from trunkline.protocol.identity import ClientIdentity
from trunkline.worker.peer import Peer, PeerState

FAST = NegotiationConfig(discover_timeout_s=10.0, legacy_probe_timeout_s=10.0)


def start(http_peer, tmp_path, *flags: str):
    argv, env = httppeers.scripted(*flags)
    return http_peer(argv, env, record=tmp_path / "record.jsonl")


def posts(server) -> list[dict]:
    return [r for r in server.records() if r.get("method") == "POST"]


def methods(server) -> list[str | None]:
    return [(r.get("body") or {}).get("method") for r in posts(server)]


def refused(url: str, *, allow_legacy: bool = False,
            negotiation: NegotiationConfig = FAST) -> EraRefused:
    """Start a Peer for ``url`` that must fail closed; the refusal (reason, evidence)."""
    async def main():
        peer = Peer("s", http(url), negotiation=replace(negotiation, allow_legacy=allow_legacy))
        try:
            with pytest.raises(EraRefused) as caught:
                await peer.start()
            assert peer.state is PeerState.REFUSED
        finally:
            await peer.aclose()
        return caught.value
    return run(main())


def decoded(value: str) -> str:
    if value.startswith("=?base64?") and value.endswith("?="):
        return base64.b64decode(value[len("=?base64?"):-2]).decode()
    return value


def test_modern_exchange_sends_every_required_header(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path)

    async def main():
        async with Peer("s", http(server.url), negotiation=FAST) as peer:
            assert (peer.era, peer.verdict.version) == (Era.MODERN, MODERN)
            listed = await peer.call("tools/list", {}, timeout=10)
            assert {t["name"] for t in listed["tools"]} >= {"echo", "headered"}
            echoed = await peer.call("tools/call", {"name": "echo", "arguments": {
                "text": "hi"}}, timeout=10)
            assert echoed["content"][0]["text"] == "hi"
            # Non-ASCII and leading blanks go base64; the absent `flag` sends no header.
            result = await peer.call("tools/call", {"name": "headered", "arguments": {
                "region": " eu-ü", "count": 7}}, timeout=10)
            assert result["content"][0]["text"].startswith("region= eu-ü count=7")
    run(main())

    sent = posts(server)
    assert [r["body"]["method"] for r in sent] == [
        "server/discover", "tools/list", "tools/call", "tools/call"]
    for record in sent:
        h, body = record["headers"], record["body"]
        validate_message(body, MODERN)
        assert "application/json" in h["accept"] and "text/event-stream" in h["accept"]
        assert h["content-type"] == "application/json"
        assert h["mcp-protocol-version"] == body["params"]["_meta"][
            "io.modelcontextprotocol/protocolVersion"] == MODERN
        assert h["mcp-method"] == body["method"]
        assert "mcp-session-id" not in h
    echo_call, headered_call = sent[2]["headers"], sent[3]["headers"]
    assert echo_call["mcp-name"] == "echo" and not any(
        k.startswith("mcp-param-") for k in echo_call)
    assert decoded(headered_call["mcp-param-region"]) == " eu-ü"
    assert headered_call["mcp-param-region"].startswith("=?base64?")
    assert headered_call["mcp-param-count"] == "7"
    assert "mcp-param-flag" not in headered_call


def test_sse_answers_deliver_progress_and_skip_comments(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--sse")
    seen: list[tuple[str, bytes]] = []

    async def main():
        async with Peer("s", http(server.url), negotiation=FAST,
                        on_notification=lambda m, line: seen.append((m, line))) as peer:
            result = await peer.call("tools/call", {
                "name": "echo", "arguments": {"text": "streamed"},
                "_meta": {"progressToken": "p-1"}}, timeout=10)
            assert result["content"][0]["text"] == "streamed"
            assert peer.protocol_violations == 0
    run(main())
    assert [m for m, _ in seen] == ["notifications/progress"]
    assert b'"p-1"' in seen[0][1]


def test_invalid_x_mcp_header_tool_is_dropped_with_a_warning(no_leaks, http_peer, tmp_path,
                                                               caplog):
    server = start(http_peer, tmp_path, "--invalid-header-tool")

    async def main():
        async with Peer("remote", http(server.url), negotiation=FAST) as peer:
            listed = await peer.call("tools/list", {}, timeout=10)
            return [t["name"] for t in listed["tools"]]
    with caplog.at_level(logging.WARNING, logger="trunkline.transports.http"):
        names = run(main())
    assert "bad_header" not in names and {"echo", "headered"} <= set(names)
    warning = [r.getMessage() for r in caplog.records if "bad_header" in r.getMessage()]
    assert warning and "'remote'" in warning[0] and "x-mcp-header" in warning[0]


@pytest.mark.parametrize("allow_legacy", [False, True])
@pytest.mark.parametrize("status", [401, 403])
def test_authentication_challenge_is_reported_and_never_downgrades(
        no_leaks, http_peer, tmp_path, status, allow_legacy):
    server = start(http_peer, tmp_path, "--status", str(status))

    async def main():
        peer = Peer("s", http(server.url), negotiation=replace(FAST, allow_legacy=allow_legacy))
        with pytest.raises(AuthenticationFailed) as caught:
            async with peer:
                pass
        assert peer.state is PeerState.REFUSED
        return caught.value
    error = run(main())
    assert error.status == status and error.server == "s"
    if status == 401:
        assert error.challenge == 'Bearer realm="test"'
    assert methods(server) == ["server/discover"]  # never initialize, allowlisted or not


def test_bearer_token_from_configuration_reaches_the_server(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--require-bearer", "s3cret")

    async def main():
        params = http(server.url, headers={"Authorization": "Bearer s3cret", "X-Team": "a"})
        async with Peer("s", params, negotiation=FAST) as peer:
            await peer.call("tools/list", {}, timeout=10)
    run(main())
    assert all(r["headers"]["authorization"] == "Bearer s3cret" and
               r["headers"]["x-team"] == "a" for r in posts(server))


def test_reserved_headers_cannot_be_configured():
    for name in ("Mcp-Method", "mcp-protocol-version", "MCP-Param-Region", "Mcp-Session-Id",
                 "Accept", "Content-Type"):
        with pytest.raises(ConfigurationError, match="reserved"):
            http("http://127.0.0.1:1/mcp", headers={name: "x"})


@pytest.mark.parametrize("allow_legacy", [False, True])
def test_503_is_ambiguous_and_fails_closed(no_leaks, http_peer, tmp_path, allow_legacy):
    server = start(http_peer, tmp_path, "--status", "503")
    refusal = refused(server.url, allow_legacy=allow_legacy)
    assert any("HTTP 503" in line for line in refusal.evidence)
    # The allowlist grants exactly one initialize after ambiguous evidence, never more.
    assert methods(server) == (["server/discover", "initialize"] if allow_legacy
                               else ["server/discover"])


def test_garbage_body_is_not_evidence(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--garbage")
    assert any("not JSON" in line for line in refused(server.url).evidence)


def test_unreachable_endpoint_fails_closed_with_the_network_error(no_leaks):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        refusal = refused(f"http://127.0.0.1:{port}/mcp")
    assert any("could not connect" in line for line in refusal.evidence)


def test_broken_stream_loses_only_that_request(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--drop-mid-call")

    async def main():
        async with Peer("s", http(server.url), negotiation=FAST) as peer:
            with pytest.raises(StreamBroken) as caught:
                await peer.call("tools/call", {"name": "echo", "arguments": {"text": "x"},
                                               "_meta": {"progressToken": 1}}, timeout=10)
            assert caught.value.method == "tools/call" and caught.value.server == "s"
            assert isinstance(caught.value, TransportLost)  # the retry policy's family
            # The transport and every other request carry on.
            listed = await peer.call("tools/list", {}, timeout=10)
            assert listed["tools"] and peer.state is PeerState.READY
            assert peer.pending == 0
    run(main())


def test_timeout_closes_the_exchange_instead_of_posting_a_cancel(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path)

    async def main():
        async with Peer("s", http(server.url), negotiation=FAST) as peer:
            with pytest.raises(RequestTimeout):
                await peer.request("tools/call", b'{"name":"slow","arguments":{"seconds":30}}',
                                   timeout=0.5)
            # The server sees the disconnect (its handler is cancelled).
            for _ in range(100):
                if server.events():
                    break
                await asyncio.sleep(0.05)
            assert peer.pending == 0
    run(main())
    assert [e["event"] for e in server.events()] == ["cancelled"]
    assert "notifications/cancelled" not in methods(
        server
    )  # stdio only: over HTTP closing the exchange cancels


def test_legacy_endpoint_needs_the_allowlist(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--legacy")
    assert "initialize was never sent" in refused(server.url).message
    assert methods(server) == ["server/discover"]


def test_allowlisted_legacy_endpoint_gets_a_session(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--legacy")

    async def main():
        async with Peer("s", http(server.url), negotiation=replace(FAST, allow_legacy=True),
                        identity=ClientIdentity()) as peer:
            assert (peer.era, peer.verdict.version) == (Era.LEGACY, LEGACY)
            result = await peer.call("tools/call", {"name": "echo", "arguments": {
                "text": "old"}}, timeout=10)
            assert result["content"][0]["text"] == "old"
    run(main())
    records = server.records()
    init = next(i for i, r in enumerate(records)
                if (r.get("body") or {}).get("method") == "initialize")
    session_id = None
    for record in records[init + 1:]:
        h = record["headers"]
        if record["method"] == "POST":
            validate_message(record["body"], LEGACY)
            session_id = session_id or h.get("mcp-session-id")
            assert h.get("mcp-session-id") == session_id and session_id
            assert h["mcp-protocol-version"] == LEGACY
            assert "mcp-method" not in h  # a modern header; legacy requests carry none
    # The session is ended on close.
    assert [r for r in records if r["method"] == "DELETE"][-1]["headers"][
        "mcp-session-id"] == session_id


def test_expired_legacy_session_ends_the_transport(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--legacy", "--expire-session-after", "2")
    closed: list[str] = []

    async def main():
        peer = Peer("s", http(server.url), negotiation=replace(FAST, allow_legacy=True),
                    on_closed=closed.append)
        await peer.start()
        try:
            await peer.call("tools/list", {}, timeout=10)
            with pytest.raises(TransportLost) as caught:
                await peer.call("tools/list", {}, timeout=10)
            assert "404" in caught.value.message
            assert peer.state is PeerState.CLOSED
        finally:
            await peer.aclose()
    run(main())
    assert closed and "HTTP 404" in closed[0]


def _self_signed(tmp_path) -> tuple[str, str]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    return str(cert), str(key)


def test_tls_is_verified_unless_configuration_says_otherwise(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "--tls", *_self_signed(tmp_path))
    assert server.url.startswith("https://")

    refusal = refused(server.url)
    assert any("certificate" in line.lower() for line in refusal.evidence)

    async def main():
        async with Peer("s", http(server.url, verify_tls=False), negotiation=FAST) as peer:
            assert peer.era is Era.MODERN
    run(main())


@pytest.mark.parametrize("allow_legacy", [False, True])
def test_silent_endpoint_times_out_into_the_fail_closed_rule(no_leaks, allow_legacy):
    """A server that accepts connections and never answers: the discover deadline makes it
    ambiguous; only an allowlisted URL gets its one initialize, which times out too."""
    quick = NegotiationConfig(discover_timeout_s=0.5, legacy_probe_timeout_s=0.5)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # the kernel completes handshakes; nobody ever reads
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        refusal = refused(url, allow_legacy=allow_legacy, negotiation=quick)
    assert any("no answer within 0.5 s" in line for line in refusal.evidence)
    if allow_legacy:
        assert "initialize probe timed out" in refusal.message
    else:
        assert "initialize was never sent" in refusal.message


def test_messages_that_do_not_belong_on_a_request_stream_are_dropped(no_leaks, http_peer,
                                                                      tmp_path):
    server = start(http_peer, tmp_path, "--sse", "--stray-events")
    seen: list[str] = []

    async def main():
        async with Peer("s", http(server.url), negotiation=FAST,
                        on_notification=lambda m, line: seen.append(line.decode())) as peer:
            result = await peer.call("tools/call", {
                "name": "echo", "arguments": {"text": "mine"},
                "_meta": {"progressToken": "p-7"}}, timeout=10)
            assert result["content"][0]["text"] == "mine"
            # The stray answer never reached the correlator as "a reply to an id we never
            # sent": it was dropped at the stream that carried it.
            assert peer.protocol_violations == 0
            return peer.stderr_tail()
    tail = run(main())
    assert len(seen) == 1 and '"p-7"' in seen[0] and "not-yours" not in seen[0]
    assert "another request (id 424242)" in tail and "'not-yours'" in tail
