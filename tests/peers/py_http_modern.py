"""A real MCP Streamable HTTP server on the official Python SDK 2.x (mcp 2.3.0, MCPServer).

Runs in the .peers/py-modern venv (tests/realpeers.py: PY_HTTP_MODERN):

    .peers/py-modern/bin/python tests/peers/py_http_modern.py --port 0 [--record PATH]
        [--json-response]

Prints ``LISTENING http://127.0.0.1:<port>/mcp`` when ready (tests/peers/asgi_serve.py).
The SDK app is dual-era: a POST whose MCP-Protocol-Version header is not one of the
handshake versions goes to its 2026-07-28 single-exchange handler; everything else
(initialize, no header) to the legacy stateful Mcp-Session-Id transport.

Tools:
    add {a: int, b: int}             -> "<a+b>" (structured {"result": a+b})
    echo {text}                      -> text
    headered {region, count?=1, flag?=false}
                                     -> "region=<r> count=<c> flag=<f>"; the three carry
                                        x-mcp-header Region / Count / Flag (declared with
                                        pydantic json_schema_extra; the SDK checks the
                                        annotations at registration, and the Mcp-Param-*
                                        headers of each modern tools/call)
    count {n}                        -> n progress notifications, then "counted <n>"
    slow {seconds}                   -> sleeps (<= 60 s), then "slept <seconds>"
"""

from __future__ import annotations

import sys
from typing import Annotated

import anyio
from asgi_serve import parse, serve
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

ARGS = parse(sys.argv[1:], "mcp 2.3.0 MCPServer over Streamable HTTP")
server = MCPServer("trunkline-py-http-modern", version="0.1.0", subscriptions=False)


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
    # `int | None` would be an anyOf, which the SDK rejects for x-mcp-header: use defaults
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
    serve(server.streamable_http_app(json_response=ARGS.json_response), ARGS)
