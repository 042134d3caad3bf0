"""Tasks through the Host against a 2026-07-28 server on the official Python SDK (mcp 2.x):
the project's conformance fixture, which implements the tasks extension
(tests/peers/tasks_extension.py) over stdio and Streamable HTTP. The extension negotiated
per request, a task followed to its end, its input answered by the host's handler, its
failure and its tool error told apart, and a task that outlives its worker."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import pytest
import taplog

import realpeers
from conftest import PEERS, run
from httppeers import http_peer  # noqa: F401 - a fixture
from trunkline import ClientOptions
from trunkline.errors import ServerError, TaskCancelled
from trunkline.params import StdioParams, http
from trunkline.parent.host import Host
from trunkline.parent.tasks import TaskStatus, ToolTask
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.tasks import TASKS_EXTENSION
from trunkline.settings import HostSettings, RestartPolicy, ServerConfig

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0),
                        restart=RestartPolicy(base_s=0.01, cap_s=0.05))
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"


def fixture(tap: Any) -> StdioParams:
    server = realpeers.require(realpeers.CONFORMANCE_EVERYTHING)
    return StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                        *server.argv), dict(server.env))


def sent(tap: Any, method: str) -> list[dict[str, Any]]:
    return [m for m in taplog.messages(tap, taplog.IN) if m.get("method") == method]


async def confirm(params: dict[str, Any]) -> dict[str, Any]:
    """Yes to a confirmation, Ada to a name."""
    if "name" in params["requestedSchema"]["properties"]:
        return {"action": "accept", "content": {"name": "Ada"}}
    return {"action": "accept", "content": {"confirm": True}}


def test_a_task_is_negotiated_followed_and_its_result_given(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([ServerConfig("fx", fixture(tap))])
            told: list[TaskStatus] = []
            result = await host.call_tool("slow_compute", {"seconds": 0.5, "label": "x"},
                                          timeout=30, on_status=told.append)
            assert result.text == "computed x in 0.5 s" and result.is_error is False
            assert told[0].status == "working" and told[-1].status == "completed"
            # A tool error is a completed task: its result, isError and all.
            failing = await host.call_tool("failing_job", {}, timeout=30)
            assert failing.is_error is True and "fails, as it always does" in failing.text
            # A JSON-RPC error is a failed task: raised as the server's error.
            with pytest.raises(ServerError, match="broke, on purpose") as raised:
                await host.call_tool("protocol_error_job", {}, timeout=30)
            assert raised.value.code == -32603
    run(main())
    # Every request declared the extension (the server declared it too); the looks named
    # the task the server made.
    (first, *_) = sent(tap, "tools/call")
    assert first["params"]["_meta"][CAPABILITIES]["extensions"] == {TASKS_EXTENSION: {}}
    looks = sent(tap, "tasks/get")
    assert looks and all(set(m["params"]) == {"taskId", "_meta"} for m in looks)


def test_input_a_task_asks_for_is_answered_by_the_hosts_handler(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"
    asked: list[dict[str, Any]] = []

    async def elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return await confirm(params)

    async def main() -> None:
        client = ClientOptions(capabilities={"elicitation": {}},
                               input_handlers={"elicitation/create": elicit})
        async with Host(settings=SETTINGS, client=client) as host:
            await host.add_servers([ServerConfig("fx", fixture(tap))])
            result = await host.call_tool("confirm_delete", {"filename": "a.txt"}, timeout=30)
            assert result.text == "deleted a.txt"
            # Input by multi round-trip first, then a task: both go through the handler.
            greeted = await host.call_tool("test_tool_with_task", {}, timeout=30)
            assert greeted.text == "Hello, Ada! (from a task)"
    run(main())
    assert asked[0]["message"] == "Delete a.txt?"
    (update,) = sent(tap, "tasks/update")
    assert update["params"]["inputResponses"] == {
        "confirm": {"action": "accept", "content": {"confirm": True}}}


def test_a_detached_task_answers_input_by_respond_and_cancels(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([ServerConfig("fx", fixture(tap))])
            from trunkline import CallInput
            task = await host.start_tool("multi_input", {}, call_input=CallInput(relay=True))
            assert isinstance(task, ToolTask)
            while set(task.status.input_requests) != {"name", "proceed"}:
                await asyncio.sleep(0.02)
            await task.respond({"name": {"action": "accept", "content": {"name": "Ada"}}})
            assert set(task.status.input_requests) == {"proceed"}
            await task.respond({"proceed": {"action": "accept",
                                            "content": {"confirm": True}}})
            result = await task.wait(30)
            assert result.text == "name=Ada, proceed=True"

            long = await host.start_tool("slow_compute", {"seconds": 60})
            assert isinstance(long, ToolTask)
            await long.cancel()
            with pytest.raises(TaskCancelled):
                await long.wait(1)
            await taplog.requests_of(tap, "tasks/cancel")
            assert [m["params"]["taskId"] for m in sent(tap, "tasks/cancel")] == [long.task_id]
    run(main())


def test_a_task_outlives_its_worker_on_a_server_that_does(no_leaks, http_peer):
    """Over Streamable HTTP the server is not the worker's child: a new worker asks about
    the task again and follows it to its end, under the same id."""
    server = realpeers.require(realpeers.CONFORMANCE_EVERYTHING)
    peer = http_peer([server.argv[0], server.argv[1], "--http", "127.0.0.1:0"], server.env)

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([ServerConfig("fx", http(peer.url))])
            tasks = [await host.start_tool("slow_compute", {"seconds": 3, "label": str(n)})
                     for n in range(5)]
            assert all(isinstance(t, ToolTask) for t in tasks)
            worker = host.servers()[0].worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            results = await asyncio.gather(*(t.wait(30) for t in tasks))  # type: ignore[union-attr]
            assert [r.text for r in results] == [f"computed {n} in 3 s" for n in range(5)]
            assert host.servers()[0].worker_pid != worker
            assert host.servers()[0].restarts >= 1
    run(main())


def test_a_call_that_brings_its_own_capabilities_still_declares_the_extension(tmp_path,
                                                                              no_leaks):
    """A gateway's call declares its client's capabilities upstream (``CallInput``): the
    extensions the host negotiated stay declared, so the host still follows the task."""
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        from trunkline import CallInput
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([ServerConfig("fx", fixture(tap))])
            call_input = CallInput(handlers={"elicitation/create": confirm},
                                   capabilities={"elicitation": {}})
            result = await host.call_tool("confirm_delete", {"filename": "b.txt"},
                                          call_input=call_input, timeout=30)
            assert result.text == "deleted b.txt"
    run(main())
    (call,) = sent(tap, "tools/call")
    assert call["params"]["_meta"][CAPABILITIES] == {
        "elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}
    assert len(sent(tap, "tasks/update")) == 1


def test_a_tasks_status_keeps_the_servers_times_from_its_creation_on(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([ServerConfig("fx", fixture(tap))])
            task = await host.start_tool("slow_compute", {"seconds": 0.5})
            assert isinstance(task, ToolTask)
            created = task.status.created_at
            assert created is not None and task.status.last_updated_at is not None
            told: list[TaskStatus] = []
            task.watch(told.append)
            await task.wait(30)
            # Only news was told (the end), never the creation again without its times.
            assert [s.status for s in told] == ["completed"]
            assert all(s.created_at == created for s in told)
    run(main())
