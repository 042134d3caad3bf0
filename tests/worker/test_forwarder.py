"""The worker's hot path alone: SUBMIT frames stamped into request lines, cancels and
expired deadlines told to the server, failures reported to the parent as FAILURE frames."""

from __future__ import annotations

import asyncio

import orjson

from conftest import run
from trunkline import channel as ch
from trunkline._codec import FRAME_STAMPED, Correlator, FrameSplitter, encode_submit
from trunkline.errors import MalformedMessage, RequestTimeout
from trunkline.worker.forwarding import Forwarder


class Harness:
    def __init__(self) -> None:
        self.correlator: Correlator = Correlator()
        self.to_server: list[bytes] = []
        self.cancelled: list[tuple[int, str]] = []
        self.to_parent = FrameSplitter()
        self.failures: list[tuple[int, object]] = []
        self.forwarder = Forwarder(
            self.correlator, write=self.to_server.append, to_parent=self._parent,
            cancel=lambda rid, why: self.cancelled.append((rid, why)),
            max_frame_bytes=1 << 20)

    def _parent(self, data: bytes) -> None:
        for kind, body in self.to_parent.feed(data):
            assert kind == ch.FAILURE
            self.failures.append(ch.Failure.from_bytes(body))

    def apply(self, chunk: bytes) -> list[int]:
        """What the worker does with a chunk; the frame types it saw, in order."""
        kinds = []
        for kind, body in self.forwarder.feed(chunk):
            kinds.append(kind)
            if kind == FRAME_STAMPED:
                self.forwarder.write_stamped(body)
            elif kind == ch.CANCEL:
                self.forwarder.cancel(ch.cancel_from_bytes(body), "cancelled by the caller")
        return kinds


def test_submits_become_requests_and_cancels_reach_the_server_in_order():
    async def main():
        h = Harness()
        h.forwarder.start_stamping(None)
        kinds = h.apply(encode_submit(1, 0, "tools/call", b'{"name":"a"}')
                        + ch.cancel_frame(1) + encode_submit(2, 0, "tools/list", None))
        assert kinds == [FRAME_STAMPED, ch.CANCEL, FRAME_STAMPED]
        sent = [orjson.loads(line) for chunk in h.to_server for line in chunk.splitlines()]
        assert [m["method"] for m in sent] == ["tools/call", "tools/list"]
        assert h.cancelled == [(sent[0]["id"], "cancelled by the caller")]
        assert h.forwarder.cancel(1, "again") is False, "a call is cancelled once"
    run(main())


def test_an_expired_call_is_cancelled_at_the_server_and_failed_to_the_parent():
    async def main():
        h = Harness()
        h.forwarder.start_stamping(None)
        h.apply(encode_submit(7, 20, "tools/call", b'{"name":"slow"}'))
        await asyncio.sleep(0.2)
        (request_id, why), = h.cancelled
        assert why == "timeout" and request_id == orjson.loads(h.to_server[0])["id"]
        (call_id, error), = h.failures
        assert call_id == 7 and isinstance(error, RequestTimeout)
        assert "enforced by the worker" in error.message
    run(main())


def test_a_failed_call_goes_to_the_parent_typed():
    async def main():
        h = Harness()
        h.forwarder.fail(9, MalformedMessage("bad", sent=False))
        (call_id, error), = h.failures
        assert call_id == 9 and isinstance(error, MalformedMessage) and error.sent is False
    run(main())


def test_once_stamping_stops_submits_come_back_unsent():
    async def main():
        h = Harness()
        h.forwarder.start_stamping(None)
        h.forwarder.stop_stamping()
        assert h.apply(encode_submit(3, 0, "ping", None)) == [ch.SUBMIT]
        assert h.to_server == [] and len(h.correlator) == 0
    run(main())
