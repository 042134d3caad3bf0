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
    return conforms(message, revision, definition_for(message))


def conforms(value: Any, revision: str, definition: str) -> Any:
    """Validate ``value`` as the protocol definition named ``definition`` (the schema's
    ``$defs`` name, e.g. ``CallToolResult``) of ``revision``; return it."""
    if _official_schemas():
        import jsonschema

        try:
            _json_validator(revision, definition).validate(value)
        except jsonschema.ValidationError as exc:
            raise Invalid(f"{definition} ({revision}): {exc.message}") from exc
    else:
        import pydantic

        model = _model(revision, definition)
        # Most definitions are models; a few (``InputRequests``) are type aliases.
        validate = (model.model_validate if hasattr(model, "model_validate")
                    else pydantic.TypeAdapter(model).validate_python)
        try:
            validate(value, strict=True)
        except pydantic.ValidationError as exc:
            raise Invalid(f"{definition} ({revision}): {exc}") from exc
    return value


# Client-sent methods -> the definition describing the whole message.
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


def definition_for(message: dict[str, Any]) -> str:
    """The definition that describes ``message`` as a whole."""
    if "method" in message:
        return _DEFINITIONS[message["method"]]
    return "JSONRPCErrorResponse" if "error" in message else "JSONRPCResultResponse"


@functools.cache
def _json_validator(revision: str, definition: str) -> Any:
    import jsonschema

    schema = orjson.loads((SCHEMA_ROOT / revision / "schema.json").read_bytes())
    if definition not in schema["$defs"]:
        raise KeyError(f"{definition} is not defined in the {revision} schema")
    return jsonschema.Draft202012Validator({"$ref": f"#/$defs/{definition}",
                                            "$defs": schema["$defs"]})


@functools.cache
def _model(revision: str, definition: str) -> Any:
    """The model mcp-types generated from the same schema for that definition (one
    module per revision, its classes named as the schema's ``$defs``)."""
    import importlib

    module = importlib.import_module(f"mcp_types._v{revision.replace('-', '_')}")
    model = getattr(module, definition, None)
    if model is None:
        raise KeyError(f"{definition} is not defined in mcp-types for {revision}")
    return model
