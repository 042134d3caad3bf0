"""``trunkline serve --http --oauth-issuer URL``: the gateway as an OAuth protected
resource, end to end against a real OpenID Connect provider (mock-oauth2-server, run
locally: tests/oidc.py) whose tokens a client fetches and presents: discovery from the
401, a good token served, every bad one refused as the specification says, and the
downstream token never passed upstream."""

from __future__ import annotations

import asyncio
import json
import re

import orjson
import pytest

from conftest import run, scripted
from gateways import HttpGateway, fleet_config, modern_meta
from httppeers import http_peer  # noqa: F401 - a fixture
from httppeers import scripted as http_scripted
from oidc import start_provider

SCOPE = "mcp:tools"


@pytest.fixture(scope="module")
def provider():
    started = start_provider()
    yield started
    started.stop()


def challenge_params(header: str) -> dict[str, str]:
    assert header.startswith("Bearer "), header
    return dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', header))


async def list_tools(gw: HttpGateway, token: str | None) -> tuple[int, object, object]:
    message = gw.message("tools/list", {"_meta": modern_meta()})
    headers = gw.modern_headers(message)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return await gw.post(message, headers)


def test_a_client_discovers_the_issuer_from_the_401_and_its_token_is_served(
        gateways, tmp_path, provider, http_peer):
    record = tmp_path / "upstream.jsonl"
    upstream = http_peer(*http_scripted("--record", str(record)))
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "local": {"command": scripted().command, "args": list(scripted().args)},
        "remote": {"url": upstream.url}}}))

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                     "--oauth-scopes", SCOPE)
        # No token: 401, and the header says where the metadata is.
        status, answer, headers = await list_tools(gw, None)
        assert status == 401 and "error" in answer
        params = challenge_params(headers["WWW-Authenticate"])
        assert "error" not in params and params["scope"] == SCOPE
        assert params["resource_metadata"] == f"{gw.base}/.well-known/oauth-protected-resource/mcp"
        async with gw.http.get(params["resource_metadata"]) as response:
            assert response.status == 200
            prm = await response.json()
        assert prm["resource"] == gw.url
        assert prm["authorization_servers"] == [provider.issuer]
        assert prm["scopes_supported"] == [SCOPE]
        async with gw.http.get(f"{gw.base}/.well-known/oauth-protected-resource") as response:
            assert response.status == 200 and await response.json() == prm
        # The client follows it to the issuer, and gets a token for this resource.
        [issuer] = prm["authorization_servers"]
        async with gw.http.get(f"{issuer}/.well-known/openid-configuration") as response:
            assert (await response.json())["issuer"] == issuer
        token = await provider.token(prm["resource"], SCOPE)
        status, listed, _ = await list_tools(gw, token)
        assert status == 200, listed
        names = [t["name"] for t in listed["result"]["tools"]]
        assert "local_echo" in names and "remote_echo" in names, names
        call = gw.message("tools/call", {"name": "remote_echo", "arguments": {"text": "hi"},
                                         "_meta": modern_meta()})
        status, called, _ = await gw.post(call, {**gw.modern_headers(call),
                                                 "Authorization": f"Bearer {token}"})
        assert status == 200 and called["result"]["content"][0]["text"] == "hi", called
        assert await gw.stop() == 0
        return token, gw.stderr
    token, stderr = run(main())
    # No token passthrough: the server behind never saw the client's Authorization.
    seen = [r for r in upstream.records() if "headers" in r]
    assert seen and any(r["body"] and r["body"].get("method") == "tools/call" for r in seen)
    assert not any("authorization" in r["headers"] for r in seen), seen[0]["headers"]
    assert token.split(".")[2].encode() not in stderr


