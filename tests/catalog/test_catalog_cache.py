"""The tool-list cache with an injected clock: freshness, scope isolation, invalidation.

Listings are built through the real ``ListingDriver`` so the cache sees exactly what the
host would give it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import ListingDriver, ToolCache, ToolListing

VERSION = "2026-07-28"


def fetched(
    server: str = "srv",
    *,
    tools: tuple[str, ...] = ("t",),
    ttl: Any = 10_000,
    scope: Any = "private",
    era: str = "modern",
    version: str | None = VERSION,
) -> ToolListing:
    driver = ListingDriver(server, era, protocol_version=version)
    result: dict[str, Any] = {
        "tools": [{"name": n, "inputSchema": {"type": "object"}} for n in tools]
    }
    if era == "modern":
        result.update(resultType="complete", ttlMs=ttl, cacheScope=scope)
    assert not driver.add_page(result)
    return driver.finish()


def get(
    cache: ToolCache, ctx: Any, now: float, server: str = "srv", **kw: Any
) -> ToolListing | None:
    return cache.get(server, ctx, now, protocol_version=VERSION, **kw)


# --- freshness -----------------------------------------------------------------------


def test_fresh_until_ttl_after_receipt_then_stale() -> None:
    cache = ToolCache()
    listing = fetched(ttl=10_000)
    cache.put("srv", "alice", listing, 100.0)
    assert get(cache, "alice", 100.0) is listing
    assert get(cache, "alice", 109.999) is listing
    assert get(cache, "alice", 110.0) is None  # fresh while now < received + ttl


def test_ttl_zero_is_stale_at_once_but_can_be_served_stale() -> None:
    cache = ToolCache()
    listing = fetched(ttl=0)
    cache.put("srv", "alice", listing, 5.0)
    assert get(cache, "alice", 5.0) is None
    assert get(cache, "alice", 5.0, allow_stale=True) is listing


def test_negative_or_missing_ttl_from_the_server_never_caches_as_fresh() -> None:
    for ttl in (-60_000, None):
        cache = ToolCache()
        cache.put("srv", None, fetched(ttl=ttl), 0.0)
        assert get(cache, None, 0.0) is None


def test_legacy_lists_are_never_fresh() -> None:
    cache = ToolCache()
    listing = fetched(era="legacy")
    cache.put("srv", None, listing, 0.0)
    assert get(cache, None, 0.0) is None
    assert get(cache, None, 0.0, allow_stale=True) is listing


def test_a_clock_reading_before_receipt_is_not_fresh() -> None:
    cache = ToolCache()
    cache.put("srv", "a", fetched(ttl=0), 50.0)
    assert get(cache, "a", 49.0) is None


def test_expiry_does_not_trigger_anything_until_the_next_get() -> None:
    # No timers: the cache is inert data; a stale entry is simply a miss when asked.
    cache = ToolCache()
    cache.put("srv", "a", fetched(ttl=1_000), 0.0)
    assert len(cache) == 1
    assert get(cache, "a", 1_000_000.0) is None
    assert len(cache) == 1


# --- authorization contexts -----------------------------------------------------------


def test_private_lists_never_cross_authorization_contexts() -> None:
    cache = ToolCache()
    alice, bob = fetched(tools=("alice_mail",)), fetched(tools=("bob_mail",))
    cache.put("srv", "alice", alice, 0.0)
    cache.put("srv", "bob", bob, 0.0)
    for now in (0.0, 5.0, 9.9):
        assert get(cache, "alice", now) is alice
        assert get(cache, "bob", now) is bob
        assert get(cache, "carol", now) is None
        assert get(cache, None, now) is None
        assert get(cache, "carol", now, allow_stale=True) is None


def test_an_anonymous_private_list_serves_only_anonymous_lookups() -> None:
    cache = ToolCache()
    anonymous = fetched(tools=("guest",))
    cache.put("srv", None, anonymous, 0.0)
    assert get(cache, None, 1.0) is anonymous
    assert get(cache, "alice", 1.0) is None
    named = fetched(tools=("alice_only",))
    cache.put("srv", "alice", named, 1.0)
    assert get(cache, None, 2.0) is anonymous


def test_a_public_list_is_shared_by_every_context() -> None:
    cache = ToolCache()
    public = fetched(scope="public")
    cache.put("srv", "alice", public, 0.0)
    for ctx in ("alice", "bob", None, ("issuer", "subject")):
        assert get(cache, ctx, 1.0) is public


def test_a_contexts_own_fresh_list_wins_over_a_public_one_and_falls_back_to_it() -> None:
    cache = ToolCache()
    public = fetched(scope="public", ttl=60_000)
    mine = fetched(scope="private", ttl=10_000, tools=("mine",))
    cache.put("srv", "bob", public, 0.0)
    cache.put("srv", "alice", mine, 0.0)
    assert get(cache, "alice", 5.0) is mine
    assert get(cache, "alice", 20.0) is public  # own list expired, public still fresh
    assert get(cache, "alice", 20.0, allow_stale=True) is public  # fresh beats stale


def test_mixed_scope_pages_are_cached_privately() -> None:
    driver = ListingDriver("srv", "modern", protocol_version=VERSION)
    page = {"resultType": "complete", "tools": [], "ttlMs": 10_000}
    driver.add_page({**page, "cacheScope": "public", "nextCursor": "n"})
    driver.add_page({**page, "cacheScope": "private"})
    cache = ToolCache()
    cache.put("srv", "alice", driver.finish(), 0.0)
    assert get(cache, "alice", 1.0) is not None
    assert get(cache, "bob", 1.0) is None


# property: under any interleaving of puts and gets, a context only ever sees a private
# list it fetched itself, or a public list.
_contexts = st.sampled_from(["alice", "bob", None, ("iss", "alice")])
_ops = st.lists(
    st.tuples(st.sampled_from(["put", "get"]), _contexts, st.sampled_from(["public", "private"]),
              st.integers(0, 20_000), st.floats(0, 100)),
    max_size=40,
)


@given(_ops)
def test_no_context_ever_sees_another_contexts_private_list(ops: list[tuple[Any, ...]]) -> None:
    cache = ToolCache(max_entries_per_server=3)
    now = 0.0
    for op, ctx, scope, ttl, step in ops:
        now += step
        if op == "put":
            cache.put("srv", ctx, fetched(tools=(f"owner={ctx!r}",), scope=scope, ttl=ttl), now)
            continue
        for stale in (False, True):
            got = get(cache, ctx, now, allow_stale=stale)
            if got is not None and got.cache_scope == "private":
                assert got.tools[0].local_name == f"owner={ctx!r}"


# --- keys, bounds, invalidation ------------------------------------------------------


def test_other_servers_and_protocol_versions_miss() -> None:
    cache = ToolCache()
    cache.put("srv", None, fetched(scope="public"), 0.0)
    assert cache.get("other", None, 1.0, protocol_version=VERSION) is None
    assert cache.get("srv", None, 1.0, protocol_version="2025-11-25") is None
    assert (
        cache.get("srv", None, 1.0) is None
    )  # the key includes the version; None is a version too


def test_put_under_another_server_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="'srv' put under 'other'"):
        ToolCache().put("other", None, fetched(), 0.0)


def test_invalidate_forgets_every_context_of_that_server_only() -> None:
    cache = ToolCache()
    for ctx in ("alice", "bob"):
        cache.put("srv", ctx, fetched(), 0.0)
    cache.put("srv", None, fetched(scope="public"), 0.0)
    kept = fetched("other", scope="public")
    cache.put("other", None, kept, 0.0)
    assert cache.invalidate("srv") == 3
    for ctx in ("alice", "bob", None):
        assert get(cache, ctx, 1.0) is None
        assert get(cache, ctx, 1.0, allow_stale=True) is None
    assert get(cache, None, 1.0, server="other") is kept


def test_drop_on_transport_restart_forgets_the_server() -> None:
    cache = ToolCache()
    cache.put("srv", "alice", fetched(), 0.0)
    assert cache.drop("srv") == 1
    assert get(cache, "alice", 1.0, allow_stale=True) is None
    assert cache.drop("srv") == 0


@pytest.mark.parametrize("forget", ["invalidate", "drop"])
def test_a_fetch_that_raced_an_invalidation_is_not_cached(forget: str) -> None:
    cache = ToolCache()
    generation = cache.generation("srv")
    getattr(cache, forget)("srv")  # list_changed (or a restart) lands mid-fetch
    assert cache.put("srv", "alice", fetched(), 0.0, generation=generation) is False
    assert get(cache, "alice", 1.0) is None
    assert cache.put("srv", "alice", fetched(), 0.0, generation=cache.generation("srv")) is True
    assert get(cache, "alice", 1.0) is not None


def test_entries_per_server_are_bounded_least_recently_used_first() -> None:
    cache = ToolCache(max_entries_per_server=2)
    a, b, c = (fetched(tools=(n,)) for n in "abc")
    cache.put("srv", "a", a, 0.0)
    cache.put("srv", "b", b, 0.0)
    assert get(cache, "a", 1.0) is a  # touch a: b is now the least recently used
    cache.put("srv", "c", c, 1.0)
    assert len(cache) == 2
    assert get(cache, "b", 2.0) is None
    assert get(cache, "a", 2.0) is a and get(cache, "c", 2.0) is c


def test_refetch_replaces_the_contexts_entry() -> None:
    cache = ToolCache()
    old, new = fetched(tools=("old",)), fetched(tools=("new",))
    cache.put("srv", "a", old, 0.0)
    cache.put("srv", "a", new, 20.0)
    assert get(cache, "a", 21.0) is new and len(cache) == 1


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ToolCache(max_entries_per_server=0)
