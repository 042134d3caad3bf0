"""Tasks through ``trunkline serve --http`` (MCP tasks: the extension
``io.modelcontextprotocol/tasks``), in front of a real 2025-11-25 server that runs a tool
as a task: server-everything's ``simulate-research-query`` (``taskSupport: "required"``,
four stages of a second each), behind a wire tap.

A 2026-07-28 client that names the extension gets a ``CreateTaskResult`` under an id of
the gateway's own and follows the task with ``tasks/get`` (answered from what the host last
heard: the server is not asked per poll), cancels one with ``tasks/cancel`` (which reaches
the server, under the server's id); a client that does not name it, of either era, gets
the report as a plain result; another client's id is unknown; the bounds hold."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp
import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from gateways import (
    CAPS,
    JSON_ONLY,
    HttpGateway,
    StdioGateway,
    fleet_config,
    modern_meta,
    sse_messages,
)
from trunkline.params import StdioParams

pytestmark = pytest.mark.real_servers

TASKS = "io.modelcontextprotocol/tasks"
TOOL = "simulate-research-query"
TERMINAL = {"completed", "failed", "cancelled"}


def fleet(tmp_path, tap):
    """server-everything, allowlisted, its stdio recorded in ``tap``."""
    server = realpeers.require(realpeers.LEGACY_TS_EVERYTHING)
    params = StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                          *server.argv), dict(server.env))
    return fleet_config(tmp_path, {"ev": params}, allow_legacy=("ev",))


def upstream(tap, method: str) -> list[dict[str, Any]]:
    """The requests of ``method`` the gateway sent server-everything."""
    return [m for m in taplog.messages(tap, taplog.IN) if m.get("method") == method]


def their_ids(tap) -> list[str]:
    """The ids server-everything gave the tasks it created."""
    return [m["result"]["task"]["taskId"] for m in taplog.messages(tap, taplog.OUT)
            if isinstance(m.get("result"), dict) and "task" in m["result"]]


def taking(**extra: Any) -> dict[str, Any]:
    """The ``_meta`` of a 2026-07-28 request whose client takes tasks."""
    return modern_meta(**{CAPS: {"extensions": {TASKS: {}}}}, **extra)


async def ask(gw: HttpGateway, method: str, params: dict[str, Any],
              meta: dict[str, Any] | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """One 2026-07-28 request (its routing headers right, ``headers`` over them): its
    status and answer."""
    message = gw.message(method, {**params, "_meta": taking() if meta is None else meta})
    status, answer, _ = await gw.post(message, {**gw.modern_headers(message),
                                                **(headers or {})})
    assert answer["id"] == message["id"], answer
    return status, answer


async def started(gw: HttpGateway, topic: str, **headers: str) -> dict[str, Any]:
    """A task of ``TOOL`` started by a client that takes tasks: its CreateTaskResult."""
    status, answer = await ask(gw, "tools/call", {"name": TOOL, "arguments": {"topic": topic}},
                               headers=headers)
    assert status == 200 and "result" in answer, answer
    return answer["result"]


async def ended(gw: HttpGateway, task_id: str, **headers: str) -> list[dict[str, Any]]:
    """``tasks/get`` until the task ends: every answer (the task's own, once a fifth of a
    second, within a minute)."""
    seen = []
    for _ in range(300):
        status, answer = await ask(gw, "tasks/get", {"taskId": task_id}, headers=headers)
        assert status == 200 and "result" in answer, answer
        seen.append(answer["result"])
        if answer["result"]["status"] in TERMINAL:
            return seen
        await asyncio.sleep(0.2)
    raise AssertionError(f"the task did not end: {seen[-1]}")


def test_a_client_that_takes_tasks_gets_one_and_follows_it_to_its_report(
        gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        _, discovered = await gw.modern("server/discover")
        assert discovered["result"]["capabilities"]["extensions"] == {TASKS: {}}

        created = await started(gw, "tides")
        # Flat (Result & Task), under the gateway's own id: never the server's.
        assert created["resultType"] == "task" and created["status"] == "working"
        assert set(created) <= {"resultType", "taskId", "status", "statusMessage",
                                "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
        task_id = created["taskId"]
        [call] = upstream(tap, "tools/call")
        assert call["params"]["task"] == {}, "the server was asked to run it as a task"
        [theirs] = their_ids(tap)
        assert task_id.startswith("tl-task.") and theirs not in task_id
        assert isinstance(created["ttlMs"], int) and created["ttlMs"] > 0
        assert created["createdAt"][:4].isdigit() and created["createdAt"][10] == "T"

        # Polled as fast as a client likes: the server is looked at at its own pace.
        before = len(upstream(tap, "tasks/get"))
        for _ in range(50):
            status, answer = await ask(gw, "tasks/get", {"taskId": task_id})
            assert status == 200 and answer["result"]["taskId"] == task_id
        assert len(upstream(tap, "tasks/get")) - before < 50

        seen = await ended(gw, task_id)
        done = seen[-1]
        assert done["status"] == "completed" and done["resultType"] == "complete"
        assert {s["createdAt"] for s in seen} == {created["createdAt"]}
        messages = [s.get("statusMessage") for s in seen]
        assert "Generating report..." in messages
        # The report as the call would have answered a 2026-07-28 client; the hop's own
        # _meta (the legacy related-task key) stays behind.
        result = done["result"]
        assert "# Research Report: tides" in result["content"][0]["text"]
        assert result["resultType"] == "complete"
        assert "io.modelcontextprotocol/related-task" not in result.get("_meta", {})
        assert "error" not in done and "inputRequests" not in done
        # Kept for its TTL: asked again, the same.
        _, again = await ask(gw, "tasks/get", {"taskId": task_id})
        assert again["result"] == done
        assert await gw.stop() == 0
    run(main(), timeout=180)
    assert len(upstream(tap, "tasks/result")) == 1


def test_tasks_cancel_reaches_the_server_under_its_own_id(gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        created = await started(gw, "sun")
        status, ack = await ask(gw, "tasks/cancel", {"taskId": created["taskId"]})
        assert (status, ack["result"]) == (200, {"resultType": "complete"})
        _, after = await ask(gw, "tasks/get", {"taskId": created["taskId"]})
        assert after["result"]["status"] == "cancelled"
        assert "result" not in after["result"] and "error" not in after["result"]
        # Once more: the same acknowledgement, nothing more sent.
        _, again = await ask(gw, "tasks/cancel", {"taskId": created["taskId"]})
        assert again["result"] == {"resultType": "complete"}
        for _ in range(200):
            if upstream(tap, "tasks/cancel"):
                break
            await asyncio.sleep(0.05)
        [theirs] = their_ids(tap)
        assert [m["params"] for m in upstream(tap, "tasks/cancel")] == [{"taskId": theirs}]
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_client_that_does_not_take_tasks_gets_the_report_as_a_plain_result(
        gateways, tmp_path):
    """The tool can only run as a task; the gateway waits for it within the call's
    deadline, so every client can call it: a 2026-07-28 one that did not name the
    extension, and a 2025-11-25 session, over JSON and over its call's SSE stream."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        status, plain = await ask(gw, "tools/call", {"name": TOOL,
                                                     "arguments": {"topic": "plain"}},
                                  meta=modern_meta())
        assert status == 200 and plain["result"]["resultType"] == "complete", plain
        assert "# Research Report: plain" in plain["result"]["content"][0]["text"]
        assert "taskId" not in plain["result"]

        session, _ = await gw.legacy_session()
        call = gw.message("tools/call", {"name": TOOL, "arguments": {"topic": "old"}})
        async with gw.http.post(gw.url, data=orjson.dumps(call), headers=session) as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            answers = [m async for m in sse_messages(stream) if m.get("id") == call["id"]]
        [answer] = answers
        assert "# Research Report: old" in answer["result"]["content"][0]["text"]
        assert "resultType" not in answer["result"]
        json_only = {**session, "Accept": "application/json"}
        call = gw.message("tools/call", {"name": TOOL, "arguments": {"topic": "json"}})
        status, answer, _ = await gw.post(call, json_only)
        assert status == 200 and "# Research Report: json" in \
            answer["result"]["content"][0]["text"]
        assert await gw.stop() == 0
    run(main(), timeout=180)
    # Each run upstream as a task the host followed.
    assert len(upstream(tap, "tasks/result")) == 3


