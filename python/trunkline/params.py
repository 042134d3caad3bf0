"""How to reach one server: stdio or Streamable HTTP. Value types, no I/O.

These cross the process boundary inside the worker's specification (``trunkline.channel``),
so they are ``msgspec`` structs, tagged by transport (``"type": "stdio"`` / ``"http"``).
A server's parameters are also its identity: the operator's legacy allowlist is bound to
exactly one configured command line, or exactly one endpoint URL, never to anything a
server says about itself.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

import msgspec

from .errors import ConfigurationError
from .protocol import headers as mcp_headers


class StdioParams(msgspec.Struct, frozen=True, tag="stdio"):
    """How to start one stdio server: an argv list (never a shell), the variables added
    to its minimal environment, its working directory."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None

    @property
    def argv(self) -> list[str]:
        return [self.command, *self.args]

    def identity(self) -> tuple[object, ...]:
        return (tuple(self.argv), tuple(sorted(self.env.items())), self.cwd)

    def describe(self) -> str:
        return " ".join(self.argv)


class HttpParams(msgspec.Struct, frozen=True, tag="http"):
    """How to reach one Streamable HTTP server. The exact endpoint URL is its identity:
    an operator's legacy allowlist names that URL, never an origin, and configured
    headers (a bearer token) are sent to that URL's origin only."""

    url: str
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    verify_tls: bool = True
    #: Connections kept to this server; HTTP/1.1 carries one exchange per connection.
    max_connections: int = 100
    connect_timeout_s: float = 10.0

    def identity(self) -> tuple[object, ...]:
        return ("http", self.url)

    def describe(self) -> str:
        return self.url


TransportParams = StdioParams | HttpParams


def stdio(
    command: str, *args: str, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> StdioParams:
    """``trunkline.stdio("python", "-m", "calc_server")``: a stdio server definition."""
    return StdioParams(command, tuple(args), dict(env or {}), cwd)


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
