"""The gateway's tool-search mode (``trunkline serve --tool-search``): two tools instead of
the whole catalog, so a model finds and calls any of thousands of tools at a constant
context cost. Pure: the two tools' definitions, their arguments checked, their results.

Rules:

1. ``tools/list`` serves exactly ``search_tools`` and ``call_tool`` (``TOOLS``).
2. ``search_tools {query, limit?}`` answers the best matches of ``Host.search_tools``
   (``limit`` 1-50, default 10) as ``structuredContent {"tools": [...]}`` (each tool's
   served name, title, description, input schema, server and score: what the model
   needs to call it) and the same JSON as text, for clients that read only text.
3. ``call_tool {name, arguments?}`` is the ``tools/call`` of ``name`` with ``arguments``
   (default ``{}``): whatever that call would have answered, result (``isError`` and
   ``structuredContent`` included) or JSON-RPC error, is the answer, unchanged.
4. A model's mistake in using the two tools (arguments of the wrong shape, a name no tool
   has) is an execution error (``isError: true``, saying what to do), not a protocol
   error: bad input values are execution errors, which a client passes to the model so
   it can correct itself (MCP 2026-07-28, server/tools). A ``tools/call`` of any other
   name is -32602, as for any unknown tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..catalog.search import ToolMatch
from . import protocol as p

SEARCH = "search_tools"
CALL = "call_tool"
DEFAULT_LIMIT = 10
MAX_LIMIT = 50
MAX_QUERY_CHARS = 1000

_FOUND_TOOL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "what to pass to call_tool as its name"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "inputSchema": {"type": "object", "description": "the tool's arguments"},
        "server": {"type": "string"},
        "score": {"type": "number"},
    },
    "required": ["name", "inputSchema", "server", "score"],
}

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": SEARCH,
        "title": "Search tools",
        "description": (
            "Find the tools that can do something, among every tool of every server behind "
            "this gateway: describe the task in a few words (or give part of a tool's "
            "name). Returns the best matches, best first, each with its name and input "
            "schema; call one with call_tool."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                          "description": "what the tool should do, or part of its name"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                          "default": DEFAULT_LIMIT,
                          "description": "how many tools to return at most"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"tools": {"type": "array", "items": _FOUND_TOOL}},
            "required": ["tools"],
        },
        "annotations": {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": CALL,
        "title": "Call a tool",
        "description": (
            "Call a tool found with search_tools, by its name, with arguments that match its "
            "input schema. Returns that tool's own result."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1,
                         "description": "the tool's name, as search_tools gave it"},
                "arguments": {"type": "object",
                              "description": "the tool's arguments (default: none)"},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
)


def search_arguments(arguments: Mapping[str, Any]) -> tuple[str, int] | dict[str, Any]:
    """``(query, limit)``, or the tool error for arguments that are not those (rule 4)."""
    extra = sorted(set(arguments) - {"query", "limit"})
    query = arguments.get("query")
    limit = arguments.get("limit", DEFAULT_LIMIT)
    if extra:
        return tool_error(f"{SEARCH} takes query and limit, not {', '.join(extra)}")
    if not isinstance(query, str) or not query.strip():
        return tool_error(f"{SEARCH} needs a query: a few words saying what the tool does")
    if len(query) > MAX_QUERY_CHARS:
        return tool_error(f"the query is {len(query)} characters; at most {MAX_QUERY_CHARS}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        return tool_error(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {limit!r}")
    return query, limit


def call_arguments(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | dict[str, Any]:
    """``(name, arguments)`` of the tool to call, or the tool error (rule 4)."""
    extra = sorted(set(arguments) - {"name", "arguments"})
    name = arguments.get("name")
    inner = arguments.get("arguments", {})
    if extra:
        return tool_error(f"{CALL} takes name and arguments, not {', '.join(extra)}")
    if not isinstance(name, str) or not name:
        return tool_error(f"{CALL} needs the name of a tool (find one with {SEARCH})")
    if not isinstance(inner, dict):
        return tool_error(f"{CALL}'s arguments must be an object (the tool's arguments), "
                          f"not {type(inner).__name__}")
    return name, inner


def unknown_tool(name: str) -> dict[str, Any]:
    return tool_error(f"no tool is named {name!r}; {SEARCH} finds tools by what they do, "
                      "and gives the names to call them by")


def found(matches: Sequence[ToolMatch]) -> dict[str, Any]:
    """Rule 2's result."""
    tools = []
    for match in matches:
        entry = match.entry
        tool: dict[str, Any] = {"name": match.name}
        if entry.title:
            tool["title"] = entry.title
        if entry.description is not None:
            tool["description"] = entry.description
        tool["inputSchema"] = entry.input_schema
        tool["server"] = match.server
        tool["score"] = round(match.score, 4)
        tools.append(tool)
    structured = {"tools": tools}
    return {"content": [{"type": "text", "text": orjson.dumps(structured).decode()}],
            "structuredContent": structured}


def tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def not_served(name: str) -> dict[str, Any]:
    """A ``tools/call`` of anything but the two tools."""
    return p.error(p.INVALID_PARAMS, f"Unknown tool: {name!r} (this gateway serves {SEARCH} "
                   f"and {CALL}; call other tools through {CALL})")
