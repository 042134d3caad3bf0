"""A real MCP Streamable HTTP server on the official Python SDK 2.x (mcp 2.3.0, MCPServer).

Runs in the .peers/py-modern venv (tests/realpeers.py: PY_HTTP_MODERN):

    .peers/py-modern/bin/python tests/peers/py_http_modern.py --port 0 [--record PATH]
        [--json-response] [--listen]

Prints ``LISTENING http://127.0.0.1:<port>/mcp`` when ready (tests/peers/asgi_serve.py).
The SDK app is dual-era: a POST whose MCP-Protocol-Version header is not one of the
handshake versions goes to its 2026-07-28 single-exchange handler; everything else
(initialize, no header) to the legacy stateful Mcp-Session-Id transport.

Tools: asgi_serve.add_tools (add, echo, headered, count, slow). The SDK checks the
x-mcp-header annotations when a tool is registered, and the Mcp-Param-* headers of each
modern tools/call.
"""

from __future__ import annotations

import sys

from asgi_serve import add_tool_adder, add_tools, parse, serve
from mcp.server.mcpserver import Context, MCPServer

#: --listen: serve subscriptions/listen (the SDK's default subscription bus; discover then
#: advertises tools.listChanged) and offer add_tool, which changes the tool list.
LISTEN = "--listen" in sys.argv[1:]
ARGS = parse([a for a in sys.argv[1:] if a != "--listen"],
             "mcp 2.3.0 MCPServer over Streamable HTTP")
server = MCPServer("trunkline-py-http-modern", version="0.1.0",
                   subscriptions=None if LISTEN else False)
add_tools(server, Context)
if LISTEN:
    add_tool_adder(server, Context)


if __name__ == "__main__":
    serve(server.streamable_http_app(json_response=ARGS.json_response), ARGS)
