"""A server behind the gateway needs input (MCP 2026-07-28 multi round-trip requests): the
gateway never answers it itself. A modern client gets the ``input_required`` result and
answers it in its next request, which reaches the server with ``requestState`` intact; a
legacy client is asked with an ``elicitation/create`` request of its own era, over stdio
and on its call's SSE stream. The server is real: our mcp 2.x peer's ``ask_name`` tool
(``Elicit`` through the SDK's ``Resolve``; the SDK seals and checks ``requestState``)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

import realpeers
from conftest import run
from gateways import (
    CAPS,
    HttpGateway,
    StdioGateway,
    fleet_config,
    modern_meta,
    real_server,
    sse_messages,
)
from mcp_schema import LEGACY, MODERN, conforms

pytestmark = pytest.mark.real_servers

ELICITING = {"elicitation": {"form": {}}}


def fleet(tmp_path):
    return fleet_config(tmp_path, {"py": real_server(realpeers.MODERN_PY_ECHO)})


async def elicited(gw: StdioGateway) -> dict:
    """The one elicitation/create the gateway has sent its stdio client (waited for)."""
    for _ in range(600):
        if any(n.get("method") == "elicitation/create" for n in gw.notes):
            break
        await asyncio.sleep(0.05)
    [asked] = [n for n in gw.notes if n.get("method") == "elicitation/create"]
    return asked


async def answered_on_the_calls_stream(gw: HttpGateway, session: dict, tool: str, name: str,
                                       stranger: dict | None = None) -> dict:
    """A legacy session's call of ``tool``, accepting SSE: the elicitation/create that comes
    on the call's own stream is answered with ``name`` by ``session`` (after ``stranger``
    answered it, which must change nothing); the call's answer."""
    call = gw.message("tools/call", {"name": tool, "arguments": {}})
    async with gw.http.post(gw.url, data=orjson.dumps(call), headers=session) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        heard = sse_messages(stream)
        asked = await asyncio.wait_for(anext(heard), 60)
        assert asked["method"] == "elicitation/create"
        reply = {"jsonrpc": "2.0", "id": asked["id"]}
        if stranger is not None:
            status, _, _ = await gw.post({**reply, "result": answer_for(asked, "Eve")},
                                         stranger)
            assert status == 202
        status, _, _ = await gw.post({**reply, "result": answer_for(asked, name)}, session)
        assert status == 202
        done = await asyncio.wait_for(anext(heard), 60)
    assert done["id"] == call["id"], done
    return done


def answer_for(asked: dict, name: str) -> dict:
    return {"action": "accept", "content": {"name": name}}


def test_a_modern_client_answers_input_required_itself(gateways, tmp_path):
    path = fleet(tmp_path)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        def ask_name(**extra) -> dict:
            return gw.message("tools/call", {"name": "ask_name", "arguments": {},
                                             "_meta": modern_meta(**{CAPS: ELICITING}),
                                             **extra})
        first = ask_name()
        status, needed, _ = await gw.post(first, gw.modern_headers(first))
        assert status == 200 and "result" in needed, needed
        result = needed["result"]
        conforms(result, MODERN, "InputRequiredResult")
        assert result["resultType"] == "input_required"
        [(key, asked)] = result["inputRequests"].items()
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["message"] == "What is your name?"
        state = result["requestState"]
        # The answer, with the server's requestState as the client received it.
        retry = ask_name(inputResponses={key: answer_for(asked, "Ada")}, requestState=state)
        status, done, _ = await gw.post(retry, gw.modern_headers(retry))
        assert status == 200 and done["result"]["resultType"] == "complete"
        conforms(done["result"], MODERN, "CallToolResult")
        assert done["result"]["content"][0]["text"] == "hello Ada"
        # A tampered requestState is the server's to refuse, and its refusal passes through.
        tampered = ask_name(inputResponses={key: answer_for(asked, "Eve")},
                            requestState=state[:-4] + ("AAAA" if not state.endswith("AAAA")
                                                       else "BBBB"))
        _, refused, _ = await gw.post(tampered, gw.modern_headers(tampered))
        assert refused["error"]["code"] == -32602, refused
        # A client that did not declare elicitation is never handed an elicitation: the
        # server behind is told what this client declared (not the gateway's own
        # capabilities), and its -32021 comes back with HTTP 400.
        plain = gw.message("tools/call", {"name": "ask_name", "arguments": {},
                                          "_meta": modern_meta()})
        status, missing, _ = await gw.post(plain, gw.modern_headers(plain))
        assert status == 400 and missing["error"]["code"] == -32021
        assert set(missing["error"]["data"]["requiredCapabilities"]) == {"elicitation"}
        conforms(missing, MODERN, "MissingRequiredClientCapabilityError")
        # Answers of the wrong shape are refused before anything is sent.
        bad = ask_name(inputResponses=["not", "an", "object"])
        status, invalid, _ = await gw.post(bad, gw.modern_headers(bad))
        assert invalid["error"]["code"] == -32602
        assert await gw.stop() == 0
    run(main(), timeout=180)


