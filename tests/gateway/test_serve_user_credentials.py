"""Each user's own credentials upstream, end to end: ``trunkline serve --http`` in front of an
OAuth-protected upstream (itself a ``trunkline serve --http`` with the same real OpenID
Connect provider as its authorization server, a policy that shows each user other tools,
and an audit trail that records who each call came from), used by two users through the
official ``mcp`` 2.x and 1.x clients. Each user signs in through the gateway by URL-mode
elicitation (the client follows the URL as a browser would, through the provider's login
form), each upstream call carries that user's token only, one user's private listing
never reaches the other, revoking one user's credential affects that user only, and a
restarted gateway keeps both sign-ins (the sealed store). Also: ``exchange`` (RFC 8693 at
the caller's issuer), and sign-in links, states and callbacks that must be refused."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import realpeers
from conftest import run, scripted
from gateways import HttpGateway, last_document, modern_meta
from oidc import LOGIN_CLIENT, start_provider
from trunkline.auth.configured import token_store_from
from trunkline.auth.resource import canonical_uri
from trunkline.auth.sealing import StoreKeys
from trunkline.auth.user_store import UserTokenStore
from trunkline.config import load_oauth_config
from trunkline.policy.identity import OAUTH, Identity

PEERS = Path(__file__).resolve().parent.parent / "peers"
SCOPE = "mcp:tools"
#: What the upstream asks of its tokens: the provider's login (OpenID Connect) needs
#: ``openid`` in every authorization request.
UPSTREAM_SCOPES = "openid mcp:tools"
CLIENT_ID = "trunkline-gateway"
#: What the upstream shows each user (its policy): alice every tool, bob ``echo`` alone.
UPSTREAM_POLICY = {"rules": [
    {"id": "alice-all", "allow": ["list", "call"], "tools": ["*"],
     "when": "identity.subject == 'alice'"},
    {"id": "bob-echo", "allow": ["list", "call"], "tools": ["echo"],
     "when": "identity.subject == 'bob'"},
]}
STORE_KEY = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


@pytest.fixture(scope="module")
def provider():
    started = start_provider(interactive=True)
    yield started
    started.stop()


async def start_upstream(tmp_path: Path, gateways: Any, provider: Any) -> tuple[HttpGateway, Path]:
    """The protected upstream: the scripted echo server behind a gateway of its own that
    takes the provider's tokens, decides by their subject, and audits every call."""
    path = tmp_path / "upstream.json"
    echo = scripted()
    path.write_text(json.dumps({
        "mcpServers": {"tools": {"command": echo.command, "args": list(echo.args),
                                 "enabledTools": ["echo", "search", "sleep"]}},
        "policy": UPSTREAM_POLICY}))
    trail = tmp_path / "upstream-audit.jsonl"
    gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                 "--oauth-scopes", UPSTREAM_SCOPES, "--audit", str(trail))
    return gw, trail


def gateway_config(tmp_path: Path, upstream: HttpGateway, mode: str = "per_user") -> Path:
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({
        "mcpServers": {"tracker": {"url": upstream.url, "credentials": mode,
                                   "oauth": {"clientId": CLIENT_ID}}},
        "oauth": {"store": str(tmp_path / "store"), "exchangeClient": {"clientId": CLIENT_ID},
                  "signInClient": {"clientId": LOGIN_CLIENT}}}))
    return path


async def start_gateway(path: Path, gateways: Any, provider: Any,
                        bind: str = "127.0.0.1:0") -> HttpGateway:
    """``bind``: a restarted gateway's address is its first one's (its callers' tokens
    are for that URL)."""
    return await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                   "--oauth-scopes", SCOPE, bind=bind,
                                   env={"TRUNKLINE_STORE_KEY": STORE_KEY})


async def audited(trail: Path) -> list[dict[str, Any]]:
    if not trail.exists():
        return []
    return [json.loads(line) for line in trail.read_text().splitlines() if line.strip()]


