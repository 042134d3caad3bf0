"""Merging listings: determinism, no tool lost, the prefix, prefix-all and reject policies."""

from __future__ import annotations

import hashlib
import re
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import Catalog, ListingDriver, ToolCollision, ToolListing, build_catalog
from trunkline.catalog.names import escaped_alias
from trunkline.errors import ConfigurationError

# The OpenAI and Anthropic tool-name rule, written out again rather than imported.
LLM_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")


def listing(server: str, *tools: str | dict[str, Any]) -> ToolListing:
    raw = [
        t if isinstance(t, dict) else {"name": t, "inputSchema": {"type": "object"}} for t in tools
    ]
    driver = ListingDriver(server, "modern")
    driver.add_page({"resultType": "complete", "tools": raw, "ttlMs": 0, "cacheScope": "public"})
    return driver.finish()


def shape(catalog: Catalog) -> list[tuple[str, str, str, str | None]]:
    return [(e.name, e.server, e.local_name, e.alias) for e in catalog]


# --- the policies on one example ----------------------------------------------------


def test_prefix_names_every_server_offering_a_contested_name_after_itself() -> None:
    catalog = build_catalog([listing("github", "search", "issues"), listing("gitlab", "search")])
    assert shape(catalog) == [
        ("issues", "github", "issues", None),
        ("github_search", "github", "search", None),
        ("gitlab_search", "gitlab", "search", None),
    ]
    assert catalog.route("github_search") == ("github", "search")
    assert catalog.route("gitlab_search") == ("gitlab", "search")  # the wire carries the local name
    assert [(w.server, w.kind, w.tool) for w in catalog.warnings] == [
        ("github", "prefixed", "search"),
        ("gitlab", "prefixed", "search"),
    ]
    message = catalog.warnings[1].message
    assert "'gitlab_search'" in message and "'github' and 'gitlab'" in message
    assert "search" not in catalog  # no server keeps a contested name


def test_reordering_the_configuration_changes_no_name() -> None:
    arrived = [listing("github", "search", "issues"), listing("gitlab", "search", "wiki")]
    one = build_catalog(arrived, server_order=["github", "gitlab"])
    other = build_catalog(arrived, server_order=["gitlab", "github"])
    owners = {e.name: (e.server, e.local_name) for e in one}
    assert {e.name: (e.server, e.local_name) for e in other} == owners
    assert owners == {
        "issues": ("github", "issues"),
        "github_search": ("github", "search"),
        "gitlab_search": ("gitlab", "search"),
        "wiki": ("gitlab", "wiki"),
    }
    assert [e.server for e in other] == ["gitlab", "gitlab", "github", "github"]  # its order


def test_prefix_all_names_every_tool_after_its_server() -> None:
    catalog = build_catalog(
        [listing("github", "search", "issues"), listing("gitlab", "wiki")], policy="prefix-all"
    )
    assert [e.name for e in catalog] == ["github_issues", "github_search", "gitlab_wiki"]
    assert catalog.route("gitlab_wiki") == ("gitlab", "wiki") and catalog.warnings == ()
    with pytest.raises(KeyError):
        catalog.lookup("wiki")


def test_a_name_outside_the_llm_alphabet_is_escaped_readably() -> None:
    catalog = build_catalog([listing("my server", "fs.read", "echo"), listing("b", "echo")])
    names = {(e.server, e.local_name): e.name for e in catalog}
    digest = hashlib.sha256(b"fs.read").hexdigest()[:8]
    assert names[("my server", "fs.read")] == f"fs_read_{digest}" == escaped_alias("fs.read")
    assert names[("my server", "echo")] == escaped_alias("my server/echo")
    assert names[("my server", "echo")].startswith("my_server_echo_")
    assert names[("b", "echo")] == "b_echo"
    assert all(LLM_NAME.match(name) for name in names.values())


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
        build_catalog([], policy="overwrite")  # type: ignore[arg-type]  # no such policy, on purpose


