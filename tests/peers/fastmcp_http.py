"""A real MCP Streamable HTTP server on fastmcp 4.x (which runs on the official mcp 2.x SDK).

Runs in the .peers/fastmcp venv (tests/realpeers.py: FASTMCP_HTTP):

    .peers/fastmcp/bin/python tests/peers/fastmcp_http.py --port 0 [--record PATH]
        [--json-response]

Prints ``LISTENING http://127.0.0.1:<port>/mcp`` when ready (tests/peers/asgi_serve.py).
`FastMCP.http_app()` (transport "http", stateful by default) over uvicorn. Like mcp 2.x
it is dual-era: see tests/peers/REAL_SERVERS.md for what it answers on the wire.

Tools (the same as py_http_modern.py):
    add {a: int, b: int}             -> "<a+b>"
    echo {text}                      -> text
    headered {region, count?=1, flag?=false}
                                     -> "region=<r> count=<c> flag=<f>"; the three carry
                                        x-mcp-header Region / Count / Flag (pydantic
                                        json_schema_extra)
    count {n}                        -> n progress notifications, then "counted <n>"
    slow {seconds}                   -> sleeps (<= 60 s), then "slept <seconds>"
"""

from __future__ import annotations

import sys
from typing import Annotated

import anyio
from asgi_serve import parse, serve
from fastmcp import Context, FastMCP
from pydantic import Field

ARGS = parse(sys.argv[1:], "fastmcp 4.x over Streamable HTTP")
server = FastMCP("trunkline-fastmcp-http", version="0.1.0")


@server.tool(description="Add two integers")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Return the input text unchanged")
def echo(text: str) -> str:
    return text


def _header(name: str) -> Field:  # type: ignore[valid-type]
    return Field(json_schema_extra={"x-mcp-header": name})


@server.tool(description="Arguments mirrored into Mcp-Param-Region/-Count/-Flag headers")
def headered(region: Annotated[str, _header("Region")], count: Annotated[int, _header("Count")] = 1,
             flag: Annotated[bool, _header("Flag")] = False) -> str:
    return f"region={region} count={count} flag={str(flag).lower()}"


@server.tool(description="Send n progress notifications, then answer")
async def count(n: int, ctx: Context) -> str:
    n = max(0, min(n, 100))
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return f"counted {n}"


@server.tool(description="Sleep the given number of seconds (<= 60), then answer")
async def slow(seconds: float) -> str:
    await anyio.sleep(max(0.0, min(seconds, 60.0)))
    return f"slept {seconds}"


if __name__ == "__main__":
    serve(server.http_app(path="/mcp", json_response=ARGS.json_response or None), ARGS)
