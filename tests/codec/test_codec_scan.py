"""scan(): envelope classification without decoding the payload."""

from __future__ import annotations

import json
import random
import re

import orjson
import pytest
from codec_strategies import I64_MAX, I64_MIN, json_ids, json_objects, json_values
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline._codec import (
    KIND_ERROR,
    KIND_INVALID,
    KIND_NOTIFICATION,
    KIND_REQUEST,
    KIND_RESULT,
    MAX_NESTING_DEPTH,
    scan,
    stamp_request,
)

R = b'{"jsonrpc":"2.0",'

INVALID = {
    "empty": b"",
    "whitespace only": b"  \t",
    "truncated object": R + b'"id":1,"result":{"a":[1,2',
    "truncated string": R + b'"id":1,"result":{"a":"abc',
    "truncated escape": R + b'"id":1,"result":{"a":"abc\\',
    "truncated literal": R + b'"id":1,"result":{"a":tru',
    "deep nesting 100000 [": R + b'"id":1,"result":' + b"[" * 100_000,
    "deep nesting balanced": R + b'"id":1,"result":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "bare deep array": b"[" * 100_000,
    "duplicate id": R + b'"id":1,"id":2,"result":{}}',
    "duplicate method": R + b'"id":1,"method":"a","method":"b"}',
    "duplicate via escape": R + b'"id":1,"\\u0069d":2,"result":{}}',
    "duplicate error.code": R + b'"id":1,"error":{"code":1,"code":2,"message":"m"}}',
    "id null on request": R + b'"id":null,"method":"a"}',
    "id null on result": R + b'"id":null,"result":{}}',
    "id float": R + b'"id":1.0,"result":{}}',
    "id exponent": R + b'"id":1e2,"method":"a"}',
    "id true": R + b'"id":true,"method":"a"}',
    "id false": R + b'"id":false,"result":{}}',
    "id object": R + b'"id":{"a":1},"method":"a"}',
    "id array": R + b'"id":[1],"result":{}}',
    "id beyond i64": R + b'"id":9223372036854775808,"result":{}}',
    "id below i64": R + b'"id":-9223372036854775809,"result":{}}',
    "id huge": R + b'"id":' + b"9" * 400 + b',"result":{}}',
    "invalid UTF-8 in payload": R + b'"id":1,"result":{"t":"\xc3\x28"}}',
    "overlong UTF-8": R + b'"id":1,"result":{"t":"\xc0\xaf"}}',
    "NUL outside strings": R + b'"id":1,"result":{}}\x00',
    "NUL in method": R + b'"method":"a\x00b"}',
    "raw newline in method": R + b'"method":"a\nb"}',
    "batch array": b'[{"jsonrpc":"2.0","id":1,"method":"a"}]',
    "empty batch": b"[]",
    "empty object": b"{}",
    "top-level string": b'"hello"',
    "top-level number": b"42",
    "no jsonrpc": b'{"id":1,"method":"a"}',
    "jsonrpc 1.0": b'{"jsonrpc":"1.0","id":1,"method":"a"}',
    "jsonrpc number": b'{"jsonrpc":2.0,"id":1,"method":"a"}',
    "result and error": R + b'"id":1,"result":{},"error":{"code":1,"message":"m"}}',
    "neither": R + b'"id":1}',
    "method and result": R + b'"id":1,"method":"a","result":{}}',
    "method not a string": R + b'"id":1,"method":["a"]}',
    "error not an object": R + b'"id":1,"error":"boom"}',
    "error.code float": R + b'"id":1,"error":{"code":-32600.5,"message":"m"}}',
    "error.code string": R + b'"id":1,"error":{"code":"-32600","message":"m"}}',
    "error.code missing": R + b'"id":1,"error":{"message":"m"}}',
    "error.message number": R + b'"id":1,"error":{"code":1,"message":5}}',
    "trailing garbage": R + b'"id":1,"result":{}} x',
    "two objects": R + b'"id":1,"result":{}}{}',
    "trailing comma": R + b'"id":1,"result":{},}',
    "single quotes": b"{'jsonrpc':'2.0','id':1,'method':'a'}",
    "unquoted key": R + b'id:1,"method":"a"}',
    "bad escape": R + b'"id":1,"result":{"a":"\\x"}}',
    "bad number": R + b'"id":1,"result":{"a":01}}',
    "NaN": R + b'"id":1,"result":{"a":NaN}}',
    "lone surrogate in method": R + b'"method":"\\ud800"}',
    "params a number": R + b'"id":1,"method":"a","params":7}',
    "resultType not a string": R + b'"id":1,"result":{"resultType":7}}',
}


