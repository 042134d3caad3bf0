"""``trunkline serve --http`` against clients that hold connections rather than use them:
heads dripped a byte at a time, more connections from one address than its share, more
than the process has descriptors for. Spoken to over raw sockets on 127.0.0.1, with a
legitimate client (from 127.0.0.2 where the attacker's address is full) answered
alongside; the bounds shrunk with ``--limit`` so that dozens of sockets show them."""

from __future__ import annotations

import asyncio
import os
import resource
import socket

import aiohttp
import orjson
import pytest

from conftest import run, scripted
from gateways import JSON_ONLY, HttpGateway, fleet_config, modern_meta


def raw_request(gw: HttpGateway, method: str, params: dict) -> bytes:
    """A 2026-07-28 request as the bytes a client writes, whole."""
    message = gw.message(method, {**params, "_meta": modern_meta()})
    body = orjson.dumps(message)
    host = gw.url.split("/")[2]
    headers = {"Host": host, **gw.modern_headers(message, JSON_ONLY),
               "Content-Length": str(len(body))}
    return ("POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + "\r\n").encode() + body


def port_of(gw: HttpGateway) -> int:
    return int(gw.url.split("/")[2].rsplit(":", 1)[1])


def connect(gw: HttpGateway) -> socket.socket:
    """A connection from 127.0.0.1; connected (the kernel's handshake), not yet accepted."""
    return socket.create_connection(("127.0.0.1", port_of(gw)), timeout=30)


async def read_to_end(sock: socket.socket) -> bytes:
    """What the gateway writes on ``sock`` until it closes it."""
    def read() -> bytes:
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)
    return await asyncio.get_running_loop().run_in_executor(None, read)


def told_nothing(sock: socket.socket) -> bool:
    """Whether ``sock`` is open with nothing to read (an EOF or a reset is not)."""
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(30)
    return False


def client_from(address: str) -> aiohttp.ClientSession:
    """A client whose every request is a new connection from ``address``."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(force_close=True, local_addr=(address, 0)),
        timeout=aiohttp.ClientTimeout(total=30))


async def call_echo(gw: HttpGateway, http: aiohttp.ClientSession, n: int) -> tuple[int, bytes]:
    message = gw.message("tools/call", {"name": "echo", "arguments": {"n": n},
                                        "_meta": modern_meta()})
    async with http.post(gw.url, data=orjson.dumps(message),
                         headers=gw.modern_headers(message, JSON_ONLY)) as response:
        return response.status, await response.read()


async def healthz(gw: HttpGateway, http: aiohttp.ClientSession) -> int:
    async with http.get(f"{gw.base}/healthz") as response:
        return response.status


async def until_served(gw: HttpGateway, http: aiohttp.ClientSession) -> None:
    """Wait until a new connection is served again (closes take a moment to be seen)."""
    for _n in range(400):
        try:
            if await healthz(gw, http) == 200:
                return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.025)
    raise AssertionError("never served again")


def test_a_head_dripped_byte_by_byte_is_408_while_others_are_answered(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "head_timeout_s=1")
        request = raw_request(gw, "tools/call", {"name": "echo", "arguments": {}})
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(gw))
        answer = asyncio.ensure_future(reader.read())
        sent = 0
        while not answer.done() and sent < len(request):
            writer.write(request[sent:sent + 1])
            sent += 1
            status, called = await gw.modern("tools/call", {"name": "echo",
                                                            "arguments": {"n": sent}})
            assert status == 200 and "result" in called
            await asyncio.sleep(0.05)
        assert answer.done() and sent < len(request), "the dripped head was served whole"
        assert (await answer).startswith(b"HTTP/1.1 408 "), await answer
        writer.close()
        assert await gw.stop() == 0
    run(main())


def test_connections_beyond_one_address_s_share_are_refused_and_others_served(gateways,
                                                                              tmp_path):
    """One address opens more connections than ``peer_connections``, idle or with a head
    begun: those past it are answered 503 with ``Retry-After`` as they are accepted (no
    request read); another address is served meanwhile; and the address is served again
    once it closes its own."""
    path = fleet_config(tmp_path, {"alpha": scripted()})
    share = 16

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", f"peer_connections={share}",
                                     "--limit", "head_timeout_s=120")
        held = []
        for n in range(share + 8):
            sock = connect(gw)
            if n % 2:
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: ")  # a head begun, never ended
            held.append(sock)
        for sock in held[share:]:
            answer = await read_to_end(sock)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"retry-after: 1\r\n" in answer and b"peer_connections" in answer
        # Accepted in the order they connected: the first ones were taken before those.
        assert all(told_nothing(sock) for sock in held[:share])
        async with client_from("127.0.0.2") as other:
            assert (await call_echo(gw, other, 1))[0] == 200
            assert await healthz(gw, other) == 200
        async with client_from("127.0.0.1") as same:
            assert (await call_echo(gw, same, 2))[0] == 503
            for sock in held:
                sock.close()
            await until_served(gw, same)
            assert (await call_echo(gw, same, 3))[0] == 200
        assert await gw.stop() == 0
    run(main())


def test_connections_leave_descriptors_spare_and_health_checks_get_through(gateways,
                                                                           tmp_path):
    """With few descriptors left (its ``RLIMIT_NOFILE`` lowered), connections that sit
    idle are closed oldest first to make room, so that a health check and a call on new
    connections are answered; connections all serving calls are kept, and a new one is
    refused 503 until they end. The gateway never runs out of descriptors."""
    path = fleet_config(tmp_path, {"alpha": scripted()})
    spare = 8

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", f"spare_descriptors={spare}")
        pid = gw.proc.pid
        _soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        room = len(os.listdir(f"/proc/{pid}/fd")) + 24
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (room, hard))
        idle = [connect(gw) for _ in range(60)]
        async with client_from("127.0.0.2") as other:
            assert await healthz(gw, other) == 200
            status, called = await call_echo(gw, other, 1)
            assert status == 200 and "result" in orjson.loads(called)
        assert await read_to_end(idle[0]) == b"", "the oldest idle connection gave way"
        assert told_nothing(idle[-1])
        assert len(os.listdir(f"/proc/{pid}/fd")) < room
        for sock in idle:
            sock.close()
        async with client_from("127.0.0.2") as other:
            await until_served(gw, other)
            busy = []
            for _ in range(40):
                sock = connect(gw)
                sock.sendall(raw_request(gw, "tools/call", {"name": "sleep",
                                                            "arguments": {"seconds": 60}}))
                busy.append(sock)
            answer = await read_to_end(busy[-1])
            assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1\r\n" in answer
            assert b"spare_descriptors" in answer
            assert told_nothing(busy[0]), "a connection serving a call is kept"
            with pytest.raises(aiohttp.ClientResponseError) as refused:
                async with other.get(f"{gw.base}/healthz") as response:
                    response.raise_for_status()
            assert refused.value.status == 503
            assert len(os.listdir(f"/proc/{pid}/fd")) < room
            for sock in busy:  # the calls end with their connections
                sock.close()
            await until_served(gw, other)
            assert (await call_echo(gw, other, 2))[0] == 200
        assert await gw.stop() == 0
    run(main())
