"""stamp_request and the encoders: valid compact lines, `_meta` merged, schema-valid."""

from __future__ import annotations

import json

import orjson
import pytest
from codec_strategies import I64_MAX, json_ids, json_objects, json_values
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_schema import Invalid, definition_for, validate_message
from trunkline._codec import (
    KIND_ERROR,
    KIND_NOTIFICATION,
    KIND_REQUEST,
    KIND_RESULT,
    CodecError,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    scan,
    stamp_request,
)

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
STAMP = {
    PV: "2026-07-28",
    CAPS: {"elicitation": {"form": {}}},
    INFO: {"name": "trunkline", "version": "0.1.0"},
}
STAMP_BYTES = orjson.dumps(STAMP)


def _validate(line: bytes, revision: str, definition: str) -> dict:
    message = validate_message(line, revision)
    assert definition_for(message) == definition
    return message


def _one_line(line: bytes) -> None:
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and b"\r" not in line


MODERN = [
    (
        "tools/call",
        "CallToolRequest",
        {"name": "get_weather", "arguments": {"location": "New York"}},
    ),
    ("tools/call", "CallToolRequest", {"name": "x", "_meta": {"progressToken": 5, PV: "stale"}}),
    ("tools/list", "ListToolsRequest", None),
    ("tools/list", "ListToolsRequest", {"cursor": "abc"}),
    ("server/discover", "DiscoverRequest", None),
    (
        "subscriptions/listen",
        "SubscriptionsListenRequest",
        {"notifications": {"toolsListChanged": True}},
    ),
    ("resources/read", "ReadResourceRequest", {"uri": "file:///project/config.json"}),
    ("resources/list", "ListResourcesRequest", {}),
    ("resources/templates/list", "ListResourceTemplatesRequest", None),
    ("prompts/get", "GetPromptRequest", {"name": "review", "arguments": {"lang": "rust"}}),
    ("prompts/list", "ListPromptsRequest", None),
    (
        "completion/complete",
        "CompleteRequest",
        {
            "ref": {"type": "ref/prompt", "name": "review"},
            "argument": {"name": "lang", "value": "ru"},
        },
    ),
]


@pytest.mark.parametrize(
    "method,definition,params", MODERN, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODERN)]
)
@pytest.mark.parametrize("id_", [1, "call-1", I64_MAX])
def test_stamped_modern_requests_validate_against_the_schema(method, definition, params, id_):
    raw = None if params is None else json.dumps(params, indent=2).encode()  # pretty on purpose
    line = stamp_request(id_, method, raw, STAMP_BYTES)
    _one_line(line)
    message = _validate(line, "2026-07-28", definition)
    assert message["id"] == id_ and message["method"] == method
    assert message["params"]["_meta"][PV] == "2026-07-28"


def test_stamped_request_missing_required_meta_fails_validation():
    # The schema check above is not vacuous: a stamp without the required keys is rejected.
    line = stamp_request(1, "tools/list", None, b"{}")
    with pytest.raises(Invalid):
        _validate(line, "2026-07-28", "ListToolsRequest")


def test_legacy_initialize_validates_against_the_2025_schema():
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"roots": {"listChanged": True}},
        "clientInfo": {"name": "trunkline", "version": "0.1.0"},
    }
    line = encode_request(0, "initialize", orjson.dumps(params, option=orjson.OPT_INDENT_2))
    _one_line(line)
    message = _validate(line, "2025-11-25", "InitializeRequest")
    assert message["params"] == params and "_meta" not in message["params"]
    note = encode_notification("notifications/initialized", None)
    _validate(note, "2025-11-25", "InitializedNotification")


