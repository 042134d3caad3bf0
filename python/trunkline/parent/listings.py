"""Keeping the merged catalog in step with the servers.

The ``CatalogKeeper`` lists each ready server's tools (every page), caches each listing
by its own ``ttlMs`` and ``cacheScope``, and rebuilds the merged catalog (configured
order, the collision policy) whenever a listing changes: a server became ready on a new
connection (its caches died with the old one, so it is listed from scratch), announced a
list change, or went away for good. Stale listings are refetched when a caller needs the
catalog, never on a timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

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
from ..channel import ServerState
from ..errors import ToolCollision, TrunklineError
from ..loop.tasks import TaskScope, gather_all
from ..protocol.retry import RetryPolicy, plan_call
from ..telemetry.telemetry import Telemetry
from .handle import WorkerHandle
from .retrying import run_with_retries
from .supervisor import Supervisor

log = logging.getLogger("trunkline.host")

#: States in which a server's tools stay in the catalog: ready, or on its way back.
_LISTED_STATES = (ServerState.READY, ServerState.RESTARTING, ServerState.STARTING,
                  ServerState.NEGOTIATING)


class CatalogKeeper:
    def __init__(self, servers: Supervisor, *, policy: CollisionPolicy, model_safe: bool,
                 list_timeout: float, retry_policy: RetryPolicy, scope: TaskScope,
                 on_rebuilt: Callable[[], None], telemetry: Telemetry) -> None:
        self._servers = servers
        self._telemetry = telemetry
        self.policy = policy
        self.model_safe = model_safe
        self.list_timeout = list_timeout
        self._retry_policy = retry_policy
        self._scope = scope
        self._on_rebuilt = on_rebuilt
        self._cache = ToolCache()
        self._listings: dict[str, ToolListing] = {}
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
        self._cache.put(name, None, listing, received_at, generation=generation)
        self._listings[name] = listing
        self._listed_generation[name] = handle.generation

    def drop(self, names: list[str]) -> None:
        for name in names:
            self._listings.pop(name, None)

    # -- merging -------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Merge the listings of the servers that count (raises ``ToolCollision``)."""
        order = self._servers.names()
        listed = [
            self._listings[name] for name in order
            if name in self._listings and self._servers.handle(name).state in _LISTED_STATES
        ]
        self.catalog = build_catalog(listed, policy=self.policy,
                                     model_safe_aliases=self.model_safe, server_order=order)
        self._on_rebuilt()

    def rebuild_or_keep(self) -> None:
        try:
            self.rebuild()
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
                self._scope.spawn(self._relist(name), name=f"relist {name}")
        elif handle.state in (ServerState.UNAVAILABLE, ServerState.STOPPED):
            if name in self._listings:
                self.rebuild_or_keep()

    def on_list_changed(self, handle: WorkerHandle, which: str) -> None:
        """The server said its tool list changed: the cached list is invalid at once and
        refetched now (not on a timer)."""
        if which != "tools" or handle.name in self.adding:
            return
        self._cache.invalidate(handle.name)
        self._scope.spawn(self._relist(handle.name), name=f"relist {handle.name}")

    async def _relist(self, name: str) -> None:
        try:
            await self.list_server(name)
        except TrunklineError as exc:
            log.warning("server %r: re-listing tools failed: %s", name, exc)
            return
        self.rebuild_or_keep()


__all__ = ["Catalog", "CatalogKeeper"]