# --- prefixed names that collide -----------------------------------------------------


def test_a_prefixed_name_that_is_another_tools_own_name_is_escaped_not_taken() -> None:
    # a offers "b_c"; x and b both offer "c", so b's would be "b_c", which a's already is.
    catalog = build_catalog([listing("a", "b_c"), listing("x", "c"), listing("b", "c")])
    names = {(e.server, e.local_name): e.name for e in catalog}
    assert names == {("a", "b_c"): "b_c", ("x", "c"): "x_c", ("b", "c"): escaped_alias("b/c")}
    # ... and so it is whatever the order: a's own name is never displaced.
    again = build_catalog([listing("x", "c"), listing("b", "c"), listing("a", "b_c")])
    assert {(e.server, e.local_name): e.name for e in again} == names


def test_two_prefixed_names_that_coincide_are_both_escaped() -> None:
    listings = [listing("p", "c", "b_c"), listing("a", "b_c"), listing("a_b", "c")]
    names = {(e.server, e.local_name): e.name for e in build_catalog(listings)}
    assert names[("a", "b_c")] == escaped_alias("a/b_c")
    assert names[("a_b", "c")] == escaped_alias("a_b/c")
    assert names[("p", "c")] == "p_c" and names[("p", "b_c")] == "p_b_c"


def test_a_prefixed_key_that_is_a_tools_own_name_fails_clearly() -> None:
    # a offers "b/c" (MCP names may hold "/"); x and b both offer "c": b's "c" and a's
    # "b/c" would need one digest; refused rather than a third name invented.
    listings = [listing("a", "b/c"), listing("x", "c"), listing("b", "c")]
    with pytest.raises(ToolCollision) as caught:
        build_catalog(listings)
    error = caught.value
    assert error.name == "b/c"
    assert set(error.claimants) == {("a", "b/c"), ("b", "c")}
    text = str(error)
    for part in ("'b/c'", "server 'a'", "server 'b'", "refusing to invent"):
        assert part in text