def sdk_venv(sdk: str) -> Path:
    if sdk == "mcp-2":
        realpeers.require(realpeers.MODERN_PY_ECHO)
        return realpeers.PY_MODERN_VENV
    realpeers.require(realpeers.LEGACY_PY_TIME)
    return realpeers.PY_LEGACY_VENV


async def sdk_client(sdk: str, url: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
    venv = sdk_venv(sdk)
    return await last_document(str(venv / "bin" / "python"), str(PEERS / "sdk_sign_in_client.py"),
                               url, timeout=180,
                               env={**os.environ, "SDK_SIGN_IN_PLAN": json.dumps(plan)})


def login(user: str, upstream: HttpGateway) -> dict[str, Any]:
    """What the user types into the provider's login form: their name there, and the
    audience and scopes the upstream takes (the provider's own form lets one set claims)."""
    return {"username": user,
            "claims": {CLIENT_ID: {"aud": upstream.url, "scope": UPSTREAM_SCOPES}}}


def texts(outcome: dict[str, Any]) -> str:
    assert "result" in outcome, outcome
    return "".join(b.get("text", "") for b in outcome["result"]["content"])


@pytest.mark.parametrize("sdk", ["mcp-2", "mcp-1"])
def test_each_user_signs_in_through_the_gateway_and_calls_as_themselves(
        gateways, tmp_path, provider, sdk):
    async def main():
        upstream, trail = await start_upstream(tmp_path, gateways, provider)
        gw = None
        try:
            gw = await start_gateway(gateway_config(tmp_path, upstream), gateways, provider)
            tokens = {user: await provider.token(gw.url, SCOPE, client_id=user)
                      for user in ("alice", "bob")}
            plan = [{"bearer": tokens[user], "login": login(user, upstream),
                     "steps": [["list"], ["call", "sign_in", {}], ["list"],
                               ["call", "echo", {"text": f"from {user}"}],
                               ["call", "search", {"query": "q", "limit": 1}]]}
                    for user in ("alice", "bob")]
            done = await sdk_client(sdk, gw.url, plan)
            alice, bob = done["users"]
            # Not signed in: the server's one tool is its sign-in.
            assert alice["steps"][0] == ["sign_in"] and bob["steps"][0] == ["sign_in"]
            for user, seen in (("alice", alice), ("bob", bob)):
                [asked] = seen["asked"]
                assert asked["params"]["mode"] == "url", asked
                assert asked["params"]["url"].startswith(f"{gw.base}/signin/"), asked
                statuses = [page[0] for page in asked["pages"]]
                assert statuses[0] == 302 and statuses[-1] == 200, asked["pages"]
                # The browser proved its user at the gateway's issuer before going upstream.
                assert f"{gw.base}/signin/checked" in [page[1] for page in asked["pages"]]
                assert "signed in" in asked["pages"][-1][2].lower(), asked["pages"]
                assert "signed in" in texts(seen["steps"][1]).lower(), seen["steps"][1]
                assert json.loads(texts(seen["steps"][3])) == {"text": f"from {user}"}, \
                    seen["steps"][3]
            # Each user's private listing: alice's three tools, bob's one; bob's search
            # is a tool he was never shown.
            assert alice["steps"][2] == ["echo", "search", "sleep"], alice["steps"]
            assert bob["steps"][2] == ["echo"], bob["steps"]
            assert "result" in alice["steps"][4], alice["steps"][4]
            assert "error" in bob["steps"][4], bob["steps"][4]
            # The upstream saw each call as the user who made it, and nobody else.
            calls = [r for r in await audited(trail) if r.get("action") == "tools/call"]
            seen_as = {(r["identity"]["subject"], r.get("target")) for r in calls
                       if r.get("decision") == "allowed"}
            assert ("alice", "echo") in seen_as and ("bob", "echo") in seen_as, calls
            assert ("alice", "search") in seen_as, calls
            assert {r["identity"]["subject"] for r in calls} == {"alice", "bob"}, calls
            assert STORE_KEY not in gw.stderr.decode(errors="replace")
        finally:
            if gw is not None:
                await gw.stop()
            await upstream.stop()
    run(main())


def step_texts(user: dict[str, Any]) -> list[Any]:
    """A user's steps: listings as they are, call results as their texts (errors as is)."""
    return [step if isinstance(step, list) or "error" in step else texts(step)
            for step in user["steps"]]


async def credentials_cli(*argv: str, config: Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trunkline", "credentials", *argv, str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TRUNKLINE_STORE_KEY": STORE_KEY})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


