"""2025-11-25 tasks through ``trunkline serve --http`` (the ``tasks`` capability of a
legacy session), in front of a real 2025-11-25 server that runs a tool as a task:
server-everything's ``simulate-research-query`` (``taskSupport: "required"``, four stages
of a second each), behind a wire tap; and in front of the project's 2026-07-28 conformance
fixture on mcp 2.x (``slow_compute``, ``protocol_error_job``).

The gateway declares ``capabilities.tasks`` in its ``initialize`` and lists every tool with
``taskSupport: "optional"``; a session's ``tools/call`` naming ``params.task`` gets
``{"task": Task}`` under an id of the gateway's own, followed with ``tasks/get``,
``tasks/result``, ``tasks/list`` and ``tasks/cancel``; a tool whose server answers at once
is held as a task that has ended; another session's id is unknown."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson
import pytest
import taplog
from test_serve_tasks import TERMINAL, TOOL, fleet, their_ids, upstream

import realpeers
from conftest import PEERS, run
from gateways import HttpGateway, StdioGateway, fleet_config
from trunkline.params import StdioParams

pytestmark = pytest.mark.real_servers

RELATED_TASK = "io.modelcontextprotocol/related-task"
CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
TASK_FIELDS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl",
               "pollInterval"}


async def ask(gw: HttpGateway, session: dict[str, str], method: str,
              params: dict[str, Any]) -> dict[str, Any]:
    """One request of the legacy ``session``: its answer."""
    message = gw.message(method, params)
    status, answer, _ = await gw.post(message, session)
    assert status == 200 and answer["id"] == message["id"], (status, answer)
    return answer


async def started(gw: HttpGateway, session: dict[str, str], topic: str,
                  **task: Any) -> dict[str, Any]:
    """A task of ``TOOL`` the session asked for: its ``Task``."""
    answer = await ask(gw, session, "tools/call", {"name": TOOL, "arguments": {"topic": topic},
                                                   "task": task})
    assert set(answer.get("result", {})) == {"task"}, answer
    return answer["result"]["task"]


async def ended(gw: HttpGateway, session: dict[str, str], task_id: str
                ) -> list[dict[str, Any]]:
    """``tasks/get`` until the task ends: every answer (a fifth of a second apart, within
    a minute)."""
    seen = []
    for _ in range(300):
        answer = await ask(gw, session, "tasks/get", {"taskId": task_id})
        seen.append(answer["result"])
        if answer["result"]["status"] in TERMINAL:
            return seen
        await asyncio.sleep(0.2)
    raise AssertionError(f"the task did not end: {seen[-1]}")


def test_a_legacy_session_takes_a_task_and_follows_it_to_its_report(gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, init = await gw.legacy_session()
        assert init["result"]["capabilities"]["tasks"] == CAPABILITY
        tools = (await ask(gw, session, "tools/list", {}))["result"]["tools"]
        # The server's "required" is served as "optional", as is every other tool's.
        assert {t["name"]: t["execution"]["taskSupport"] for t in tools}[TOOL] == "optional"
        assert {t["execution"]["taskSupport"] for t in tools} == {"optional"}

        task = await started(gw, session, "tides", ttl=120000)
        assert task["status"] == "working" and set(task) <= TASK_FIELDS
        assert task["ttl"] == 120000, "the client asked for less than the gateway keeps"
        assert task["taskId"].startswith("tl-task.")
        [call] = upstream(tap, "tools/call")
        assert call["params"]["task"] == {}, "the server was asked to run it as a task"
        [theirs] = their_ids(tap)
        assert theirs not in task["taskId"]

        seen = await ended(gw, session, task["taskId"])
        done = seen[-1]
        assert done["status"] == "completed" and set(done) <= TASK_FIELDS
        assert {s["createdAt"] for s in seen} == {task["createdAt"]}
        assert "Generating report..." in [s.get("statusMessage") for s in seen]

        result = (await ask(gw, session, "tasks/result", {"taskId": task["taskId"]}))["result"]
        assert "# Research Report: tides" in result["content"][0]["text"]
        assert "resultType" not in result
        # Names the gateway's task, never the server's.
        assert result["_meta"][RELATED_TASK] == {"taskId": task["taskId"]}

        listed = (await ask(gw, session, "tasks/list", {}))["result"]
        assert [t["taskId"] for t in listed["tasks"]] == [task["taskId"]]
        assert "nextCursor" not in listed

        # Another session: the first's task is as unknown as a made-up one.
        other, _ = await gw.legacy_session()
        assert (await ask(gw, other, "tasks/list", {}))["result"] == {"tasks": []}
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            for task_id in (task["taskId"], task["taskId"][:-2] + "xx", theirs):
                answer = await ask(gw, other, method, {"taskId": task_id})
                assert answer["error"]["code"] == -32602, (method, answer)
        bad = await ask(gw, session, "tasks/list", {"cursor": "nope"})
        assert bad["error"]["code"] == -32602
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_tasks_result_waits_for_the_end_and_a_plain_call_stays_plain(gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, _ = await gw.legacy_session()
        task = await started(gw, session, "waited")
        result = (await ask(gw, session, "tasks/result", {"taskId": task["taskId"]}))["result"]
        assert "# Research Report: waited" in result["content"][0]["text"]
        plain = await ask(gw, session, "tools/call", {"name": TOOL,
                                                      "arguments": {"topic": "plain"}})
        assert "# Research Report: plain" in plain["result"]["content"][0]["text"]
        assert "task" not in plain["result"]
        listed = (await ask(gw, session, "tasks/list", {}))["result"]["tasks"]
        assert [t["taskId"] for t in listed] == [task["taskId"]]
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_tasks_cancel_reaches_the_server_and_an_ended_task_is_not_cancelled(
        gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, _ = await gw.legacy_session()
        task = await started(gw, session, "sun")
        cancelled = (await ask(gw, session, "tasks/cancel", {"taskId": task["taskId"]}))
        assert cancelled["result"]["status"] == "cancelled"
        assert cancelled["result"]["taskId"] == task["taskId"]
        again = await ask(gw, session, "tasks/cancel", {"taskId": task["taskId"]})
        assert again["error"]["code"] == -32602, again
        ended_as = await ask(gw, session, "tasks/result", {"taskId": task["taskId"]})
        assert "error" in ended_as, ended_as
        for _ in range(200):
            if upstream(tap, "tasks/cancel"):
                break
            await asyncio.sleep(0.05)
        [theirs] = their_ids(tap)
        assert [m["params"] for m in upstream(tap, "tasks/cancel")] == [{"taskId": theirs}]
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_tool_its_server_answers_at_once_is_a_task_that_has_ended(gateways, tmp_path):
    """server-everything's ``echo`` runs no tasks: the session still gets a task, ended."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, _ = await gw.legacy_session()
        answer = await ask(gw, session, "tools/call", {"name": "echo",
                                                       "arguments": {"message": "hi"},
                                                       "task": {}})
        task = answer["result"]["task"]
        assert task["status"] == "completed" and set(task) <= TASK_FIELDS
        [call] = upstream(tap, "tools/call")
        assert "task" not in call["params"]
        got = (await ask(gw, session, "tasks/get", {"taskId": task["taskId"]}))["result"]
        assert got == task
        result = (await ask(gw, session, "tasks/result", {"taskId": task["taskId"]}))["result"]
        assert result["content"] == [{"type": "text", "text": "Echo: hi"}]
        assert result["_meta"][RELATED_TASK] == {"taskId": task["taskId"]}
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_stdio_legacy_client_takes_a_task_too(gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await StdioGateway.start(path, gateways)
        init = await gw.call("initialize", {"protocolVersion": "2025-11-25",
                                            "capabilities": {},
                                            "clientInfo": {"name": "old", "version": "1"}})
        assert init["result"]["capabilities"]["tasks"] == CAPABILITY
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        created = await gw.call("tools/call", {"name": TOOL, "arguments": {"topic": "pipe"},
                                               "task": {}})
        task_id = created["result"]["task"]["taskId"]
        result = await gw.call("tasks/result", {"taskId": task_id})
        assert "# Research Report: pipe" in result["result"]["content"][0]["text"]
        listed = await gw.call("tasks/list", {})
        assert [t["taskId"] for t in listed["result"]["tasks"]] == [task_id]
        assert await gw.close() == 0
    run(main(), timeout=120)


def test_the_official_python_sdk_1x_client_takes_a_task(gateways, tmp_path):
    """mcp 1.x's experimental tasks client (``session.experimental``): ``call_tool_as_task``,
    ``poll_task``, ``get_task_result``, ``list_tasks`` (``sdk_legacy_tasks_client.py``)."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)
    python = realpeers.PY_LEGACY_VENV / "bin" / "python"

    async def main():
        gw = await HttpGateway.start(path, gateways)
        client = await asyncio.create_subprocess_exec(
            str(python), str(PEERS / "sdk_legacy_tasks_client.py"), gw.url, TOOL,
            orjson.dumps({"topic": "sdk"}).decode(), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(client.communicate(), 120)
        assert client.returncode == 0, err.decode()[-3000:]
        assert await gw.stop() == 0
        return orjson.loads(out.decode().strip().splitlines()[-1])
    done = run(main(), timeout=180)
    assert done["tasks"] == CAPABILITY
    assert done["tool"]["execution"] == {"taskSupport": "optional"}
    task_id = done["created"]["task"]["taskId"]
    assert task_id.startswith("tl-task.") and done["created"]["task"]["ttl"] == 60000
    assert done["statuses"][-1] == "completed" and set(done["statuses"][:-1]) <= {"working"}
    assert "# Research Report: sdk" in done["result"]["content"][0]["text"]
    assert done["listed"] == [task_id]


def modern_fleet(tmp_path, tap):
    """The conformance fixture (a 2026-07-28 server on mcp 2.x that runs the tasks
    extension), its stdio recorded in ``tap``."""
    server = realpeers.require(realpeers.CONFORMANCE_EVERYTHING)
    params = StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                          *server.argv), dict(server.env))
    return fleet_config(tmp_path, {"fx": params})


def test_a_legacy_session_takes_a_modern_server_s_task_and_its_failure(gateways, tmp_path):
    """In front of a 2026-07-28 server: ``slow_compute`` becomes the server's task (under
    the extension, upstream), ``protocol_error_job``'s JSON-RPC error is the error of
    ``tasks/result``."""
    tap = tmp_path / "tap.jsonl"
    path = modern_fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, init = await gw.legacy_session()
        assert init["result"]["capabilities"]["tasks"] == CAPABILITY
        answer = await ask(gw, session, "tools/call", {
            "name": "slow_compute", "arguments": {"seconds": 1, "label": "x"}, "task": {}})
        task = answer["result"]["task"]
        assert task["status"] == "working" and set(task) <= TASK_FIELDS
        [created] = [m["result"] for m in taplog.messages(tap, taplog.OUT)
                     if isinstance(m.get("result"), dict)
                     and m["result"].get("resultType") == "task"]
        assert created["taskId"] not in task["taskId"]
        result = (await ask(gw, session, "tasks/result", {"taskId": task["taskId"]}))["result"]
        assert result["content"] == [{"type": "text", "text": "computed x in 1 s"}]
        assert result["_meta"][RELATED_TASK] == {"taskId": task["taskId"]}
        done = (await ask(gw, session, "tasks/get", {"taskId": task["taskId"]}))["result"]
        assert done["status"] == "completed"

        answer = await ask(gw, session, "tools/call", {
            "name": "protocol_error_job", "arguments": {}, "task": {}})
        failing = answer["result"]["task"]
        failed = await ask(gw, session, "tasks/result", {"taskId": failing["taskId"]})
        assert "result" not in failed and failed["error"]["code"] != 0, failed
        got = (await ask(gw, session, "tasks/get", {"taskId": failing["taskId"]}))["result"]
        assert got["status"] == "failed"
        listed = (await ask(gw, session, "tasks/list", {}))["result"]["tasks"]
        assert [t["taskId"] for t in listed] == [task["taskId"], failing["taskId"]]
        assert await gw.stop() == 0
    run(main(), timeout=120)
