"""The parent <-> worker channel in the codec: frames, SUBMIT stamping, RESULT routing."""

from __future__ import annotations

import itertools
import random
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_schema import MODERN, validate_message
from trunkline._codec import (
    CORR_MATCHED,
    CORR_NONE,
    CORR_STALE,
    CORR_UNKNOWN,
    DEFAULT_MAX_FRAME_BYTES,
    FRAME_RESULT,
    FRAME_STAMPED,
    FRAME_STAMPED_FOR,
    FRAME_SUBMIT,
    FRAME_SUBMIT_REJECTED,
    KIND_ERROR,
    KIND_NOTIFICATION,
    KIND_REQUEST,
    KIND_RESULT,
    RT_ABSENT,
    RT_COMPLETE,
    RT_INPUT_REQUIRED,
    RT_OTHER,
    CodecError,
    Correlator,
    FrameSplitter,
    ResultDemux,
    StreamDecoder,
    SubmitStamper,
    encode_error,
    encode_request,
    encode_result,
    encode_submit,
)

PV = "io.modelcontextprotocol/protocolVersion"
META = orjson.dumps({
    PV: MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "trunkline", "version": "0.1.0"},
})
CANCEL, STATE = 2, 18  # opaque to the codec


def frame(kind: int, body: bytes = b"") -> bytes:
    return struct.pack("<IB", len(body) + 1, kind) + body


def stamp(stamper: SubmitStamper, chunk: bytes) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The stamper's ordered output split in two: every stamped request line, and every
    other frame (the order between the two is checked where it matters)."""
    out = stamper.feed(chunk)
    return (b"".join(body for kind, body in out if kind == FRAME_STAMPED),
            [(kind, body) for kind, body in out if kind != FRAME_STAMPED])


def cuts(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (any order, duplicates allowed)."""
    edges = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def parse_result_frames(data: bytes) -> list[tuple[int, int, int, int, bytes]]:
    """(call_id, request_id, kind, result_type, payload) of every RESULT frame in ``data``."""
    out = []
    for kind, body in FrameSplitter().feed(data):
        assert kind == FRAME_RESULT
        call_id, request_id, k, rt = struct.unpack_from("<QqBB", body)
        out.append((call_id, request_id, k, rt, body[18:]))
    return out


def response(rid: int, result: dict | None = None, error: tuple[int, str] | None = None) -> bytes:
    if error is not None:
        return encode_error(rid, *error)
    return encode_result(rid, orjson.dumps(result))


# ---------------------------------------------------------------------------- splitter


frames_strategy = st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=300)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(frames_strategy, st.lists(st.integers(0, 10_000), max_size=20))
def test_splitter_yields_the_same_frames_for_every_chunking(frames, points):
    stream = b"".join(frame(k, b) for k, b in frames)
    s = FrameSplitter(max_frame_bytes=1024)
    got = []
    for chunk in cuts(stream, points):
        got.extend(s.feed(chunk))
    assert got == frames
    assert s.buffered == 0


def test_splitter_carries_partials_and_reports_buffered():
    s = FrameSplitter()
    data = frame(7, b"abcdef") + frame(8, b"xy")
    assert s.feed(data[:3]) == [] and s.buffered == 3
    assert s.feed(data[3:9]) == [] and s.buffered == 9
    assert s.feed(data[9:13]) == [(7, b"abcdef")] and s.buffered == 2
    assert s.feed(data[13:]) == [(8, b"xy")] and s.buffered == 0
    assert s.feed(b"") == []


@pytest.mark.parametrize("prefix", [struct.pack("<I", 0), struct.pack("<I", 65)])
def test_corrupt_frame_length_raises_and_stays_corrupt(prefix):
    s = FrameSplitter(max_frame_bytes=64)
    assert s.feed(frame(1, b"x" * 63)) == [(1, b"x" * 63)]
    with pytest.raises(CodecError, match="corrupt channel"):
        s.feed(frame(3, b"ok") + prefix + b"\x01")
    with pytest.raises(CodecError):
        s.feed(frame(3, b"ok"))


