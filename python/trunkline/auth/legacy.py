"""The 2025-03-26 authorization fallbacks, for servers the host allowlisted for the legacy
era. Pure: the driver fetches the one URL given here and falls back as told.

Rules:

1. Only for a server the host allowlisted for the legacy era (``ServerConfig.allow_legacy``,
   passed to the driver as ``legacy_fallbacks=True``), and only when no protected resource
   metadata is found at any RFC 9728 location. Metadata that is found and refused (for
   another resource) stays a refusal. Without the allowlist, a server without protected
   resource metadata is refused with an error that says so: guessing its origin would send
   the user, and any client secret, to whatever answers there.
2. The authorization base URL is the server's canonical URL (``resource.canonical_uri``)
   with its path discarded (2025-03-26 "Server Metadata Discovery":
   ``https://API.example.com:443/v1/mcp`` -> ``https://api.example.com``), and it stands
   as the issuer: one spelling, whichever spelling of the server's URL it comes from. Its
   metadata is read from ``{base}/.well-known/oauth-authorization-server`` only (RFC
   8414, no path insertion, no OpenID Connect), and checked like any other
   (``discovery``: the ``issuer`` is the base exactly, https endpoints, PKCE S256
   advertised).
3. When nothing usable answers there (any answer but a 200 with a JSON object), the
   default endpoints: ``{base}/authorize``, ``{base}/token``, ``{base}/register``. PKCE
   S256 is taken as supported there: 2025-03-26 requires PKCE of every client and server
   (OAuth 2.1), and no metadata says otherwise. Token endpoint authentication is what the
   registration answers (else RFC 8414's default, ``client_secret_basic``).
4. The stand-in for the missing protected resource metadata names the server's canonical
   URI as the resource, the base as its one authorization server and no scopes; tokens
   are bound to that resource as any other. The RFC 8707 ``resource`` parameter is still
   sent: RFC 6749 §3.1 has an authorization server ignore parameters it does not know.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from .discovery import OAUTH_SUFFIX, AuthServerMetadata, ProtectedResource, check_issuer
from .resource import canonical_uri

#: Where the stand-in and the default endpoints say they were read (for errors and logs).
NO_RESOURCE_METADATA = "(no protected resource metadata: 2025-03-26 fallback)"
NO_SERVER_METADATA = "(no authorization server metadata: 2025-03-26 default endpoints)"


def authorization_base(server_url: str) -> str:
    """Rule 2: the server's canonical URL without path, query or fragment."""
    parts = urlsplit(canonical_uri(server_url))
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def stand_in_resource(server_url: str) -> ProtectedResource:
    """Rule 4: what stands for the protected resource metadata a legacy server lacks."""
    base = authorization_base(server_url)
    check_issuer(base)
    return ProtectedResource(resource=canonical_uri(server_url), authorization_servers=(base,),
                             scopes_supported=None, url=NO_RESOURCE_METADATA, legacy=True)


def metadata_url(server_url: str) -> str:
    """Rule 2: the one place a legacy server's authorization server metadata is read."""
    return authorization_base(server_url) + OAUTH_SUFFIX


def default_metadata(server_url: str) -> AuthServerMetadata:
    """Rule 3: the default endpoints, as metadata."""
    base = authorization_base(server_url)
    check_issuer(base)
    return AuthServerMetadata(
        issuer=base, token_endpoint=f"{base}/token", authorization_endpoint=f"{base}/authorize",
        registration_endpoint=f"{base}/register", scopes_supported=None,
        code_challenge_methods_supported=("S256",), token_endpoint_auth_methods_supported=None,
        client_id_metadata_document_supported=False,
        authorization_response_iss_parameter_supported=False, url=NO_SERVER_METADATA)
