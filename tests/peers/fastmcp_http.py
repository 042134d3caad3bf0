"""A real MCP Streamable HTTP server on fastmcp 4.x (which runs on the official mcp 2.x SDK).

Runs in the .peers/fastmcp venv (tests/realpeers.py: FASTMCP_HTTP):

    .peers/fastmcp/bin/python tests/peers/fastmcp_http.py --port 0 [--record PATH]
        [--json-response]

Prints ``LISTENING http://127.0.0.1:<port>/mcp`` when ready (tests/peers/asgi_serve.py).
`FastMCP.http_app()` (transport "http", stateful by default) over uvicorn. Like mcp 2.x
it is dual-era: see tests/peers/REAL_SERVERS.md for what it answers on the wire.

Tools: asgi_serve.add_tools (add, echo, headered, count, slow).
"""

from __future__ import annotations

import sys

from asgi_serve import add_tools, parse, serve
from fastmcp import Context, FastMCP

ARGS = parse(sys.argv[1:], "fastmcp 4.x over Streamable HTTP")
server = FastMCP("trunkline-fastmcp-http", version="0.1.0")
add_tools(server, Context)


if __name__ == "__main__":
    serve(server.http_app(path="/mcp", json_response=ARGS.json_response or None), ARGS)