def test_a_legacy_client_over_stdio_is_asked_in_its_own_era(gateways, tmp_path):
    path = fleet(tmp_path)
    async def main():
        gw = await StdioGateway.start(path, gateways)
        await gw.call("initialize", {"protocolVersion": "2025-11-25",
                                     "capabilities": ELICITING,
                                     "clientInfo": {"name": "old", "version": "1"}})
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = gw.request("tools/call", {"name": "ask_name", "arguments": {}})
        asked = await elicited(gw)
        conforms(asked, LEGACY, "ElicitRequest")
        assert isinstance(asked["id"], str) and asked["id"].startswith("trunkline-")
        # An answer to an id never asked is not taken; the real one is.
        gw.send({"jsonrpc": "2.0", "id": "trunkline-guess", "result": answer_for(asked, "Eve")})
        gw.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer_for(asked, "Lin")})
        done = await gw.answer()
        assert done["id"] == call and done["result"]["content"][0]["text"] == "hello Lin"
        conforms(done["result"], LEGACY, "CallToolResult")
        assert await gw.close() == 0
    run(main(), timeout=180)


def test_a_legacy_client_that_cannot_be_asked_gets_an_error(gateways, tmp_path):
    path = fleet(tmp_path)
    async def main():
        gw = await StdioGateway.start(path, gateways)
        await gw.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"name": "old", "version": "1"}})
        failed = await gw.call("tools/call", {"name": "ask_name", "arguments": {}})
        assert "elicitation" in failed["error"]["message"], failed
        assert not any(n.get("method") == "elicitation/create" for n in gw.notes)
        assert await gw.close() == 0
    run(main(), timeout=180)


def test_a_legacy_client_over_http_is_asked_on_its_calls_stream(gateways, tmp_path):
    path = fleet(tmp_path)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, _ = await gw.legacy_session(ELICITING)
        # Only the session that was asked may answer.
        stranger, _ = await gw.legacy_session(ELICITING)
        done = await answered_on_the_calls_stream(gw, session, "ask_name", "Kai", stranger)
        assert done["result"]["content"][0]["text"] == "hello Kai"
        assert await gw.stop() == 0
    run(main(), timeout=180)


# --- a legacy server's own requests --------------------------------------------------
# server-everything (TS SDK 1.x, legacy, over stdio) registers trigger-elicitation-request
# when its client declared elicitation (the gateway declares everything it relays); the
# tool sends the server's own elicitation/create during the call and reports the answer.


def legacy_fleet(tmp_path):
    return fleet_config(tmp_path, {"ev": real_server(realpeers.LEGACY_TS_EVERYTHING)},
                        allow_legacy=("ev",))


def eliciting_tool(listed: dict) -> str:
    """The served name of server-everything's tool in a tools/list answer."""
    [name] = [t["name"] for t in listed["result"]["tools"]
              if t["name"].endswith("trigger-elicitation-request")]
    return name


def answered_with(result: dict, name: str) -> bool:
    return any(name in block.get("text", "") for block in result["content"])


def test_a_legacy_servers_own_request_asks_the_legacy_client_whose_call_it_is(gateways,
                                                                              tmp_path):
    path = legacy_fleet(tmp_path)
    async def main():
        gw = await StdioGateway.start(path, gateways)
        await gw.call("initialize", {"protocolVersion": "2025-11-25",
                                     "capabilities": ELICITING,
                                     "clientInfo": {"name": "old", "version": "1"}})
        gw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tool = eliciting_tool(await gw.call("tools/list", {}))
        call = gw.request("tools/call", {"name": tool, "arguments": {}})
        asked = await elicited(gw)
        conforms(asked, LEGACY, "ElicitRequest")
        assert asked["params"]["requestedSchema"]["required"] == ["name"]
        gw.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer_for(asked, "Lin")})
        done = await gw.answer()
        assert done["id"] == call and "result" in done, done
        assert answered_with(done["result"], "Lin"), done
        assert await gw.close() == 0
    run(main(), timeout=180)


