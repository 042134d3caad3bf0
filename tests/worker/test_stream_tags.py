"""A log message's way from an HTTP response stream to the parent: the transport tags it
with its request's progress token, the router moves the tag into ``Notice.stream``, and a
tag the server wrote itself never survives (it could otherwise aim its message at another
of its calls, or at none)."""

from __future__ import annotations

import orjson

from trunkline._codec import KIND_REQUEST
from trunkline.protocol.header_plan import Outgoing
from trunkline.worker.notices import _notice
from trunkline.worker.transports import STREAM_TAG
from trunkline.worker.transports.http import _from_stream


def _request(meta: dict | None) -> Outgoing:
    params = {"name": "t", "arguments": {}, **({"_meta": meta} if meta else {})}
    line = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    return Outgoing(line, KIND_REQUEST, 7, "tools/call", params)


def _log(meta: dict | None = None) -> bytes:
    params = {"level": "info", "data": "x", **({"_meta": meta} if meta is not None else {})}
    return orjson.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                         "params": params}) + b"\n"


def _through(line: bytes, out: Outgoing):
    return _notice(orjson.loads(_from_stream(line, out))["params"])


def test_a_log_on_a_tokened_requests_stream_names_that_token():
    notice = _through(_log(), _request({"progressToken": "tl-3"}))
    assert notice.stream == "tl-3"
    assert notice.params == {"level": "info", "data": "x"}


def test_the_servers_own_meta_stays_and_its_forged_tag_goes():
    forged = {STREAM_TAG: "tl-9", "trace": "abc"}
    tokened = _through(_log(forged), _request({"progressToken": "tl-3"}))
    assert tokened.stream == "tl-3"
    assert tokened.params == {"level": "info", "data": "x", "_meta": {"trace": "abc"}}
    untokened = _through(_log({STREAM_TAG: "tl-9"}), _request(None))
    assert untokened.stream is None
    assert untokened.params == {"level": "info", "data": "x"}


def test_a_log_that_came_on_no_stream_is_nobodys():
    notice = _notice({"level": "warning", "data": "y"})
    assert notice.stream is None


def test_on_stdio_a_tag_can_only_be_the_servers_and_is_dropped():
    from types import SimpleNamespace

    from trunkline import channel as ch
    from trunkline.protocol.era import Era
    from trunkline.worker.notices import NotificationRouter

    sent: list[bytes] = []
    for streamed, expected in ((False, None), (True, "tl-1")):
        sent.clear()
        router = NotificationRouter(SimpleNamespace(era=Era.MODERN), {}, sent.append,
                                    streamed=streamed)
        router.on_notification("notifications/message", _log({STREAM_TAG: "tl-1"}))
        (frame,) = sent
        notice = ch.Notice.from_bytes(frame[5:])  # u32 length, u8 kind, then the body
        assert notice.stream == expected
        assert notice.params == {"level": "info", "data": "x"}