def test_splitter_limits():
    assert DEFAULT_MAX_FRAME_BYTES >= 64 * 1024 * 1024
    with pytest.raises(CodecError):
        FrameSplitter(0)
    # A limit-sized frame passes; the limit counts the type byte.
    assert FrameSplitter(5).feed(frame(9, b"1234")) == [(9, b"1234")]


# ---------------------------------------------------------------------------- encode_submit


def test_encode_submit_layout():
    f = encode_submit(2**64 - 1, 2500, "tools/call", b'{"name":"x"}')
    length, kind = struct.unpack_from("<IB", f)
    assert length == len(f) - 4 and kind == FRAME_SUBMIT
    call_id, timeout_ms, credential, mlen = struct.unpack_from("<QIIH", f, 5)
    assert (call_id, timeout_ms, credential, mlen) == (2**64 - 1, 2500, 0, 10)
    assert f[23:33] == b"tools/call" and f[33:] == b'{"name":"x"}'
    assert encode_submit(1, 0, "ping", None)[23:] == b"ping"
    # The credential slot (0, the host's own, unless given) follows the timeout.
    assert struct.unpack_from("<I", encode_submit(1, 0, "m", None, credential=2**32 - 1),
                              17)[0] == 2**32 - 1
    with pytest.raises(OverflowError):
        encode_submit(1, 0, "m", None, credential=2**32)
    # Saturating timeouts; refused negative timeouts, long methods and oversized frames.
    assert struct.unpack_from("<I", encode_submit(1, 2**40, "m", None), 13)[0] == 2**32 - 1
    with pytest.raises(CodecError):
        encode_submit(1, -1, "m", None)
    with pytest.raises(CodecError):
        encode_submit(1, 0, "m" * 70_000, None)
    with pytest.raises(CodecError, match="limit"):
        encode_submit(1, 0, "m", b"{}" * 100, max_frame_bytes=64)
    # No params validation in the parent.
    assert encode_submit(1, 0, "m", b"not json").endswith(b"not json")


# ---------------------------------------------------------------------------- stamper


def test_submits_pass_untouched_until_stamping_starts():
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr)
    assert not st_.stamping
    sub = encode_submit(5, 100, "tools/list", None)
    stdin, others = stamp(st_, sub + frame(CANCEL, struct.pack("<Q", 5)))
    assert stdin == b"" and len(corr) == 0
    assert others == [(FRAME_SUBMIT, sub[5:]), (CANCEL, struct.pack("<Q", 5))]
    with pytest.raises(CodecError):
        st_.start_stamping(b"[1]")
    assert not st_.stamping


def test_frames_come_back_in_the_order_the_parent_sent_them():
    """Issue 11, defect 7: a cancel the parent sent before a later request stays before it,
    so the worker writes notifications/cancelled before that request reaches the server."""
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr)
    st_.start_stamping(None)
    cancel = frame(CANCEL, struct.pack("<Q", 1))
    state = frame(STATE, b"{}")
    out = st_.feed(encode_submit(1, 5, "ping", None) + cancel + encode_submit(2, 5, "ping", None)
                   + encode_submit(3, 5, "ping", None) + state)
    assert [kind for kind, _ in out] == [FRAME_STAMPED, CANCEL, FRAME_STAMPED, STATE]
    assert out[0][1].count(b"\n") == 1 and out[2][1].count(b"\n") == 2
    assert b'"id":1' in out[0][1] and b'"id":2' in out[2][1] and b'"id":3' in out[2][1]


def test_a_stamper_keeping_lines_apart_hands_back_one_line_per_request():
    """For the HTTP transport, which sends each request on its own: no run to cut apart."""
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr, lines_apart=True)
    st_.start_stamping(None)
    cancel = frame(CANCEL, struct.pack("<Q", 1))
    out = st_.feed(encode_submit(1, 5, "ping", None) + cancel + encode_submit(2, 5, "ping", None)
                   + encode_submit(3, 5, "ping", None))
    assert [kind for kind, _ in out] == [FRAME_STAMPED, CANCEL, FRAME_STAMPED, FRAME_STAMPED]
    lines = [body for kind, body in out if kind == FRAME_STAMPED]
    assert [orjson.loads(line)["id"] for line in lines] == [1, 2, 3]
    assert all(line.count(b"\n") == 1 and line.endswith(b"\n") for line in lines)


