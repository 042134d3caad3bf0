"""An official Python SDK client, run by the test venvs of tests/realpeers.py, against a
stdio server (here: ``trunkline serve --stdio``) or a Streamable HTTP one (``trunkline serve
--http``). Prints one JSON document.

    .peers/py-modern/bin/python tests/peers/sdk_client.py TOOL ARGS_JSON -- COMMAND ARG...
    .peers/py-legacy/bin/python tests/peers/sdk_client.py TOOL ARGS_JSON -- http://HOST:PORT/mcp

It lists the tools (every page), calls TOOL with ARGS_JSON with a progress callback, and
prints {"sdk", "protocol", "tools", "result", "progress"}. mcp 2.x connects with
``mode="auto"`` (server/discover first), mcp 1.x with the initialize handshake. With
``SDK_CLIENT_BEARER`` in its environment, mcp 2.x sends ``Authorization: Bearer <it>`` on
every HTTP request (as a host holding an access token does). With ``SDK_CLIENT_ANSWERS``
(a JSON object: request method -> the result to give), the client answers each
``elicitation/create`` or ``sampling/createMessage`` of the server's with that result (so
declaring the capability), and the document's ``"asked"`` lists them (``[method, params]``,
in the order they came). A stdio COMMAND gets this process's environment (the SDKs'
default keeps only a few variables), so the test decides it: ``PYTHONPATH`` picks the
trunkline under test, as ``ts_client.mjs`` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib.metadata import version

ANSWERS: dict = json.loads(os.environ.get("SDK_CLIENT_ANSWERS") or "{}")
ASKED: list[list] = []
CALLBACKS = {"elicitation/create": "elicitation_callback",
             "sampling/createMessage": "sampling_callback"}


def answering() -> dict:
    """The SDK's callbacks for the canned answers: each records what it was asked."""
    from mcp import types

    shapes = {"elicitation/create": types.ElicitResult,
              "sampling/createMessage": types.CreateMessageResult}
    callbacks = {}
    for method, answer in ANSWERS.items():
        async def callback(context, params, method=method, answer=answer):
            ASKED.append([method, params.model_dump(mode="json", by_alias=True,
                                                    exclude_none=True)])
            return shapes[method].model_validate(answer)
        callbacks[CALLBACKS[method]] = callback
    return callbacks


def parse(argv: list[str]) -> tuple[str, dict, str, list[str]]:
    split = argv.index("--")
    tool, arguments = argv[1], json.loads(argv[2])
    command, *args = argv[split + 1:]
    return tool, arguments, command, args


async def modern(tool: str, arguments: dict, command: str, args: list[str]) -> dict:
    from mcp import Client, StdioServerParameters

    progress: list[list] = []
    target = command if _is_url(command) else StdioServerParameters(
        command=command, args=args, env=dict(os.environ))
    bearer = os.environ.get("SDK_CLIENT_BEARER")
    if bearer and _is_url(command):
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        target = streamable_http_client(command, http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {bearer}"}))
    async with Client(target, mode="auto", **answering()) as client:
        listed = await client.list_tools()
        result = await client.call_tool(
            tool, arguments, progress_callback=lambda p, t, m: progress.append([p, t, m]))
        return {"protocol": str(getattr(client, "protocol_version", None)),
                "tools": [t.name for t in listed.tools],
                "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
                "progress": progress, "asked": ASKED}


async def legacy(tool: str, arguments: dict, command: str, args: list[str]) -> dict:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    progress: list[list] = []

    async def on_progress(p: float, t: float | None, m: str | None) -> None:
        progress.append([p, t, m])

    if _is_url(command):
        from mcp.client.streamable_http import streamablehttp_client

        transport = streamablehttp_client(command)
    else:
        transport = stdio_client(StdioServerParameters(command=command, args=args,
                                                       env=dict(os.environ)))
    async with transport as (r, w, *_):
        async with ClientSession(r, w, **answering()) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            result = await session.call_tool(tool, arguments, progress_callback=on_progress)
            return {"protocol": init.protocolVersion, "tools": [t.name for t in listed.tools],
                    "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
                    "progress": progress, "asked": ASKED}


def _is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


def main() -> None:
    tool, arguments, command, args = parse(sys.argv)
    sdk = version("mcp")
    run = modern if int(sdk.split(".")[0]) >= 2 else legacy
    doc = asyncio.run(run(tool, arguments, command, args))
    print(json.dumps({"sdk": sdk, **doc}))


if __name__ == "__main__":
    main()