def test_sign_ins_outlive_a_restart_and_revoking_one_user_leaves_the_other(
        gateways, tmp_path, provider):
    async def main():
        upstream, trail = await start_upstream(tmp_path, gateways, provider)
        config = gateway_config(tmp_path, upstream)
        gw = None
        try:
            gw = await start_gateway(config, gateways, provider)
            tokens = {user: await provider.token(gw.url, SCOPE, client_id=user)
                      for user in ("alice", "bob")}
            signing_in = [{"bearer": tokens[user], "login": login(user, upstream),
                           "steps": [["call", "sign_in", {}]]} for user in ("alice", "bob")]
            first = await sdk_client("mcp-2", gw.url, signing_in)
            assert all("signed in" in texts(u["steps"][0]).lower() for u in first["users"])
            address = gw.url.split("//")[1].split("/")[0]
            await gw.stop()
            # A new gateway process: both users' tokens come from the sealed store, and
            # nobody is asked to sign in (a client that would decline any elicitation).
            gw = await start_gateway(config, gateways, provider, bind=address)
            again = [{"bearer": tokens[user], "login": None,
                      "steps": [["list"], ["call", "echo", {"text": user}]]}
                     for user in ("alice", "bob")]
            alice, bob = (await sdk_client("mcp-2", gw.url, again))["users"]
            assert alice["steps"][0] == ["echo", "search", "sleep"] and not alice["asked"]
            assert bob["steps"][0] == ["echo"] and not bob["asked"]
            assert json.loads(texts(alice["steps"][1])) == {"text": "alice"}
            assert json.loads(texts(bob["steps"][1])) == {"text": "bob"}
            said = {(r["identity"]["subject"], r["target"]) for r in await audited(trail)
                    if r.get("action") == "tools/call"}
            assert said == {("alice", "echo"), ("bob", "echo")}, said
            await gw.stop()
            gw = None
            # The operator revokes alice's credentials: bob's stay.
            listed = await credentials_cli("list", config=config)
            assert "oauth:alice@" in listed and "oauth:bob@" in listed
            for token in tokens.values():
                assert token not in listed
            await credentials_cli("revoke", "--user", f"oauth:alice@{provider.issuer}",
                                  config=config)
            listed = await credentials_cli("list", config=config)
            assert "oauth:alice@" not in listed and "oauth:bob@" in listed
            gw = await start_gateway(config, gateways, provider, bind=address)
            alice, bob = (await sdk_client("mcp-2", gw.url, again))["users"]
            assert alice["steps"][0] == ["sign_in"], alice
            assert "error" in alice["steps"][1], alice
            assert bob["steps"][0] == ["echo"]
            assert json.loads(texts(bob["steps"][1])) == {"text": "bob"}
            # The store holds no token in clear.
            stored = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*")
                              if p.is_file())
            for token in tokens.values():
                assert token.encode() not in stored
        finally:
            if gw is not None:
                await gw.stop()
            await upstream.stop()
    run(main())


async def stored_token(config: Path, user: str, provider: Any, upstream: HttpGateway) -> Any:
    """The token the gateway's store holds for ``user`` at the upstream, if any."""
    store = token_store_from(load_oauth_config(config),
                             StoreKeys.from_environment({"TRUNKLINE_STORE_KEY": STORE_KEY}))
    binding = await UserTokenStore(store, Identity(OAUTH, user, provider.issuer)).load(
        canonical_uri(upstream.url))
    return None if binding is None else binding.token