def test_a_stamper_keeping_lines_apart_hands_back_each_lines_credential_slot():
    """Issue 41: a request of another slot than 0 comes back as ``FRAME_STAMPED_FOR``,
    ``u32 credential | line``, for the HTTP transport to send with that slot's header;
    slot 0 stays a plain ``FRAME_STAMPED``. A stdio stamper (runs) has no slots."""
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr, lines_apart=True)
    st_.start_stamping(None)
    out = st_.feed(encode_submit(1, 5, "ping", None)
                   + encode_submit(2, 5, "ping", None, credential=9)
                   + encode_submit(3, 5, "ping", None, credential=0))
    assert [kind for kind, _ in out] == [FRAME_STAMPED, FRAME_STAMPED_FOR, FRAME_STAMPED]
    assert struct.unpack_from("<I", out[1][1])[0] == 9
    assert orjson.loads(out[1][1][4:])["id"] == 2 and out[1][1].endswith(b"\n")
    runs = SubmitStamper(Correlator())
    runs.start_stamping(None)
    out = runs.feed(encode_submit(1, 5, "ping", None)
                    + encode_submit(2, 5, "ping", None, credential=9))
    assert [kind for kind, _ in out] == [FRAME_STAMPED]


def test_stopped_stamping_hands_submits_back():
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr)
    st_.start_stamping(None)
    st_.stop_stamping()
    sub = encode_submit(4, 5, "ping", None)
    assert st_.feed(sub) == [(FRAME_SUBMIT, sub[5:])] and len(corr) == 0


def test_a_block_of_ids_is_never_left():
    """Issue 11, defect 6 (codec half): a correlator given a block of ids hands out those
    and no other; a SUBMIT past the block is rejected, nothing registered."""
    corr: Correlator[object] = Correlator(first_id=2**32 + 1, limit=2**32 + 3)
    assert corr.ids_left == 2
    st_ = SubmitStamper(corr)
    st_.start_stamping(None)
    out = st_.feed(b"".join(encode_submit(i, 5, "ping", None) for i in (1, 2, 3)))
    assert [kind for kind, _ in out] == [FRAME_STAMPED, FRAME_SUBMIT_REJECTED]
    assert [orjson.loads(line)["id"] for line in out[0][1].splitlines()] == [2**32 + 1, 2**32 + 2]
    assert out[1][1][:8] == struct.pack("<Q", 3) and b"used up" in out[1][1]
    assert corr.ids_left == 0 and len(corr) == 2
    with pytest.raises(CodecError):
        Correlator(first_id=5, limit=5)


def test_modern_stamping_is_schema_valid_and_ids_are_monotonic():
    corr: Correlator[object] = Correlator()
    assert corr.allocate("probe") == 1  # the era probe came first
    st_ = SubmitStamper(corr)
    st_.start_stamping(META)
    calls = [
        (
            100,
            "tools/call",
            orjson.dumps({"name": "get_weather", "arguments": {"location": "Paris"}}),
        ),
        (101, "tools/list", None),
        (
            102,
            "tools/call",
            orjson.dumps({"name": "x", "_meta": {"progressToken": 3, PV: "stale"}}),
        ),
        (103, "resources/read", orjson.dumps({"uri": "file:///a"})),
    ]
    stream = b"".join(encode_submit(c, 1000, m, p) for c, m, p in calls) + frame(STATE, b"{}")
    stdin = b""
    others: list[tuple[int, bytes]] = []
    for chunk in cuts(stream, [1, 7, 30, 31, 90]):
        lines, more = stamp(st_, chunk)
        stdin += lines
        others += more
    assert others == [(STATE, b"{}")]
    lines = stdin.splitlines(keepends=True)
    assert len(lines) == 4
    ids = []
    for line, (_, method, _) in zip(lines, calls, strict=True):
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        msg = validate_message(line, MODERN)
        assert msg["method"] == method and msg["params"]["_meta"][PV] == MODERN
        ids.append(msg["id"])
    assert ids == [2, 3, 4, 5]
    assert orjson.loads(lines[2])["params"]["_meta"]["progressToken"] == 3
    assert len(corr) == 5 and all(i in corr for i in ids)
    assert corr.allocate("next") == 6


