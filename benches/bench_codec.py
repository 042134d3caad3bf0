"""Codec benchmarks: the Rust batch path against the obvious pure-Python path.

Run: ``.venv/bin/pytest benches/bench_codec.py --benchmark-group-by=group``.
Every benchmark records ``lines`` in ``extra_info`` so per-line cost is mean / lines.

Groups:
- ``read-small`` / ``read-large``: one read buffer of many ~200 B / 64 KiB response lines,
  split + classified + correlated. Codec: ``StreamDecoder.feed`` (one call per buffer).
  Python: ``bytes.split``, ``orjson.loads`` per line, kind checks and a pending-dict pop.
- ``scan-64k-*``: one 64 KiB response line, ``scan`` vs ``orjson.loads`` (prose text with
  an escape every ~100 bytes; JSON carried as text, an escape every ~6 bytes).
- ``decode-*``: one tool result's ``result`` value, as the parent decodes it
  (``trunkline.protocol.reply.decode_result``: the codec's ``loads_text`` for long results,
  orjson when it declines) vs ``orjson.loads``: 64 KiB of ASCII text (``ascii``), of prose
  with a newline escape every ~120 bytes (``prose``), of JSON carried as text
  (``jsontext``, declined), of mostly non-ASCII text (``latin``, declined), and a 12 KiB
  ``structuredContent`` of many small values (``structured``, declined): the last three
  measure what declining costs.
- ``wide-*``: the gateway's check of a 64 KiB request body for an integer beyond 64 bits
  (``wide_integer_at``, on every body), beside ``orjson.loads`` of the same body (what the
  gateway does with every body anyway): a ``tools/call`` whose argument is prose
  (``prose``), JSON carried as text (``jsontext``), an array of integers (``numbers``),
  of floats (``floats``, an embedding: fractions of 19 digits or more, so the body is
  searched again between its strings) or a string of 19 digits in prose (``digits``:
  searched again too); none holds such an integer.
- ``stamp-small`` / ``stamp-large`` / ``stamp-large-jsontext``: one modern ``tools/call``
  line with ``_meta`` (64 KiB of prose, or of JSON carried as text, as an argument):
  ``stamp_request`` on pre-serialized params (checked strictly, as the worker must before
  writing them) vs ``orjson.dumps`` of the full request dict (which checks nothing).
"""

from __future__ import annotations

import random

import orjson
import pytest

from trunkline._codec import Correlator, StreamDecoder, scan, stamp_request, wide_integer_at
from trunkline.protocol.reply import decode_result

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "trunkline", "version": "0.1.0"},
}
META_BYTES = orjson.dumps(META)


def _prose(n: int, seed: int = 7) -> str:
    rnd = random.Random(seed)
    words = [
        "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9)))
        for _ in range(400)
    ]
    out: list[str] = []
    size = 0
    while size < n:
        w = rnd.choice(words)
        w += '.\n' if rnd.random() < 0.05 else (' "quoted"' if rnd.random() < 0.01 else "")
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _jsontext(n: int) -> str:
    rows = [
        {"id": i, "name": f"item-{i}", "tags": ["a", "b"], "score": i / 7} for i in range(n // 40)
    ]
    return orjson.dumps(rows).decode()[:n]


def _response(i: int, text: str) -> bytes:
    result = {
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "resultType": "complete",
    }
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "result": result}) + b"\n"


SMALL_TEXT = _prose(110)
LARGE_TEXT = _prose(64 * 1024 - 120)
SMALL_N, LARGE_N = 2000, 32
SMALL_BUF = b"".join(_response(i, SMALL_TEXT) for i in range(1, SMALL_N + 1))
LARGE_BUF = b"".join(_response(i, LARGE_TEXT) for i in range(1, LARGE_N + 1))


def _pending(n: int):
    c = Correlator()
    for i in range(n):
        c.allocate(i)
    return c


def _codec_read(benchmark, buf: bytes, n: int) -> None:
    def setup():
        return (StreamDecoder(_pending(n)),), {}

    def run(decoder):
        return decoder.feed(buf)

    events = benchmark.pedantic(
        run, setup=setup, rounds=60 if n == LARGE_N else 200, warmup_rounds=2
    )
    assert len(events) == n and all(e.token is not None for e in events)
    benchmark.extra_info["lines"] = n


def _python_read(benchmark, buf: bytes, n: int) -> None:
    def setup():
        return ({i + 1: i for i in range(n)},), {}

    def run(pending):
        out = []
        for line in buf.split(b"\n"):
            if not line:
                continue
            msg = orjson.loads(line)
            if "result" in msg or "error" in msg:
                out.append((msg, pending.pop(msg.get("id"), None)))
            else:
                out.append((msg, None))
        return out

    out = benchmark.pedantic(run, setup=setup, rounds=60 if n == LARGE_N else 200, warmup_rounds=2)
    assert len(out) == n and all(t is not None for _, t in out)
    benchmark.extra_info["lines"] = n


@pytest.mark.benchmark(group="read-small")
def test_read_small_codec(benchmark):
    _codec_read(benchmark, SMALL_BUF, SMALL_N)


@pytest.mark.benchmark(group="read-small")
def test_read_small_python(benchmark):
    _python_read(benchmark, SMALL_BUF, SMALL_N)