def test_tasks_requests_need_the_extension_and_the_task_s_name(gateways, tmp_path):
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways)
        created = await started(gw, "gate")
        task_id = created["taskId"]
        for method, params in (("tasks/get", {"taskId": task_id}),
                               ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
                               ("tasks/cancel", {"taskId": task_id})):
            status, refused = await ask(gw, method, params, meta=modern_meta())
            assert status == 400 and refused["error"]["code"] == -32021, refused
            assert refused["error"]["data"] == {
                "requiredCapabilities": {"extensions": {TASKS: {}}}}
        # Mcp-Name carries the task's id (routing): another, or none, is -32020.
        status, refused = await ask(gw, "tasks/get", {"taskId": task_id},
                                    headers={"Mcp-Name": "tl-task.elsewhere.x"})
        assert status == 400 and refused["error"]["code"] == -32020, refused
        message = gw.message("tasks/get", {"taskId": task_id, "_meta": taking()})
        headers = gw.modern_headers(message)
        del headers["Mcp-Name"]
        status, refused, _ = await gw.post(message, headers)
        assert status == 400 and refused["error"]["code"] == -32020, refused
        # The methods the extension removed are unknown here too.
        for method in ("tasks/result", "tasks/list"):
            status, unknown = await ask(gw, method, {"taskId": task_id})
            assert unknown["error"]["code"] == -32601, unknown
        # The task went on untouched.
        assert (await ended(gw, task_id))[-1]["status"] == "completed"
        assert upstream(tap, "tasks/cancel") == []
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_another_client_s_task_is_as_unknown_as_a_made_up_one(gateways, tmp_path):
    """With OAuth access tokens, a task is its identity's: another identity holding the
    id, or anyone with an id never given, is told the same -32602."""
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    from oidc import OwnIssuer

    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)
    key = RSAKey.generate_key(2048, parameters={"kid": "k"})

    async def main():
        issuer = await OwnIssuer([key]).start()
        try:
            gw = await HttpGateway.start(path, gateways, "--oauth-issuer", issuer.issuer)

            def bearer(subject: str) -> dict[str, str]:
                now = int(time.time())
                token = jwt.encode({"alg": "RS256", "kid": "k"},
                                   {"iss": issuer.issuer, "aud": gw.url, "sub": subject,
                                    "exp": now + 300, "iat": now}, key)
                return {"Authorization": f"Bearer {token}"}
            alice, bob = bearer("alice"), bearer("bob")
            created = await started(gw, "mine", **alice)
            task_id = created["taskId"]
            _, theirs = await ask(gw, "tasks/get", {"taskId": task_id}, headers=bob)
            forged = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")
            _, made_up = await ask(gw, "tasks/get", {"taskId": forged}, headers=alice)
            for refused in (theirs, made_up):
                assert refused["error"] == {
                    "code": -32602, "message": "Failed to retrieve task: Task not found"}
            _, cancelled = await ask(gw, "tasks/cancel", {"taskId": task_id}, headers=bob)
            assert cancelled["error"]["code"] == -32602
            assert (await ended(gw, task_id, **alice))[-1]["status"] == "completed"
            assert upstream(tap, "tasks/cancel") == []
            assert await gw.stop() == 0
        finally:
            await issuer.stop()
    run(main(), timeout=120)


