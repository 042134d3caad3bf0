"""Each user's own credentials upstream, in one worker (issue 41, item 3): the calls of two
identities to one Streamable HTTP server each carry that identity's token only, a 401 for
one renews that one's alone, a forgotten identity's header is dropped at once, and calls
made for nobody keep the host's own token.

The upstream is a bearer-protected MCP endpoint that records the ``Authorization`` each
request carried (no installed server shows which token each request came with); the
credential sources are the test's, handing out the tokens the endpoint accepts. Everything
between them is real: the host, its worker process, the channel, the HTTP client."""

from __future__ import annotations

import asyncio
import logging
from typing import Self

import aiohttp
import orjson
import pytest
from aiohttp import web

import realpeers
from conftest import run
from httppeers import http_peer  # noqa: F401 - a fixture
from trunkline import Host, Identity, http
from trunkline.errors import UserCredentialsMissing
from trunkline.parent.credentials import CredentialSlots

MODERN = "2026-07-28"
ALICE = Identity.user("alice", issuer="https://idp.example")
BOB = Identity.user("bob", issuer="https://idp.example")


class RecordingEcho:
    """A stateless MCP endpoint with one tool, ``echo``, accepting the tokens in ``valid``;
    ``seen``: (token, method, text) of every request, in arrival order."""

    def __init__(self) -> None:
        self.valid: set[str] = set()
        self.seen: list[tuple[str | None, str, str | None]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/mcp", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/mcp"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def tokens(self, method: str = "tools/call") -> dict[str, set[str | None]]:
        """The tokens each echoed text came with."""
        out: dict[str, set[str | None]] = {}
        for token, m, text in self.seen:
            if m == method and text is not None:
                out.setdefault(text.split()[0], set()).add(token)
        return out

    async def handle(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization")
        token = header[7:] if header and header.startswith("Bearer ") else None
        message = orjson.loads(await request.read())
        method = message.get("method", "")
        params = message.get("params") or {}
        text = (params.get("arguments") or {}).get("text") if method == "tools/call" else \
            params.get("cursor")
        self.seen.append((token, method, text))
        if token not in self.valid:
            return web.Response(status=401, headers={
                "WWW-Authenticate": 'Bearer realm="echo", error="invalid_token"'})
        if "id" not in message:
            return web.Response(status=202)
        stamp = {"resultType": "complete"}
        if method == "server/discover":
            result = {**stamp, "supportedVersions": [MODERN], "capabilities": {"tools": {}},
                      "ttlMs": 0, "cacheScope": "private",
                      "_meta": {"io.modelcontextprotocol/serverInfo":
                                {"name": "recording-echo", "version": "1"}}}
        elif method == "tools/list":
            result = {**stamp, "ttlMs": 0, "cacheScope": "private", "tools": [
                {"name": "echo", "inputSchema": {"type": "object", "properties": {
                    "text": {"type": "string"}}, "required": ["text"]}}]}
        elif method == "tools/call":
            result = {**stamp, "content": [{"type": "text", "text": text}]}
        else:
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": "method not found"}}, status=404)
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})


class Source:
    """One identity's (or the host's) credential source: hands out ``token``, and a new
    one (made valid upstream) when a request with it was refused."""

    def __init__(self, echo: RecordingEcho, name: str) -> None:
        self.echo = echo
        self.name = name
        self.issued = 0
        self.token = self._issue()
        self.asked = 0
        self.challenges: list[tuple[int, str | None]] = []

    def _issue(self) -> str:
        self.issued += 1
        token = f"{self.name}-{self.issued}"
        self.echo.valid.add(token)
        return token

    async def authorization_for(self, server_url: str, *,
                                legacy_fallbacks: bool = False) -> str | None:
        assert server_url == self.echo.url
        self.asked += 1
        return f"Bearer {self.token}"

    async def on_challenge(self, server_url: str, status: int, www_authenticate: str | None,
                           *, rejected: str | None = None,
                           legacy_fallbacks: bool = False) -> str | None:
        assert server_url == self.echo.url
        self.challenges.append((status, rejected))
        if rejected == f"Bearer {self.token}":
            self.token = self._issue()
        return f"Bearer {self.token}"

    async def renew_at(self, server_url: str) -> float | None:
        return None


