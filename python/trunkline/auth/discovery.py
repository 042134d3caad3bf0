"""Where a server's authorization metadata lives, and whether a document may be used.
Pure: the driver fetches the URLs in the order given here and hands the bodies back.

Protected resource metadata (RFC 9728), in this order:

1. the ``resource_metadata`` URL of the server's ``WWW-Authenticate`` challenge;
2. the path-aware well-known URI: ``/.well-known/oauth-protected-resource`` inserted
   between the host and the server's path (``https://h/public/mcp`` ->
   ``https://h/.well-known/oauth-protected-resource/public/mcp``), for a server with a path;
3. the root well-known URI ``https://h/.well-known/oauth-protected-resource``.

Authorization server metadata for an issuer, in the order of the MCP specification
(RFC 8414 §3.1 and §5, OpenID Connect Discovery 1.0): for an issuer with a path
(``https://a/tenant1``) the OAuth URI with the path inserted, the OpenID URI with the path
inserted, then the OpenID URI appended to the path; for one without a path the OAuth URI,
then the OpenID URI.

A location that answers with anything but a 200 and a JSON object is passed over for the
next one (the driver records why, for the error if none is usable). A document that is
there but lies is refused at once, and no token is ever obtained from it:

- protected resource metadata whose ``resource`` is missing or does not identify the
  server (``resource.covers``), or that names no authorization server;
- authorization server metadata whose ``issuer`` is not, character for character, the
  issuer its URL was built from (RFC 8414 §3.3, no normalization), or that lacks a token
  endpoint;
- an issuer, or an endpoint that will receive a secret, that is not https (plain http
  only to loopback);
- for the authorization code flow: metadata without an authorization endpoint, or without
  ``S256`` in ``code_challenge_methods_supported`` (the client must verify PKCE support and
  refuse to proceed without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import AuthorizationFailed
from .answers import json_object
from .resource import covers, secure_transport

PRM_SUFFIX = "/.well-known/oauth-protected-resource"
OAUTH_SUFFIX = "/.well-known/oauth-authorization-server"
OPENID_SUFFIX = "/.well-known/openid-configuration"


@dataclass(frozen=True)
class ProtectedResource:
    """A validated protected resource metadata document."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    url: str  # where it was read
    #: A stand-in for a 2025-03-26 server that has none (``legacy.stand_in_resource``).
    legacy: bool = False


@dataclass(frozen=True)
class AuthServerMetadata:
    """A validated authorization server metadata document."""

    issuer: str
    token_endpoint: str
    authorization_endpoint: str | None
    registration_endpoint: str | None
    scopes_supported: tuple[str, ...] | None
    code_challenge_methods_supported: tuple[str, ...] | None
    token_endpoint_auth_methods_supported: tuple[str, ...] | None
    client_id_metadata_document_supported: bool
    #: RFC 9207 §3: the redirect then MUST carry ``iss``.
    authorization_response_iss_parameter_supported: bool
    url: str  # where it was read
    #: RFC 9449 §5.1: the algorithms it accepts DPoP proofs signed with.
    dpop_signing_alg_values_supported: tuple[str, ...] | None = None


def protected_resource_urls(server_url: str, challenge_url: str | None) -> list[str]:
    """The protected resource metadata locations to try for a server, in order."""
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/")
    urls = [challenge_url] if challenge_url else []
    if path:
        urls.append(urlunsplit((parts.scheme, parts.netloc, PRM_SUFFIX + path, parts.query, "")))
    urls.append(urlunsplit((parts.scheme, parts.netloc, PRM_SUFFIX, "", "")))
    return list(dict.fromkeys(urls))  # a challenge URL that is a well-known one: once


def authorization_server_urls(issuer: str) -> list[str]:
    """The metadata locations to try for an issuer, in the specified order."""
    check_issuer(issuer)
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(new_path: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, new_path, "", ""))

    if path:
        return [at(OAUTH_SUFFIX + path), at(OPENID_SUFFIX + path), at(path + OPENID_SUFFIX)]
    return [at(OAUTH_SUFFIX), at(OPENID_SUFFIX)]


def check_issuer(issuer: str) -> None:
    """An issuer identifier is an https URL without query or fragment (RFC 8414 §2)."""
    parts = urlsplit(issuer) if isinstance(issuer, str) else None
    if parts is None or not parts.hostname or parts.query or parts.fragment:
        raise _refused("malformed_metadata", f"authorization server {issuer!r} is not an "
                       "issuer identifier (an https URL without query or fragment)")
    if not secure_transport(issuer):
        raise _refused("insecure_endpoint", f"authorization server {issuer!r} is not https "
                       "(plain http is accepted for loopback hosts only)", issuer=issuer)


