"""An official Python SDK 2.x client (run by the ``py-modern`` test venv of
tests/realpeers.py) using a ``trunkline serve --tool-search`` gateway the way a model
would: list the tools, search, call what the search found. Prints one JSON document.

    .peers/py-modern/bin/python tests/peers/sdk_tool_search.py QUERY ARGS_JSON -- COMMAND ARG...
    .peers/py-modern/bin/python tests/peers/sdk_tool_search.py QUERY ARGS_JSON -- http://HOST:PORT/mcp

It lists the tools, calls ``search_tools {"query": QUERY, "limit": 3}``, then
``call_tool`` with the first tool found and ARGS_JSON, then ``call_tool`` of a name no
tool has, and prints {"sdk", "protocol", "tools", "found", "called", "unknown"} (the
results as the SDK parsed them; the SDK checks a result's ``structuredContent`` against
the tool's ``outputSchema``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib.metadata import version


async def use(query: str, arguments: dict, command: str, args: list[str]) -> dict:
    from mcp import Client, StdioServerParameters

    is_url = command.startswith(("http://", "https://"))
    # The gateway gets this process's environment (the SDK would pass only a default few
    # variables), so it runs the trunkline under test wherever PYTHONPATH points.
    target = command if is_url else StdioServerParameters(command=command, args=args,
                                                          env=dict(os.environ))
    async with Client(target, mode="auto") as client:
        listed = await client.list_tools()
        found = await client.call_tool("search_tools", {"query": query, "limit": 3})
        first = found.structured_content["tools"][0]["name"]
        called = await client.call_tool("call_tool", {"name": first, "arguments": arguments})
        unknown = await client.call_tool("call_tool", {"name": "no_such_tool_anywhere"})
        dump = {"mode": "json", "by_alias": True, "exclude_none": True}
        return {"protocol": str(getattr(client, "protocol_version", None)),
                "tools": [t.model_dump(**dump) for t in listed.tools],
                "found": found.model_dump(**dump), "called": called.model_dump(**dump),
                "unknown": unknown.model_dump(**dump)}


def main() -> None:
    split = sys.argv.index("--")
    query, arguments = sys.argv[1], json.loads(sys.argv[2])
    command, *args = sys.argv[split + 1:]
    doc = asyncio.run(use(query, arguments, command, args))
    print(json.dumps({"sdk": version("mcp"), **doc}))


if __name__ == "__main__":
    main()
