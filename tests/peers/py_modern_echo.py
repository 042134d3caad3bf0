"""A small real modern MCP stdio server on the official Python SDK (mcp 2.x).

Runs in the .peers/py-modern venv (see tests/realpeers.py: MODERN_PY_ECHO):

    .peers/py-modern/bin/python tests/peers/py_modern_echo.py

The SDK's stdio loop is dual-era: `server/discover` (or any request with a
2026-07-28 `_meta` envelope) selects the modern era; `initialize` selects
2025-11-25. Tools mirror tests/peers/ts-modern/server.mjs:

    echo   {text}            -> text content equal to `text`
    search {query, limit=3}  -> `limit` hits "<query> result <n>" (structured)
    sleep  {ms}              -> waits ms (<= 60000), then "slept <ms>"
    count  {n}               -> n progress notifications via ctx.report_progress
                                (progress i, total n, message "step <i>"), then "counted <n>"
    ask_name {}              -> multi round-trip: a Resolve(...) dependency returns
                                Elicit("What is your name?", Name), so on the 2026-07-28 wire
                                the SDK answers input_required (form elicitation, sealed
                                requestState); the retry carrying the answer gets "hello <name>"
    add_tool {name}          -> MCPServer.add_tool(<name>) (returns "<name> here"), then
                                ctx.notify_tools_changed(): notifications/tools/list_changed
                                on subscriptions/listen streams. Needs --listen.
    touch {uri}              -> ctx.notify_resource_updated(uri): notifications/resources/
                                updated on the listen streams subscribed to exactly that
                                URI (resourceSubscriptions). Needs --listen.

A prompt and resources, for the gateway's routing of them:

    prompt   greet {name}           -> one user message "Please greet <name> warmly." (and,
                                       asked for logs, an info log "greeting <name>")
    resource echo://about           -> text "trunkline modern echo peer"
    template echo://items/{item}    -> text "item <item>"; completion of `item` offers
                                       "apple", "apricot", "banana" filtered by prefix

Flags:
    --listen   serve subscriptions/listen (MCPServer's default subscription bus), so the
               modern discover result advertises tools.listChanged:true. Without it the
               server is built with subscriptions=False (listChanged:false, no listen),
               which is what tests/peers/REAL_SERVERS.md records.
"""

from __future__ import annotations

import sys
from typing import Annotated

import anyio
from asgi_serve import add_tool_adder
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

LISTEN = "--listen" in sys.argv[1:]
server = MCPServer("trunkline-py-modern-echo", version="0.1.0",
                   subscriptions=None if LISTEN else False)


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


@server.tool(description="Send n progress notifications (and, asked for logs, n info "
             "log messages), then answer")
async def count(n: int, ctx: Context) -> str:
    n = max(0, min(n, 100))
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await ctx.info(f"step {i}")  # 2026-07-28: only when the request asked
    return f"counted {n}"


class Name(BaseModel):
    name: str


def _ask_for_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@server.tool(description="Ask the client for a name (form elicitation via input_required), "
                         "then greet it")
def ask_name(who: Annotated[Name, Resolve(_ask_for_name)]) -> str:
    return f"hello {who.name}"


@server.prompt(description="Ask for a warm greeting")
async def greet(name: str, ctx: Context) -> str:
    await ctx.info(f"greeting {name}")  # 2026-07-28: only when the request asked
    return f"Please greet {name} warmly."


@server.resource("echo://about", description="What this server is", mime_type="text/plain")
def about() -> str:
    return "trunkline modern echo peer"


@server.resource("echo://items/{item}", description="One item, by name", mime_type="text/plain")
def item(item: str) -> str:
    return f"item {item}"


ITEMS = ("apple", "apricot", "banana")


@server.completion()
async def complete(ref, argument, context):  # the SDK's own types
    from mcp.types import Completion
    if getattr(ref, "uri", None) == "echo://items/{item}" and argument.name == "item":
        return Completion(values=[i for i in ITEMS if i.startswith(argument.value)])
    return None


add_tool_adder(server, Context)  # shared with py_http_modern.py


@server.tool(description="Announce that the resource <uri> changed (to listen streams "
             "subscribed to it). Needs --listen")
async def touch(uri: str, ctx: Context) -> str:
    await ctx.notify_resource_updated(uri)
    return f"touched {uri}"


if __name__ == "__main__":
    anyio.run(server.run_stdio_async)
