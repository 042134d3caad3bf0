"""The tools/list driver: pagination, resultType, cache hints, tool quarantine.

A fake server here is a dict from the cursor it was asked for (``None`` for the first
request) to the result it answers with, so a test can build any cursor graph, loops
included, and see exactly which requests the driver made.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import ListingDriver, ToolEntry, ToolListing
from trunkline.errors import MalformedMessage, ProtocolFailure

_ABSENT = object()


def tool(name: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object"}, **extra}


def page(tools: list[Any], next_cursor: Any = _ABSENT, *, ttl: Any = 60_000,
         scope: Any = "public", result_type: Any = "complete") -> dict[str, Any]:
    """A modern ``tools/list`` result; pass ``_ABSENT`` to leave a field out."""
    fields = {"resultType": result_type, "tools": tools, "nextCursor": next_cursor,
              "ttlMs": ttl, "cacheScope": scope}
    return {k: v for k, v in fields.items() if v is not _ABSENT}


def legacy_page(tools: list[Any], next_cursor: Any = _ABSENT) -> dict[str, Any]:
    result: dict[str, Any] = {"tools": tools}
    if next_cursor is not _ABSENT:
        result["nextCursor"] = next_cursor
    return result


class FakeServer:
    """Answers each ``tools/list`` from ``pages`` by the cursor asked for."""

    def __init__(self, pages: dict[str | None, Any]) -> None:
        self.pages = pages
        self.requests: list[dict[str, Any]] = []

    def list_tools(self, era: str = "modern", **kw: Any) -> ListingDriver:
        driver = ListingDriver("srv", era, **kw)
        while True:
            params = driver.next_params()
            self.requests.append(params)
            if not driver.add_page(self.pages[params.get("cursor")]):
                return driver


def serve(pages: dict[str | None, Any], era: str = "modern", **kw: Any
          ) -> tuple[ListingDriver, list[dict[str, Any]]]:
    server = FakeServer(pages)
    return server.list_tools(era, **kw), server.requests


def listing(pages: dict[str | None, Any], era: str = "modern", **kw: Any) -> ToolListing:
    return serve(pages, era, **kw)[0].finish()


def names(result: ToolListing) -> list[str]:
    return [entry.local_name for entry in result.tools]


def kinds(result: ToolListing) -> list[str]:
    return [warning.kind for warning in result.warnings]


# --- pagination ----------------------------------------------------------------------


def test_single_page_needs_one_request_without_a_cursor() -> None:
    driver, requests = serve({None: page([tool("a"), tool("b")])})
    assert requests == [{}]
    assert driver.done and driver.pages == 1
    assert names(driver.finish()) == ["a", "b"]


def test_every_page_is_followed_in_order() -> None:
    driver, requests = serve({
        None: page([tool("a")], "p2"),
        "p2": page([tool("b")], "p3"),
        "p3": page([tool("c")]),
    })
    assert requests == [{}, {"cursor": "p2"}, {"cursor": "p3"}]
    assert names(driver.finish()) == ["a", "b", "c"]
    assert driver.finish().pages == 3


def test_empty_string_cursor_is_a_cursor_not_the_end() -> None:
    driver, requests = serve({None: page([tool("a")], ""), "": page([tool("b")])})
    assert requests == [{}, {"cursor": ""}]
    assert names(driver.finish()) == ["a", "b"]


def test_null_next_cursor_ends_the_list() -> None:
    _, requests = serve({None: page([tool("a")], None)})
    assert requests == [{}]


def test_hostile_cursor_loop_is_refused_without_refetching() -> None:
    pages = {None: page([tool("a")], "A"), "A": page([tool("b")], "B"), "B": page([tool("c")], "A")}
    server = FakeServer(pages)
    with pytest.raises(MalformedMessage, match="repeats an earlier cursor") as caught:
        server.list_tools()
    assert caught.value.server == "srv" and caught.value.method == "tools/list"
    assert server.requests == [{}, {"cursor": "A"}, {"cursor": "B"}]


def test_a_cursor_pointing_at_itself_is_a_loop() -> None:
    with pytest.raises(MalformedMessage, match="loop"):
        serve({None: page([], "A"), "A": page([], "A")})


def test_page_count_is_bounded() -> None:
    class Endless(dict):  # every cursor leads to a fresh one
        def __missing__(self, cursor: str | None) -> dict[str, Any]:
            return page([], f"{cursor}+")

    server = FakeServer(Endless())
    with pytest.raises(MalformedMessage, match="within 5 pages") as caught:
        server.list_tools(max_pages=5)
    assert caught.value.server == "srv"
    assert len(server.requests) == 5


def test_a_list_of_exactly_max_pages_is_fine() -> None:
    pages = {None: page([tool("a")], "1"), "1": page([tool("b")], "2"), "2": page([tool("c")])}
    assert names(listing(pages, max_pages=3)) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "result, message",
    [
        ([], "JSON array, not an object"),
        (None, "JSON null, not an object"),
        ({"resultType": "complete", "ttlMs": 0, "cacheScope": "public"}, "no 'tools'"),
        (page({"name": "a"}), "'tools' is a JSON object, not an array"),  # type: ignore[arg-type]  # a bad shape on purpose
        (page([], 7), "nextCursor is a JSON number"),
        (page([], {"c": 1}), "nextCursor is a JSON object"),
    ],
)
def test_malformed_pages_raise_naming_the_server(result: Any, message: str) -> None:
    with pytest.raises(MalformedMessage, match=message) as caught:
        serve({None: result})
    assert "server 'srv'" in str(caught.value)


def test_a_failed_driver_cannot_be_used_further() -> None:
    driver = ListingDriver("srv", "modern")
    with pytest.raises(MalformedMessage):
        driver.add_page([])
    with pytest.raises(RuntimeError):
        driver.next_params()
    with pytest.raises(RuntimeError):
        driver.finish()


def test_finish_before_the_last_page_and_pages_after_it_are_caller_bugs() -> None:
    driver = ListingDriver("srv", "modern")
    assert driver.add_page(page([], "more"))
    with pytest.raises(RuntimeError, match="finish"):
        driver.finish()
    assert not driver.add_page(page([]))
    with pytest.raises(RuntimeError, match="add_page"):
        driver.add_page(page([]))
    with pytest.raises(RuntimeError, match="next_params"):
        driver.next_params()


def test_max_pages_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ListingDriver("srv", "modern", max_pages=0)


def test_era_accepts_enum_or_string_and_rejects_nonsense() -> None:
    from trunkline.protocol.era import Era

    assert ListingDriver("s", Era.LEGACY).era is Era.LEGACY
    assert ListingDriver("s", "modern").era is Era.MODERN
    with pytest.raises(ValueError):
        ListingDriver("s", "future")


# --- resultType ----------------------------------------------------------------------


def test_modern_result_without_result_type_is_a_protocol_violation() -> None:
    with pytest.raises(MalformedMessage, match="no resultType"):
        serve({None: page([tool("a")], result_type=_ABSENT)})


def test_input_required_on_tools_list_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolFailure, match="only legal for tools/call"):
        serve({None: page([tool("a")], result_type="input_required")})


@pytest.mark.parametrize("value", ["task", "", "Complete", None, 1])
def test_unknown_result_types_are_invalid(value: Any) -> None:
    with pytest.raises(MalformedMessage, match="unknown resultType"):
        serve({None: page([], result_type=value)})


def test_result_type_checked_on_every_page_not_just_the_first() -> None:
    with pytest.raises(MalformedMessage, match="page 2: modern result has no resultType"):
        serve({None: page([], "n"), "n": page([], result_type=_ABSENT)})


def test_legacy_list_without_any_modern_field_is_complete() -> None:
    result = listing({None: legacy_page([tool("a")], "n"), "n": legacy_page([tool("b")])}, "legacy")
    assert names(result) == ["a", "b"]
    assert (result.ttl_ms, result.cache_scope) == (0, "private")
    assert result.warnings == ()


def test_legacy_result_type_if_sent_is_still_checked() -> None:
    assert names(listing({None: {"resultType": "complete", "tools": [tool("a")]}}, "legacy")) == [
        "a"
    ]
    with pytest.raises(MalformedMessage):
        serve({None: {"resultType": "input_required", "tools": []}}, "legacy")


def test_legacy_cache_fields_are_not_read() -> None:
    # MCP 2025-11-25: no caching metadata in the legacy era; TTL is effectively 0.
    result = listing({None: {"tools": [], "ttlMs": 60_000, "cacheScope": "public"}}, "legacy")
    assert (result.ttl_ms, result.cache_scope) == (0, "private")


# --- cache hints ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "ttls", [(90_000, 30_000, 60_000), (30_000, 90_000, 60_000), (60_000, 90_000, 30_000)]
)
def test_ttl_of_a_list_is_the_minimum_over_its_pages(ttls: tuple[int, int, int]) -> None:
    first, second, third = ttls
    result = listing(
        {None: page([], "2", ttl=first), "2": page([], "3", ttl=second), "3": page([], ttl=third)}
    )
    assert result.ttl_ms == 30_000 and result.warnings == ()


@pytest.mark.parametrize("ttl, problem", [
    (_ABSENT, "ttlMs missing"), (-5, "ttlMs negative"), ("100", "JSON string"),
    (1.5, "JSON number"), (True, "JSON boolean"), (None, "JSON null"),
])
def test_unusable_ttl_reads_as_zero_with_a_warning(ttl: Any, problem: str) -> None:
    result = listing({None: page([], "n", ttl=60_000), "n": page([], ttl=ttl)})
    assert result.ttl_ms == 0
    [warning] = result.warnings
    assert warning.kind == "ttl" and problem in warning.message and "1 of 2" in warning.message


def test_scope_public_only_when_every_page_says_public() -> None:
    assert listing({None: page([], "n"), "n": page([])}).cache_scope == "public"
    assert listing({None: page([], scope="private")}).cache_scope == "private"


@pytest.mark.parametrize("first, second, message", [
    ("public", _ABSENT, "missing"),
    ("public", "shared", "not 'public'/'private'"),
    ("public", "private", "pages disagree"),
    ("private", "public", "pages disagree"),
])
def test_missing_unknown_or_mixed_scope_makes_the_list_private(
    first: Any, second: Any, message: str
) -> None:
    result = listing({None: page([], "n", scope=first), "n": page([], scope=second)})
    assert result.cache_scope == "private"
    [warning] = result.warnings
    assert warning.kind == "cache-scope" and message in warning.message


# --- tools ---------------------------------------------------------------------------


MALFORMED_TOOLS = [
    ("not an object", ["x"], "JSON array, not an object"),
    ("no name", {"inputSchema": {"type": "object"}}, "has no name"),
    ("empty name", tool(""), "empty name"),
    ("numeric name", tool(7), "JSON number, not a string"),
    ("null name", tool(None), "JSON null, not a string"),
    ("no inputSchema", {"name": "bad"}, "inputSchema is missing"),
    ("null inputSchema", {"name": "bad", "inputSchema": None}, "JSON null, not an object"),
    ("string inputSchema", {"name": "bad", "inputSchema": "{}"}, "JSON string, not an object"),
    ("array root", {"name": "bad", "inputSchema": {"type": "array"}}, "root type is 'array'"),
    ("untyped root", {"name": "bad", "inputSchema": {}}, "root type is None"),
    ("list-typed root", {"name": "bad", "inputSchema": {"type": ["object"]}}, "root type is"),
    ("bad outputSchema", tool("bad", outputSchema=[]), "outputSchema is a JSON array"),
]


@pytest.mark.parametrize(
    "label, bad, message", MALFORMED_TOOLS, ids=[m[0] for m in MALFORMED_TOOLS]
)
def test_malformed_tool_is_quarantined_and_the_rest_load(
    label: str, bad: Any, message: str
) -> None:
    result = listing({None: page([tool("before"), bad, tool("after")])})
    assert names(result) == ["before", "after"]
    [warning] = result.warnings
    assert warning.kind == "quarantined" and warning.server == "srv"
    assert message in warning.message and "tool 2 on page 1" in warning.message
    if isinstance(bad, dict) and isinstance(bad.get("name"), str) and bad["name"]:
        assert warning.tool == "bad"
    assert "server 'srv'" in str(warning)


def test_legacy_task_required_tools_are_kept_out() -> None:
    tools = [tool("must", execution={"taskSupport": "required"}),
             tool("may", execution={"taskSupport": "optional"}), tool("plain")]
    result = listing({None: legacy_page(tools)}, "legacy")
    assert names(result) == ["may", "plain"]
    [warning] = result.warnings
    assert (warning.kind, warning.tool) == ("task-required", "must")


def test_execution_field_means_nothing_to_a_modern_server() -> None:
    # Tasks are an extension in the modern era; without it the field is just unknown data.
    result = listing({None: page([tool("t", execution={"taskSupport": "required"})])})
    assert names(result) == ["t"]


def test_output_schema_root_must_be_object_only_in_the_legacy_era() -> None:
    array_out = tool("listy", outputSchema={"type": "array"})
    assert names(listing({None: page([array_out])})) == ["listy"]
    result = listing(
        {None: legacy_page([array_out, tool("ok", outputSchema={"type": "object"})])}, "legacy"
    )
    assert names(result) == ["ok"] and kinds(result) == ["quarantined"]


@pytest.mark.parametrize("name", ["has space", "naïve", "a,b", "x" * 129, "tab\there"])
def test_nonstandard_names_are_kept_with_a_warning(name: str) -> None:
    result = listing({None: page([tool(name)])})
    assert names(result) == [name]
    assert [(w.kind, w.tool) for w in result.warnings] == [("nonstandard-name", name)]


@pytest.mark.parametrize("name", ["a", "get_weather", "ns.tool-v2", "x" * 128, "A.B_C-D.9"])
def test_standard_names_raise_no_warning(name: str) -> None:
    assert listing({None: page([tool(name)])}).warnings == ()


def test_duplicate_name_keeps_the_first_and_warns() -> None:
    result = listing(
        {
            None: page(
                [
                    tool("dup", description="first"),
                    tool("other"),
                    tool("dup", description="second"),
                ],
                "n",
            ),
            "n": page([tool("dup", description="third")]),
        }
    )
    assert names(result) == ["dup", "other"]
    assert result.tools[0].description == "first"
    assert [(w.kind, w.tool) for w in result.warnings] == [
        ("duplicate", "dup"),
        ("duplicate", "dup"),
    ]
    assert "page 2" in result.warnings[1].message


def test_a_malformed_first_copy_does_not_block_a_valid_second() -> None:
    result = listing(
        {None: page([{"name": "t", "inputSchema": None}, tool("t", description="ok")])}
    )
    assert [t.description for t in result.tools] == ["ok"]
    assert kinds(result) == ["quarantined"]


def test_badly_typed_display_fields_are_dropped_not_the_tool() -> None:
    result = listing({None: page([tool("t", title=3, description=["x"], annotations="hi")])})
    [entry] = result.tools
    assert (entry.title, entry.description, entry.annotations) == (None, None, None)
    assert kinds(result) == ["bad-field"] * 3


def test_entry_keeps_every_field_of_the_tool() -> None:
    raw = tool("t", title="T", description="does t", outputSchema={"type": "object"},
               annotations={"readOnlyHint": True}, icons=[{"src": "x.png"}], _meta={"k": 1})
    [entry] = listing({None: page([raw])}).tools
    assert entry == ToolEntry(
        name="t",
        server="srv",
        local_name="t",
        title="T",
        description="does t",
        input_schema={"type": "object"},
        output_schema={"type": "object"},
        annotations={"readOnlyHint": True},
        raw=raw,
    )
    assert entry.raw["icons"] == [{"src": "x.png"}]
    hash(entry)  # usable in sets despite dict fields


@pytest.mark.parametrize("fields, shown", [
    ({"title": "Title", "annotations": {"title": "Annotated"}}, "Title"),
    ({"annotations": {"title": "Annotated"}}, "Annotated"),
    ({"title": "", "annotations": {"title": ""}}, "t"),
    ({}, "t"),
])
def test_display_name_precedence(fields: dict[str, Any], shown: str) -> None:
    [entry] = listing({None: page([tool("t", **fields)])}).tools
    assert entry.display_name == shown


# --- property: tool-level junk never breaks the list --------------------------------

_junk_tools = st.one_of(
    st.builds(tool, st.sampled_from(["a", "b", "c"])),  # valid, often duplicated
    st.sampled_from([tool(""), tool(3), {"name": "x"}, {"name": "y", "inputSchema": []},
                     {"name": "z", "inputSchema": {"type": "string"}}, None, "tool", 1.5]),
)


@given(st.lists(st.lists(_junk_tools, max_size=6), min_size=1, max_size=4))
def test_every_sent_tool_is_either_loaded_or_warned_about(pages: list[list[Any]]) -> None:
    chained = {
        None if i == 0 else str(i): page(tools, str(i + 1) if i + 1 < len(pages) else _ABSENT)
        for i, tools in enumerate(pages)
    }
    result = listing(chained)
    sent = [t for tools in pages for t in tools]
    expected: list[str] = []
    for t in sent:
        if isinstance(t, dict) and t.get("inputSchema") == {"type": "object"} \
                and t["name"] in ("a", "b", "c") and t["name"] not in expected:
            expected.append(t["name"])
    assert names(result) == expected
    dropped = [w for w in result.warnings if w.kind in ("quarantined", "duplicate")]
    assert len(dropped) == len(sent) - len(expected)
    assert all(w.server == "srv" for w in result.warnings)
