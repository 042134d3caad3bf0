"""Prompts, resources and resource templates of the whole fleet, as the gateway serves them,
and which server each request for one of them goes to.

Rules:

1. A server is asked for a list only while it is ready and declared the capability
   (``prompts``, ``resources``). Every page is read (bounded). A server whose listing
   fails is left out of that list and logged; the others are served (one bad upstream
   never empties a list).
2. Prompts follow the tools' naming rule (``catalog.prefixed_names``): the first server in
   configured order keeps a name, later ones are served as ``<server>/<name>``.
3. A resource is routed by its URI to the server that listed it; a URI two servers list
   goes to the first (configured order), logged. A URI nobody listed goes to the first
   server with a matching template (RFC 6570, matched loosely: each expression stands for
   any text, ``/`` excepted unless it is a ``+``/``#`` expansion), else to the only server
   offering resources, else it is not found.
4. The routing table is the last one listed. A name or URI it does not know makes it list
   again once before saying "not found": another replica, or the client's own cache, may
   know a newer list than this one.

``OfferingsTable`` decides (pure); ``Offerings`` lists (I/O) and keeps the last table.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..catalog import prefixed_names
from ..channel import ServerState
from ..errors import ConfigurationError
from ..parent.host import Host

log = logging.getLogger("trunkline.gateway")

#: Pages read of one server's list before it is cut short (logged): a server whose cursor
#: never ends must not keep a client's request going forever.
MAX_PAGES = 100

#: The list methods, the capability that gates each, and the member holding the items.
LISTS = {
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("resources", "resourceTemplates"),
}


@dataclass(frozen=True)
class Listed:
    """One server's items of one list, as it sent them."""

    server: str
    items: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class OfferingsTable:
    """Everything listed, merged, with its routes. Build it with ``build``."""

    prompts: tuple[dict[str, Any], ...] = ()
    resources: tuple[dict[str, Any], ...] = ()
    templates: tuple[dict[str, Any], ...] = ()
    #: served prompt name -> (server, its own name)
    prompt_routes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: resource URI -> server
    resource_routes: Mapping[str, str] = field(default_factory=dict)
    #: (uriTemplate, its pattern, server), in configured order
    template_routes: tuple[tuple[str, re.Pattern[str], str], ...] = ()
    #: servers offering resources, in configured order
    resource_servers: tuple[str, ...] = ()

    @classmethod
    def build(cls, prompts: Sequence[Listed], resources: Sequence[Listed],
              templates: Sequence[Listed], resource_servers: Sequence[str]) -> OfferingsTable:
        """Merge listings given in configured order."""
        claimants = [(listed.server, item["name"]) for listed in prompts
                     for item in listed.items]
        names: Sequence[str | None]
        try:
            names = prefixed_names(claimants, kind="prompt")
        except ConfigurationError as exc:
            log.warning("prompts: %s; the later server's prompt is left out", exc)
            names = _names_leaving_out_collisions(claimants)
        served_prompts: list[dict[str, Any]] = []
        prompt_routes: dict[str, tuple[str, str]] = {}
        items = [item for listed in prompts for item in listed.items]
        for (server, local), name, item in zip(claimants, names, items, strict=True):
            if name is None:
                continue
            served_prompts.append({**item, "name": name})
            prompt_routes[name] = (server, local)

        served_resources: list[dict[str, Any]] = []
        resource_routes: dict[str, str] = {}
        for listed in resources:
            for item in listed.items:
                uri = item["uri"]
                if uri in resource_routes:
                    log.warning("resource %r is listed by servers %r and %r; served from %r",
                                uri, resource_routes[uri], listed.server, resource_routes[uri])
                    continue
                resource_routes[uri] = listed.server
                served_resources.append(item)

        served_templates, template_routes, seen = [], [], set()
        for listed in templates:
            for item in listed.items:
                template = item["uriTemplate"]
                if template in seen:
                    continue
                seen.add(template)
                served_templates.append(item)
                template_routes.append((template, template_pattern(template), listed.server))
        return cls(tuple(served_prompts), tuple(served_resources), tuple(served_templates),
                   prompt_routes, resource_routes, tuple(template_routes),
                   tuple(resource_servers))

    def prompt(self, name: str) -> tuple[str, str] | None:
        return self.prompt_routes.get(name)

    def resource(self, uri: str) -> str | None:
        """The server a URI (or a ``uriTemplate``, for completion) goes to."""
        server = self.resource_routes.get(uri)
        if server is not None:
            return server
        for template, pattern, owner in self.template_routes:
            if uri == template or pattern.fullmatch(uri):
                return owner
        return self.resource_servers[0] if len(self.resource_servers) == 1 else None


