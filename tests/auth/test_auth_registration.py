"""Client identity in the specified order, issuer binding, token endpoint authentication."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from trunkline.auth.discovery import AuthServerMetadata
from trunkline.auth.registration import (
    BASIC,
    CONFIGURED,
    METADATA_DOCUMENT,
    NONE,
    POST,
    REGISTERED,
    ClientIdentity,
    ClientSettings,
    PreRegisteredClient,
    Registration,
    choose_identity,
    client_authentication,
    parse_registration,
    token_auth_method,
)
from trunkline.auth.secret import Secret
from trunkline.errors import AuthorizationFailed, ConfigurationError

AS1 = "https://as1.example.com"
AS2 = "https://as2.example.com"
CIMD = "https://client.example.com/metadata.json"


def meta(issuer: str = AS1, **overrides: Any) -> AuthServerMetadata:
    base = AuthServerMetadata(
        issuer=issuer, token_endpoint=f"{issuer}/token",
        authorization_endpoint=f"{issuer}/authorize",
        registration_endpoint=f"{issuer}/register", scopes_supported=None,
        code_challenge_methods_supported=("S256",),
        token_endpoint_auth_methods_supported=("none", "client_secret_basic"),
        client_id_metadata_document_supported=False,
        authorization_response_iss_parameter_supported=False, url=f"{issuer}/.well-known/x")
    return dataclasses.replace(base, **overrides)


SETTINGS = ClientSettings(client_name="host", redirect_uri="http://127.0.0.1/cb",
                          metadata_document_url=CIMD)
CONFIG = PreRegisteredClient(client_id="pre", client_secret=Secret("pre-secret"))


def registered(issuer: str = AS1) -> ClientIdentity:
    return ClientIdentity(client_id=f"dcr-{issuer}", client_secret=Secret("dcr-secret"),
                          auth_method=BASIC, issuer=issuer, source=REGISTERED)


def test_configured_credentials_come_first() -> None:
    got = choose_identity(meta(client_id_metadata_document_supported=True), settings=SETTINGS,
                          configured=CONFIG, held=registered())
    assert isinstance(got, ClientIdentity)
    assert (got.client_id, got.source, got.issuer, got.auth_method) == (
        "pre", CONFIGURED, AS1, BASIC)


def test_then_a_registration_already_held_with_this_issuer() -> None:
    held = registered()
    got = choose_identity(meta(client_id_metadata_document_supported=True), settings=SETTINGS,
                          configured=None, held=held)
    assert got is held


def test_then_a_client_id_metadata_document_where_advertised() -> None:
    got = choose_identity(meta(client_id_metadata_document_supported=True), settings=SETTINGS,
                          configured=None, held=None)
    assert isinstance(got, ClientIdentity)
    assert (got.client_id, got.source, got.auth_method, got.client_secret) == (
        CIMD, METADATA_DOCUMENT, NONE, None)


def test_no_metadata_document_without_the_servers_support_or_our_url() -> None:
    got = choose_identity(meta(), settings=SETTINGS, configured=None, held=None)
    assert isinstance(got, Registration)
    got = choose_identity(meta(client_id_metadata_document_supported=True),
                          settings=ClientSettings(), configured=None, held=None)
    assert isinstance(got, Registration)


def test_then_dynamic_registration_with_application_type_and_refresh_grant() -> None:
    got = choose_identity(meta(), settings=SETTINGS, configured=None, held=None)
    assert isinstance(got, Registration)
    assert got.endpoint == f"{AS1}/register" and got.issuer == AS1
    assert got.metadata == {
        "client_name": "host", "redirect_uris": ["http://127.0.0.1/cb"],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none", "application_type": "native"}


@pytest.mark.parametrize("supported, asked", [
    (("client_secret_post",), POST), (("client_secret_basic", "client_secret_post"), BASIC),
    (None, BASIC), (("private_key_jwt",), NONE)])
def test_registration_asks_for_a_method_the_server_takes(supported: tuple[str, ...] | None,
                                                         asked: str) -> None:
    got = choose_identity(meta(token_endpoint_auth_methods_supported=supported),
                          settings=SETTINGS, configured=None, held=None)
    assert isinstance(got, Registration)
    assert got.metadata["token_endpoint_auth_method"] == asked


def test_otherwise_an_error_saying_what_to_configure() -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        choose_identity(meta(registration_endpoint=None), settings=SETTINGS, configured=None,
                        held=None)
    assert caught.value.reason == "no_client_identity"
    assert "configure its client_id" in str(caught.value) and AS1 in str(caught.value)
    with pytest.raises(AuthorizationFailed) as caught:
        choose_identity(meta(registration_endpoint=None,
                             client_id_metadata_document_supported=True),
                        settings=ClientSettings(), configured=None, held=None)
    assert "metadata document URL" in str(caught.value)


def test_a_registration_with_another_issuer_is_never_reused() -> None:
    got = choose_identity(meta(AS2), settings=SETTINGS, configured=None, held=registered(AS1))
    assert isinstance(got, Registration) and got.issuer == AS2
    assert "dcr-" not in json.dumps(got.metadata)


def test_configured_credentials_for_another_issuer_are_refused() -> None:
    config = dataclasses.replace(CONFIG, issuer=AS1)
    assert isinstance(choose_identity(meta(AS1), settings=SETTINGS, configured=config,
                                      held=None), ClientIdentity)
    with pytest.raises(AuthorizationFailed) as caught:
        choose_identity(meta(AS2), settings=SETTINGS, configured=config, held=None)
    assert caught.value.reason == "issuer_changed" and AS2 in str(caught.value)
    assert "pre-secret" not in str(caught.value)


def test_configured_credentials_without_an_issuer_bind_to_the_first_one_used() -> None:
    first = choose_identity(meta(AS1), settings=SETTINGS, configured=CONFIG, held=None)
    assert isinstance(first, ClientIdentity) and first.issuer == AS1
    with pytest.raises(AuthorizationFailed) as caught:
        choose_identity(meta(AS2), settings=SETTINGS, configured=CONFIG, held=first)
    assert caught.value.reason == "issuer_changed"


def test_a_newly_configured_client_is_not_bound_by_the_old_ones_issuer() -> None:
    first = choose_identity(meta(AS1), settings=SETTINGS, configured=CONFIG, held=None)
    assert isinstance(first, ClientIdentity)
    replacement = PreRegisteredClient(client_id="pre-2", client_secret=Secret("s2"))
    got = choose_identity(meta(AS2), settings=SETTINGS, configured=replacement, held=first)
    assert isinstance(got, ClientIdentity) and (got.client_id, got.issuer) == ("pre-2", AS2)


def test_registration_answers() -> None:
    request = choose_identity(meta(), settings=SETTINGS, configured=None, held=None)
    assert isinstance(request, Registration)
    body = json.dumps({"client_id": "c1", "client_secret": "s1",
                       "token_endpoint_auth_method": "client_secret_post"}).encode()
    got = parse_registration(201, body, request, meta())
    assert (got.client_id, got.auth_method, got.issuer, got.source) == ("c1", POST, AS1,
                                                                         REGISTERED)
    assert got.client_secret == Secret("s1")
    # No method in the answer: what was asked for ("none") stands, and the secret the
    # server sent anyway is not kept, so it is never sent.
    got = parse_registration(200, json.dumps({"client_id": "c2", "client_secret": "s2"}).encode(),
                             request, meta())
    assert (got.auth_method, got.client_secret) == (NONE, None)


@pytest.mark.parametrize("status, body, reason, says", [
    (400, b'{"error": "invalid_redirect_uri", "error_description": "no loopback"}',
     "registration_refused", "invalid_redirect_uri (no loopback)"),
    (500, b"<html>oops</html>", "registration_refused", "HTTP 500"),
    (201, b"<html>oops</html>", "malformed_response", "without a client_id"),
    (201, b'{"client_secret": "s"}', "malformed_response", "without a client_id"),
    # A registered client has no private key (this host publishes no JWKS).
    (201, b'{"client_id": "c", "token_endpoint_auth_method": "private_key_jwt"}',
     "no_private_key", "private_key_jwt"),
    (201, b'{"client_id": "c", "token_endpoint_auth_method": "tls_client_auth"}',
     "unsupported_auth_method", "tls_client_auth"),
    (201, b'{"client_id": "c", "token_endpoint_auth_method": "client_secret_basic"}',
     "no_client_secret", "no client secret"),
])
def test_registration_answers_refused(status: int, body: bytes, reason: str, says: str) -> None:
    request = choose_identity(meta(), settings=SETTINGS, configured=None, held=None)
    assert isinstance(request, Registration)
    with pytest.raises(AuthorizationFailed) as caught:
        parse_registration(status, body, request, meta())
    assert caught.value.reason == reason and says in str(caught.value)
    assert "oops" not in str(caught.value)


@pytest.mark.parametrize("declared, has_secret, supported, expected", [
    (BASIC, True, ("none",), BASIC),
    (POST, True, None, POST),
    (NONE, True, None, NONE),
    (None, False, ("client_secret_basic",), NONE),
    (None, True, None, BASIC),
    (None, True, ("client_secret_post", "client_secret_basic"), BASIC),
    (None, True, ("client_secret_post",), POST),
    (None, True, ("none",), NONE),
    (None, True, ("private_key_jwt",), BASIC),
])
def test_token_auth_method(declared: str | None, has_secret: bool,
                           supported: tuple[str, ...] | None, expected: str) -> None:
    assert token_auth_method(declared, has_secret, supported, AS1) == expected


def identity(method: str, secret: str | None = "s3cr:t &") -> ClientIdentity:
    return ClientIdentity(client_id="id:1 x", client_secret=Secret(secret) if secret else None,
                          auth_method=method, issuer=AS1, source=CONFIGURED)


def test_client_secret_basic_form_encodes_each_part() -> None:
    headers, fields = client_authentication(identity(BASIC), AS1, now=0)
    assert fields == {}
    raw = base64.b64decode(headers["Authorization"].removeprefix("Basic ")).decode()
    assert raw == "id%3A1+x:s3cr%3At+%26"


def test_client_secret_post_and_none() -> None:
    assert client_authentication(identity(POST), AS1, now=0) == (
        {}, {"client_id": "id:1 x", "client_secret": "s3cr:t &"})
    assert client_authentication(identity(NONE, None), AS1, now=0) == ({}, {"client_id": "id:1 x"})


def test_credentials_go_to_their_own_issuer_only() -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        client_authentication(identity(BASIC), AS2, now=0)
    assert caught.value.reason == "issuer_changed" and "s3cr" not in str(caught.value)


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        ClientSettings(application_type="desktop")
    for url in ("http://client.example.com/m.json", "https://client.example.com",
                "https://client.example.com/"):
        with pytest.raises(ConfigurationError):
            ClientSettings(metadata_document_url=url)


def test_identities_survive_the_store_format() -> None:
    for ident in (identity(BASIC), identity(NONE, None)):
        assert ClientIdentity.from_json(json.loads(json.dumps(ident.to_json()))) == ident
