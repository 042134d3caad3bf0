"""The official Python SDK's client (mcp 2.x, run by the .peers/py-modern venv) against
``trunkline serve --http``, as a host that renders MCP Apps and loads skills would use it.
Prints one JSON document.

    .peers/py-modern/bin/python tests/peers/sdk_extensions_client.py http://HOST:PORT/mcp

It connects with ``mode="auto"`` (``server/discover``), and prints
{"protocol", "extensions" (the server's ``capabilities.extensions``), "tools" (each tool's
name and ``_meta``), "views" (each ``_meta.ui.resourceUri`` read with ``resources/read``:
its contents), "skills" (every page of ``skills/list``, sent as a plain request: the SDK
has no skills client), "skill" (the first skill's ``SKILL.md``, read)}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def main(url: str) -> dict[str, Any]:
    import mcp_types as types
    from mcp import Client
    from pydantic import TypeAdapter

    async with Client(url, mode="auto") as client:
        capabilities = client.server_capabilities.model_dump(mode="json", by_alias=True,
                                                             exclude_none=True)
        tools = (await client.list_tools()).tools
        views: dict[str, Any] = {}
        for tool in tools:
            ui = (tool.meta or {}).get("ui")
            uri = ui.get("resourceUri") if isinstance(ui, dict) else None
            if isinstance(uri, str) and uri not in views:
                read = await client.read_resource(uri)
                views[uri] = [c.model_dump(mode="json", by_alias=True, exclude_none=True)
                              for c in read.contents]
        skills: list[Any] = []
        cursor = None
        while True:
            params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            page = await client.session.send_request(
                types.Request[dict[str, Any], str](method="skills/list", params=params),
                TypeAdapter(dict[str, Any]))
            skills += page.get("skills", [])
            cursor = page.get("nextCursor")
            if not cursor:
                break
        skill = None
        if skills:
            read = await client.read_resource(skills[0]["uri"])
            skill = [c.model_dump(mode="json", by_alias=True, exclude_none=True)
                     for c in read.contents]
        return {"protocol": str(client.protocol_version),
                "extensions": capabilities.get("extensions"),
                "tools": [{"name": t.name, "_meta": t.meta} for t in tools],
                "views": views, "skills": skills, "skill": skill}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