def test_a_client_s_tasks_are_bounded_and_an_ended_one_makes_room(gateways, tmp_path):
    """``--limit client_tasks=2``: a third call that could make a task is refused at once
    (429, naming the limit; nothing sent upstream) while both run; once one has ended
    (cancelled), the next takes its place and the ended one is dropped."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await HttpGateway.start(path, gateways, "--limit", "client_tasks=2")
        first = await started(gw, "one")
        await started(gw, "two")
        status, refused = await ask(gw, "tools/call", {"name": TOOL,
                                                       "arguments": {"topic": "three"}})
        assert status == 429, refused
        assert refused["error"]["data"]["budget"] == "client_tasks"
        assert "client_tasks" in refused["error"]["message"]
        assert len(upstream(tap, "tools/call")) == 2
        # A client that does not take tasks is not bound by them.
        status, plain = await ask(gw, "tools/call", {"name": "echo",
                                                     "arguments": {"message": "hi"}},
                                  meta=modern_meta())
        assert status == 200 and plain["result"]["content"][0]["text"] == "Echo: hi"
        await ask(gw, "tasks/cancel", {"taskId": first["taskId"]})
        third = await started(gw, "three")
        assert third["status"] == "working"
        _, dropped = await ask(gw, "tasks/get", {"taskId": first["taskId"]})
        assert dropped["error"]["code"] == -32602
        assert await gw.stop() == 0
    run(main(), timeout=120)


def test_a_task_is_answered_about_by_the_copy_that_holds_it(gateways, tmp_path):
    """``serve --processes 2``: each connection goes to one copy, the kernel's choice; a
    task's id names the copy that holds it, and the other passes its requests on."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def on_new_connection(gw: HttpGateway, method: str,
                                params: dict[str, Any]) -> dict[str, Any]:
        message = gw.message(method, {**params, "_meta": taking()})
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True)) as http:
            async with http.post(gw.url, data=orjson.dumps(message),
                                 headers=gw.modern_headers(message, JSON_ONLY)) as response:
                return await response.json()

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        created = await on_new_connection(gw, "tools/call", {
            "name": TOOL, "arguments": {"topic": "copies"}})
        task_id = created["result"]["taskId"]
        answers = [await on_new_connection(gw, "tasks/get", {"taskId": task_id})
                   for _ in range(16)]
        assert [a.get("result", a)["taskId"] for a in answers] == [task_id] * 16, answers
        assert await gw.stop() == 0
    run(main(), timeout=180)


