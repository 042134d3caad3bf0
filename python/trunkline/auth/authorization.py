"""The authorization code request (OAuth 2.1 §4.1) and the checks on the redirect that
answers it. Pure.

The request carries ``response_type=code``, the ``client_id``, the ``redirect_uri``, the
PKCE ``code_challenge`` with method ``S256``, a fresh ``state``, the RFC 8707 ``resource``
and, if any, the ``scope``. Before it leaves, the issuer of the validated metadata is
recorded with the verifier and the state (MCP "Authorization Response Validation").

The redirect the user agent lands on is checked in this order, and the code is released
only if every check passes:

1. It is at our ``redirect_uri`` (scheme, host and path; any port on a loopback host).
2. No parameter appears twice.
3. RFC 9207: an ``iss`` present must equal the recorded issuer by simple string comparison:
   no case folding, default port, trailing slash or percent-encoding normalization after
   the form decoding. An absent ``iss`` is refused when the server advertised
   ``authorization_response_iss_parameter_supported``. A mismatch is refused before
   anything else in the response is acted on, errors included.
4. ``state`` equals the one sent (an injected or replayed redirect does not).
5. An ``error`` is the authorization server's refusal, reported with its description.
6. A ``code`` is present.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ..errors import AuthorizationFailed
from .discovery import AuthServerMetadata, check_code_flow
from .pkce import Pkce, new_pkce, new_state
from .registration import ClientIdentity
from .resource import is_loopback
from .scopes import scope_param
from .secret import Secret


@dataclass(frozen=True)
class AuthorizationRequest:
    """One authorization request in flight: the URL for the user agent, and what its
    redirect and the token request after it are checked against."""

    url: str
    state: str
    pkce: Pkce
    issuer: str
    iss_required: bool
    redirect_uri: str
    resource: str
    scope: tuple[str, ...] | None
    client: ClientIdentity


def authorization_request(meta: AuthServerMetadata, client: ClientIdentity, *,
                          redirect_uri: str, resource: str,
                          scope: tuple[str, ...] | None) -> AuthorizationRequest:
    endpoint = check_code_flow(meta)
    pkce, state = new_pkce(), new_state()
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "code_challenge": pkce.challenge,
        "code_challenge_method": pkce.method,
        "state": state,
        "resource": resource,
    }
    if (text := scope_param(scope)) is not None:
        params["scope"] = text
    parts = urlsplit(endpoint)
    # The endpoint may carry a query of its own (RFC 6749 §3.1): kept, ours appended.
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return AuthorizationRequest(
        url=urlunsplit((parts.scheme, parts.netloc, parts.path, query, "")),
        state=state, pkce=pkce, issuer=meta.issuer,
        iss_required=meta.authorization_response_iss_parameter_supported,
        redirect_uri=redirect_uri, resource=resource, scope=scope, client=client)


def authorization_code(request: AuthorizationRequest, landed: str) -> Secret:
    """The code of the redirect the user agent ``landed`` on, once it passed every check."""
    issuer = request.issuer
    got, want = urlsplit(landed), urlsplit(request.redirect_uri)
    same_port = got.port == want.port or is_loopback(request.redirect_uri)
    if ((got.scheme, got.hostname, got.path or "/") != (want.scheme, want.hostname,
                                                         want.path or "/") or not same_port):
        raise _refused("redirect_mismatch", "the authorization ended somewhere other than "
                       f"the redirect URI {request.redirect_uri}", issuer)
    params = parse_qs(got.query, keep_blank_values=True)
    repeated = sorted(name for name, values in params.items() if len(values) > 1)
    if repeated:
        raise _refused("malformed_redirect", "the authorization redirect repeats "
                       f"{', '.join(repeated)}; refused", issuer)
    value = {name: values[0] for name, values in params.items()}
    iss = value.get("iss")
    if iss is not None and iss != issuer:
        raise _refused("iss_mismatch", f"the authorization redirect says it comes from issuer "
                       f"{iss!r}, not {issuer!r} that the request went to (RFC 9207, compared "
                       "exactly); refused, its code is not used", issuer)
    if iss is None and request.iss_required:
        raise _refused("iss_missing", f"authorization server {issuer} advertises "
                       "authorization_response_iss_parameter_supported but its redirect carries "
                       "no iss (RFC 9207); refused", issuer)
    if not hmac.compare_digest(value.get("state", "").encode(), request.state.encode()):
        raise _refused("state_mismatch", "the authorization redirect's state does not match "
                       "the request's (an injected or stale redirect); refused", issuer)
    if "error" in value:
        description = value.get("error_description", "")
        text = value["error"][:80] + (f" ({description[:200]})" if description else "")
        raise _refused("authorization_denied", f"authorization server {issuer} refused the "
                       f"authorization: {text}", issuer)
    code = value.get("code")
    if not code:
        raise _refused("malformed_redirect", "the authorization redirect carries no code",
                       issuer)
    return Secret(code)


def _refused(reason: str, message: str, issuer: str) -> AuthorizationFailed:
    return AuthorizationFailed(message, reason=reason, issuer=issuer)
