"""HTTP header rules of MCP 2026-07-28 (basic/transports/streamable-http), rule by rule."""

from __future__ import annotations

import base64
import copy
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.protocol import headers as h
from trunkline.protocol.headers import HeaderParam

PLAIN_HEADER_TEXT = re.compile(r"[\x20-\x7e]*")


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode("utf-8")).decode("ascii") + "?="


def schema_with(**properties: object) -> dict:
    return {"type": "object", "properties": properties}


def annotated(name: str, json_type: object = "string", **extra: object) -> dict:
    return {"type": json_type, "x-mcp-header": name, **extra}


# --- value encoding -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("us-west1", "us-west1"),
        ("hello world", "hello world"),  # inner space is plain
        ("", ""),
        ("a=?base64?b?=", "a=?base64?b?="),  # sentinel markers only in the middle
        (" padded", b64(" padded")),
        ("padded ", b64("padded ")),
        (" ", b64(" ")),
        ("日本語", b64("日本語")),
        ("café", b64("café")),
        ("line\nbreak", b64("line\nbreak")),
        ("cr\rhere", b64("cr\rhere")),
        ("nul\x00", b64("nul\x00")),
        ("del\x7f", b64("del\x7f")),
        ("tab\tinside", b64("tab\tinside")),  # tab is a control character
        ("=?base64?SGVsbG8=?=", b64("=?base64?SGVsbG8=?=")),  # sentinel collision
        ("=?base64??=", b64("=?base64??=")),
        ("=?base64?=", b64("=?base64?=")),  # prefix and suffix overlap: still looks like it
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (42, "42"),
        (-7, "-7"),
        (h.MAX_SAFE_INTEGER, "9007199254740991"),
        (-h.MAX_SAFE_INTEGER, "-9007199254740991"),
    ],
)
def test_encoding_table(value: object, expected: str) -> None:
    assert h.encode_header_value(value) == expected  # type: ignore[arg-type]  # values of any type


def test_sentinel_markers_are_exact_and_lower_case() -> None:
    assert h.encode_header_value("日本語") == "=?base64?5pel5pys6Kqe?="
    # Upper-case markers are not the sentinel, so such text is plain.
    assert h.encode_header_value("=?BASE64?x?=") == "=?BASE64?x?="


def test_bool_is_not_encoded_as_an_integer() -> None:
    assert h.encode_header_value(True) != "1"
    assert h.encode_header_value(False) != "0"


@pytest.mark.parametrize("value", [h.MAX_SAFE_INTEGER + 1, -h.MAX_SAFE_INTEGER - 1, 10**30])
def test_integers_beyond_safe_range_are_refused(value: int) -> None:
    with pytest.raises(h.HeaderValueError):
        h.encode_header_value(value)


@pytest.mark.parametrize("value", [1.5, 3.0, None, b"bytes", ["a"], {"a": 1}])
def test_other_types_are_refused(value: object) -> None:
    with pytest.raises(h.HeaderValueError):
        h.encode_header_value(value)  # type: ignore[arg-type]  # values of any type


@given(st.text())
def test_round_trip_any_text(text: str) -> None:
    assert h.decode_header_value(h.encode_header_value(text)) == text


@given(st.one_of(st.booleans(), st.integers(-h.MAX_SAFE_INTEGER, h.MAX_SAFE_INTEGER)))
def test_round_trip_gives_the_string_form(value: int | bool) -> None:
    expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
    assert h.decode_header_value(h.encode_header_value(value)) == expected


@given(st.one_of(st.text(), st.booleans(), st.integers(-h.MAX_SAFE_INTEGER, h.MAX_SAFE_INTEGER)))
def test_encoded_values_are_plain_visible_ascii_without_outer_whitespace(value: object) -> None:
    encoded = h.encode_header_value(value)  # type: ignore[arg-type]  # values of any type
    assert PLAIN_HEADER_TEXT.fullmatch(encoded)
    assert encoded == encoded.strip(" \t")


