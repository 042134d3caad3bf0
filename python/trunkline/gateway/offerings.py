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
5. Skills (``io.modelcontextprotocol/skills``) are resources, and routed by rule 3: the
   servers declaring the extension are asked for ``skills/list`` (every page, bounded), and
   each entry's ``SKILL.md`` URI and file URIs go to its server, as a listed URI does. A
   skill URI two servers list is the first's (configured order), logged; the later
   server's entry is left out of the merged ``skills/list``, so every URI a client is
   given reaches the server whose entry named it (the gateway is one server to its
   client: it cannot serve two skills at one URI). ``skills/get`` of a URI no entry names
   goes to the only server declaring skills, if one; a directory
   (``resources/directory/read``) to the server whose skill's root holds it. The merged
   list is ordered by URI, and paged by it (``skills_page``): a cursor names the last URI
   served, so a list that changes between pages neither repeats nor skips what stayed.
6. A ``ui://`` resource (MCP Apps) that no list names but a tool's ``_meta.ui.resourceUri``
   does goes to that tool's server (after the listed URIs, before the templates): servers
   may leave their views out of ``resources/list``.

``OfferingsTable`` decides (pure); ``Offerings`` lists (I/O) and keeps the last table.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..catalog import ToolEntry, prefixed_names
from ..channel import ServerState
from ..errors import ConfigurationError
from ..parent.host import Host
from ..protocol import skills as skill_rules

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


#: The skills extension's list (rule 5).
SKILLS_LIST = "skills/list"


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
    #: the merged skill entries as served (rule 5), by URI
    skills: tuple[dict[str, Any], ...] = ()
    #: a served skill's SKILL.md URI -> server
    skill_routes: Mapping[str, str] = field(default_factory=dict)
    #: (a served skill's root, its server), longest root first
    skill_roots: tuple[tuple[str, str], ...] = ()
    #: servers declaring skills, in configured order
    skill_servers: tuple[str, ...] = ()
    #: a URI a tool's UI metadata names -> that tool's server (rule 6)
    ui_routes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, prompts: Sequence[Listed], resources: Sequence[Listed],
              templates: Sequence[Listed], resource_servers: Sequence[str], *,
              skills: Sequence[Listed] = (), skill_servers: Sequence[str] = (),
              tools: Sequence[ToolEntry] = ()) -> OfferingsTable:
        """Merge listings given in configured order (and the catalog's tools, for their
        UI resources)."""
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

        served_skills: list[dict[str, Any]] = []
        skill_routes: dict[str, str] = {}
        roots: list[tuple[str, str]] = []
        for listed in skills:
            for item in listed.items:
                uri = item["uri"]
                if uri in skill_routes:
                    log.warning("skill %r is listed by servers %r and %r; served from %r, "
                                "the other left out", uri, skill_routes[uri], listed.server,
                                skill_routes[uri])
                    continue
                files = item.get("resources")
                uris = [uri, *(f["uri"] for f in (files if isinstance(files, list) else ()))]
                taken = next((resource_routes[u] for u in uris
                              if resource_routes.get(u, listed.server) != listed.server), None)
                if taken is not None:
                    log.warning("skill %r of server %r has files server %r lists as its "
                                "resources; left out", uri, listed.server, taken)
                    continue
                skill_routes[uri] = listed.server
                served_skills.append(item)
                roots.append((skill_rules.skill_root(uri), listed.server))
                for file_uri in uris:
                    resource_routes[file_uri] = listed.server
        served_skills.sort(key=lambda item: item["uri"])
        roots.sort(key=lambda root: -len(root[0]))
        ui_routes: dict[str, str] = {}
        for tool in tools:
            view = ui_resource(tool.raw)
            if view is not None:
                ui_routes.setdefault(view, tool.server)

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
                   tuple(resource_servers), tuple(served_skills), skill_routes, tuple(roots),
                   tuple(skill_servers), ui_routes)

    def prompt(self, name: str) -> tuple[str, str] | None:
        return self.prompt_routes.get(name)

    def served(self, which: str) -> tuple[tuple[str, ...], ...]:
        """List ``which`` (``"prompts"``; ``"resources"``: with the templates and the
        skills) as a client is served it, in a form two listings compare by: each item
        as JSON with its keys sorted, in no particular order (a server may send the
        same items in another order)."""
        kinds = (self.prompts,) if which == "prompts" else \
            (self.resources, self.templates, self.skills)
        return tuple(tuple(sorted(json.dumps(item, sort_keys=True, separators=(",", ":"))
                                  for item in items)) for items in kinds)

    def skill(self, uri: str) -> str | None:
        """The server a ``skills/get`` of ``uri`` goes to (rule 5)."""
        server = self.skill_routes.get(uri)
        if server is None and len(self.skill_servers) == 1:
            return self.skill_servers[0]
        return server

    def directory(self, uri: str) -> str | None:
        """The server whose served skill holds the directory ``uri`` (rule 5)."""
        for root, server in self.skill_roots:
            if uri == root or uri.startswith(root + "/"):
                return server
        return None

    def resource(self, uri: str) -> str | None:
        """The server a URI (or a ``uriTemplate``, for completion) goes to."""
        server = self.resource_routes.get(uri) or self.ui_routes.get(uri)
        if server is not None:
            return server
        for template, pattern, owner in self.template_routes:
            if uri == template or pattern.fullmatch(uri):
                return owner
        return self.resource_servers[0] if len(self.resource_servers) == 1 else None