def test_legacy_stamping_writes_plain_requests():
    corr: Correlator[object] = Correlator(first_id=40)
    st_ = SubmitStamper(corr)
    st_.start_stamping(None)
    assert st_.stamping
    params = b'{ "name" : "x" }'
    stdin, others = stamp(
        st_, encode_submit(1, 5, "tools/call", params) + encode_submit(2, 5, "ping", None)
    )
    assert others == []
    assert stdin == encode_request(40, "tools/call", params) + encode_request(41, "ping", None)
    assert b"_meta" not in stdin


@pytest.mark.parametrize(
    "params", [b"[1]", b"{", b'{"a":1} x', b'{"s":"\xff"}', b"3", b'{"_meta":7}']
)
def test_rejected_submit_registers_nothing(params):
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr)
    st_.start_stamping(META)
    stdin, others = stamp(
        st_, encode_submit(77, 5, "tools/call", params) + encode_submit(78, 5, "ping", None)
    )
    assert len(others) == 1
    kind, body = others[0]
    assert kind == FRAME_SUBMIT_REJECTED == 255
    assert struct.unpack_from("<Q", body)[0] == 77 and body[8:].decode()
    assert corr.discard_call(77) is None
    # The good call after it got the first id: the rejected one consumed none.
    assert orjson.loads(stdin)["id"] == 1 and len(corr) == 1


def test_rejected_submit_for_a_pending_call_id_and_bad_heads():
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr)
    st_.start_stamping(None)
    corr.allocate_call(9)
    truncated = frame(FRAME_SUBMIT, struct.pack("<QI", 10, 1))  # no method length
    bad_method = frame(FRAME_SUBMIT, struct.pack("<QIH", 11, 1, 2) + b"\xff\xfe")
    stdin, others = stamp(st_, encode_submit(9, 1, "ping", None) + truncated + bad_method)
    assert stdin == b""
    assert [(k, struct.unpack_from("<Q", b)[0]) for k, b in others] == [
        (FRAME_SUBMIT_REJECTED, n) for n in (9, 10, 11)
    ]
    assert b"already pending" in others[0][1]
    assert len(corr) == 1


def test_stamper_corruption_raises_before_registering():
    corr: Correlator[object] = Correlator()
    st_ = SubmitStamper(corr)
    st_.start_stamping(None)
    with pytest.raises(CodecError):
        stamp(st_, encode_submit(1, 1, "ping", None) + frame(FRAME_SUBMIT, b"short"))
    assert len(corr) == 0
    with pytest.raises(CodecError):
        stamp(st_, b"")


# ---------------------------------------------------------------------------- feed_forward


def test_feed_forward_turns_forwarded_replies_into_result_frames():
    corr: Correlator[object] = Correlator()
    dec = StreamDecoder(corr)
    fut = object()
    own = corr.allocate(fut)
    r_complete, r_input, r_other, r_none, r_err = (
        corr.allocate_call(c) for c in (500, 501, 502, 503, 504)
    )
    result_complete = (
        b'{"content":[{"type":"text","text":"hi \\u00e9"}], "resultType" : "complete"}'
    )
    lines = [
        b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (r_complete, result_complete),
        response(own, {"x": 1}).rstrip(b"\n"),
        response(r_input, {"resultType": "input_required", "inputRequests": {}}).rstrip(b"\n"),
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}',
        response(r_other, {"resultType": "partial"}).rstrip(b"\n"),
        b'{"jsonrpc":"2.0","id":"srv-1","method":"ping"}',
        response(r_none, {}).rstrip(b"\n"),
        response(999, {}).rstrip(b"\n"),
        b"garbage",
        response(r_err, error=(-32602, "bad \"args\"")).rstrip(b"\n"),
    ]
    stream = b"\r\n".join(lines) + b"\n"
    # A cut inside the first reply, so it is assembled across chunks.
    frames, events = dec.feed_forward(stream[:20])
    assert (frames, events) == (b"", [])
    frames, events = dec.feed_forward(stream[20:])
    got = parse_result_frames(frames)
    assert got == [
        (500, r_complete, KIND_RESULT, RT_COMPLETE, result_complete),
        (501, r_input, KIND_RESULT, RT_INPUT_REQUIRED,
         b'{"resultType":"input_required","inputRequests":{}}'),
        (502, r_other, KIND_RESULT, RT_OTHER, b'{"resultType":"partial"}'),
        (503, r_none, KIND_RESULT, RT_ABSENT, b"{}"),
        (504, r_err, KIND_ERROR, RT_ABSENT, lines[-1]),
    ]
    # Each frame names the id its request went out with (the worker's own came first).
    assert [r[1] for r in got] == [own + n for n in range(1, 6)]
    assert [(e.kind, e.correlation) for e in events] == [
        (KIND_RESULT, CORR_MATCHED),
        (KIND_NOTIFICATION, CORR_NONE),
        (KIND_REQUEST, CORR_NONE),
        (KIND_RESULT, CORR_UNKNOWN),
        (0, CORR_NONE),
    ]
    assert events[0].token is fut and events[0].result == b'{"x":1}'
    assert events[2].id == "srv-1" and events[4].line == b"garbage"
    assert len(corr) == 0
    assert all(corr.discard_call(c) is None for c in range(500, 505))


