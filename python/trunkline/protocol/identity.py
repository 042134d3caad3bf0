"""Who the client says it is, and the bytes that say it on every modern request.

The ``_meta`` object a modern request carries depends only on the negotiated version and
the client's identity and capabilities, so it is serialized once per peer and spliced into
every request by the codec (docs/explanation/architecture.md, "The hot path of one call").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..version import VERSION
from .versions import META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION


@dataclass(frozen=True)
class ClientIdentity:
    """The client's self-description. ``capabilities`` uses the modern ``ClientCapabilities``
    shape and must list only what the host really implements: servers gate their input
    requests on it (docs/explanation/architecture.md, "Capabilities are stable")."""

    name: str = "trunkline"
    version: str = VERSION
    title: str | None = None
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    send_client_info: bool = True

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.title is not None:
            info["title"] = self.title
        return info

    def modern_meta(self, protocol_version: str,
                    extensions: Mapping[str, Any] | None = None) -> bytes:
        """The ``_meta`` object stamped on every modern request, as compact JSON bytes;
        ``extensions``: the ones negotiated with this server, added to the capabilities'
        ``extensions`` (an extension is off unless both sides declare it)."""
        capabilities = dict(self.capabilities)
        if extensions:
            capabilities["extensions"] = {**(capabilities.get("extensions") or {}),
                                          **extensions}
        meta: dict[str, Any] = {
            META_PROTOCOL_VERSION: protocol_version,
            META_CLIENT_CAPABILITIES: capabilities,
        }
        if self.send_client_info:
            meta[META_CLIENT_INFO] = self.info()
        return orjson.dumps(meta)

    def legacy_capabilities(self, client_tasks: bool = False) -> dict[str, Any]:
        """The legacy (2025-11-25) ``ClientCapabilities``: the same features, minus the
        modern-only ``extensions`` map. Modern ``roots`` has no ``listChanged``; we never
        send roots change notifications, so legacy ``roots`` stays ``{}`` too.
        ``client_tasks``: the host runs the server's elicitation and sampling requests as
        tasks when asked (``worker.client_tasks``): declared for the kinds declared."""
        capabilities = {k: v for k, v in self.capabilities.items() if k != "extensions"}
        kinds = self.task_kinds() if client_tasks else {}
        if kinds:
            requests: dict[str, Any] = {}
            if "elicitation/create" in kinds:
                requests["elicitation"] = {"create": {}}
            if "sampling/createMessage" in kinds:
                requests["sampling"] = {"createMessage": {}}
            capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": requests}
        return capabilities

    def task_kinds(self) -> frozenset[str]:
        """The server requests a legacy server may ask the host to run as tasks: those
        of the declared capabilities (``elicitation``, ``sampling``)."""
        kinds = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling"}
        return frozenset(m for m, cap in kinds.items() if cap in self.capabilities)

    def initialize_params(self, protocol_version: str, client_tasks: bool = False) -> bytes:
        """Params of the one legacy ``initialize`` request an allowlisted peer may get."""
        return orjson.dumps(
            {
                "protocolVersion": protocol_version,
                "capabilities": self.legacy_capabilities(client_tasks),
                "clientInfo": self.info(),
            }
        )
