"""Integers beyond 64 bits: found by their place in a body or a value, and named so a
reader can find them (``protocol.wide_ints``; the codec's ``wide_integer_at`` says whether
a body holds one)."""

from __future__ import annotations

import pytest

from trunkline._codec import wide_integer_at
from trunkline.protocol import wide_ints


@pytest.mark.parametrize("body,place,digits", [
    (b'{"params":{"arguments":{"x":18446744073709551616}}}',
     ("params", "arguments", "x"), 20),
    (b'{"a":[1, 2.5, "99999999999999999999999", {"b": -9223372036854775809}]}',
     ("a", 3, "b"), 19),
    # Past the 4,300 digits Python turns into an int.
    (b'{"huge":' + b"7" * 5000 + b"}", ("huge",), 5000),
    (b'{"a.b":{"":[{"\\"":1e400, "q": 100000000000000000000}]}}',
     ("a.b", "", 0, "q"), 21),
])
def test_the_first_wide_integer_is_found_by_its_place(body, place, digits):
    assert wide_integer_at(body) is not None
    assert wide_ints.in_json(body) == (place, digits)


@pytest.mark.parametrize("body", [
    b'{"u":18446744073709551615,"i":-9223372036854775808}',
    b'{"s":"100000000000000000000000000000","f":1e30,"g":100000000000000000000000.5}',
    b'{"e":1E+400}',
])
def test_what_64_bits_keep_and_what_is_no_integer_is_not_found(body):
    assert wide_integer_at(body) is None
    assert wide_ints.in_json(body) is None


def test_places_read_as_written():
    assert wide_ints.described(("arguments", "items", 2, "amount")) == "arguments.items[2].amount"
    assert wide_ints.described(("id",)) == "id"
    assert wide_ints.described(("a.b", "", 'q"', "a b", 0)) == '["a.b"][""]["q\\""]["a b"][0]'
    assert wide_ints.described(()) == "the message"


def test_a_value_holding_one_names_it_with_its_digits():
    value = {"name": "t", "arguments": {"ok": [2**64 - 1, -(2**63)], "big": [0, -10**5000]}}
    assert wide_ints.in_value(value) == (("arguments", "big", 1), 5001)
    assert wide_ints.in_value({"a": (2**64 - 1, True, 1.5e300)}) is None
    assert wide_ints.wording(("arguments", "x"), 30) == (
        "arguments.x: an integer beyond 64 bits (30 digits), which would not arrive exactly; "
        "send it as a string")