def test_finish_forward_routes_the_unterminated_tail():
    corr: Correlator[object] = Correlator()
    dec = StreamDecoder(corr)
    rid = corr.allocate_call(1)
    line = response(rid, {"resultType": "complete"}).rstrip(b"\n")
    assert dec.feed_forward(line[:10]) == (b"", [])
    assert dec.feed_forward(line[10:]) == (b"", [])
    frames, events = dec.finish_forward()
    assert events == [] and parse_result_frames(frames) == [
        (1, rid, KIND_RESULT, RT_COMPLETE, b'{"resultType":"complete"}')]


def test_feed_forward_without_forwarded_calls_matches_feed():
    stream = b"".join([
        response(1, {"a": 1}),
        b'{"jsonrpc":"2.0","method":"m"}\n',
        b"x" * 50 + b"\n",
        response(7, error=(1, "e")),
    ])
    a_corr: Correlator[object] = Correlator()
    b_corr: Correlator[object] = Correlator()
    tok = object()
    a_corr.allocate(tok), b_corr.allocate(tok)
    plain = StreamDecoder(a_corr, max_line_bytes=40).feed(stream)
    frames, fwd = StreamDecoder(b_corr, max_line_bytes=40).feed_forward(stream)
    assert frames == b""
    key = [(e.kind, e.id, e.correlation, e.token, e.line, e.size, e.reason) for e in plain]
    assert key == [(e.kind, e.id, e.correlation, e.token, e.line, e.size, e.reason) for e in fwd]
    # No correlator at all: everything is an event.
    frames, events = StreamDecoder().feed_forward(stream)
    assert frames == b"" and len(events) == 4


def test_feed_forward_big_buffer():
    # Over the detach threshold: the same routing with the thread detached.
    corr: Correlator[object] = Correlator()
    dec = StreamDecoder(corr)
    ids = [corr.allocate_call(c) for c in range(2000)]
    stream = b"".join(response(rid, {"resultType": "complete", "pad": "p" * 40}) for rid in ids)
    assert len(stream) > 64 * 1024
    frames, events = dec.feed_forward(stream)
    assert events == []
    got = parse_result_frames(frames)
    assert [g[0] for g in got] == list(range(2000)) and {g[3] for g in got} == {RT_COMPLETE}
    assert [g[1] for g in got] == ids
    assert len(corr) == 0


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 70_000), min_size=1, max_size=6),
       points=st.lists(st.integers(0, 500_000), max_size=8))
def test_feed_forward_frames_are_the_same_however_the_stream_is_cut(sizes, points):
    """Replies in the read buffer and replies assembled across reads (one of 64 KiB and
    more spans several) become the same RESULT frames, in order, each written once."""
    def decoded(pieces: list[bytes]) -> list[tuple[int, int, int, int, bytes]]:
        corr: Correlator[object] = Correlator()
        dec = StreamDecoder(corr)
        ids = [corr.allocate_call(500 + n) for n in range(len(sizes))]
        out = b""
        for piece in pieces:
            frames, events = dec.feed_forward(piece)
            assert events == []
            out += frames
        frames, events = dec.finish_forward()
        assert events == [] and len(corr) == 0
        got = parse_result_frames(out + frames)
        assert [g[1] for g in got] == ids
        return got

    # A fresh correlator's ids run 1, 2, ...: every decoder below allocates the same ones.
    stream = b"".join(
        response(n + 1, {"content": [{"type": "text", "text": "é" + "w" * size}]})
        if n % 3 else response(n + 1, error=(-32000, "x" * size))
        for n, size in enumerate(sizes))
    whole = decoded([stream])
    assert decoded(cuts(stream, points)) == whole
    assert [g[0] for g in whole] == [500 + n for n in range(len(sizes))]


