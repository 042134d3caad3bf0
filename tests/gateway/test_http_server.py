"""The gateway's HTTP/1.1 server and its exchanges on their own, over real sockets with
raw bytes: what a handler reads of a request, what goes out on the wire, keep-alive and
pipelining, malformed input, and the client's going away. (The face over real clients is
``test_serve_http.py``.)"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from collections.abc import Awaitable, Callable
from typing import Self

import pytest

from trunkline.gateway.exchange import Disconnected, Exchange
from trunkline.gateway.http_server import MAX_HEAD_BYTES, Connection, HttpServer, peer_key
from trunkline.gateway.limits import Limits

Handler = Callable[[Exchange], Awaitable[None]]


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    return sock


class Served:
    """``handler`` behind an ``HttpServer`` on a loopback port, for one test."""

    def __init__(self, handler: Handler, **options) -> None:
        self.sock = listening()
        self.port = self.sock.getsockname()[1]
        self.server = HttpServer(handler, self.sock,
                                 drain_timeout_s=options.pop("drain_timeout_s", 1.0), **options)

    async def __aenter__(self) -> Self:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    """One response with a ``content-length``: its status line, headers and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    status, *lines = head[:-4].split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.decode().partition(":")
        headers[name.lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


def post(path: str, body: bytes, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def echo(exchange: Exchange) -> None:
    """Answers with what it read: the path, then the body (or ``over`` past 8 bytes)."""
    body = await exchange.body(8)
    exchange.respond(200, exchange.path.encode() + b" " + (b"over" if body is None else body),
                           content_type=b"text/plain")


def test_headers_by_lower_case_name_first_value_trimmed_and_the_path_decoded():
    seen: list[Exchange] = []

    async def keep(exchange: Exchange) -> None:
        seen.append(exchange)
        exchange.respond(204)

    async def main():
        async with Served(keep) as served:
            reader, writer = await served.connect()
            writer.write(b"POST /a%20b?x=1 HTTP/1.1\r\nHost: h\r\nAccept: application/json\r\n"
                         b"ACCEPT: text/event-stream\r\nMcp-Name:  echo \t\r\n"
                         b"Content-Length: 2\r\n\r\n{}")
            status, headers, _body = await read_response(reader)
            assert status == b"HTTP/1.1 204 No Content" and headers["content-length"] == "0"
            writer.close()
        (exchange,) = seen
        assert exchange.method == "POST" and exchange.path == "/a b"
        assert exchange.headers["accept"] == "application/json"
        assert exchange.headers["mcp-name"] == "echo"
        assert exchange.content_length() == 2
    asyncio.run(main())


def test_a_body_whole_or_chunked_up_to_the_limit_and_no_further():
    async def main():
        async with Served(echo, max_body=8) as served:
            reader, writer = await served.connect()
            writer.write(post("/p", b"abc"))
            assert (await read_response(reader))[2] == b"/p abc"
            writer.write(b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n")
            assert (await read_response(reader))[2] == b"/c abcde"
            # Over the limit: the handler is told; the body was read to its end (and
            # dropped), so the connection goes on.
            writer.write(post("/p", b"0123456789"))
            _status, headers, body = await read_response(reader)
            assert body == b"/p over" and "connection" not in headers
            writer.write(post("/p", b"next"))
            assert (await read_response(reader))[2] == b"/p next"
            writer.close()
    asyncio.run(main())


def test_an_answer_before_the_body_ends_closes_the_connection_after_it():
    async def early(exchange: Exchange) -> None:
        exchange.respond(413, b"too long")

    async def main():
        async with Served(early) as served:
            reader, writer = await served.connect()
            writer.write(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000\r\n\r\nabc")
            _status, headers, body = await read_response(reader)
            assert body == b"too long" and headers["connection"] == "close"
            assert await reader.read() == b""
            writer.close()
    asyncio.run(main())


def test_a_whole_response_is_one_write_with_its_length_and_type():
    async def answer(exchange: Exchange) -> None:
        exchange.respond(413, b'{"x":1}', {"Retry-After": "1"})

    async def main():
        async with Served(answer) as served:
            reader, writer = await served.connect()
            writer.write(post("/", b""))
            status, headers, body = await read_response(reader)
            assert status == b"HTTP/1.1 413 Request Entity Too Large"
            assert headers == {"content-length": "7", "retry-after": "1",
                               "content-type": "application/json"}
            assert body == b'{"x":1}'
            writer.close()
    asyncio.run(main())


def test_pipelined_requests_are_answered_in_order_on_one_connection():
    async def main():
        async with Served(echo) as served:
            reader, writer = await served.connect()
            writer.write(b"".join(post(f"/{n}", str(n).encode()) for n in range(20)))
            for n in range(20):
                assert (await read_response(reader))[2] == f"/{n} {n}".encode()
            writer.close()
    asyncio.run(main())


def test_requests_on_one_connection_share_its_task_and_not_their_context_variables():
    """One task answers a connection's requests in turn (none is made per request); what a
    handler sets in a context variable and resets does not reach the next request."""
    seen: list[tuple[asyncio.Task[object] | None, object]] = []
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    async def handler(exchange: Exchange) -> None:
        seen.append((asyncio.current_task(), marker.get()))
        token = marker.set(exchange.path)
        try:
            await exchange.body(8)
            exchange.respond(204)
        finally:
            marker.reset(token)

    async def main():
        async with Served(handler) as served:
            reader, writer = await served.connect()
            for n in range(3):
                writer.write(post(f"/{n}", b""))
                await read_response(reader)
            other_reader, other_writer = await served.connect()
            other_writer.write(post("/other", b""))
            await read_response(other_reader)
            assert len(served.server.tasks) == 2  # one per connection
            writer.close()
            other_writer.close()
        tasks = [task for task, _ in seen]
        assert tasks[0] is tasks[1] is tasks[2] and tasks[3] is not tasks[0]
        assert [value for _, value in seen] == ["unset"] * 4
    asyncio.run(main())


def test_a_malformed_request_behind_a_good_one_gets_no_answer_the_good_one_could_take():
    # The 400 would be read as the first request's response; the connection just closes.
    async def main():
        async with Served(echo) as served:
            reader, writer = await served.connect()
            writer.write(post("/good", b"1") + b"NOT HTTP AT ALL\r\n\r\n")
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
    asyncio.run(main())


@pytest.mark.parametrize("request_bytes, status", [
    (b"NOT HTTP AT ALL\r\n\r\n", b"400"),
    # Both framings at once: the request smuggling trick; refused, not guessed.
    (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0\r\n\r\n", b"400"),
    # A chunk size that is not one: the request's answer, not a bare close.
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n", b"400"),
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"
     b"fffffffffffffffffffff\r\n", b"400"),
    # A coding the server does not decode (RFC 9112 6.1), not a body handed on still coded.
    (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
     b"2\r\nab\r\n0\r\n\r\n", b"501"),
    (b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"a" * (MAX_HEAD_BYTES + 1) + b"\r\n\r\n", b"431"),
    # A head that never ends: refused once it is over the limit, not held until it ends.
    (b"GET / HTTP/1.1\r\nHost: h\r\n" + b"".join(
        b"X-%d: %b\r\n" % (i, b"a" * 100) for i in range(MAX_HEAD_BYTES // 100)), b"431"),
])
def test_a_request_that_cannot_be_served_is_refused_and_the_connection_closed(
        request_bytes: bytes, status: bytes):
    async def main():
        async with Served(echo) as served:
            reader, writer = await served.connect()
            writer.write(request_bytes)
            answer = await reader.read()
            assert answer.startswith(b"HTTP/1.1 " + status), answer[:80]
            assert b"connection: close" in answer
            writer.close()
            # The server goes on serving others.
            reader, writer = await served.connect()
            writer.write(post("/ok", b"1"))
            assert (await read_response(reader))[2] == b"/ok 1"
            writer.close()
    asyncio.run(main())


def test_an_upgrade_is_ignored_and_the_connection_ends_after_the_answer():
    async def main():
        async with Served(echo) as served:
            reader, writer = await served.connect()
            writer.write(b"GET /u HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                         b"Upgrade: h2c\r\n\r\n")
            _status, headers, body = await read_response(reader)
            assert body == b"/u " and headers["connection"] == "close"
            assert await reader.read() == b""
            writer.close()
            # With a body, llhttp would take it for the new protocol's: refused.
            reader, writer = await served.connect()
            writer.write(b"POST /u HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                         b"Upgrade: h2c\r\nContent-Length: 2\r\n\r\nhi")
            answer = await reader.read()
            assert answer.startswith(b"HTTP/1.1 400 ") and b"connection: close" in answer
            writer.close()
    asyncio.run(main())


def test_a_client_that_expects_100_continue_is_told_to_go_on():
    async def main():
        async with Served(echo) as served:
            reader, writer = await served.connect()
            writer.write(b"POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
                         b"Content-Length: 2\r\n\r\n")
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok")
            assert (await read_response(reader))[2] == b"/e ok"
            writer.close()
    asyncio.run(main())


def test_the_client_going_away_cancels_the_handling_task_and_says_so():
    handled: list[Exchange] = []

    async def main():
        ended = asyncio.Event()

        async def stream(exchange: Exchange) -> None:
            handled.append(exchange)
            await exchange.body(10)
            exchange.cancel_when_gone()
            await exchange.open_stream({"Content-Type": "text/event-stream"})
            await exchange.write(b"data: 1\n\n")
            try:
                await asyncio.sleep(30)
            finally:
                ended.set()

        async with Served(stream) as served:
            reader, writer = await served.connect()
            writer.write(post("/s", b"{}"))
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"transfer-encoding: chunked" in head
            assert await reader.readexactly(14) == b"9\r\ndata: 1\n\n\r\n"
            assert not handled[0].gone
            writer.close()
            await asyncio.wait_for(ended.wait(), 10)
            assert handled[0].gone
            assert not served.server.tasks
    asyncio.run(main())


def test_a_body_cut_short_by_the_client_is_disconnected_and_an_answered_one_is_not_gone():
    outcomes: list[str] = []

    async def handler(exchange: Exchange) -> None:
        try:
            await exchange.body(100)
        except Disconnected:
            outcomes.append("disconnected")
            return
        exchange.cancel_when_gone()
        exchange.respond(200, b"{}")
        await asyncio.sleep(0.05)  # the client leaves now: the answer is complete
        outcomes.append(f"finished gone={exchange.gone}")

    async def main():
        async with Served(handler) as served:
            reader, writer = await served.connect()
            writer.write(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n\r\nabc")
            await asyncio.sleep(0.05)
            writer.close()
            reader, writer = await served.connect()
            writer.write(post("/", b"{}"))
            await read_response(reader)
            writer.close()
            while len(outcomes) < 2:
                await asyncio.sleep(0.01)
        assert outcomes == ["disconnected", "finished gone=False"]
    asyncio.run(main())


def test_a_streams_first_bytes_go_with_its_head_and_its_last_with_its_end(monkeypatch):
    """A stream's head and its first chunk are one write, its last chunk and its end
    another; closing it again writes nothing (the next answer on the connection is whole)."""
    writes: list[bytes] = []
    send = Connection.send

    def counted(self: Connection, data: bytes) -> None:
        writes.append(data)
        send(self, data)
    monkeypatch.setattr(Connection, "send", counted)

    async def stream(exchange: Exchange) -> None:
        if exchange.path == "/plain":
            exchange.respond(200, b"{}")
            return
        await exchange.open_stream({"Content-Type": "text/event-stream"}, b"data: 1\n\n")
        await exchange.close_stream(b"data: 2\n\n")
        await exchange.close_stream()

    async def main():
        async with Served(stream) as served:
            reader, writer = await served.connect()
            writer.write(b"GET /s HTTP/1.1\r\nHost: h\r\n\r\n"
                         b"GET /plain HTTP/1.1\r\nHost: h\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"transfer-encoding: chunked" in head
            body = await reader.readuntil(b"0\r\n\r\n")
            assert body == b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"
            status, _, plain = await read_response(reader)
            assert status == b"HTTP/1.1 200 OK" and plain == b"{}"
            writer.close()
        assert len(writes) == 3  # the stream's two, the plain answer's one
        assert writes[0].endswith(b"data: 1\n\n\r\n") and writes[1].startswith(b"9\r\ndata: 2")
    asyncio.run(main())


def test_an_http_1_0_stream_ends_with_the_connection():
    async def stream(exchange: Exchange) -> None:
        await exchange.open_stream({"Content-Type": "text/event-stream"})
        await exchange.write(b"data: 1\n\n")
        await exchange.close_stream()

    async def main():
        async with Served(stream) as served:
            reader, writer = await served.connect()
            writer.write(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            answer = await reader.read()
            head, _, body = answer.partition(b"\r\n\r\n")
            assert b"connection: close" in head and b"transfer-encoding" not in head
            assert body == b"data: 1\n\n"
            writer.close()
    asyncio.run(main())


def test_an_idle_keep_alive_connection_is_closed():
    async def main():
        async with Served(echo, keep_alive_s=0.2) as served:
            reader, writer = await served.connect()
            writer.write(post("/", b"1"))
            await read_response(reader)
            assert await asyncio.wait_for(reader.read(), 10) == b""
            assert not served.server.connections
            writer.close()
    asyncio.run(main())


def test_stopping_finishes_the_answers_under_way_and_closes_the_rest():
    async def main():
        go = asyncio.Event()

        async def slow(exchange: Exchange) -> None:
            await exchange.body(10)
            await go.wait()
            exchange.respond(200, b"late")

        async with Served(slow, drain_timeout_s=10) as served:
            idle_reader, idle_writer = await served.connect()
            busy_reader, busy_writer = await served.connect()
            busy_writer.write(post("/", b""))
            while served.server.idle:
                await asyncio.sleep(0.01)
            stopping = asyncio.ensure_future(served.server.stop())
            assert await asyncio.wait_for(idle_reader.read(), 10) == b""
            with pytest.raises(OSError):
                await served.connect()
            go.set()
            _status, headers, body = await read_response(busy_reader)
            assert body == b"late" and headers["connection"] == "close"
            await stopping
            assert not served.server.connections and not served.server.tasks
            idle_writer.close()
            busy_writer.close()
    asyncio.run(main())


def test_a_handler_that_outlives_the_drain_deadline_is_cancelled():
    async def main():
        ended = asyncio.Event()

        async def stuck(exchange: Exchange) -> None:
            try:
                await asyncio.sleep(60)
            finally:
                ended.set()

        async with Served(stuck, drain_timeout_s=0.2) as served:
            reader, writer = await served.connect()
            writer.write(post("/", b""))
            while served.server.idle:
                await asyncio.sleep(0.01)
            await served.server.stop()
            assert ended.is_set()
            assert await reader.read() == b""
            writer.close()
    asyncio.run(main())


async def reader_of(exchange: Exchange) -> None:
    """Answers with the length of the body it read (a client's going away is no error)."""
    try:
        body = await exchange.body(1 << 20)
    except Disconnected:
        return
    exchange.respond(200, b"%d" % len(body or b""), content_type=b"text/plain")


@pytest.mark.parametrize("drip", [b"", b"x"], ids=["stalled", "dripped"])
def test_a_body_slower_than_the_minimum_rate_is_408_and_others_are_served(drip: bytes):
    """A head in, then a body that stalls (or comes a byte at a time, under the rate):
    408 and the connection closed, while another client is answered meanwhile."""
    limits = Limits(body_min_bytes_per_s=1000)

    async def main():
        async with Served(reader_of, limits=limits, body_window_s=0.3) as served:
            reader, writer = await served.connect()
            writer.write(b"POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n"
                         b"first bytes")
            answer = asyncio.ensure_future(reader.read())
            for _ in range(300):  # 30 s at most, without the rule
                if answer.done():
                    break
                if drip:
                    writer.write(drip)
                other_reader, other_writer = await served.connect()
                other_writer.write(post("/ok", b"12345"))
                assert (await read_response(other_reader))[2] == b"5"
                other_writer.close()
                await asyncio.sleep(0.1)
            assert answer.done(), "the slow body was never cut off"
            assert (await answer).startswith(b"HTTP/1.1 408 "), await answer
            assert b"connection: close" in await answer
            writer.close()
    asyncio.run(main())


def test_a_head_that_never_completes_is_408_and_a_silent_connection_just_closed():
    async def main():
        async with Served(echo, limits=Limits(head_timeout_s=0.3)) as served:
            silent_reader, silent_writer = await served.connect()
            reader, writer = await served.connect()
            writer.write(b"POST /drip HTTP/1.1\r\nHost: h\r\n")
            answer = asyncio.ensure_future(reader.read())
            for n in range(300):  # 30 s at most, without the rule
                if answer.done():
                    break
                writer.write(b"X-%d: a\r\n" % n)
                await asyncio.sleep(0.1)
            assert answer.done(), "the head was never cut off"
            assert (await answer).startswith(b"HTTP/1.1 408 "), await answer
            assert await asyncio.wait_for(silent_reader.read(), 30) == b""
            writer.close()
            silent_writer.close()
    asyncio.run(main())


def test_an_answer_before_the_body_ends_reaches_a_client_still_sending():
    """The connection closes after the answer lingering: what the client still sends is
    read and dropped, so its writes do not fail and it reads the answer after them (a
    close with unread bytes would reset it, and the answer with it)."""
    async def early(exchange: Exchange) -> None:
        exchange.respond(413, b"too long")

    async def main():
        async with Served(early) as served:
            sock = socket.create_connection(("127.0.0.1", served.port))
            body = 8 * 1024 * 1024
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, sock.sendall, b"POST / HTTP/1.1\r\nHost: h\r\n"
                                       b"Content-Length: %d\r\n\r\n" % body + b"x" * body)
            sock.settimeout(10)
            answer = await loop.run_in_executor(None, sock.recv, 4096)
            assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b"too long")
            sock.close()
    asyncio.run(main())


def test_connections_are_counted_by_address_and_an_ipv6_host_by_its_64():
    assert peer_key(("127.0.0.1", 5000)) == "127.0.0.1"
    assert peer_key(("::ffff:10.0.0.1", 5000, 0, 0)) == "10.0.0.1"
    assert peer_key(("2001:db8:1:2::7", 1, 0, 0)) == peer_key(("2001:db8:1:2:ffff::1", 2, 0, 0))
    assert peer_key(("2001:db8:1:2::7", 1, 0, 0)) != peer_key(("2001:db8:1:3::7", 1, 0, 0))
    assert peer_key("") is None  # a Unix socket: a sibling process, not a client
