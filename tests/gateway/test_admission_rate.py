"""How often each client may start requests behind ``trunkline serve`` (``client_rate``,
``client_burst``: ``gateway/admission.py``, rule 2): a token bucket per client, so that
one runaway agent cannot take the servers' time from the others (issue 40, item 5).
Beyond its rate a client is refused at once, naming its rate and when its bucket has a
token again (HTTP: 429 with ``Retry-After``; stdio: the JSON-RPC error), and every other
client is served as before. The buckets on a fake clock, then the real gateway."""

from __future__ import annotations

import math
from typing import Any

import aiohttp
import orjson
import pytest

import realpeers
from conftest import run
from gateways import JSON_ONLY, HttpGateway, StdioGateway, fleet_config, real_server
from mcp_schema import LEGACY, MODERN, conforms
from trunkline.gateway.admission import Admission, ClientRates, retry_after
from trunkline.gateway.http_rules import status_for


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def gate_with(clock: Clock, **bounds: Any) -> Admission:
    return Admission(total=1_000_000, per_server=1_000_000, client_calls=1_000_000,
                     client_server_share=1.0, clock=clock, **bounds)


def call(gate: Admission, client: Any, server: str | None = "a") -> dict[str, Any] | None:
    """One request of ``client``'s, admitted and ended at once (so that only the rate can
    refuse it): None, or its refusal."""
    ticket = object()
    refusal = gate.enter(server, client, ticket)
    if refusal is None:
        gate.leave(server, client, ticket)
    return refusal


def test_a_client_starts_its_burst_at_once_then_is_refused_until_its_bucket_refills():
    clock = Clock()
    gate = gate_with(clock, client_rate=2.0, client_burst=3)
    hog = object()
    assert [call(gate, hog) for _ in range(3)] == [None, None, None]
    over = call(gate, hog)
    assert over is not None
    assert over["data"] == {"kind": "Overloaded", "scope": "client", "limit": 2.0,
                            "budget": "client_rate", "retryAfterS": 1}
    assert status_for(over) == 429 and retry_after(over) == 1
    message = over["message"]
    assert "this client" in message and "client_rate 2" in message and \
        "client_burst 3" in message, message
    # Refused, it took nothing: a token comes back every half second, one at a time.
    clock.now += 0.4
    assert call(gate, hog)["data"]["budget"] == "client_rate"
    clock.now += 0.1
    assert call(gate, hog) is None
    assert call(gate, hog) is not None
    # Idle long enough, the bucket is full again, never fuller: three, then refused.
    clock.now += 60.0
    assert [call(gate, hog) for _ in range(3)] == [None, None, None]
    assert call(gate, hog) is not None


def test_the_retry_after_is_the_whole_seconds_until_a_token_is_back():
    clock = Clock()
    rates = ClientRates(0.1, 1)  # one request every 10 s
    assert rates.take("c", clock.now) == 0.0
    for elapsed in (0.0, 2.5, 4.0, 9.5):
        clock.now = 1000.0 + elapsed
        wait = rates.take("c", clock.now)
        assert wait == pytest.approx(10.0 - elapsed, abs=0.01)
        told = rates.refusal(wait)["data"]["retryAfterS"]
        assert told == max(1, math.ceil(10.0 - elapsed))
        # Honest: a second before it is still too early; at it, a token is there.
        if told > 1:
            assert rates.take("c", clock.now + told - 1) > 0
    clock.now = 1000.0 + 9.5
    told = rates.refusal(rates.take("c", clock.now))["data"]["retryAfterS"]
    assert told == 1
    assert rates.take("c", clock.now + told) == 0.0


@pytest.mark.parametrize("rate", [3.0, 7.0, 10.0, 1 / 3])
def test_rounding_never_refuses_a_token_the_bucket_holds(rate):
    # Intervals that are no binary fraction, summed at a clock far from 0.
    clock = Clock(12345.678)
    rates = ClientRates(rate, 5)
    assert [rates.take("c", clock.now) for _ in range(5)] == [0.0] * 5
    assert rates.take("c", clock.now) > 0
    for _ in range(100):  # then one every interval, exactly on time
        clock.now += 1 / rate
        assert rates.take("c", clock.now) == 0.0
        assert rates.take("c", clock.now) > 0


def test_one_clients_refusal_never_touches_anothers_bucket():
    clock = Clock()
    gate = gate_with(clock, client_rate=1.0, client_burst=2)
    hog, other = object(), object()
    assert call(gate, hog) is None and call(gate, hog) is None
    for _ in range(50):
        assert call(gate, hog) is not None
    assert call(gate, other) is None and call(gate, other) is None
    assert call(gate, other) is not None
    # No client (a request no face names a client for) has no bucket.
    assert all(call(gate, None) is None for _ in range(50))


def test_without_a_rate_a_client_is_never_refused_for_its_rate_and_holds_nothing():
    clock = Clock()
    gate = gate_with(clock)  # the default: client_rate 0
    assert gate.rates is None
    assert all(call(gate, "c") is None for _ in range(10_000))
    assert gate_with(clock, client_rate=0.0).rates is None


def test_a_request_refused_for_a_busy_server_or_gateway_gives_its_token_back():
    clock = Clock()
    gate = Admission(total=2, per_server=1, client_rate=0.01, client_burst=1, clock=clock)
    hog, other = object(), object()
    assert gate.enter("a", other, "o1") is None
    # Its one token in 100 s is not spent on a request that was never admitted.
    busy = gate.enter("a", hog, "h1")
    assert busy["data"]["scope"] == "server"
    assert gate.enter(None) is None
    assert gate.enter("b", hog, "h1")["data"]["scope"] == "gateway"
    gate.leave("a", other, "o1"), gate.leave(None)
    assert gate.enter("a", hog, "h1") is None
    gate.leave("a", hog, "h1")
    assert gate.enter("a", hog, "h2")["data"]["budget"] == "client_rate"
    assert gate.in_flight == 0


