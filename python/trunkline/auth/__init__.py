"""OAuth for protected HTTP servers: the MCP authorization specification's client side.

One module, one job:

- ``challenge``: ``WWW-Authenticate`` parsed (pure).
- ``resource``: canonical server URIs, which server a ``resource`` names, where secrets
  may travel (pure).
- ``discovery``: where metadata lives and whether a document may be used (pure).
- ``legacy``: the 2025-03-26 fallbacks, for servers allowlisted for the legacy era (pure).
- ``pkce``: PKCE S256 and ``state``.
- ``scopes``: which scopes to ask for, step-up and its bound (pure).
- ``registration``: who this host is to an authorization server and how it proves it
  (pure).
- ``assertion``: ``private_key_jwt`` client assertions (RFC 7523), signed with joserfc.
- ``authorization``: the authorization request and the checks on its redirect (pure).
- ``tokens``: token requests, responses and expiry (pure).
- ``dpop``: DPoP proofs, keys and nonces (RFC 9449), signed with joserfc (pure).
- ``id_jag``: enterprise-managed authorization's token exchange for an ID-JAG (pure).
- ``workload``: where the JWTs presented as grants come from (workload identity tokens,
  ID tokens).
- ``answers``: reading an authorization server's JSON answers (pure).
- ``secret``: strings that never print.
- ``sealing``: records sealed at rest (``TRUNKLINE_STORE_KEY``, AES-256-GCM), and key
  rotation.
- ``store``: where tokens and client identities are kept (memory, or 0600 files), and the
  renewal lease.
- ``user_store``: per-user token records (``UserTokenStore``) and secrets
  (``StoredUserSecrets``), kept only sealed.
- ``revocation``: RFC 7009 token revocation (``trunkline credentials revoke``).
- ``redis_store``: records and renewal leases in Redis, for processes that share them
  (``RedisStore``, exported here but imported only when first named: ``redis`` is an
  optional dependency).
- ``flow``: ``OAuthClient``, the I/O that drives the rest (exported here but imported
  only when first named, like ``RedisStore``: a worker imports ``dpop`` alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .id_jag import IdentityProvider
from .registration import ClientSettings, PreRegisteredClient
from .secret import Secret
from .store import Binding, FileStore, MemoryStore, TokenStore
from .tokens import Token
from .workload import JwtSource, env_source, file_source

if TYPE_CHECKING:
    from .flow import (
        AUTHORIZATION_CODE,
        CLIENT_CREDENTIALS,
        ENTERPRISE_MANAGED,
        JWT_BEARER,
        Authorizer,
        HeadlessAuthorizer,
        OAuthClient,
        Sent,
        ServerAuth,
    )
    from .redis_store import RedisStore

#: ``flow``'s names, imported when first named: it loads aiohttp, which a worker that
#: signs DPoP proofs with ``dpop`` must not pay for.
_FLOW = frozenset({"AUTHORIZATION_CODE", "CLIENT_CREDENTIALS", "ENTERPRISE_MANAGED",
                   "JWT_BEARER", "Authorizer", "HeadlessAuthorizer", "OAuthClient", "Sent",
                   "ServerAuth"})


def __getattr__(name: str) -> object:
    if name in _FLOW:
        from . import flow

        return getattr(flow, name)
    if name == "RedisStore":
        from .redis_store import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AUTHORIZATION_CODE",
    "CLIENT_CREDENTIALS",
    "ENTERPRISE_MANAGED",
    "JWT_BEARER",
    "Authorizer",
    "Binding",
    "ClientSettings",
    "FileStore",
    "HeadlessAuthorizer",
    "IdentityProvider",
    "JwtSource",
    "MemoryStore",
    "OAuthClient",
    "PreRegisteredClient",
    "RedisStore",
    "Secret",
    "Sent",
    "ServerAuth",
    "Token",
    "TokenStore",
    "env_source",
    "file_source",
]