@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E)))
def test_plain_ascii_travels_unchanged_unless_it_looks_like_the_sentinel(text: str) -> None:
    looks_like_sentinel = text.startswith("=?base64?") and text.endswith("?=")
    assert (h.encode_header_value(text) == text) is not looks_like_sentinel


@pytest.mark.parametrize(
    "text", ["=?base64?!!!?=", "=?base64?SGVsbG8?=", "=?base64?/w==?=", "=?base64?="]
)
def test_malformed_sentinel_is_refused_by_the_decoder(text: str) -> None:
    # Missing padding, non-alphabet characters, invalid UTF-8 (0xFF), and overlap.
    with pytest.raises(h.HeaderValueError):
        h.decode_header_value(text)


def test_decoder_passes_plain_text_through() -> None:
    assert h.decode_header_value("us-west1") == "us-west1"
    assert h.decode_header_value("=?base64??=") == ""


# --- x-mcp-header validation ---------------------------------------------------------


def test_schema_without_annotations_has_no_params() -> None:
    assert h.tool_header_params(schema_with(a={"type": "string"})) == ()
    assert h.tool_header_params(None) == ()
    assert h.tool_header_params({}) == ()


def test_top_level_and_nested_properties_chains_are_found_sorted_by_path() -> None:
    schema = schema_with(
        region=annotated("Region"),
        opts={"type": "object", "properties": {
            "dry": annotated("Dry-Run", "boolean"),
            "deep": {"properties": {"n": annotated("N", "integer")}},
        }},
        aaa={"type": "string"},
    )
    assert h.tool_header_params(schema) == (
        HeaderParam("Mcp-Param-N", ("opts", "deep", "n"), "integer"),
        HeaderParam("Mcp-Param-Dry-Run", ("opts", "dry"), "boolean"),
        HeaderParam("Mcp-Param-Region", ("region",), "string"),
    )


def test_every_tchar_is_accepted_in_a_name() -> None:
    name = "!#$%&'*+-.^_`|~09AZaz"
    assert h.tool_header_params(schema_with(a=annotated(name))) == (
        HeaderParam("Mcp-Param-" + name, ("a",), "string"),
    )


def test_a_property_named_x_mcp_header_is_not_an_annotation() -> None:
    schema = schema_with(**{"x-mcp-header": {"type": "object", "properties": {
        "x-mcp-header": annotated("Inner"),
    }}})
    assert h.tool_header_params(schema) == (
        HeaderParam("Mcp-Param-Inner", ("x-mcp-header", "x-mcp-header"), "string"),
    )
    # Nor inside an unreachable properties map, where it is still only a name.
    assert h.tool_header_params(schema_with(
        a={"type": "array", "items": {"properties": {"x-mcp-header": {"type": "string"}}}},
    )) == ()


@pytest.mark.parametrize(
    "name",
    ["", " ", "Has Space", "a\r\nX-Injected: 1", "tab\t", "colon:", "slash/", "日本", "é", "a\x00",
     7, None, ["A"]],
)
def test_annotation_value_must_be_a_token(name: object) -> None:
    with pytest.raises(h.InvalidToolHeaders, match="token"):
        h.tool_header_params(schema_with(a=annotated(name)))  # type: ignore[arg-type]  # names of any type


def test_duplicate_names_are_invalid_case_insensitively() -> None:
    schema = schema_with(a=annotated("Region"), b={"properties": {"c": annotated("REGION")}})
    with pytest.raises(h.InvalidToolHeaders, match="duplicates") as caught:
        h.tool_header_params(schema)
    reason = str(caught.value)
    assert "/properties/a " in reason and "/properties/b/properties/c " in reason


@pytest.mark.parametrize(
    "json_type",
    ["number", "object", "array", "null", ["string"], ["string", "null"], None, "String"],
)
def test_annotation_only_on_a_single_primitive_type(json_type: object) -> None:
    with pytest.raises(h.InvalidToolHeaders, match="type"):
        h.tool_header_params(schema_with(a=annotated("A", json_type)))