#: The invalid lines above that read as an answer to request 1: an id of their own, given
#: once, and no method. Each keeps that id, so the request can fail at once.
ANSWERS_TO_1 = {
    "truncated object", "truncated string", "truncated escape", "truncated literal",
    "deep nesting 100000 [", "deep nesting balanced", "duplicate error.code",
    "invalid UTF-8 in payload", "overlong UTF-8", "NUL outside strings", "result and error",
    "neither", "error not an object", "error.code float", "error.code string",
    "error.code missing", "error.message number", "trailing garbage", "two objects",
    "trailing comma", "bad escape", "bad number", "NaN", "resultType not a string",
}


@pytest.mark.parametrize("name", INVALID)
def test_malformed_lines_are_invalid_with_a_reason(name):
    env = scan(INVALID[name])
    assert env.kind == KIND_INVALID
    assert isinstance(env.reason, str) and env.reason
    assert env.method is None
    assert env.id == (1 if name in ANSWERS_TO_1 else None)


def test_nesting_limit_is_exact():
    def line(depth):  # depth counts the top-level object as 1, result as 2
        inner = depth - 1
        return R + b'"id":1,"result":' + b"[" * inner + b"]" * inner + b"}"

    assert scan(line(MAX_NESTING_DEPTH)).kind == KIND_RESULT
    assert "nesting" in scan(line(MAX_NESTING_DEPTH + 1)).reason


VALID = [
    (R + b'"id":1,"method":"tools/call","params":{}}', KIND_REQUEST, 1, "tools/call"),
    (R + b'"id":"1","method":"tools/call"}', KIND_REQUEST, "1", "tools/call"),
    (
        R + b'"method":"notifications/progress","params":{"p":1}}',
        KIND_NOTIFICATION,
        None,
        "notifications/progress",
    ),
    (R + b'"id":9223372036854775807,"result":{}}', KIND_RESULT, I64_MAX, None),
    (R + b'"id":-9223372036854775808,"result":1}', KIND_RESULT, I64_MIN, None),
    (R + b'"id":"","result":null}', KIND_RESULT, "", None),
    (R + b'"id":null,"error":{"code":-32700,"message":"Parse error"}}', KIND_ERROR, None, None),
    (R + b'"error":{"code":-32600,"message":"Invalid Request"}}', KIND_ERROR, None, None),
    (
        R + b'"id":"a\\nb\\u00e9\\ud83d\\ude00","result":{}}',
        KIND_RESULT,
        "a\nb\u00e9\U0001f600",
        None,
    ),
    (R + b'"id":2,"method":"a\\\\b\\"\\/\\t"}', KIND_REQUEST, 2, 'a\\b"/\t'),
    (b' \t{ "jsonrpc" : "2.0" ,\n "id" : 3 , "result" : { } } \r\n', KIND_RESULT, 3, None),
]


@pytest.mark.parametrize("line,kind,id_,method", VALID)
def test_valid_lines(line, kind, id_, method):
    env = scan(line)
    assert (env.kind, env.id, env.method, env.reason) == (kind, id_, method, None)
    assert type(env.id) is type(id_)


def test_int_and_string_ids_differ():
    a = scan(R + b'"id":1,"result":{}}').id
    b = scan(R + b'"id":"1","result":{}}').id
    assert a == 1 and b == "1" and a != b


def test_result_span_type_and_error_fields():
    result = {
        "content": [{"type": "text", "text": 'x"}\\\n' * 50}],
        "resultType": "complete",
        "n": 1e400 > 0,
    }
    line = orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": result})
    env = scan(line)
    assert env.kind == KIND_RESULT and env.result_type == "complete"
    a, b = env.result_span
    assert orjson.loads(line[a:b]) == result

    no_type = scan(R + b'"id":7,"result":{"content":[],"x":{"resultType":"nested"}}}')
    assert no_type.kind == KIND_RESULT and no_type.result_type is None

    line = (
        R
        + b'"id":"q","error":{"data":{"supported":["2026-07-28"]},'
        b'"message":"Unsupported \\u0076ersion","code":-32022}}'
    )
    env = scan(line)
    assert (env.kind, env.id, env.error_code, env.error_message) == (
        KIND_ERROR,
        "q",
        -32022,
        "Unsupported version",
    )
    assert orjson.loads(env.error_data) == {"supported": ["2026-07-28"]}
    assert env.result_span is None and env.result_type is None
    assert scan(R + b'"id":1,"error":{"code":5}}').error_message is None


