"""``trunkline login`` and the configuration file's OAuth: a person signs in once (the
loopback listener gets the browser's redirect), then ``call`` and ``tools`` use the stored
token; without a sign-in they fail saying which command signs in. The CLI runs as a real
subprocess; the browser is the test, following the authorization server's redirect."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from oauth_fakes import FakeAuthServer
from test_auth_host import ProtectedEcho, tokens_in

from conftest import run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_file(tmp_path: Path, url: str, store: str = "tokens") -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({
        "oauth": {"store": store, "clientName": "cli-test",
                  "redirectUri": f"http://127.0.0.1:{free_port()}/callback"},
        "mcpServers": {"tracker": {"url": url}}}))
    return path


async def trunkline(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trunkline", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def sign_in(path: Path) -> tuple[int, str, str]:
    """``trunkline login``, with the test as the person at the browser."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trunkline", "login", str(path), "tracker", "--no-browser",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    shown = b""
    try:
        line = b""
        while not line.startswith(b"http"):  # the sign-in URL, on a line of its own
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, (shown, await proc.stderr.read())
            shown += line
        url = line.decode().strip()
        async with aiohttp.ClientSession() as browser, browser.get(url) as page:
            assert page.status == 200 and "Signed in" in await page.text()
        rest, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, (shown + rest).decode(), err.decode()


@contextlib.asynccontextmanager
async def signed_in(tmp_path: Path) -> AsyncIterator[tuple[ProtectedEcho, FakeAuthServer, Path]]:
    """A protected echo server, its authorization server, and a configuration file whose
    store holds the token a person got with ``trunkline login``."""
    echo = ProtectedEcho()
    async with FakeAuthServer(routes=[echo.route()]) as fake:
        echo.fake = fake
        path = config_file(tmp_path, fake.server_url("mcp"))
        code, out, err = await sign_in(path)
        assert code == 0, err
        assert "Signed in to tracker" in out
        yield echo, fake, path


def test_a_person_signs_in_once_and_the_commands_use_the_stored_token(no_leaks, tmp_path):
    async def main():
        async with signed_in(tmp_path) as (_echo, fake, path):
            assert len(fake.authorizations) == 1 and len(fake.token_requests) == 1
            [record] = list((tmp_path / "tokens").iterdir())
            assert stat.S_IMODE(os.stat(record).st_mode) == 0o600
            code, out, err = await trunkline("call", str(path), "echo", '{"text": "hi"}')
            assert code == 0 and "hi" in out, err
            code, out, err = await trunkline("tools", str(path))
            assert code == 0 and "echo" in out, err
            # Nothing more was asked of a person or of the token endpoint.
            assert len(fake.authorizations) == 1 and len(fake.token_requests) == 1
            for secret in (v for v in fake.issued if v.split("-")[0] in ("at", "rt", "secret")):
                assert secret not in out + err
    run(main())


def test_without_a_sign_in_a_command_says_which_command_signs_in(no_leaks, tmp_path):
    echo = ProtectedEcho()

    async def main():
        async with FakeAuthServer(routes=[echo.route()]) as fake:
            echo.fake = fake
            path = config_file(tmp_path, fake.server_url("mcp"), store="empty")
            code, out, err = await trunkline("call", str(path), "echo", '{"text": "hi"}')
            assert code != 0
            assert "trunkline login" in out + err, out + err
            assert fake.authorizations == [] and fake.token_requests == []
    run(main())


def test_login_refuses_a_server_it_cannot_sign_in_to(tmp_path):
    async def main():
        path = tmp_path / "mcp.json"
        path.write_text(json.dumps({"mcpServers": {"local": {"command": "true"}}}))
        code, _, err = await trunkline("login", str(path), "local")
        assert code == 2 and "stdio" in err
        code, _, err = await trunkline("login", str(path), "nowhere")
        assert code == 2 and "no server named 'nowhere'" in err
    run(main())


def test_the_files_oauth_keys_are_checked_and_a_secret_comes_from_the_environment(tmp_path):
    from trunkline.config import load_oauth_config
    from trunkline.errors import ConfigurationError

    def write(data: dict) -> Path:
        path = tmp_path / "mcp.json"
        path.write_text(json.dumps(data))
        return path

    url = "https://billing.example/mcp"
    entry = {"url": url, "oauth": {"clientId": "abc", "clientSecretEnv": "BILLING_SECRET",
                                   "grant": "client_credentials"}}
    config = load_oauth_config(write({"oauth": {"store": "tokens"},
                                      "mcpServers": {"billing": entry}}),
                               env={"BILLING_SECRET": "s3cr3t"})
    assert config.store == tmp_path / "tokens"
    assert config.servers[url].client_secret == "s3cr3t" and "s3cr3t" not in repr(config)
    bad = [
        ({"oauth": {"storage": "x"}, "mcpServers": {}}, "only the keys"),
        ({"mcpServers": {"b": {**entry, "oauth": {"clientId": "abc"} | {"grant": "magic"}}}},
         "\"grant\" must be one of"),
        ({"mcpServers": {"b": entry}}, "'BILLING_SECRET'"),
        ({"mcpServers": {"b": {**entry, "oauth": {"clientId": "abc",
                                                  "grant": "client_credentials"}}}},
         "needs \"clientSecretEnv\""),
    ]
    for data, message in bad:
        try:
            load_oauth_config(write(data), env={})
        except ConfigurationError as exc:
            assert message in str(exc), (message, str(exc))
        else:
            raise AssertionError(f"accepted {data}")