def test_annotation_without_a_type_is_invalid() -> None:
    with pytest.raises(h.InvalidToolHeaders, match="type"):
        h.tool_header_params(schema_with(a={"x-mcp-header": "A"}))


def test_annotation_on_the_root_is_invalid() -> None:
    with pytest.raises(h.InvalidToolHeaders, match="root"):
        h.tool_header_params({"type": "string", "x-mcp-header": "Root"})


HIDDEN = annotated("Hidden")


@pytest.mark.parametrize(
    "schema",
    [
        schema_with(a={"type": "array", "items": HIDDEN}),
        schema_with(a={"type": "array", "items": {"properties": {"b": HIDDEN}}}),
        schema_with(a={"type": "array", "prefixItems": [HIDDEN]}),
        schema_with(a={"type": "array", "contains": HIDDEN}),
        {"type": "object", "additionalProperties": HIDDEN},
        {"type": "object", "patternProperties": {"^x": HIDDEN}},
        {"type": "object", "oneOf": [schema_with(a=HIDDEN)]},
        {"type": "object", "anyOf": [schema_with(a=HIDDEN)]},
        {"type": "object", "allOf": [schema_with(a=HIDDEN)]},
        {"type": "object", "not": schema_with(a=HIDDEN)},
        {"type": "object", "if": schema_with(a=HIDDEN)},
        {"type": "object", "then": schema_with(a=HIDDEN)},
        {"type": "object", "else": schema_with(a=HIDDEN)},
        {"type": "object", "$defs": {"d": HIDDEN}, "properties": {"a": {"$ref": "#/$defs/d"}}},
        {"type": "object", "definitions": {"d": HIDDEN}},
        {"type": "object", "dependentSchemas": {"a": schema_with(b=HIDDEN)}},
        {"type": "object", "x-vendor": {"anything": HIDDEN}},
        # A `properties` that is not an object is not a chain of properties keys.
        {"type": "object", "properties": [HIDDEN]},
        # A $defs entry named like an instance keyword is still scanned.
        {"type": "object", "$defs": {"default": HIDDEN}},
        [schema_with(a=HIDDEN)],
    ],
)
def test_annotations_off_the_properties_chain_make_the_tool_invalid(schema: object) -> None:
    with pytest.raises(h.InvalidToolHeaders, match="reachable"):
        h.tool_header_params(schema)


def test_depth_limit_is_an_invalid_definition_not_a_crash() -> None:
    deep: dict = {"type": "string", "x-mcp-header": "Deep"}
    for _ in range(h.MAX_SCHEMA_DEPTH):
        deep = {"type": "object", "properties": {"p": deep}}
    with pytest.raises(h.InvalidToolHeaders, match="deeper"):
        h.tool_header_params(deep)
    cyclic: dict = {"type": "object", "properties": {}}
    cyclic["properties"]["self"] = cyclic
    with pytest.raises(h.InvalidToolHeaders, match="deeper"):
        h.tool_header_params(cyclic)


def test_moderately_deep_chain_is_valid() -> None:
    deep: dict = annotated("Deep")
    for _ in range(10):
        deep = {"type": "object", "properties": {"p": deep}}
    assert h.tool_header_params(deep) == (HeaderParam("Mcp-Param-Deep", ("p",) * 10, "string"),)


def test_node_limit_is_an_invalid_definition() -> None:
    properties = {f"p{i}": {"type": "string"} for i in range(h.MAX_SCHEMA_NODES)}
    wide = {"type": "object", "properties": properties}
    with pytest.raises(h.InvalidToolHeaders, match="nodes"):
        h.tool_header_params(wide)


# --- extraction ---------------------------------------------------------------------

REGION = HeaderParam("Mcp-Param-Region", ("region",), "string")
COUNT = HeaderParam("Mcp-Param-Count", ("opts", "count"), "integer")
DRY = HeaderParam("Mcp-Param-Dry", ("opts", "dry"), "boolean")
PARAMS = (COUNT, DRY, REGION)


