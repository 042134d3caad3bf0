"""Correlator and StreamDecoder: ids resolve exactly once; late replies are stale."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline._codec import (
    CORR_MATCHED,
    CORR_NONE,
    CORR_STALE,
    CORR_UNKNOWN,
    KIND_ERROR,
    KIND_INVALID,
    KIND_NOTIFICATION,
    KIND_OVERSIZED,
    KIND_RESULT,
    CodecError,
    Correlator,
    Event,
    StreamDecoder,
    encode_error,
    encode_result,
)


def test_allocate_resolve_once_then_stale():
    c: Correlator[str] = Correlator()
    a, b = c.allocate("a"), c.allocate("b")
    assert (a, b) == (1, 2) and len(c) == 2 and 1 in c and "1" not in c
    assert c.resolve(2) == (CORR_MATCHED, "b")
    assert c.resolve(2) == (CORR_STALE, None)
    assert c.resolve("1") == (CORR_UNKNOWN, None)  # "1" is not 1
    assert c.resolve(3) == (CORR_UNKNOWN, None)
    assert c.resolve(None) == (CORR_UNKNOWN, None)
    assert c.allocate("c") == 3
    assert c.discard(1) == "a" and c.resolve(1) == (CORR_STALE, None)
    assert c.discard(1) is None


def test_register_refuses_pending_or_used_ids():
    c = Correlator(first_id=100)
    c.register("x", object())
    with pytest.raises(CodecError):
        c.register("x", 1)
    c.register(1, "one")  # the int 1 is not the string "x" nor used
    with pytest.raises(CodecError):
        c.register(1, "again")
    assert c.allocate("next") == 100  # first_id still starts the allocated range
    with pytest.raises(CodecError):
        c.register(50, "gap")  # inside the used range [1, 101): conservatively refused
    c.register(500, "far")
    assert c.allocate("after") == 501
    assert c.resolve(1) == (CORR_MATCHED, "one")
    with pytest.raises(CodecError):
        c.register(1, "reuse")
    c.resolve("x")
    with pytest.raises(CodecError):
        c.register("x", "reuse")
    for bad in (True, 2.0, None, 2**64, b"x"):
        with pytest.raises(CodecError):
            c.register(bad, 0)
    assert True not in c and 2.0 not in c


def test_drain_hands_everything_back_and_replies_become_stale():
    c = Correlator()
    tokens = {c.allocate(f"t{i}"): f"t{i}" for i in range(5)}
    c.register("s", "ts")
    drained = c.drain()
    assert dict(drained) == {**tokens, "s": "ts"}
    assert len(c) == 0 and c.drain() == []
    assert all(c.resolve(i)[0] == CORR_STALE for i in [*tokens, "s"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["alloc", "resolve", "discard"]), st.integers(0, 30)), max_size=60
    )
)
def test_correlator_matches_a_model(ops):
    c = Correlator()
    pending: dict[int, int] = {}
    used: set[int] = set()
    for op, n in ops:
        if op == "alloc":
            i = c.allocate(n)
            assert i not in used
            used.add(i)
            pending[i] = n
        elif op == "resolve":
            want = (
                (CORR_MATCHED, pending.pop(n))
                if n in pending
                else ((CORR_STALE if n in used else CORR_UNKNOWN), None)
            )
            assert c.resolve(n) == want
        else:
            assert c.discard(n) == pending.pop(n, None)
        assert len(c) == len(pending)


def _lines(n: int, size: int) -> list[bytes]:
    text = "x" * size
    return [
        encode_result(i, orjson.dumps({"content": [{"type": "text", "text": text}]}))
        for i in range(1, n + 1)
    ]


def test_stream_decoder_correlates_a_read_buffer():
    c = Correlator()
    ids = [c.allocate(f"call{i}") for i in range(3)]
    d: StreamDecoder[str] = StreamDecoder(c)
    buf = (
        b"".join(_lines(3, 10))
        + b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n'
    )
    buf += (
        encode_result(2, b"{}")
        + encode_error(None, -32700, "Parse error")
        + b"garbage\n"
        + b'{"jsonrpc"'
    )
    events = d.feed(buf)
    kinds = [e.kind for e in events]
    assert kinds == [KIND_RESULT] * 3 + [KIND_NOTIFICATION, KIND_RESULT, KIND_ERROR, KIND_INVALID]
    assert [e.correlation for e in events] == [CORR_MATCHED] * 3 + [
        CORR_NONE,
        CORR_STALE,
        CORR_UNKNOWN,
        CORR_NONE,
    ]
    assert [e.token for e in events[:3]] == ["call0", "call1", "call2"] and [
        e.id for e in events[:3]
    ] == ids
    assert orjson.loads(events[0].result) == {"content": [{"type": "text", "text": "x" * 10}]}
    assert events[0].line == buf.split(b"\n")[0] and events[0].size == len(events[0].line)
    assert events[3].result is None and events[6].reason
    assert d.buffered == len(b'{"jsonrpc"') and len(c) == 0
    assert d.feed(b':"2.0","id":9,"result":{}}') == [] and d.finish()[0].correlation == CORR_UNKNOWN
    assert isinstance(events[0], Event)


def test_stream_decoder_without_correlator_and_oversized_lines():
    d = StreamDecoder(max_line_bytes=64)
    events = d.feed(b"y" * 200 + b"\n" + encode_result(1, b'{"a":1}'))
    assert [e.kind for e in events] == [KIND_OVERSIZED, KIND_RESULT]
    assert events[0].size == 200 and events[0].line == b"" and events[0].result is None
    assert events[1].correlation == CORR_NONE and events[1].token is None


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 100_000), max_size=8), st.sampled_from([40, 70_000]))
def test_events_do_not_depend_on_chunking(cuts, size):
    buf = b"".join(_lines(4, size))
    cuts = sorted({c % (len(buf) + 1) for c in cuts})

    def run(pieces):
        c = Correlator()
        for i in range(4):
            c.allocate(i)
        d = StreamDecoder(c)
        events = [e for p in pieces for e in d.feed(p)] + d.finish()
        return [(e.kind, e.id, e.correlation, e.token, e.line, e.result) for e in events]

    pieces = [buf[a:b] for a, b in zip([0, *cuts], [*cuts, len(buf)], strict=True)]
    assert run(pieces) == run([buf])


def test_large_result_line_is_sliced_exactly():
    result = {
        "content": [{"type": "text", "text": 'He said "hi"\n' * 6000}],
        "resultType": "complete",
    }
    line = encode_result(42, orjson.dumps(result))
    assert len(line) > 64 * 1024
    c = Correlator(first_id=42)
    c.allocate("big")
    events = StreamDecoder(c).feed(line * 3)
    assert [(e.correlation, e.result_type) for e in events] == [(CORR_MATCHED, "complete")] + [
        (CORR_STALE, "complete")
    ] * 2
    assert all(orjson.loads(e.result) == result for e in events)


def test_deadlines_expire_in_order_with_one_timer_worth_of_state():
    from trunkline import _codec as codec

    c = codec.Correlator()
    late = c.allocate("late", 30.0)
    early = c.allocate_call(7, 10.0)
    mid = c.allocate("mid", 20.0)
    free = c.allocate("no deadline")
    assert c.next_deadline() == 10.0
    assert c.resolve(mid) == (codec.CORR_MATCHED, "mid")
    assert c.expire(9.999) == []
    assert c.expire(25.0) == [(early, 7)]
    assert c.resolve(early) == (codec.CORR_STALE, None)
    assert c.discard_call(7) is None
    assert c.next_deadline() == 30.0
    assert c.expire(1e12) == [(late, "late")]
    assert c.next_deadline() is None
    assert free in c and len(c) == 1