class Browser:
    """A browser of the test's own, to follow the sign-in pages step by step (cookies
    kept, redirects not followed)."""

    def __init__(self) -> None:
        self.http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def get(self, url: str) -> tuple[int, str, str]:
        async with self.http.get(url, allow_redirects=False) as page:
            return page.status, page.headers.get("Location", ""), await page.text()

    async def log_in(self, url: str, user: str, claims: dict[str, Any]) -> str:
        """The provider's login form at ``url`` filled for ``user``: where it sends the
        browser."""
        async with self.http.post(url, data={"username": user, "claims": json.dumps(claims)},
                                  allow_redirects=False) as page:
            assert page.status == 302, await page.text()
            return page.headers["Location"]

    async def close(self) -> None:
        await self.http.close()


async def asked_to_sign_in(gw: HttpGateway, token: str) -> tuple[str, str]:
    """A 2026-07-28 call of the sign-in tool: the URL it asks the user to open, and the
    round's requestState."""
    meta = modern_meta(**{"io.modelcontextprotocol/clientCapabilities":
                          {"elicitation": {"url": {}}}})
    message = gw.message("tools/call", {"name": "sign_in", "arguments": {}, "_meta": meta})
    headers = gw.modern_headers(message)
    headers["Authorization"] = f"Bearer {token}"
    status, answer, _ = await gw.post(message, headers)
    assert status == 200, answer
    result = answer["result"]
    assert result["resultType"] == "input_required", result
    [request] = result["inputRequests"].values()
    return request["params"]["url"], result["requestState"]


async def continued(gw: HttpGateway, token: str, state: str) -> dict[str, Any]:
    meta = modern_meta(**{"io.modelcontextprotocol/clientCapabilities":
                          {"elicitation": {"url": {}}}})
    message = gw.message("tools/call", {
        "name": "sign_in", "arguments": {}, "_meta": meta, "requestState": state,
        "inputResponses": {"sign-in": {"action": "accept"}}})
    headers = gw.modern_headers(message)
    headers["Authorization"] = f"Bearer {token}"
    _, answer, _ = await gw.post(message, headers)
    return answer


