"""Validate the lines trunkline writes against the official MCP JSON Schemas.

The schemas live in ``../shared/mcp-schema/`` beside the checkout (CI lays ``shared/``
there too). A missing schema is a hard failure, never a skip: a test that validates
nothing must not pass.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import orjson

SCHEMA_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "mcp-schema"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"

# Client-sent methods -> the $defs entry describing the whole message.
_REQUEST_DEFS = {
    "server/discover": "DiscoverRequest",
    "initialize": "InitializeRequest",
    "ping": "PingRequest",
    "tools/list": "ListToolsRequest",
    "tools/call": "CallToolRequest",
    "prompts/list": "ListPromptsRequest",
    "prompts/get": "GetPromptRequest",
    "resources/list": "ListResourcesRequest",
    "resources/read": "ReadResourceRequest",
    "resources/templates/list": "ListResourceTemplatesRequest",
    "completion/complete": "CompleteRequest",
    "subscriptions/listen": "SubscriptionsListenRequest",
    "notifications/cancelled": "CancelledNotification",
    "notifications/initialized": "InitializedNotification",
}


@functools.cache
def _schema(revision: str) -> dict[str, Any]:
    path = SCHEMA_ROOT / revision / "schema.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"MCP schema {path} is missing: the repository must be checked out beside shared/"
        )
    return orjson.loads(path.read_bytes())


@functools.cache
def _validator(revision: str, definition: str) -> jsonschema.Draft202012Validator:
    schema = _schema(revision)
    if definition not in schema["$defs"]:
        raise KeyError(f"{definition} is not defined in the {revision} schema")
    root = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(root)


def definition_for(message: dict[str, Any]) -> str:
    if "method" in message:
        return _REQUEST_DEFS[message["method"]]
    if "error" in message:
        return "JSONRPCErrorResponse"
    return "JSONRPCResultResponse"


def validate_message(line: bytes | dict[str, Any], revision: str) -> dict[str, Any]:
    """Validate one client-written message (a raw line or a decoded object); return it
    decoded. Raises ``jsonschema.ValidationError`` on the first violation."""
    message = orjson.loads(line) if isinstance(line, (bytes, bytearray)) else line
    _validator(revision, definition_for(message)).validate(message)
    return message
