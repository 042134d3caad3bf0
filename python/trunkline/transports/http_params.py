"""Where a Streamable HTTP server lives, and the checks on it made before anything is
sent. Kept apart from the transport so configuration code does not import the HTTP
client."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ConfigurationError
from ..protocol import headers as mcp_headers


@dataclass(frozen=True)
class HttpParams:
    """How to reach one Streamable HTTP server. The exact endpoint URL is its identity:
    an operator's legacy allowlist names that URL, never an origin."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    verify_tls: bool = True
    #: Connections kept to this server; HTTP/1.1 carries one exchange per connection.
    max_connections: int = 100
    connect_timeout_s: float = 10.0

    def identity(self) -> tuple[object, ...]:
        return ("http", self.url)

    def describe(self) -> str:
        return self.url


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    verify_tls: bool = True,
    max_connections: int = 100,
) -> HttpParams:
    """``trunkline.http("https://mcp.example.com/mcp", headers={"Authorization": "Bearer …"})``:
    a Streamable HTTP server definition. Raises ``ConfigurationError`` for a URL that is not
    absolute http(s) or for headers that may not be set (reserved MCP and HTTP framing
    headers, control characters)."""
    return validated_http_params(HttpParams(url, dict(headers or {}), verify_tls,
                                            max_connections))


def validated_http_params(params: HttpParams) -> HttpParams:
    parts = urllib.parse.urlsplit(params.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{params.url!r} is not an absolute http:// or https:// URL")
    if parts.username or parts.password:
        raise ConfigurationError(
            f"{params.url!r}: credentials in the URL are refused; use an Authorization header")
    problem = mcp_headers.configured_headers_problem(params.headers)
    if problem is not None:
        raise ConfigurationError(f"headers for {params.url}: {problem}")
    if params.max_connections < 1:
        raise ConfigurationError("max_connections must be at least 1")
    return params
