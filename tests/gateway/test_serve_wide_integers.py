"""Integers beyond 64 bits in a downstream request (issue 36, finding 10): never rounded
on their way upstream. ``trunkline serve`` over ``--http`` and ``--stdio`` refuses a
request holding one with -32602 naming its place; a float of any size, a string of any
digits and the largest integers 64 bits keep pass as they came, as the upstream's wire tap
shows."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import taplog

from conftest import run, scripted
from gateways import HttpGateway, StdioGateway, fleet_config, modern_meta

WIDE = b"100000000000000000000000000000"  # 10**29: 30 digits


def tools_call(request_id: bytes, arguments: bytes) -> bytes:
    """A 2026-07-28 ``tools/call`` of ``echo``, written out: orjson cannot write ``WIDE``."""
    return (b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"tools/call","params":'
            b'{"name":"echo","arguments":' + arguments + b',"_meta":'
            + orjson.dumps(modern_meta()) + b"}}")


async def ask(face: str, gw: Any, body: bytes) -> tuple[int | None, dict[str, Any]]:
    """Send ``body``; the HTTP status (None over stdio) and the answer."""
    if face == "stdio":
        gw.send(body + b"\n")
        return None, await gw.answer()
    headers = HttpGateway.modern_headers({"method": "tools/call", "params": {"name": "echo"}})
    status, answer, _ = await gw.post(body, headers)
    return status, answer


async def exchanges(face: str, gw: Any) -> None:
    """A wide integer refused by its place, then what 64 bits keep answered."""
    status, refused = await ask(face, gw, tools_call(
        b"1", b'{"f":1e30,"list":[1,{"n":' + WIDE + b"}]}"))
    assert refused["id"] == 1 and refused["error"]["code"] == -32602, refused
    assert refused["error"]["message"].startswith(
        "arguments.list[1].n: an integer beyond 64 bits (30 digits)"), refused
    assert refused["error"]["data"] == {"path": "arguments.list[1].n"}
    assert status in (None, 400)
    # The request's own id that wide: -32600, answered without an id (it cannot be read).
    status, no_id = await ask(face, gw, tools_call(WIDE, b"{}"))
    assert "id" not in no_id and no_id["error"]["code"] == -32600, no_id
    assert no_id["error"]["message"].startswith("id: an integer beyond 64 bits"), no_id
    # What 64 bits keep, a float of any size and digits in a string go as they came.
    edge = (b'{"f":1e30,"u":18446744073709551615,"i":-9223372036854775808,"s":"'
            + WIDE + b'"}')
    status, answered = await ask(face, gw, tools_call(b"2", edge))
    assert answered["id"] == 2 and status in (None, 200), answered
    echoed = json.loads(answered["result"]["content"][0]["text"])
    assert echoed == {"f": 1e30, "u": 2**64 - 1, "i": -(2**63), "s": WIDE.decode()}


@pytest.mark.parametrize("face", ["http", "stdio"])
def test_an_integer_beyond_64_bits_is_refused_by_its_place_and_the_rest_passes(
        face, gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted(tap=tap)})
    async def main():
        gw = await (HttpGateway.start(path, gateways) if face == "http"
                    else StdioGateway.start(path, gateways))
        try:
            await exchanges(face, gw)
        finally:
            ended = await (gw.stop() if face == "http" else gw.close())
        assert ended == 0
    run(main())
    calls = [m for m in taplog.messages(tap) if m.get("method") == "tools/call"]
    # Only the answered call went upstream, its numbers exact: the float a float.
    assert len(calls) == 1, calls
    arguments = calls[0]["params"]["arguments"]
    assert arguments == {"f": 1e30, "u": 2**64 - 1, "i": -(2**63), "s": WIDE.decode()}
    assert isinstance(arguments["f"], float)
