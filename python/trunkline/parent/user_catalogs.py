"""Each identity's own catalog, where some servers' tools are each user's: the host's
shared catalog merged with the listings that identity made, as itself, of the servers
whose credentials are each user's (``ServerConfig.credentials`` ``per_user`` or
``exchange``).

Rules:

1. A per-user server is listed by each identity with its own credential
   (``CatalogKeeper.list_as``), and the listing is cached by the server's ``ttlMs`` and
   ``cacheScope`` (the tool cache's rules): a ``private`` answer is that identity's alone,
   a ``public`` one is fetched once and serves everyone. Every listing is screened as the
   shared ones are (the server's filter, the host's bounds, the server's pins: a pin is the
   server's, so one user's approval is everyone's).
2. An identity's catalog is the shared listings and its own, merged by the host's
   collision policy: names are settled per identity (a private tool may make a shared
   one's name contested for that identity only). It is rebuilt when the shared catalog
   changed or one of its listings did, and cached for ``max_identities`` identities (the
   least recently used is dropped, and rebuilt when it comes back).
3. An identity that has no credential at a per-user server yet (its listing answered
   ``sign_in_required``, or the server was never reached: nobody signed in to it so far)
   sees one tool of that server instead of its tools: ``sign_in``
   (``SIGN_IN_TOOL``), whose call asks the user to sign in (``parent.sign_in_rounds``) and
   lists the server again once they have. Any other listing failure leaves the server's
   tools out of that identity's catalog, as a failed shared listing does.
4. One listing per identity and server at a time: callers asking at once share it.
5. A server not reached yet (its era's proof needs a user's credential, and nobody held
   one) is tried again when an identity that holds a credential there asks for its
   catalog (at most every ``REACH_GAP_S``): an ``exchange`` server as soon as an OAuth
   caller comes, a ``per_user`` one once someone signed in.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace

from ..catalog import Catalog, ToolEntry, ToolListing, build_catalog
from ..catalog.screen import Screening
from ..channel import ServerState
from ..errors import AuthorizationFailed, ToolCollision, TrunklineError
from ..policy.identity import Identity
from ..protocol.era import Era
from .listing import CatalogKeeper
from .supervisor import Supervisor

#: The local name of a per-user server's sign-in tool (rule 3).
SIGN_IN_TOOL = "sign_in"
PER_USER = "per_user"
#: Seconds between two tries of a server not reached yet (rule 5).
REACH_GAP_S = 10.0
SIGN_IN_REQUIRED = "sign_in_required"
DEFAULT_MAX_IDENTITIES = 4096


def sign_in_entry(server: str) -> ToolEntry:
    """The one tool a per-user server shows an identity not signed in there (rule 3)."""
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    title = f"Sign in to {server}"
    annotations = {"title": title, "readOnlyHint": True, "openWorldHint": True}
    description = (f"Sign in to {server} so that its tools act as you. Calling this gives "
                   "you a link to open in a browser; once you have signed in there, "
                   f"{server}'s tools are listed for you.")
    raw = {"name": SIGN_IN_TOOL, "title": title, "description": description,
           "inputSchema": schema, "annotations": annotations}
    return ToolEntry(name=SIGN_IN_TOOL, server=server, local_name=SIGN_IN_TOOL,
                     title=title, description=description, input_schema=schema,
                     annotations=annotations, raw=raw)


@dataclass
class _View:
    """One identity's listings of the per-user servers, and the catalog made of them."""

    #: Per server: its screening, or None when it needs the identity to sign in.
    listings: dict[str, Screening | None] = field(default_factory=dict)
    catalog: Catalog | None = None
    #: The shared catalog this one was merged with.
    shared: Catalog | None = None


