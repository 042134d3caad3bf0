"""Multi round-trip requests (input_required) through the whole host: worker, channel,
host callbacks, and the bytes on the wire."""

from __future__ import annotations

import asyncio
import warnings

import orjson
import pytest
import taplog

from conftest import run, scripted
from mcp_schema import MODERN, validate_message
from trunkline import CallOptions, ClientOptions
from trunkline.errors import InputNotSupported, ProtocolFailure
from trunkline.parent.host import CallToolResult, Host
from trunkline.parent.mrtr import CallInput, InputRequired
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.mrtr import MrtrLimits
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0))


def wire(tap, direction):
    return taplog.lines(tap, direction)


def answering_host(asked: list[tuple[str, dict]] | None = None) -> Host:
    """A host that answers sampling with "4" and elicitation with a name, noting each
    question in ``asked``."""
    async def sample(params):
        if asked is not None:
            asked.append(("sampling", params))
        return {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}

    async def elicit(params):
        if asked is not None:
            asked.append(("elicitation", params))
        return {"action": "accept", "content": {"name": "Ada"}}

    return Host(settings=SETTINGS, client=ClientOptions(
        capabilities={"sampling": {}, "elicitation": {}},
        input_handlers={"sampling/createMessage": sample, "elicitation/create": elicit}))


