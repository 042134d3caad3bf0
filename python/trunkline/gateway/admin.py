"""The gateway's status document (``GET /status``), read by ``trunkline status``.

Rules:

- Built from the ``Host`` API only (``servers``, ``call_latency``, ``tools``), like the
  rest of the gateway.
- What an operator needs per server and nothing that could carry a secret: no
  configuration (a server's command line, environment, headers), no stderr, no
  credential. Reasons, hints (``ServerStatus.hint``: how to lift a refusal) and errors
  are the host's own sentences.
- Fields are only ever added within one ``SCHEMA``; a reader ignores those it does not
  know.
- ``extensions``: each MCP extension the server declared, and whether the gateway relays
  it or leaves it out (``gateway/extensions.py``).
- ``instances`` (a per-user server's only): its per-user instances now, a count; and
  ``user_instances`` (when a server is per-user): those of every server and their bound.
  Never whose they are.
- Latencies are milliseconds, rounded to the microsecond; ``null`` before a first
  answered call.
- The face serves it behind the same checks as ``/mcp`` (API keys, OAuth tokens).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .extensions import verdicts

if TYPE_CHECKING:
    from ..parent.host import Host
    from ..parent.status import ServerStatus
    from ..telemetry.audit import AuditLog

#: The document's shape; ``trunkline status`` refuses one it does not know.
SCHEMA = "trunkline.status/1"


def status_document(host: Host, audit: AuditLog | None = None) -> dict[str, Any]:
    servers = []
    for status in host.servers():
        servers.append({**server_fields(host, status),
                        "extensions": verdicts(status.extensions)})
        if status.instances is not None:
            servers[-1]["instances"] = status.instances
    document: dict[str, Any] = {"schema": SCHEMA, "tools": len(host.catalog.entries),
                                "servers": servers}
    if any(server.get("instances") is not None for server in servers):
        document["user_instances"] = {"running": host.user_instances,
                                      "limit": host.settings.max_user_instances}
    access = host.access
    if access.policy is not None:
        # Counts only: never who, nor which rule decided for whom.
        document["policy"] = {"origin": access.policy.origin,
                              "rules": len(access.policy.rules),
                              "sha256": access.policy.digest,
                              "identities": access.identities, **access.counts}
    if audit is not None:
        document["audit"] = audit.status()
    return document


def server_fields(host: Host, status: ServerStatus) -> dict[str, Any]:
    """One server's state, era, counters and latencies, as this document and the
    operator API's (``operator_documents``) both give them."""
    latency = host.call_latency(status.name)
    return {"name": status.name, "state": status.state.value, "era": status.era,
            "version": status.version, "reason": status.reason, "hint": status.hint,
            "in_flight": status.in_flight, "answered": latency.answered,
            "p50_ms": _ms(latency.p50_s), "p99_ms": _ms(latency.p99_s),
            "restarts": status.restarts, "last_error": status.last_error,
            "last_error_at": status.last_error_at, "listing_error": status.listing_error}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


__all__ = ["SCHEMA", "server_fields", "status_document"]
