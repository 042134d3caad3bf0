"""Canonical server URIs, which server a metadata ``resource`` names, where secrets go."""

from __future__ import annotations

import pytest

from trunkline.auth.resource import canonical_uri, covers, is_loopback, secure_transport


@pytest.mark.parametrize("url, canonical", [
    ("HTTPS://MCP.Example.COM/mcp", "https://mcp.example.com/mcp"),
    ("https://mcp.example.com:443/mcp", "https://mcp.example.com/mcp"),
    ("http://mcp.example.com:80", "http://mcp.example.com"),
    ("https://mcp.example.com:8443", "https://mcp.example.com:8443"),
    ("https://mcp.example.com/", "https://mcp.example.com"),
    ("https://mcp.example.com/server/mcp/", "https://mcp.example.com/server/mcp/"),
    ("https://mcp.example.com/mcp#fragment", "https://mcp.example.com/mcp"),
    ("https://user:pw@mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ("http://[::1]:8080/mcp", "http://[::1]:8080/mcp"),
    ("https://mcp.example.com/mcp?tenant=A", "https://mcp.example.com/mcp?tenant=A"),
])
def test_canonical_uri(url: str, canonical: str) -> None:
    assert canonical_uri(url) == canonical


@pytest.mark.parametrize("url", ["mcp.example.com", "ftp://h/x", "https://", "/mcp",
                                 "https://h:99999/"])
def test_canonical_uri_refuses_what_is_not_an_http_url(url: str) -> None:
    with pytest.raises(ValueError):
        canonical_uri(url)


@pytest.mark.parametrize("resource, server, expected", [
    ("https://h/mcp", "https://h/mcp", True),
    ("HTTPS://H:443/mcp", "https://h/mcp", True),
    ("https://h", "https://h/mcp", True),
    ("https://h/", "https://h/mcp", True),
    ("https://h/public", "https://h/public/mcp", True),
    ("https://h/public/", "https://h/public/mcp", True),
    ("https://h/mcp/", "https://h/mcp", True),
    ("https://h/mc", "https://h/mcp", False),
    ("https://h/mcp/deeper", "https://h/mcp", False),
    ("https://evil.example.com/mcp", "https://h/mcp", False),
    ("http://h/mcp", "https://h/mcp", False),
    ("https://h:8443/mcp", "https://h/mcp", False),
    ("https://h/mcp#x", "https://h/mcp", False),
    ("https://h/mcp?t=1", "https://h/mcp?t=1", True),
    ("https://h/?t=1", "https://h/mcp?t=1", False),
    ("not a url", "https://h/mcp", False),
])
def test_covers(resource: str, server: str, expected: bool) -> None:
    assert covers(resource, server) is expected


@pytest.mark.parametrize("url, loopback, secure", [
    ("https://example.com/x", False, True),
    ("http://example.com/x", False, False),
    ("http://localhost:3000/callback", True, True),
    ("http://app.localhost/x", True, True),
    ("http://127.0.0.1:9/x", True, True),
    ("http://127.8.9.10/x", True, True),
    ("http://[::1]:9/x", True, True),
    ("http://10.0.0.1/x", False, False),
    ("http://localhost.example.com/x", False, False),
])
def test_where_secrets_may_travel(url: str, loopback: bool, secure: bool) -> None:
    assert is_loopback(url) is loopback
    assert secure_transport(url) is secure
