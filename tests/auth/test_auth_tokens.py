"""Token responses: absolute expiry, refusals with clear errors, refresh timing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trunkline.auth.secret import Secret
from trunkline.auth.tokens import (
    Token,
    client_credentials_form,
    parse_token_response,
    refresh_form,
)
from trunkline.errors import AuthorizationFailed

ISSUER = "https://auth.example.com"
ENDPOINT = f"{ISSUER}/token"
RESOURCE = "https://mcp.example.com/mcp"
NOW = 1_800_000_000.0


def parse(body: Any, status: int = 200, previous: Token | None = None,
          asked: tuple[str, ...] | None = ("a",)) -> Token:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_token_response(status, raw, now=NOW, endpoint=ENDPOINT, issuer=ISSUER,
                                resource=RESOURCE, asked_scope=asked, previous=previous)


def test_a_token_with_an_absolute_expiry() -> None:
    token = parse({"access_token": "at-1", "token_type": "Bearer", "expires_in": 3600,
                   "refresh_token": "rt-1", "scope": "a b"})
    assert token.expires_at == NOW + 3600 and token.issued_at == NOW
    assert token.refresh_token == Secret("rt-1") and token.scope == ("a", "b")
    assert (token.issuer, token.resource) == (ISSUER, RESOURCE)
    assert token.authorization() == "Bearer at-1"


@pytest.mark.parametrize("token_type", ["bearer", "BEARER"])
def test_token_type_is_case_insensitive(token_type: str) -> None:
    assert parse({"access_token": "x", "token_type": token_type}).authorization() == "Bearer x"


def test_a_numeric_string_lifetime_and_none() -> None:
    assert parse({"access_token": "x", "token_type": "Bearer",
                  "expires_in": " 60 "}).expires_at == NOW + 60
    assert parse({"access_token": "x", "token_type": "Bearer"}).expires_at is None


def test_without_scope_the_token_has_the_scope_asked_for() -> None:
    assert parse({"access_token": "x", "token_type": "Bearer"}, asked=("m", "n")).scope == (
        "m", "n")


def test_a_refresh_without_a_new_refresh_token_keeps_the_old_one() -> None:
    old = parse({"access_token": "x", "token_type": "Bearer", "refresh_token": "rt-old"})
    new = parse({"access_token": "y", "token_type": "Bearer"}, previous=old)
    assert new.refresh_token == Secret("rt-old")
    rotated = parse({"access_token": "z", "token_type": "Bearer", "refresh_token": "rt-new"},
                    previous=old)
    assert rotated.refresh_token == Secret("rt-new")


@pytest.mark.parametrize("body, reason, says", [
    (b"<html>access_token=leak</html>", "malformed_response", "something other than a JSON"),
    ({"token_type": "Bearer"}, "malformed_response", "without an access_token"),
    ({"access_token": "leak"}, "malformed_response", "without a token_type"),
    ({"access_token": "leak", "token_type": "DPoP"}, "unsupported_token_type",
     "DPoP token to a request without a DPoP proof"),
    ({"access_token": "leak", "token_type": "MAC"}, "unsupported_token_type", "'MAC'"),
    ({"access_token": "leak", "token_type": "Bearer", "expires_in": -1}, "malformed_response",
     "expires_in"),
    ({"access_token": "leak", "token_type": "Bearer", "expires_in": "soon"},
     "malformed_response", "expires_in"),
    ({"access_token": "leak", "token_type": "Bearer", "expires_in": True},
     "malformed_response", "expires_in"),
    ({"access_token": "leak", "token_type": "Bearer", "expires_in": float("inf")},
     "malformed_response", "expires_in"),
])
def test_bad_token_answers_are_refused_without_quoting_them(body: Any, reason: str,
                                                            says: str) -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        parse(body)
    assert caught.value.reason == reason and says in str(caught.value)
    assert "leak" not in str(caught.value) and ENDPOINT in str(caught.value)


def test_an_oauth_error_is_quoted_by_code_and_description() -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        parse({"error": "invalid_grant", "error_description": "refresh token expired",
               "access_token": "leak"}, status=400)
    assert caught.value.reason == "token_refused"
    assert "invalid_grant (refresh token expired)" in str(caught.value)
    assert "leak" not in str(caught.value)


def test_other_failures_are_not_refusals() -> None:
    for status, body in ((500, b"oops"), (503, b'{"error": "temporarily_unavailable"}'),
                         (400, b"not json")):
        with pytest.raises(AuthorizationFailed) as caught:
            parse(body, status=status)
        assert caught.value.reason == "token_endpoint_failed" and f"HTTP {status}" in str(
            caught.value)


def token(issued: float, expires: float | None) -> Token:
    return Token(access_token=Secret("a"), issued_at=issued, expires_at=expires,
                 refresh_token=None, scope=None, issuer=ISSUER, resource=RESOURCE)


def test_refresh_is_due_a_margin_before_expiry() -> None:
    t = token(0, 3600)
    assert not t.refresh_due(3539, margin_s=60)
    assert t.refresh_due(3540, margin_s=60)
    assert not t.expired(3599) and t.expired(3600)


def test_a_short_lived_token_is_due_halfway() -> None:
    t = token(0, 30)
    assert not t.refresh_due(14.9, margin_s=60)
    assert t.refresh_due(15, margin_s=60)


def test_a_token_without_lifetime_is_never_due() -> None:
    assert not token(0, None).refresh_due(1e12, margin_s=60)
    assert not token(0, None).expired(1e12)


def test_forms_carry_the_resource() -> None:
    t = parse({"access_token": "x", "token_type": "Bearer", "refresh_token": "rt"})
    assert refresh_form(t) == {"grant_type": "refresh_token", "refresh_token": "rt",
                               "resource": RESOURCE}
    assert client_credentials_form(RESOURCE, ("a", "b")) == {
        "grant_type": "client_credentials", "resource": RESOURCE, "scope": "a b"}
    assert "scope" not in client_credentials_form(RESOURCE, None)
    with pytest.raises(ValueError):
        refresh_form(token(0, None))


def test_tokens_survive_the_store_format_with_their_absolute_expiry() -> None:
    t = parse({"access_token": "x", "token_type": "Bearer", "expires_in": 10,
               "refresh_token": "rt", "scope": "a"})
    assert Token.from_json(json.loads(json.dumps(t.to_json()))) == t
    bare = parse({"access_token": "x", "token_type": "Bearer"}, asked=None)
    assert Token.from_json(json.loads(json.dumps(bare.to_json()))) == bare
