"""``header_map``: an HTTP request's headers as the gateway's server looks them up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline._codec import header_map


def reference(raw: list[bytes]) -> dict[str, str]:
    """The rules in plain Python: names lowered (ASCII letters only: ``bytes.lower``),
    values stripped of spaces and tabs, Latin-1, the first of a repeated name kept."""
    found: dict[str, str] = {}
    for name, value in zip(raw[::2], raw[1::2], strict=True):
        found.setdefault(name.lower().decode("latin-1"), value.decode("latin-1").strip(" \t"))
    return found


def test_names_lowered_values_trimmed_first_wins() -> None:
    raw = [b"Host", b"127.0.0.1:8080", b"MCP-Protocol-Version", b"2026-07-28 \t",
           b"X-Custom", b"\t a b ", b"HOST", b"evil.example", b"mcp-name", b"echo"]
    assert header_map(raw) == {"host": "127.0.0.1:8080", "mcp-protocol-version": "2026-07-28",
                               "x-custom": "a b", "mcp-name": "echo"}


def test_bytes_outside_ascii_are_latin1() -> None:
    assert header_map([b"X-Name", b"caf\xe9", b"X-Utf8", "é".encode()]) == {
        "x-name": "caf\u00e9", "x-utf8": "\u00c3\u00a9"}


def test_empty_and_blank() -> None:
    assert header_map([]) == {}
    assert header_map([b"X-Empty", b"", b"X-Blank", b" \t "]) == {"x-empty": "", "x-blank": ""}


def test_known_names_are_the_same_object_each_time() -> None:
    # Interned: the names MCP clients send cost no allocation per request.
    first, second = header_map([b"Mcp-Method", b"a"]), header_map([b"mcp-method", b"b"])
    assert next(iter(first)) is next(iter(second))


def test_malformed_lists_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="pairs"):
        header_map([b"Host"])
    with pytest.raises(TypeError):
        header_map([b"Host", "not bytes"])  # type: ignore[list-item]  # a str among bytes on purpose


header_bytes = st.binary(max_size=24)


@given(st.lists(st.tuples(st.sampled_from([b"Host", b"host", b"Accept", b"X-A", b"x-a",
                                           b"Mcp-Name", b"\xc9tag"]) | header_bytes,
                          header_bytes), max_size=12))
def test_matches_the_rules_in_python(pairs: list[tuple[bytes, bytes]]) -> None:
    raw = [part for pair in pairs for part in pair]
    assert header_map(raw) == reference(raw)
