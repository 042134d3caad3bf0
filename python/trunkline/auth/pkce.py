"""PKCE (RFC 7636) with S256, and the ``state`` of an authorization request. Pure but for
the system's random source.

Rules:

- The code verifier is 32 random bytes, base64url without padding: 43 characters of the
  unreserved set, 256 bits of entropy (RFC 7636 §4.1 asks for 43 to 128 characters).
- The challenge is ``BASE64URL(SHA256(ASCII(verifier)))`` without padding; the method is
  always ``S256``, never ``plain``.
- ``state`` is 32 random bytes too, base64url: it binds the redirect to the request that
  caused it (an injected redirect carries some other state and is refused).
- The verifier is a ``Secret``; the challenge and ``state`` travel in the authorization
  URL and are not.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass

from .secret import Secret

METHOD = "S256"


@dataclass(frozen=True)
class Pkce:
    verifier: Secret
    challenge: str
    method: str = METHOD


def s256(verifier: str) -> str:
    """The S256 code challenge of a verifier."""
    return _b64url(hashlib.sha256(verifier.encode("ascii")).digest())


def new_pkce() -> Pkce:
    verifier = _b64url(secrets.token_bytes(32))
    return Pkce(verifier=Secret(verifier), challenge=s256(verifier))


def new_state() -> str:
    return _b64url(secrets.token_bytes(32))


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
