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

from .errors import ConfigurationError, RedirectRefused
from .protocol import headers as mcp_headers

#: Redirects one request may follow, all within the configured origin.
MAX_REDIRECTS = 3
#: The only redirects that keep the method and the body (RFC 9110 §15.4.8, §15.4.9);
#: 301/302/303 would turn an MCP POST into a GET.
_SAME_METHOD_REDIRECTS = frozenset({307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}


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

    def follow(self, status: int, location: str | None, current: str, hops: int) -> str:
        """Where a redirect (``status``, ``Location``) answering a request for ``current``
        leads, as an absolute URL; ``hops`` redirects were followed already. Only 307/308
        within the configured URL's origin (scheme, host, port), at most
        ``MAX_REDIRECTS`` times: anything else raises ``RedirectRefused`` naming both URLs.
        Requests, configured headers and the era verdict stay with the configured
        origin."""
        if not location:
            raise RedirectRefused(f"HTTP {status} redirect from {current} without a Location",
                                  status=status)
        target = urllib.parse.urljoin(current, location)
        if status not in _SAME_METHOD_REDIRECTS:
            raise RedirectRefused(
                f"HTTP {status} redirect from {current} to {target} not followed: only 307 "
                "and 308 keep an MCP request's method and body", status=status, location=target)
        if _origin(target) != _origin(self.url):
            downgrade = " (https to http)" if urllib.parse.urlsplit(self.url).scheme == "https" \
                and urllib.parse.urlsplit(target).scheme == "http" else ""
            raise RedirectRefused(
                f"HTTP {status} redirect from {current} to {target} not followed: it leaves "
                f"the configured origin{downgrade}; requests and configured headers go to "
                f"{self.url}'s origin only", status=status, location=target)
        if hops >= MAX_REDIRECTS:
            raise RedirectRefused(
                f"HTTP {status} redirect from {current} to {target} not followed: more than "
                f"{MAX_REDIRECTS} redirects", status=status, location=target)
        return target


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is not a number: no origin we could share
        port = -1
    return scheme, (parts.hostname or "").lower(), port


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