def parse_protected_resource(body: bytes, *, url: str, server_url: str) -> ProtectedResource:
    """Validate a protected resource metadata document read from ``url``."""
    doc = _json_object(body, f"protected resource metadata at {url}")
    resource = doc.get("resource")
    if not isinstance(resource, str) or not resource:
        raise _refused("resource_mismatch", f"protected resource metadata at {url} names no "
                       "resource, so it cannot be shown to be this server's; refused")
    if not covers(resource, server_url):
        raise _refused("resource_mismatch", f"protected resource metadata at {url} is for "
                       f"resource {resource!r}, not this server ({server_url}); refused, no "
                       "token is requested for it")
    servers = _strings(doc, "authorization_servers", url)
    if not servers:
        raise _refused("no_authorization_server", f"protected resource metadata at {url} "
                       "names no authorization server")
    return ProtectedResource(resource=resource, authorization_servers=servers,
                             scopes_supported=_strings(doc, "scopes_supported", url), url=url)


def parse_authorization_server(body: bytes, *, url: str, issuer: str) -> AuthServerMetadata:
    """Validate authorization server metadata read from ``url``, one of
    ``authorization_server_urls(issuer)``."""
    doc = _json_object(body, f"authorization server metadata at {url}")
    stated = doc.get("issuer")
    if stated != issuer:
        raise _refused("issuer_mismatch", f"authorization server metadata at {url} states "
                       f"issuer {stated!r}, not {issuer!r} whose metadata was asked for "
                       "(RFC 8414 §3.3: compared exactly); refused", issuer=issuer)
    token_endpoint = doc.get("token_endpoint")
    if not isinstance(token_endpoint, str) or not token_endpoint:
        raise _refused("malformed_metadata", f"authorization server metadata at {url} has "
                       "no token_endpoint", issuer=issuer)
    endpoints = {name: doc.get(name) for name in
                 ("token_endpoint", "authorization_endpoint", "registration_endpoint")}
    for name, value in endpoints.items():
        if value is None:
            continue
        if not isinstance(value, str) or not urlsplit(value).hostname:
            raise _refused("malformed_metadata", f"authorization server metadata at {url}: "
                           f"{name} is not a URL", issuer=issuer)
        if not secure_transport(value):
            raise _refused("insecure_endpoint", f"authorization server metadata at {url}: "
                           f"{name} {value} is not https (plain http only to loopback)",
                           issuer=issuer)
    return AuthServerMetadata(
        issuer=issuer,
        token_endpoint=token_endpoint,
        authorization_endpoint=endpoints["authorization_endpoint"],
        registration_endpoint=endpoints["registration_endpoint"],
        scopes_supported=_strings(doc, "scopes_supported", url),
        code_challenge_methods_supported=_strings(doc, "code_challenge_methods_supported", url),
        token_endpoint_auth_methods_supported=_strings(
            doc, "token_endpoint_auth_methods_supported", url),
        client_id_metadata_document_supported=(
            doc.get("client_id_metadata_document_supported") is True),
        dpop_signing_alg_values_supported=_strings(doc, "dpop_signing_alg_values_supported",
                                                   url),
        authorization_response_iss_parameter_supported=(
            doc.get("authorization_response_iss_parameter_supported") is True),
        url=url,
    )


def check_code_flow(meta: AuthServerMetadata) -> str:
    """The authorization endpoint, if this server can run the authorization code flow
    with PKCE S256; otherwise the refusal."""
    if "S256" not in (meta.code_challenge_methods_supported or ()):
        advertised = meta.code_challenge_methods_supported
        raise _refused("pkce_unsupported", f"authorization server {meta.issuer} does not "
                       f"advertise PKCE S256 (code_challenge_methods_supported: {advertised!r} "
                       f"in {meta.url}); refusing to authorize without it", issuer=meta.issuer)
    if not meta.authorization_endpoint:
        raise _refused("malformed_metadata", f"authorization server metadata at {meta.url} "
                       "has no authorization_endpoint", issuer=meta.issuer)
    return meta.authorization_endpoint


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    doc = json_object(body)
    if doc is None:
        raise _refused("malformed_metadata", f"{what} is not a JSON object")
    return doc


def _strings(doc: dict[str, Any], name: str, url: str) -> tuple[str, ...] | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _refused("malformed_metadata", f"metadata at {url}: {name} is not a list of "
                       "strings")
    return tuple(value)


def _refused(reason: str, message: str, *, issuer: str | None = None) -> AuthorizationFailed:
    return AuthorizationFailed(message, reason=reason, issuer=issuer)