class Users:
    """``Host(user_credentials=...)``: one source per identity."""

    def __init__(self, echo: RecordingEcho) -> None:
        self.sources = {"alice": Source(echo, "alice"), "bob": Source(echo, "bob"),
                        "local": Source(echo, "local")}
        self.asked: list[tuple[str, str]] = []

    def source_for(self, server: str, identity: Identity) -> Source:
        self.asked.append((server, identity.subject))
        return self.sources[identity.subject]


def test_each_identitys_calls_carry_its_own_token_and_a_refusal_renews_only_its_own(
        no_leaks, caplog):
    caplog.set_level(logging.DEBUG)

    async def main():
        async with RecordingEcho() as echo:
            users = Users(echo)
            hosts_own = Source(echo, "host")
            async with Host(oauth=hosts_own, user_credentials=users) as host:  # type: ignore[arg-type]
                await host.add_server("echo", http(echo.url), credentials="per_user")
                calls = [host.call_tool("echo", {"text": f"{who} {i}"}, identity=identity)
                         for i in range(20)
                         for who, identity in (("alice", ALICE), ("bob", BOB), ("local", None))]
                results = await asyncio.gather(*calls)
                assert sorted(r.text for r in results) == sorted(
                    f"{who} {i}" for i in range(20) for who in ("alice", "bob", "local"))
                # Each identity's requests carried its token only; calls made for nobody
                # are the local user's (the person at this host), with its own.
                assert echo.tokens() == {"alice": {"alice-1"}, "bob": {"bob-1"},
                                         "local": {"local-1"}}
                # Each identity's source was asked once, before its first request (no 401).
                alice, bob = users.sources["alice"], users.sources["bob"]
                assert (alice.asked, bob.asked) == (1, 1)
                assert alice.challenges == bob.challenges == []
                assert {server for server, _ in users.asked} == {"echo"}

                # Alice's token is revoked upstream: her next calls are refused once, her
                # source alone is asked (saying which header was refused), and they go
                # again with her new token. Bob's keep going with his, nobody asked.
                echo.valid.discard("alice-1")
                echo.seen.clear()
                results = await asyncio.gather(*(
                    host.call_tool("echo", {"text": f"{who} again {i}"}, identity=identity)
                    for i in range(10) for who, identity in (("alice", ALICE), ("bob", BOB))))
                assert len(results) == 20
                assert alice.challenges == [(401, "Bearer alice-1")]
                assert (bob.challenges, bob.asked) == ([], 1)
                assert {t for t, m, x in echo.seen if x and x.startswith("bob")} == {"bob-1"}
                assert {t for t, m, x in echo.seen if x and x.startswith("alice")} <= {
                    "alice-1", "alice-2"}
                assert echo.tokens()["alice"] == {"alice-1", "alice-2"}

                # A raw request made for an identity (what a per-user listing sends) goes
                # with that identity's token too.
                echo.seen.clear()
                listed = await host.request("echo", "tools/list", {"cursor": "listing"},
                                            identity=BOB)
                assert [t["name"] for t in listed["tools"]] == ["echo"]
                assert echo.seen == [("bob-1", "tools/list", "listing")]

                # No token ever appears in what the host reports or logs.
                shown = repr(host.servers()) + " ".join(r.getMessage() for r in caplog.records)
                assert not any(token in shown for token in echo.valid)
    run(main())


def test_a_forgotten_identitys_header_is_dropped_at_once(no_leaks):
    async def main():
        async with RecordingEcho() as echo:
            users = Users(echo)
            async with Host(user_credentials=users) as host:
                echo.valid.add(None)  # type: ignore[arg-type]  # the host has no token of its own
                await host.add_server("echo", http(echo.url), credentials="per_user")
                await host.call_tool("echo", {"text": "alice 1"}, identity=ALICE)
                await host.call_tool("echo", {"text": "bob 1"}, identity=BOB)
                # Alice signs out and in again: her source holds a new token, and the old one
                # still works upstream. Without forgetting, her worker would keep sending it.
                alice = users.sources["alice"]
                alice.token = "alice-fresh"
                echo.valid.add("alice-fresh")
                assert host.forget_credentials(ALICE) is True
                assert host.forget_credentials(ALICE) is False, "forgotten once"
                await host.call_tool("echo", {"text": "alice 2"}, identity=ALICE)
                await host.call_tool("echo", {"text": "bob 2"}, identity=BOB)
                seen = {x: t for t, m, x in echo.seen if m == "tools/call"}
                assert seen == {"alice 1": "alice-1", "bob 1": "bob-1",
                                "alice 2": "alice-fresh", "bob 2": "bob-1"}
                assert (alice.asked, users.sources["bob"].asked) == (2, 1)
    run(main())


