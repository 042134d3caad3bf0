"""The operator API's documents (``operator_api``): the fleet and the quarantined tools,
as JSON. Pure functions of the ``Host`` API.

Rules:

- ``SCHEMA`` names the documents' shape; fields are only ever added within one schema.
- A server's row is the status document's (``admin.server_fields``: state, era,
  counters, latencies, the host's own sentences of what went wrong) with its negotiation
  evidence and the number of its tools in the catalog. Nothing of its configuration
  (command line, environment, headers) and no stderr: those can carry secrets.
- A quarantined tool is shown with why it is held (``catalog.pins.Quarantine``), the
  definition last approved (``approved``; for a renamed tool, the one of the name it
  carries the description of) and the one it lists now (``current``), each as pinned
  (``catalog.pins.pinned_definition``); null where there is none (a new tool has no
  approved one; a tool over a bound is never pinned, and cannot be approved).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .admin import server_fields

if TYPE_CHECKING:
    from ..catalog.pins import Quarantine
    from ..parent.host import Host

SCHEMA = "trunkline.admin/1"


def server_rows(host: Host) -> list[dict[str, Any]]:
    """Every server's row, in configured order."""
    counts: dict[str, int] = {}
    for entry in host.catalog.entries:
        counts[entry.server] = counts.get(entry.server, 0) + 1
    return [{**server_fields(host, status), "evidence": list(status.evidence),
             "tools": counts.get(status.name, 0)} for status in host.servers()]


def servers_document(host: Host, reload: dict[str, Any]) -> dict[str, Any]:
    """``GET /admin/api/servers``; ``reload``: whether one is in progress, and the last
    one's outcome."""
    return {"schema": SCHEMA, "servers": server_rows(host),
            "tools": len(host.catalog.entries), "reload": reload}


def quarantine_document(host: Host) -> dict[str, Any]:
    """``GET /admin/api/quarantine``."""
    return {"schema": SCHEMA, "quarantined": [held(host, q) for q in host.quarantined()]}


def held(host: Host, quarantine: Quarantine) -> dict[str, Any]:
    """One quarantined tool, with its definitions (see the module's rules)."""
    record = host.pin_record(quarantine.server)
    approved = current = None
    if record is not None:
        pin = record.approved.get(quarantine.tool)
        if pin is None and quarantine.renamed_from is not None:
            pin = record.approved.get(quarantine.renamed_from)
        pending = record.pending.get(quarantine.tool)
        approved = None if pin is None else dict(pin.definition)
        current = None if pending is None else dict(pending.definition)
    return {"server": quarantine.server, "tool": quarantine.tool,
            "reason": quarantine.reason, "changes": list(quarantine.changes),
            "renamed_from": quarantine.renamed_from, "bound": quarantine.bound,
            "approvable": quarantine.reason != "bound", "detail": quarantine.detail,
            "approved": approved, "current": current}


__all__ = ["SCHEMA", "held", "quarantine_document", "server_rows", "servers_document"]