meta_extra = st.dictionaries(st.text(max_size=10), json_values, max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    id_=json_ids,
    method=st.text(max_size=40),
    params=st.none() | json_objects,
    caller_meta=st.none() | meta_extra,
    stamp_extra=meta_extra,
    indent=st.sampled_from([None, 2]),
)
def test_stamp_then_scan_round_trips(id_, method, params, caller_meta, stamp_extra, indent):
    stamp = {**stamp_extra, **STAMP}
    if params is not None:
        params = {k: v for k, v in params.items() if k != "_meta"}
        if caller_meta is not None:
            params["_meta"] = {**caller_meta, PV: "from-caller"}
    raw = None if params is None else json.dumps(params, indent=indent).encode()
    line = stamp_request(id_, method, raw, json.dumps(stamp, indent=indent).encode())
    _one_line(line)
    message = orjson.loads(line)
    assert message["jsonrpc"] == "2.0" and message["id"] == id_ and message["method"] == method
    caller = (params or {}).get("_meta", {})
    expected_meta = {**{k: v for k, v in caller.items() if k not in stamp}, **stamp}
    assert message["params"]["_meta"] == expected_meta
    assert message["params"]["_meta"][PV] == "2026-07-28"
    assert {k: v for k, v in message["params"].items() if k != "_meta"} == {
        k: v for k, v in (params or {}).items() if k != "_meta"
    }
    env = scan(line[:-1])
    assert (env.kind, env.id, env.method) == (KIND_REQUEST, id_, method)


def test_duplicate_stamp_keys_in_caller_meta_are_all_removed():
    params = (b'{"_meta":{"a":1,"io.modelcontextprotocol/protocolVersion":"x",'
              b'"io.modelcontextprotocol/protocolVersion":"y"}}')
    line = stamp_request(1, "m", params, STAMP_BYTES)
    assert line.count(PV.encode()) == 1 and b'"a":1' in line
    assert orjson.loads(line)["params"]["_meta"] == {"a": 1, **STAMP}


def test_strings_are_escaped():
    line = stamp_request('i"d\n', 'we"ird\nmethod\u2028\x01', None, b"{}")
    _one_line(line)
    message = orjson.loads(line)
    assert message["id"] == 'i"d\n' and message["method"] == 'we"ird\nmethod\u2028\x01'


@pytest.mark.parametrize(
    "params",
    [
        b"[1,2]",
        b"3",
        b'"s"',
        b"null",
        b"",
        b"{",
        b'{"a":1} {}',
        b'{"a":"x\ny"}',
        b'{"a":"\xff"}',
        b'{"_meta":[]}',
    ],
)
def test_bad_params_raise_codec_error(params):
    with pytest.raises(CodecError):
        stamp_request(1, "m", params, STAMP_BYTES)


@pytest.mark.parametrize("bad_id", [True, 1.5, None, 2**63, [1], {"a": 1}])
def test_bad_ids_raise_codec_error(bad_id):
    with pytest.raises(CodecError):
        stamp_request(bad_id, "m", None, STAMP_BYTES)
    with pytest.raises(CodecError):
        encode_request(bad_id, "m", None)


def test_codec_error_is_a_value_error():
    assert issubclass(CodecError, ValueError)
    with pytest.raises(ValueError, match="meta"):
        stamp_request(1, "m", None, b"[]")


def test_encoders_produce_valid_lines():
    cases = [
        (encode_request("r", "ping", None), KIND_REQUEST, "r"),
        (
            encode_notification("notifications/cancelled", b'{"requestId": 3}'),
            KIND_NOTIFICATION,
            None,
        ),
        (encode_result(5, b'{ "resultType" : "complete" }'), KIND_RESULT, 5),
        (encode_error(5, -32601, 'no "such" method\n', b'{"m": [1]}'), KIND_ERROR, 5),
        (encode_error(None, -32700, "Parse error"), KIND_ERROR, None),
    ]
    for line, kind, id_ in cases:
        _one_line(line)
        env = scan(line[:-1])
        assert (env.kind, env.id) == (kind, id_), env.reason
    err = orjson.loads(cases[3][0])["error"]
    assert err == {"code": -32601, "message": 'no "such" method\n', "data": {"m": [1]}}
    assert orjson.loads(cases[4][0])["id"] is None
    assert scan(cases[2][0][:-1]).result_type == "complete"
    with pytest.raises(CodecError):
        encode_result(1, b"{")
    with pytest.raises(CodecError):
        encode_error(1, 1, "m", b"nope")
