"""Serve an ASGI app (an SDK's Streamable HTTP app) for the tests, recording each request.

Shared by tests/peers/py_http_modern.py, py_http_legacy.py and fastmcp_http.py, which run
in three different venvs: this module needs only the stdlib, uvicorn, anyio and pydantic,
which every one of them has. A script imports it as a sibling (a script's own directory is
sys.path[0]).

    add_tools(server, Context)   # the same five tools on any of the three SDKs
    serve(app, parse(argv))      # argv: --port N (0 = ephemeral), --record PATH,
                                 #       --json-response

binds 127.0.0.1 (never anything else) itself, so the port is known before uvicorn starts;
prints ``LISTENING http://127.0.0.1:<port>/mcp`` (flushed) once uvicorn accepts
connections; runs until SIGTERM/SIGINT. With --record, each HTTP request is appended as one
JSON line {"method", "path", "headers" (lower-cased names), "body" (parsed JSON or
null)}, the same format tests/peers/http_scripted.py writes, before the app sees it.
"""

# No `from __future__ import annotations` here: add_tools() needs its tools' annotations
# evaluated when they are defined (the SDKs find the Context parameter by its type).
import argparse
import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio
from pydantic import Field

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def recording(app: ASGIApp, path: str) -> ASGIApp:
    """Wrap ``app``: read the whole request body, log the request, then replay the body."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        first: list[Message] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # a disconnect before the body ended
                first.append(message)
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"method": scope["method"], "path": scope["path"],
                                "headers": headers, "body": body}) + "\n")
        replay = first or [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive_again() -> Message:
            return replay.pop(0) if replay else await receive()

        await app(scope, receive_again, send)

    return wrapped


def add_tools(server: Any, context_type: type) -> None:
    """Register on ``server`` (any SDK's ``@server.tool(description=...)``) the tools

    add {a: int, b: int}             -> a + b
    echo {text}                      -> text
    headered {region, count?=1, flag?=false}
                                     -> "region=<r> count=<c> flag=<f>"; the three carry
                                        x-mcp-header Region / Count / Flag (pydantic
                                        json_schema_extra). Not `int | None`: that is an
                                        anyOf, which mcp 2.x refuses for x-mcp-header
    count {n}                        -> n progress notifications ("step <i>") and n info
                                        logs (modern: if asked), then
                                        "counted <n>"
    slow {seconds}                   -> sleeps (<= 60 s), then "slept <seconds>"
    """

    def header(name: str) -> Any:
        return Field(json_schema_extra={"x-mcp-header": name})

    @server.tool(description="Add two integers")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Return the input text unchanged")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Arguments mirrored into Mcp-Param-Region/-Count/-Flag headers")
    def headered(
        region: Annotated[str, header("Region")],
        count: Annotated[int, header("Count")] = 1,
        flag: Annotated[bool, header("Flag")] = False,
    ) -> str:
        return f"region={region} count={count} flag={str(flag).lower()}"

    @server.tool(description="Send n progress notifications (and, asked for logs, n info "
                 "log messages), then answer")
    async def count(n: int, ctx: context_type) -> str:  # type: ignore[valid-type]  # the SDK version's Context
        n = max(0, min(n, 100))
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
            await ctx.info(f"step {i}")  # 2026-07-28: only when the request asked
        return f"counted {n}"

    @server.tool(description="Sleep the given number of seconds (<= 60), then answer")
    async def slow(seconds: float) -> str:
        await anyio.sleep(max(0.0, min(seconds, 60.0)))
        return f"slept {seconds}"


def add_tool_adder(server: Any, context_type: type) -> None:
    """Register ``add_tool {name}`` on an mcp 2.x server built with subscriptions: it adds a
    tool ``<name>`` (returns "<name> here") and announces notifications/tools/list_changed
    on the subscriptions/listen streams. Used by py_http_modern.py and py_modern_echo.py.

    Also ``rewrite_tool {name, description, note?=false}``: the tool ``<name>`` is replaced
    by an echo of ``{text}`` (``{text, note?}`` with note) with that description, and the
    change announced the same way (a "rug pull" on demand); ``rename_tool {name,
    new_name}`` moves a tool, its description kept, to a new name; ``rewritten_calls {}``
    says how many calls the replaced or renamed tools received."""

    @server.tool(description="Register a new tool <name> on this server (the tool list changes)")
    async def add_tool(name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")],
                       ctx: context_type) -> str:  # type: ignore[valid-type]  # the SDK version's Context
        def added() -> str:
            return f"{name} here"

        server.add_tool(added, name=name, description="Added at runtime by add_tool")
        await ctx.notify_tools_changed()
        return f"added {name}"

    rewritten = {"calls": 0}

    @server.tool(description="Redefine the tool <name> as an echo of {text} with a new "
                 "description and, with note=true, a new optional parameter note in its "
                 "input schema (the tool list changes); rewritten_calls counts its calls")
    async def rewrite_tool(name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")],
                           description: str, ctx: context_type,  # type: ignore[valid-type]  # the SDK version's Context
                           note: bool = False) -> str:
        def plain(text: str) -> str:
            rewritten["calls"] += 1
            return text

        def noted(text: str, note: str = "") -> str:
            rewritten["calls"] += 1
            return text

        replacement = noted if note else plain
        # The SDK titles the schemas after the function: keep the tool's own name there,
        # so only what was asked for changes.
        replacement.__name__ = replacement.__qualname__ = name
        server.remove_tool(name)
        server.add_tool(replacement, name=name, description=description)
        await ctx.notify_tools_changed()
        return f"rewrote {name}"

    @server.tool(description="Rename the tool <name> to <new_name>, keeping its description "
                 "(the tool list changes); the renamed tool echoes {text}")
    async def rename_tool(name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")],
                          new_name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")],
                          ctx: context_type) -> str:  # type: ignore[valid-type]  # the SDK version's Context
        (old,) = [t for t in await server.list_tools() if t.name == name]

        def renamed(text: str) -> str:
            rewritten["calls"] += 1
            return text

        renamed.__name__ = renamed.__qualname__ = new_name
        server.remove_tool(name)
        server.add_tool(renamed, name=new_name, description=old.description)
        await ctx.notify_tools_changed()
        return f"renamed {name} to {new_name}"

    @server.tool(description="How many calls the tools redefined by rewrite_tool or "
                 "rename_tool received")
    def rewritten_calls() -> int:
        return rewritten["calls"]


def parse(argv: list[str], description: str = "") -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, default=0, help="127.0.0.1 port; 0 picks a free one")
    p.add_argument("--record", help="append one JSON line per HTTP request to this file")
    p.add_argument("--json-response", action="store_true",
                   help="ask the SDK for application/json responses instead of SSE")
    return p.parse_args(argv)


def serve(app: ASGIApp, args: argparse.Namespace, path: str = "/mcp") -> None:
    import uvicorn

    if args.record:
        app = recording(app, args.record)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    # lifespan "on": the SDK apps start their session managers in the lifespan.
    config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    async def run() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():  # startup failed: re-raise its error
                await task
                raise SystemExit("uvicorn stopped before it started")
            await asyncio.sleep(0.02)
        print(f"LISTENING http://127.0.0.1:{port}{path}", flush=True)
        await task  # uvicorn handles SIGTERM/SIGINT itself and returns

    asyncio.run(run())
