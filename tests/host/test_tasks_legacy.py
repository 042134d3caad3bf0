"""Tasks through the Host against a real 2025-11-25 server: server-everything's
``simulate-research-query`` (``execution.taskSupport: "required"``), followed to its end,
cancelled on the wire, resumed by id, and its worker killed while tasks are in flight."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

import pytest
import taplog

import realpeers
from conftest import PEERS, run
from trunkline import ClientOptions
from trunkline.errors import TaskCancelled, TaskLimitReached, TaskLost
from trunkline.params import StdioParams
from trunkline.parent.call_request import CallInput
from trunkline.parent.host import Host
from trunkline.parent.tasks import TaskStatus, ToolTask
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, RestartPolicy, ServerConfig

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0),
                        restart=RestartPolicy(base_s=0.01, cap_s=0.05))
TOOL = "simulate-research-query"


def everything(tap: Any) -> StdioParams:
    server = realpeers.require(realpeers.LEGACY_TS_EVERYTHING)
    return StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                        *server.argv), dict(server.env))


#: server-everything's research stages, each a statusMessage of the task, in order.
STAGES = ["Gathering sources...", "Analyzing content...", "Synthesizing findings...",
          "Generating report..."]


def assert_stages(messages: list[str | None]) -> None:
    """Each message a stage, in the stages' order (a look may miss a stage, never
    reorder them)."""
    assert messages and all(m in STAGES for m in messages), messages
    indexes = [STAGES.index(m) for m in messages]  # type: ignore[arg-type]
    assert indexes == sorted(indexes), messages


def sent(tap: Any, method: str) -> list[dict[str, Any]]:
    return [m for m in taplog.messages(tap, taplog.IN) if m.get("method") == method]


async def started(tap: Any, host: Host, **config: Any) -> None:
    await host.add_servers([ServerConfig("ev", everything(tap), allow_legacy=True,
                                         **config)])


def test_a_required_task_tool_is_listed_and_call_tool_waits_for_its_task(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host)
            entry = host.tool_entry(TOOL)
            assert entry is not None and entry.raw["execution"]["taskSupport"] == "required"
            told: list[TaskStatus] = []
            result = await host.call_tool(TOOL, {"topic": "tides"}, timeout=60,
                                          on_status=told.append)
            assert "# Research Report: tides" in result.text
            assert result.is_error is False
            # The first status, each stage, and the end, told to the call's watcher.
            assert told[0].status == "working" and told[-1].status == "completed"
            assert_stages([s.message for s in told])
    run(main())
    # On the wire: one task-augmented call, looks at the task, then its payload.
    (call,) = sent(tap, "tools/call")
    assert call["params"]["task"] == {}
    assert sent(tap, "tasks/get") and len(sent(tap, "tasks/result")) == 1


def test_start_tool_reports_each_status_and_cancel_reaches_the_server(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host)
            task = await host.start_tool(TOOL, {"topic": "moon"})
            assert isinstance(task, ToolTask) and task.status.status == "working"
            created_at = task.status.created_at
            assert created_at is not None
            seen: list[TaskStatus] = []
            task.watch(seen.append)
            result = await task.wait(60)
            assert "Research Report: moon" in result.text
            # Every status says when the task was created and how often to look, the end
            # too (its tasks/result says neither: what a report leaves out is kept).
            assert {s.created_at for s in seen} == {created_at}
            assert None not in {s.poll_interval_ms for s in seen}
            assert task.outcome() is result
            # The stages the looks saw (which ones depends on their timing), in order,
            # each told once, ending completed.
            assert seen[-1].status == "completed"
            assert_stages([s.message for s in seen])
            assert len(seen) == len({(s.status, s.message) for s in seen})

            second = await host.start_tool(TOOL, {"topic": "sun"})
            assert isinstance(second, ToolTask) and second.outcome() is None
            await second.cancel()
            with pytest.raises(TaskCancelled):
                await second.wait(5)
            assert isinstance(second.outcome(), TaskCancelled)
            # Cooperative: the server was told, by task id.
            await taplog.requests_of(tap, "tasks/cancel")
            assert [m["params"] for m in sent(tap, "tasks/cancel")] == [
                {"taskId": second.task_id}]
    run(main())


def test_a_call_whose_caller_gives_up_cancels_its_task_upstream(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host)
            call = asyncio.ensure_future(host.call_tool(TOOL, {"topic": "a"}, timeout=60))
            while not sent(tap, "tasks/get"):
                await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await taplog.requests_of(tap, "tasks/cancel")
            assert len(sent(tap, "tasks/cancel")) == 1
    run(main())


def test_resume_task_follows_a_task_by_its_id(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host)
            task = await host.start_tool(TOOL, {"topic": "resumed"})
            assert isinstance(task, ToolTask)
            again = host.resume_task(TOOL, task.task_id)
            assert again.task_id == task.task_id
            result = await again.wait(60)
            assert "Research Report: resumed" in result.text
            unknown = host.resume_task(TOOL, "no-such-task")
            with pytest.raises(TaskLost, match="no longer knows"):
                await unknown.wait(30)
    run(main())


def test_tasks_beyond_max_tasks_are_refused_and_cancelled(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host, max_tasks=1)
            first = await host.start_tool(TOOL, {"topic": "one"})
            assert isinstance(first, ToolTask)
            with pytest.raises(TaskLimitReached, match="max_tasks"):
                await host.start_tool(TOOL, {"topic": "two"})
            await taplog.requests_of(tap, "tasks/cancel")
            assert len(sent(tap, "tasks/cancel")) == 1
            await first.cancel()
    run(main())


def test_fifty_tasks_in_flight_when_the_worker_is_killed_each_end_clearly(tmp_path,
                                                                           no_leaks):
    """The server's process goes with its worker: the new one does not know the tasks,
    so each ends with TaskLost, none hangs, and nothing is left behind (``no_leaks``)."""
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host)
            tasks = [await host.start_tool(TOOL, {"topic": f"t{n}"}) for n in range(50)]
            assert all(isinstance(t, ToolTask) for t in tasks)
            worker = host.servers()[0].worker_pid
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            outcomes = await asyncio.gather(*(t.wait(60) for t in tasks),  # type: ignore[union-attr]
                                            return_exceptions=True)
            # Each either finished (its end was told before the kill) or was forgotten
            # by the new server process, said so.
            for outcome in outcomes:
                assert isinstance(outcome, TaskLost) or "Research Report" in outcome.text, \
                    outcome
            assert any(isinstance(o, TaskLost) for o in outcomes)
            assert host._servers.handle("ev").tasks.__len__() == 0
    run(main(), timeout=180)


def test_an_ambiguous_query_asks_through_the_host_elicitation_handler(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"
    asked: list[dict[str, Any]] = []

    async def elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"interpretation": "ocean tides"}}

    async def main() -> None:
        client = ClientOptions(capabilities={"elicitation": {}},
                               input_handlers={"elicitation/create": elicit})
        async with Host(settings=SETTINGS, client=client) as host:
            await started(tap, host)
            result = await host.call_tool(TOOL, {"topic": "tides", "ambiguous": True},
                                          timeout=60)
            assert "ocean tides" in result.text
    run(main())
    assert len(asked) == 1 and "tides" in asked[0]["message"]


def _answering(choice: str, asked: list[dict[str, Any]]) -> Any:
    async def elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"interpretation": choice}}
    return elicit


def test_a_calls_own_handlers_answer_what_its_task_asks(tmp_path, no_leaks):
    """The task's question comes while the host looks at the task (``tasks/result``), not
    while the call's request is in flight: it names its task (``related-task``), and
    the handlers of the call that task is answer it (a gateway's: its client's)."""
    tap = tmp_path / "tap.jsonl"
    asked: list[dict[str, Any]] = []

    async def main() -> None:
        client = ClientOptions(capabilities={"elicitation": {}})
        async with Host(settings=SETTINGS, client=client) as host:
            await started(tap, host)
            result = await host.call_tool(
                TOOL, {"topic": "tides", "ambiguous": True}, timeout=60,
                call_input=CallInput(handlers={"elicitation/create": _answering(
                    "historical", asked)}))
            assert "Research Report: tides (historical)" in result.text, result.text
    run(main())
    assert len(asked) == 1 and "tides" in asked[0]["message"]


def test_a_tasks_question_never_goes_to_another_call_in_flight(tmp_path, no_leaks):
    """Another call's request is the server's one request in flight when the task asks:
    the question is still the task's call's (here: the host's, the call brought none),
    never the other caller's."""
    tap = tmp_path / "tap.jsonl"
    mine: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []

    async def main() -> None:
        client = ClientOptions(capabilities={"elicitation": {}},
                               input_handlers={"elicitation/create": _answering(
                                   "current", mine)})
        async with Host(settings=SETTINGS, client=client) as host:
            await started(tap, host)
            other = asyncio.ensure_future(host.call_tool(
                "trigger-long-running-operation", {"duration": 60, "steps": 60}, timeout=90,
                call_input=CallInput(handlers={"elicitation/create": _answering(
                    "historical", theirs)})))
            while not sent(tap, "tools/call"):
                await asyncio.sleep(0.05)
            try:
                result = await host.call_tool(TOOL, {"topic": "tides", "ambiguous": True},
                                              timeout=60)
            finally:
                other.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await other
            assert "Research Report: tides (current)" in result.text, result.text
    run(main())
    assert theirs == [] and len(mine) == 1


def test_the_server_asks_the_host_to_run_its_elicitation_and_sampling_as_tasks(tmp_path,
                                                                               no_leaks):
    """server-everything offers its ``-async`` tools only to a client that declares
    ``tasks.requests``: the host runs the server's requests as tasks the server polls."""
    tap = tmp_path / "tap.jsonl"

    async def elicit(params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"name": "Ada", "favoriteColor": "Green"}}

    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "model": "test-model",
                "content": {"type": "text", "text": "sampled as a task"}}

    async def main() -> None:
        client = ClientOptions(capabilities={"elicitation": {}, "sampling": {}},
                               input_handlers={"elicitation/create": elicit,
                                               "sampling/createMessage": sample})
        async with Host(settings=SETTINGS, client=client) as host:
            await started(tap, host)
            names = {t.name for t in host.tools()}
            assert {"trigger-elicitation-request-async",
                    "trigger-sampling-request-async"} <= names
            result = await host.call_tool("trigger-elicitation-request-async", {}, timeout=60)
            assert "[COMPLETED]" in result.text and "Name: Ada" in result.text
            result = await host.call_tool("trigger-sampling-request-async",
                                          {"prompt": "hi"}, timeout=60)
            assert "sampled as a task" in result.text, result.text
    run(main())
    (initialize,) = [m for m in taplog.messages(tap, taplog.IN)
                     if m.get("method") == "initialize"]
    assert initialize["params"]["capabilities"]["tasks"] == {
        "list": {}, "cancel": {},
        "requests": {"elicitation": {"create": {}}, "sampling": {"createMessage": {}}}}
    # The server looked at the host's tasks and took their answers.
    answered = [m for m in taplog.messages(tap, taplog.OUT) if m.get("method") == "tasks/result"]
    assert len(answered) == 2


def test_without_declared_input_kinds_no_client_tasks_are_declared(tmp_path, no_leaks):
    tap = tmp_path / "tap.jsonl"

    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await started(tap, host)
            names = {t.name for t in host.tools()}
            assert "trigger-elicitation-request-async" not in names
    run(main())
    (initialize,) = [m for m in taplog.messages(tap, taplog.IN)
                     if m.get("method") == "initialize"]
    assert "tasks" not in initialize["params"]["capabilities"]
