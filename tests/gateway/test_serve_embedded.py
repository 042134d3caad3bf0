"""The gateway embedded in a program, without the command line (``gateway.serve``):
``Gateway(GatewaySettings(...))`` started in this process with a real server behind it
(tests/peers/py_modern_echo.py on mcp 2.3.0), the official mcp 2.x client calling through
it over HTTP, then stopped; nothing it started outlives it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import aiohttp
import pytest

import realpeers
from conftest import PEERS, run
from gateways import fleet_config, real_server
from trunkline.channel import ServerState
from trunkline.gateway.serve import Gateway, GatewaySettings, serve

KEY = "k-embedded-0123456789"


async def sdk_call(url: str, tool: str, arguments: dict, *, key: str) -> dict:
    """The official mcp 2.x client (tests/peers/sdk_client.py): lists, then calls ``tool``."""
    python = realpeers.PEERS_DIR / "py-modern" / "bin" / "python"
    client = await asyncio.create_subprocess_exec(
        str(python), str(PEERS / "sdk_client.py"), tool, json.dumps(arguments), "--", url,
        env={**os.environ, "SDK_CLIENT_BEARER": key},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(client.communicate(), 120)
    assert client.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def refused(url: str) -> bool:
    async with aiohttp.ClientSession() as http:
        try:
            async with http.post(url, data=b"{}"):
                return False
        except aiohttp.ClientConnectionError:
            return True


@pytest.mark.real_servers
def test_a_program_embeds_the_gateway_and_a_real_client_calls_through_it(no_leaks, tmp_path):
    path = fleet_config(tmp_path, {"py": real_server(realpeers.require(realpeers.MODERN_PY_ECHO))})
    settings = GatewaySettings(config=path, api_keys=(KEY.encode(),))
    assert KEY not in repr(settings)

    async def main():
        async with Gateway(settings) as gateway:
            url = gateway.url
            assert url is not None and url.startswith("http://127.0.0.1:"), url
            [status] = gateway.host.servers()
            assert status.state is ServerState.READY
            done = await sdk_call(url, "echo", {"text": "embedded"}, key=KEY)
            assert "echo" in done["tools"]
            assert done["result"]["content"][0]["text"] == "embedded"
            # The key is the settings' own: another is refused.
            async with aiohttp.ClientSession() as http, http.post(
                    url, data=b"{}", headers={"Authorization": "Bearer k-wrong"}) as response:
                assert response.status == 401
        assert gateway.url is None
        assert not alive(status.worker_pid) and not alive(status.server_pid), status
        assert await refused(url)
    run(main())


@pytest.mark.real_servers
def test_serve_runs_until_cancelled_and_tells_its_watchers(no_leaks, tmp_path):
    """``serve(settings)``: the servers' states while starting, the URL once serving, a
    client's call through it; cancelled, it stops everything it started."""
    path = fleet_config(tmp_path, {"py": real_server(realpeers.require(realpeers.MODERN_PY_ECHO))})
    settings = GatewaySettings(config=path, api_keys=(KEY.encode(),))

    async def main():
        seen: list[ServerState] = []
        serving: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve(settings, starting=lambda s: seen.append(s.state),
                                         serving=serving.set_result))
        url = await serving
        assert url is not None and seen[0] is ServerState.STARTING
        assert seen[-1] is ServerState.READY, seen
        done = await sdk_call(url, "echo", {"text": "served"}, key=KEY)
        assert done["result"]["content"][0]["text"] == "served"
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert await refused(url)
    run(main())


def test_settings_refuse_what_stdio_cannot_do():
    from trunkline.errors import ConfigurationError

    for asked in ({"processes": 2, "copy_arguments": ("serve",)}, {"metrics": True}):
        with pytest.raises(ConfigurationError, match="needs HTTP"):
            GatewaySettings(config="mcp.json", stdio=True, **asked)
    with pytest.raises(ConfigurationError, match="copy_arguments"):
        GatewaySettings(config="mcp.json", processes=2)
    with pytest.raises(ConfigurationError, match="one process"):
        Gateway(GatewaySettings(config="mcp.json", processes=2, copy_arguments=("serve",)))
