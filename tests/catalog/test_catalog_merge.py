"""Merging listings: determinism, no tool lost, the prefix and reject policies."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import Catalog, ListingDriver, ToolCollision, ToolListing, build_catalog
from trunkline.errors import ConfigurationError


def listing(server: str, *tools: str | dict[str, Any]) -> ToolListing:
    raw = [
        t if isinstance(t, dict) else {"name": t, "inputSchema": {"type": "object"}} for t in tools
    ]
    driver = ListingDriver(server, "modern")
    driver.add_page({"resultType": "complete", "tools": raw, "ttlMs": 0, "cacheScope": "public"})
    return driver.finish()


def shape(catalog: Catalog) -> list[tuple[str, str, str, str | None]]:
    return [(e.name, e.server, e.local_name, e.alias) for e in catalog]


# --- the two policies on one example ------------------------------------------------


def test_prefix_keeps_the_first_configured_name_and_prefixes_later_ones() -> None:
    catalog = build_catalog([listing("github", "search", "issues"), listing("gitlab", "search")])
    assert shape(catalog) == [
        ("issues", "github", "issues", None),
        ("search", "github", "search", None),
        ("gitlab/search", "gitlab", "search", None),
    ]
    assert catalog.route("search") == ("github", "search")
    assert catalog.route("gitlab/search") == ("gitlab", "search")  # the wire carries the local name
    [warning] = catalog.warnings
    assert (warning.server, warning.kind, warning.tool) == ("gitlab", "prefixed", "search")
    assert "'gitlab/search'" in warning.message and "'github'" in warning.message


def test_configured_order_decides_who_keeps_the_name_not_arrival() -> None:
    arrived = [listing("github", "search"), listing("gitlab", "search")]
    catalog = build_catalog(arrived, server_order=["gitlab", "github"])
    assert catalog.route("search") == ("gitlab", "search")
    assert catalog.route("github/search") == ("github", "search")


def test_reject_refuses_naming_both_servers_and_the_tool() -> None:
    # Two servers offering one name.
    with pytest.raises(ToolCollision) as caught:
        build_catalog([listing("github", "search"), listing("gitlab", "search")], policy="reject")
    error = caught.value
    assert isinstance(error, ConfigurationError)
    assert "'search'" in str(error) and "'github'" in str(error) and "'gitlab'" in str(error)
    assert error.name == "search"
    assert error.claimants == (("github", "search"), ("gitlab", "search"))


def test_reject_lists_every_collision_and_every_server() -> None:
    with pytest.raises(ToolCollision) as caught:
        build_catalog(
            [listing("a", "x", "y"), listing("b", "x"), listing("c", "x", "y")], policy="reject"
        )
    text = str(caught.value)
    assert "tool 'x' is offered by servers 'a', 'b' and 'c'" in text
    assert "tool 'y' is offered by servers 'a' and 'c'" in text


def test_reject_without_collisions_builds_the_catalog() -> None:
    catalog = build_catalog([listing("a", "x"), listing("b", "y")], policy="reject")
    assert shape(catalog) == [("x", "a", "x", None), ("y", "b", "y", None)]


def test_unknown_policy_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="'overwrite'"):
        build_catalog([], policy="overwrite")  # type: ignore[arg-type]  # an unknown policy on purpose


# --- prefixed names that collide -----------------------------------------------------


def test_a_prefixed_name_taken_by_a_plain_tool_name_fails_clearly() -> None:
    # a offers "b/c"; x and b both offer "c"; x comes first, so b's "c" would become
    # "b/c", which a already has.
    listings = [listing("a", "b/c"), listing("x", "c"), listing("b", "c")]
    with pytest.raises(ToolCollision) as caught:
        build_catalog(listings)
    error = caught.value
    assert error.name == "b/c"
    assert set(error.claimants) == {("a", "b/c"), ("b", "c")}
    text = str(error)
    for part in ("'b/c'", "server 'a'", "server 'b'", "server 'x'", "refusing to invent"):
        assert part in text


def test_a_plain_name_is_never_displaced_by_an_earlier_prefixed_one() -> None:
    # Same servers, a configured last: plain names are settled first, so the clash is
    # still reported rather than a's tool being renamed to "a/b/c".
    with pytest.raises(ToolCollision, match="'b/c'"):
        build_catalog([listing("x", "c"), listing("b", "c"), listing("a", "b/c")])


def test_two_prefixed_names_that_coincide_fail_clearly() -> None:
    listings = [listing("p", "b/c", "c"), listing("a", "b/c"), listing("a/b", "c")]
    with pytest.raises(ToolCollision) as caught:
        build_catalog(listings)
    assert caught.value.name == "a/b/c"
    assert set(caught.value.claimants) == {("a", "b/c"), ("a/b", "c")}


# --- order and bookkeeping -----------------------------------------------------------


def test_each_servers_tools_are_sorted_by_code_point() -> None:
    catalog = build_catalog([listing("s", "zeta", "Alpha", "alpha", "_x", "é")])
    assert [e.name for e in catalog] == ["Alpha", "_x", "alpha", "zeta", "é"]


def test_entries_keep_every_field_through_prefixing() -> None:
    rich = {
        "name": "search",
        "title": "Search",
        "description": "find",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
        "icons": [],
    }
    catalog = build_catalog([listing("a", "search"), listing("b", rich)])
    entry = catalog.lookup("b/search")
    assert (entry.server, entry.local_name, entry.title, entry.description) == (
        "b",
        "search",
        "Search",
        "find",
    )
    assert entry.input_schema == rich["inputSchema"] and entry.output_schema == {"type": "object"}
    assert entry.annotations == {"readOnlyHint": True} and entry.raw is rich


def test_listing_warnings_come_first_in_configured_order() -> None:
    first = listing("a", "dup", "dup")
    second = listing("b", "has space", "dup")
    catalog = build_catalog([second, first], server_order=["a", "b"])
    assert [(w.server, w.kind) for w in catalog.warnings] == [
        ("a", "duplicate"), ("b", "nonstandard-name"), ("b", "prefixed")]


def test_two_listings_for_one_server_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="two tool listings for server 'a'"):
        build_catalog([listing("a", "x"), listing("a", "y")])


def test_a_listing_for_an_unconfigured_server_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unconfigured server 'rogue'"):
        build_catalog([listing("rogue", "x")], server_order=["a"])


def test_configured_servers_without_a_listing_are_just_absent() -> None:
    catalog = build_catalog([listing("b", "x")], server_order=["a", "b", "c"])
    assert catalog.route("x") == ("b", "x")


def test_lookup_of_an_unknown_name_says_what_it_looked_for() -> None:
    catalog = build_catalog([listing("a", "x")])
    with pytest.raises(KeyError, match="no tool named 'nope'"):
        catalog.lookup("nope")
    with pytest.raises(KeyError):
        catalog.route("a/x")  # prefixes exist only for tools that collided
    assert "x" in catalog and "nope" not in catalog and len(catalog) == 1


def test_for_model_exposes_canonical_names_description_and_schema() -> None:
    described = {"name": "x", "description": "does x", "inputSchema": {"type": "object"}}
    catalog = build_catalog([listing("a", described), listing("b", "x")])
    assert catalog.for_model() == [
        {"name": "x", "description": "does x", "inputSchema": {"type": "object"}},
        {"name": "b/x", "inputSchema": {"type": "object"}},
    ]


def test_empty_catalog() -> None:
    catalog = build_catalog([])
    assert len(catalog) == 0 and catalog.for_model() == [] and catalog.warnings == ()


# --- properties ----------------------------------------------------------------------

_plain = st.text("abc", min_size=1, max_size=2)
_slashy = st.text("ab/", min_size=1, max_size=3)


def _servers(names: st.SearchStrategy[str]) -> st.SearchStrategy[list[tuple[str, list[str]]]]:
    return st.lists(
        st.tuples(names, st.lists(names, max_size=5)), max_size=5, unique_by=lambda s: s[0]
    )


def _build(servers: list[tuple[str, list[str]]], **kw: Any) -> Catalog | ToolCollision:
    try:
        return build_catalog([listing(s, *tools) for s, tools in servers], **kw)
    except ToolCollision as error:
        return error


@given(st.data(), _servers(_slashy), st.sampled_from(["prefix", "reject"]))
def test_catalog_does_not_depend_on_arrival_order(
    data: st.DataObject, servers: list[tuple[str, list[str]]], policy: str
) -> None:
    configured = [s for s, _ in servers]
    arrived = data.draw(st.permutations(servers))
    reference = _build(servers, policy=policy)
    other = _build(arrived, policy=policy, server_order=configured)
    if isinstance(reference, ToolCollision):
        assert isinstance(other, ToolCollision) and str(other) == str(reference)
    else:
        assert isinstance(other, Catalog)
        assert shape(other) == shape(reference) and other.warnings == reference.warnings


@given(_servers(_plain))
def test_prefix_loses_no_tool_and_never_shares_a_name(servers: list[tuple[str, list[str]]]) -> None:
    # Without "/" in any id, a prefixed name cannot meet another name: prefix never fails.
    catalog = build_catalog([listing(s, *tools) for s, tools in servers])
    offered = {(s, t) for s, tools in servers for t in tools}
    assert sorted((e.server, e.local_name) for e in catalog) == sorted(offered)
    assert len({e.name for e in catalog}) == len(catalog)
    first_offer: dict[str, str] = {}
    for s, tools in servers:
        for t in tools:
            first_offer.setdefault(t, s)
    for entry in catalog:
        assert catalog.route(entry.name) == (entry.server, entry.local_name)
        expected = entry.local_name if first_offer[entry.local_name] == entry.server \
            else f"{entry.server}/{entry.local_name}"
        assert entry.name == expected


@given(_servers(_slashy))
def test_prefix_either_maps_injectively_or_names_a_real_clash(
    servers: list[tuple[str, list[str]]],
) -> None:
    result = _build(servers)
    if isinstance(result, ToolCollision):
        assert len(set(result.claimants)) == 2
        for server, local in result.claimants:
            assert (server, local) in {(s, t) for s, tools in servers for t in tools}
            assert result.name in (local, f"{server}/{local}")
        return
    offered = {(s, t) for s, tools in servers for t in tools}
    assert {(e.server, e.local_name) for e in result} == offered and len(result) == len(offered)
    assert len({e.name for e in result}) == len(result)
    for entry in result:
        assert result.lookup(entry.name) is entry


@given(_servers(_plain))
def test_reject_fails_exactly_when_two_servers_share_a_name(
    servers: list[tuple[str, list[str]]],
) -> None:
    owners: dict[str, list[str]] = {}
    for s, tools in servers:
        for t in dict.fromkeys(tools):
            owners.setdefault(t, []).append(s)
    shared = {t: ss for t, ss in owners.items() if len(ss) > 1}
    result = _build(servers, policy="reject")
    if not shared:
        assert isinstance(result, Catalog)
        return
    assert isinstance(result, ToolCollision)
    for tool, servers_of_tool in shared.items():
        assert f"tool {tool!r} is offered by servers" in str(result)
        assert all(repr(s) in str(result) for s in servers_of_tool)
