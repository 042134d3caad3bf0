"""Which server a URL names: canonical resource URIs (RFC 8707 §2) and the transport
rule for anything that carries a secret. Pure.

Rules:

- The canonical URI of a server is its URL with the scheme and host in lower case, the
  default port (80 for http, 443 for https) left out, no fragment, and no trailing ``/``
  on an empty path (``https://mcp.example.com``, not ``https://mcp.example.com/``). Path
  and query are kept as they are: a path names the server (``/public/mcp``). Tokens are
  filed under this URI, so ``HTTPS://Example.com:443/mcp`` and ``https://example.com/mcp``
  share one.
- A protected resource metadata document's ``resource`` identifies the server when,
  compared in canonical form, it has the same scheme, host and port and its path is the
  server's path or a parent of it by whole segments (``/`` covers ``/mcp``, ``/mc`` does
  not). RFC 9728 §3.3 asks for identity with the URL the metadata was requested for; MCP
  servers publish root metadata for ``/mcp`` endpoints (the specification's root
  well-known fallback), so a parent is accepted. A ``resource`` with a query must match
  exactly, and one with a fragment never does (RFC 8707 forbids fragments).
- Tokens, client secrets and codes travel only over https, or over plain http to a
  loopback host (``localhost``, ``127.0.0.0/8``, ``::1``), where there is no wire to
  listen on.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import SplitResult, urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_uri(url: str) -> str:
    """The canonical form of an absolute http(s) URL; ``ValueError`` for anything else."""
    parts = _split(url)
    return urlunsplit((parts.scheme, _netloc(parts), _path(parts), parts.query, ""))


def covers(resource: str, server_url: str) -> bool:
    """Whether a metadata ``resource`` identifies the server at ``server_url``."""
    try:
        res, srv = _split(resource), _split(server_url)
    except ValueError:
        return False
    if res.fragment or (res.scheme, _netloc(res)) != (srv.scheme, _netloc(srv)):
        return False
    if res.query:
        return canonical_uri(resource) == canonical_uri(server_url)
    parent, child = _path(res).rstrip("/"), _path(srv).rstrip("/")
    return child == parent or child.startswith(parent + "/")


def is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_transport(url: str) -> bool:
    """Whether a secret may be sent to ``url``: https, or http to a loopback host."""
    scheme = urlsplit(url).scheme.lower()
    return scheme == "https" or (scheme == "http" and is_loopback(url))


def _split(url: str) -> SplitResult:
    if not isinstance(url, str):
        raise ValueError(f"not a URL: {url!r}")
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an absolute http(s) URL: {url!r}")
    parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    return parts._replace(scheme=scheme)


def _netloc(parts: SplitResult) -> str:
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = parts.port
    if port is not None and port != _DEFAULT_PORTS[parts.scheme]:
        return f"{host}:{port}"
    return host


def _path(parts: SplitResult) -> str:
    return "" if parts.path == "/" else parts.path