def test_huge_numbers_in_payload_are_fine():
    line = R + b'"id":1,"result":{"big":' + b"1" * 5000 + b',"exp":1e99999,"neg":-0.0e-7}}'
    assert scan(line).kind == KIND_RESULT


def test_nested_string_content_is_left_to_the_full_decode():
    # Documented choice: raw control characters inside *skipped* string bodies are not
    # looked at by the scan (the parent's one full decode rejects them).
    line = R + b'"id":1,"result":{"text":"a\x00b\x01"}}'
    assert scan(line).kind == KIND_RESULT
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(line)


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=300))
def test_scan_never_raises_on_arbitrary_bytes(data):
    env = scan(data)
    assert env.kind in (KIND_INVALID, KIND_REQUEST, KIND_NOTIFICATION, KIND_RESULT, KIND_ERROR)
    assert (env.reason is not None) == (env.kind == KIND_INVALID)


def _messages():
    request = st.fixed_dictionaries(
        {"id": json_ids, "method": st.text(max_size=30)},
        optional={"params": json_objects | st.lists(json_values)},
    )
    notification = st.fixed_dictionaries(
        {"method": st.text(max_size=30)}, optional={"params": json_objects | st.lists(json_values)}
    )
    result = st.fixed_dictionaries({"id": json_ids, "result": json_values})
    error_obj = st.fixed_dictionaries(
        {"code": st.integers(I64_MIN, I64_MAX)},
        optional={"message": st.text(), "data": json_values},
    )
    error = st.fixed_dictionaries({"error": error_obj}, optional={"id": json_ids | st.none()})
    extra = st.dictionaries(st.sampled_from(["x", "extra", "_meta"]), json_values, max_size=2)
    return st.tuples(request | notification | result | error, extra)


def _expected(msg: dict) -> tuple[int, object, object]:
    if "method" in msg:
        return (KIND_REQUEST if "id" in msg else KIND_NOTIFICATION, msg.get("id"), msg["method"])
    if "result" in msg:
        return KIND_RESULT, msg["id"], None
    return KIND_ERROR, msg.get("id"), None


@settings(max_examples=600, deadline=None)
@given(
    _messages(), st.randoms(use_true_random=False), st.sampled_from(["orjson", "indent", "ascii"])
)
def test_scan_agrees_with_orjson_on_valid_messages(parts, rnd: random.Random, style):
    body, extra = parts
    msg = {"jsonrpc": "2.0", **extra, **body}
    items = list(msg.items())
    rnd.shuffle(items)
    msg = dict(items)
    if style == "orjson":
        line = orjson.dumps(msg)
    elif style == "indent":
        line = json.dumps(msg, indent=1).replace("\n", " ").encode()
    else:
        line = json.dumps(msg, ensure_ascii=True).encode()
    decoded = orjson.loads(line)
    env = scan(line)
    assert (env.kind, env.id, env.method) == _expected(decoded), env.reason
    if env.kind == KIND_RESULT:
        a, b = env.result_span
        assert orjson.loads(line[a:b]) == decoded["result"]
        rt = decoded["result"].get("resultType") if isinstance(decoded["result"], dict) else None
        assert env.result_type == (rt if isinstance(rt, str) else None)
    if env.kind == KIND_ERROR:
        err = decoded["error"]
        assert (env.error_code, env.error_message) == (err["code"], err.get("message"))
        if "data" in err:
            assert orjson.loads(env.error_data) == err["data"]
        else:
            assert env.error_data is None


@settings(max_examples=800, deadline=None)
@given(_messages(), st.data())
def test_mutated_lines_accepted_only_if_they_decode(parts, data):
    body, extra = parts
    line = bytearray(orjson.dumps({"jsonrpc": "2.0", **extra, **body}))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(line) - 1))
        line[at] = data.draw(st.sampled_from(b'{}[]",:\\0 -e.\x00\xff'))
    line = bytes(line)
    env = scan(line)
    if env.kind == KIND_INVALID:
        return
    # Whatever the scan accepts is JSON that orjson decodes to the same envelope, except
    # for content the scan deliberately leaves to the one full decode (see above): raw
    # control characters and unpaired surrogate escapes in skipped string bodies, and
    # numbers that are valid JSON grammar but overflow a double (orjson refuses those).
    try:
        decoded = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        assert (
            any(b < 0x20 for b in line)
            or re.search(rb"\\u[dD][89a-fA-F]", line)
            or "infinity" in str(exc)
        ), line
        return
    assert (env.kind, env.id, env.method) == _expected(decoded)


