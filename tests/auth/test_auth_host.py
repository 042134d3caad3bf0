"""OAuth through the public ``Host`` API: a protected Streamable HTTP server's worker asks
the parent over the channel, the parent's ``OAuthClient`` answers, the request goes again.

The protected MCP endpoint is served on the fake authorization server's own origin (so its
protected resource metadata names it), and accepts exactly the access tokens that server
issued and the test has not revoked. Everything else is real: the host, its worker
process, the channel, the HTTP client, the OAuth flow."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from aiohttp import web
from oauth_fakes import FakeAuthServer

from conftest import run
from trunkline import Host, http
from trunkline.auth import FileStore, OAuthClient

MODERN = "2026-07-28"


class ProtectedEcho:
    """A stateless MCP endpoint with one tool, ``echo``, behind bearer tokens."""

    def __init__(self) -> None:
        self.fake: FakeAuthServer | None = None
        self.revoked: set[str] = set()
        self.unauthorized = 0
        self.calls = 0
        self.seen_tokens: list[str | None] = []

    def route(self) -> tuple[str, str, Any]:
        return ("POST", "/mcp", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        assert self.fake is not None
        header = request.headers.get("Authorization")
        token = header[7:] if header and header.startswith("Bearer ") else None
        self.seen_tokens.append(token)
        if token is None or token not in self.fake.issued or token in self.revoked \
                or not token.startswith("at-"):
            self.unauthorized += 1
            return web.Response(status=401, headers={
                "WWW-Authenticate": self.fake.challenge("mcp")})
        return await self.answer(request)

    async def answer(self, request: web.Request) -> web.Response:
        """The MCP answer to an authorized request."""
        message = orjson.loads(await request.read())
        if "id" not in message:
            return web.Response(status=202)
        method = message["method"]
        stamp = {"resultType": "complete"}
        if method == "server/discover":
            result = {**stamp, "supportedVersions": [MODERN], "capabilities": {"tools": {}},
                      "ttlMs": 0, "cacheScope": "private",
                      "_meta": {"io.modelcontextprotocol/serverInfo":
                                {"name": "protected-echo", "version": "1"}}}
        elif method == "tools/list":
            result = {**stamp, "ttlMs": 0, "cacheScope": "private", "tools": [
                {"name": "echo", "inputSchema": {"type": "object", "properties": {
                    "text": {"type": "string"}}, "required": ["text"]}}]}
        elif method == "tools/call":
            self.calls += 1
            text = message["params"]["arguments"]["text"]
            result = {**stamp, "content": [{"type": "text", "text": text}]}
        else:
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": "method not found"}}, status=404)
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})


def tokens_in(fake: FakeAuthServer, prefix: str) -> list[str]:
    return [value for value in fake.issued if value.startswith(prefix)]


def test_a_protected_server_is_reached_through_the_hosts_oauth_client(no_leaks, caplog):
    caplog.set_level(logging.DEBUG)
    echo = ProtectedEcho()

    async def main():
        async with FakeAuthServer(routes=[echo.route()], token_delay_s=0.05) as fake:
            echo.fake = fake
            async with OAuthClient() as oauth, Host(oauth=oauth) as host:
                status = await host.add_server("protected", http(fake.server_url("mcp")))
                assert status.state.value == "ready", status.reason
                # One registration, one authorization, one token: the 401 to
                # server/discover went to the parent, which ran the flow once.
                assert len(fake.registrations) == 1 and len(fake.authorizations) == 1
                assert [r.grant for r in fake.token_requests] == ["authorization_code"]
                result = await host.call_tool("echo", {"text": "hi"})
                assert result.text == "hi"
                # The server revokes the token: 64 calls at once are each refused, and one
                # refresh (one flight in the worker, one in the parent) answers them all.
                echo.revoked.update(tokens_in(fake, "at-"))
                refused_before = echo.unauthorized
                texts = [f"call {i}" for i in range(64)]
                results = await asyncio.gather(
                    *(host.call_tool("echo", {"text": t}) for t in texts))
                assert [r.text for r in results] == texts
                assert echo.unauthorized - refused_before >= 1
                assert [r.grant for r in fake.token_requests] == [
                    "authorization_code", "refresh_token"]
                # No token, refresh token or client secret in anything the host reports
                # (a client_id is public, and a code is spent).
                secrets = [v for v in fake.issued if v.split("-")[0] in ("at", "rt", "secret")]
                shown = repr(host.servers()) + " ".join(
                    r.getMessage() for r in caplog.records)
                assert secrets and not any(secret in shown for secret in secrets)
    run(main())


def test_a_token_is_renewed_before_it_expires_not_after_a_refusal(no_leaks):
    echo = ProtectedEcho()

    async def main():
        async with FakeAuthServer(routes=[echo.route()], expires_in=4) as fake:
            echo.fake = fake
            async with OAuthClient(refresh_margin_s=3) as oauth, Host(oauth=oauth) as host:
                await host.add_server("protected", http(fake.server_url("mcp")))
                refused = echo.unauthorized
                assert (await host.call_tool("echo", {"text": "a"})).text == "a"
                await asyncio.sleep(2.5)  # past half of its 4 s lifetime: due
                assert (await host.call_tool("echo", {"text": "b"})).text == "b"
                assert [r.grant for r in fake.token_requests] == [
                    "authorization_code", "refresh_token"]
                assert echo.unauthorized == refused  # renewed before, never refused
                assert echo.seen_tokens[-1] == tokens_in(fake, "at-")[-1]
    run(main())


def test_without_an_oauth_client_a_401_is_an_authentication_failure(no_leaks):
    echo = ProtectedEcho()

    async def main():
        async with FakeAuthServer(routes=[echo.route()]) as fake:
            echo.fake = fake
            async with Host() as host:
                status = await host.add_server("protected", http(fake.server_url("mcp")))
                assert status.state.value == "unavailable"
                assert "authentication failed" in (status.reason or "")
                assert fake.token_requests == [] and fake.registrations == []
    run(main())


def test_a_refused_flow_leaves_the_server_unavailable_saying_why(no_leaks):
    """The protected resource metadata names another resource: no token is ever asked
    for, and the server's status says what was refused."""
    echo = ProtectedEcho()

    async def main():
        fake = FakeAuthServer(routes=[echo.route()])
        own_prm = fake._prm

        async def elsewhere(request: web.Request) -> web.Response:
            doc = orjson.loads((await own_prm(request)).body)
            doc["resource"] = "https://elsewhere.example/mcp"
            return web.json_response(doc)
        fake._prm = elsewhere  # type: ignore[method-assign]  # the fake answers from elsewhere
        async with fake:
            echo.fake = fake
            async with OAuthClient() as oauth, Host(oauth=oauth) as host:
                status = await host.add_server("protected", http(fake.server_url("mcp")))
                assert status.state.value == "unavailable"
                assert "elsewhere.example" in (status.reason or ""), status.reason
                assert fake.token_requests == [] and fake.authorizations == []
                assert fake.registrations == []
    run(main())


def test_a_restarted_host_refreshes_from_its_store_instead_of_authorizing_again(
        no_leaks, tmp_path):
    echo = ProtectedEcho()

    async def main():
        async with FakeAuthServer(routes=[echo.route()], expires_in=2) as fake:
            echo.fake = fake
            store = FileStore(tmp_path / "oauth")
            async with OAuthClient(store=store) as oauth, Host(oauth=oauth) as host:
                await host.add_server("protected", http(fake.server_url("mcp")))
                assert (await host.call_tool("echo", {"text": "before"})).text == "before"
            await asyncio.sleep(2.2)  # the host is gone, and so is its token's lifetime
            async with OAuthClient(store=FileStore(tmp_path / "oauth")) as oauth, \
                    Host(oauth=oauth) as host:
                status = await host.add_server("protected", http(fake.server_url("mcp")))
                assert status.state.value == "ready", status.reason
                assert (await host.call_tool("echo", {"text": "after"})).text == "after"
            assert len(fake.registrations) == 1 and len(fake.authorizations) == 1
            assert [r.grant for r in fake.token_requests] == [
                "authorization_code", "refresh_token"]
            assert echo.seen_tokens[-1] == tokens_in(fake, "at-")[-1]
    run(main())
