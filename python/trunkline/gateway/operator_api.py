"""The operator API: every path under ``/admin`` of the HTTP face (``http`` hands them
here once its Host and Origin checks passed), behind the admin credential
(``admin_access``).

Routes (JSON, ``Cache-Control: no-store``; described by the OpenAPI 3.1 document at
``/admin/api/openapi.json``, ``operator_openapi``):

- ``POST /admin/login`` (a form with an admin key: a browser session), ``POST
  /admin/logout``, ``GET /admin/api/session`` (the session's CSRF token);
- ``GET /admin/api/servers``, ``GET /admin/api/servers/{name}``: each server's state, era,
  evidence, restarts, calls in flight, latencies, last error (``operator_documents``), and
  the reload in progress or last done; ``POST .../{name}/restart`` (its worker stopped and
  started again, the era negotiated afresh), ``POST .../{name}/retry`` (an unavailable
  server tried again, or a failed listing made again);
- ``GET /admin/api/quarantine``: the quarantined tools with their definitions and what
  changed; ``POST /admin/api/quarantine/{server}/{tool}/approve`` (then it is in clients'
  ``tools/list``, each told by a list change);
- ``POST /admin/api/reload``: the configuration read again and the fleet changed by
  difference (``Gateway.reload``): 200 with the outcome, 422 with the reason it was
  refused (the old configuration keeps serving);
- ``GET /admin/api/config``: the configuration file as it reads now, every secret
  redacted (``config_view``);
- ``GET /admin/api/credentials[?user=...&server=...]``: the records the token store holds,
  per user (``auth.held_credentials``: never a value); ``POST
  /admin/api/credentials/revoke`` with ``{"user": "KIND:SUBJECT@ISSUER", "server":
  optional}``: the user's tokens revoked at their issuers where advertised, its records
  deleted, then everything the running gateway holds for it dropped
  (``Host.forget_user``): its next listing offers ``sign_in`` again;
- ``GET /admin/api/events``: the documents as they change (``operator_events``).

Rules:

1. Every route but the login asks ``AdminAccess.check`` first, so nothing under ``/admin``
   (an unknown path included) tells anything to a request without the credential: 401.
   Every POST but the login is a state change (a cookie-authenticated one needs its CSRF
   token).
2. The other paths under ``/admin`` (the dashboard's pages, ``/admin/static/...``) go to
   ``pages`` when the dashboard is served, which asks ``check`` itself; without it they
   are 404 (once the credential is shown).
3. A browser session is held by the gateway process that opened it: with ``serve
   --processes N`` a request whose cookie names a sibling copy is passed to it whole
   (``siblings``), so one browser sees one copy's fleet throughout. A restart, retry or
   approval is done by every copy (``operator_copies``), and so is a revocation's
   forgetting (the store's records are gone once the first copy answers, so the others
   find nothing to revoke); a reload by every copy through the parent
   (``Gateway.reload``). Who revoked whom is logged with the user's spelling, never a
   token.
4. Errors are ``{"error": sentence}`` with the status that fits (400, 401, 403, 404, 405,
   409, 413, 422, 503); never a credential, a header or an environment value.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

import orjson

from ..auth.held_credentials import held_rows, identity_of, parse_user, revoke_user
from ..auth.user_store import spell_user
from ..errors import ConfigurationError, StoreKeyMissing, TrunklineError, UnknownTool
from . import config_view
from .admin_access import COPY_HEADER, AdminAccess
from .operator_copies import tell_siblings
from .operator_documents import (
    SCHEMA,
    held,
    quarantine_document,
    server_rows,
    servers_document,
)
from .operator_events import OperatorEvents
from .replies import HttpReply, json_reply
from .siblings import Siblings, SiblingUnreachable

if TYPE_CHECKING:
    from ..parent.host import Host
    from .exchange import Exchange
    from .reload import ReloadOutcome

log = logging.getLogger("trunkline.gateway")

_NO_STORE = {"Cache-Control": "no-store"}
#: The largest body a POST of the API is read to (the login's form and a revocation's
#: JSON are the only ones that carry one).
_MAX_BODY = 4096

#: A page handler (the dashboard's): answers, or None when it answered as a stream.
Pages = Callable[["Exchange"], Awaitable[HttpReply | None]]


class Fleet(Protocol):
    """What the API needs of the gateway (``serve.Gateway``)."""

    @property
    def host(self) -> Host: ...

    @property
    def reloading(self) -> bool: ...

    @property
    def last_reload(self) -> ReloadOutcome | None: ...

    async def reload(self) -> ReloadOutcome: ...

    def watch_reloads(self, cb: Callable[[ReloadOutcome], None]) -> Callable[[], None]: ...


@dataclass(frozen=True)
class Route:
    """One route of the API: its method, its path template (as the OpenAPI document names
    it) and the handler's name."""

    method: str
    template: str
    handler: str


