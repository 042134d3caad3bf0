"""trunkline's OAuth client under the official MCP conformance suite's ``auth/*`` client
scenarios (run by tests/conformance/run_auth.sh).

AN INTERIM DRIVER. Until the Host API asks ``trunkline.auth.OAuthClient`` for tokens (a
worker's 401 goes to the parent over the channel: not wired yet), this file carries the
few MCP messages a scenario needs itself, over plain aiohttp, and hands every 401 and 403
to ``OAuthClient``. Everything OAuth (discovery, registration, PKCE, the redirect's
checks, tokens, refresh, step-up) is ``trunkline.auth``'s; nothing here knows a scenario's
quirks. When the Host API is wired, the auth scenarios move to tests/conformance/client.py
and this file goes.

The harness runs ``python auth_client.py <server URL>`` with:

* ``MCP_CONFORMANCE_SCENARIO``: the scenario, e.g. ``auth/metadata-default``;
* ``MCP_CONFORMANCE_PROTOCOL_VERSION``: ``2026-07-28`` (stateless: every request carries
  ``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name`` and its ``_meta``) or
  ``2025-11-25`` (``initialize``, ``notifications/initialized``, then the calls, with the
  session id if the server gives one); ``2025-11-25`` when unset;
* ``MCP_CONFORMANCE_CONTEXT``: JSON; ``client_id`` / ``client_secret`` are the
  pre-registered client (the client credentials grant for ``auth/client-credentials-*``).

What it does, as a host would: list the tools, call the first with ``{}``. The user-agent
step is ``HeadlessAuthorizer`` (the mock authorization servers approve at once and
redirect to the registered URI, where nothing listens). The Client ID Metadata Document URL
is the one the suite's authorization servers accept; it is never fetched.

Exit status 0 on success; otherwise 1, and the last stderr line says why (``FAIL: ...``).
Scenarios that test a refusal (``auth/resource-mismatch``, ``auth/iss-wrong-issuer``, ...)
expect exactly that.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import sys
from typing import Any

import aiohttp

from trunkline.auth import (
    AUTHORIZATION_CODE,
    CLIENT_CREDENTIALS,
    ClientSettings,
    HeadlessAuthorizer,
    OAuthClient,
    PreRegisteredClient,
    Secret,
    ServerAuth,
)
from trunkline.errors import TrunklineError
from trunkline.protocol.versions import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
)
from trunkline.version import VERSION

MODERN = "2026-07-28"
REDIRECT_URI = "http://localhost:3000/callback"
METADATA_DOCUMENT_URL = "https://conformance-test.local/client-metadata.json"
CLIENT_INFO = {"name": "trunkline-auth-conformance", "version": VERSION}
#: New attempts of one request after a challenge; ``OAuthClient`` bounds step-ups itself.
MAX_CHALLENGES = 3
TIMEOUT_S = 20.0  # below the harness's 30 s, so we report a hang ourselves


class ScenarioFailed(Exception):
    pass


def log(message: str) -> None:
    print(f"auth conformance client: {message}", file=sys.stderr, flush=True)


class McpOverHttp:
    """Just enough Streamable HTTP for the scenarios: JSON-RPC POSTs, answered with JSON
    or an SSE stream, each sent with the token ``OAuthClient`` has for the server."""

    def __init__(self, session: aiohttp.ClientSession, url: str, oauth: OAuthClient,
                 version: str) -> None:
        self.session = session
        self.url = url
        self.oauth = oauth
        self.version = version
        self.session_id: str | None = None
        self.ids = itertools.count(1)

    @property
    def modern(self) -> bool:
        return self.version == MODERN

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        params = dict(params or {})
        if self.modern:
            params["_meta"] = {META_PROTOCOL_VERSION: self.version,
                               META_CLIENT_CAPABILITIES: {}, META_CLIENT_INFO: CLIENT_INFO}
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        answer = await self._post(message)
        if answer is None:
            raise ScenarioFailed(f"{method}: no answer")
        if "error" in answer:
            raise ScenarioFailed(f"{method}: error {answer['error']}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise ScenarioFailed(f"{method}: malformed answer")
        return result

    async def notify(self, method: str) -> None:
        await self._post({"jsonrpc": "2.0", "method": method})

    async def _post(self, message: dict[str, Any]) -> dict[str, Any] | None:
        method = message["method"]
        sent = await self.oauth.authorization_for(self.url)
        for attempt in itertools.count():
            async with self.session.post(self.url, json=message,
                                         headers=self._headers(message, sent)) as response:
                if response.status in (401, 403) and attempt < MAX_CHALLENGES:
                    challenge = ", ".join(response.headers.getall("WWW-Authenticate", []))
                    await response.read()
                    log(f"{method}: HTTP {response.status}, asking the OAuth client")
                    sent = await self.oauth.on_challenge(self.url, response.status,
                                                         challenge or None, rejected=sent)
                    continue
                if response.status >= 400:
                    raise ScenarioFailed(f"{method}: HTTP {response.status}")
                if "Mcp-Session-Id" in response.headers:
                    self.session_id = response.headers["Mcp-Session-Id"]
                if "id" not in message:
                    return None
                body = await response.text()
                return self._answer(body, response.content_type, message["id"])
        raise AssertionError("unreachable")

    def _headers(self, message: dict[str, Any], authorization: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        if authorization:
            headers["Authorization"] = authorization
        if self.modern or message["method"] != "initialize":
            headers["MCP-Protocol-Version"] = self.version
        if self.modern:
            headers["Mcp-Method"] = message["method"]
            name = (message.get("params") or {}).get("name")
            if isinstance(name, str):
                headers["Mcp-Name"] = name
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    @staticmethod
    def _answer(body: str, content_type: str, request_id: int) -> dict[str, Any] | None:
        if content_type == "text/event-stream":
            events = ("".join(line[5:].lstrip() for line in block.splitlines()
                              if line.startswith("data:"))
                      for block in body.replace("\r\n", "\n").split("\n\n"))
            messages = [json.loads(data) for data in events if data]
        else:
            messages = [json.loads(body)] if body.strip() else []
        for answer in messages:
            if isinstance(answer, dict) and answer.get("id") == request_id:
                return answer
        return None


def oauth_client(server_url: str, scenario: str, context: dict[str, Any]) -> OAuthClient:
    servers: dict[str, ServerAuth] = {}
    client_id = context.get("client_id")
    if isinstance(client_id, str):
        secret = context.get("client_secret")
        client = PreRegisteredClient(client_id=client_id,
                                     client_secret=Secret(secret) if secret else None)
        grant = (CLIENT_CREDENTIALS if scenario.startswith("auth/client-credentials")
                 else AUTHORIZATION_CODE)
        servers[server_url] = ServerAuth(client=client, grant=grant)
    settings = ClientSettings(client_name="trunkline-auth-conformance", redirect_uri=REDIRECT_URI,
                              metadata_document_url=METADATA_DOCUMENT_URL)
    return OAuthClient(settings=settings, servers=servers, authorizer=HeadlessAuthorizer(),
                       timeout_s=TIMEOUT_S)


async def run(server_url: str, scenario: str, version: str, context: dict[str, Any]) -> None:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with (oauth_client(server_url, scenario, context) as oauth,
                aiohttp.ClientSession(timeout=timeout) as session):
        mcp = McpOverHttp(session, server_url, oauth, version)
        if not mcp.modern:
            result = await mcp.call("initialize", {"protocolVersion": version, "capabilities": {},
                                                   "clientInfo": CLIENT_INFO})
            log(f"initialized: {result.get('protocolVersion')}")
            await mcp.notify("notifications/initialized")
        tools = (await mcp.call("tools/list")).get("tools") or []
        log(f"tools: {[t.get('name') for t in tools]}")
        if tools:
            await mcp.call("tools/call", {"name": tools[0]["name"], "arguments": {}})
            log(f"called {tools[0]['name']}")


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="auth conformance client: %(name)s: %(message)s")
    server_url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or "2025-11-25"
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    log(f"scenario {scenario or '(none)'} at {version} against {server_url}")
    try:
        asyncio.run(asyncio.wait_for(run(server_url, scenario, version, context), TIMEOUT_S))
    except (TrunklineError, ScenarioFailed, aiohttp.ClientError, TimeoutError) as exc:
        log(f"FAIL: {type(exc).__name__}: {exc}")
        return 1
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
