"""HTTP header rules of MCP 2026-07-28 for a client (basic/transports/streamable-http:
sending, value encoding, custom headers from tool parameters). No I/O.

* ``encode_header_value`` / ``decode_header_value``: the ``Mcp-Name`` / ``Mcp-Param-*``
  value encoding with its ``=?base64?…?=`` sentinel.
* ``tool_header_params``: the ``x-mcp-header`` annotations of one tool, or why the tool
  definition is invalid; ``filter_tools_result`` drops such tools from a ``tools/list``.
* ``param_headers``: the ``Mcp-Param-*`` headers one ``tools/call`` must carry.
* ``configured_headers_problem``: whether operator-configured headers may be sent.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeGuard

MAX_SAFE_INTEGER: Final = 2**53 - 1

SENTINEL_PREFIX: Final = "=?base64?"
SENTINEL_SUFFIX: Final = "?="
PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
ANNOTATION: Final = "x-mcp-header"
HEADER_JSON_TYPES: Final = frozenset({"string", "integer", "boolean"})

#: Bounds on the schema walk: a hostile inputSchema must neither recurse without end nor
#: make listing tools slow. Exceeding either makes the tool definition invalid.
MAX_SCHEMA_DEPTH: Final = 64
MAX_SCHEMA_NODES: Final = 10_000

# RFC 9110 token = 1*tchar. Spelled out in ASCII so that no Unicode letter or digit slips in.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# The values that may travel as they are: printable ASCII 0x20-0x7E. Tab is a control
# character, and the rule says control characters are Base64-encoded, so tab is too.
_PLAIN = re.compile(r"[\x20-\x7e]*")

#: Header names an operator-configured header may never set (lower-cased); every name that
#: starts with "mcp-param-" is reserved as well.
RESERVED_HEADERS: Final[frozenset[str]] = frozenset({
    "accept", "content-type", "content-length", "host", "connection", "transfer-encoding",
    "mcp-protocol-version", "mcp-method", "mcp-name", "mcp-session-id", "last-event-id",
})


class HeaderValueError(ValueError):
    """A value that cannot be carried in an MCP header."""


class InvalidToolHeaders(ValueError):
    """A tool whose x-mcp-header annotations break the custom-header rules; ``str()`` is
    the reason."""


@dataclass(frozen=True)
class HeaderParam:
    header: str  # the header name as sent: "Mcp-Param-" + annotation value
    path: tuple[str, ...]  # the chain of `properties` keys from the inputSchema root
    json_type: str  # "string" | "integer" | "boolean"


@dataclass(frozen=True)
class ToolHeaderTable:
    by_tool: Mapping[str, tuple[HeaderParam, ...]]  # only tools with at least one param
    dropped: tuple[tuple[str, str], ...]  # (tool name, reason) for invalid tools


def encode_header_value(value: str | int | bool) -> str:
    """Value encoding: the header text for a string, integer or boolean value."""
    # bool before int: bool is a subclass of int, and True must become "true", not "1".
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise HeaderValueError(f"integer {value} is outside ±(2^53-1)")
        text = str(int(value))  # int() so an IntEnum member still prints as a number
    elif isinstance(value, str):
        text = value
    else:
        raise HeaderValueError(f"no header encoding for a {type(value).__name__}")
    if _needs_base64(text):
        payload = base64.b64encode(text.encode("utf-8")).decode("ascii")
        return SENTINEL_PREFIX + payload + SENTINEL_SUFFIX
    return text


def _needs_base64(text: str) -> bool:
    looks_like_sentinel = text.startswith(SENTINEL_PREFIX) and text.endswith(SENTINEL_SUFFIX)
    return looks_like_sentinel or not _PLAIN.fullmatch(text) or text != text.strip(" ")


def decode_header_value(text: str) -> str:
    """The value an encoded header carries. Anything that looks like the sentinel must be a
    well-formed one, because the encoder never sends such text plain."""
    if not (text.startswith(SENTINEL_PREFIX) and text.endswith(SENTINEL_SUFFIX)):
        return text
    if len(text) < len(SENTINEL_PREFIX) + len(SENTINEL_SUFFIX):  # "=?base64?=" overlaps
        raise HeaderValueError(f"truncated Base64 sentinel {text!r}")
    payload = text[len(SENTINEL_PREFIX):-len(SENTINEL_SUFFIX)]
    try:
        return base64.b64decode(payload, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise HeaderValueError(f"malformed Base64 sentinel {text!r}: {exc}") from None


def tool_header_params(input_schema: object) -> tuple[HeaderParam, ...]:
    """Every x-mcp-header annotation of a tool's inputSchema, sorted by path.

    The whole tree is scanned, not just the `properties` chains, so that an annotation
    hidden under items, oneOf, $defs or any other keyword makes the tool invalid instead of
    being silently ignored (the server would then demand a header the client never sends).
    That includes instance keywords such as `default` and `enum`: telling schema from data
    needs to know which maps are keyed by names ($defs, patternProperties, ...), and a
    wrong guess there would hide an annotation; dropping a tool whose default happens to
    hold the key is the cheaper mistake.
    """
    found: list[HeaderParam] = []
    nodes_seen = [0]

    def walk(node: object, location: tuple[str, ...], reachable: bool) -> None:
        nodes_seen[0] += 1
        if nodes_seen[0] > MAX_SCHEMA_NODES:
            raise InvalidToolHeaders(f"inputSchema has more than {MAX_SCHEMA_NODES} nodes")
        if len(location) > MAX_SCHEMA_DEPTH:
            raise InvalidToolHeaders(f"inputSchema is nested deeper than {MAX_SCHEMA_DEPTH}")
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, (*location, str(index)), False)
            return
        if not isinstance(node, Mapping):
            return
        if ANNOTATION in node:
            found.append(_annotated_param(node, location, reachable))
        for key, child in node.items():
            if key == ANNOTATION:
                continue
            if key == "properties" and isinstance(child, Mapping):
                # The keys of a properties map are property names (even one spelled
                # "x-mcp-header"); each value is a schema one step further down the chain.
                for name, subschema in child.items():
                    walk(subschema, (*location, "properties", str(name)), reachable)
            else:
                walk(child, (*location, str(key)), False)

    walk(input_schema, (), True)
    seen: dict[str, HeaderParam] = {}
    for param in found:
        earlier = seen.setdefault(param.header.lower(), param)
        if earlier is not param:
            raise InvalidToolHeaders(
                f"{ANNOTATION} {param.header[len(PARAM_HEADER_PREFIX):]!r} at "
                f"{_schema_pointer(param.path)} duplicates the one at "
                f"{_schema_pointer(earlier.path)} (case-insensitively)")
    return tuple(sorted(found, key=lambda param: param.path))


def _annotated_param(schema: Mapping[object, object], location: tuple[str, ...],
                     reachable: bool) -> HeaderParam:
    name = schema[ANNOTATION]
    where = _pointer(location)
    if not location:
        raise InvalidToolHeaders(f"{ANNOTATION} on the inputSchema root itself")
    if not reachable:
        raise InvalidToolHeaders(
            f"{ANNOTATION} at {where} is not reachable through `properties` keys alone")
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise InvalidToolHeaders(f"{ANNOTATION} value {name!r} at {where} is not an RFC 9110 token")
    json_type = schema.get("type")
    if not isinstance(json_type, str) or json_type not in HEADER_JSON_TYPES:
        raise InvalidToolHeaders(
            f"{ANNOTATION} at {where} is on type {json_type!r}; only a single "
            "\"string\", \"integer\" or \"boolean\" may carry it")
    # Reachable locations alternate "properties", name, so every second entry is the path.
    return HeaderParam(PARAM_HEADER_PREFIX + name, location[1::2], json_type)


def _pointer(location: tuple[str, ...]) -> str:
    """A JSON Pointer for messages, so a reason names the exact place in the schema."""
    return "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in location)


def _schema_pointer(path: tuple[str, ...]) -> str:
    return _pointer(tuple(part for name in path for part in ("properties", name)))


def param_headers(params: Sequence[HeaderParam],
                  arguments: Mapping[str, object] | None) -> list[tuple[str, str]]:
    """The Mcp-Param-* headers for one tools/call, in the order of ``params``.

    An argument absent or null anywhere along its path gets no header. An intermediate
    value that is not an object also means the argument is absent: the server's schema
    check, not the header rule, rejects that body.
    """
    headers: list[tuple[str, str]] = []
    for param in params:
        value: object = arguments
        for key in param.path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is None:
            continue
        # A value of the wrong type has no defined encoding, and sending the body without
        # the header makes the server reject it, so it is refused here with its location.
        if not _has_json_type(value, param.json_type):
            raise HeaderValueError(
                f"argument {_pointer(param.path)} for header {param.header} is a "
                f"{type(value).__name__}, not a JSON {param.json_type}")
        try:
            headers.append((param.header, encode_header_value(value)))
        except HeaderValueError as exc:
            raise HeaderValueError(
                f"argument {_pointer(param.path)} for header {param.header}: {exc}") from None
    return headers


def _has_json_type(value: object, json_type: str) -> TypeGuard[str | int | bool]:
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "integer":  # a float, even 3.0, is not sent as an integer
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str)


def filter_tools_result(result: Mapping[str, object]) -> tuple[dict, ToolHeaderTable]:
    """A copy of a tools/list result without the tools whose x-mcp-header annotations are
    invalid (the client MUST drop them), plus the header table of the tools kept.

    Tools that are not objects or lack a string name are kept untouched: judging those is
    the catalog layer's job. With duplicate names the first kept tool's params win.
    """
    tools = result.get("tools")
    if not isinstance(tools, list):
        return dict(result), ToolHeaderTable(MappingProxyType({}), ())
    kept: list[object] = []
    by_tool: dict[str, tuple[HeaderParam, ...]] = {}
    dropped: list[tuple[str, str]] = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, Mapping) else None
        if isinstance(name, str):
            try:
                params = tool_header_params(tool.get("inputSchema"))
            except InvalidToolHeaders as exc:
                dropped.append((name, str(exc)))
                continue
            if params:
                by_tool.setdefault(name, params)
        kept.append(tool)
    return {**result, "tools": kept}, ToolHeaderTable(MappingProxyType(by_tool), tuple(dropped))


def configured_headers_problem(headers: Mapping[str, str]) -> str | None:
    """None if the operator's headers may be sent as they are, else a one-line reason.

    The transport owns the reserved names; letting configuration set them would break
    framing (Content-Length, Transfer-Encoding) or the agreement of headers and body."""
    if not isinstance(headers, Mapping):
        return f"configured headers must be a mapping, not a {type(headers).__name__}"
    seen: set[str] = set()
    for name, value in headers.items():
        if not isinstance(name, str):
            return f"header name {name!r} is not a string"
        if not isinstance(value, str):
            return f"value of header {name!r} is a {type(value).__name__}, not a string"
        if not _TOKEN.fullmatch(name):
            return f"header name {name!r} is not an RFC 9110 token"
        lowered = name.lower()
        if lowered in RESERVED_HEADERS or lowered.startswith(PARAM_HEADER_PREFIX.lower()):
            return f"header {name!r} is reserved for the MCP transport"
        if lowered in seen:
            return f"header {name!r} is configured twice (names are case-insensitive)"
        seen.add(lowered)
        # CR/LF/NUL would split or truncate the request (header injection). Non-ASCII is
        # refused too: HTTP clients disagree on how to put it on the wire.
        bad = next((ch for ch in value if ch != "\t" and not " " <= ch <= "~"), None)
        if bad is not None:
            kind = "a control character" if bad.isascii() or ord(bad) < 0xA0 else "non-ASCII text"
            return f"value of header {name!r} contains {kind} ({bad!r})"
    return None