ROUTES: tuple[Route, ...] = (
    Route("POST", "/admin/login", "_login"),
    Route("POST", "/admin/logout", "_logout"),
    Route("GET", "/admin/api/openapi.json", "_openapi"),
    Route("GET", "/admin/api/session", "_session"),
    Route("GET", "/admin/api/servers", "_servers"),
    Route("GET", "/admin/api/servers/{name}", "_server"),
    Route("POST", "/admin/api/servers/{name}/restart", "_restart"),
    Route("POST", "/admin/api/servers/{name}/retry", "_retry"),
    Route("GET", "/admin/api/quarantine", "_quarantine"),
    Route("POST", "/admin/api/quarantine/{server}/{tool}/approve", "_approve"),
    Route("POST", "/admin/api/reload", "_reload"),
    Route("GET", "/admin/api/config", "_config"),
    Route("GET", "/admin/api/credentials", "_credentials"),
    Route("POST", "/admin/api/credentials/revoke", "_revoke"),
    Route("GET", "/admin/api/events", "_events"),
)


def _compiled(route: Route) -> re.Pattern[str]:
    """The route's template as a pattern: a parameter is one path segment, but a tool's
    name, which may hold '/', takes the rest up to the fixed tail."""
    parts = re.split(r"(\{\w+\})", route.template)
    regex = "".join(
        (f"(?P<{part[1:-1]}>{'.+' if part == '{tool}' else '[^/]+'})"
         if part.startswith("{") else re.escape(part)) for part in parts)
    return re.compile(f"^{regex}$")


_PATTERNS = [(route, _compiled(route)) for route in ROUTES]


def match(path: str) -> list[tuple[Route, dict[str, str]]]:
    """The routes whose template ``path`` fits, with its parameters."""
    found = []
    for route, pattern in _PATTERNS:
        hit = pattern.match(path)
        if hit is not None:
            found.append((route, hit.groupdict()))
    return found