def test_present_values_are_sent_encoded_in_param_order() -> None:
    arguments = {"region": "日本", "opts": {"count": 3, "dry": False}, "other": 1}
    assert h.param_headers(PARAMS, arguments) == [
        ("Mcp-Param-Count", "3"),
        ("Mcp-Param-Dry", "false"),
        ("Mcp-Param-Region", b64("日本")),
    ]


@pytest.mark.parametrize(
    "arguments",
    [None, {}, {"region": None, "opts": None}, {"opts": {}}, {"opts": {"count": None, "dry": None}},
     {"opts": "not an object"}, {"opts": [1, 2]}],
)
def test_absent_or_null_anywhere_along_the_path_omits_the_header(arguments: object) -> None:
    assert h.param_headers(PARAMS, arguments) == []  # type: ignore[arg-type]  # any arguments


def test_empty_string_and_zero_and_false_are_present() -> None:
    arguments = {"region": "", "opts": {"count": 0, "dry": False}}
    assert h.param_headers(PARAMS, arguments) == [
        ("Mcp-Param-Count", "0"), ("Mcp-Param-Dry", "false"), ("Mcp-Param-Region", ""),
    ]


@pytest.mark.parametrize(
    ("param", "arguments"),
    [
        (REGION, {"region": {"nested": "object"}}),
        (REGION, {"region": ["list"]}),
        (REGION, {"region": 5}),
        (REGION, {"region": True}),
        (COUNT, {"opts": {"count": 3.0}}),
        (COUNT, {"opts": {"count": 2.5}}),
        (COUNT, {"opts": {"count": True}}),
        (COUNT, {"opts": {"count": "3"}}),
        (DRY, {"opts": {"dry": 1}}),
        (DRY, {"opts": {"dry": "true"}}),
    ],
)
def test_wrong_json_type_names_the_path_and_header(param: HeaderParam, arguments: dict) -> None:
    with pytest.raises(h.HeaderValueError) as caught:
        h.param_headers([param], arguments)
    assert param.header in str(caught.value)
    assert "/" + "/".join(param.path) in str(caught.value)


def test_unsafe_integer_argument_names_the_path_and_header() -> None:
    with pytest.raises(h.HeaderValueError, match=r"/opts/count.*Mcp-Param-Count"):
        h.param_headers([COUNT], {"opts": {"count": 2**53}})


def test_extraction_agrees_with_validation_end_to_end() -> None:
    schema = schema_with(q={"type": "object", "properties": {"tenant": annotated("Tenant")}})
    params = h.tool_header_params(schema)
    headers = h.param_headers(params, {"q": {"tenant": " acme"}})
    assert headers == [("Mcp-Param-Tenant", b64(" acme"))]


# --- tools/list filtering ------------------------------------------------------------


def test_filter_drops_only_invalid_tools_and_keeps_order_and_other_keys() -> None:
    good = {"name": "good", "inputSchema": schema_with(r=annotated("Region"))}
    plain = {"name": "plain", "inputSchema": schema_with(r={"type": "string"})}
    bad = {"name": "bad", "inputSchema": schema_with(r=annotated("Bad Name"))}
    hidden = {"name": "hidden", "inputSchema": schema_with(a={"type": "array", "items": HIDDEN})}
    no_name = {"inputSchema": schema_with(r=annotated("Bad Name"))}
    odd = "not an object"
    tools = [bad, good, no_name, hidden, odd, plain]
    result = {"tools": tools, "nextCursor": "c2", "_meta": {"k": 1}}
    before = copy.deepcopy(result)

    filtered, table = h.filter_tools_result(result)

    assert filtered == {"tools": [good, no_name, odd, plain], "nextCursor": "c2", "_meta": {"k": 1}}
    assert list(filtered) == ["tools", "nextCursor", "_meta"]
    assert result == before  # the input is not modified
    assert dict(table.by_tool) == {"good": (HeaderParam("Mcp-Param-Region", ("r",), "string"),)}
    assert [name for name, _ in table.dropped] == ["bad", "hidden"]
    assert "token" in table.dropped[0][1] and "reachable" in table.dropped[1][1]


