"""HTTP server libraries for the gateway, measured on its traffic: one small JSON-RPC POST
in, one small JSON answer out, on keep-alive connections. A one-off comparison (not part
of the pytest suites, not run by CI).

Every candidate serves the same trivial ``tools/call`` echo (``orjson`` both ways: the
answer's text is the ``token`` argument, the id is echoed) on 127.0.0.1, one process (or
one worker), and wrk drives it with ``wrk/tools_call.lua`` (every answer checked) at 1 and
64 connections. Candidates:

* ``aiohttp``          aiohttp's server (``web.AppRunner`` + ``SockSite``, what the gateway
                       uses), on the stock asyncio loop as the gateway runs today;
* ``aiohttp-uvloop``   the same on uvloop;
* ``uvicorn``          uvicorn (httptools + uvloop, its defaults when installed with
                       ``[standard]``) serving a minimal ASGI app;
* ``granian-asgi``     granian (Rust, hyper) serving the same ASGI app, 1 worker, uvloop;
* ``granian-rsgi``     granian's own RSGI interface, same;
* ``granian-embed``    granian's in-loop server (``granian.server.embed``, RSGI) in this
                       process's stock asyncio loop, as a gateway owning its loop would
                       have to run it (granian marks it experimental);
* ``uvicorn-asyncio``  uvicorn on the stock asyncio loop instead of uvloop;
* ``trunkline``        the gateway's own server (``trunkline.gateway.http_server``: httptools
                       on uvloop, one write per answer) with the same echo as a handler of
                       its exchanges; needs ``trunkline`` importable under ``--python``.

``--only NAME ...`` runs some of them.

The servers run under ``--python`` (default: this interpreter), a throwaway venv holding
whichever of uvicorn / granian are installed, for instance::

    python3.11 -m venv /tmp/httpcand
    /tmp/httpcand/bin/pip install aiohttp==3.14.5 uvloop orjson 'uvicorn[standard]' granian
    .venv/bin/python benches/http_server_candidates.py --python /tmp/httpcand/bin/python

The driver runs under the dev venv (it uses ``gateway_load``). Candidates that do not
import under ``--python`` are listed as missing. Rounds are interleaved (round 1 of every
candidate and shape, then round 2, ...) so that the machine's noise spreads over all; the
table shows medians, the server's CPU per call, and wrk's share of a core (wrk with its
checks tops out near 28k calls/s on one core here, so above that the table measures wrk).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
CANDIDATES = ("aiohttp", "aiohttp-uvloop", "uvicorn", "granian-asgi", "granian-rsgi",
              "granian-embed", "uvicorn-asyncio", "trunkline")
NEEDS = {"aiohttp": "aiohttp", "aiohttp-uvloop": "aiohttp, uvloop", "uvicorn": "uvicorn",
         "granian-asgi": "granian", "granian-rsgi": "granian",
         "granian-embed": "granian", "uvicorn-asyncio": "uvicorn",
         "trunkline": "trunkline.gateway.http_server, uvloop"}
CONNECTIONS = (1, 64)


# ------------------------------------------------------------ the echo, per interface


def echo_answer(body: bytes) -> bytes:
    import orjson

    msg = orjson.loads(body)
    text = msg["params"]["arguments"]["token"]
    return orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
        "content": [{"type": "text", "text": text}], "isError": False,
        "resultType": "complete"}})


JSON_HEADERS = [(b"content-type", b"application/json")]


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A minimal ASGI app: POST -> the echo answer (no framework)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks = []
    while True:
        event = await receive()
        chunks.append(event.get("body", b""))
        if not event.get("more_body"):
            break
    out = echo_answer(b"".join(chunks))
    await send({"type": "http.response.start", "status": 200,
                "headers": [*JSON_HEADERS, (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


async def rsgi_app(scope: Any, proto: Any) -> None:
    """The same on granian's RSGI interface."""
    body = await proto()
    proto.response_bytes(200, [("content-type", "application/json")], echo_answer(body))


# ------------------------------------------------------------------------ serving


