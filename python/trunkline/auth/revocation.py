"""Token revocation (RFC 7009) before a stored record is deleted (``trunkline credentials
revoke``): best effort, and said.

Rules:

- The endpoint is the ``revocation_endpoint`` of the token's issuer's metadata (RFC 8414
  §2), read from the issuer's well-known locations in the specified order; an issuer that
  advertises none, or one that is not https (plain http to loopback only), gets no
  request, and the caller says the tokens were only deleted.
- The refresh token is revoked first (RFC 7009 §2.1: the server should then revoke the
  access tokens it issued with it), then the access token, each with its
  ``token_type_hint``, and with the client's own authentication at that issuer (a client
  identity bound to another issuer sends nothing there).
- An ``unsupported_token_type`` answer (RFC 7009 §2.2.1: the server does not revoke
  that type of token) is said for that token, and the other is still revoked; any other
  failure ends the attempt.
- The outcome is a sentence that names the endpoint and, on failure, the HTTP status and
  the OAuth ``error`` code only: never a token, never the body.
"""

from __future__ import annotations

import time

import aiohttp

from ..errors import AuthorizationFailed
from .answers import json_object, oauth_error
from .discovery import authorization_server_urls
from .registration import client_authentication
from .resource import secure_transport
from .store import Binding

TIMEOUT_S = 10.0


async def revocation_endpoint(session: aiohttp.ClientSession, issuer: str) -> str | None:
    """The issuer's advertised ``revocation_endpoint``, or ``None``."""
    for url in authorization_server_urls(issuer):
        async with session.get(url, allow_redirects=False) as response:
            body = await response.read()
            if response.status != 200:
                continue
        doc = json_object(body)
        if doc is None or doc.get("issuer") != issuer:
            continue
        endpoint = doc.get("revocation_endpoint")
        return endpoint if isinstance(endpoint, str) and secure_transport(endpoint) else None
    return None


async def revoke(binding: Binding) -> str:
    """Revoke ``binding``'s tokens at their issuer; what happened, as a sentence."""
    token = binding.token
    if token is None:
        return "no token held"
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            endpoint = await revocation_endpoint(session, token.issuer)
            if endpoint is None:
                return (f"{token.issuer} advertises no revocation_endpoint: the tokens were "
                        "not revoked, only deleted here")
            headers: dict[str, str] = {}
            fields: dict[str, str] = {}
            if binding.client is not None:
                headers, fields = client_authentication(binding.client, token.issuer,
                                                        now=time.time())
            revoked: list[str] = []
            unsupported: list[str] = []
            for hint, secret in (("refresh_token", token.refresh_token),
                                 ("access_token", token.access_token)):
                if secret is None:
                    continue
                form = {**fields, "token": secret.reveal(), "token_type_hint": hint}
                async with session.post(endpoint, data=form, headers=headers,
                                        allow_redirects=False) as response:
                    body = await response.read()
                    status = response.status
                code, _ = oauth_error(body) if status != 200 else (None, "")
                if status == 200:
                    revoked.append(hint.replace("_", " "))
                elif code == "unsupported_token_type":
                    unsupported.append(hint.replace("_", " "))
                else:
                    return (f"revocation at {endpoint} failed (HTTP {status}"
                            f"{', ' + code if code else ''}); the tokens were deleted "
                            "here only")
            said = []
            if revoked:
                said.append(f"revoked the {' and the '.join(revoked)} at {endpoint}")
            if unsupported:
                said.append(f"{endpoint} does not revoke the {' or the '.join(unsupported)} "
                            "(unsupported_token_type): deleted here only")
            return "; ".join(said)
    except AuthorizationFailed as exc:
        return f"not revoked ({exc.message}); the tokens were deleted here only"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return (f"revocation at {token.issuer} failed ({type(exc).__name__}); the tokens "
                "were deleted here only")
