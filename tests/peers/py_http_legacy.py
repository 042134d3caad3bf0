"""A real legacy (2025-11-25) MCP Streamable HTTP server on the Python SDK 1.x (mcp 1.30.0).

Runs in the .peers/py-legacy venv (tests/realpeers.py: PY_HTTP_LEGACY):

    .peers/py-legacy/bin/python tests/peers/py_http_legacy.py --port 0 [--record PATH]
        [--json-response]

Prints ``LISTENING http://127.0.0.1:<port>/mcp`` when ready (tests/peers/asgi_serve.py).
FastMCP's streamable-http app in its default stateful mode: `initialize` mints an
Mcp-Session-Id that every later request must carry; DELETE ends the session.

Tools (the same as py_http_modern.py):
    add {a: int, b: int}             -> "<a+b>"
    echo {text}                      -> text
    headered {region, count?=1, flag?=false}
                                     -> "region=<r> count=<c> flag=<f>"; the properties
                                        carry x-mcp-header Region / Count / Flag in the
                                        listed schema (pydantic json_schema_extra); the
                                        1.x SDK neither checks nor uses them
    count {n}                        -> n progress notifications, then "counted <n>"
    slow {seconds}                   -> sleeps (<= 60 s), then "slept <seconds>"
"""

from __future__ import annotations

import sys
from typing import Annotated

import anyio
from asgi_serve import parse, serve
from mcp.server.fastmcp import Context, FastMCP
from pydantic import Field

ARGS = parse(sys.argv[1:], "mcp 1.30.0 FastMCP over Streamable HTTP (stateful)")
server = FastMCP("trunkline-py-http-legacy", host="127.0.0.1", json_response=ARGS.json_response)


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
    serve(server.streamable_http_app(), ARGS)
