"""The official Python SDK's client (mcp 2.x, run by the .peers/py-modern venv) taking
tasks (the extension ``io.modelcontextprotocol/tasks``) from ``trunkline serve --http``.
Prints one JSON document.

    .peers/py-modern/bin/python tests/peers/sdk_tasks_client.py URL TOOL ARGS_JSON

The SDK has no tasks client of its own; it has the interface one is built on
(``mcp.client.extension``: a ``ClientExtension`` is declared in every request's client
capabilities, and a ``ResultClaim`` finishes the result shape it claims). Here the
extension claims ``resultType: "task"`` on ``tools/call`` and finishes it as the
specification's client does: ``tasks/get`` (``Mcp-Name``: the task's id, as the SDK's
``Request.name_param`` sends it) until the task ends, then the inlined result. It
connects with ``mode="auto"`` (``server/discover``), calls TOOL with ARGS_JSON, and
prints {"extensions" (the server's ``capabilities.extensions``), "created" (the
``CreateTaskResult``), "statuses" (each ``tasks/get``'s status), "result"}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Literal

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


async def main(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    import mcp_types as types
    from mcp import Client
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from pydantic import ConfigDict, Field, TypeAdapter

    seen: dict[str, Any] = {"statuses": []}

    class CreateTaskResult(types.Result):
        model_config = ConfigDict(extra="allow", populate_by_name=True)
        result_type: Literal["task"] = Field(alias="resultType")
        task_id: str = Field(alias="taskId")
        status: str

    class TaskParams(types.RequestParams):
        task_id: str = Field(alias="taskId")

    class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
        name_param = "taskId"

    async def finish(created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        seen["created"] = created.model_dump(mode="json", by_alias=True)
        while True:
            task = await ctx.session.send_request(
                GetTask(method="tasks/get", params=TaskParams(taskId=created.task_id)),
                TypeAdapter(dict[str, Any]))
            seen["statuses"].append(task["status"])
            if task["status"] in TERMINAL:
                break
            await asyncio.sleep(0.2)
        if task["status"] != "completed":
            raise RuntimeError(f"the task ended {task['status']}: {task.get('error')}")
        return types.CallToolResult.model_validate(task["result"])

    class Tasks(ClientExtension):
        identifier = TASKS

        def claims(self) -> list[ResultClaim[Any]]:
            return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=finish)]

    async with Client(url, mode="auto", extensions=[Tasks()]) as client:
        capabilities = client.server_capabilities.model_dump(mode="json", by_alias=True,
                                                             exclude_none=True)
        result = await client.call_tool(tool, arguments)
        return {"extensions": capabilities.get("extensions"), **seen,
                "result": result.model_dump(mode="json", by_alias=True, exclude_none=True)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))))