def test_the_files_oauth_entries_configure_workload_identity_enterprise_idps_and_dpop(
        tmp_path):
    from trunkline.auth import ENTERPRISE_MANAGED, JWT_BEARER, Secret
    from trunkline.auth.configured import server_auth
    from trunkline.auth.workload import read_source
    from trunkline.config import load_oauth_config
    from trunkline.errors import ConfigurationError

    def write(data: dict) -> Path:
        path = tmp_path / "mcp.json"
        path.write_text(json.dumps(data))
        return path

    (tmp_path / "workload.jwt").write_text("workload-jwt\n")
    wif = {"url": "https://wif.example/mcp",
           "oauth": {"clientId": "w", "grant": "jwt_bearer", "assertionFile": "workload.jwt",
                     "dpop": True}}
    ema = {"url": "https://ema.example/mcp",
           "oauth": {"clientId": "m", "clientSecretEnv": "MCP_SECRET",
                     "grant": "enterprise_managed",
                     "identityProvider": {"issuer": "https://idp.example", "clientId": "i",
                                          "clientSecretEnv": "IDP_SECRET",
                                          "idTokenEnv": "USER_ID_TOKEN"}}}
    env = {"MCP_SECRET": "mcp-s3cret", "IDP_SECRET": "idp-s3cret"}
    config = load_oauth_config(write({"mcpServers": {"wif": wif, "ema": ema}}), env=env)
    assert "s3cret" not in repr(config)
    wif_auth = server_auth(config.servers["https://wif.example/mcp"])
    assert wif_auth.grant == JWT_BEARER and wif_auth.dpop is True
    assert wif_auth.assertion is not None
    assert asyncio.run(read_source(wif_auth.assertion)) == Secret("workload-jwt")
    ema_auth = server_auth(config.servers["https://ema.example/mcp"])
    idp = ema_auth.identity_provider
    assert ema_auth.grant == ENTERPRISE_MANAGED and ema_auth.dpop is None and idp is not None
    assert ema_auth.client is not None and ema_auth.client.client_secret == Secret("mcp-s3cret")
    assert idp.issuer == "https://idp.example" and idp.client.client_id == "i"
    assert idp.client.client_secret == Secret("idp-s3cret")
    os.environ["TRUNKLINE_TEST_USER_ID_TOKEN"] = "id-token"
    try:
        idp_env = {**ema["oauth"]["identityProvider"], "idTokenEnv": "TRUNKLINE_TEST_USER_ID_TOKEN"}
        again = load_oauth_config(write({"mcpServers": {"ema": {**ema, "oauth": {
            **ema["oauth"], "identityProvider": idp_env}}}}), env=env)
        source = server_auth(again.servers["https://ema.example/mcp"])
        assert source.identity_provider is not None
        assert asyncio.run(read_source(source.identity_provider.id_token)) == Secret("id-token")
    finally:
        del os.environ["TRUNKLINE_TEST_USER_ID_TOKEN"]
    bad = [
        ({**wif, "oauth": {"clientId": "w", "grant": "jwt_bearer"}}, "needs \"assertionFile\""),
        ({**wif, "oauth": {"clientId": "w", "assertionEnv": "X"}}, "go with \"grant\""),
        ({**wif, "oauth": {**wif["oauth"], "assertionEnv": "X"}}, "not both"),
        ({**wif, "oauth": {**wif["oauth"], "dpop": "yes"}}, "\"dpop\" must be true or false"),
        ({**ema, "oauth": {"clientId": "m", "grant": "enterprise_managed"}},
         "needs \"identityProvider\""),
        ({**ema, "oauth": {**ema["oauth"], "identityProvider": {"issuer": "https://idp"}}},
         "\"clientId\" must be a non-empty string"),
        ({**ema, "oauth": {**ema["oauth"], "identityProvider": {
            "issuer": "https://idp", "clientId": "i"}}}, "needs \"idTokenFile\""),
        ({**ema, "oauth": {**ema["oauth"], "identityProvider": {
            "issuer": "https://idp", "clientId": "i", "idTokenEnv": "T", "extra": 1}}},
         "only the keys"),
    ]
    for entry, message in bad:
        try:
            load_oauth_config(write({"mcpServers": {"s": entry}}), env=env)
        except ConfigurationError as exc:
            assert message in str(exc), (message, str(exc))
        else:
            raise AssertionError(f"accepted {entry}")


def test_the_gateway_reaches_a_protected_upstream_with_its_own_token(gateways, tmp_path):
    """``trunkline serve`` after a sign-in: its client brings no credentials, the upstream
    gets the gateway's token (and only ever a token its authorization server issued)."""
    from gateways import StdioGateway, modern_meta

    async def main():
        async with signed_in(tmp_path) as (echo, fake, path):
            gw = await StdioGateway.start(path, gateways)
            try:
                answer = await gw.call("tools/call", {"name": "echo", "arguments": {
                    "text": "through"}, "_meta": modern_meta()})
                assert answer["result"]["content"][0]["text"] == "through", answer
            finally:
                assert await gw.close() == 0
            issued = set(tokens_in(fake, "at-"))
            assert echo.seen_tokens and all(t is None or t in issued for t in echo.seen_tokens)
            assert len(fake.authorizations) == 1  # the sign-in's, none by the gateway
    run(main())
