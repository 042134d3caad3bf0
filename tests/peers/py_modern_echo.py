"""A small real modern MCP stdio server on the official Python SDK (mcp 2.x).

Runs in the .peers/py-modern venv (see tests/realpeers.py: MODERN_PY_ECHO):

    .peers/py-modern/bin/python tests/peers/py_modern_echo.py

The SDK's stdio loop is dual-era: `server/discover` (or any request with a
2026-07-28 `_meta` envelope) selects the modern era; `initialize` selects
2025-11-25. Tools mirror tests/peers/ts-modern/server.mjs:

    echo   {text}            -> text content equal to `text`
    search {query, limit=3}  -> `limit` hits "<query> result <n>" (structured)
    sleep  {ms}              -> waits ms (<= 60000), then "slept <ms>"
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("trunkline-py-modern-echo", version="0.1.0", subscriptions=False)


class SearchResult(BaseModel):
    query: str
    hits: list[str]


@server.tool(description="Return the input text unchanged")
def echo(text: str) -> str:
    return text


@server.tool(description="Fake search: returns numbered hits for the query")
def search(query: str, limit: int = 3) -> SearchResult:
    limit = max(1, min(limit, 10))
    return SearchResult(query=query, hits=[f"{query} result {i}" for i in range(1, limit + 1)])


@server.tool(description="Wait the given number of milliseconds, then answer")
async def sleep(ms: int) -> str:
    await anyio.sleep(max(0, min(ms, 60_000)) / 1000)
    return f"slept {ms}"


if __name__ == "__main__":
    anyio.run(server.run_stdio_async)
