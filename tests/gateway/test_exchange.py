"""The HTTP face's ASGI exchange on its own: what it reads of a request, what it sends,
and how the client's going away reaches the task handling it. (The face over a real
server and real clients is ``test_serve_http.py``.)"""

from __future__ import annotations

import asyncio

import pytest

from trunkline.gateway.exchange import Disconnected, Exchange


class Peer:
    """An ASGI server's side of one exchange: the request's events queued in order (then
    ``gone`` when told), everything sent recorded."""

    def __init__(self, *events: dict) -> None:
        self.events = asyncio.Queue()
        for event in events:
            self.events.put_nowait(event)
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        return await self.events.get()

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self.events.put_nowait({"type": "http.disconnect"})


def exchange(peer: Peer, headers=()) -> Exchange:
    return Exchange({"type": "http", "method": "POST", "path": "/mcp",
                     "headers": list(headers)}, peer.receive, peer.send)


def body(data: bytes, more: bool = False) -> dict:
    return {"type": "http.request", "body": data, "more_body": more}


def test_headers_by_lower_case_name_and_the_first_of_a_repeated_one_counts():
    ex = exchange(Peer(), [(b"accept", b"application/json"), (b"host", b"127.0.0.1:9"),
                           (b"accept", b"text/event-stream"), (b"content-length", b"12")])
    assert ex.headers == {"accept": "application/json", "host": "127.0.0.1:9",
                          "content-length": "12"}
    assert ex.content_length() == 12
    assert exchange(Peer(), [(b"content-length", b"-1")]).content_length() is None
    # The whitespace around a value is not part of it (a parser may leave what trails).
    assert exchange(Peer(), [(b"mcp-name", b" echo \t")]).headers["mcp-name"] == "echo"


def test_a_body_is_read_whole_up_to_the_limit_and_no_further():
    async def main():
        assert await exchange(Peer(body(b"abc"))).body(3) == b"abc"
        assert await exchange(Peer(body(b"abcd"))).body(3) is None
        chunks = Peer(body(b"ab", True), body(b"c", True), body(b""))
        assert await exchange(chunks).body(3) == b"abc"
        # Over the limit in its second chunk: reading stops there, the rest stays unread.
        over = Peer(body(b"ab", True), body(b"cd", True), body(b"ef"))
        assert await exchange(over).body(3) is None
        assert over.events.qsize() == 1
        gone = Peer(body(b"ab", True))
        gone.leave()
        with pytest.raises(Disconnected):
            await exchange(gone).body(10)
    asyncio.run(main())


def test_a_whole_response_says_its_length_and_type():
    async def main():
        peer = Peer()
        ex = exchange(peer)
        assert not ex.started
        await ex.respond(413, b'{"x":1}', {"Retry-After": "1"})
        assert ex.started
        start, end = peer.sent
        assert start["status"] == 413
        assert sorted(start["headers"]) == [(b"content-length", b"7"),
                                            (b"content-type", b"application/json"),
                                            (b"retry-after", b"1")]
        assert end == {"type": "http.response.body", "body": b'{"x":1}'}
        empty = Peer()
        await exchange(empty).respond(202)
        assert empty.sent[0]["headers"] == [(b"content-length", b"0")]
    asyncio.run(main())


def test_the_client_going_away_cancels_the_handling_task_and_says_so():
    async def main():
        peer = Peer(body(b"{}"))
        ex = exchange(peer)
        started = asyncio.Event()

        async def handle() -> None:
            await ex.body(10)
            ex.cancel_when_gone()
            await ex.open_stream({"Content-Type": "text/event-stream"})
            started.set()
            await asyncio.sleep(30)
        task = asyncio.ensure_future(handle())
        await started.wait()
        assert not ex.gone
        peer.leave()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ex.gone
        ex.close()
    asyncio.run(main())


def test_an_end_heard_after_the_response_is_complete_cancels_nothing():
    async def main():
        peer = Peer(body(b"{}"))
        ex = exchange(peer)

        async def handle() -> str:
            await ex.body(10)
            ex.cancel_when_gone()
            await ex.respond(200, b"{}")
            peer.leave()  # the server reports the exchange over once it is answered
            await asyncio.sleep(0.05)
            return "finished"
        assert await handle() == "finished" and not ex.gone
        ex.close()
        # Closed before anything was heard: the watcher is gone, nothing is cancelled.
        quiet = Peer(body(b"{}"))
        ex = exchange(quiet)
        await ex.body(10)
        ex.cancel_when_gone()
        ex.close()
        quiet.leave()
        await asyncio.sleep(0.01)
        assert not ex.gone and quiet.events.qsize() == 1
    asyncio.run(main())
