"""Keeping the merged catalog in step with the servers.

The ``CatalogKeeper`` lists each ready server's tools (every page), caches each listing
by its own ``ttlMs`` and ``cacheScope``, and rebuilds the merged catalog (configured
order, the collision policy) whenever a listing changes: a server became ready on a new
connection (its caches died with the old one, so it is listed from scratch), announced a
list change, or went away for good. Stale listings are refetched when a caller needs the
catalog, never on a timer.

Every listing is screened (``catalog.screen``: the server's filter, the host's bounds, the
server's pins from the ``PinStore``) before it is merged: a filtered or quarantined tool
never reaches the catalog, so it is never listed, routed or called. While a server's
tools are being listed again (a list change, a new connection), calls to it wait for the
new screening (``settled``): a changed tool is never called in between.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
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
from ..catalog.names import escaped_alias, is_model_safe
from ..catalog.pins import (
    VOLATILE_META_KEYS,
    FirstSight,
    Quarantine,
    approve,
    server_identity,
)
from ..catalog.screen import Screening, screen
from ..channel import ServerState
from ..errors import (
    ToolCollision,
    ToolFiltered,
    ToolQuarantined,
    TrunklineError,
    UnknownTool,
)
from ..loop.tasks import TaskScope, gather_all
from ..protocol.retry import RetryPolicy, plan_call
from .handle import WorkerHandle
from .pin_store import PinStore
from .retrying import run_with_retries
from .supervisor import Supervisor
from .telemetry import Telemetry

log = logging.getLogger("trunkline.host")

#: States in which a server's tools stay in the catalog: ready, or on its way back.
_LISTED_STATES = (ServerState.READY, ServerState.RESTARTING, ServerState.STARTING,
                  ServerState.NEGOTIATING)


class CatalogKeeper:
    def __init__(self, servers: Supervisor, *, policy: CollisionPolicy, model_safe: bool,
                 list_timeout: float, retry_policy: RetryPolicy, scope: TaskScope,
                 on_rebuilt: Callable[[bool], None], pins: PinStore | None = None,
                 first_sight: FirstSight = "trust", bounds: ToolBounds | None = None,
                 telemetry: Telemetry | None = None) -> None:
        self._servers = servers
        self._telemetry = telemetry or Telemetry()
        self.policy = policy
        self.model_safe = model_safe
        self.list_timeout = list_timeout
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
        #: Servers being listed again; calls to them wait (``settled``).
        self._settling: dict[str, set[asyncio.Event]] = {}
        self._listed_generation: dict[str, int] = {}
        #: Servers being added (or retried): their first listing is the adder's job.
        self.adding: set[str] = set()
        self.catalog = build_catalog([], policy=policy, model_safe_aliases=model_safe)

    @property
    def warnings(self) -> list[CatalogWarning]:
        return list(self.catalog.warnings)

    def tools(self) -> list[ToolEntry]:
        return list(self.catalog)

    # -- listing -------------------------------------------------------------------------

    async def list_ready(self, names: list[str]) -> None:
        """List these servers (those ready), now."""
        await gather_all(*(self.list_server(n) for n in names
                           if self._servers.handle(n).state is ServerState.READY))

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
            await gather_all(*(self.list_server(name) for name in stale))
            self.rebuild()

    async def refresh(self, names: list[str]) -> None:
        """Re-list now, whatever the TTLs say."""
        for name in names:
            self._cache.invalidate(name)
        await self.list_ready(names)
        self.rebuild()

    def forget_cache(self, name: str) -> None:
        """A new connection: the server's cached lists died with the old one."""
        self._cache.drop(name)

    async def list_server(self, name: str) -> None:
        handle = self._servers.handle(name)
        era = handle.era
        if era is None:
            return
        loop = asyncio.get_running_loop()
        generation = self._cache.generation(name)
        driver = ListingDriver(name, era, protocol_version=handle.version)
        received_at: float | None = None
        more = True
        while more:
            body = driver.next_params()
            record = self._telemetry.call(handle, "tools/list", body)
            if record is not None:
                record.stamp(body)
            params = orjson.dumps(body)
            listed = run_with_retries(
                lambda attempt, params=params: handle.request(
                    "tools/list", params, timeout=self.list_timeout),
                plan_call(self._retry_policy, "tools/list"))
            reply = await (listed if record is None else record.run(listed))
            # The list's TTL counts from its first page (the catalog caches it as one).
            received_at = loop.time() if received_at is None else received_at
            more = driver.add_page(reply.decode(server=name, method="tools/list"))
        assert received_at is not None
        listing = driver.finish()
        for warning in listing.warnings:
            log.warning("%s", warning)
        screening = await self._screen(handle, listing)
        for quarantine in screening.quarantined.values():
            log.warning("%s", quarantine)
        self._cache.put(name, None, listing, received_at, generation=generation)
        self._listings[name] = listing
        self._screenings[name] = screening
        self._listed_generation[name] = handle.generation

    def drop(self, names: list[str]) -> None:
        for name in names:
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

    def withheld(self, name: str) -> UnknownTool | None:
        """The error for a call to ``name`` (a tool's local or prefixed name) if a server
        has such a tool and it is filtered or quarantined: a quarantine first, then a
        filter, each in configured order."""
        found = [self.withheld_on(server, name.removeprefix(f"{server}/"))
                 for server in self._servers.names()]
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
        """The servers not ready now that could serve ``name``, in configured order, each
        with whether it is known to: it listed that tool (by its own name, its prefixed
        name or, with model-safe names, either's alias) when it was last listed. A server
        never listed only may; one whose last listing lacks it is left out."""
        owners = []
        for server in self._servers.names():
            state = self._servers.handle(server).state
            if state in (ServerState.READY, ServerState.STOPPED):
                continue
            screening = self._screenings.get(server)
            if screening is None:
                owners.append((server, False))
            elif any(name in _names_of(server, tool.local_name, self.model_safe)
                     for tool in screening.listing.tools):
                owners.append((server, True))
        return owners

    def settling(self, server: str) -> bool:
        return server in self._settling

    async def settled(self, server: str) -> None:
        """Returns once ``server``'s tools are not being listed again."""
        while events := self._settling.get(server):
            await next(iter(events)).wait()

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
        self.catalog = build_catalog(listed, policy=self.policy,
                                     model_safe_aliases=self.model_safe, server_order=order)
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
                # one, and its tools are listed again from scratch.
                self._cache.drop(name)
                self._spawn_relist(name)
        elif handle.state in (ServerState.UNAVAILABLE, ServerState.STOPPED):
            if name in self._listings:
                self.rebuild_or_keep()

    def on_list_changed(self, handle: WorkerHandle, which: str) -> None:
        """The server said its tool list changed: the cached list is invalid at once and
        refetched now (not on a timer)."""
        if which != "tools" or handle.name in self.adding:
            return
        self._cache.invalidate(handle.name)
        self._spawn_relist(handle.name, announced=True)

    def _spawn_relist(self, name: str, *, announced: bool = False) -> None:
        # Calls to the server wait from now until the new listing is screened.
        event = asyncio.Event()
        self._settling.setdefault(name, set()).add(event)
        self._scope.spawn(self._relist(name, event, announced), name=f"relist {name}")

    async def _relist(self, name: str, event: asyncio.Event, announced: bool) -> None:
        try:
            await self.list_server(name)
        except TrunklineError as exc:
            log.warning("server %r: re-listing tools failed: %s", name, exc)
            return
        finally:
            events = self._settling.get(name, set())
            events.discard(event)
            if not events:
                self._settling.pop(name, None)
            event.set()
        self.rebuild_or_keep(announced)


def _names_of(server: str, tool: str, model_safe: bool) -> tuple[str, ...]:
    """Every name ``server``'s ``tool`` may have had in a catalog."""
    names = (tool, f"{server}/{tool}")
    if not model_safe:
        return names
    return (*names, *(name if is_model_safe(name) else escaped_alias(name) for name in names))


__all__ = ["Catalog", "CatalogKeeper"]