class OperatorApi:
    """The ``/admin`` handler of one gateway process (``HttpFace.admin``)."""

    def __init__(self, fleet: Fleet, access: AdminAccess, *,
                 config: str | os.PathLike[str], siblings: Siblings | None = None,
                 copies: bytes | None = None, pages: Pages | None = None) -> None:
        """``config``: the configuration file's path; ``copies``: the copies' shared key
        (``admin_access`` rule 5), with ``siblings``; ``pages``: the dashboard's pages
        (rule 2)."""
        self.access = access
        self._config_path = config
        self.pages = pages
        self._fleet = fleet
        self._siblings = siblings
        self._copies = copies
        self._streams = OperatorEvents({"servers": self._servers_document,
                                       "quarantine": self._quarantine_document})
        host = fleet.host
        self._unwatch = [host.watch_servers(self._streams.changed),
                         host.watch_catalog(self._streams.changed),
                         fleet.watch_reloads(self._reloaded)]

    def close(self) -> None:
        """Stop watching and end the event streams (before the face drains)."""
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch = []
        self._streams.close()

    async def __call__(self, exchange: Exchange) -> HttpReply | None:
        holder = self.access.holder_of(exchange)
        if holder is not None and self._siblings is not None and not exchange.internal:
            index = self._siblings.index_of(holder)
            if index is not None:
                return await self._passed(exchange, index)
        found = match(exchange.path)
        if not found:
            if self.pages is not None:
                return await self.pages(exchange)
            return await self.access.check(exchange, changes_state=exchange.method != "GET") \
                or _error(404, f"nothing at {exchange.path}")
        route_params = next(((r, p) for r, p in found if r.method == exchange.method), None)
        if route_params is None:
            refused = await self.access.check(exchange, changes_state=False)
            return refused or HttpReply(405, b"", {
                **_NO_STORE, "Allow": ", ".join(r.method for r, _ in found)})
        route, params = route_params
        if route.handler == "_login":
            return await self.access.login(exchange)
        refused = await self.access.check(exchange, changes_state=route.method != "GET")
        if refused is not None:
            return refused
        if route.method == "POST" and await exchange.body(_MAX_BODY) is None:
            return _error(413, f"a body over {_MAX_BODY} bytes")
        handler: Callable[..., Awaitable[HttpReply | None]] = getattr(self, route.handler)
        return await handler(exchange, **params)

    async def _passed(self, exchange: Exchange, index: int) -> HttpReply | None:
        assert self._siblings is not None
        body = await exchange.body(_MAX_BODY) if exchange.method == "POST" else None
        try:
            answered = await self._siblings.forward(exchange, body, index)
        except SiblingUnreachable:
            return _error(401, "the session ended with the gateway process that held it: "
                               "log in again")
        if answered is None:
            return None
        status, content, headers = answered
        return HttpReply(status, content, headers, content_type=None)

    # -- the routes ----------------------------------------------------------------------

    async def _logout(self, exchange: Exchange) -> HttpReply:
        return await self.access.logout(exchange)

    async def _openapi(self, exchange: Exchange) -> HttpReply:
        from ..version import VERSION
        from .operator_openapi import openapi_document

        return _json(openapi_document(VERSION))

    async def _session(self, exchange: Exchange) -> HttpReply:
        return _json(self.access.session_document(exchange))

    async def _servers(self, exchange: Exchange) -> HttpReply:
        return _json(self._servers_document())

    async def _server(self, exchange: Exchange, name: str) -> HttpReply:
        row = self._row(name)
        return _json(row) if row is not None else _unknown_server(name)

    async def _restart(self, exchange: Exchange, name: str) -> HttpReply:
        return await self._act(exchange, name, "restarts", self._fleet.host.restart_server)

    async def _retry(self, exchange: Exchange, name: str) -> HttpReply:
        return await self._act(exchange, name, "retries", self._fleet.host.retry)

    async def _act(self, exchange: Exchange, name: str, verb: str,
                   action: Callable[[str], Awaitable[object]]) -> HttpReply:
        """One operator's action on server ``name`` (logged with who asked), then the
        same in every sibling copy; the server's row after it."""
        if self._row(name) is None:
            return _unknown_server(name)
        log.warning("operator %r %s server %r", _who(exchange), verb, name)
        try:
            await action(name)
        except TrunklineError as exc:
            return _error(409, _first_line(exc))
        copies = await self._tell_siblings(exchange)
        return _json({"server": self._row(name), "copies": copies})

    async def _quarantine(self, exchange: Exchange) -> HttpReply:
        return _json(self._quarantine_document())

    async def _approve(self, exchange: Exchange, server: str, tool: str) -> HttpReply:
        host = self._fleet.host
        if self._row(server) is None:
            return _unknown_server(server)
        waiting = next((q for q in host.quarantined()
                        if q.server == server and q.tool == tool), None)
        if waiting is not None and waiting.reason == "bound":
            return _error(409, f"tool {tool!r} of server {server!r} is over a bound "
                               f"({waiting.bound}): no approval lifts that")
        shown = None if waiting is None else held(host, waiting)
        try:
            await host.approve_tool(server, tool)
        except UnknownTool as exc:
            if waiting is None:
                return _error(404, f"no definition of tool {tool!r} of server {server!r} "
                                   "waits for approval")
            # Approved meanwhile where the pins are kept (another copy, ``trunkline pins
            # approve``): listed again, it is admitted by that approval.
            await host.refresh_tools(server)
            if any(q.server == server and q.tool == tool for q in host.quarantined()):
                return _error(409, _first_line(exc))
        log.warning("operator %r approved tool %r of server %r", _who(exchange), tool,
                    server)
        self._streams.changed()
        copies = await self._tell_siblings(exchange)
        return _json({"approved": {"server": server, "tool": tool, "definition":
                                   None if shown is None else shown["current"]},
                      "quarantined": self._quarantine_document()["quarantined"],
                      "copies": copies})

    async def _reload(self, exchange: Exchange) -> HttpReply:
        log.warning("operator %r asks for a reload", _who(exchange))
        try:
            outcome = await self._fleet.reload()
        except ConfigurationError as exc:  # refused before anything was touched
            return _error(422, _first_line(exc))
        return _json(outcome.to_json(), 200 if outcome.ok else 422)

    async def _config(self, exchange: Exchange) -> HttpReply:
        path = self._config_path
        try:
            document = _file_document(path)
        except OSError as exc:
            return _error(503, f"{path}: cannot be read now: {exc.strerror}")
        except orjson.JSONDecodeError:
            return _error(503, f"{path}: not valid JSON now (the configuration in force "
                               "is the one read before)")
        return _json({"schema": "trunkline.admin/1", "path": str(path),
                      "config": config_view.redacted(document),
                      "redacted": config_view.REDACTED})

    async def _credentials(self, exchange: Exchange) -> HttpReply:
        host = self._fleet.host
        store = host.user_store
        if store is None:
            return _no_store()
        query = parse_qs(exchange.query)
        user_text = query.get("user", [None])[-1]
        server = query.get("server", [None])[-1]
        configs = host.server_configs()
        if server is not None and server not in configs:
            return _unknown_server(server)
        try:
            user = None if user_text is None else parse_user(user_text)
            rows = await held_rows(store, configs, user=user, server=server)
        except StoreKeyMissing as exc:
            return _error(409, _first_line(exc))
        except ConfigurationError as exc:
            return _error(400, _first_line(exc))
        except (TrunklineError, OSError) as exc:
            return _error(503, f"the token store cannot be read now ({type(exc).__name__})")
        return _json({"schema": SCHEMA, "credentials": rows,
                      "sealed": store.keys is not None})

    async def _revoke(self, exchange: Exchange) -> HttpReply:
        """A user's credentials revoked at their issuers and deleted from the store, then
        forgotten here and by every sibling copy (rule 3)."""
        body = exchange.ended_body(_MAX_BODY) or b""
        asked = _revoke_request(body)
        if isinstance(asked, str):
            return _error(400, asked)
        user_text, server = asked
        host = self._fleet.host
        store = host.user_store
        if store is None:
            return _no_store()
        configs = host.server_configs()
        if server is not None and server not in configs:
            return _unknown_server(server)
        try:
            user = parse_user(user_text)
        except ConfigurationError as exc:
            return _error(400, _first_line(exc))
        log.warning("operator %r revokes the credentials of %s%s", _who(exchange),
                    spell_user(user), "" if server is None else f" at server {server!r}")
        # Forgotten here first: no client of the user's held in memory can refresh a
        # token, and write it back, between its revocation and its deletion.
        await host.forget_user(identity_of(user), server=server)
        try:
            done = await revoke_user(store, configs, user, server)
        except StoreKeyMissing as exc:
            return _error(409, _first_line(exc))
        except (TrunklineError, OSError) as exc:
            return _error(503, f"the token store cannot be changed now "
                               f"({type(exc).__name__}); nothing was revoked")
        copies = await self._tell_siblings(exchange, body)
        return _json({"schema": SCHEMA, **done.to_json(), "copies": copies})

    async def _events(self, exchange: Exchange) -> HttpReply | None:
        return await self._streams.stream(exchange)

    # -- helpers ---------------------------------------------------------------------------

    def _servers_document(self) -> dict[str, Any]:
        last = self._fleet.last_reload
        return servers_document(self._fleet.host, {
            "in_progress": self._fleet.reloading,
            "last": None if last is None else last.to_json()})

    def _quarantine_document(self) -> dict[str, Any]:
        return quarantine_document(self._fleet.host)

    def _row(self, name: str) -> dict[str, Any] | None:
        return next((row for row in server_rows(self._fleet.host) if row["name"] == name),
                    None)

    def _reloaded(self, outcome: ReloadOutcome) -> None:
        self._streams.reloaded(outcome.to_json())

    async def _tell_siblings(self, exchange: Exchange, body: bytes | None = None
                             ) -> dict[str, Any]:
        if exchange.internal and COPY_HEADER in exchange.headers:  # told by a sibling
            return {"told": 0, "failed": []}
        return await tell_siblings(self._siblings, self._copies, exchange.method,
                                   exchange.path, exchange.headers.get("host", ""), body)


