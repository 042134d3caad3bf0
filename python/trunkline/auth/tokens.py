"""Token requests and responses (OAuth 2.1 §3.2, §4.1.3, §4.3, RFC 6749 §4.4), and when a
token is due for refresh. Pure: ``now`` is passed in.

Rules:

- Every token request carries the RFC 8707 ``resource`` the token is for: the code
  exchange, the refresh and the client credentials grant alike.
- A token response is used only if it is a 200 with a JSON object carrying an
  ``access_token`` and a ``token_type`` of ``Bearer`` (any case). Anything else is refused
  with an error saying what was wrong and never quoting the body; an OAuth error answer is
  quoted by its ``error`` code and description only (reason ``token_refused``; other
  failures, such as a 5xx or a page that is not JSON, are ``token_endpoint_failed``).
- A token requested with a DPoP proof (RFC 9449 §5) may come back as ``token_type`` ``DPoP``:
  it is then bound to the proof's key, which it keeps (``dpop_key``), and it is presented
  as ``DPoP <token>`` with a proof of that key; a server that answers ``Bearer`` to a proof
  issued an unbound token, used as any other. ``DPoP`` without a proof is refused.
- The expiry is stored ABSOLUTE (``expires_at`` = the time the answer arrived +
  ``expires_in``), so a token read back from the store after a restart is known to be
  fresh, due or expired without asking anyone, and a due token with a refresh token is
  refreshed instead of sending the user through authorization again.
- A refresh answer without a new ``refresh_token`` keeps the old one (RFC 6749 §6);
  without ``scope`` the token has the scope that was asked for (RFC 6749 §5.1).
- A token is due ``margin_s`` before it expires, or halfway through its life if that is
  sooner (a 30-second token is not refreshed at once and forever). A token without
  ``expires_in`` is never due: the server's 401 says when it is done.
- Tokens are filed with the issuer that issued them and the resource they are for; a
  refresh token goes only to its own issuer's token endpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import AuthorizationFailed
from .answers import json_object, oauth_error
from .authorization import AuthorizationRequest
from .scopes import scope_param
from .secret import Secret

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclass(frozen=True)
class Token:
    """An access token with what it takes to use and renew it."""

    access_token: Secret
    issued_at: float
    #: Seconds since the epoch; ``None`` when the server gave no lifetime.
    expires_at: float | None
    refresh_token: Secret | None
    #: Granted, or asked for when the server did not say.
    scope: tuple[str, ...] | None
    issuer: str
    resource: str
    #: A DPoP-bound token's proof key (``dpop``; its private JWK), else ``None``.
    dpop_key: Secret | None = None

    def authorization(self) -> str:
        """The ``Authorization`` header value that presents this token."""
        return ("DPoP " if self.dpop_key is not None else "Bearer ") \
            + self.access_token.reveal()

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def refresh_at(self, margin_s: float) -> float | None:
        """When to renew it: ``margin_s`` before it expires (at most half its lifetime
        before); ``None`` for a token without a lifetime."""
        if self.expires_at is None:
            return None
        lifetime = max(self.expires_at - self.issued_at, 0.0)
        return self.expires_at - min(margin_s, lifetime / 2)

    def refresh_due(self, now: float, margin_s: float) -> bool:
        due = self.refresh_at(margin_s)
        return due is not None and now >= due

    def to_json(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token.reveal(),
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "refresh_token": self.refresh_token.reveal() if self.refresh_token else None,
            "scope": list(self.scope) if self.scope is not None else None,
            "issuer": self.issuer,
            "resource": self.resource,
            **({"dpop_key": self.dpop_key.reveal()} if self.dpop_key is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Token:
        refresh, scope, expires = doc.get("refresh_token"), doc.get("scope"), doc.get("expires_at")
        return cls(access_token=Secret(str(doc["access_token"])),
                   issued_at=float(doc["issued_at"]),
                   expires_at=float(expires) if expires is not None else None,
                   refresh_token=Secret(str(refresh)) if refresh else None,
                   scope=tuple(str(s) for s in scope) if scope is not None else None,
                   issuer=str(doc["issuer"]), resource=str(doc["resource"]),
                   dpop_key=Secret(str(doc["dpop_key"])) if doc.get("dpop_key") else None)


def code_exchange_form(request: AuthorizationRequest, code: Secret) -> dict[str, str]:
    """The token request that redeems an authorization code (with the PKCE verifier)."""
    return {"grant_type": "authorization_code", "code": code.reveal(),
            "redirect_uri": request.redirect_uri,
            "code_verifier": request.pkce.verifier.reveal(), "resource": request.resource}


def refresh_form(token: Token) -> dict[str, str]:
    """The token request that refreshes ``token`` (same scope, so none is sent)."""
    if token.refresh_token is None:
        raise ValueError("this token has no refresh token")
    return {"grant_type": "refresh_token", "refresh_token": token.refresh_token.reveal(),
            "resource": token.resource}


def client_credentials_form(resource: str, scope: tuple[str, ...] | None) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "resource": resource}
    if (text := scope_param(scope)) is not None:
        form["scope"] = text
    return form


def jwt_bearer_form(assertion: Secret, resource: str,
                    scope: tuple[str, ...] | None) -> dict[str, str]:
    """The RFC 7523 §2.1 authorization grant: a JWT the client was given (a workload
    identity token, an ID-JAG) exchanged for an access token."""
    form = {"grant_type": JWT_BEARER_GRANT, "assertion": assertion.reveal(),
            "resource": resource}
    if (text := scope_param(scope)) is not None:
        form["scope"] = text
    return form


def parse_token_response(status: int, body: bytes, *, now: float, endpoint: str,
                         issuer: str, resource: str, asked_scope: tuple[str, ...] | None,
                         previous: Token | None = None,
                         dpop_key: Secret | None = None) -> Token:
    """The token a token endpoint's answer grants. ``previous`` is the token being
    refreshed, whose refresh token stands if the answer brings no new one; ``dpop_key``:
    the key the request's DPoP proof was signed with."""
    if status != 200:
        code, text = oauth_error(body)
        if code is not None and 400 <= status < 500:
            raise _refused("token_refused", f"the token endpoint {endpoint} refused the "
                           f"request (HTTP {status}): {text}", issuer)
        raise _refused("token_endpoint_failed", f"the token endpoint {endpoint} failed (HTTP "
                       f"{status}{': ' + text if text else ''})", issuer)
    doc = json_object(body)
    if doc is None:
        raise _refused("malformed_response", f"the token endpoint {endpoint} answered 200 with "
                       "something other than a JSON object; no token used", issuer)
    access = doc.get("access_token")
    if not isinstance(access, str) or not access:
        raise _refused("malformed_response", f"the token endpoint {endpoint} answered without "
                       "an access_token", issuer)
    token_type = doc.get("token_type")
    if not isinstance(token_type, str) or not token_type:
        raise _refused("malformed_response", f"the token endpoint {endpoint} answered without "
                       "a token_type (RFC 6749 §5.1 requires it); no token used", issuer)
    bound = token_type.lower() == "dpop"
    if bound and dpop_key is None:
        raise _refused("unsupported_token_type", f"the token endpoint {endpoint} issued a "
                       "DPoP token to a request without a DPoP proof", issuer)
    if token_type.lower() != "bearer" and not bound:
        raise _refused("unsupported_token_type", f"the token endpoint {endpoint} issued a "
                       f"{token_type[:40]!r} token; only Bearer and DPoP tokens are "
                       "supported", issuer)
    try:
        expires_in = _seconds(doc.get("expires_in"))
    except ValueError:
        raise _refused("malformed_response", f"the token endpoint {endpoint} answered with an "
                       "expires_in that is not a number of seconds", issuer) from None
    refresh = doc.get("refresh_token")
    scope = doc.get("scope")
    token = Token(
        access_token=Secret(access), issued_at=now,
        expires_at=now + expires_in if expires_in is not None else None,
        refresh_token=Secret(refresh) if isinstance(refresh, str) and refresh else None,
        scope=tuple(scope.split()) if isinstance(scope, str) else asked_scope,
        issuer=issuer, resource=resource, dpop_key=dpop_key if bound else None)
    if token.refresh_token is None and previous is not None:
        token = replace(token, refresh_token=previous.refresh_token)
    return token


def _seconds(value: object) -> float | None:
    """``expires_in`` as seconds, ``None`` when absent; ``ValueError`` unless it is a
    non-negative finite number (a numeric string, as some servers send, is accepted)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = float(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError("not a non-negative finite number")
    return float(value)


def _refused(reason: str, message: str, issuer: str) -> AuthorizationFailed:
    return AuthorizationFailed(message, reason=reason, issuer=issuer)
