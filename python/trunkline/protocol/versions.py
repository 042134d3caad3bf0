"""Protocol revisions trunkline speaks, and the vocabulary that proves a modern peer."""

from __future__ import annotations

from typing import Final

#: Modern (stateless, ``_meta`` on every request) revisions, most preferred first.
MODERN_VERSIONS: Final[tuple[str, ...]] = ("2026-07-28",)

#: Legacy (``initialize`` handshake) revisions, most preferred first. Spoken only with
#: operator-allowlisted peers after a well-formed ``InitializeResult``.
LEGACY_VERSIONS: Final[tuple[str, ...]] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

# The three error codes the 2026-07-28 revision defines. Only these, with their exact
# ``data`` shapes, count as positive evidence of a modern peer (docs/explanation/architecture.md,
# "Recognized modern errors"); the pre-release numbers -32001/-32003/-32004 deliberately
# do not.
HEADER_MISMATCH: Final = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
#: A request's log level (2026-07-28; ``logging/setLevel`` before), and the levels in
#: ascending order (syslog's, server/utilities/logging).
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
LOG_LEVELS: Final[tuple[str, ...]] = (
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def highest_shared(ours: tuple[str, ...], theirs: list[str] | tuple[str, ...]) -> str | None:
    """The newest revision both sides support. Revisions are ISO dates, so the
    lexicographic maximum is the newest."""
    shared = set(ours).intersection(theirs)
    return max(shared) if shared else None