class UserCatalogs:
    """Rules 1 to 4 for one host."""

    def __init__(self, keeper: CatalogKeeper, servers: Supervisor, *,
                 holds_credential: Callable[[str, Identity], Awaitable[bool]],
                 reach: Callable[[str], Awaitable[object]],
                 max_identities: int = DEFAULT_MAX_IDENTITIES,
                 on_changed: Callable[[Identity], None] | None = None) -> None:
        """``holds_credential(server, identity)``: whether the identity has a credential
        at the server (rule 3, for a server not reached yet); ``reach(server)``: try a
        server not reached yet again, now that an identity holds a credential there (rule
        5); ``on_changed``: told when an identity's catalog changed after a sign-in."""
        self._keeper = keeper
        self._servers = servers
        self._holds_credential = holds_credential
        self._reach = reach
        #: When each server not reached was last tried for an identity (rule 5).
        self._reached_at: dict[str, float] = {}
        self._max = max_identities
        self._on_changed = on_changed
        self._views: OrderedDict[Hashable, _View] = OrderedDict()
        self._flights: dict[tuple[Hashable, str], asyncio.Task[Screening | None]] = {}

    @property
    def per_identity(self) -> frozenset[str]:
        """The servers each identity lists as itself (``CatalogKeeper.per_identity``)."""
        return self._keeper.per_identity

    def is_sign_in(self, identity: Identity, entry: ToolEntry) -> bool:
        """Whether ``entry`` (of the identity's catalog) is the host's sign-in tool of a
        per-user server (rule 3), not one of the server's own."""
        if entry.server not in self.per_identity or entry.local_name != SIGN_IN_TOOL:
            return False
        view = self._views.get(identity.key)
        return view is not None and entry.server in view.listings \
            and view.listings[entry.server] is None

    def cached(self, identity: Identity) -> Catalog | None:
        """The identity's catalog as last built (None: never built, or dropped)."""
        view = self._views.get(identity.key)
        if view is None or view.catalog is None:
            return None
        if view.shared is not self._keeper.catalog:
            self._build(view)
        return view.catalog

    async def catalog_for(self, identity: Identity) -> Catalog:
        """The identity's catalog now: what it may use of the per-user servers' listings
        (listed as it, where none is fresh) merged with the shared ones."""
        key = identity.key
        view = self._view(key)
        changed = False
        waiting: list[str] = []
        for name in self._servers.names():
            if name in self.per_identity and \
                    self._servers.handle(name).state is not ServerState.READY:
                if await self._holds_credential(name, identity):
                    await self._reach_now(name)
                if self._servers.handle(name).state is not ServerState.READY:
                    waiting.append(name)
        ready = [name for name in self._servers.names() if name in self.per_identity
                 and self._servers.handle(name).state is ServerState.READY]
        stale = [name for name in ready if name not in view.listings
                 or not self._keeper.fresh_for(name, key)]
        if stale:
            listed = await asyncio.gather(*(self._list(identity, name) for name in stale))
            for name, screening in zip(stale, listed, strict=True):
                if isinstance(screening, _Failed):
                    changed |= view.listings.pop(name, 0) != 0
                elif view.listings.get(name, 0) != screening:
                    view.listings[name] = screening
                    changed = True
        for name in [n for n in view.listings if n not in ready]:
            del view.listings[name]
            changed = True
        # A server not reached yet (nobody signed in to it so far): its sign-in is offered
        # to an identity that has no credential there, where users sign in.
        for name in waiting:
            if self._servers.handle(name).config.credentials == PER_USER and \
                    not await self._holds_credential(name, identity):
                view.listings[name] = None
                changed = True
        if changed or view.catalog is None or view.shared is not self._keeper.catalog:
            self._build(view)
        assert view.catalog is not None
        return view.catalog

    async def signed_in(self, identity: Identity, server: str) -> None:
        """The identity signed in at ``server``: list it again for the identity, and say
        its catalog changed."""
        self._keeper.forget_context(server, identity.key)
        view = self._views.get(identity.key)
        if view is not None:
            view.listings.pop(server, None)
        await self.catalog_for(identity)
        if self._on_changed is not None:
            self._on_changed(identity)

    def forget(self, identity: Identity) -> None:
        """Drop what is kept of ``identity`` (its credentials were revoked)."""
        self._views.pop(identity.key, None)
        for name in self.per_identity:
            self._keeper.forget_context(name, identity.key)

    async def _reach_now(self, name: str) -> None:
        """Try ``name`` again (rule 5), at most once per ``REACH_GAP_S``."""
        now = time.monotonic()
        if now - self._reached_at.get(name, -REACH_GAP_S) < REACH_GAP_S:
            return
        self._reached_at[name] = now
        try:
            await self._reach(name)
        except TrunklineError:
            pass  # the server's status says why; the identity's catalog goes without it

    def _view(self, key: Hashable) -> _View:
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = _View()
            while len(self._views) > self._max:
                self._views.popitem(last=False)
        else:
            self._views.move_to_end(key)
        return view

    async def _list(self, identity: Identity, name: str) -> Screening | _Failed | None:
        flight_key = (identity.key, name)
        flight = self._flights.get(flight_key)
        if flight is None:
            flight = asyncio.ensure_future(self._keeper.list_as(name, identity))
            self._flights[flight_key] = flight
            flight.add_done_callback(lambda _: self._flights.pop(flight_key, None))
        try:
            return await asyncio.shield(flight)
        except AuthorizationFailed as exc:
            if exc.reason == SIGN_IN_REQUIRED:
                return None
            return _Failed(exc)
        except TrunklineError as exc:
            return _Failed(exc)

    def _build(self, view: _View) -> None:
        shared = self._keeper.catalog
        order = self._servers.names()
        own = {name: (screening.listing if screening is not None else _sign_in_listing(name))
               for name, screening in view.listings.items()}
        listings = [listing for listing in _shared_listings(shared, order)] + list(own.values())
        try:
            view.catalog = build_catalog(listings, policy=self._keeper.policy,
                                         server_order=order)
        except ToolCollision:
            # Under "reject", the identity's own listings that collide stay out.
            view.catalog = shared
        view.shared = shared


@dataclass(frozen=True)
class _Failed:
    error: TrunklineError


def _sign_in_listing(server: str) -> ToolListing:
    return ToolListing(server=server, era=Era.MODERN, protocol_version=None,
                       tools=(sign_in_entry(server),), ttl_ms=0, cache_scope="private")


def _shared_listings(shared: Catalog, order: Sequence[str]) -> list[ToolListing]:
    """The shared catalog's entries as one listing per server (under their local names),
    for merging again with an identity's own."""
    by_server: dict[str, list[ToolEntry]] = {}
    for entry in shared.entries:
        by_server.setdefault(entry.server, []).append(entry)
    listings = []
    for name in order:
        entries = by_server.get(name)
        if entries:
            local = tuple(replace(e, name=e.local_name) for e in entries)
            listings.append(ToolListing(server=name, era=Era.MODERN, protocol_version=None,
                                        tools=local, ttl_ms=0, cache_scope="public"))
    return listings
