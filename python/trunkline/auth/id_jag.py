"""Enterprise-managed authorization (SEP-990, the MCP extension
``io.modelcontextprotocol/enterprise-managed-authorization``): the user's enterprise
identity provider, not the user, grants the host access to an MCP server. Pure: the
requests as forms, the answers parsed; ``OAuthClient`` sends them.

Two token requests, in order:

1. At the identity provider's token endpoint, an RFC 8693 token exchange of the user's
   ID token (from signing in to that provider) for an Identity Assertion JWT
   Authorization Grant (ID-JAG): ``grant_type`` token-exchange, ``requested_token_type``
   ``urn:ietf:params:oauth:token-type:id-jag``, ``subject_token`` the ID token with
   ``subject_token_type`` ``urn:ietf:params:oauth:token-type:id_token``, ``audience`` the
   MCP server's authorization server (its issuer identifier), ``resource`` the MCP
   server (RFC 8707, as its protected resource metadata names it), and ``scope`` when
   scopes are asked for. The host authenticates there as the client the provider knows
   it by (``IdentityProvider.client``).
2. At the MCP server's authorization server, the RFC 7523 JWT-bearer grant with the
   ID-JAG as ``assertion`` (``tokens.jwt_bearer_form``), authenticated as the client that
   server knows the host by.

Rules:

- The answer to step 1 is used only if it is a 200 JSON object whose
  ``issued_token_type`` is the ID-JAG type and whose ``access_token`` is the ID-JAG (RFC
  8693 §2.2.1 reuses that field name; its ``token_type`` is ``N_A``). Anything else is
  refused with an error saying what was wrong, never quoting the body; an OAuth error is
  quoted by its code and description only.
- The ID-JAG is a credential for its short life and goes only to the authorization
  server it names as its audience; the ID token only to the identity provider. Neither
  is stored: a renewal runs both steps again with the ID token the source gives then.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AuthorizationFailed
from .answers import json_object, oauth_error
from .registration import PreRegisteredClient
from .scopes import scope_param
from .secret import Secret
from .workload import JwtSource

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"


@dataclass(frozen=True)
class IdentityProvider:
    """The enterprise identity provider that issues ID-JAGs for the host's user."""

    #: Its issuer identifier (its metadata is discovered from it).
    issuer: str
    #: How the host is registered there (a client secret, if any, goes only to it).
    client: PreRegisteredClient
    #: The user's ID token from that provider (read each time an ID-JAG is asked for).
    id_token: JwtSource
    #: Its token endpoint, when its metadata should not be discovered.
    token_endpoint: str | None = None


def token_exchange_form(id_token: Secret, *, audience: str, resource: str,
                        scope: tuple[str, ...] | None) -> dict[str, str]:
    """Step 1's request (without the client's authentication)."""
    form = {"grant_type": TOKEN_EXCHANGE_GRANT, "requested_token_type": ID_JAG_TYPE,
            "subject_token": id_token.reveal(), "subject_token_type": ID_TOKEN_TYPE,
            "audience": audience, "resource": resource}
    if (text := scope_param(scope)) is not None:
        form["scope"] = text
    return form


def parse_id_jag(status: int, body: bytes, *, endpoint: str, issuer: str) -> Secret:
    """The ID-JAG an identity provider's token exchange answer carries."""
    if status != 200:
        code, text = oauth_error(body)
        reason = "token_refused" if code is not None and 400 <= status < 500 \
            else "token_endpoint_failed"
        raise AuthorizationFailed(
            f"the identity provider's token endpoint {endpoint} refused the token exchange "
            f"(HTTP {status}){': ' + text if text else ''}", reason=reason, issuer=issuer)
    doc = json_object(body)
    if doc is None:
        raise AuthorizationFailed(
            f"the identity provider's token endpoint {endpoint} answered 200 with something "
            "other than a JSON object", reason="malformed_response", issuer=issuer)
    issued = doc.get("issued_token_type")
    if issued != ID_JAG_TYPE:
        raise AuthorizationFailed(
            f"the identity provider's token endpoint {endpoint} issued "
            f"{str(issued)[:80]!r}, not an ID-JAG ({ID_JAG_TYPE})",
            reason="malformed_response", issuer=issuer)
    grant = doc.get("access_token")
    if not isinstance(grant, str) or not grant:
        raise AuthorizationFailed(
            f"the identity provider's token endpoint {endpoint} answered without the ID-JAG "
            "(access_token)", reason="malformed_response", issuer=issuer)
    return Secret(grant)
