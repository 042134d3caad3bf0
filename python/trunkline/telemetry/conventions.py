"""What trunkline's spans and metrics are called and carry: the OpenTelemetry semantic
conventions for MCP (gen-ai ``mcp``, development stability), plus trunkline's own
``trunkline.*`` names where the conventions have none. Pure: names and values in, names
and attribute maps out.

Rules (stated once; the tests hold the code to them):

- A span is named ``{mcp.method.name} {target}``, the target being the tool's or the
  prompt's name; a resource URI is never part of a name (high cardinality), and a method
  without a low-cardinality target is named by the method alone.
- ``gen_ai.operation.name`` is ``execute_tool`` for ``tools/call`` and absent otherwise.
- ``network.transport`` is ``pipe`` for stdio and ``tcp`` for Streamable HTTP, which also
  gives ``server.address`` and ``server.port`` (the URL's port, else its scheme's).
- ``error.type`` is the JSON-RPC error code as a string when the server answered with an
  error, ``tool_error`` for a ``tools/call`` result with ``isError``, else the class name
  of the error trunkline raised (``RequestTimeout``, ``TransportLost``, ...).
- The server a span or a metric is about is ``trunkline.server`` (its configured name):
  the conventions name no attribute for a client's own name of its server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from ..params import HttpParams, TransportParams

METHOD = "mcp.method.name"
TOOL = "gen_ai.tool.name"
PROMPT = "gen_ai.prompt.name"
RESOURCE_URI = "mcp.resource.uri"
OPERATION = "gen_ai.operation.name"
REQUEST_ID = "jsonrpc.request.id"
PROTOCOL_VERSION = "mcp.protocol.version"
SESSION_ID = "mcp.session.id"
TRANSPORT = "network.transport"
#: Who a request a gateway serves speaks for (its token's subject, its API key's name);
#: on the SERVER span only, never a metric's attribute (one series per user).
ENDUSER_ID = "enduser.id"
IDENTITY_KIND = "trunkline.identity.kind"
IDENTITY_ISSUER = "trunkline.identity.issuer"
NET_PROTOCOL_NAME = "network.protocol.name"
NET_PROTOCOL_VERSION = "network.protocol.version"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
STATUS_CODE = "rpc.response.status_code"
SERVER = "trunkline.server"

EXECUTE_TOOL = "execute_tool"
TOOL_ERROR = "tool_error"

#: The conventions' histograms: seconds, with their advised bucket boundaries.
CLIENT_DURATION = "mcp.client.operation.duration"
SERVER_DURATION = "mcp.server.operation.duration"
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
                    120.0, 300.0)

#: Which params member names what a method is about, and under which attribute.
_TARGETS = {"tools/call": ("name", TOOL), "prompts/get": ("name", PROMPT),
            "resources/read": ("uri", RESOURCE_URI),
            "resources/subscribe": ("uri", RESOURCE_URI),
            "resources/unsubscribe": ("uri", RESOURCE_URI)}


def span_name(method: str, target: str | None) -> str:
    return method if target is None else f"{method} {target}"


def request_attributes(method: str, params: Mapping[str, Any] | None
                       ) -> tuple[str | None, dict[str, Any]]:
    """The span name's target and the attributes a request's method and params give."""
    attributes: dict[str, Any] = {METHOD: method}
    target = None
    source = _TARGETS.get(method)
    if source is not None and params is not None:
        value = params.get(source[0])
        if isinstance(value, str):
            attributes[source[1]] = value
            if source[1] != RESOURCE_URI:
                target = value
    if method == "tools/call":
        attributes[OPERATION] = EXECUTE_TOOL
    return target, attributes


def transport_attributes(params: TransportParams) -> dict[str, Any]:
    """``network.transport``, and for HTTP the protocol (the worker's own client speaks
    HTTP/1.1) and the server's address and port."""
    if not isinstance(params, HttpParams):
        return {TRANSPORT: "pipe"}
    url = urlsplit(params.url)
    attributes: dict[str, Any] = {TRANSPORT: "tcp", NET_PROTOCOL_NAME: "http",
                                  NET_PROTOCOL_VERSION: "1.1"}
    if url.hostname:
        attributes[SERVER_ADDRESS] = url.hostname
        try:
            port = url.port
        except ValueError:
            port = None
        attributes[SERVER_PORT] = port or (443 if url.scheme == "https" else 80)
    return attributes


def error_type(error: BaseException) -> str:
    """``error.type`` of a request that failed with ``error``."""
    code = getattr(error, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return str(code)
    return type(error).__name__


def result_error_type(method: str, result: Any) -> str | None:
    """``error.type`` of a request the server answered with a result: ``tool_error`` for a
    tool's ``isError`` result (as sent, or checked: a ``CallToolResult``), else None."""
    if method != "tools/call":
        return None
    if type(result) is dict:
        return TOOL_ERROR if result.get("isError") is True else None
    return TOOL_ERROR if getattr(result, "is_error", None) is True else None