def test_a_legacy_servers_own_request_on_a_legacy_http_clients_stream(gateways, tmp_path):
    path = legacy_fleet(tmp_path)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        session, _ = await gw.legacy_session(ELICITING)
        _, listed, _ = await gw.post(gw.message("tools/list", {}), session)
        done = await answered_on_the_calls_stream(gw, session, eliciting_tool(listed), "Kai")
        assert answered_with(done["result"], "Kai"), done
        assert await gw.stop() == 0
    run(main(), timeout=180)


async def modern_round_trip(send, tool: str, arguments: dict, caps: dict, answer) -> dict:
    """A modern client's call of ``tool``: the ``input_required`` round it gets (checked),
    answered with ``answer(request)``; the final answer. ``send(message)`` posts one
    message on the face and returns the answer."""
    def call(**extra) -> dict:
        return {"jsonrpc": "2.0", "id": extra.pop("id"), "method": "tools/call",
                "params": {"name": tool, "arguments": arguments,
                           "_meta": modern_meta(**{CAPS: caps}), **extra}}
    needed = await send(call(id=1))
    result = needed["result"]
    conforms(result, MODERN, "InputRequiredResult")
    [(key, asked)] = result["inputRequests"].items()
    conforms(asked, MODERN, {"elicitation/create": "ElicitRequest",
                             "sampling/createMessage": "CreateMessageRequest"}[asked["method"]])
    done = await send(call(id=2, inputResponses={key: answer(asked)},
                           requestState=result["requestState"]))
    assert done["id"] == 2 and "result" in done, done
    conforms(done["result"], MODERN, "CallToolResult")
    # The round's token is spent: answering it again finds no round.
    again = await send(call(id=3, inputResponses={key: answer(asked)},
                            requestState=result["requestState"]))
    assert again["error"]["code"] == -32602, again
    assert "no input round in progress" in again["error"]["message"]
    return done


def test_a_legacy_servers_own_request_is_a_modern_http_clients_input_round(gateways, tmp_path):
    # A 2026-07-28 client answers input only through input_required: the legacy server's
    # request during the call becomes a round of the client's call (the call stays in
    # flight behind the gateway), and the client's answer is the server's reply.
    path = legacy_fleet(tmp_path)
    async def main():
        gw = await HttpGateway.start(path, gateways)
        _status, listed = await gw.modern("tools/list")
        tool = eliciting_tool(listed)

        async def send(message: dict) -> dict:
            _, answer, _ = await asyncio.wait_for(
                gw.post(message, gw.modern_headers(message)), 60)
            return answer
        done = await modern_round_trip(send, tool, {}, ELICITING,
                                       lambda asked: answer_for(asked, "Lin"))
        assert answered_with(done["result"], "Lin"), done
        sampler = tool.replace("trigger-elicitation-request", "trigger-sampling-request")
        sampled = {"role": "assistant", "model": "model-7",
                   "content": {"type": "text", "text": "sampled"}}
        done = await modern_round_trip(send, sampler, {"prompt": "hi"}, {"sampling": {}},
                                       lambda asked: sampled)
        assert answered_with(done["result"], "model-7"), done
        # A client that declared neither: the server's request is refused at once (never
        # left waiting, never answered by the gateway), the call ends with its word.
        plain = gw.message("tools/call", {"name": tool, "arguments": {},
                                          "_meta": modern_meta()})
        _status, answer, _ = await asyncio.wait_for(gw.post(plain, gw.modern_headers(plain)),
                                                    60)
        assert answer["result"]["isError"] is True, answer
        assert "elicitation/create cannot be answered here" in \
            answer["result"]["content"][0]["text"], answer
        assert await gw.stop() == 0
    run(main(), timeout=180)


def test_a_legacy_servers_own_request_is_a_modern_stdio_clients_input_round(gateways,
                                                                            tmp_path):
    path = legacy_fleet(tmp_path)
    async def main():
        gw = await StdioGateway.start(path, gateways)
        listed = await gw.call("tools/list", {"_meta": modern_meta()})
        tool = eliciting_tool(listed)

        async def send(message: dict) -> dict:
            gw.send(message)
            answer = await gw.answer(60)
            assert answer["id"] == message["id"], answer
            return answer
        done = await modern_round_trip(send, tool, {}, ELICITING,
                                       lambda asked: answer_for(asked, "Noor"))
        assert answered_with(done["result"], "Noor"), done
        assert await gw.close() == 0
    run(main(), timeout=180)