def test_a_stdio_client_takes_a_task_too(gateways, tmp_path):
    """Over stdio the connection is the one client, and its tasks are its own."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await StdioGateway.start(path, gateways)
        created = await gw.call("tools/call", {"name": TOOL, "arguments": {"topic": "pipe"},
                                               "_meta": taking()})
        task_id = created["result"]["taskId"]
        assert created["result"]["resultType"] == "task"
        for _ in range(300):
            polled = await gw.call("tasks/get", {"taskId": task_id, "_meta": taking()})
            if polled["result"]["status"] in TERMINAL:
                break
            await asyncio.sleep(0.2)
        assert polled["result"]["status"] == "completed"
        assert "# Research Report: pipe" in polled["result"]["result"]["content"][0]["text"]
        refused = await gw.call("tasks/get", {"taskId": task_id, "_meta": modern_meta()})
        assert refused["error"]["code"] == -32021
        assert await gw.close() == 0
    run(main(), timeout=120)


def test_the_official_python_sdk_client_takes_a_task_through_its_extension_interface(
        gateways, tmp_path):
    """mcp 2.x has no tasks client, but the interface one is built on: a ``ClientExtension``
    declared on every request, whose ``ResultClaim`` finishes a ``resultType: "task"``
    result by polling ``tasks/get`` (``tests/peers/sdk_tasks_client.py``). Its
    ``call_tool`` returns the report."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)
    python = realpeers.PEERS_DIR / "py-modern" / "bin" / "python"

    async def main():
        gw = await HttpGateway.start(path, gateways)
        client = await asyncio.create_subprocess_exec(
            str(python), str(PEERS / "sdk_tasks_client.py"), gw.url, TOOL,
            orjson.dumps({"topic": "sdk"}).decode(), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(client.communicate(), 120)
        assert client.returncode == 0, err.decode()[-3000:]
        assert await gw.stop() == 0
        return orjson.loads(out.decode().strip().splitlines()[-1])
    done = run(main(), timeout=180)
    assert done["extensions"] == {TASKS: {}}
    assert done["created"]["resultType"] == "task"
    assert done["created"]["taskId"].startswith("tl-task.")
    assert done["statuses"][-1] == "completed" and set(done["statuses"][:-1]) <= {"working"}
    assert "# Research Report: sdk" in done["result"]["content"][0]["text"]


def test_a_call_refused_before_it_starts_holds_no_place(gateways, tmp_path):
    """A task-taking call refused before its work starts (its id already in flight over
    stdio) takes no place in the client's bound: the next one is served
    (``--limit client_tasks=1``)."""
    tap = tmp_path / "tap.jsonl"
    path = fleet(tmp_path, tap)

    async def main():
        gw = await StdioGateway.start(path, gateways, "--limit", "client_tasks=1")
        # A plain call of the task tool (waited for by the gateway) holds id 7 a while.
        gw.request("tools/call", {"name": TOOL, "arguments": {"topic": "plain"},
                                  "_meta": modern_meta()}, request_id=7)
        for _ in range(200):
            if upstream(tap, "tools/call"):
                break
            await asyncio.sleep(0.05)
        gw.request("tools/call", {"name": TOOL, "arguments": {"topic": "dup"},
                                  "_meta": taking()}, request_id=7)
        refused = await gw.answer()
        assert refused["id"] == 7 and "already in flight" in refused["error"]["message"]
        created = await gw.call("tools/call", {"name": TOOL, "arguments": {"topic": "next"},
                                               "_meta": taking()})
        assert created["result"]["resultType"] == "task", created
        plain = await gw.answer(60)
        assert plain["id"] == 7 and "Research Report: plain" in \
            plain["result"]["content"][0]["text"]
        assert await gw.close() == 0
    run(main(), timeout=120)