def _names_leaving_out_collisions(claimants: Sequence[tuple[str, str]]) -> list[str | None]:
    """The naming rule item by item, leaving out (None) any item whose prefixed name is
    already taken, instead of refusing the whole list."""
    names: list[str | None] = []
    taken: list[tuple[str, str]] = []
    for claimant in claimants:
        try:
            name = prefixed_names([*taken, claimant], kind="prompt")[-1]
        except ConfigurationError:
            names.append(None)
            continue
        taken.append(claimant)
        names.append(name)
    return names


_EXPRESSION = re.compile(r"\{([+#./;?&]?)[^}]*\}")


def template_pattern(template: str) -> re.Pattern[str]:
    """A loose matcher for an RFC 6570 URI template: literal text as it is, ``{x}`` for
    text without ``/``, ``{+x}``/``{#x}`` for any text, query and other operators for
    anything (they may expand to nothing)."""
    out, at = [], 0
    for expression in _EXPRESSION.finditer(template):
        out.append(re.escape(template[at:expression.start()]))
        operator = expression.group(1)
        out.append("[^/?#]*" if operator == "" else ".*")
        at = expression.end()
    out.append(re.escape(template[at:]))
    return re.compile("".join(out), re.DOTALL)


class Offerings:
    """The fleet's prompts and resources, listed on demand, and the last routing table."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self.table = OfferingsTable()
        self._listing: asyncio.Task[OfferingsTable] | None = None

    async def refresh(self) -> OfferingsTable:
        """List everything again (concurrent callers share one listing)."""
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(self._list_all())
        self.table = await asyncio.shield(self._listing)
        return self.table

    async def prompt(self, name: str) -> tuple[str, str] | None:
        return self.table.prompt(name) or (await self.refresh()).prompt(name)

    async def resource(self, uri: str) -> str | None:
        return self.table.resource(uri) or (await self.refresh()).resource(uri)

    async def resources(self, uris: Iterable[str]) -> dict[str, str | None]:
        """The server each URI goes to (None: none), listing everything again at most
        once for them all, however many the table does not know."""
        routes = {uri: self.table.resource(uri) for uri in uris}
        if None in routes.values():
            table = await self.refresh()
            for uri, server in routes.items():
                if server is None:
                    routes[uri] = table.resource(uri)
        return routes

    async def _list_all(self) -> OfferingsTable:
        ready = [s for s in self._host.servers() if s.state is ServerState.READY]
        offering = {cap: [s.name for s in ready if (s.capabilities or {}).get(cap) is not None]
                    for cap in ("prompts", "resources")}
        prompts, resources, templates = await asyncio.gather(*(
            self._one_list(method, offering[LISTS[method][0]]) for method in LISTS))
        return OfferingsTable.build(prompts, resources, templates, offering["resources"])

    async def _one_list(self, method: str, servers: Iterable[str]) -> list[Listed]:
        listed = await asyncio.gather(*(self._pages(server, method) for server in servers))
        return [one for one in listed if one is not None]

    async def _pages(self, server: str, method: str) -> Listed | None:
        member = LISTS[method][1]
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_PAGES):
                result = await self._host.request(
                    server, method, {"cursor": cursor} if cursor is not None else None)
                page = result.get(member)
                if not isinstance(page, list):
                    raise ValueError(f"its {method} result has no {member!r} list")
                items += [item for item in page if _well_formed(method, item)]
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str):
                    return Listed(server, tuple(items))
            log.warning("server %r: %s cut short after %d pages", server, method, MAX_PAGES)
            return Listed(server, tuple(items))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one server's failure leaves only it out
            log.warning("server %r: %s failed, left out: %s", server, method, exc)
            return None


def _well_formed(method: str, item: Any) -> bool:
    key = {"prompts/list": "name", "resources/list": "uri",
           "resources/templates/list": "uriTemplate"}[method]
    return isinstance(item, dict) and isinstance(item.get(key), str)
