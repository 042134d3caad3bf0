"""A ``tools/call`` result is passed on as the bytes it came in (``gateway.protocol``, rule
7): through ``trunkline serve`` over HTTP and stdio, a client of either era gets the
upstream's result exactly as written (here with an escape, ``\\u00e9``, and a space, both
of which encoding it again would change), with ``resultType`` added for a modern client;
a result that must change more (the protocol's own ``_meta``) is encoded anew. The
upstream is the scripted peer answering with a line of its own (``raw:``): no real server
writes a result otherwise than its encoder would, which is what shows the difference."""

from __future__ import annotations

from pathlib import Path

import orjson

from conftest import run, scripted
from gateways import BOTH, JSON_ONLY, HttpGateway, StdioGateway, fleet_config, modern_meta
from trunkline.gateway import protocol as p

#: The upstream's result, as it writes it.
WRITTEN = b'{"content":[{"type":"text","text":"\\u00e9"}], "isError": false}'
#: The same with the protocol's own ``_meta`` (the hop's server info), which stays behind.
WITH_HOP = (b'{"content":[{"type":"text","text":"\\u00e9"}], "_meta": '
            b'{"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}}}')


def _config(tmp_path: Path, result: bytes) -> Path:
    line = b'{"jsonrpc":"2.0","id":$ID,"result":' + result + b"}"
    return fleet_config(tmp_path, {"s": scripted("--tools-call", "raw:" + line.decode())})


def _call(request_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {}, "_meta": modern_meta()}}


async def _modern_body(gw: HttpGateway, request_id: int) -> bytes:
    message = _call(request_id)
    async with gw.http.post(gw.url, data=orjson.dumps(message),
                            headers=gw.modern_headers(message, JSON_ONLY)) as response:
        body = await response.read()
    assert response.status == 200, body
    return body


def test_a_result_reaches_a_client_of_either_era_as_the_server_wrote_it(tmp_path, gateways):
    async def main():
        gw = await HttpGateway.start(_config(tmp_path, WRITTEN), gateways)
        try:
            assert await _modern_body(gw, 7) == (
                b'{"jsonrpc":"2.0","id":7,"result":' + WRITTEN[:-1]
                + b',"resultType":"complete"}}')
            headers, _ = await gw.legacy_session()
            legacy = {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {}}}
            for accept in (JSON_ONLY, BOTH):  # a JSON answer, and a resumable stream
                async with gw.http.post(gw.url, data=orjson.dumps(legacy),
                                        headers={**headers, "Accept": accept}) as response:
                    body = await response.read()
                assert response.status == 200, body
                data = body.rsplit(b"data: ", 1)[-1].rstrip() if accept == BOTH else body
                assert data == b'{"jsonrpc":"2.0","id":8,"result":' + WRITTEN + b"}"
        finally:
            await gw.stop()
    run(main())


def test_a_result_with_the_protocols_own_meta_is_encoded_anew(tmp_path, gateways):
    async def main():
        gw = await HttpGateway.start(_config(tmp_path, WITH_HOP), gateways)
        try:
            body = await _modern_body(gw, 9)
            assert orjson.loads(body)["result"] == {
                "content": [{"type": "text", "text": "\u00e9"}], "resultType": "complete"}
            assert b"\\u00e9" not in body and b"serverInfo" not in body
        finally:
            await gw.stop()
    run(main())


def test_the_stdio_face_passes_the_bytes_on_too(tmp_path, gateways):
    async def main():
        gw = await StdioGateway.start(_config(tmp_path, WRITTEN), gateways)
        try:
            gw.send(_call(10))
            assert (await gw.answer())["id"] == 10
            line = next(raw for raw in gw.raw if b'"id":10' in raw)
            assert line == (b'{"jsonrpc":"2.0","id":10,"result":' + WRITTEN[:-1]
                            + b',"resultType":"complete"}}\n')
        finally:
            await gw.close()
    run(main())


def test_what_is_passed_on_and_what_is_encoded_anew():
    raw_json = b'{"content":[],"isError":false}'
    raw = orjson.loads(raw_json)
    # A modern client: resultType added to the bytes; a legacy one: the bytes as they are.
    spliced = p.passed_on_result(raw, raw_json + b"\n", p.ClientEra.MODERN)
    assert spliced == b'{"content":[],"isError":false,"resultType":"complete"}'
    assert p.passed_on_result(raw, raw_json, p.ClientEra.LEGACY) is raw_json
    # The protocol's own _meta stays behind: encoded anew (served_result drops it).
    hop = {**raw, "_meta": {p.RESERVED_META_PREFIX + "serverInfo": {}, "x": 1}}
    assert p.passed_on_result(hop, orjson.dumps(hop), p.ClientEra.MODERN) is None
    # Not come as bytes of its own, or a resultType a legacy client must not get: anew.
    assert p.passed_on_result(raw, b"", p.ClientEra.MODERN) is None
    typed = {**raw, "resultType": "complete"}
    assert p.passed_on_result(typed, orjson.dumps(typed), p.ClientEra.LEGACY) is None
    assert p.encoded_response("a", spliced) == (b'{"jsonrpc":"2.0","id":"a","result":'
                                                + spliced + b"}")
