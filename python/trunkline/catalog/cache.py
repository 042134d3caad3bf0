"""The tool-list cache: freshness by ``ttlMs``, isolation by ``cacheScope``.

Pure bookkeeping with an injected clock (``now``, in seconds, from any monotonic source).
It never triggers a fetch: the host asks ``get`` when it needs a server's tools and
refetches on a miss, so an expired list is refetched lazily, on use, and nothing polls.

Keys (MCP 2026-07-28, server/utilities/caching; docs/explanation/architecture.md, "Cache
keys"): every entry belongs to one server and one negotiated protocol version; a
``private`` entry also belongs to one authorization context and answers only that context.
``None`` is the anonymous context: a private list fetched anonymously answers later
anonymous lookups and never a named context, and vice versa. A ``public`` entry answers
every context. The host declares one capability set per process, so capabilities are not
part of the key; if that ever changes, ``drop`` every server.

Bound: at most ``max_entries_per_server`` entries (public and private together) per
server, least recently used evicted first; the number of servers is bounded by the
configuration.

Races: a ``list_changed`` or a transport restart can land while a fetch is in flight, and
caching that fetch would resurrect the old list. Read ``generation(server)`` before the
fetch and pass it to ``put``; ``put`` refuses a listing from an older generation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from .model import CacheScope, ToolListing

AuthContext = Hashable | None
DEFAULT_MAX_ENTRIES_PER_SERVER = 64

_Key = tuple[CacheScope, str | None, AuthContext]  # (scope, protocol version, context)


@dataclass(frozen=True)
class _Entry:
    listing: ToolListing
    received_at: float

    def fresh(self, now: float) -> bool:
        expires = self.received_at + self.listing.ttl_ms / 1000.0
        # A clock reading before receipt means the caller mixed clocks; call it stale
        # rather than let a ttl of 0 look fresh.
        return self.received_at <= now < expires


class ToolCache:
    """Cached ``ToolListing``s per server, protocol version and authorization context."""

    def __init__(self, *, max_entries_per_server: int = DEFAULT_MAX_ENTRIES_PER_SERVER) -> None:
        if max_entries_per_server < 1:
            raise ValueError("max_entries_per_server must be at least 1")
        self.max_entries_per_server = max_entries_per_server
        self._entries: dict[str, OrderedDict[_Key, _Entry]] = {}
        self._generations: dict[str, int] = {}

    def get(
        self,
        server: str,
        auth_context: AuthContext,
        now: float,
        *,
        protocol_version: str | None = None,
        allow_stale: bool = False,
    ) -> ToolListing | None:
        """The listing this context may use, if fresh at ``now``; else ``None`` (refetch).

        A fresh entry of the context's own wins over a fresh public one. With
        ``allow_stale``, when nothing is fresh, an expired entry is returned too, for
        serving while a refetch fails (the caching page's MAY); entries removed by ``invalidate``
        or ``drop`` are gone even then."""
        entries = self._entries.get(server)
        if not entries:
            return None
        keys: tuple[_Key, _Key] = (
            ("private", protocol_version, auth_context),
            ("public", protocol_version, None),
        )
        present = [key for key in keys if key in entries]
        usable = [key for key in present if entries[key].fresh(now)]
        if not usable and allow_stale:
            usable = present
        if not usable:
            return None
        entries.move_to_end(usable[0])
        return entries[usable[0]].listing

    def put(
        self,
        server: str,
        auth_context: AuthContext,
        listing: ToolListing,
        now: float,
        *,
        generation: int | None = None,
    ) -> bool:
        """Cache ``listing`` as fetched by ``auth_context``; ``now`` is when it was received.

        Pass the receipt time of the *first* page: the list's TTL is the minimum over its
        pages, so counting from the first page never keeps any page past its own TTL.
        Returns ``False`` (and stores nothing) when ``generation`` is older than the
        server's current one."""
        if listing.server != server:
            raise ValueError(f"listing of server {listing.server!r} put under {server!r}")
        if generation is not None and generation != self.generation(server):
            return False
        context = auth_context if listing.cache_scope == "private" else None
        key: _Key = (listing.cache_scope, listing.protocol_version, context)
        entries = self._entries.setdefault(server, OrderedDict())
        entries[key] = _Entry(listing, now)
        entries.move_to_end(key)
        while len(entries) > self.max_entries_per_server:
            entries.popitem(last=False)
        return True

    def forget_context(self, server: str, auth_context: AuthContext) -> None:
        """Forget ``auth_context``'s own (``private``) listings of ``server``: its
        credential there changed (a sign-in, a revocation)."""
        entries = self._entries.get(server)
        if entries:
            for key in [k for k in entries if k[0] == "private" and k[2] == auth_context]:
                del entries[key]

    def generation(self, server: str) -> int:
        """Bumped by every ``invalidate``/``drop``; pass it to ``put`` to catch races."""
        return self._generations.get(server, 0)

    def invalidate(self, server: str) -> int:
        """The server said its tool list changed: forget every context's list of it.

        Returns how many entries were removed."""
        return self._forget(server)

    def drop(self, server: str) -> int:
        """The server's transport restarted: its caches die with it.

        Same effect as ``invalidate``; a separate name so call sites say why."""
        return self._forget(server)

    def _forget(self, server: str) -> int:
        self._generations[server] = self.generation(server) + 1
        return len(self._entries.pop(server, ()))

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._entries.values())
