"""Validate the messages trunkline writes against the official MCP protocol definitions.

Two validators, one interface (``validate_message``):

- the official JSON Schemas, when a ``shared/mcp-schema/`` folder lies beside the checkout
  (this project's CI lays it out so), checked with ``jsonschema`` (Draft 2020-12);
- otherwise the protocol models of PyPI's ``mcp-types`` (the official SDK's types,
  generated from the same schemas; installed by the test extra), validated in pydantic's
  strict mode: a newcomer's clone, with nothing beside it, runs every validation too.

The test run says which one ran (``pytest_report_header`` in ``conftest.py``). Neither is
ever skipped: a message no validator knows is an error.
"""

from __future__ import annotations

import functools
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson

SCHEMA_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "mcp-schema"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


class Invalid(ValueError):
    """A message that breaks the protocol's definition; the validator's report inside."""


def validator_name() -> str:
    if _official_schemas():
        return f"the official MCP JSON Schemas in {SCHEMA_ROOT} (jsonschema)"
    return f"the protocol models of mcp-types {version('mcp-types')} (pydantic, strict)"


@functools.cache
def _official_schemas() -> bool:
    return all((SCHEMA_ROOT / revision / "schema.json").is_file() for revision in (MODERN, LEGACY))


def validate_message(line: bytes | dict[str, Any], revision: str) -> dict[str, Any]:
    """Validate one client-written message (a raw line or a decoded object); return it
    decoded. Raises ``Invalid`` on the first violation."""
    message = orjson.loads(line) if isinstance(line, (bytes, bytearray)) else line
    if _official_schemas():
        _with_json_schema(message, revision)
    else:
        _with_models(message, revision)
    return message


# --- the official JSON Schemas ------------------------------------------------------

# Client-sent methods -> the $defs entry describing the whole message.
_DEFINITIONS = {
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
def _json_validator(revision: str, definition: str) -> Any:
    import jsonschema

    schema = orjson.loads((SCHEMA_ROOT / revision / "schema.json").read_bytes())
    if definition not in schema["$defs"]:
        raise KeyError(f"{definition} is not defined in the {revision} schema")
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{definition}",
                                            "$defs": schema["$defs"]})


def definition_for(message: dict[str, Any]) -> str:
    """The schema definition that describes ``message`` as a whole."""
    if "method" in message:
        return _DEFINITIONS[message["method"]]
    return "JSONRPCErrorResponse" if "error" in message else "JSONRPCResultResponse"


def _with_json_schema(message: dict[str, Any], revision: str) -> None:
    import jsonschema

    definition = definition_for(message)
    try:
        _json_validator(revision, definition).validate(message)
    except jsonschema.ValidationError as exc:
        raise Invalid(f"{definition} ({revision}): {exc.message}") from exc


# --- the mcp-types protocol models ---------------------------------------------------


def _with_models(message: dict[str, Any], revision: str) -> None:
    import pydantic
    from mcp_types import jsonrpc
    from mcp_types.methods import CLIENT_NOTIFICATIONS, CLIENT_REQUESTS

    method = message.get("method")
    if method is not None:
        table = CLIENT_REQUESTS if "id" in message else CLIENT_NOTIFICATIONS
        model = table[(method, revision)]
    else:
        model = jsonrpc.JSONRPCError if "error" in message else jsonrpc.JSONRPCResponse
    try:
        model.model_validate(message, strict=True)
    except pydantic.ValidationError as exc:
        raise Invalid(f"{model.__name__} ({revision}): {exc}") from exc
