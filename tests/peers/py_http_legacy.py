"""A real legacy (2025-11-25) MCP Streamable HTTP server on the Python SDK 1.x (mcp 1.30.0).

Runs in the .peers/py-legacy venv (tests/realpeers.py: PY_HTTP_LEGACY):

    .peers/py-legacy/bin/python tests/peers/py_http_legacy.py --port 0 [--record PATH]
        [--json-response]

Prints ``LISTENING http://127.0.0.1:<port>/mcp`` when ready (tests/peers/asgi_serve.py).
FastMCP's streamable-http app in its default stateful mode: `initialize` mints an
Mcp-Session-Id that every later request must carry; DELETE ends the session.

Tools: asgi_serve.add_tools (add, echo, headered, count, slow), and ``ask_name``: the
server's own ``elicitation/create`` (on the call's response stream, as the SDK relates
it to the request), then "hello <name>" (or the action, if not accepted).
"""

from __future__ import annotations

import sys

from asgi_serve import add_tools, parse, serve
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

ARGS = parse(sys.argv[1:], "mcp 1.30.0 FastMCP over Streamable HTTP (stateful)")
server = FastMCP("trunkline-py-http-legacy", host="127.0.0.1", json_response=ARGS.json_response)
add_tools(server, Context)


class Name(BaseModel):
    name: str


@server.tool(description="Ask the client for a name (elicitation), then greet it")
async def ask_name(ctx: Context) -> str:
    answer = await ctx.elicit("What is your name?", Name)
    return f"hello {answer.data.name}" if answer.action == "accept" else answer.action


if __name__ == "__main__":
    serve(server.streamable_http_app(), ARGS)
