"""Shape checks for the results that decide a peer's era.

Each checker returns ``None`` when the value is acceptable, or one sentence saying what is
wrong: the sentence becomes part of the evidence shown to the operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .versions import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages a server author can act on."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _non_empty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def discover_result_problem(result: Any) -> str | None:
    """A valid ``DiscoverResult`` has ``supportedVersions`` (a list of strings),
    ``capabilities`` (an object) and ``resultType`` "complete" or absent."""
    if not isinstance(result, dict):
        return f"result is {type(result).__name__}, not an object"
    if result.get("resultType", "complete") != "complete":
        return f"resultType is {result.get('resultType')!r}, not 'complete'"
    if not _is_str_list(result.get("supportedVersions")):
        return "supportedVersions is missing or not a list of strings"
    if not isinstance(result.get("capabilities"), dict):
        return "capabilities is missing or not an object"
    return None


def initialize_result_problem(result: Any, legacy_versions: Sequence[str]) -> str | None:
    """A legacy ``InitializeResult`` is accepted only when every field we rely on is
    well-formed and the version is one we were configured to speak."""
    if not isinstance(result, dict):
        return f"result is {type(result).__name__}, not an object"
    version = result.get("protocolVersion")
    if not isinstance(version, str):
        return "protocolVersion is missing or not a string"
    if version not in legacy_versions:
        return f"protocolVersion {version!r} is not in the legacy set {list(legacy_versions)}"
    if not isinstance(result.get("capabilities"), dict):
        return "capabilities is missing or not an object"
    info = result.get("serverInfo")
    if not isinstance(info, dict):
        return "serverInfo is missing or not an object"
    if not _non_empty_str(info.get("name")):
        return "serverInfo.name is missing or empty"
    if not _non_empty_str(info.get("version")):
        return "serverInfo.version is missing or empty"
    return None


def is_recognized_modern_error(code: int, data: Any) -> bool:
    """Only -32020/-32021/-32022 with their exact ``data`` shapes prove a modern peer
    (docs/explanation/architecture.md, "Recognized modern errors"). Anything else,
    including look-alikes with the wrong ``data``, is not evidence."""
    if code == UNSUPPORTED_PROTOCOL_VERSION:
        return (
            isinstance(data, dict)
            and _is_str_list(data.get("supported"))
            and isinstance(data.get("requested"), str)
        )
    if code == MISSING_REQUIRED_CLIENT_CAPABILITY:
        return isinstance(data, dict) and isinstance(data.get("requiredCapabilities"), dict)
    # The schema defines no data for HeaderMismatch: the code alone is the signal.
    return code == HEADER_MISMATCH
