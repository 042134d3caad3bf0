"""The negotiation driver alone: probes written, deadlines enforced from the write, answers
fed back, the outcome settled; no process, a correlator and a list of written lines."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from conftest import run
from mcp_schema import LEGACY, MODERN, validate_message
from trunkline._codec import Correlator, StreamDecoder
from trunkline.errors import EraRefused
from trunkline.protocol.era import Era, NegotiationConfig
from trunkline.protocol.identity import ClientIdentity
from trunkline.worker.era import Negotiator, ProbeToken

DISCOVER_OK = {"resultType": "complete", "supportedVersions": [MODERN],
               "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "public"}
INIT_OK = {"protocolVersion": LEGACY, "capabilities": {},
           "serverInfo": {"name": "old", "version": "1"}}


class Wire:
    """A negotiator over a correlator, with the lines it wrote and what it concluded."""

    def __init__(self, **config) -> None:
        self.correlator: Correlator = Correlator()
        self.decoder = StreamDecoder(self.correlator)
        self.lines: list[dict] = []
        self.verdicts: list = []
        self.renegotiations: list[str] = []
        self.negotiator = Negotiator(
            NegotiationConfig(**config), ClientIdentity(), server="s",
            correlator=self.correlator, write=lambda b: self.lines.append(orjson.loads(b)),
            on_verdict=self.verdicts.append, on_renegotiate=self.renegotiations.append)

    def methods(self) -> list[str]:
        return [line.get("method", "<response>") for line in self.lines]

    def answer(self, method: str, **body) -> None:
        """The server answers the latest request of ``method``."""
        request = next(line for line in reversed(self.lines) if line.get("method") == method)
        data = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], **body}) + b"\n"
        for event in self.decoder.feed(data):
            assert isinstance(event.token, ProbeToken), "the answer matched a probe"
            self.negotiator.on_reply(event.token.probe, event)


def test_a_discover_result_settles_a_modern_verdict():
    async def main():
        wire = Wire()
        wire.negotiator.start()
        assert wire.methods() == ["server/discover"]
        validate_message(wire.lines[0], MODERN)
        wire.answer("server/discover", result=DISCOVER_OK)
        verdict = await wire.negotiator.outcome
        assert verdict.era is Era.MODERN and wire.verdicts == [verdict]
        assert len(wire.correlator) == 0, "no probe left pending"
    run(main())


def test_the_deadline_counts_from_the_write_and_silence_refuses_for_now():
    async def main():
        wire = Wire(discover_timeout_s=0.05)
        wire.negotiator.start()
        with pytest.raises(EraRefused) as info:
            await asyncio.wait_for(wire.negotiator.outcome, 5)
        assert info.value.retry_later and not info.value.renegotiate
        assert wire.methods() == ["server/discover"]
    run(main())


def test_a_late_discover_answer_then_a_refused_initialize_is_modern():
    async def main():
        wire = Wire(allow_legacy=True, discover_timeout_s=0.05, legacy_probe_timeout_s=5)
        wire.negotiator.start()
        await asyncio.sleep(0.2)  # the discover deadline passed: the one initialize went out
        assert wire.methods() == ["server/discover", "initialize"]
        validate_message(wire.lines[1], LEGACY)
        wire.answer("server/discover", result=DISCOVER_OK)  # still pending: it counts
        assert not wire.negotiator.outcome.done(), "waits for the initialize's fate"
        wire.answer("initialize", error={"code": -32601, "message": "Method not found"})
        assert (await wire.negotiator.outcome).era is Era.MODERN
        assert "notifications/initialized" not in wire.methods()
    run(main())


def test_a_late_discover_answer_after_a_legacy_verdict_renegotiates():
    async def main():
        wire = Wire(allow_legacy=True, discover_timeout_s=0.05, legacy_probe_timeout_s=5)
        wire.negotiator.start()
        await asyncio.sleep(0.2)
        wire.answer("initialize", result=INIT_OK)
        assert (await wire.negotiator.outcome).era is Era.LEGACY
        assert wire.methods()[-1] == "notifications/initialized"
        assert len(wire.correlator) == 1, "the unanswered discover stays pending"
        wire.answer("server/discover", result=DISCOVER_OK)
        assert len(wire.renegotiations) == 1 and "two sessions" in wire.renegotiations[0]
        assert wire.negotiator.proven_modern
    run(main())


async def _stopped_while_negotiating(wire: Wire) -> None:
    """What a worker stopped mid-negotiation does: ``Peer.start`` awaits the outcome in
    the worker's main task, and cancelling that task cancels the outcome with it."""
    async def start() -> None:
        await wire.negotiator.outcome
    waiter = asyncio.ensure_future(start())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.wait([waiter])
    assert wire.negotiator.outcome.cancelled()


@pytest.mark.parametrize("then", ["closes", "answers", "stays silent"])
def test_a_negotiation_abandoned_by_its_waiter_settles_nothing_more(then):
    """The connection goes on reporting after the worker stopped waiting (its stop ladder
    closes the server's stdin, the server may answer or exit meanwhile, a deadline may
    pass): none of it decides anything on the abandoned negotiation, and nothing settles
    its outcome a second time."""
    async def main():
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        wire = Wire(discover_timeout_s=0.05)
        wire.negotiator.start()
        await _stopped_while_negotiating(wire)
        if then == "closes":
            wire.negotiator.on_closed("transport closed by the client")
        elif then == "answers":
            wire.answer("server/discover", result=DISCOVER_OK)
        await asyncio.sleep(0.2)  # past the discover deadline
        assert errors == [], errors
        assert wire.negotiator.outcome.cancelled() and wire.verdicts == []
        assert wire.methods() == ["server/discover"], "nothing more was sent"
    run(main())
