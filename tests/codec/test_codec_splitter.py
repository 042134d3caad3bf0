"""LineSplitter: any chunking of the same bytes yields the same lines."""

from __future__ import annotations

from codec_strategies import reference_lines
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline._codec import DEFAULT_MAX_LINE_BYTES, LineSplitter, OversizedLine


def _normalize(items: list[bytes | OversizedLine]) -> list[bytes | int]:
    return [x.size if isinstance(x, OversizedLine) else x for x in items]


def _split(data: bytes, cuts: list[int], max_line: int) -> list[bytes | int]:
    splitter = LineSplitter(max_line)
    out: list[bytes | OversizedLine] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        out += splitter.feed(data[start:cut])
        assert splitter.buffered <= max_line + 1
        start = cut
    out += splitter.finish()
    assert splitter.buffered == 0
    return _normalize(out)


lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12)


@settings(max_examples=400, deadline=None)
@given(
    lines=lines,
    seps=st.lists(st.sampled_from([b"\n", b"\r\n", b"\n\n"]), min_size=12, max_size=12),
    tail=st.booleans(),
    max_line=st.sampled_from([1, 3, 8, 30, 1000]),
    data=st.data(),
)
def test_every_chunking_gives_the_same_lines(lines, seps, tail, max_line, data):
    blob = b"".join(line + sep for line, sep in zip(lines, seps, strict=False))
    if tail:
        blob += b"unterminated\r"
    cuts = data.draw(st.lists(st.integers(0, len(blob)), max_size=10))
    expected = reference_lines(blob, max_line)
    assert _split(blob, cuts, max_line) == expected
    assert _split(blob, [], max_line) == expected
    assert _split(blob, list(range(len(blob))), max_line) == expected  # byte by byte


def test_defaults_and_types():
    assert DEFAULT_MAX_LINE_BYTES == 16 * 1024 * 1024
    s = LineSplitter()
    assert s.feed(b"a\r\n\r\nb") == [b"a"]
    assert s.buffered == 1
    assert s.finish() == [b"b"]
    assert OversizedLine(3) == OversizedLine(3) and OversizedLine(3) != OversizedLine(4)


def test_oversized_line_is_never_buffered_whole():
    s = LineSplitter(1024)
    block = b"x" * 65536
    events = []
    for _ in range(64):  # 4 MiB without a newline
        events += s.feed(block)
        assert s.buffered <= 1025
    events += s.feed(b"\r\nnext\n")
    assert _normalize(events) == [64 * 65536, b"next"]


def test_oversized_tail_at_end_of_stream():
    s = LineSplitter(4)
    assert s.feed(b"ok\n123456") == [b"ok"]
    assert _normalize(s.finish()) == [6]


def test_large_buffers_many_lines():
    # A multi-MiB read buffer (the GIL-released path) split identically to small chunks.
    blob = b"".join(b'{"jsonrpc":"2.0","id":%d,"result":{}}\n' % i for i in range(100_000))
    whole = LineSplitter().feed(blob)
    assert len(whole) == 100_000
    assert whole == reference_lines(blob, DEFAULT_MAX_LINE_BYTES)
    s = LineSplitter()
    pieces = []
    for i in range(0, len(blob), 70_001):
        pieces += s.feed(blob[i : i + 70_001])
    assert pieces == whole


def test_feed_requires_bytes():
    import pytest

    with pytest.raises(TypeError):
        LineSplitter().feed("text")  # type: ignore[arg-type]  # str, not bytes, on purpose