def test_discard_call_makes_a_late_reply_stale():
    corr: Correlator[object] = Correlator()
    dec = StreamDecoder(corr)
    rid = corr.allocate_call(42)
    assert 42 not in corr and rid in corr
    assert corr.discard_call(42) == rid
    assert corr.discard_call(42) is None
    frames, events = dec.feed_forward(response(rid, {}))
    assert frames == b""
    assert [(e.correlation, e.token) for e in events] == [(CORR_STALE, None)]


def test_forwarded_tokens_read_as_call_ids_elsewhere():
    corr: Correlator[object] = Correlator()
    a = corr.allocate_call(10)
    obj = object()
    b = corr.allocate(obj)
    c = corr.allocate_call(11)
    d = corr.allocate_call(12)
    assert corr.resolve(a) == (CORR_MATCHED, 10)
    assert corr.discard(d) == 12 and corr.discard_call(12) is None
    ev = StreamDecoder(corr).feed(response(c, {}))  # plain feed: an event with the call id
    assert (ev[0].correlation, ev[0].token) == (CORR_MATCHED, 11)
    e = corr.allocate_call(13)
    assert corr.drain() == [(b, obj), (e, 13)]
    assert corr.discard_call(13) is None and len(corr) == 0
    corr.allocate_call(14)
    with pytest.raises(CodecError, match="already pending"):
        corr.allocate_call(14)


# ---------------------------------------------------------------------------- demux


def result_frame(call_id: int, kind: int, rt: int, payload: bytes, request_id: int = 7) -> bytes:
    return frame(FRAME_RESULT, struct.pack("<QqBB", call_id, request_id, kind, rt) + payload)


def test_demux_resolves_tokens_and_counts_stale_and_unknown():
    calls: Correlator[object] = Correlator()
    t1, t2, t3 = object(), object(), object()
    c1, c2, c3 = calls.allocate(t1), calls.allocate(t2), calls.allocate(t3)
    assert calls.discard(c3) is t3
    demux = ResultDemux(calls)
    stream = b"".join(
        [
            result_frame(c1, KIND_RESULT, RT_COMPLETE, b'{"a":1}', request_id=41),
            frame(STATE, b'{"state":"ready"}'),
            result_frame(
                c2,
                KIND_ERROR,
                RT_ABSENT,
                b'{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}',
                request_id=2,
            ),
            result_frame(c3, KIND_RESULT, RT_ABSENT, b"{}"),  # discarded: stale
            result_frame(c1, KIND_RESULT, RT_ABSENT, b"{}"),  # twice: stale
            result_frame(999, KIND_RESULT, RT_ABSENT, b"{}"),  # never allocated
            result_frame(2**64 - 1, KIND_RESULT, RT_ABSENT, b"{}"),
        ]
    )
    resolved, others = [], []
    for chunk in cuts(stream, list(range(0, len(stream), 7))):
        r, o = demux.feed(chunk)
        resolved += r
        others += o
    assert resolved == [
        (t1, KIND_RESULT, RT_COMPLETE, b'{"a":1}', 41),
        (
            t2,
            KIND_ERROR,
            RT_ABSENT,
            b'{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}',
            2,
        ),
    ]
    assert resolved[0][0] is t1
    assert others == [(STATE, b'{"state":"ready"}')]
    assert (demux.stale, demux.unknown) == (2, 2)
    assert len(calls) == 0 and demux.buffered == 0