def test_sampling_then_elicitation_rounds_carry_request_state_byte_for_byte(tap, no_leaks):
    asked: list[tuple[str, dict]] = []

    async def main():
        async with answering_host(asked) as host:
            await host.add_server("s", scripted(tap=tap))
            result = await host.call_tool("ask", {})
            final = orjson.loads(result.text)
            assert final["rounds"] == 2
            assert final["last"] == {"elicitation-1": {"action": "accept",
                                                       "content": {"name": "Ada"}}}
    run(main())
    assert [kind for kind, _ in asked] == ["sampling", "elicitation"]
    assert asked[0][1]["maxTokens"] == 8
    sent = [line for line in wire(tap, taplog.IN) if b'"tools/call"' in line]
    assert len(sent) == 3
    ids = [orjson.loads(line)["id"] for line in sent]
    assert len(set(ids)) == 3, "every round is a new request with a new id"
    # The server wrote the state with an ASCII escape; the retry echoes those exact bytes.
    answers = [line for line in wire(tap, taplog.OUT) if b'"input_required"' in line]
    assert [b'"requestState":"st\\u00e9/1"' in answers[0],
            b'"requestState":"st\\u00e9/1"' in sent[1]] == [True, True]
    assert b'"requestState":"st\\u00e9/2"' in sent[2]
    for line in sent:
        msg = validate_message(line, MODERN)
        caps = msg["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert caps == {"sampling": {}, "elicitation": {}}, "same capabilities every round"
    assert "inputResponses" not in orjson.loads(sent[0])["params"]
    assert orjson.loads(sent[1])["params"]["inputResponses"]["sampling-0"]["model"] == "m"


def test_an_idempotency_key_is_sent_with_the_request_and_not_with_its_rounds(tap, no_leaks):
    """A round is the same call with answers, not a repeat of the request: a server that
    deduplicates by key must not answer it with the first round's ``input_required``."""
    async def main():
        async with answering_host() as host:
            await host.add_server("s", scripted(tap=tap))
            result = await host.call_tool("ask", {}, idempotency_key="order-7")
            assert orjson.loads(result.text)["rounds"] == 2
    run(main())
    sent = [orjson.loads(line)["params"] for line in wire(tap, taplog.IN)
            if b'"tools/call"' in line]
    assert [p["_meta"].get("dev.trunkline/idempotencyKey") for p in sent] == [
        "order-7", None, None]
    assert [p["name"] for p in sent] == ["ask"] * 3
    assert all(p["arguments"] == {} for p in sent)


@pytest.mark.parametrize("kinds,capabilities", [
    (["elicitation"], {"sampling": {}}),           # elicitation not declared at all
    (["url"], {"elicitation": {}}),                # form only: {} means form
    (["roots"], {"sampling": {}, "elicitation": {}}),
])
def test_undeclared_input_kind_fails_locally_without_a_retry(tap, no_leaks, kinds, capabilities):
    called = []

    async def handler(params):
        called.append(params)
        return {}

    async def main():
        async with Host(settings=SETTINGS, client=ClientOptions(
                capabilities=capabilities,
                input_handlers={"sampling/createMessage": handler,
                                "elicitation/create": handler,
                                "roots/list": handler})) as host:
            await host.add_server("s", scripted(tap=tap))
            with pytest.raises(InputNotSupported):
                await host.call_tool("ask", {"kinds": kinds})
    run(main())
    assert called == [], "the host's callbacks never see an undeclared request"
    assert len([line for line in wire(tap, taplog.IN) if b'"tools/call"' in line]) == 1


def test_rounds_are_bounded(no_leaks):
    async def sample(params):
        return {"role": "assistant", "content": {"type": "text", "text": "again"}, "model": "m"}

    async def main():
        async with Host(settings=SETTINGS,
                        client=ClientOptions(capabilities={"sampling": {}},
                                             input_handlers={"sampling/createMessage": sample}),
                        calls=CallOptions(mrtr_limits=MrtrLimits(max_rounds=2))) as host:
            await host.add_server("s", scripted())
            with pytest.raises(ProtocolFailure, match="round"):
                await host.call_tool("ask", {"kinds": ["sampling"] * 5})
    run(main())


def test_the_server_keeps_answering_while_the_host_works_on_input(no_leaks):
    release = asyncio.Event()

    async def slow_sample(params):
        await release.wait()  # a person deciding, say
        return {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}

    async def main():
        async with Host(settings=SETTINGS, client=ClientOptions(
                capabilities={"sampling": {}},
                input_handlers={"sampling/createMessage": slow_sample})) as host:
            await host.add_server("s", scripted())
            pending = asyncio.ensure_future(host.call_tool("ask", {"kinds": ["sampling"]}))
            await asyncio.sleep(0.2)
            assert not pending.done()
            other = await host.call_tool("echo", {"meanwhile": True}, timeout=10)
            assert orjson.loads(other.text) == {"meanwhile": True}
            release.set()
            assert orjson.loads((await pending).text)["rounds"] == 1
    run(main())


@pytest.mark.parametrize("method", ["resources/read", "prompts/get"])
def test_resources_read_and_prompts_get_go_through_input_rounds_too(tap, no_leaks, method):
    async def sample(params):
        return {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}

    async def elicit(params):
        return {"action": "decline"}

    async def main():
        async with Host(settings=SETTINGS, client=ClientOptions(
                capabilities={"sampling": {}, "elicitation": {}},
                input_handlers={"sampling/createMessage": sample,
                                "elicitation/create": elicit})) as host:
            await host.add_server("s", scripted(tap=tap))
            if method == "resources/read":
                result = await host.read_resource("s", "file:///notes.txt")
                text = result["contents"][0]["text"]
            else:
                result = await host.get_prompt("s", "greeting", {"who": "Ada"})
                text = result["messages"][0]["content"]["text"]
            assert orjson.loads(text)["last"] == {"elicitation-1": {"action": "decline"}}
    run(main())
    sent = [line for line in wire(tap, taplog.IN) if method.encode() in line]
    assert len(sent) == 3
    assert b'"requestState":"st\\u00e9/1"' in sent[1]
    for line in sent:
        validate_message(line, MODERN)


def test_legacy_server_requests_are_answered_by_the_host_handlers(tap, no_leaks):
    """A legacy server's own requests travel worker -> parent -> handler -> worker ->
    server: the same ``input_handlers`` as modern input rounds answer them; an undeclared
    kind, or a handler that fails, is answered with an error (never left hanging)."""
    asked: list[dict] = []

    async def elicit(params):
        asked.append(params)
        return {"action": "accept", "content": {"name": "Ada"}}

    async def broken_sampling(params):
        raise RuntimeError("no model configured")

    async def main():
        async with Host(settings=SETTINGS, client=ClientOptions(
                capabilities={"elicitation": {}, "sampling": {}},
                input_handlers={"elicitation/create": elicit,
                                "sampling/createMessage": broken_sampling})) as host:
            await host.add_server("old", scripted(
                "--era", "legacy", "--server-request", "elicitation/create",
                "--server-request", "sampling/createMessage",
                "--server-request", "roots/list", tap=tap), allow_legacy=True)
            for _ in range(200):
                if len([m for m in taplog.messages(tap, taplog.IN) if "method" not in m]) >= 3:
                    break
                await asyncio.sleep(0.05)
    run(main())
    answers = {m["id"]: m for m in taplog.messages(tap, taplog.IN) if "method" not in m}
    asked_by_id = {m["id"]: m["method"] for m in taplog.messages(tap, taplog.OUT)
                   if "method" in m and "id" in m}
    by_method = {asked_by_id[i]: a for i, a in answers.items()}
    assert by_method["elicitation/create"]["result"] == {
        "action": "accept", "content": {"name": "Ada"}}
    assert asked and asked[0]["message"]
    assert by_method["sampling/createMessage"]["error"]["message"] == (
        "client error: no model configured")
    assert by_method["roots/list"]["error"]["code"] == -32601  # no handler, not declared
    for answer in answers.values():
        validate_message(answer, "2025-11-25")


def test_a_relayed_call_returns_its_rounds_and_the_old_form_still_does_warned(tap, no_leaks):
    """``call_tool_relayed`` hands an ``input_required`` result back as ``InputRequired``
    and takes the answers on the caller's next call; ``call_tool`` with a relaying
    ``CallInput`` still does so for one release, with a ``DeprecationWarning``."""
    relay = CallInput(relay=True, capabilities={"sampling": {}})

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # the relayed entry is not deprecated
                started = host.call_tool_relayed("ask", {"kinds": ["sampling"]},
                                                 call_input=relay)
            first = await started
            assert isinstance(first, InputRequired), first
            assert list(first.input_requests) == ["sampling-0"]
            done = await host.call_tool_relayed("ask", {"kinds": ["sampling"]}, call_input=(
                CallInput(relay=True, capabilities={"sampling": {}},
                          responses={"sampling-0": {"answer": 4}},
                          request_state=first.raw["requestState"])))
            assert isinstance(done, CallToolResult), done
            assert orjson.loads(done.text) == {"rounds": 1, "last": {"sampling-0": {"answer": 4}}}
            with pytest.warns(DeprecationWarning, match="call_tool_relayed"):
                old = host.call_tool("ask", {"kinds": ["sampling"]}, call_input=relay)
            old_first = await old
            assert isinstance(old_first, InputRequired), old_first
            assert old_first.raw == first.raw
    run(main())


def test_a_call_with_capabilities_of_its_own_still_declares_the_negotiated_extensions(
        tap, no_leaks):
    """A relayed call (a gateway's client's) carries that client's capabilities instead of
    the host's; the extensions the host negotiated with the server (tasks) stay declared
    on it, so the server may still answer with a task the host follows, and a tool that
    needs one is not refused for want of it."""
    tasks = "io.modelcontextprotocol/tasks"
    capabilities = orjson.dumps({"tools": {}, "extensions": {tasks: {}}}).decode()

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted("--capabilities", capabilities, tap=tap))
            plain = await host.call_tool("echo", {"n": 1})
            assert isinstance(plain, CallToolResult)
            relayed = await host.call_tool_relayed(
                "echo", {"n": 2}, call_input=CallInput(relay=True,
                                                       capabilities={"sampling": {}}))
            assert isinstance(relayed, CallToolResult)
    run(main())
    sent = [orjson.loads(line) for line in wire(tap, taplog.IN) if b'"tools/call"' in line]
    declared = [m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
                for m in sent]
    assert declared[0]["extensions"] == {tasks: {}}
    assert declared[1] == {"sampling": {}, "extensions": {tasks: {}}}


def test_rounds_of_a_call_with_its_own_handlers_declare_the_negotiated_extensions_too(
        tap, no_leaks):
    """A call with handlers and capabilities of its own (a gateway's 2025-11-25 client's)
    to a server that negotiated tasks: every round declares the same capabilities as the
    first request, the extensions with them (the rounds refused to start when the first
    request declared the extensions and the rounds did not: an internal error, seen
    through serve in front of the conformance fixture)."""
    tasks = "io.modelcontextprotocol/tasks"
    capabilities = orjson.dumps({"tools": {}, "extensions": {tasks: {}}}).decode()

    async def sample(params):
        return {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted("--capabilities", capabilities, tap=tap))
            result = await host.call_tool("ask", {"kinds": ["sampling"]}, call_input=CallInput(
                handlers={"sampling/createMessage": sample}, capabilities={"sampling": {}}))
            assert orjson.loads(result.text)["rounds"] == 1
    run(main())
    sent = [orjson.loads(line) for line in wire(tap, taplog.IN) if b'"tools/call"' in line]
    assert len(sent) == 2
    assert [m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
            for m in sent] == [{"sampling": {}, "extensions": {tasks: {}}}] * 2
