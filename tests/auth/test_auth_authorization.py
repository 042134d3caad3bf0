"""The authorization request, and every check on the redirect that answers it."""

from __future__ import annotations

import dataclasses
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from trunkline.auth.authorization import (
    AuthorizationRequest,
    authorization_code,
    authorization_request,
)
from trunkline.auth.discovery import AuthServerMetadata
from trunkline.auth.pkce import s256
from trunkline.auth.registration import NONE, REGISTERED, ClientIdentity
from trunkline.errors import AuthorizationFailed

ISSUER = "https://auth.example.com"
REDIRECT = "http://127.0.0.1:4321/callback"
META = AuthServerMetadata(
    issuer=ISSUER, token_endpoint=f"{ISSUER}/token",
    authorization_endpoint=f"{ISSUER}/authorize?tenant=a", registration_endpoint=None,
    scopes_supported=None, code_challenge_methods_supported=("S256",),
    token_endpoint_auth_methods_supported=None, client_id_metadata_document_supported=False,
    authorization_response_iss_parameter_supported=True, url=f"{ISSUER}/.well-known/x")
CLIENT = ClientIdentity(client_id="client-1", client_secret=None, auth_method=NONE,
                        issuer=ISSUER, source=REGISTERED)


def request(meta: AuthServerMetadata = META,
            scope: tuple[str, ...] | None = ("a", "b")) -> AuthorizationRequest:
    return authorization_request(meta, CLIENT, redirect_uri=REDIRECT,
                                 resource="https://mcp.example.com/mcp", scope=scope)


def test_the_authorization_url() -> None:
    req = request()
    parts = urlsplit(req.url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "auth.example.com", "/authorize")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query == {
        "tenant": "a", "response_type": "code", "client_id": "client-1",
        "redirect_uri": REDIRECT, "code_challenge": s256(req.pkce.verifier.reveal()),
        "code_challenge_method": "S256", "state": req.state,
        "resource": "https://mcp.example.com/mcp", "scope": "a b"}
    assert req.issuer == ISSUER and req.iss_required
    assert req.pkce.verifier.reveal() not in req.url


def test_no_scope_parameter_when_there_is_no_scope() -> None:
    assert "scope=" not in request(scope=None).url


def landed(req: AuthorizationRequest, base: str = REDIRECT, **params: str) -> str:
    values = {"code": "the-code", "state": req.state, "iss": ISSUER}
    values.update(params)
    return base + "?" + urlencode({k: v for k, v in values.items() if v != "-"})


def test_a_good_redirect_gives_the_code() -> None:
    req = request()
    assert authorization_code(req, landed(req)).reveal() == "the-code"


def test_any_port_on_a_loopback_redirect() -> None:
    req = request()
    assert authorization_code(req, landed(req, "http://127.0.0.1:9999/callback")).reveal()


def refused(req: AuthorizationRequest, url: str) -> AuthorizationFailed:
    with pytest.raises(AuthorizationFailed) as caught:
        authorization_code(req, url)
    assert "the-code" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("iss", ["https://evil.example.com", ISSUER + "/",
                                 "HTTPS://auth.example.com", "https://auth.example.com:443",
                                 "https://auth.example.com%2F", ""])
def test_an_iss_other_than_the_recorded_issuer_is_refused(iss: str) -> None:
    req = request()
    assert refused(req, landed(req, iss=iss)).reason == "iss_mismatch"


def test_an_iss_mismatch_is_refused_before_the_error_is_looked_at() -> None:
    req = request()
    exc = refused(req, landed(req, iss="https://evil.example.com", error="access_denied",
                              code="-"))
    assert exc.reason == "iss_mismatch" and "access_denied" not in str(exc)


def test_an_unadvertised_iss_is_still_compared() -> None:
    req = request(dataclasses.replace(META, authorization_response_iss_parameter_supported=False))
    assert refused(req, landed(req, iss="https://evil.example.com")).reason == "iss_mismatch"
    assert authorization_code(req, landed(req)).reveal() == "the-code"


def test_a_missing_iss_is_refused_only_when_advertised() -> None:
    req = request()
    assert refused(req, landed(req, iss="-")).reason == "iss_missing"
    req = request(dataclasses.replace(META, authorization_response_iss_parameter_supported=False))
    assert authorization_code(req, landed(req, iss="-")).reveal() == "the-code"


@pytest.mark.parametrize("state", ["-", "", "someone-elses"])
def test_a_wrong_or_missing_state_is_refused(state: str) -> None:
    req = request()
    assert refused(req, landed(req, state=state)).reason == "state_mismatch"


def test_an_error_is_the_servers_refusal() -> None:
    req = request()
    exc = refused(req, landed(req, code="-", error="access_denied",
                              error_description="the user said no"))
    assert exc.reason == "authorization_denied" and "access_denied (the user said no)" in str(exc)


def test_a_redirect_without_a_code_is_refused() -> None:
    req = request()
    assert refused(req, landed(req, code="-")).reason == "malformed_redirect"
    assert refused(req, landed(req, code="")).reason == "malformed_redirect"


def test_a_repeated_parameter_is_refused() -> None:
    req = request()
    exc = refused(req, landed(req) + "&code=other")
    assert exc.reason == "malformed_redirect" and "code" in str(exc)


@pytest.mark.parametrize("base", ["http://127.0.0.1:4321/elsewhere", "https://127.0.0.1:4321/callback",
                                  "http://evil.example.com:4321/callback"])
def test_a_redirect_elsewhere_is_refused(base: str) -> None:
    req = request()
    assert refused(req, landed(req, base)).reason == "redirect_mismatch"


def test_the_code_flow_is_refused_without_pkce_s256() -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        request(dataclasses.replace(META, code_challenge_methods_supported=("plain",)))
    assert caught.value.reason == "pkce_unsupported"
