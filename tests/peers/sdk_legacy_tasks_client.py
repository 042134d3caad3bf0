"""The official Python SDK's client (mcp 1.x, run by the .peers/py-legacy venv) taking a
2025-11-25 task from ``trunkline serve --http``, through its experimental tasks client
(``session.experimental``). Prints one JSON document.

    .peers/py-legacy/bin/python tests/peers/sdk_legacy_tasks_client.py URL TOOL ARGS_JSON

It initializes a session, lists the tools, calls TOOL with ARGS_JSON as a task
(``call_tool_as_task``), polls it to its end (``poll_task``), takes its result
(``get_task_result``) and lists the session's tasks (``list_tasks``), and prints
{"tasks" (the server's ``capabilities.tasks``), "tool" (TOOL as listed), "created" (the
``CreateTaskResult``), "statuses" (each poll's status), "result", "listed" (the ids
``tasks/list`` gave)}.
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from typing import Any


async def main(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamablehttp_client

    warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API's
    async with streamablehttp_client(url) as (read, write, _), \
            ClientSession(read, write) as session:
        init = await session.initialize()
        listed_tools = await session.list_tools()
        [listed] = [t for t in listed_tools.tools if t.name == tool]
        created = await session.experimental.call_tool_as_task(tool, arguments)
        statuses = [s.status async for s in session.experimental.poll_task(
            created.task.taskId)]
        result = await session.experimental.get_task_result(created.task.taskId,
                                                            types.CallToolResult)
        tasks = await session.experimental.list_tasks()

        def dumped(model: Any) -> Any:
            return model.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"tasks": dumped(init.capabilities).get("tasks"), "tool": dumped(listed),
                "created": dumped(created), "statuses": statuses, "result": dumped(result),
                "listed": [t.taskId for t in tasks.tasks]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))))
