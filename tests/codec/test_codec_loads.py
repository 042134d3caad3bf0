"""``loads_text``: the codec's decoder for long results, against orjson.

What it decodes must be exactly what orjson decodes (types included: each side is
encoded again and compared byte for byte); what it declines must be declined before
much work; what is not JSON must raise ``CodecError`` naming the byte.
"""

from __future__ import annotations

import orjson
import pytest
from codec_strategies import json_values
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline._codec import MAX_NESTING_DEPTH, CodecError, loads_text
from trunkline.errors import MalformedMessage
from trunkline.protocol.reply import LONG_RESULT_BYTES, Reply, decode_result

DECLINED = object()
LONG_ASCII = "word " * 2000  # 10,000 ASCII bytes: the shape the decoder is for


def _same(a: object, b: object) -> bool:
    sort = orjson.OPT_SORT_KEYS
    return orjson.dumps(a, option=sort) == orjson.dumps(b, option=sort)


def _result(text: str, **extra: object) -> bytes:
    return orjson.dumps({"content": [{"type": "text", "text": text}], "isError": False, **extra})


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_whatever_it_decodes_is_what_orjson_decodes(value):
    data = _result(LONG_ASCII, structuredContent=value)
    got = loads_text(data, DECLINED)
    if got is not DECLINED:
        assert _same(got, orjson.loads(data))
    assert _same(decode_result(data), orjson.loads(data))


@pytest.mark.parametrize("extra", [
    {},
    {"structuredContent": {"n": -0.0, "f": 5e-324, "g": 1.7976931348623157e308, "i": -(2**63)}},
    {"_meta": {"name": "José", "emoji": "😀", "esc": "tab\there \"quoted\" \\ /"}},
    {"nested": [[[[{"a": [1, 2, {"b": None}]}]]]], "t": True, "u": False},
])
def test_long_ascii_text_is_decoded_not_declined(extra):
    data = _result(LONG_ASCII + "\nsecond line\n", **extra)
    got = loads_text(data, DECLINED)
    assert got is not DECLINED
    assert _same(got, orjson.loads(data))
    text = got["content"][0]["text"]
    assert text == LONG_ASCII + "\nsecond line\n" and text.isascii()


def test_integers_past_64_bits_are_exact():
    data = _result(LONG_ASCII).replace(b'"isError":false', b'"big":123456789012345678901234567890,'
                                       b'"neg":-9223372036854775809,"isError":false')
    got = loads_text(data, DECLINED)
    assert got["big"] == 123456789012345678901234567890 and got["neg"] == -(2**63) - 1


def test_a_repeated_key_keeps_its_last_value():
    data = _result(LONG_ASCII).replace(b'"isError":false', b'"k":1,"k":2,"isError":false')
    assert loads_text(data, DECLINED)["k"] == 2


@pytest.mark.parametrize("data", [
    # JSON carried as text: an escaped quote every few bytes.
    _result(orjson.dumps([{"id": i, "name": f"item-{i}"} for i in range(800)]).decode()),
    # Mostly not ASCII, and one long non-ASCII string behind a short ASCII one.
    _result("héllo wörld " * 800),
    _result("short", other="x" * 100 + "é" * 3000),
    # Many small values.
    _result("x", structuredContent={"rows": [{"id": i, "v": i / 3} for i in range(500)]}),
])
def test_documents_orjson_decodes_faster_are_declined(data):
    assert len(data) >= LONG_RESULT_BYTES
    assert loads_text(data, DECLINED) is DECLINED
    assert _same(decode_result(data), orjson.loads(data))


@pytest.mark.parametrize("data, where", [
    (_result(LONG_ASCII) + b" x", "trailing data"),
    (_result(LONG_ASCII)[:-1], "unexpected end"),
    (_result(LONG_ASCII).replace(b"word", b"wo\x01d", 1), "control character"),
    (_result(LONG_ASCII).replace(b'"isError"', b'"is\xffError"'), "UTF-8"),
    (_result(LONG_ASCII).replace(b"word", b"\\ud800", 1), "surrogate"),
    (_result(LONG_ASCII).replace(b"word", b"\\q", 1), "escape"),
    (_result(LONG_ASCII).replace(b"false", b"NaN", 1), "expected a value"),
    # Long enough that the values of its depth fit the budget: the depth is the error.
    (_result(LONG_ASCII * 16).replace(
        b'"isError":false',
        b'"deep":' + b"[" * MAX_NESTING_DEPTH + b"]" * MAX_NESTING_DEPTH + b',"isError":false'),
     "nesting"),
])
def test_what_is_not_json_is_an_error_naming_the_byte(data, where):
    with pytest.raises(CodecError, match=rf"invalid JSON at byte \d+: .*{where}"):
        loads_text(data, DECLINED)
    with pytest.raises(MalformedMessage, match="result is not valid JSON"):
        Reply(data, "complete").decode(server="s", method="tools/call")


LONG = _result(LONG_ASCII)


@settings(max_examples=200, deadline=None)
@given(st.builds(lambda cut, junk, tail: LONG[:cut] + junk + LONG[cut:][:tail],
                 st.integers(0, 10_100), st.binary(max_size=8), st.integers(0, 10_100)))
def test_any_bytes_decode_as_orjson_says_or_raise(data):
    """A long result cut anywhere, with any bytes spliced in: the same value as orjson,
    or an error where orjson has one."""
    try:
        want = orjson.loads(data)
    except orjson.JSONDecodeError:
        with pytest.raises(ValueError):
            decode_result(data)
        return
    assert _same(decode_result(data), want)