def ui_resource(tool: Mapping[str, Any]) -> str | None:
    """The UI resource a tool names (MCP Apps: ``_meta.ui.resourceUri``, or the
    deprecated ``_meta["ui/resourceUri"]``), or None."""
    meta = tool.get("_meta")
    if not isinstance(meta, dict):
        return None
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if isinstance(ui, dict) else meta.get("ui/resourceUri")
    return uri if isinstance(uri, str) else None


#: Entries in one page of the merged ``skills/list``.
SKILLS_PAGE = 100
_CURSOR_PREFIX = "tl-skills."


def skills_page(skills: Sequence[dict[str, Any]], cursor: Any, size: int = SKILLS_PAGE
                ) -> tuple[list[dict[str, Any]], str | None] | None:
    """One page of the merged skills (ordered by URI) after ``cursor`` (rule 5), and the
    cursor of the next page; None for a cursor the gateway did not make."""
    after = ""
    if cursor is not None:
        if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX):
            return None
        try:
            after = base64.b64decode(cursor[len(_CURSOR_PREFIX):], altchars=b"-_",
                                     validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return None
    rest = [item for item in skills if item["uri"] > after]
    page = rest[:size]
    if len(rest) <= size:
        return page, None
    last = page[-1]["uri"].encode("utf-8")
    return page, _CURSOR_PREFIX + base64.urlsafe_b64encode(last).decode("ascii")


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
        #: Changes of the fleet noted so far (``noted``), and the count when the listing
        #: under way, and the one ``table`` came from, began.
        self._noted = 0
        self._listing: tuple[int, asyncio.Task[OfferingsTable]] | None = None
        self._table_from = -1

    def close(self) -> None:
        """Stop the listing under way (the gateway stops)."""
        if self._listing is not None:
            self._listing[1].cancel()

    def noted(self) -> None:
        """The fleet's lists may have changed: a listing begun before is not shared with
        a later caller."""
        self._noted += 1

    async def refresh(self) -> OfferingsTable:
        """List everything again (concurrent callers share one listing, unless a change
        was noted since it began: a caller told of a change gets a list made after it)."""
        if self._listing is None or self._listing[1].done() or self._listing[0] != self._noted:
            self._listing = (self._noted, asyncio.ensure_future(self._list_all()))
        begun, listing = self._listing
        table = await asyncio.shield(listing)
        if begun >= self._table_from:  # a listing begun earlier does not overwrite it
            self.table, self._table_from = table, begun
        return table

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
        # A server that acts as each user is listed by each identity as itself: its
        # prompts, resources and skills are not offered to everyone from one listing.
        ready = [s for s in self._host.servers() if s.state is ServerState.READY
                 and not self._host.acts_as_each_user(s.name)]
        offering = {cap: [s.name for s in ready if (s.capabilities or {}).get(cap) is not None]
                    for cap in ("prompts", "resources")}
        skilled = [s.name for s in ready if skill_rules.declared(s.capabilities) is not None]
        prompts, resources, templates, skills = await asyncio.gather(
            *(self._one_list(method, offering[LISTS[method][0]]) for method in LISTS),
            self._one_list(SKILLS_LIST, skilled))
        return OfferingsTable.build(prompts, resources, templates, offering["resources"],
                                    skills=skills, skill_servers=skilled,
                                    tools=self._host.catalog.entries)

    async def skill(self, uri: str) -> str | None:
        return self.table.skill_routes.get(uri) or (await self.refresh()).skill(uri)

    async def directory(self, uri: str) -> str | None:
        return self.table.directory(uri) or (await self.refresh()).directory(uri)

    async def _one_list(self, method: str, servers: Iterable[str]) -> list[Listed]:
        listed = await asyncio.gather(*(self._pages(server, method) for server in servers))
        return [one for one in listed if one is not None]

    async def _pages(self, server: str, method: str) -> Listed | None:
        member = "skills" if method == SKILLS_LIST else LISTS[method][1]
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
    if method == SKILLS_LIST:
        try:
            skill_rules.entry("", item)
        except ValueError as exc:
            log.warning("a skills/list entry is left out: %s", exc)
            return False
        return True
    key = {"prompts/list": "name", "resources/list": "uri",
           "resources/templates/list": "uriTemplate"}[method]
    return isinstance(item, dict) and isinstance(item.get(key), str)
