"""The Streamable HTTP worker's own HTTP/1.1 client (``http_client``), against a scripted
server in the test: each connection's bytes are whatever the test says, so framings and
failures no real server shows on demand (a body cut short, a bad status line, a server
closing between requests) are shown exactly. The transport tests run the same client
against real servers."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Awaitable, Callable
from typing import Self

import pytest

from conftest import run
from trunkline.worker.transports.http_client import (
    BodyBroken,
    ConnectFailed,
    Disconnected,
    HttpClient,
    MalformedResponse,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Scripted:
    """A TCP server on 127.0.0.1 whose every connection runs ``handler``; it counts
    connections and records each request head it read with ``read_request``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self.closed = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Self:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                self.closed += 1
                writer.close()
        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return await reader.readexactly(length)


def client(url: str, limit: int = 4) -> HttpClient:
    return HttpClient(url, limit=limit, connect_timeout_s=5, verify_tls=True,
                      user_agent="trunkline-test")


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def answering_when(go: asyncio.Event, server: Scripted) -> Handler:
    """A handler that echoes each request's body once ``go`` is set."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            body = await server.read_request(reader)
            await go.wait()
            writer.write(answer(body))
            await writer.drain()
    return handler


async def echo_forever(server: Scripted, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
    while True:
        body = await server.read_request(reader)
        writer.write(answer(body, "Content-Type: application/json"))
        await writer.drain()


def test_requests_reuse_keep_alive_connections_and_say_who_and_how_long(no_leaks):
    async def main():
        async with Scripted(lambda r, w: echo_forever(server, r, w)) as server:
            http = client(server.url)
            for i in range(5):
                resp = await http.request("POST", server.url, {"X-Mine": "1"}, b'{"n":%d}' % i)
                assert resp.status == 200 and resp.content_type == "application/json"
                assert await resp.read() == b'{"n":%d}' % i
                resp.release()
            assert server.connections == 1
            head = server.heads[0].decode()
            assert head.startswith("POST /mcp HTTP/1.1\r\n")
            assert "Host: 127.0.0.1:" in head and "User-Agent: trunkline-test" in head
            assert "X-Mine: 1" in head and "Content-Length: 7" in head
            await http.aclose()
    run(main())


def test_a_callers_own_user_agent_replaces_the_default():
    async def main():
        async with Scripted(lambda r, w: echo_forever(server, r, w)) as server:
            http = client(server.url)
            resp = await http.request("POST", server.url, {"user-agent": "mine/1"}, b"{}")
            await resp.read()
            resp.release()
            head = server.heads[0].decode()
            assert "user-agent: mine/1" in head and "trunkline-test" not in head
            await http.aclose()
    run(main())


def test_callers_beyond_the_limit_wait_their_turn_in_arrival_order(no_leaks):
    async def main():
        release = asyncio.Event()
        async with Scripted(lambda r, w: answering_when(release, server)(r, w)) as server:
            http = client(server.url, limit=2)
            order: list[int] = []

            async def call(i: int) -> None:
                resp = await http.request("POST", server.url, {}, b"%d" % i)
                order.append(int(await resp.read()))
                resp.release()
            tasks = [asyncio.create_task(call(i)) for i in range(6)]
            await asyncio.sleep(0.2)
            assert server.connections == 2  # never more than the limit
            release.set()
            await asyncio.gather(*tasks)
            assert sorted(order) == list(range(6)) and server.connections == 2
            assert order[2:] == [2, 3, 4, 5]  # the waiters were served first come, first served
            await http.aclose()
    run(main())


def test_a_response_abandoned_before_its_end_closes_its_connection(no_leaks):
    async def main():
        async def half(reader, writer):
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
            await writer.drain()
            assert await reader.read() == b""  # the client closed: the server sees EOF
        async with Scripted(half) as server:
            http = client(server.url)
            resp = await http.request("POST", server.url, {}, b"{}")
            async for chunk in resp.chunks():
                assert chunk == b"0123456789"
                break
            resp.release()
            for _ in range(100):
                if server.closed:
                    break
                await asyncio.sleep(0.01)
            assert server.closed == 1
            await http.aclose()
    run(main())


@pytest.mark.parametrize("framing", ["chunked", "until-eof"])
def test_bodies_without_a_length_are_read_to_their_end(framing, no_leaks):
    async def main():
        async def serve(reader, writer):
            await server.read_request(reader)
            if framing == "chunked":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                             b"Content-Type: text/event-stream\r\n\r\n"
                             b"6\r\ndata: \r\n3\r\nab\n\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\ndata: ab\n")
                await writer.drain()
                writer.close()
                return
            await writer.drain()
            await reader.read()
        async with Scripted(serve) as server:
            http = client(server.url)
            resp = await http.request("POST", server.url, {}, b"{}")
            assert await resp.read() == b"data: ab\n" and resp.at_eof
            resp.release()
            await http.aclose()
    run(main())


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_compressed_bodies_are_decompressed(encoding):
    body = b'{"text":"' + b"x" * 5000 + b'"}'
    squeeze = zlib.compressobj(wbits=-15)  # deflate without zlib's wrapper (some servers)
    packed = {"gzip": gzip.compress(body), "deflate": zlib.compress(body),
              "raw-deflate": squeeze.compress(body) + squeeze.flush()}[encoding]
    name = "gzip" if encoding == "gzip" else "deflate"

    async def main():
        async def serve(reader, writer):
            await server.read_request(reader)
            writer.write(answer(packed, f"Content-Encoding: {name}"))
            await writer.drain()
            await reader.read()
        async with Scripted(serve) as server:
            http = client(server.url)
            resp = await http.request("POST", server.url, {}, b"{}")
            assert await resp.read() == body
            resp.release()
            assert b"Accept-Encoding: gzip, deflate" in server.heads[0]
            await http.aclose()
    run(main())


def test_an_encoding_never_asked_for_is_a_broken_body():
    async def main():
        async def serve(reader, writer):
            await server.read_request(reader)
            writer.write(answer(b"\x00\x01", "Content-Encoding: br"))
            await writer.drain()
            await reader.read()
        async with Scripted(serve) as server:
            http = client(server.url)
            resp = await http.request("POST", server.url, {}, b"{}")
            with pytest.raises(BodyBroken, match="'br' is not supported"):
                await resp.read()
            resp.release()
            await http.aclose()
    run(main())


def test_failures_are_told_apart(no_leaks):
    """Closed before the head, cut mid-body, not HTTP at all, nobody listening."""
    async def main():
        async def before_head(reader, writer):
            await server.read_request(reader)
        async def mid_body(reader, writer):
            await server.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nonly this")
            await writer.drain()
        async def garbage(reader, writer):
            await server.read_request(reader)
            writer.write(b"SMTP ready\r\n\r\n")
            await writer.drain()
            await reader.read()
        for handler, expected in ((before_head, Disconnected), (mid_body, BodyBroken),
                                  (garbage, MalformedResponse)):
            async with Scripted(handler) as server:
                url = server.url
                http = client(url)
                with pytest.raises(expected):
                    resp = await http.request("POST", server.url, {}, b"{}")
                    try:
                        await resp.read()
                    finally:
                        resp.release()
                await http.aclose()
        http = client(url)  # the scripted server is gone: nobody listens there now
        with pytest.raises(ConnectFailed) as refused:
            await http.request("POST", url, {}, b"{}")
        assert refused.value.os_error is not None
        await http.aclose()
    run(main())


def test_a_connection_the_server_closed_while_idle_is_not_reused(no_leaks):
    async def main():
        async def once(reader, writer):
            body = await server.read_request(reader)
            writer.write(answer(body))
            await writer.drain()  # then close: the connection ends while idle
        async with Scripted(once) as server:
            http = client(server.url)
            for i in range(3):
                resp = await http.request("POST", server.url, {}, b"%d" % i)
                assert await resp.read() == b"%d" % i
                resp.release()
                await asyncio.sleep(0.05)  # the FIN arrives
            assert server.connections == 3
            await http.aclose()
    run(main())


def test_a_large_body_is_read_with_back_pressure_and_arrives_whole(no_leaks):
    big = bytes(range(256)) * 16384  # 4 MiB

    async def main():
        async def serve(reader, writer):
            await server.read_request(reader)
            writer.write(answer(big))
            await writer.drain()
            await reader.read()
        async with Scripted(serve) as server:
            http = client(server.url)
            resp = await http.request("POST", server.url, {}, b"{}")
            await asyncio.sleep(0.2)  # unread: the client stops reading the socket
            assert resp._buffered <= 2 * 1024 * 1024
            assert await resp.read() == big
            resp.release()
            await http.aclose()
    run(main())


def test_a_caller_cancelled_while_waiting_for_a_connection_frees_its_turn(no_leaks):
    async def main():
        go = asyncio.Event()
        async with Scripted(lambda r, w: answering_when(go, server)(r, w)) as server:
            http = client(server.url, limit=1)
            held = asyncio.create_task(http.request("POST", server.url, {}, b"1"))
            await asyncio.sleep(0.05)
            waiting = asyncio.create_task(http.request("POST", server.url, {}, b"2"))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            go.set()
            first = await held
            assert await first.read() == b"1"
            first.release()
            again = await asyncio.wait_for(http.request("POST", server.url, {}, b"3"), 5)
            assert await again.read() == b"3"
            again.release()
            assert server.connections == 1
            await http.aclose()
    run(main())


def test_a_url_on_another_origin_is_refused():
    async def main():
        http = client("http://127.0.0.1:9/mcp")
        with pytest.raises(ValueError, match=r"not on 127\.0\.0\.1:9"):
            await http.request("POST", "http://example.com/mcp", {}, b"{}")
        await http.aclose()
    run(main())
