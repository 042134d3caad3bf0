"""An official Python SDK client (mcp 2.x or 1.x, run by the test venvs of
tests/realpeers.py) using a ``trunkline serve --http`` gateway as several users in turn,
each with its own credential: what each is listed, and what each call gets. Prints one JSON
document.

    SDK_POLICY_PLAN='[{"bearer": TOKEN, "calls": [[TOOL, ARGS], ...]}, ...]' \\
        .peers/py-modern/bin/python tests/peers/sdk_policy_client.py http://HOST:PORT/mcp

For each user of the plan (in order) it connects with ``Authorization: Bearer <bearer>``
on every request (mcp 2.x: ``mode="auto"``, a ``server/discover`` probe, then 2026-07-28;
mcp 1.x: the 2025-11-25 ``initialize`` handshake), lists the tools (every page), makes each
call, and prints {"sdk", "users": [{"protocol", "tools", "calls"}]}: each call's
``{"result": ...}`` as the SDK parsed it, or the JSON-RPC error the SDK raised,
``{"error": {"code", "message", "data"}}``. The plan comes in the environment, not the
command line, since it carries credentials.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib.metadata import version
from typing import Any

DUMP = {"mode": "json", "by_alias": True, "exclude_none": True}


async def calls(call: Any, planned: list[list[Any]]) -> list[dict[str, Any]]:
    """Each planned call's result, or the JSON-RPC error it got."""
    try:
        from mcp.shared.exceptions import MCPError as Refused
    except ImportError:  # mcp 1.x
        from mcp.shared.exceptions import McpError as Refused
    done = []
    for name, arguments in planned:
        try:
            result = await call(name, arguments)
        except Refused as exc:
            done.append({"error": exc.error.model_dump(**DUMP)})
        else:
            done.append({"result": result.model_dump(**DUMP)})
    return done


async def every_tool(list_tools: Any) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = await list_tools(cursor)
        names += [tool.name for tool in page.tools]
        cursor = page.nextCursor if hasattr(page, "nextCursor") else page.next_cursor
        if cursor is None:
            return names


async def modern(url: str, user: dict[str, Any]) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    target = streamable_http_client(url, http_client=create_mcp_http_client(
        headers={"Authorization": f"Bearer {user['bearer']}"}))
    async with Client(target, mode="auto") as client:
        tools = await every_tool(lambda cursor: client.list_tools(cursor=cursor))
        return {"protocol": str(getattr(client, "protocol_version", None)), "tools": tools,
                "calls": await calls(client.call_tool, user["calls"])}


async def legacy(url: str, user: dict[str, Any]) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    headers = {"Authorization": f"Bearer {user['bearer']}"}
    async with streamablehttp_client(url, headers=headers) as (r, w, *_), \
            ClientSession(r, w) as session:
        init = await session.initialize()
        tools = await every_tool(lambda cursor: session.list_tools(cursor=cursor))
        return {"protocol": init.protocolVersion, "tools": tools,
                "calls": await calls(session.call_tool, user["calls"])}


async def main(url: str, plan: list[dict[str, Any]], sdk: str) -> list[dict[str, Any]]:
    use = modern if int(sdk.split(".")[0]) >= 2 else legacy
    return [await use(url, user) for user in plan]


if __name__ == "__main__":
    sdk = version("mcp")
    users = asyncio.run(main(sys.argv[1], json.loads(os.environ["SDK_POLICY_PLAN"]), sdk))
    print(json.dumps({"sdk": sdk, "users": users}))
