"""Metadata locations in the specified order, and the refusals of lying documents."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trunkline.auth.discovery import (
    authorization_server_urls,
    check_code_flow,
    parse_authorization_server,
    parse_protected_resource,
    protected_resource_urls,
)
from trunkline.errors import AuthorizationFailed

SERVER = "https://mcp.example.com/public/mcp"


def test_protected_resource_urls_header_then_path_aware_then_root() -> None:
    assert protected_resource_urls(SERVER, "https://mcp.example.com/custom/prm.json") == [
        "https://mcp.example.com/custom/prm.json",
        "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
        "https://mcp.example.com/.well-known/oauth-protected-resource",
    ]


def test_protected_resource_urls_without_a_header() -> None:
    assert protected_resource_urls("https://h/mcp/", None) == [
        "https://h/.well-known/oauth-protected-resource/mcp",
        "https://h/.well-known/oauth-protected-resource",
    ]


def test_protected_resource_urls_for_a_server_at_the_root() -> None:
    assert protected_resource_urls("https://h:8443", None) == [
        "https://h:8443/.well-known/oauth-protected-resource"]
    assert protected_resource_urls("https://h/", None) == [
        "https://h/.well-known/oauth-protected-resource"]


def test_a_header_url_that_is_a_well_known_one_is_tried_once() -> None:
    root = "https://h/.well-known/oauth-protected-resource"
    assert protected_resource_urls("https://h/mcp", root) == [
        root, "https://h/.well-known/oauth-protected-resource/mcp"]


def test_authorization_server_urls_for_an_issuer_with_a_path() -> None:
    assert authorization_server_urls("https://auth.example.com/tenant1") == [
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.example.com/.well-known/openid-configuration/tenant1",
        "https://auth.example.com/tenant1/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize("issuer", ["https://auth.example.com", "https://auth.example.com/"])
def test_authorization_server_urls_for_an_issuer_without_a_path(issuer: str) -> None:
    assert authorization_server_urls(issuer) == [
        "https://auth.example.com/.well-known/oauth-authorization-server",
        "https://auth.example.com/.well-known/openid-configuration",
    ]


@pytest.mark.parametrize("issuer, reason", [
    ("http://auth.example.com", "insecure_endpoint"),
    ("https://auth.example.com?tenant=1", "malformed_metadata"),
    ("https://auth.example.com#x", "malformed_metadata"),
    ("auth.example.com", "malformed_metadata"),
])
def test_bad_issuers_are_refused(issuer: str, reason: str) -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        authorization_server_urls(issuer)
    assert caught.value.reason == reason


def test_loopback_issuers_may_be_plain_http() -> None:
    assert authorization_server_urls("http://127.0.0.1:9000")[0] == (
        "http://127.0.0.1:9000/.well-known/oauth-authorization-server")


def prm(**doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_protected_resource_metadata_accepted() -> None:
    got = parse_protected_resource(
        prm(resource=SERVER, authorization_servers=["https://a"], scopes_supported=["x", "y"]),
        url="https://mcp.example.com/prm", server_url=SERVER)
    assert got.resource == SERVER and got.authorization_servers == ("https://a",)
    assert got.scopes_supported == ("x", "y")


def test_protected_resource_metadata_for_a_parent_path_is_accepted() -> None:
    got = parse_protected_resource(
        prm(resource="https://mcp.example.com", authorization_servers=["https://a"]),
        url="https://mcp.example.com/prm", server_url=SERVER)
    assert got.resource == "https://mcp.example.com"  # sent as published


@pytest.mark.parametrize("doc, reason, says", [
    (prm(resource="https://evil.example.com/public/mcp", authorization_servers=["https://a"]),
     "resource_mismatch", "https://evil.example.com/public/mcp"),
    (prm(resource="https://mcp.example.com/other", authorization_servers=["https://a"]),
     "resource_mismatch", "https://mcp.example.com/other"),
    (prm(authorization_servers=["https://a"]), "resource_mismatch", "names no resource"),
    (prm(resource=SERVER), "no_authorization_server", "names no authorization server"),
    (prm(resource=SERVER, authorization_servers=[]), "no_authorization_server", "names no"),
    (prm(resource=SERVER, authorization_servers="https://a"), "malformed_metadata",
     "authorization_servers is not a list"),
    (prm(resource=SERVER, authorization_servers=["https://a"], scopes_supported="a b"),
     "malformed_metadata", "scopes_supported"),
    (b"{not json", "malformed_metadata", "is not a JSON object"),
    (b"[]", "malformed_metadata", "is not a JSON object"),
    (b"\xff\xfe", "malformed_metadata", "is not a JSON object"),
])
def test_protected_resource_metadata_refused(doc: bytes, reason: str, says: str) -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        parse_protected_resource(doc, url="https://mcp.example.com/prm", server_url=SERVER)
    assert caught.value.reason == reason
    assert says in str(caught.value) and "https://mcp.example.com/prm" in str(caught.value)


ISSUER = "https://auth.example.com/tenant1"


def asm(**overrides: Any) -> bytes:
    doc = {"issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/authorize",
           "token_endpoint": f"{ISSUER}/token", "registration_endpoint": f"{ISSUER}/register",
           "code_challenge_methods_supported": ["S256"],
           "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
           "scopes_supported": ["a", "offline_access"],
           "client_id_metadata_document_supported": True,
           "authorization_response_iss_parameter_supported": True}
    doc.update(overrides)
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def test_authorization_server_metadata_accepted() -> None:
    meta = parse_authorization_server(asm(), url="https://m", issuer=ISSUER)
    assert meta.token_endpoint == f"{ISSUER}/token"
    assert meta.client_id_metadata_document_supported
    assert meta.authorization_response_iss_parameter_supported
    assert meta.scopes_supported == ("a", "offline_access")
    assert check_code_flow(meta) == f"{ISSUER}/authorize"


@pytest.mark.parametrize("stated", [
    "https://attacker.example.com", ISSUER + "/", "HTTPS://auth.example.com/tenant1",
    "https://auth.example.com:443/tenant1", None])
def test_an_issuer_other_than_the_one_asked_is_refused_exactly(stated: str | None) -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        parse_authorization_server(asm(issuer=stated), url="https://m", issuer=ISSUER)
    assert caught.value.reason == "issuer_mismatch"
    assert caught.value.issuer == ISSUER and "https://m" in str(caught.value)


@pytest.mark.parametrize("overrides, reason", [
    ({"token_endpoint": None}, "malformed_metadata"),
    ({"token_endpoint": "http://auth.example.com/token"}, "insecure_endpoint"),
    ({"registration_endpoint": "http://auth.example.com/register"}, "insecure_endpoint"),
    ({"authorization_endpoint": 7}, "malformed_metadata"),
    ({"code_challenge_methods_supported": "S256"}, "malformed_metadata"),
])
def test_authorization_server_metadata_refused(overrides: dict[str, Any], reason: str) -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        parse_authorization_server(asm(**overrides), url="https://m", issuer=ISSUER)
    assert caught.value.reason == reason


@pytest.mark.parametrize("methods", [None, ["plain"], []])
def test_the_code_flow_needs_pkce_s256_advertised(methods: list[str] | None) -> None:
    meta = parse_authorization_server(asm(code_challenge_methods_supported=methods),
                                      url="https://m", issuer=ISSUER)
    with pytest.raises(AuthorizationFailed) as caught:
        check_code_flow(meta)
    assert caught.value.reason == "pkce_unsupported" and "S256" in str(caught.value)


def test_the_code_flow_needs_an_authorization_endpoint() -> None:
    meta = parse_authorization_server(asm(authorization_endpoint=None), url="https://m",
                                      issuer=ISSUER)
    with pytest.raises(AuthorizationFailed) as caught:
        check_code_flow(meta)
    assert caught.value.reason == "malformed_metadata"