def test_a_request_refused_for_calls_in_flight_takes_no_token():
    clock = Clock()
    gate = gate_with(clock, client_rate=0.01, client_burst=2)
    gate.client_calls = 1
    assert gate.enter("a", "c", "t1") is None
    for _ in range(5):
        assert gate.enter("a", "c", "t2")["data"]["budget"] == "client_calls"
    gate.leave("a", "c", "t1")
    assert gate.enter("a", "c", "t2") is None, "its second token was still there"


def test_a_bucket_full_again_is_dropped_so_many_clients_hold_a_bounded_few():
    # Rate 5, burst 10: a bucket is full again at most 2 s after it was last taken from.
    clock = Clock()
    gate = gate_with(clock, client_rate=5.0, client_burst=10)
    rates = gate.rates
    assert rates is not None
    most = 0
    for n in range(100_000):  # 100,000 clients, one request each, 1 ms apart
        clock.now += 0.001
        assert call(gate, ("client", n)) is None
        most = max(most, len(rates))
    assert most <= 2_001, most  # those of the last 2 s at most
    # All at once, none full again yet: each is kept, until they are.
    for n in range(100_000):
        assert call(gate, ("again", n)) is None
    assert len(rates) >= 100_000
    clock.now += 2.0
    assert call(gate, "late") is None
    assert len(rates) == 1


def test_a_buckets_size_is_two_seconds_of_its_rate_unless_given():
    assert (ClientRates(5.0).burst, ClientRates(0.1).burst, ClientRates(0.7).burst) == \
        (10, 1, 2)
    assert ClientRates(5.0, 3).burst == 3
    for rate, burst in ((-1.0, None), (math.nan, None), (math.inf, None), (1.0, 0),
                        (1.0, 2.5)):
        with pytest.raises(ValueError):
            ClientRates(rate, burst)  # type: ignore[arg-type]


# -- through the gateway ---------------------------------------------------------------

#: Two requests at once, then one every 100 s: a test never earns a token back.
SLOW_RATE = ("--limit", "client_rate=0.01", "--limit", "client_burst=2")
ECHO = {"name": "echo", "arguments": {"text": "hi"}}


def refused_for_rate(answer: dict[str, Any], headers: Any) -> None:
    error = answer["error"]
    data = error["data"]
    assert {k: v for k, v in data.items() if k != "retryAfterS"} == {
        "kind": "Overloaded", "scope": "client", "budget": "client_rate", "limit": 0.01}
    assert "client_rate" in error["message"] and "this client" in error["message"]
    # Its next token is 100 s after its bucket was last full, less the time since.
    assert headers["Retry-After"] == str(data["retryAfterS"])
    assert 1 < data["retryAfterS"] <= 100, data


def test_a_client_over_its_rate_gets_429_and_every_other_client_is_served(gateways,
                                                                        tmp_path):
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    path = fleet_config(tmp_path, {"py": real_server(server)})

    async def main():
        gw = await HttpGateway.start(path, gateways, *SLOW_RATE)
        hog, _ = await gw.legacy_session()
        for _ in range(2):
            status, answer, _ = await gw.post(gw.message("tools/call", ECHO), hog)
            assert status == 200 and "result" in answer, answer
        for accept in ("application/json, text/event-stream", JSON_ONLY):
            status, answer, got = await gw.post(gw.message("tools/call", ECHO),
                                                {**hog, "Accept": accept})
            assert status == 429, (status, answer)
            refused_for_rate(answer, got)
            conforms(answer, LEGACY, "JSONRPCErrorResponse")
        # Another session has a bucket of its own, full.
        other, _ = await gw.legacy_session()
        for _ in range(2):
            status, answer, _ = await gw.post(gw.message("tools/call", ECHO), other)
            assert status == 200 and "result" in answer, answer
        # A modern client (one connection) too: its two, then refused; a client on
        # another connection is still served.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
            for expected in (200, 200, 429):
                message = gw.message("tools/call", {**ECHO, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {}}})
                async with http.post(gw.url, data=orjson.dumps(message),
                                     headers=gw.modern_headers(message, JSON_ONLY)) as r:
                    status, answer, got = r.status, await r.json(), r.headers
                assert status == expected, (status, answer)
            refused_for_rate(answer, got)
            conforms(answer, MODERN, "JSONRPCErrorResponse")
        status, answer = await gw.modern("tools/call", ECHO)
        assert status == 200 and "result" in answer, answer
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_the_stdio_client_over_its_rate_gets_the_json_rpc_error(gateways, tmp_path):
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    path = fleet_config(tmp_path, {"py": real_server(server)})

    async def main():
        # client_burst unset: two seconds of 0.01 a second, so one.
        gw = await StdioGateway.start(path, gateways, "--limit", "client_rate=0.01")
        await gw.call("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                     "clientInfo": {"name": "old", "version": "1"}})
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        answer = await gw.call("tools/call", ECHO)
        assert "result" in answer, answer
        refused = await gw.call("tools/call", ECHO)
        data = refused["error"]["data"]
        assert (data["scope"], data["budget"], data["limit"]) == ("client", "client_rate", 0.01)
        assert 1 < data["retryAfterS"] <= 100 and "client_burst 1" in refused["error"]["message"]
        conforms(refused, LEGACY, "JSONRPCErrorResponse")
        # What needs nothing behind the gateway is never counted: the client still lists.
        listed = await gw.call("tools/list", {})
        assert "result" in listed, listed
        assert await gw.close() == 0
    run(main(), timeout=120)