# -- params spans: where an object params and its _meta, name and uri are -------------------

PARAMS_KEYS = ("_meta", "name", "uri")


def _spell_key(key: str, escapes: list[bool]) -> bytes:
    """``key`` as a JSON string, each character either as orjson writes it or ``\\u``-escaped
    (a character beyond the BMP as its escaped surrogate pair): every spelling a peer may
    send decodes to the same key."""
    out = []
    for c, escape in zip(key, escapes, strict=False):  # escapes: one per character, or more
        if escape:
            out.append(json.dumps(c)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04x}")
        else:
            out.append(orjson.dumps(c).decode()[1:-1])
    return f'"{"".join(out)}"'.encode()


_members = st.lists(
    st.tuples(
        st.sampled_from(PARAMS_KEYS) | st.text(max_size=8),
        json_values,
        st.lists(st.booleans(), min_size=8, max_size=8),
        st.sampled_from([b"", b" ", b"\n\t"]),
    ),
    max_size=8,
)


@settings(max_examples=400, deadline=None)
@given(_members, st.booleans(), st.randoms(use_true_random=False))
def test_params_spans_are_what_orjson_decodes(members, is_request, rnd: random.Random):
    """Keys spelled with random escapes and repeated at will, values written by orjson or
    json (ASCII-escaped), whitespace anywhere, other members named like the params ones:
    each span decodes to the member ``orjson.loads`` keeps (a repeated key's last value)."""
    params = b"{" + b",".join(
        ws + _spell_key(key, escapes) + ws + b":" + ws
        + (orjson.dumps(value) if rnd.random() < 0.5 else json.dumps(value).encode()) + ws
        for key, value, escapes, ws in members
    ) + b"}"
    top = [b'"jsonrpc":"2.0"', b'"method":"tools/call"', b'"name":"top"', b'"_meta":{"uri":1}',
           b'"params":' + params]
    if is_request:
        top.append(b'"id":7')
    rnd.shuffle(top)
    line = b"{" + b",".join(top) + b"}"

    env = scan(line)
    assert env.kind == (KIND_REQUEST if is_request else KIND_NOTIFICATION), env.reason
    decoded = orjson.loads(line)["params"]
    a, b = env.params_span
    assert line[a:b] == params
    for key, span in zip(PARAMS_KEYS, (env.meta_span, env.name_span, env.uri_span), strict=True):
        if key not in decoded:
            assert span is None, key
        else:
            assert orjson.loads(line[span[0]:span[1]]) == decoded[key], key


def test_params_spans_of_stamped_requests():
    """The lines the worker itself writes: a stamped call with a large argument."""
    params = orjson.dumps({"name": "echo", "arguments": {"text": "x" * 70_000, "name": "no"}})
    meta = orjson.dumps({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                         "progressToken": "p-1"})
    line = stamp_request(3, "tools/call", params, meta)
    env = scan(line[:-1])
    decoded = orjson.loads(line)["params"]

    def value(span):
        return None if span is None else orjson.loads(line[span[0]:span[1]])

    spans = env.params_span, env.meta_span, env.name_span, env.uri_span
    assert [value(span) for span in spans] == [decoded, decoded["_meta"], "echo", None]


SPANLESS = {
    "no params": R + b'"id":1,"method":"m"}',
    "array params": R + b'"id":1,"method":"m","params":[{"name":"x"}]}',
    "result with params": R + b'"id":1,"result":{},"params":{"name":"x"}}',
    "error with params": R + b'"id":1,"error":{"code":1},"params":{"name":"x"}}',
    "invalid": R + b'"id":null,"method":"m","params":{"name":"x"}}',
}


@pytest.mark.parametrize("line", SPANLESS.values(), ids=SPANLESS.keys())
def test_only_object_params_of_requests_and_notifications_have_spans(line):
    env = scan(line)
    assert (env.params_span, env.meta_span, env.name_span, env.uri_span) == (None,) * 4
