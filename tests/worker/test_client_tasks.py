"""The host's side of a legacy server's client-side tasks (``worker.client_tasks``): what
the server is answered, with the handler's work in between, and what it cannot make the
host hold (server-everything's ``-async`` tools drive the same end to end:
tests/host/test_tasks_legacy.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from conftest import run
from trunkline.loop.tasks import TaskScope
from trunkline.worker import client_tasks
from trunkline.worker.client_tasks import ClientTasks


class Wire:
    """What the tasks wrote back to the server, by request id."""

    def __init__(self) -> None:
        self.answers: dict[Any, dict[str, Any]] = {}

    def write(self, line: bytes) -> None:
        message = orjson.loads(line)
        self.answers[message["id"]] = message

    async def answer(self, request_id: Any) -> dict[str, Any]:
        while request_id not in self.answers:
            await asyncio.sleep(0.001)
        return self.answers[request_id]


def test_a_task_is_answered_at_once_looked_at_and_taken_when_its_handler_ends():
    async def main() -> None:
        wire, release = Wire(), asyncio.Event()

        async def elicit(params: dict[str, Any]) -> dict[str, Any]:
            assert "task" not in params  # the augmentation is the tasks', not the handler's
            await release.wait()
            return {"action": "accept", "content": {"name": "Ada"}}

        async with TaskScope("t") as scope:
            tasks = ClientTasks(wire.write, scope)
            tasks.start(1, "elicitation/create", elicit,
                        {"task": {"ttl": 60000}, "message": "name?", "requestedSchema": {}})
            created = (await wire.answer(1))["result"]["task"]
            task_id = created["taskId"]
            assert created["status"] == "input_required" and created["ttl"] == 60000
            assert len(task_id) == 32
            tasks.on_request(2, "tasks/get", {"taskId": task_id})
            assert (await wire.answer(2))["result"]["status"] == "input_required"
            tasks.on_request(3, "tasks/result", {"taskId": task_id})  # waits for the end
            await asyncio.sleep(0.01)
            assert 3 not in wire.answers
            release.set()
            result = (await wire.answer(3))["result"]
            assert result["action"] == "accept" and result["content"] == {"name": "Ada"}
            assert result["_meta"]["io.modelcontextprotocol/related-task"] == {
                "taskId": task_id}
            tasks.on_request(4, "tasks/get", {"taskId": task_id})
            assert (await wire.answer(4))["result"]["status"] == "completed"
            tasks.on_request(5, "tasks/list", {})
            assert [t["taskId"] for t in (await wire.answer(5))["result"]["tasks"]] == [task_id]
            tasks.close()
    run(main())


def test_an_unknown_or_guessed_id_is_invalid_params_and_cancel_stops_the_handler():
    async def main() -> None:
        wire, started, cancelled = Wire(), asyncio.Event(), asyncio.Event()

        async def sample(params: dict[str, Any]) -> dict[str, Any]:
            started.set()
            try:
                await asyncio.sleep(3600)
            finally:
                cancelled.set()
            return {}

        async with TaskScope("t") as scope:
            tasks = ClientTasks(wire.write, scope)
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                tasks.on_request(method, method, {"taskId": "guessed"})
                assert (await wire.answer(method))["error"]["code"] == -32602
            tasks.start(1, "sampling/createMessage", sample, {"task": {}, "messages": []})
            task_id = (await wire.answer(1))["result"]["task"]["taskId"]
            await started.wait()
            tasks.on_request(2, "tasks/result", {"taskId": task_id})
            tasks.on_request(3, "tasks/cancel", {"taskId": task_id})
            assert (await wire.answer(3))["result"]["status"] == "cancelled"
            await asyncio.wait_for(cancelled.wait(), 5)
            assert (await wire.answer(2))["error"]["code"] == -32603
            tasks.close()
    run(main())


def test_beyond_max_tasks_the_request_is_refused(monkeypatch):
    monkeypatch.setattr(client_tasks, "MAX_TASKS", 2)

    async def main() -> None:
        wire = Wire()

        async def never(params: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(3600)
            return {}

        async with TaskScope("t") as scope:
            tasks = ClientTasks(wire.write, scope)
            for n in range(3):
                tasks.start(n, "elicitation/create", never, {"task": {}})
            assert "result" in await wire.answer(0) and "result" in await wire.answer(1)
            refused = await wire.answer(2)
            assert refused["error"]["code"] == -32603 and "2 tasks" in refused["error"]["message"]
            assert len(tasks) == 2
            tasks.close()
            assert len(tasks) == 0
    run(main())