def test_an_identity_calling_a_per_user_server_without_user_credentials_fails_clearly(
        no_leaks):
    async def main():
        async with RecordingEcho() as echo:
            async with Host() as host:
                echo.valid.add(None)  # type: ignore[arg-type]  # the host has no token of its own
                await host.add_server("echo", http(echo.url), credentials="per_user")
                with pytest.raises(UserCredentialsMissing) as failed:
                    await host.call_tool("echo", {"text": "alice 1"}, identity=ALICE)
                assert "Host(user_credentials=...)" in str(failed.value)
                assert failed.value.server == "echo" and failed.value.sent is False
                assert not [m for _, m, _ in echo.seen if m == "tools/call"], "nothing sent"
                # A call made for nobody goes with the host's credentials (here: none).
                assert (await host.call_tool("echo", {"text": "host 1"})).text == "host 1"
    run(main())


class RecordingProxy:
    """A bearer gate in front of a real Streamable HTTP server: records the token and method
    of each request, refuses a token not in ``valid`` with 401, and passes the rest on
    (without the ``Authorization``), streaming the answer back as the server sends it."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.valid: set[str | None] = {None}
        self.seen: list[tuple[str | None, str]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._client = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/mcp", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/mcp"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None and self._client is not None
        await self._runner.cleanup()
        await self._client.close()

    def tokens(self, method: str) -> set[str | None]:
        return {token for token, m in self.seen if m == method}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self._client is not None
        header = request.headers.get("Authorization")
        token = header[7:] if header and header.startswith("Bearer ") else None
        body = await request.read()
        method = orjson.loads(body).get("method", "") if body else request.method
        self.seen.append((token, method))
        if token not in self.valid:
            return web.Response(status=401, headers={"WWW-Authenticate": 'Bearer realm="x"'})
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("authorization", "host", "content-length")}
        async with self._client.request(request.method, self.upstream, headers=headers,
                                        data=body or None) as upstream:
            out = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items()
                if k.lower() in ("content-type", "mcp-session-id", "cache-control")})
            await out.prepare(request)
            async for chunk in upstream.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out


def test_a_task_started_for_an_identity_is_followed_with_its_credentials(no_leaks,
                                                                          http_peer):
    """The worker's looks at a task (``tasks/get``) go with the credentials of the call
    that started it, not the host's."""
    server = realpeers.require(realpeers.CONFORMANCE_EVERYTHING)
    peer = http_peer([server.argv[0], server.argv[1], "--http", "127.0.0.1:0"], server.env)

    async def main() -> None:
        async with RecordingProxy(peer.url) as proxy:
            echo = RecordingEcho()
            echo.url = proxy.url
            users = Users(echo)
            proxy.valid |= echo.valid
            async with Host(user_credentials=users) as host:
                await host.add_server("fx", http(proxy.url), credentials="per_user")
                task = await host.start_tool("slow_compute", {"seconds": 1, "label": "a"},
                                             identity=ALICE)
                result = await task.wait(30)  # type: ignore[union-attr]
                assert result.text == "computed a in 1 s"
                assert proxy.tokens("tools/call") == {"alice-1"}
                assert proxy.tokens("tasks/get") == {"alice-1"}
                assert proxy.tokens("server/discover") == {None}, "the host's own: none"
    run(main())


def test_slot_numbers_are_bounded_and_reused_only_after_every_worker_forgot_them():
    told: list[list[int]] = []
    slots = CredentialSlots(object(), forget=told.append, max_slots=2)  # type: ignore[arg-type]
    carol = Identity.user("carol", issuer="https://idp.example")
    assert slots.slot_for(ALICE, "s") == 1 and slots.slot_for(BOB, "s") == 2
    assert slots.slot_for(ALICE, "s") == 1  # alice used last: bob is the oldest now
    assert slots.slot_for(carol, "s") == 2 and told == [[2]]
    assert (slots.identity_of(2), len(slots)) == (carol, 2)
    assert slots.forget(ALICE) == 1 and told == [[2], [1]] and slots.identity_of(1) is None
    assert slots.slot_for(BOB, "s") == 1
    with pytest.raises(UserCredentialsMissing):
        CredentialSlots(None).slot_for(ALICE, "s")