@pytest.mark.benchmark(group="read-large")
def test_read_large_codec(benchmark):
    _codec_read(benchmark, LARGE_BUF, LARGE_N)


@pytest.mark.benchmark(group="read-large")
def test_read_large_python(benchmark):
    _python_read(benchmark, LARGE_BUF, LARGE_N)


SCAN_LINES = {
    "prose": _response(1, LARGE_TEXT)[:-1],
    "jsontext": _response(1, _jsontext(64 * 1024 - 120))[:-1],
}


@pytest.mark.parametrize("text", SCAN_LINES)
def test_scan_64k_codec(benchmark, text):
    benchmark.group = f"scan-64k-{text}"
    line = SCAN_LINES[text]
    env = benchmark(scan, line)
    assert env.result_type == "complete"
    benchmark.extra_info["lines"] = 1


@pytest.mark.parametrize("text", SCAN_LINES)
def test_scan_64k_orjson(benchmark, text):
    benchmark.group = f"scan-64k-{text}"
    line = SCAN_LINES[text]
    msg = benchmark(orjson.loads, line)
    assert msg["result"]["resultType"] == "complete"
    benchmark.extra_info["lines"] = 1


def _result(text: str, **extra: object) -> bytes:
    return orjson.dumps({"content": [{"type": "text", "text": text}], "isError": False, **extra})


DECODE_RESULTS = {
    "ascii": _result("." * (64 * 1024 - 60)),
    "prose": _result(LARGE_TEXT),
    "jsontext": _result(_jsontext(64 * 1024 - 120)),
    "latin": _result("h\u00e9llo w\u00f6rld " * 5000),
    "structured": _result("x", structuredContent={
        "rows": [{"id": i, "name": f"n{i}", "v": i / 3, "ok": True} for i in range(250)]}),
}


@pytest.mark.parametrize("shape", DECODE_RESULTS)
def test_decode_codec(benchmark, shape):
    benchmark.group = f"decode-{shape}"
    raw = DECODE_RESULTS[shape]
    assert decode_result(raw) == orjson.loads(raw)
    benchmark(decode_result, raw)
    benchmark.extra_info["lines"] = 1


@pytest.mark.parametrize("shape", DECODE_RESULTS)
def test_decode_orjson(benchmark, shape):
    benchmark.group = f"decode-{shape}"
    benchmark(orjson.loads, DECODE_RESULTS[shape])
    benchmark.extra_info["lines"] = 1


def _request(arguments: dict) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                         "params": {"name": "write_file", "arguments": arguments, "_meta": META}})


_RANDOM = random.Random(5)
WIDE_BODIES = {
    "prose": _request({"content": LARGE_TEXT}),
    "jsontext": _request({"content": _jsontext(52 * 1024)}),
    "numbers": _request({"values": random.Random(3).choices(range(1_000_000), k=64 * 1024 // 7)}),
    "floats": _request({"embedding": [_RANDOM.gauss(0, 0.05) for _ in range(3100)]}),
    "digits": _request({"content": LARGE_TEXT[: 32 * 1024] + " 1234567890123456789 "
                        + LARGE_TEXT[32 * 1024:]}),
}


@pytest.mark.parametrize("body", WIDE_BODIES)
def test_wide_codec(benchmark, body):
    benchmark.group = f"wide-{body}"
    raw = WIDE_BODIES[body]
    assert 60 * 1024 < len(raw) < 70 * 1024
    assert benchmark(wide_integer_at, raw) is None
    benchmark.extra_info["lines"] = 1


@pytest.mark.parametrize("body", WIDE_BODIES)
def test_wide_orjson(benchmark, body):
    benchmark.group = f"wide-{body}"
    benchmark(orjson.loads, WIDE_BODIES[body])
    benchmark.extra_info["lines"] = 1


STAMP_PARAMS = {
    "small": {"name": "search", "arguments": {"query": "rust simd json", "limit": 10}},
    "large": {"name": "write_file", "arguments": {"path": "/tmp/x", "content": LARGE_TEXT}},
    # JSON carried as text: an escape every ~6 bytes.
    "large-jsontext": {"name": "write_file",
                       "arguments": {"path": "/tmp/x.json", "content": _jsontext(64 * 1024)}},
}


@pytest.mark.parametrize("size", STAMP_PARAMS)
def test_stamp_codec(benchmark, size):
    benchmark.group = f"stamp-{size}"
    params = orjson.dumps(STAMP_PARAMS[size])  # the parent serialized the arguments once
    line = benchmark(stamp_request, 12345, "tools/call", params, META_BYTES)
    assert orjson.loads(line)["params"]["_meta"] == META
    benchmark.extra_info["lines"] = 1


@pytest.mark.parametrize("size", STAMP_PARAMS)
def test_stamp_orjson(benchmark, size):
    benchmark.group = f"stamp-{size}"
    params = STAMP_PARAMS[size]

    def build():
        return (
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 12345,
                    "method": "tools/call",
                    "params": {**params, "_meta": META},
                }
            )
            + b"\n"
        )

    line = benchmark(build)
    assert orjson.loads(line)["params"]["_meta"] == META
    benchmark.extra_info["lines"] = 1