def test_demux_corruption_resolves_nothing():
    calls: Correlator[object] = Correlator()
    tok = object()
    c = calls.allocate(tok)
    demux = ResultDemux(calls)
    with pytest.raises(CodecError):
        demux.feed(result_frame(c, KIND_RESULT, RT_ABSENT, b"{}") + frame(FRAME_RESULT, b"short"))
    assert calls.drain() == [(c, tok)]
    with pytest.raises(CodecError):
        ResultDemux(Correlator(), max_frame_bytes=16).feed(
            result_frame(1, KIND_RESULT, 0, b"x" * 10)
        )


# ---------------------------------------------------------------------------- end to end


def fake_server(stdin: bytes) -> bytes:
    """Answer every request: tools/call with a result (resultType cycling), ping with an
    error, interleaved with a notification."""
    out = []
    for line in stdin.splitlines():
        msg = orjson.loads(line)
        rid = msg["id"]
        if msg["method"] == "ping":
            out.append(encode_error(rid, -32601, f"no ping {rid}"))
            continue
        n = msg["params"]["arguments"]["n"]
        rt = [None, "complete", "input_required", "odd"][n % 4]
        result = {"content": [{"type": "text", "text": str(n)}]} | (
            {} if rt is None else {"resultType": rt}
        )
        out.append(encode_result(rid, orjson.dumps(result)))
        if n % 5 == 0:
            out.append(
                b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"n":%d}}\n' % n
            )
    return b"".join(out)


@pytest.mark.parametrize("modern", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_end_to_end_round_trip(modern, seed):
    rng = random.Random(seed)
    n = 300
    # Parent: one correlator of futures (plain objects here), SUBMIT frames.
    calls: Correlator[object] = Correlator()
    demux = ResultDemux(calls)
    tokens = {}
    channel = b""
    for i in range(n):
        tok = object()
        call_id = calls.allocate(tok)
        tokens[call_id] = (tok, i)
        if i % 7 == 3:
            channel += encode_submit(call_id, 1000, "ping", None)
        else:
            channel += encode_submit(
                call_id, 1000, "tools/call", orjson.dumps({"name": "t", "arguments": {"n": i}})
            )
    # Worker: one correlator shared by the stamper and the decoder.
    wcorr: Correlator[object] = Correlator()
    stamper = SubmitStamper(wcorr)
    decoder = StreamDecoder(wcorr)
    stamper.start_stamping(META if modern else None)
    stdin = b""
    for chunk in cuts(channel, [rng.randrange(len(channel)) for _ in range(40)]):
        lines, others = stamp(stamper, chunk)
        assert others == []
        stdin += lines
    assert len(wcorr) == n
    if modern:
        # (ping has no modern schema entry; the fake server answers it with an error.)
        for line in [ln for ln in stdin.splitlines(keepends=True) if b'"tools/call"' in ln][:5]:
            assert validate_message(line, MODERN)["params"]["_meta"][PV] == MODERN
    server_out = fake_server(stdin)
    back = b""
    notes = 0
    for chunk in cuts(server_out, [rng.randrange(len(server_out)) for _ in range(40)]):
        frames, events = decoder.feed_forward(chunk)
        back += frames
        assert all(e.kind == KIND_NOTIFICATION for e in events)
        notes += len(events)
    frames, events = decoder.finish_forward()
    assert frames == b"" and events == []
    assert notes == len(range(0, n, 5)) - len([i for i in range(0, n, 5) if i % 7 == 3])
    assert len(wcorr) == 0
    # Parent again.
    seen = []
    for chunk in cuts(back, [rng.randrange(len(back)) for _ in range(40)]):
        resolved, others = demux.feed(chunk)
        assert others == []
        seen += resolved
    assert len(seen) == n and len(calls) == 0 and (demux.stale, demux.unknown) == (0, 0)
    by_token = {id(tok): i for tok, i in tokens.values()}
    assert sorted(by_token[id(t)] for t, *_ in seen) == list(range(n))
    for tok, kind, rt, payload, _request_id in seen:
        i = by_token[id(tok)]
        if i % 7 == 3:
            assert kind == KIND_ERROR and rt == RT_ABSENT
            assert orjson.loads(payload)["error"]["message"].startswith("no ping ")
        else:
            assert kind == KIND_RESULT
            assert rt == [RT_ABSENT, RT_COMPLETE, RT_INPUT_REQUIRED, RT_OTHER][i % 4]
            assert orjson.loads(payload)["content"][0]["text"] == str(i)
