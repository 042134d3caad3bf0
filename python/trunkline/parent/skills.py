"""The host's side of skills served over MCP (SEP-2640): the I/O around
``protocol/skills.py``, through the host's ordinary reads (``Host.request``: retries,
timeouts, the server's era).

- Listing (``skills/list``, every page, bounded) and getting one entry (``skills/get``)
  fetch entries only: no file of a skill is read on connection, on listing, or when a
  skill is chosen. A malformed entry in a listing is left out and logged; the others are
  served. A merged listing (every ready server that declared the extension) names each
  skill by ``catalog/skills.py``; a server whose listing fails is left out of it and
  logged, never failing the others.
- A file is read (``resources/read``) only when asked for, for an entry the caller holds,
  and returned only once ``protocol/skills.py`` found it to be what the entry described
  (size, digest, and for ``SKILL.md`` its frontmatter). Anything else raises
  ``SkillVerificationFailed`` and the content is dropped; a file the entry does not list
  is not read at all.
- A server is sent none of the extension's requests unless it declared the extension
  (and ``resources/directory/read`` unless it declared ``directoryRead: true``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog.skills import skill_names
from ..channel import ServerState
from ..errors import MalformedMessage, SkillVerificationFailed
from ..protocol import skills as rules
from ..protocol.skills import SkillEntry
from .status import ServerStatus

log = logging.getLogger("trunkline.host")

#: Pages read of one server's ``skills/list`` (or of one directory) before it is cut short
#: (logged): a cursor that never ends must not keep a caller waiting forever.
MAX_PAGES = 100

#: ``request(server, method, params, timeout=...)``: one read on one server (``Host.request``).
Read = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class SkillFile:
    """One file of a skill, read and found to be what the skill's entry described:
    ``data`` its bytes, ``text`` them as UTF-8; ``mime_type`` as the server sent it."""

    skill: SkillEntry
    uri: str
    data: bytes
    mime_type: str | None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


class SkillReader:
    """Skills of the host's servers: entries listed on demand, files read and verified."""

    def __init__(self, request: Read, statuses: Callable[[], Sequence[ServerStatus]],
                 status: Callable[[str], ServerStatus], *, prefix_all: bool = False) -> None:
        self._request = request
        self._statuses = statuses
        self._status = status
        self._prefix_all = prefix_all

    async def listing(self, server: str | None, timeout: float | None) -> list[SkillEntry]:
        if server is not None:
            self._settings(server)
            entries = await self._entries(server, timeout)
            return skill_names([(server, entries)], prefix_all=self._prefix_all)
        servers = [s.name for s in self._statuses() if s.state is ServerState.READY
                   and rules.declared(s.capabilities) is not None]
        listed = await asyncio.gather(*(self._entries(s, timeout) for s in servers),
                                      return_exceptions=True)
        listings: list[tuple[str, Sequence[SkillEntry]]] = []
        for name, outcome in zip(servers, listed, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                log.warning("server %r: skills/list failed, its skills are left out: %s",
                            name, outcome, extra={"server": name})
                continue
            listings.append((name, outcome))
        return skill_names(listings, prefix_all=self._prefix_all)

    async def get(self, server: str, uri: str, timeout: float | None) -> SkillEntry:
        self._settings(server)
        result = await self._request(server, "skills/get", {"uri": uri}, timeout=timeout)
        raw = result.get("skill") if isinstance(result, dict) else None
        try:
            got = rules.entry(server, raw)
        except ValueError as exc:
            raise MalformedMessage(f"its skills/get result holds no skill entry: {exc}",
                                   server=server, method="skills/get") from None
        if got.uri != uri:
            raise MalformedMessage(f"skills/get for {uri} answered the skill at {got.uri}",
                                   server=server, method="skills/get")
        return got

    async def read(self, skill: SkillEntry, path: str, dynamic: bool,
                   timeout: float | None) -> SkillFile:
        """The file at ``path`` (relative to the skill's root, or its URI) of ``skill``,
        verified; ``skill.uri`` (``SKILL.md``) is also checked for its frontmatter."""
        uri = skill.file_uri(path)
        listed = skill.resource(uri)
        if skill.resources is None:
            if not dynamic:
                raise SkillVerificationFailed(
                    f"skill {skill.uri} publishes no digests (its resources are \"dynamic\"): "
                    "its content cannot be verified; pass dynamic=True to read it anyway",
                    kind="dynamic", uri=uri, server=skill.server)
            if uri != skill.uri and not rules.within(rules.skill_root(skill.uri) + "/", uri):
                raise SkillVerificationFailed(f"{uri} is not a file of skill {skill.uri}",
                                              kind="unlisted", uri=uri, server=skill.server)
        elif listed is None:
            raise SkillVerificationFailed(
                f"{uri} is not a file of skill {skill.uri} as its entry lists them; the "
                "skill may have changed (get its entry again)", kind="unlisted", uri=uri,
                server=skill.server)
        result = await self._request(skill.server, "resources/read", {"uri": uri},
                                     timeout=timeout)
        try:
            data, mime = rules.content(result, uri)
            if listed is not None:
                rules.check_file(listed, data)
            if uri == skill.uri:
                rules.check_frontmatter(skill, data)
        except rules.SkillMismatch as exc:
            raise SkillVerificationFailed(exc.message, kind=exc.kind, uri=uri,
                                          server=skill.server, method="resources/read") from None
        return SkillFile(skill, uri, data, mime)

    async def directory(self, server: str, uri: str, timeout: float | None
                        ) -> list[dict[str, Any]]:
        if self._settings(server).get("directoryRead") is not True:
            raise ValueError(f"server {server!r} did not declare directoryRead for its "
                             "skills: it is not asked resources/directory/read")
        children: list[dict[str, Any]] = []
        async for page in self._pages(server, "resources/directory/read", "resources",
                                      {"uri": uri}, timeout):
            children += [c for c in page if isinstance(c, dict) and isinstance(c.get("uri"), str)]
        return children

    def _settings(self, server: str) -> Mapping[str, Any]:
        settings = rules.declared(self._status(server).capabilities)
        if settings is None:
            raise ValueError(f"server {server!r} did not declare the skills extension "
                             f"({rules.SKILLS})")
        return settings

    async def _entries(self, server: str, timeout: float | None) -> list[SkillEntry]:
        entries: list[SkillEntry] = []
        async for page in self._pages(server, "skills/list", "skills", {}, timeout):
            for raw in page:
                try:
                    entries.append(rules.entry(server, raw))
                except ValueError as exc:
                    log.warning("server %r: a skills/list entry is left out: %s", server, exc,
                                extra={"server": server})
        return entries

    async def _pages(self, server: str, method: str, member: str, params: dict[str, Any],
                     timeout: float | None) -> Any:
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            body = dict(params) if cursor is None else {**params, "cursor": cursor}
            result = await self._request(server, method, body, timeout=timeout)
            page = result.get(member) if isinstance(result, dict) else None
            if not isinstance(page, list):
                raise MalformedMessage(f"its {method} result has no {member!r} list",
                                       server=server, method=method)
            yield page
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return
            if cursor in seen:
                raise MalformedMessage(f"its {method} cursor came back to {cursor!r}",
                                       server=server, method=method)
            seen.add(cursor)
        log.warning("server %r: %s cut short after %d pages", server, method, MAX_PAGES,
                    extra={"server": server})


__all__ = ["SkillFile", "SkillReader"]