def test_bad_tokens_are_refused_and_the_gateway_goes_on(gateways, tmp_path, provider):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                     "--oauth-scopes", SCOPE)
        good = await provider.token(gw.url, SCOPE)
        header, payload, signature = good.split(".")
        # A signature changed in its middle (the last character may carry only padding).
        middle = len(signature) // 2
        tampered = signature[:middle] + ("A" if signature[middle] != "A" else "B") \
            + signature[middle + 1:]
        unsigned = orjson.dumps({"alg": "none", "typ": "JWT"})
        import base64

        def b64(raw: bytes) -> str:
            return base64.urlsafe_b64encode(raw).decode().rstrip("=")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["scope"] = f"{SCOPE} admin"
        refused = {
            "wrong audience": await provider.token("http://127.0.0.1:1/mcp", SCOPE),
            "expired": await provider.token(gw.url, SCOPE, client_id="expired"),
            "wrong issuer": await provider.token(gw.url, SCOPE, client_id="elsewhere"),
            "tampered signature": f"{header}.{payload}.{tampered}",
            "claims changed under the signature":
                f"{header}.{b64(orjson.dumps(claims))}.{signature}",
            "alg none": f"{b64(unsigned)}.{payload}.",
            "garbage": "not-a-jwt",
            "three garbage parts": "a.b.c",
            "huge": "A" * 20_000 + "." + payload + "." + signature,
        }
        for what, token in refused.items():
            status, answer, headers = await list_tools(gw, token)
            assert status == 401, (what, status, answer)
            params = challenge_params(headers["WWW-Authenticate"])
            assert params["error"] == "invalid_token", (what, params)
            assert params["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
            assert token not in json.dumps(answer) and token not in headers["WWW-Authenticate"]
        # Another scheme is no token at all.
        status, _, headers = await gw.post(*_with(gw, "Basic YWxpY2U6c2VjcmV0"))
        assert status == 401 and "error" not in challenge_params(headers["WWW-Authenticate"])
        # A good token without the scope the gateway requires: 403 naming it.
        status, answer, headers = await list_tools(gw, await provider.token(gw.url, "other"))
        assert status == 403, answer
        params = challenge_params(headers["WWW-Authenticate"])
        assert params["error"] == "insufficient_scope" and params["scope"] == SCOPE
        # Still serving the good one.
        status, answer, _ = await list_tools(gw, good)
        assert status == 200 and "result" in answer
        assert await gw.stop() == 0
        return [good, *refused.values()], gw.stderr
    tokens, stderr = run(main())
    for token in tokens:
        assert not any(part.encode() in stderr for part in token.split(".") if len(part) > 8)


def _with(gw: HttpGateway, authorization: str) -> tuple[dict, dict]:
    message = gw.message("tools/list", {"_meta": modern_meta()})
    return message, {**gw.modern_headers(message), "Authorization": authorization}


def test_an_issuer_whose_keys_cannot_be_had_is_503_not_401(gateways, tmp_path, provider):
    """The token may well be good: a 401 would send the client to re-authorize at an
    issuer that is down. The gateway says so with 503 and Retry-After, and goes on."""
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.dead_issuer)
        token = await provider.token(gw.url, SCOPE, client_id="stranded")
        for _ in range(3):
            status, answer, headers = await list_tools(gw, token)
            assert status == 503 and headers["Retry-After"].isdigit(), (status, answer)
        async with gw.http.get(f"{gw.base}/healthz") as response:
            assert response.status == 200
        assert await gw.stop() == 0
    run(main())


def test_api_keys_and_tokens_together(gateways, tmp_path, provider):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    key = "sk-trunkline-oauth-test-0123456789"

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                     env={"TRUNKLINE_API_KEYS": key})
        assert (await list_tools(gw, key))[0] == 200
        assert (await list_tools(gw, await provider.token(gw.url, "other")))[0] == 200
        status, _, headers = await list_tools(gw, "sk-wrong")
        assert status == 401 and "resource_metadata" in headers["WWW-Authenticate"]
        assert await gw.stop() == 0
    run(main())


def test_oauth_on_a_public_bind_needs_the_resource_url(gateways, tmp_path, provider):
    import subprocess
    import sys

    path = fleet_config(tmp_path, {"alpha": scripted()})
    done = subprocess.run([sys.executable, "-m", "trunkline", "serve", str(path), "--http",
                           "0.0.0.0:0", "--oauth-issuer", provider.issuer],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--oauth-resource" in done.stderr


@pytest.mark.real_servers
def test_the_official_python_sdk_client_with_a_bearer_token(gateways, tmp_path, provider):
    import realpeers
    from conftest import PEERS

    path = fleet_config(tmp_path, {"alpha": scripted(), "beta": scripted("--name", "beta")})
    python = realpeers.PEERS_DIR / "py-modern" / "bin" / "python"

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                     "--oauth-scopes", SCOPE)
        token = await provider.token(gw.url, SCOPE)
        client = await asyncio.create_subprocess_exec(
            str(python), str(PEERS / "sdk_client.py"), "beta_echo", json.dumps({"k": 1}),
            "--", gw.url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**__import__("os").environ, "SDK_CLIENT_BEARER": token})
        out, err = await asyncio.wait_for(client.communicate(), 120)
        assert client.returncode == 0, err.decode()[-3000:]
        assert await gw.stop() == 0
        return json.loads(out.decode().strip().splitlines()[-1])
    done = run(main())
    assert "beta_echo" in done["tools"]
    assert json.loads(done["result"]["content"][0]["text"]) == {"k": 1}


