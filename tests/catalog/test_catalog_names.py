"""Model-safe aliases: always in the LLM alphabet, injective over the whole catalog."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import ListingDriver, assign_aliases, build_catalog, is_model_safe
from trunkline.catalog import names as names_module
from trunkline.catalog.model import ToolListing
from trunkline.catalog.names import escaped_alias
from trunkline.errors import ConfigurationError, ToolCollision

# Written out again rather than imported: the test must not share the code's mistakes.
LLM_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")


def check(aliases: dict[str, str]) -> None:
    assert len(set(aliases.values())) == len(aliases), "two names share an alias"
    for name, alias in aliases.items():
        assert LLM_NAME.match(alias), (name, alias)
        if LLM_NAME.match(name):
            assert alias == name


def test_safe_names_map_to_themselves() -> None:
    names = ["get_weather", "a", "A-b_9", "x" * 64]
    assert assign_aliases(names) == {n: n for n in names}


def test_names_differing_only_in_unsafe_characters_get_distinct_readable_aliases() -> None:
    names = ["a/b", "a.b", "a b", "a\u00a0b", "a_b"]
    aliases = assign_aliases(names)
    check(aliases)
    assert aliases["a_b"] == "a_b"
    for name in ("a/b", "a.b", "a b", "a\u00a0b"):
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        assert aliases[name] == f"a_b_{digest}"


def test_long_names_are_cut_to_64_and_stay_distinct() -> None:
    names = ["x" * 65, "x" * 66, "x" * 200, "server/" + "y" * 128]
    aliases = assign_aliases(names)
    check(aliases)
    assert all(len(alias) == 64 for alias in aliases.values())


def test_a_name_equal_to_another_names_alias_pushes_that_alias_longer() -> None:
    squatter = escaped_alias("a/b")  # a safe name that is exactly a/b's first-choice alias
    aliases = assign_aliases(["a/b", squatter])
    check(aliases)
    assert aliases[squatter] == squatter
    assert aliases["a/b"] == escaped_alias("a/b", 12)


def test_unicode_lookalikes_and_lone_surrogates_get_aliases() -> None:
    names = ["é", "e\u0301", "e", "\ud800", "\udfff", "😀", "\n", "e\n"]
    check(assign_aliases(names))


def test_exhausted_digests_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only reachable through SHA-256 prefix collisions; simulate them. Each name whose
    # stem is taken moves to a longer digest, so the 16th "a?b" finds none left.
    monkeypatch.setattr(names_module, "_digest", lambda name: "0" * 64)
    same_stem = [f"a{c}b" for c in "./ ,:;!@#$%^&*()+="]
    assert assign_aliases(same_stem[:15])
    with pytest.raises(ConfigurationError, match="no model-safe alias"):
        assign_aliases(same_stem[:16])


def test_is_model_safe_rejects_a_trailing_newline() -> None:
    assert is_model_safe("abc") and not is_model_safe("abc\n") and not is_model_safe("")


# --- properties ----------------------------------------------------------------------

_tricky = st.sampled_from([*"aZ09_-./ ,:\t\n", "\u00e9", "\u0301", "\u00a0", "\ud800", "😀", "Ω"])
_names = st.one_of(
    st.text(_tricky, min_size=1, max_size=8),
    st.text(_tricky, min_size=60, max_size=140),
    st.text(min_size=1, max_size=80),
)


@given(st.data(), st.lists(_names, min_size=1, max_size=12, unique=True))
def test_aliases_are_injective_and_model_safe(data: st.DataObject, names: list[str]) -> None:
    # Adversarial extras: other names' first-choice aliases, and their unsafe variants.
    victims = data.draw(st.lists(st.sampled_from(names), max_size=4))
    extras = [escaped_alias(v) for v in victims] + [
        escaped_alias(v).replace("_", ".") for v in victims
    ]
    everything = list(dict.fromkeys(names + extras))
    check(assign_aliases(everything))


@given(st.data(), st.lists(_names, min_size=1, max_size=8, unique=True))
def test_aliases_depend_only_on_the_set_of_names(data: st.DataObject, names: list[str]) -> None:
    shuffled = data.draw(st.permutations(names))
    assert assign_aliases(names) == assign_aliases(shuffled)


# --- through the catalog -------------------------------------------------------------


def _listing(server: str, *tools: str) -> ToolListing:
    driver = ListingDriver(server, "modern")
    driver.add_page(
        {
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "public",
            "tools": [
                {"name": t, "inputSchema": {"type": "object"}, "description": t} for t in tools
            ],
        }
    )
    return driver.finish()


def test_catalog_aliases_route_back_to_the_owner() -> None:
    catalog = build_catalog(
        [_listing("a", "search", "fs.read"), _listing("b", "search")], model_safe_aliases=True
    )
    by_alias = {e.alias: (e.server, e.local_name) for e in catalog}
    assert by_alias["search"] == ("a", "search")
    for alias, owner in by_alias.items():
        assert alias is not None and LLM_NAME.match(alias)
        assert catalog.route(alias) == owner
    assert catalog.route("b/search") == ("b", "search")  # canonical names still resolve
    assert [d["name"] for d in catalog.for_model()] == [e.alias for e in catalog]
    assert catalog.lookup(escaped_alias("b/search")).server == "b"


def test_catalog_without_aliases_has_none() -> None:
    catalog = build_catalog([_listing("a", "fs.read")])
    assert [e.alias for e in catalog] == [None]
    assert catalog.for_model()[0]["name"] == "fs.read"


@given(st.lists(st.tuples(st.sampled_from(["a", "a.b", "a b", "x"]),
                          st.lists(st.text(_tricky, min_size=1, max_size=6), max_size=5)),
                max_size=4, unique_by=lambda s: s[0]))
def test_every_catalog_entry_is_reachable_by_exactly_its_alias(
    servers: list[tuple[str, list[str]]],
) -> None:
    try:
        catalog = build_catalog(
            [_listing(s, *tools) for s, tools in servers], model_safe_aliases=True
        )
    except ToolCollision:
        # Refused rather than shadowed: only when a later claimant's prefixed name is
        # already some tool's own name (tool names may hold "/"; these server ids do not).
        local_names = {t for _, tools in servers for t in tools}
        assert any(f"{s}/{t}" in local_names for s, tools in servers for t in tools)
        return
    aliases = [e.alias for e in catalog]
    assert len(set(aliases)) == len(aliases)
    for entry in catalog:
        assert entry.alias is not None and LLM_NAME.match(entry.alias)
        assert catalog.lookup(entry.alias) is entry
        assert catalog.lookup(entry.name) is entry