def test_sign_ins_replayed_forged_or_misdirected_are_refused_and_store_nothing(
        gateways, tmp_path, provider):
    async def main():
        upstream, _trail = await start_upstream(tmp_path, gateways, provider)
        config = gateway_config(tmp_path, upstream)
        gw = None
        browser = Browser()
        try:
            gw = await start_gateway(config, gateways, provider)
            alice = await provider.token(gw.url, SCOPE, client_id="alice")
            bob = await provider.token(gw.url, SCOPE, client_id="bob")
            # A client that declared no URL elicitation is told the link in the error.
            message = gw.message("tools/call", {"name": "sign_in", "arguments": {},
                                                "_meta": modern_meta()})
            headers = gw.modern_headers(message)
            headers["Authorization"] = f"Bearer {alice}"
            _, answer, _ = await gw.post(message, headers)
            assert f"{gw.base}/signin/" in answer["error"]["message"], answer
            assert "call again" in answer["error"]["message"], answer
            url, state = await asked_to_sign_in(gw, alice)
            # Bob's client offers alice's round as its own: refused, nothing waited for.
            refused = await continued(gw, bob, state)
            assert refused["error"]["code"] == -32003, refused
            # A callback with a state nobody issued.
            status, _, page = await browser.get(
                f"{gw.base}/oauth/callback?code=made-up&state=forged")
            assert status == 400 and "unknown" in page
            # Bob opens alice's link: his browser proves it is bob's, and the sign-in is
            # cancelled before it reaches the upstream's authorization server.
            status, login_url, _ = await browser.get(url)
            assert status == 302 and login_url.startswith(provider.issuer), login_url
            status, _, page = await browser.get(await browser.log_in(login_url, "bob", {}))
            assert status == 403 and "another user" in page, page
            status, _, page = await browser.get(url)
            assert status == 400, page  # the link opened once
            # Alice's round now finds her sign-in gone: she is asked again.
            again = await continued(gw, alice, state)
            assert again.get("result", {}).get("resultType") == "input_required", again
            # Her new link, through her own login, to the upstream's authorization server;
            # a redirect back that names another issuer is refused (RFC 9207), and the
            # same redirect again finds its state spent.
            url = next(iter(again["result"]["inputRequests"].values()))["params"]["url"]
            fresh = Browser()
            try:
                _, login_url, _ = await fresh.get(url)
                checked = await fresh.log_in(login_url, "alice", {})
                status, upstream_login, _ = await fresh.get(checked)
                assert status == 302 and f"client_id={CLIENT_ID}" in upstream_login
                back = await fresh.log_in(upstream_login, "alice",
                                          {"aud": upstream.url, "scope": UPSTREAM_SCOPES})
                assert back.startswith(f"{gw.base}/oauth/callback?"), back
                status, _, page = await fresh.get(f"{back}&iss=https%3A%2F%2Fevil.example")
                assert status == 400 and "failed" in page.lower(), page
                status, _, page = await fresh.get(back)
                assert status == 400 and "already complete" in page, page
            finally:
                await fresh.close()
            # Nothing refused left a token for either of them.
            assert await stored_token(config, "alice", provider, upstream) is None
            assert await stored_token(config, "bob", provider, upstream) is None
        finally:
            await browser.close()
            if gw is not None:
                await gw.stop()
            await upstream.stop()
    run(main())


def test_an_exchange_server_gets_each_callers_token_traded_at_its_issuer(
        gateways, tmp_path, provider):
    async def main():
        # An upstream that takes tokens for itself only (no scope asked of them).
        path = tmp_path / "ledger.json"
        echo = scripted()
        path.write_text(json.dumps({"mcpServers": {"tools": {
            "command": echo.command, "args": list(echo.args), "enabledTools": ["echo"]}}}))
        trail = tmp_path / "ledger-audit.jsonl"
        upstream = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                           "--audit", str(trail))
        gw = None
        try:
            config = tmp_path / "gateway.json"
            config.write_text(json.dumps({
                "mcpServers": {"ledger": {"url": upstream.url, "credentials": "exchange"}},
                "oauth": {"store": str(tmp_path / "store"),
                          "exchangeClient": {"clientId": CLIENT_ID,
                                             "clientSecretEnv": "EXCHANGE_SECRET"}}}))
            gw = await HttpGateway.start(
                config, gateways, "--oauth-issuer", provider.issuer, "--oauth-scopes", SCOPE,
                env={"TRUNKLINE_STORE_KEY": STORE_KEY, "EXCHANGE_SECRET": "not-checked"})
            plan = [{"bearer": await provider.token(gw.url, SCOPE, client_id=user),
                     "login": None, "steps": [["list"], ["call", "echo", {"text": user}]]}
                    for user in ("alice", "bob")]
            alice, bob = (await sdk_client("mcp-2", gw.url, plan))["users"]
            for user, seen in (("alice", alice), ("bob", bob)):
                assert seen["steps"][0] == ["echo"], seen
                assert json.loads(texts(seen["steps"][1])) == {"text": user}
                assert not seen["asked"]  # nobody signs in: their own tokens are traded
            said = [(r["identity"]["subject"], r["target"]) for r in await audited(trail)
                    if r.get("action") == "tools/call"]
            assert sorted(said) == [("alice", "echo"), ("bob", "echo")], said
        finally:
            if gw is not None:
                await gw.stop()
            await upstream.stop()
    run(main())
