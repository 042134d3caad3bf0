"""``trunkline status URL``: a running gateway's servers, as a table (like ``kubectl get``
or ``docker stats``), once or refreshed (``--watch``), or its JSON document.

Rules:

- The document is the gateway's ``GET /status`` (``gateway/admin.py``), fetched with the
  token the operator gives (``TRUNKLINE_TOKEN`` or ``--token-file``: an API key or an
  OAuth access token), sent as ``Authorization: Bearer`` and never printed; or, given an
  admin key, the operator API's ``GET /admin/api/servers`` (``cli/operator.py``), whose
  rows have the same fields.
- ``URL`` is the gateway's ``/mcp`` URL as ``serve`` printed it, or its base URL.
- The table is a pure function of the document and the clock (``status_table``); the
  fetch is the only I/O. With ``--watch`` a failed fetch is shown and tried again at the
  next refresh; without it, it is the command's error.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from ..errors import ConfigurationError, TrunklineError
from ..gateway.admin import SCHEMA
from ..gateway.operator_documents import SCHEMA as ADMIN_SCHEMA

COLUMNS = ("SERVER", "STATE", "ERA", "VERSION", "IN FLIGHT", "CALLS", "P50", "P99",
           "RESTARTS", "LAST ERROR")
_COLOURS = {"ready": "green", "unavailable": "red", "restarting": "yellow"}


class StatusUnavailable(TrunklineError):
    """The gateway could not be asked, or did not answer with its status."""


def status_url(url: str) -> str:
    """The status endpoint of the gateway at ``url`` (its ``/mcp`` URL or its base)."""
    return gateway_url(url, "status")


def gateway_url(url: str, path: str) -> str:
    """``path`` (no leading slash) on the gateway at ``url`` (its ``/mcp`` URL or its
    base)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"{url}: not an http(s) URL of a gateway")
    base = parts.path.rstrip("/")
    if base.endswith("/mcp"):
        base = base[: -len("/mcp")]
    return urlunsplit((parts.scheme, parts.netloc, f"{base}/{path}", "", ""))


def read_token(path: str | None) -> str | None:
    if path is None:
        return os.environ.get("TRUNKLINE_TOKEN") or None
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read the token: {exc.strerror}") from None
    return token or None


async def fetch_status(session: Any, url: str, token: str | None) -> dict[str, Any]:
    """The gateway's status document (``session``: an ``aiohttp.ClientSession``)."""
    import aiohttp

    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with session.get(url, headers=headers, allow_redirects=False) as response:
            body = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise StatusUnavailable(f"{url}: no answer: {exc or type(exc).__name__}") from None
    if status != 200:
        raise StatusUnavailable(f"{url}: HTTP {status}{_why(body)}")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise StatusUnavailable(f"{url}: the answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("schema") not in (SCHEMA, ADMIN_SCHEMA):
        raise StatusUnavailable(f"{url}: not a trunkline gateway's status")
    return doc


def _why(body: bytes) -> str:
    """The gateway's own words for a refusal (a JSON-RPC error's message), if any."""
    try:
        message = orjson.loads(body)["error"]["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    return f": {message}" if isinstance(message, str) else ""


def status_table(doc: dict[str, Any], now: float | None = None) -> Any:
    """The document as a rich ``Table``: one row per server."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    now = time.time() if now is None else now
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in COLUMNS:
        # One line per server, as ``kubectl get`` has it: only the last error gives way
        # (cut short) when the screen is narrow.
        last = column == "LAST ERROR"
        table.add_column(column, no_wrap=not last, overflow="ellipsis", justify="right" if column
                         in ("IN FLIGHT", "CALLS", "P50", "P99", "RESTARTS") else "left")
    for server in doc.get("servers", []):
        state = str(server.get("state"))
        colour = _COLOURS.get(state, "yellow")
        if state == "ready" and server.get("listing_error"):
            # Up, but its tools are not as it lists them (the last error says why).
            state, colour = "ready (listing failed)", "yellow"
        if server.get("instances") is not None:  # a per-user server: its processes now
            state += f", {server['instances']} per-user"
        table.add_row(
            escape(str(server.get("name"))), f"[{colour}]{escape(state)}[/{colour}]",
            server.get("era") or "-", server.get("version") or "-",
            str(server.get("in_flight", 0)), str(server.get("answered", 0)),
            _latency(server.get("p50_ms")), _latency(server.get("p99_ms")),
            str(server.get("restarts", 0)),
            Text(_last_error(server, now), no_wrap=True, overflow="ellipsis"))
    return table


def _latency(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f}ms" if ms >= 100 else f"{ms:.2f}ms"


def _last_error(server: dict[str, Any], now: float) -> str:
    error, at = server.get("last_error"), server.get("last_error_at")
    if not error:
        return "-"
    age = "" if not isinstance(at, (int, float)) else f" ({_age(now - at)} ago)"
    return f"{error}{age}"


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


__all__ = [
    "COLUMNS",
    "StatusUnavailable",
    "fetch_status",
    "gateway_url",
    "read_token",
    "status_table",
    "status_url",
]