def _file_document(path: str | os.PathLike[str]) -> Any:
    """The configuration file, decoded (small: read at once)."""
    with open(path, "rb") as f:
        return orjson.loads(f.read())


def _revoke_request(body: bytes) -> tuple[str, str | None] | str:
    """The user and server a revocation's body names, or why it is refused."""
    try:
        asked = orjson.loads(body)
    except orjson.JSONDecodeError:
        return 'the body is to be JSON: {"user": "KIND:SUBJECT@ISSUER", "server": optional}'
    if not isinstance(asked, dict) or not isinstance(asked.get("user"), str):
        return 'the body is to name the user: {"user": "KIND:SUBJECT@ISSUER"}'
    unknown = sorted(set(asked) - {"user", "server"})
    if unknown:
        return f"unknown field(s) {', '.join(unknown)} (a revocation names user and server)"
    server = asked.get("server")
    if server is not None and not isinstance(server, str):
        return "server is to be a server's name, or null"
    return asked["user"], server


def _no_store() -> HttpReply:
    return _error(409, "this gateway keeps no token store (its configuration has no HTTP "
                       "server and no per-user secret)")


def _json(document: dict[str, Any] | None, status: int = 200) -> HttpReply:
    return HttpReply(status, orjson.dumps(document), _NO_STORE)


def _error(status: int, message: str) -> HttpReply:
    return json_reply({"error": message}, status, _NO_STORE)


def _unknown_server(name: str) -> HttpReply:
    return _error(404, f"no server named {name!r}")


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _who(exchange: Exchange) -> str | None:
    return getattr(exchange.identity, "subject", None)


__all__ = ["ROUTES", "Fleet", "OperatorApi", "Pages", "Route", "match"]
