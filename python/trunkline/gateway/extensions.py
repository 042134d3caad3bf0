"""The MCP extensions the gateway serves its clients, and every other extension a server
behind it declares, left out on purpose. The one place that rule lives. Pure.

Rules:

1. ``RELAYED`` is the table of what the gateway implements, one ``Extension`` a row: the
   methods it answers for it (routed to the servers behind), whether it serves it to a
   2025-11-25 client too, what its host declares to the servers behind for it (the
   client side of the extension), and how the settings it advertises follow from the
   servers' own. Adding an extension is adding a row (and its methods' routes in
   ``answers``).
2. A relayed extension is advertised to a client (``server/discover``; ``initialize``
   when its row serves legacy clients) while a ready server behind declares it, with the
   settings its row derives from theirs; its methods are answered while one does, and
   are an unknown method (-32601) otherwise, or to a client of an era the row does not
   serve. A method its row gates on a setting (``directoryRead``) is answered only
   while that setting is advertised. A row the gateway implements itself for every
   server behind (``own``: tasks) is advertised whatever they declare, and its methods
   are the gateway's own (not routed, so not in ``METHODS``).
3. Every other extension a server declares is left out: never advertised, its methods
   unknown to the gateway's clients. Not an oversight: the gateway would pass on what it
   cannot check. Logged once per server (``LeftOut``), and shown in ``/status``
   (``verdicts``: relayed, or left out).

The rows:

- ``io.modelcontextprotocol/skills`` (SEP-2640): ``skills/list`` (merged), ``skills/get``
  and ``resources/directory/read`` (routed as resources are: ``offerings``). Modern
  clients only: the extension is specified against 2026-07-28 (its results are
  ``CacheableResult``s, and 2025-11-25's capabilities have no ``extensions``), and its
  servers serve it to modern clients only. ``directoryRead`` is advertised only when
  every ready server declaring skills declares it: the gateway would otherwise owe the
  method for directories no server behind answers.
- ``io.modelcontextprotocol/tasks`` (SEP-2663): ``own``. The gateway follows every server's
  tasks itself (its host does, whatever era the server speaks), so it serves the
  extension to every modern client: a ``tools/call`` naming it may be answered with a
  task under an id of the gateway's, asked about with ``tasks/get``, ``tasks/update`` and
  ``tasks/cancel``, which ``gateway/tasks.py`` answers. Modern clients only (2025-11-25
  has core tasks of its own, which the gateway serves from the same table:
  ``gateway/tasks.py`` rule 7). Nothing is declared upstream here: the host declares
  the extension to each server that declares it (``HostSettings.extensions``).
- ``io.modelcontextprotocol/ui`` (MCP Apps, SEP-1865): no methods of its own; a tool's
  ``_meta.ui`` passes through ``tools/list`` as it came and ``ui://`` resources through
  ``resources/list`` and ``resources/read`` (``offerings`` routes a UI resource no list
  names to the server of the tool that names it). Both eras: MCP Apps is negotiated in
  ``initialize`` by the clients that render it. The gateway's host declares it to the
  servers behind (``mimeTypes``: the HTML profile), so a server that registers its UI
  tools only for clients that render them does; a client that renders none gets the
  tools' text content, which every such tool returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol.skills import SKILLS
from ..protocol.tasks import TASKS_EXTENSION

log = logging.getLogger("trunkline.gateway")

#: MCP Apps' identifier, and the content type of its views.
UI = "io.modelcontextprotocol/ui"
UI_MIME = "text/html;profile=mcp-app"

Settings = Mapping[str, Any]


def _no_settings(_declared: Sequence[Settings]) -> dict[str, Any]:
    return {}


def _skills_settings(declared: Sequence[Settings]) -> dict[str, Any]:
    if declared and all(s.get("directoryRead") is True for s in declared):
        return {"directoryRead": True}
    return {}


@dataclass(frozen=True)
class Extension:
    """One extension the gateway relays (rule 1)."""

    id: str
    #: The requests the gateway answers for it.
    methods: frozenset[str] = frozenset()
    #: Served to 2025-11-25 clients too (advertised in ``initialize``).
    legacy: bool = False
    #: What the gateway's host declares to the servers behind for it; None: nothing.
    upstream: Mapping[str, Any] | None = None
    #: The settings advertised, from those of the ready servers that declare it.
    settings: Callable[[Sequence[Settings]], dict[str, Any]] = field(default=_no_settings)
    #: A method answered only while the setting it names is advertised as true.
    gated: Mapping[str, str] = field(default_factory=dict)
    #: Implemented by the gateway itself for every server behind: advertised whatever
    #: they declare, its methods answered by the gateway (rule 2).
    own: bool = False


RELAYED: Mapping[str, Extension] = {row.id: row for row in (
    Extension(SKILLS, methods=frozenset({"skills/list", "skills/get",
                                         "resources/directory/read"}),
              settings=_skills_settings,
              gated={"resources/directory/read": "directoryRead"}),
    Extension(UI, legacy=True, upstream={"mimeTypes": [UI_MIME]}),
    Extension(TASKS_EXTENSION, own=True),
)}

#: Each method a relayed extension adds -> its row.
METHODS: Mapping[str, Extension] = {method: row for row in RELAYED.values()
                                    for method in row.methods}


def declared(capabilities: Mapping[str, Any] | None) -> dict[str, Settings]:
    """The extensions in a server's capabilities, with their settings (an extension
    declared with settings that are not an object counts, with none)."""
    extensions = (capabilities or {}).get("extensions")
    if not isinstance(extensions, dict):
        return {}
    return {key: value if isinstance(value, dict) else {} for key, value in extensions.items()
            if isinstance(key, str)}


def advertised(ready: Iterable[Mapping[str, Any] | None], *, legacy: bool
               ) -> dict[str, dict[str, Any]]:
    """The ``extensions`` the gateway advertises (rule 2), given the capabilities of each
    ready server behind it and whether the client is of the 2025-11-25 era."""
    by_id: dict[str, list[Settings]] = {}
    for capabilities in ready:
        for key, settings in declared(capabilities).items():
            by_id.setdefault(key, []).append(settings)
    return {key: row.settings(by_id.get(key, ())) for key, row in RELAYED.items()
            if (key in by_id or row.own) and (row.legacy or not legacy)}


def serves(method: str, ready: Iterable[Mapping[str, Any] | None], *, legacy: bool) -> bool:
    """Whether the gateway answers ``method`` (a relayed extension's) now, to a client of
    that era: its extension is advertised, with the setting that gates it, if one does."""
    row = METHODS[method]
    settings = advertised(ready, legacy=legacy).get(row.id)
    if settings is None:
        return False
    setting = row.gated.get(method)
    return setting is None or settings.get(setting) is True


def upstream() -> dict[str, Any]:
    """The ``extensions`` the gateway's host declares to the servers behind it."""
    return {row.id: dict(row.upstream) for row in RELAYED.values() if row.upstream is not None}


def verdicts(extensions: Iterable[str]) -> list[dict[str, str]]:
    """Each extension a server declared, and whether the gateway relays it (rule 3)."""
    return [{"id": key, "gateway": "relayed" if key in RELAYED else "left out"}
            for key in extensions]


class LeftOut:
    """Says once per server which extensions it declared that the gateway leaves out
    (rule 3): a server restarted with the same ones is not said again."""

    def __init__(self) -> None:
        self._said: dict[str, frozenset[str]] = {}

    def note(self, server: str, extensions: Iterable[str]) -> None:
        left = frozenset(key for key in extensions if key not in RELAYED)
        if not left or self._said.get(server) == left:
            return
        self._said[server] = left
        log.warning("server %r declares %s, which the gateway does not relay: left out (its "
                 "clients see neither the extension nor its methods)", server,
                 ", ".join(sorted(left)), extra={"server": server})


__all__ = ["METHODS", "RELAYED", "UI", "UI_MIME", "Extension", "LeftOut", "advertised",
           "declared", "serves", "upstream", "verdicts"]
