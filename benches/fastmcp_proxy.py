"""fastmcp 4.x's proxy over an ``mcpServers`` file, served over Streamable HTTP: the
baseline column of ``bench_gateway.py``.

Runs in the ``.peers/fastmcp`` venv (fastmcp 4.2.3 on mcp 2.3.0, uvicorn):

    .peers/fastmcp/bin/python benches/fastmcp_proxy.py CONFIG [--keep-alive-s N]

``fastmcp.server.create_proxy(<the mcpServers dict>)`` and ``run_http_async`` (transport
"http", fastmcp's defaults otherwise) on 127.0.0.1 with an ephemeral port; prints
``LISTENING http://127.0.0.1:<port>/mcp`` once the socket listens, runs until SIGTERM, and
dies with its parent (``PR_SET_PDEATHSIG``), its stdio upstreams with it (stdin EOF).

The socket is created with ``IPPROTO_TCP`` on purpose. asyncio sets ``TCP_NODELAY`` on an
accepted connection only when the listening socket says ``proto == IPPROTO_TCP``, which
``uvicorn`` gets when it binds ``host:port`` itself (``getaddrinfo``). A socket made with
``socket.socket()`` has proto 0: Nagle then stays on, uvicorn's two writes per response
(head, then body) meet the client's delayed ACK, and every sequential call waits ~40 ms
(measured here: p50 48 ms at 1 in flight, against ~10 ms with the flag).

``--keep-alive-s`` raises uvicorn's idle keep-alive timeout (5 s by default) for the
memory measurement, which holds idle connections open for longer than that.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import signal
import socket
import sys

from fastmcp.server import create_proxy

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="an mcpServers JSON file")
    ap.add_argument("--keep-alive-s", type=float, default=None,
                    help="uvicorn's timeout_keep_alive (default: uvicorn's own, 5 s)")
    ns = ap.parse_args()
    die_with_parent()
    with open(ns.config) as f:
        config = json.load(f)
    proxy = create_proxy(config, name="fastmcp-bench-proxy")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    print(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn_config = {} if ns.keep_alive_s is None else {"timeout_keep_alive": ns.keep_alive_s}
    asyncio.run(proxy.run_http_async(show_banner=False, sockets=[sock], path="/mcp",
                                     log_level="warning", uvicorn_config=uvicorn_config))


if __name__ == "__main__":
    sys.exit(main())
