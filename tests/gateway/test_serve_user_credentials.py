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

import base64
import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

import realpeers
from conftest import run, scripted
from gateways import HttpGateway, last_document
from oidc import LOGIN_CLIENT, start_provider

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


async def start_gateway(path: Path, gateways: Any, provider: Any) -> HttpGateway:
    return await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                   "--oauth-scopes", SCOPE,
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
