"""Redirects over Streamable HTTP (issue 11, defect 10): requests, configured headers, the
era verdict and the allowlist stay bound to the configured origin. A redirect to another
origin, from https to http, a method-changing one, or one hop too many fails the request
with both URLs named, and is no evidence of an era; a same-origin 307/308 is followed."""

from __future__ import annotations

import subprocess

import pytest

import httppeers
from conftest import run
from httppeers import http_peer  # noqa: F401 - a fixture
from trunkline import http
from trunkline.channel import ServerState
from trunkline.params import MAX_REDIRECTS
from trunkline.parent.host import Host
from trunkline.protocol.era import NegotiationConfig
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=10.0,
                                                      legacy_probe_timeout_s=10.0))


def start(http_peer, tmp_path, name: str, *flags: str):
    argv, env = httppeers.scripted(*flags)
    return http_peer(argv, env, record=tmp_path / f"{name}.jsonl")


def test_a_redirect_to_another_origin_carries_nothing_there(no_leaks, http_peer, tmp_path):
    """The configured endpoint (with an API key, allowlisted for legacy) answers every
    POST with 307 to another host: that host receives nothing, neither server/discover nor
    the one legacy initialize nor the key, and the verdict names both URLs."""
    elsewhere = start(http_peer, tmp_path, "elsewhere")
    configured = start(http_peer, tmp_path, "configured", "--redirect", "307", elsewhere.url)
    async def main():
        async with Host(settings=SETTINGS) as host:
            status = await host.add_server(
                "s", http(configured.url, headers={"X-Api-Key": "k3y"}), allow_legacy=True)
            assert status.state is ServerState.UNAVAILABLE
            evidence = "\n".join(status.evidence)
            assert configured.url in evidence and elsewhere.url in evidence
            assert "leaves the configured origin" in evidence
    run(main())
    assert elsewhere.records() == []
    sent = [(r["method"], r["path"], (r["body"] or {}).get("method")) for r in configured.records()]
    assert sent == [("POST", "/mcp", "server/discover"), ("POST", "/mcp", "initialize")]
    assert all(r["headers"].get("x-api-key") == "k3y" for r in configured.records())


@pytest.mark.parametrize("status", ["307", "308"])
def test_a_same_origin_redirect_is_followed(no_leaks, http_peer, tmp_path, status):
    server = start(http_peer, tmp_path, "server", "--redirect", status, "/moved/mcp")
    async def main():
        async with Host(settings=SETTINGS) as host:
            ready = await host.add_server("s", http(server.url, headers={"X-Api-Key": "k3y"}))
            assert ready.state is ServerState.READY and ready.era == "modern"
            result = await host.call_tool("echo", {"text": "over the redirect"})
            assert result.text == "over the redirect"
    run(main())
    paths = [(r["path"], (r["body"] or {}).get("method")) for r in server.records()]
    assert paths[:2] == [("/mcp", "server/discover"), ("/moved/mcp", "server/discover")]
    assert ("/moved/mcp", "tools/call") in paths
    assert all(r["headers"].get("x-api-key") == "k3y" for r in server.records())


@pytest.mark.parametrize("status", ["301", "302", "303"])
def test_a_method_changing_redirect_is_refused(no_leaks, http_peer, tmp_path, status):
    server = start(http_peer, tmp_path, "server", "--redirect", status, "/moved/mcp")
    async def main():
        async with Host(settings=SETTINGS) as host:
            refused = await host.add_server("s", http(server.url))
            assert refused.state is ServerState.UNAVAILABLE
            assert any(f"HTTP {status} redirect" in line and "only 307 and 308" in line
                       for line in refused.evidence)
    run(main())
    assert [r["path"] for r in server.records()] == ["/mcp"]


def test_a_redirect_loop_is_bounded(no_leaks, http_peer, tmp_path):
    server = start(http_peer, tmp_path, "server", "--redirect", "307", "/mcp")
    async def main():
        async with Host(settings=SETTINGS) as host:
            refused = await host.add_server("s", http(server.url))
            assert any(f"more than {MAX_REDIRECTS} redirects" in line
                       for line in refused.evidence)
    run(main())
    assert len(server.records()) == MAX_REDIRECTS + 1


def _self_signed(tmp_path) -> tuple[str, str]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


def test_https_is_never_redirected_to_http(no_leaks, http_peer, tmp_path):
    plain = start(http_peer, tmp_path, "plain")
    secure = start(http_peer, tmp_path, "secure", "--tls", *_self_signed(tmp_path),
                   "--redirect", "307", plain.url)
    async def main():
        async with Host(settings=SETTINGS) as host:
            refused = await host.add_server(
                "s", http(secure.url, headers={"Authorization": "Bearer t"}, verify_tls=False))
            assert any("(https to http)" in line for line in refused.evidence)
    run(main())
    assert plain.records() == []