def test_every_tool_answers_to_its_prefixed_name_while_it_is_no_other_tools() -> None:
    # A contested name that is no longer contested (the other server left) is bare
    # again; the name a model was given before still reaches the same tool.
    alone = build_catalog([listing("github", "search")], server_order=["github", "gitlab"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert alone.route("github_search") == ("github", "search")
        assert alone.server_of("github_search") == "github"
    assert "github_search" not in alone  # not a name of its own: one per tool is listed
    # Never another tool's name, never one two tools would answer to.
    taken = build_catalog([listing("x", "c"), listing("q", "x_c")])
    assert taken.route("x_c") == ("q", "x_c")
    ambiguous = build_catalog([listing("a_b", "c"), listing("a", "b_c")])
    with pytest.raises(KeyError):
        ambiguous.lookup("a_b_c")


# --- names from before ---------------------------------------------------------------


def test_names_from_before_still_reach_their_tool_with_a_deprecation_warning() -> None:
    catalog = build_catalog([listing("github", "search"), listing("gitlab", "search", "fs.read")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # today's names warn of nothing
        for entry in catalog:
            assert catalog.lookup(entry.name) is entry
    old = {
        "gitlab/search": ("gitlab", "search"),
        escaped_alias("gitlab/search"): ("gitlab", "search"),  # its model-safe alias
        "search": ("github", "search"),  # a contested name reached the first configured
        "fs.read": ("gitlab", "fs.read"),
    }
    for name, owner in old.items():
        with pytest.warns(DeprecationWarning, match=re.escape(repr(name))) as caught:
            assert catalog.route(name) == owner
        assert caught[0].filename == __file__
        assert catalog.server_of(name) == owner[0]
    with pytest.warns(DeprecationWarning, match="'github' and 'gitlab' all offer 'search'"):
        catalog.lookup("search")
    with pytest.raises(KeyError):
        catalog.route("github/search")  # never a name: the first claimant kept "search"
    with pytest.raises(KeyError):
        build_catalog(
            [listing("github", "search"), listing("gitlab", "search")], policy="prefix-all"
        ).lookup("gitlab/search")  # newer than those names


def test_model_safe_aliases_is_deprecated_and_changes_nothing() -> None:
    listings = [listing("a", "x.y"), listing("b", "x.y")]
    with pytest.warns(DeprecationWarning, match="model_safe_aliases"):
        aliased = build_catalog(listings, model_safe_aliases=True)
    assert shape(aliased) == shape(build_catalog(listings))


# --- order and bookkeeping -----------------------------------------------------------


def test_each_servers_tools_are_sorted_by_code_point() -> None:
    catalog = build_catalog([listing("s", "zeta", "Alpha", "alpha", "_x", "é")])
    assert [e.local_name for e in catalog] == ["Alpha", "_x", "alpha", "zeta", "é"]


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
    entry = catalog.lookup("b_search")
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
        ("a", "duplicate"),
        ("b", "nonstandard-name"),
        ("a", "prefixed"),
        ("b", "prefixed"),
    ]


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


def test_find_is_lookup_with_none_for_an_unknown_name() -> None:
    catalog = build_catalog([listing("a", "x"), listing("b", "x", "y")])
    for name in ("a_x", "b_x", "y", "b_y"):  # a name, and a tool's <server>_<tool>
        assert catalog.find(name) is catalog.lookup(name)
    assert catalog.find("nope") is None


def test_for_model_exposes_names_description_and_schema() -> None:
    described = {"name": "x", "description": "does x", "inputSchema": {"type": "object"}}
    catalog = build_catalog([listing("a", described), listing("b", "x")])
    assert catalog.for_model() == [
        {"name": "a_x", "description": "does x", "inputSchema": {"type": "object"}},
        {"name": "b_x", "inputSchema": {"type": "object"}},
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


@given(st.data(), _servers(_slashy), st.sampled_from(["prefix", "prefix-all", "reject"]))
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


@given(_servers(_plain), st.sampled_from(["prefix", "prefix-all"]))
def test_prefix_loses_no_tool_and_never_shares_a_name(
    servers: list[tuple[str, list[str]]], policy: str
) -> None:
    # Without "_" or "/" in any id, a prefixed name cannot meet another name.
    catalog = build_catalog([listing(s, *tools) for s, tools in servers], policy=policy)  # type: ignore[arg-type]  # drawn from the policies
    offered = {(s, t) for s, tools in servers for t in tools}
    assert sorted((e.server, e.local_name) for e in catalog) == sorted(offered)
    assert len({e.name for e in catalog}) == len(catalog)
    offering: dict[str, set[str]] = {}
    for s, tools in servers:
        for t in tools:
            offering.setdefault(t, set()).add(s)
    for entry in catalog:
        assert catalog.route(entry.name) == (entry.server, entry.local_name)
        alone = len(offering[entry.local_name]) == 1 and policy == "prefix"
        assert entry.name == (entry.local_name if alone else f"{entry.server}_{entry.local_name}")


@given(
    st.data(),
    _servers(st.text("ab_", min_size=1, max_size=3)),
    st.sampled_from(["prefix", "prefix-all"]),
)
def test_names_are_model_safe_and_do_not_depend_on_the_configured_order(
    data: st.DataObject, servers: list[tuple[str, list[str]]], policy: str
) -> None:
    reordered = data.draw(st.permutations(servers))
    one, other = _build(servers, policy=policy), _build(reordered, policy=policy)
    assert isinstance(one, Catalog) and isinstance(other, Catalog)  # no "/": never refused
    names = {(e.server, e.local_name): e.name for e in one}
    assert {(e.server, e.local_name): e.name for e in other} == names
    assert len(set(names.values())) == len(names)
    assert all(LLM_NAME.match(name) for name in names.values())


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
    assert all(LLM_NAME.match(e.name) for e in result)
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