def _listening_socket() -> socket.socket:
    # IPPROTO_TCP, so that asyncio sets TCP_NODELAY on accepted connections (see
    # fastmcp_proxy.py: with proto 0 it does not, and Nagle costs ~40 ms a call).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def serve(kind: str) -> None:
    """Run one candidate until SIGTERM; print ``LISTENING <url>`` when it accepts."""
    import asyncio

    if kind.startswith("aiohttp"):
        from aiohttp import web

        async def handler(request: web.Request) -> web.Response:
            return web.Response(body=echo_answer(await request.read()),
                                content_type="application/json")

        async def main() -> None:
            app = web.Application()
            app.router.add_route("POST", "/mcp", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            sock = _listening_socket()
            await web.SockSite(runner, sock).start()
            print(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
            await asyncio.Event().wait()

        if kind == "aiohttp-uvloop":
            import uvloop

            uvloop.run(main())
        else:
            asyncio.run(main())
    elif kind.startswith("uvicorn"):
        import uvicorn

        sock = _listening_socket()
        config = uvicorn.Config(asgi_app, log_level="warning", access_log=False,
                                lifespan="off",
                                loop="asyncio" if kind == "uvicorn-asyncio" else "auto")
        print(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
        uvicorn.Server(config).run(sockets=[sock])
    elif kind == "trunkline":
        import uvloop

        from trunkline.gateway.http_server import HttpServer

        async def handle(exchange: Any) -> None:
            await exchange.respond(200, echo_answer(await exchange.body(1 << 20) or b""))

        async def main_own() -> None:
            sock = _listening_socket()
            server = HttpServer(handle, sock, drain_timeout_s=1.0)
            await server.start()
            print(f"LISTENING http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
            await asyncio.Event().wait()

        uvloop.run(main_own())
    elif kind == "granian-embed":
        from granian.constants import Interfaces
        from granian.server.embed import Server

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()

        async def main_embed() -> None:
            server = Server(rsgi_app, address="127.0.0.1", port=port,
                            interface=Interfaces.RSGI, websockets=False, log_enabled=False)
            print(f"LISTENING http://127.0.0.1:{port}/mcp", flush=True)
            await server.serve()

        asyncio.run(main_embed())
    elif kind.startswith("granian"):
        from granian import Granian
        from granian.constants import Interfaces, Loops

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # granian binds it itself; the driver waits until it accepts
        interface = kind.split("-")[1]
        target = "http_server_candidates:" + ("asgi_app" if interface == "asgi" else "rsgi_app")
        print(f"LISTENING http://127.0.0.1:{port}/mcp", flush=True)
        Granian(target, address="127.0.0.1", port=port, interface=Interfaces(interface),
                workers=1, loop=Loops.uvloop, websockets=False, log_enabled=False).serve()
    else:
        raise SystemExit(f"unknown candidate {kind}")


# ------------------------------------------------------------------------ driving


def _available(python: str, kind: str) -> bool:
    mods = [*NEEDS[kind].replace(" ", "").split(","), "orjson"]
    check = subprocess.run([python, "-c", "import " + ", ".join(mods)], capture_output=True,
                           check=False)
    return check.returncode == 0


def _wait_accepting(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing accepts on port {port}")


def start(python: str, kind: str, workdir: Any) -> Any:
    import gateway_load

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(BENCHES), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc, url, err = gateway_load._spawn(kind, [python, str(Path(__file__).resolve()), "serve",
                                                kind], b"LISTENING ", workdir, env=env)
    target = gateway_load.Target(kind, proc, url, stderr_path=err, workdir=workdir)
    _wait_accepting(target.port)
    return target


def versions(python: str) -> str:
    code = ("import importlib.metadata as m\n"
            "for d in ('aiohttp', 'uvloop', 'orjson', 'uvicorn', 'httptools', 'granian'):\n"
            "    try: print(d, m.version(d), end='; ')\n"
            "    except m.PackageNotFoundError: pass\n")
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=False).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="(internal) run one candidate")
    s.add_argument("kind", choices=CANDIDATES)
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the servers")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=CANDIDATES, help="these candidates only")
    ns = ap.parse_args(argv)
    if ns.cmd == "serve":
        serve(ns.kind)
        return 0
    sys.path.insert(0, str(BENCHES))
    import gateway_load
    import report

    kinds = [k for k in ns.only or CANDIDATES if _available(ns.python, k)]
    missing = [k for k in CANDIDATES if k not in kinds]
    workdir = tempfile.TemporaryDirectory(prefix="bench-http-candidates-")
    targets = {}
    results: dict[tuple[str, int], list[Any]] = {}
    try:
        for kind in kinds:
            targets[kind] = start(ns.python, kind, workdir)
            for n in CONNECTIONS:
                gateway_load.run_wrk(targets[kind], n, 1)  # warm-up, checked too
        for _ in range(ns.rounds):
            for n in CONNECTIONS:
                for kind in kinds:
                    results.setdefault((kind, n), []).append(
                        gateway_load.run_wrk(targets[kind], n, ns.seconds))
    finally:
        for target in targets.values():
            target.stop()
    print(f"Servers under {ns.python}: {versions(ns.python)}")
    print(f"wrk -t1, {ns.seconds} s per round, {ns.rounds} rounds interleaved; "
          f"missing: {', '.join(missing) or 'none'}\n")
    print("| server | in flight | calls/s | p50 / p99 ms | server CPU µs per call | wrk CPU |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in kinds:
        for n in CONNECTIONS:
            rs = results[(kind, n)]
            med = {k: statistics.median(getattr(r, k) for r in rs)
                   for k in ("calls_per_s", "p50_ms", "p99_ms")}
            cpu = statistics.median(1e6 * r.target_cpu_s / r.calls for r in rs)
            wrk = statistics.median(r.wrk_cpu_s / r.seconds for r in rs)
            print(f"| {kind} | {n} | {report._rate(med['calls_per_s'])} | "
                  f"{report._ms(med['p50_ms'])} / {report._ms(med['p99_ms'])} | {cpu:.0f} | "
                  f"{100 * wrk:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
