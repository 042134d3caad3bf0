"""Keeping the merged catalog in step with the servers.

The ``CatalogKeeper`` lists each ready server's tools (every page), caches each listing
by its own ``ttlMs`` and ``cacheScope``, and rebuilds the merged catalog (configured
order, the collision policy) whenever a listing changes: a server became ready on a new
connection (its caches died with the old one, so it is listed from scratch), announced a
list change, or went away for good. Stale listings are refetched when a caller needs the
catalog, never on a timer.

One server never takes the catalog from the others:

- A listing that fails (a cursor loop, a list that never ends, an answer too large or
  too deep to read, a crash, a timeout: every page of it within ``list_timeout_s``) fails
  that server's listing only. Its tools are left out (or stay as last listed), the
  server's status says why (``ServerStatus.listing_error``), and it is listed again
  after a backoff (``catalog.relisting`` rule 3), or at once on a new connection.
- Re-listing after ``list_changed`` is paced per server (``catalog.relisting``): a burst
  of announcements is one listing, and a server announcing a change on every listing is
  listed ever less often, up to ``HostSettings.relist.cap_s`` apart. Each server's
  re-listings run in one task of its own, never on another server's calls.
- What a listing warns of is said in one log line per server and change
  (``catalog.summaries``), never one per tool.

Every listing is screened (``catalog.screen``: the server's filter, the host's bounds, the
server's pins from the ``PinStore``) before it is merged: a filtered or quarantined tool
never reaches the catalog, so it is never listed, routed or called. While a server's
tools are being listed again (a list change, a new connection), calls to it wait for the
new screening (``screened``): a changed tool is never called in between. A call waits for
one listing, the one that covers the changes announced before it: it is never held
by changes announced after it, however often they come.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import replace

import orjson

from ..catalog import (
    Catalog,
    CatalogWarning,
    CollisionPolicy,
    ListingDriver,
    ToolCache,
    ToolEntry,
    ToolListing,
    build_catalog,
)
from ..catalog.filters import ToolBounds, ToolFilter
from ..catalog.names import escaped_alias
from ..catalog.pins import (
    VOLATILE_META_KEYS,
    FirstSight,
    PinRecord,
    Quarantine,
    approve,
    server_identity,
)
from ..catalog.relisting import RelistPacing
from ..catalog.screen import Screening, screen
from ..catalog.summaries import Said, quarantines_line, warnings_line
from ..channel import ServerState
from ..errors import (
    RequestTimeout,
    ToolCollision,
    ToolFiltered,
    ToolQuarantined,
    TrunklineError,
    UnknownTool,
)
from ..loop.tasks import TaskScope, gather_all
from ..policy.identity import Identity
from ..protocol.backoff import Backoff
from ..protocol.reply import Reply
from ..protocol.retry import Attempt, RetryPolicy, plan_call
from .handle import WorkerHandle
from .pin_store import PinStore
from .retry import run_with_retries
from .supervisor import Supervisor
from .telemetry import Telemetry

log = logging.getLogger("trunkline.host")

#: States in which a server's tools stay in the catalog: ready, on its way back, or
#: draining (its calls are refused as unavailable, not as unknown, until it stops).
_LISTED_STATES = (ServerState.READY, ServerState.RESTARTING, ServerState.STARTING,
                  ServerState.NEGOTIATING, ServerState.DRAINING)


class CatalogKeeper:
    def __init__(self, servers: Supervisor, *, policy: CollisionPolicy, list_timeout_s: float,
                 retry_policy: RetryPolicy, scope: TaskScope,
                 on_rebuilt: Callable[[bool], None], pins: PinStore | None = None,
                 first_sight: FirstSight = "trust", bounds: ToolBounds | None = None,
                 telemetry: Telemetry | None = None, gaps: Backoff | None = None,
                 retries: Backoff | None = None, rng: random.Random | None = None) -> None:
        """``list_timeout_s``: seconds for one whole listing of a server (every page).
        ``gaps``: the pacing of re-listings after announcements; ``retries``: the
        backoff after a failed listing (``catalog.relisting``)."""
        self._servers = servers
        self._telemetry = telemetry or Telemetry()
        self.policy = policy
        self.list_timeout_s = list_timeout_s
        self._retry_policy = retry_policy
        self._scope = scope
        self._on_rebuilt = on_rebuilt
        self._cache = ToolCache()
        self._listings: dict[str, ToolListing] = {}
        self.pins = pins if pins is not None else PinStore()
        self.first_sight: FirstSight = first_sight
        self.bounds = bounds if bounds is not None else ToolBounds()
        #: Each listed server's screening: what of its listing the catalog merges.
        self._screenings: dict[str, Screening] = {}
        #: One pin record change at a time per server (a listing's, an approval's), so
        #: neither writes over the other's.
        self._pin_locks: dict[str, asyncio.Lock] = {}
        self._gaps = gaps if gaps is not None else Backoff(base_s=0.5, cap_s=30.0)
        self._retries = retries if retries is not None else Backoff(base_s=0.05, cap_s=30.0)
        self._rng = rng or random.Random()
        #: Each server's re-listings, paced (``catalog.relisting``).
        self._pacing: dict[str, RelistPacing] = {}
        #: The one task re-listing each server, while it has a listing to make.
        self._relisters: dict[str, asyncio.Task[None]] = {}
        #: Wakes a server's re-lister from its wait when a listing is wanted sooner.
        self._nudges: dict[str, asyncio.Event] = {}
        #: Calls to a server wait (``screened``) while a change it announced is not
        #: screened yet: on the event of its latest changes, set by the listing that
        #: covers them (one lookup on the call path) ...
        self._settling: dict[str, asyncio.Event] = {}
        #: ... which may be running already: the event it will set.
        self._covering: dict[str, asyncio.Event] = {}
        #: Servers whose wanted listing was asked for by the server (``on_rebuilt`` is
        #: told of the rebuild after it even if the merged catalog came out the same).
        self._announced: set[str] = set()
        #: What was last logged of each server's listing: once per change.
        self._said = Said()
        self._listed_generation: dict[str, int] = {}
        #: Servers being added (or retried): their first listing is the adder's job.
        self.adding: set[str] = set()
        #: Servers whose tools each identity lists as itself (``list_as``): their
        #: credentials are each user's (``ServerConfig.credentials``), so nothing lists
        #: them for everyone.
        self.per_identity: frozenset[str] = frozenset()
        self.catalog = build_catalog([], policy=policy)

    @property
    def warnings(self) -> list[CatalogWarning]:
        return list(self.catalog.warnings)

    def tools(self) -> list[ToolEntry]:
        return list(self.catalog)

    # -- listing -------------------------------------------------------------------------

    async def list_ready(self, names: list[str]) -> None:
        """List these servers (those ready), now. One whose listing fails is left as it
        was and listed again later (``follow``): it never fails another's listing."""
        await gather_all(*(self._list_paced(n) for n in names
                           if self._servers.handle(n).state is ServerState.READY))

    def follow(self, names: list[str]) -> None:
        """These servers were just added (or retried): a listing still wanted (theirs
        failed, or they announced a change meanwhile) goes on in the background."""
        for name in names:
            pacing = self._pacing.get(name)
            if pacing is not None and pacing.wanted:
                self._wake(name)

    async def list_stale(self) -> None:
        """Refetch every listing whose TTL has passed, and rebuild if any was."""
        now = asyncio.get_running_loop().time()
        stale = [
            name for name in self._servers.names()
            if self._servers.handle(name).state is ServerState.READY
            and self._cache.get(name, None, now,
                                protocol_version=self._servers.handle(name).version)
            is None
        ]
        if stale:
            await gather_all(*(self._list_paced(name) for name in stale))
            self.rebuild()

    async def refresh(self, names: list[str]) -> None:
        """Re-list now, whatever the TTLs say. The failure of one server asked for alone
        is raised; of several, each is the failing server's own (``listing_error``)."""
        for name in names:
            self._cache.invalidate(name)
        ready = [n for n in names if self._servers.handle(n).state is ServerState.READY]
        failures = await gather_all(*(self._list_paced(n) for n in ready))
        if len(names) == 1 and failures and failures[0] is not None:
            raise failures[0]
        self.rebuild()

    def forget_cache(self, name: str) -> None:
        """A new connection: the server's cached lists died with the old one."""
        self._cache.drop(name)

    async def list_server(self, name: str) -> None:
        """List one server (every page, within ``list_timeout_s`` in all), screen the
        listing and keep it; raises what failed it. A server whose tools are each
        user's (``per_user``) is listed per identity (``list_as``), never here."""
        handle = self._servers.handle(name)
        if handle.era is None or name in self.per_identity:
            return
        generation = self._cache.generation(name)
        listing, received_at = await self._fetch(handle)
        screening = await self._screen(handle, listing)
        self._say(name, listing, screening)
        self._cache.put(name, None, listing, received_at, generation=generation)
        self._listings[name] = listing
        self._screenings[name] = screening
        self._listed_generation[name] = handle.generation

    async def list_as(self, name: str, identity: Identity) -> Screening:
        """``name``'s tools as ``identity`` sees them: the cached listing it may use (its
        own, or a ``public`` one), else listed with its own credential and cached (a
        ``private`` answer for it alone), screened as any listing is. Raises what failed
        it (``sign_in_required``: it has no credential there yet)."""
        handle = self._servers.handle(name)
        now = asyncio.get_running_loop().time()
        context = identity.key
        listing = self._cache.get(name, context, now, protocol_version=handle.version)
        if listing is None:
            generation = self._cache.generation(name)
            listing, received_at = await self._fetch(handle, identity)
            self._cache.put(name, context, listing, received_at, generation=generation)
        return await self._screen(handle, listing)

    def forget_context(self, name: str, context: Hashable) -> None:
        """``context``'s own listing of ``name`` is no longer good (its credential there
        changed)."""
        self._cache.forget_context(name, context)

    def fresh_for(self, name: str, context: Hashable) -> bool:
        """Whether a listing of ``name`` that ``context`` may use is cached and fresh."""
        handle = self._servers.handle(name)
        now = asyncio.get_running_loop().time()
        return self._cache.get(name, context, now, protocol_version=handle.version) is not None

    async def _fetch(self, handle: WorkerHandle, identity: Identity | None = None
                     ) -> tuple[ToolListing, float]:
        """Every page of ``handle``'s tools (as ``identity``, with its own credential),
        within ``list_timeout_s`` in all, and when its first page came."""
        name = handle.name
        era = handle.era
        assert era is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.list_timeout_s
        driver = ListingDriver(name, era, protocol_version=handle.version,
                               task_calls=handle.task_mode == "legacy")
        received_at: float | None = None
        more = True
        while more:
            if loop.time() >= deadline:
                raise self._incomplete(name, driver.pages)
            body = driver.next_params()
            record = self._telemetry.call(handle, "tools/list", body)
            if record is not None:
                record.stamp(body)
            params = orjson.dumps(body)

            def list_page(attempt: Attempt, params: bytes = params) -> Awaitable[Reply]:
                return handle.slots.request("tools/list", params,
                                            timeout=max(attempt.remaining_s or 0.0, 0.001),
                                            identity=identity)

            listed = run_with_retries(
                list_page, plan_call(self._retry_policy, "tools/list", deadline=deadline))
            try:
                reply = await (listed if record is None else record.run(listed))
            except RequestTimeout:
                # Every page's timeout is what was left of the whole list's.
                raise self._incomplete(name, driver.pages) from None
            # The list's TTL counts from its first page (the catalog caches it as one).
            received_at = loop.time() if received_at is None else received_at
            more = driver.add_page(reply.decode(server=name, method="tools/list"))
        assert received_at is not None
        return driver.finish(), received_at

    def _incomplete(self, name: str, pages: int) -> RequestTimeout:
        return RequestTimeout(f"the list was not complete within {self.list_timeout_s:g} s "
                              f"({pages} pages read)", timeout_s=self.list_timeout_s,
                              server=name, method="tools/list")

    def _say(self, name: str, listing: ToolListing, screening: Screening) -> None:
        """What the listing warns of, in one line each for its warnings and its
        quarantines, when they are not what was said of the last one."""
        warned = warnings_line(name, listing.warnings)
        if self._said.news(name, "warnings", warned) and warned is not None:
            log.warning("%s", warned, extra={"server": name})
        held = quarantines_line(name, list(screening.quarantined.values()))
        if self._said.news(name, "quarantined", held) and held is not None:
            log.warning("%s", held, extra={"server": name})

    async def _list_paced(self, name: str, *, merge: bool = False) -> TrunklineError | None:
        """One listing of ``name`` as its pacing sees it: it covers every change
        announced so far (the calls waiting for them go on once it ends), and its outcome
        is said where the operator looks. ``merge``: rebuild the catalog with it (a
        listing that makes the catalog collide is not merged). Returns what failed it."""
        pacing = self._pacing_of(name)
        loop = asyncio.get_running_loop()
        pacing.started()
        covers = self._settling.get(name)
        if covers is not None and covers is not self._covering.get(name):
            self._covering[name] = covers
        else:
            covers = None  # nothing announced, or a running listing covers it
        announced = name in self._announced
        self._announced.discard(name)
        before = self._listings.get(name), self._screenings.get(name)
        failure: TrunklineError | None = None
        try:
            await self.list_server(name)
        except TrunklineError as exc:
            failure = exc
        finally:
            pacing.finished(loop.time(), ok=failure is None)
            if covers is not None:
                if self._covering.get(name) is covers:
                    del self._covering[name]
                if self._settling.get(name) is covers:
                    del self._settling[name]  # nothing announced since it started
                covers.set()
        handle = self._servers.handle(name)
        if failure is not None:
            # Calls wait for no retry: they go on with the tools as last screened.
            waiting = self._settling.pop(name, None)
            if waiting is not None:
                waiting.set()
            self._failed(handle, failure, pacing.wait(loop.time()))
            return failure
        if self._said.news(name, "failure", None):
            log.info("server %r: its tools are listed again", name, extra={"server": name})
        handle.note_listing(None)
        if merge:
            self._merge(name, before, announced)
        return None

    def _failed(self, handle: WorkerHandle, failure: TrunklineError,
                retry_in: float | None) -> None:
        name = handle.name
        kept = ("its tools as last listed stay" if name in self._screenings
                else "its tools are left out")
        when = "" if retry_in is None else f"; listing again in {retry_in:.1f} s"
        handle.note_listing(f"tools/list failed: {failure.message}; {kept}{when}")
        if self._said.news(name, "failure", failure.message):
            log.warning("server %r: %s", name, handle.listing_error, extra={"server": name})

    def _merge(self, name: str, before: tuple[ToolListing | None, Screening | None],
               announced: bool) -> None:
        """Rebuild with ``name``'s new listing; one that collides (under ``reject``, or a
        prefixed name taken) is not merged: the server keeps the listing it had, and the
        other servers' changes still go in."""
        try:
            self.rebuild(announced)
            self._said.news(name, "collision", None)
            return
        except ToolCollision as exc:
            listing, screening = before
            if listing is None or screening is None:  # the two are kept together
                self._listings.pop(name, None)
                self._screenings.pop(name, None)
            else:
                self._listings[name] = listing
                self._screenings[name] = screening
            handle = self._servers.handle(name)
            handle.note_listing(f"its new tools were not merged: {exc.message}")
            if self._said.news(name, "collision", exc.message):
                log.error("server %r: %s", name, handle.listing_error, extra={"server": name})
        self.rebuild_or_keep(announced)

    def _pacing_of(self, name: str) -> RelistPacing:
        pacing = self._pacing.get(name)
        if pacing is None:
            pacing = self._pacing[name] = RelistPacing(self._gaps, self._retries, self._rng)
        return pacing

    def drop(self, names: list[str]) -> None:
        for name in names:
            self._listings.pop(name, None)
            self._screenings.pop(name, None)
            self._pacing.pop(name, None)
            self._announced.discard(name)
            self._said.forget(name)
            self._release(name)
            task = self._relisters.pop(name, None)
            if task is not None:
                task.cancel()

    def replaced(self, name: str) -> None:
        """``name`` has a new definition (a new worker, maybe a new identity): what was
        cached of the old one is not its, and its next ready connection is listed."""
        self._cache.drop(name)
        self._listed_generation.pop(name, None)
        self._said.forget(name)

    def unlist(self, name: str) -> None:
        """``name``'s tools are out of the catalog (at the next rebuild) until it is
        listed again."""
        self._listings.pop(name, None)
        self._screenings.pop(name, None)

    # -- screening -----------------------------------------------------------------------

    async def _screen(self, handle: WorkerHandle, listing: ToolListing) -> Screening:
        """The listing through the server's filter, the bounds and its pins (read afresh:
        another process may have approved one), keeping the record if it changed."""
        config = handle.config
        async with self._pin_locks.setdefault(handle.name, asyncio.Lock()):
            loaded = await self.pins.load(server_identity(config.params.identity()))
            record = replace(loaded, describe=config.params.describe())
            screening = screen(
                listing, record, first_sight=self.first_sight, bounds=self.bounds,
                tool_filter=ToolFilter(config.enabled_tools, config.disabled_tools),
                volatile_meta=VOLATILE_META_KEYS)
            if screening.record != loaded:
                await self.pins.save(screening.record)
        return screening

    async def approve(self, server: str, tool: str) -> None:
        """Approve ``tool``'s pending definition on ``server`` and merge it."""
        handle = self._servers.handle(server)
        held = self._screenings.get(server)
        quarantine = held.quarantined.get(tool) if held is not None else None
        if quarantine is not None and quarantine.reason == "bound":
            raise UnknownTool(f"tool {tool!r} cannot be approved: it is over a bound "
                              f"({quarantine.bound})", server=server)
        identity = server_identity(handle.config.params.identity())
        async with self._pin_locks.setdefault(server, asyncio.Lock()):
            record = await self.pins.load(identity)
            try:
                record = approve(record, tool)
            except KeyError:
                raise UnknownTool(f"no definition of tool {tool!r} waits for approval",
                                  server=server) from None
            await self.pins.save(record)
        listing = self._listings.get(server)
        if listing is not None:
            self._screenings[server] = await self._screen(handle, listing)
            self.rebuild_or_keep()

    def quarantined(self) -> list[Quarantine]:
        """Every quarantined tool of the listed servers, in configured order."""
        return [q for name in self._servers.names() if name in self._screenings
                for q in self._screenings[name].quarantined.values()]

    def pin_record(self, server: str) -> PinRecord | None:
        """``server``'s pins as its last screening left them (approved and pending
        definitions); None before it was listed."""
        screening = self._screenings.get(server)
        return None if screening is None else screening.record

    def withheld(self, name: str) -> UnknownTool | None:
        """The error for a call to ``name`` (a tool's local or prefixed name) if a server
        has such a tool and it is filtered or quarantined: a quarantine first, then a
        filter, each in configured order."""
        found = [self.withheld_on(server, tool) for server in self._servers.names()
                 for tool in {name, name.removeprefix(f"{server}_"),
                              name.removeprefix(f"{server}/")}]
        quarantined = [e for e in found if isinstance(e, ToolQuarantined)]
        filtered = [e for e in found if e is not None]
        return (quarantined or filtered or [None])[0]

    def withheld_on(self, server: str, tool: str) -> UnknownTool | None:
        """The error for a call to ``server``'s own ``tool`` if it is filtered or
        quarantined."""
        screening = self._screenings.get(server)
        if screening is None:
            return None
        quarantine = screening.quarantined.get(tool)
        if quarantine is not None:
            return ToolQuarantined(
                f"tool {tool!r} is {quarantine.detail}", server=server, tool=tool,
                reason=quarantine.reason, changes=quarantine.changes, bound=quarantine.bound)
        if tool in screening.filtered:
            return ToolFiltered(f"tool {tool!r} is filtered out by the server's "
                                f"enabledTools/disabledTools", server=server, tool=tool)
        return None

    def unserved_owners(self, name: str) -> list[tuple[str, bool]]:
        """The servers not ready now (or ready, but whose listing failed) that could
        serve ``name``, in configured order, each with whether it is known to: it listed
        that tool (by its own name or its prefixed name, or the escape of either) when
        it was last listed. A server never listed only may; one whose last
        listing lacks it is left out."""
        owners = []
        for server in self._servers.names():
            handle = self._servers.handle(server)
            if handle.state is ServerState.STOPPED or (
                    handle.state is ServerState.READY
                    and (server in self._screenings or handle.listing_error is None)):
                continue  # gone, or ready and listed (a ready one is also not if it failed)
            screening = self._screenings.get(server)
            if screening is None:
                owners.append((server, False))
            elif any(name in _names_of(server, tool.local_name)
                     for tool in screening.listing.tools):
                owners.append((server, True))
        return owners

    def settling(self, server: str) -> bool:
        """Whether a change ``server`` announced is not screened yet."""
        return server in self._settling

    def _release(self, server: str) -> None:
        """The calls waiting for ``server``'s listing go on: none is coming."""
        for events in (self._settling, self._covering):
            event = events.pop(server, None)
            if event is not None:
                event.set()

    async def screened(self, server: str) -> None:
        """Returns once the changes ``server`` announced until now are screened (or their
        listing failed): one listing, never the ones of later announcements."""
        event = self._settling.get(server)
        if event is not None:
            await event.wait()

    # -- merging -------------------------------------------------------------------------

    def rebuild(self, announced: bool = False) -> None:
        """Merge the listings of the servers that count (raises ``ToolCollision``).
        ``announced``: a server said its tools changed (``on_rebuilt`` is told, even if
        the merged list came out the same)."""
        order = self._servers.names()
        listed = [
            self._screenings[name].listing for name in order
            if name in self._screenings and self._servers.handle(name).state in _LISTED_STATES
        ]
        self.catalog = build_catalog(listed, policy=self.policy, server_order=order)
        self._on_rebuilt(announced)

    def rebuild_or_keep(self, announced: bool = False) -> None:
        try:
            self.rebuild(announced)
        except ToolCollision as exc:
            # Under "reject", a restarted server that now collides keeps its old listing
            # out of the catalog rather than taking a name from another server.
            log.error("catalog not updated: %s", exc)

    # -- following the servers -------------------------------------------------------------

    def on_server_state(self, handle: WorkerHandle) -> None:
        name = handle.name
        if handle.state is ServerState.READY:
            if name not in self.adding and self._listed_generation.get(name) != handle.generation:
                # A new connection: its era was renegotiated, its caches died with the old
                # one, and its tools are listed again from scratch, at once.
                self._cache.drop(name)
                self._want(name, at_once=True)
        elif handle.state in (ServerState.UNAVAILABLE, ServerState.STOPPED) \
                and name in self._listings:
            self.rebuild_or_keep()

    def on_list_changed(self, handle: WorkerHandle, which: str) -> None:
        """The server said its tool list changed: the cached list is invalid at once and
        refetched as its pacing allows (at once, unless it changes on every listing)."""
        if which != "tools":
            return
        self._cache.invalidate(handle.name)
        self._announced.add(handle.name)
        # While it is being added, the adder lists it and then follows it (``follow``).
        self._want(handle.name, wake=handle.name not in self.adding)

    def _want(self, name: str, *, at_once: bool = False, wake: bool = True) -> None:
        # Calls to the server wait from now until a listing covering this is screened.
        self._pacing_of(name).announced(asyncio.get_running_loop().time(), at_once=at_once)
        held = self._settling.get(name)
        if held is None or held is self._covering.get(name):
            self._settling[name] = asyncio.Event()  # a listing that starts later covers it
        if wake:
            self._wake(name)

    def _wake(self, name: str) -> None:
        nudge = self._nudges.get(name)
        if nudge is not None:
            nudge.set()
        if name not in self._relisters:
            self._relisters[name] = self._scope.spawn(self._relist(name),
                                                      name=f"relist {name}")

    async def _relist(self, name: str) -> None:
        """The server's re-lister: lists it whenever its pacing says a listing is due,
        waits (woken sooner by a more urgent want) otherwise, ends when none is wanted."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                pacing = self._pacing.get(name)
                wait = None if pacing is None else pacing.wait(loop.time())
                if wait is None:
                    return
                if wait > 0:
                    nudge = self._nudges[name] = asyncio.Event()
                    try:
                        await asyncio.wait_for(nudge.wait(), wait)
                    except TimeoutError:
                        pass
                    continue
                if self._servers.handle(name).state is not ServerState.READY:
                    # Its next connection is listed at once (relisting rule 4); calls
                    # that waited go on, to wait for the server itself.
                    self._release(name)
                    return
                await self._list_paced(name, merge=True)
        finally:
            if self._relisters.get(name) is asyncio.current_task():
                del self._relisters[name]
            self._nudges.pop(name, None)


def _names_of(server: str, tool: str) -> tuple[str, ...]:
    """Every name ``server``'s ``tool`` may have had in a catalog (``catalog.names``; the
    first digest length only), and its names from before (``<server>/<tool>``)."""
    prefixed, old = f"{server}_{tool}", f"{server}/{tool}"
    return (tool, escaped_alias(tool), prefixed, escaped_alias(old), old)


__all__ = ["Catalog", "CatalogKeeper"]
