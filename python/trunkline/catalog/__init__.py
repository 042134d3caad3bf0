"""The tool catalog: listing, caching, merging and routing tools. Pure: no I/O, no
asyncio, no clock of its own (callers pass ``now`` in seconds from a monotonic clock).

How the host drives it, per ready server ``s`` (era ``"modern"``/``"legacy"``, negotiated
``version``) and the authorization context ``ctx`` of the request (``None`` when
anonymous; any hashable, e.g. the token's ``(issuer, subject)``)::

    listing = cache.get(s, ctx, now, protocol_version=version)
    if listing is None:                                 # missing or expired: refetch now
        generation = cache.generation(s)
        driver = ListingDriver(s, era, protocol_version=version)
        received = None
        while True:
            result = await request(s, "tools/list", driver.next_params())
            received = now() if received is None else received    # first page's time
            if not driver.add_page(result):
                break
        listing = driver.finish()
        cache.put(s, ctx, listing, received, generation=generation)
    ...
    catalog = build_catalog(listings, policy="prefix", server_order=configured_ids)
    server, local_name = catalog.route(name_the_model_called)   # -> tools/call name

    on notifications/tools/list_changed from s:  cache.invalidate(s), then rebuild on use
    on transport restart of s:                   cache.drop(s)

Public API
----------
``ListingDriver(server, era, *, protocol_version=None, max_pages=100)``
    ``.next_params() -> dict``: ``{}`` or ``{"cursor": c}`` (``""`` is a real cursor).
    ``.add_page(result) -> bool``: ``True`` while more pages are needed.
    ``.finish() -> ToolListing``.
    List-level faults raise ``MalformedMessage`` naming the server: a result that is not
    an object, ``tools`` not an array, a ``nextCursor`` that is not a string or repeats
    an earlier one, more than ``max_pages`` pages, and on a modern server a missing
    ``resultType`` or any value but ``"complete"``. Tool-level faults quarantine the tool
    with a ``CatalogWarning``. Cache hints: ``ttlMs`` missing/negative/non-integer = 0;
    ``cacheScope`` missing/unknown, or differing between pages = ``"private"``; the
    list's TTL is the minimum over its pages. Legacy lists: ``resultType`` may be absent,
    no cache field is read or required, TTL 0, scope private.
``ToolCache(*, max_entries_per_server=64)``
    ``.get(server, auth_context, now, *, protocol_version=None, allow_stale=False)
    -> ToolListing | None``; ``.put(server, auth_context, listing, now, *,
    generation=None) -> bool``; ``.generation(server) -> int``;
    ``.invalidate(server) -> int`` (list changed); ``.drop(server) -> int`` (transport
    restarted). A private listing answers only the context that fetched it.
``build_catalog(listings, *, policy="prefix", server_order=None) -> Catalog``
    (``policy``: ``"prefix"``, ``"prefix-all"`` or ``"reject"``; names as
    ``catalog.names`` says.)
    ``Catalog``: ``.entries`` (ordered ``ToolEntry``), ``.warnings``, ``.policy``,
    ``.lookup(name) -> ToolEntry`` (a name, a ``<server>_<tool>``, or a deprecated
    name from before; ``KeyError`` otherwise), ``.route(name) -> (server,
    local_name)``, ``.for_model() -> [{"name", "description"?, "inputSchema"}]``,
    ``len``/``iter``/``in``.
    Raises ``ToolCollision`` (a ``ConfigurationError``) under ``reject``, or when a
    contested tool's ``<server>/<tool>`` is another tool's own name.
``ToolEntry``: ``name`` (model-safe), ``server``, ``local_name``, ``title``,
    ``description``, ``input_schema``, ``output_schema``, ``annotations``, ``raw``,
    ``display_name``, ``model_name`` (``name``), ``to_openai(api="chat")``,
    ``to_anthropic()``; ``alias`` (deprecated, ``None``).
``CatalogWarning``: ``server``, ``kind``, ``message``, ``tool``; ``str()`` reads well.
``prefixed_names(claimants) -> list[str]``: the ``prefix`` naming rule on its own, for
anything else named per server (the gateway's prompts).

``ToolIndex(entries, *, previous=None)``: a BM25 index of entries; ``.search(query,
    limit=10) -> [ToolMatch]`` (``.entry``, ``.name``, ``.server``, ``.score``), best
    first. ``ToolSearch(entries_fn)``: the index of a changing catalog, rebuilt at the
    first ``.search`` after ``.changed()`` (see ``trunkline.catalog.search``).

``tool_names(claimants, *, prefix_all=False)``, ``assign_aliases(names) -> dict[str,
    str]``, ``is_model_safe(name)``: the naming scheme (see ``trunkline.catalog.names``).
"""

from .cache import AuthContext, ToolCache
from .listing import DEFAULT_MAX_PAGES, ListingDriver
from .merge import Catalog, CollisionPolicy, ToolCollision, build_catalog, prefixed_names
from .model import CacheScope, CatalogWarning, ToolEntry, ToolListing, WarningKind
from .names import MODEL_SAFE, assign_aliases, is_model_safe, tool_names
from .search import ToolIndex, ToolMatch, ToolSearch

__all__ = [
    "DEFAULT_MAX_PAGES",
    "MODEL_SAFE",
    "AuthContext",
    "CacheScope",
    "Catalog",
    "CatalogWarning",
    "CollisionPolicy",
    "ListingDriver",
    "ToolCache",
    "ToolCollision",
    "ToolEntry",
    "ToolIndex",
    "ToolListing",
    "ToolMatch",
    "ToolSearch",
    "WarningKind",
    "assign_aliases",
    "build_catalog",
    "is_model_safe",
    "prefixed_names",
    "tool_names",
]