def test_filter_with_duplicate_names_keeps_the_first_kept_tools_params() -> None:
    first = {"name": "t", "inputSchema": schema_with(a=annotated("First"))}
    second = {"name": "t", "inputSchema": schema_with(a=annotated("Second"))}
    _, table = h.filter_tools_result({"tools": [first, second]})
    assert table.by_tool["t"][0].header == "Mcp-Param-First"


def test_filter_leaves_a_result_without_a_tools_list_alone() -> None:
    filtered, table = h.filter_tools_result({"tools": "nope", "x": 1})
    assert filtered == {"tools": "nope", "x": 1}
    assert dict(table.by_tool) == {} and table.dropped == ()


def test_table_is_read_only() -> None:
    tool = {"name": "g", "inputSchema": schema_with(r=annotated("R"))}
    _, table = h.filter_tools_result({"tools": [tool]})
    with pytest.raises(TypeError):
        table.by_tool["x"] = ()  # type: ignore[index]  # read-only: it must raise


# --- operator-configured headers -----------------------------------------------------


def test_ordinary_configured_headers_are_fine() -> None:
    assert h.configured_headers_problem({}) is None
    assert h.configured_headers_problem(
        {"Authorization": "Bearer x", "X-Team": "a", "X-Tabbed": "a\tb", "X-Empty": ""}
    ) is None


@pytest.mark.parametrize(
    "name",
    ["Accept", "content-type", "Content-Length", "HOST", "Connection", "Transfer-Encoding",
     "mcp-protocol-version", "Mcp-Method", "MCP-NAME", "Mcp-Session-Id", "last-event-id",
     "Mcp-Param-Region", "mcp-param-x"],
)
def test_reserved_names_are_refused_case_insensitively(name: str) -> None:
    problem = h.configured_headers_problem({"X-Ok": "1", name: "v"})
    assert problem is not None and "reserved" in problem and name in problem


def test_reserved_set_is_lower_case() -> None:
    assert all(name == name.lower() for name in h.RESERVED_HEADERS)
    assert "mcp-session-id" in h.RESERVED_HEADERS and "authorization" not in h.RESERVED_HEADERS


@pytest.mark.parametrize("name", ["", "X Team", "X-Team:", "X-Team\r\n", "Ünicode", "(x)"])
def test_names_must_be_tokens(name: str) -> None:
    problem = h.configured_headers_problem({name: "v"})
    assert problem is not None and "token" in problem


@pytest.mark.parametrize(
    "value", ["a\r\nX-Evil: 1", "a\nb", "a\rb", "a\x00b", "a\x1bb", "a\x7fb", "a\x85b"]
)
def test_values_with_control_characters_are_refused(value: str) -> None:
    problem = h.configured_headers_problem({"X-Team": value})
    assert problem is not None and "control character" in problem


def test_non_ascii_values_are_refused() -> None:
    problem = h.configured_headers_problem({"X-Team": "équipe"})
    assert problem is not None and "non-ASCII" in problem


@pytest.mark.parametrize(("headers", "word"), [
    ({1: "v"}, "name"),
    ({"X-Team": 1}, "value"),
    ({"X-Team": None}, "value"),
    ({"X-Team": b"a"}, "value"),
])
def test_non_str_keys_and_values_are_refused(headers: dict, word: str) -> None:
    problem = h.configured_headers_problem(headers)
    assert problem is not None and word in problem and "string" in problem


def test_a_name_configured_twice_is_refused() -> None:
    problem = h.configured_headers_problem({"X-Team": "a", "x-team": "b"})
    assert problem is not None and "twice" in problem


def test_non_mapping_is_refused() -> None:
    assert h.configured_headers_problem([("X-Team", "a")]) is not None  # type: ignore[arg-type]  # not a mapping, on purpose


@given(st.dictionaries(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1).map(lambda s: "X-" + s),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)),
))
def test_any_x_prefixed_token_with_printable_ascii_value_is_fine(headers: dict[str, str]) -> None:
    lowered = [name.lower() for name in headers]
    if len(set(lowered)) == len(lowered):
        assert h.configured_headers_problem(headers) is None
