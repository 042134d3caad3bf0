"""Tool names: always in the LLM alphabet, injective over the whole catalog, and declared
in the shapes the LLM APIs take."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import ListingDriver, assign_aliases, build_catalog, is_model_safe
from trunkline.catalog import names as names_module
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


def _listing(server: str, *tools: str):
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


def test_catalog_names_are_model_safe_and_route_back_to_the_owner() -> None:
    catalog = build_catalog([_listing("a", "search", "fs.read"), _listing("b", "search")])
    by_name = {e.name: (e.server, e.local_name) for e in catalog}
    assert by_name["a_search"] == ("a", "search") and by_name["b_search"] == ("b", "search")
    assert by_name[escaped_alias("fs.read")] == ("a", "fs.read")
    for name, owner in by_name.items():
        assert LLM_NAME.match(name)
        assert catalog.route(name) == owner
    assert [d["name"] for d in catalog.for_model()] == [e.name for e in catalog]
    assert [e.alias for e in catalog] == [None, None, None]  # a name needs no alias now


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "a.b", "a b", "x", "a_b"]),
            st.lists(st.text(_tricky, min_size=1, max_size=6), max_size=5),
        ),
        max_size=4,
        unique_by=lambda s: s[0],
    ),
    st.sampled_from(["prefix", "prefix-all", "reject"]),
)
def test_every_catalog_entry_is_reachable_by_exactly_its_name(
    servers: list[tuple[str, list[str]]], policy: str
) -> None:
    try:
        catalog = build_catalog([_listing(s, *tools) for s, tools in servers], policy=policy)  # type: ignore[arg-type]  # drawn from the policies
    except ToolCollision:
        # Refused rather than shadowed: under reject, two servers offering one name; else
        # only when a contested tool's key "<server>/<tool>" is another tool's own name.
        local_names = {t for _, tools in servers for t in tools}
        assert policy == "reject" or any(
            f"{s}/{t}" in local_names for s, tools in servers for t in tools
        )
        return
    names = [e.name for e in catalog]
    assert len(set(names)) == len(names)
    for entry in catalog:
        assert LLM_NAME.match(entry.name)
        assert catalog.lookup(entry.name) is entry


# --- the LLM APIs' declarations -------------------------------------------------------

#: The shapes OpenAI's and Anthropic's APIs take a tool in, as JSON Schemas of their own
#: (their documented required fields and types; not imported from the code).
_PARAMETERS = {"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}}}
OPENAI_CHAT = {
    "type": "object",
    "required": ["type", "function"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": LLM_NAME.pattern[2:-2]},
                "description": {"type": "string"},
                "parameters": _PARAMETERS,
                "strict": {"type": "boolean"},
            },
        },
    },
}
OPENAI_RESPONSES = {
    "type": "object",
    "required": ["type", "name", "parameters", "strict"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
        "description": {"type": "string"},
        "parameters": _PARAMETERS,
        "strict": {"type": "boolean"},
    },
}
ANTHROPIC = {
    "type": "object",
    "required": ["name", "input_schema"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
        "description": {"type": "string"},
        "input_schema": _PARAMETERS,
    },
}


def _declared_tools():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    described = {"name": "search", "description": "Find things.", "inputSchema": schema}
    return build_catalog(
        [
            _listing_raw("github", {"name": "search", "inputSchema": {"type": "object"}}),
            _listing_raw("gitlab", described),
            _listing("my server", "fs.read", "x" * 100),
        ]
    )


def _listing_raw(server: str, *tools: dict):
    driver = ListingDriver(server, "modern")
    driver.add_page(
        {"resultType": "complete", "ttlMs": 0, "cacheScope": "public", "tools": list(tools)}
    )
    return driver.finish()


def test_to_openai_and_to_anthropic_are_what_those_apis_accept() -> None:
    catalog = _declared_tools()
    for entry in catalog:
        for declared, shape in (
            (entry.to_openai(), OPENAI_CHAT),
            (entry.to_openai("responses"), OPENAI_RESPONSES),
            (entry.to_anthropic(), ANTHROPIC),
        ):
            jsonschema.validate(declared, shape)
            assert orjson.loads(orjson.dumps(declared)) == declared  # plain JSON
    gitlab = catalog.lookup("gitlab_search")
    assert gitlab.to_openai() == {
        "type": "function",
        "function": {
            "name": "gitlab_search",
            "description": "Find things.",
            "parameters": gitlab.input_schema,
        },
    }
    assert gitlab.to_openai("responses") == {
        "type": "function",
        "name": "gitlab_search",
        "description": "Find things.",
        "parameters": gitlab.input_schema,
        "strict": False,
    }
    assert gitlab.to_anthropic() == {
        "name": "gitlab_search",
        "description": "Find things.",
        "input_schema": gitlab.input_schema,
    }
    # No description: no key (both APIs take it as optional, neither takes null).
    assert "description" not in catalog.lookup("github_search").to_anthropic()
    # The name a model calls back is the name the catalog routes.
    for entry in catalog:
        assert catalog.route(entry.to_anthropic()["name"]) == (entry.server, entry.local_name)
    with pytest.raises(ValueError, match="'chat' or 'responses'"):
        gitlab.to_openai("assistants")  # type: ignore[arg-type]  # an API it does not know, on purpose


def test_tools_of_real_servers_declare_for_both_apis() -> None:
    # Every tool of the real servers' listings in tests/catalog/real_tools.json.
    fleet = orjson.loads((Path(__file__).parent / "real_tools.json").read_bytes())
    listings = [_listing_raw(s["server"], *s["tools"]) for s in fleet["servers"]]
    catalog = build_catalog(listings)
    assert len(catalog) > 20
    for entry in catalog:
        jsonschema.validate(entry.to_openai(), OPENAI_CHAT)
        jsonschema.validate(entry.to_anthropic(), ANTHROPIC)
