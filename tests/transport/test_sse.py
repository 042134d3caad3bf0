"""The SSE decoder: the WHATWG parsing rules, chunking invariance and the size guard."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.worker.transports.sse import SseDecoder, SseError, SseEvent

BOM = b"\xef\xbb\xbf"


def decode(raw: bytes, **kw: int) -> list[SseEvent]:
    dec = SseDecoder(**kw)
    return dec.feed(raw)


def feed_chunks(dec: SseDecoder, chunks: list[bytes]) -> list[SseEvent]:
    out: list[SseEvent] = []
    for chunk in chunks:
        out += dec.feed(chunk)
    return out


def msg(
    data: str, event: str = "message", id: str | None = None, retry: int | None = None
) -> SseEvent:
    return SseEvent(event=event, data=data, id=id, retry_ms=retry)


# --- the examples of the spec and the rules of the brief, one by one ---------------------------


def test_spec_example_comment_ids_and_space_stripping() -> None:
    dec = SseDecoder()
    raw = (b": test stream\n\ndata: first event\nid: 1\n\n"
           b"data:second event\nid\n\ndata:  third event\n\n")
    events = dec.feed(raw)
    # `id` with no colon is an empty id: it resets the last-event-id, so the event says None.
    assert events == [msg("first event", id="1"), msg("second event"), msg(" third event")]
    assert dec.last_event_id is None


def test_spec_example_empty_data_fields() -> None:
    dec = SseDecoder()
    # The last block has no blank line after it, so it never fires.
    assert dec.feed(b"data\n\ndata\ndata\n\ndata:") == [msg(""), msg("\n")]
    assert dec.pending_bytes > 0
    assert dec.finish() == []


def test_spec_example_space_after_colon_is_optional() -> None:
    assert decode(b"data:test\n\ndata: test\n\n") == [msg("test"), msg("test")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode(b"data: YHOO\ndata: +2\ndata: 10\n\n") == [msg("YHOO\n+2\n10")]


def test_event_names_and_the_default_type() -> None:
    raw = (
        b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent:\ndata: x\n\ndata: y\n\n"
    )
    assert decode(raw) == [msg("73857293", "add"), msg("2153", "remove"), msg("x"), msg("y")]


def test_only_one_space_is_stripped() -> None:
    assert decode(b"data:  two\nevent:   three\n\n") == [msg(" two", "  three")]


def test_line_without_colon_is_a_field_with_empty_value() -> None:
    assert decode(b"data\nevent\n\n") == [msg("")]
    assert decode(b"data\ndata\ndata: x\n\n") == [msg("\n\nx")]


def test_comments_are_ignored_everywhere() -> None:
    dec = SseDecoder()
    assert dec.feed(b":\n: keep-alive\n:data: no\n") == []
    assert dec.pending_bytes == 0
    assert dec.feed(b"data: a\n: inside a block\ndata: b\n:\n\n") == [msg("a\nb")]


def test_field_names_are_case_sensitive_and_unknown_ones_ignored() -> None:
    assert decode(b"Data: no\nfoo: bar\nID: 9\ndata: yes\n\n") == [msg("yes")]


def test_blank_line_without_data_dispatches_nothing() -> None:
    dec = SseDecoder()
    assert dec.feed(b"\n\n\r\n\revent: lonely\n\n") == []
    # The event type of a data-less block does not leak into the next block.
    assert dec.feed(b"data: x\n\n") == [msg("x")]


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
def test_each_line_terminator(sep: bytes) -> None:
    raw = sep.join([b"event: e", b"data: a", b"data: b", b"", b"data: c", b"", b""])
    assert decode(raw) == [msg("a\nb", "e"), msg("c")]


def test_mixed_terminators() -> None:
    raw = b"data: a\rdata: b\r\ndata: c\n\r\ndata: d\r\rdata: e\n\n"
    assert decode(raw) == [msg("a\nb\nc"), msg("d"), msg("e")]


def test_cr_at_chunk_end_then_lf_is_one_terminator() -> None:
    dec = SseDecoder()
    # Were the split CRLF two terminators, "a" would fire alone at the second chunk.
    out = feed_chunks(dec, [b"data: a\r", b"\ndata: b\r", b"", b"\n\r", b"", b"\n"])
    assert out == [msg("a\nb")]
    assert dec.pending_bytes == 0


def test_cr_at_chunk_end_then_cr_is_two_terminators() -> None:
    assert feed_chunks(SseDecoder(), [b"data: a\r", b"\r"]) == [msg("a")]


def test_leading_bom_is_skipped_once() -> None:
    assert decode(BOM + b"data: x\n\n") == [msg("x")]
    # A second BOM is part of the first field's name, which then is no known field.
    assert decode(BOM + BOM + b"data: x\n\ndata: y\n\n") == [msg("y")]


def test_bom_split_across_chunks() -> None:
    dec = SseDecoder()
    assert feed_chunks(dec, [b"\xef", b"", b"\xbb", b"\xbfdata: x\n", b"\n"]) == [msg("x")]


def test_bom_only_at_the_very_start() -> None:
    dec = SseDecoder()
    assert dec.feed(b"data: x\n\n") == [msg("x")]
    assert dec.feed(BOM + b"data: y\n\ndata: z\n\n") == [msg("z")]


def test_short_first_chunk_that_is_not_a_bom_is_kept() -> None:
    assert feed_chunks(SseDecoder(), [b"d", b"a", b"ta: x\n\n"]) == [msg("x")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert decode(b"event: \xffe\ndata: \xc3(\xff\n\n") == [msg("\ufffd(\ufffd", "\ufffde")]
    # A truncated sequence at the end of a line does not swallow the line terminator.
    assert decode(b"data: \xe2\x82\ndata: ok\n\n") == [msg("\ufffd\nok")]


def test_multibyte_character_split_across_chunks() -> None:
    raw = "data: é€😀\n\n".encode()
    for cut in range(len(raw) + 1):
        assert feed_chunks(SseDecoder(), [raw[:cut], raw[cut:]]) == [msg("é€😀")]


def test_id_is_set_only_on_events_whose_block_had_one() -> None:
    dec = SseDecoder()
    assert dec.feed(b"id: 7\ndata: a\n\ndata: b\n\n") == [msg("a", id="7"), msg("b")]
    assert dec.last_event_id == "7"


def test_id_only_block_moves_the_last_event_id() -> None:
    dec = SseDecoder()
    assert dec.feed(b"id: 5\n\n") == []
    assert dec.last_event_id == "5"


def test_empty_id_resets_the_last_event_id() -> None:
    dec = SseDecoder()
    dec.feed(b"id: 5\ndata: a\n\n")
    assert dec.feed(b"id:\ndata: b\n\n") == [msg("b")]
    assert dec.last_event_id is None


def test_id_with_nul_is_ignored() -> None:
    dec = SseDecoder()
    assert dec.feed(b"id: 1\n\nid: 2\x003\ndata: a\n\n") == [msg("a")]
    assert dec.last_event_id == "1"


def test_id_of_an_unfinished_block_is_not_committed() -> None:
    dec = SseDecoder()
    dec.feed(b"id: 1\ndata: a\n\nid: 2\ndata: cut off")
    # Resuming from "2" would skip the event that never arrived.
    assert dec.last_event_id == "1"
    assert dec.finish() == []
    assert dec.last_event_id == "1"
    # Nor does it leak into the reconnected stream, whose id-less events keep "1".
    assert dec.feed(b"data: b\n\n") == [msg("b")]
    assert dec.last_event_id == "1"


def test_retry_valid_values() -> None:
    dec = SseDecoder()
    assert dec.feed(b"retry: 3000\ndata: a\n\n") == [msg("a", retry=3000)]
    assert dec.feed(b"data: b\n\n") == [msg("b")]  # retry_ms is per block
    assert dec.last_retry_ms == 3000
    assert dec.feed(b"retry: 0012\n\n") == []  # a retry-only block updates the stream value
    assert dec.last_retry_ms == 12
    assert dec.feed(b"retry: 1\nretry: 2\ndata: c\n\n") == [msg("c", retry=2)]


@pytest.mark.parametrize(
    "value", [b"", b" 5", b"5 ", b"-5", b"+5", b"1.5", b"1e3", b"abc", "١٢".encode(), b"9" * 5000]
)
def test_retry_invalid_values_are_ignored(value: bytes) -> None:
    dec = SseDecoder()
    dec.feed(b"retry: 100\n\n")
    assert dec.feed(b"retry: " + value + b"\ndata: x\n\n") == [msg("x")]
    assert dec.last_retry_ms == 100


def test_finish_discards_and_starts_a_new_stream() -> None:
    dec = SseDecoder()
    assert dec.finish() == [] and dec.pending_bytes == 0
    dec.feed(b"retry: 50\nid: 3\ndata: a\n\nevent: half\ndata: b\nda")
    assert dec.pending_bytes > 0
    assert dec.finish() == []
    assert dec.pending_bytes == 0
    assert (dec.last_event_id, dec.last_retry_ms) == ("3", 50)
    # The reconnected stream may start with its own BOM; nothing of the cut block survives.
    assert dec.feed(BOM + b"data: c\n\n") == [msg("c")]
    assert (dec.last_event_id, dec.last_retry_ms) == ("3", 50)


def test_json_rpc_message_split_across_many_chunks() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 17,
        "result": {
            "content": [{"type": "text", "text": "line\nbreak \u00e9 " * 5000}],
            "isError": False,
        },
    }
    body = json.dumps(message, ensure_ascii=False).encode()
    assert len(body) > 64 * 1024
    raw = b": ping\r\n\r\nevent: message\r\nid: srv-1:17\r\ndata: " + body + b"\r\n\r\n"
    sizes = [1, 2, 3, 5, 8, 13, 4096, 7]
    chunks, at, i = [], 0, 0
    while at < len(raw):
        chunks.append(raw[at : at + sizes[i % len(sizes)]])
        at += sizes[i % len(sizes)]
        i += 1
    dec = SseDecoder()
    events = feed_chunks(dec, chunks)
    assert len(events) == 1
    assert (events[0].event, events[0].id) == ("message", "srv-1:17")
    assert json.loads(events[0].data) == message
    assert dec.pending_bytes == 0
    assert decode(raw) == events


# --- the size guard ------------------------------------------------------------------------------


def test_guard_on_a_long_unterminated_line() -> None:
    dec = SseDecoder(max_event_bytes=1000)
    for _ in range(10):
        dec.feed(b"data: " + b"x" * 94)  # 100 bytes a chunk
    assert dec.pending_bytes == 1000  # at the limit is allowed
    with pytest.raises(SseError):
        dec.feed(b"x")


def test_guard_on_many_lines_of_one_block_in_one_feed() -> None:
    with pytest.raises(SseError):
        decode(b"data: xxxxxxxxxx\n" * 200, max_event_bytes=1000)


def test_guard_on_an_oversized_event_complete_within_one_feed() -> None:
    # The blank line comes in the same chunk, but the event was still over the limit.
    with pytest.raises(SseError):
        decode(b"data: " + b"x" * 2000 + b"\n\n", max_event_bytes=1000)


def test_guard_counts_the_block_and_the_tail_together() -> None:
    dec = SseDecoder(max_event_bytes=1000)
    dec.feed(b"data: " + b"x" * 594 + b"\n")
    with pytest.raises(SseError):
        dec.feed(b"data: " + b"y" * 500)


def test_guard_is_per_event_not_per_stream() -> None:
    dec = SseDecoder(max_event_bytes=1000)
    event = b"data: " + b"x" * 900 + b"\n\n"
    assert len(dec.feed(event * 50)) == 50
    # Keep-alive comments hold nothing, so a long quiet stream never trips the guard.
    assert dec.feed(b": keep-alive\n" * 1000) == []
    # A dispatched event followed by a tail near the limit is within bounds as well.
    assert dec.feed(event + b"data: " + b"z" * 900) == [msg("x" * 900)]


def test_max_event_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SseDecoder(max_event_bytes=0)


# --- properties ---------------------------------------------------------------------------------

line_text = st.text(
    st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12
)
id_text = st.text(
    st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)), max_size=8
)
terminators = st.sampled_from([b"\n", b"\r\n", b"\r"])


@dataclass
class Block:
    event: str | None
    data: list[str]
    id: str | None
    retry: int | None


blocks = st.builds(
    Block,
    st.none() | line_text,
    st.lists(line_text, max_size=4),
    st.none() | id_text,
    st.none() | st.integers(0, 10**12),
)


@st.composite
def encoded_stream(draw: st.DrawFn) -> tuple[bytes, list[Block]]:
    """Blocks written with random terminators, separators and comments between lines."""
    items = draw(st.lists(blocks, max_size=6))
    out = [BOM] if draw(st.booleans()) else []

    def line(text: bytes) -> None:
        if draw(st.integers(0, 5)) == 0:
            out.append(b": " + draw(line_text).encode() + draw(terminators))
        # CR then an empty LF-ended line would be one CRLF terminator: pick another ending.
        ends = (
            [b"\r\n", b"\r"]
            if not text and out and out[-1].endswith(b"\r")
            else [b"\n", b"\r\n", b"\r"]
        )
        out.append(text + draw(st.sampled_from(ends)))

    def field(name: str, value: str) -> None:
        # No colon only for an empty value; no space only where the value cannot lose one.
        forms = (
            [b": "] + ([b":"] if not value.startswith(" ") else []) + ([b""] if not value else [])
        )
        line(name.encode() + draw(st.sampled_from(forms)) + value.encode())

    for block in items:
        fields = [("data", d) for d in block.data]
        fields += [("event", block.event)] if block.event is not None else []
        fields += [("id", block.id)] if block.id is not None else []
        fields += [("retry", str(block.retry))] if block.retry is not None else []
        # Other fields land anywhere among the data lines, which keep their order.
        order = iter(block.data)
        for name, value in draw(st.permutations(fields)) if fields else []:
            field(name, next(order) if name == "data" else value)
        line(b"")
    return b"".join(out), items


@st.composite
def chunked(draw: st.DrawFn, raw: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=30)))
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


def expected(items: list[Block]) -> tuple[list[SseEvent], str | None, int | None]:
    """What the spec makes of the blocks, written independently of the decoder."""
    events, last_id, retry = [], None, None
    for b in items:
        last_id = (b.id or None) if b.id is not None else last_id
        retry = b.retry if b.retry is not None else retry
        if b.data:
            eid = (b.id or None) if b.id is not None else None
            events.append(SseEvent(b.event or "message", "\n".join(b.data), eid, b.retry))
    return events, last_id, retry


def state(dec: SseDecoder) -> tuple[str | None, int | None, int]:
    return dec.last_event_id, dec.last_retry_ms, dec.pending_bytes


@settings(max_examples=300)
@given(st.data())
def test_encoded_events_decode_back_under_any_chunking(data: st.DataObject) -> None:
    raw, items = data.draw(encoded_stream())
    events, last_id, retry = expected(items)
    whole = SseDecoder()
    assert whole.feed(raw) == events
    assert state(whole) == (last_id, retry, 0)
    parts = SseDecoder()
    assert feed_chunks(parts, data.draw(chunked(raw))) == events
    assert state(parts) == state(whole)


# Byte soup from the pieces that matter, for streams no well-behaved server would write.
soup = st.lists(
    st.sampled_from(
        [
            b"\r",
            b"\n",
            b"\r\n",
            b":",
            b" ",
            b"data",
            b"event",
            b"id",
            b"retry",
            b"7",
            b"x",
            b"\x00",
            b"\xff",
            BOM,
        ]
    ),
    max_size=60,
).map(b"".join)


@settings(max_examples=300)
@given(st.data())
def test_any_bytes_decode_the_same_under_any_chunking(data: st.DataObject) -> None:
    raw = data.draw(soup)
    whole = SseDecoder()
    events = whole.feed(raw)
    parts = SseDecoder()
    assert feed_chunks(parts, data.draw(chunked(raw))) == events
    assert state(parts) == state(whole)
    one_by_one = SseDecoder()
    assert feed_chunks(one_by_one, [raw[i : i + 1] for i in range(len(raw))]) == events
    assert state(one_by_one) == state(whole)