def test_key_rotation_and_a_flood_of_unknown_key_ids(gateways, tmp_path):
    """mock-oauth2-server keeps one key per issuer for its life, so the rotation is our
    own issuer's (tests/oidc.py ``OwnIssuer``); the gateway is the real one."""
    import time

    from joserfc import jwt
    from joserfc.jwk import RSAKey

    from oidc import OwnIssuer

    first = RSAKey.generate_key(2048, parameters={"kid": "first"})
    second = RSAKey.generate_key(2048, parameters={"kid": "second"})
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        issuer = await OwnIssuer([first]).start()
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", issuer.issuer)

        def token(key, kid=None):
            now = int(time.time())
            return jwt.encode({"alg": "RS256", "kid": kid or key.kid},
                              {"iss": issuer.issuer, "aud": gw.url, "sub": "bob",
                               "exp": now + 300, "iat": now}, key)
        try:
            assert (await list_tools(gw, token(first)))[0] == 200
            assert issuer.jwks_fetches == 1
            # Made-up key ids, many at once: refused, and the issuer is not hammered.
            stranger = RSAKey.generate_key(2048)
            statuses = await asyncio.gather(*(list_tools(gw, token(stranger, f"kid-{i}"))
                                              for i in range(100)))
            assert {s for s, _, _ in statuses} == {401}
            assert issuer.jwks_fetches == 1, "within the interval: no refetch"
            # The issuer rotates: the new key is fetched once the interval allows.
            issuer.keys = [second]
            rotated = token(second)
            started = time.monotonic()
            while (await list_tools(gw, rotated))[0] != 200:
                assert time.monotonic() - started < 45, "the rotated key was never fetched"
                await asyncio.sleep(1)
            assert issuer.jwks_fetches == 2
            assert (await list_tools(gw, token(first)))[0] == 401, "the old key is gone"
            # The issuer goes down: the keys the gateway has still serve.
            issuer.mode = "down"
            assert (await list_tools(gw, rotated))[0] == 200
            assert await gw.stop() == 0
        finally:
            await issuer.stop()
    run(main())


def test_a_legacy_session_answers_only_the_identity_that_opened_it(gateways, tmp_path,
                                                                   provider):
    """Session hijacking (the specification's security best practices): a legacy session
    id carries a digest of its opener's ``(iss, sub)``; another valid token with it is as
    good as an unknown session, 404."""
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer)
        alice = {"Authorization": f"Bearer {await provider.token(gw.url, SCOPE, 'alice')}"}
        bob = {"Authorization": f"Bearer {await provider.token(gw.url, SCOPE, 'bob')}"}
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        init = gw.message("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "old", "version": "1"}})
        status, answer, got = await gw.post(init, {**headers, **alice})
        assert status == 200 and "result" in answer
        session = {**headers, "Mcp-Session-Id": got["Mcp-Session-Id"],
                   "MCP-Protocol-Version": "2025-11-25"}
        assert "alice" not in got["Mcp-Session-Id"]
        listing = gw.message("tools/list", {})
        status, answer, _ = await gw.post(listing, {**session, **alice})
        assert status == 200 and "result" in answer
        status, answer, _ = await gw.post(gw.message("tools/list", {}), {**session, **bob})
        assert status == 404, answer
        status, answer, _ = await gw.post(gw.message("tools/list", {}), session)
        assert status == 401
        assert await gw.stop() == 0
    run(main())


def test_no_listing_is_shared_between_identities(gateways, tmp_path, provider):
    """The servers behind are reached with the gateway's own credentials (never a
    client's token), so there is one authorization context upstream and one catalog; what
    each user is served is marked ``private`` with ``ttlMs`` 0, so no cache between a
    client and the gateway may hand one user's answer to another."""
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer)
        answers = {}
        for user in ("alice", "bob"):
            token = await provider.token(gw.url, SCOPE, user)
            for method in ("tools/list", "prompts/list", "resources/list"):
                message = gw.message(method, {"_meta": modern_meta()})
                headers = {**gw.modern_headers(message), "Authorization": f"Bearer {token}"}
                status, answer, _ = await gw.post(message, headers)
                assert status == 200, answer
                result = answer["result"]
                assert (result["cacheScope"], result["ttlMs"]) == ("private", 0), (user, method)
                answers[user, method] = result
        assert answers["alice", "tools/list"]["tools"] == answers["bob", "tools/list"]["tools"]
        assert await gw.stop() == 0
    run(main())
