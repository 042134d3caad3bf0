"""A relayed call to a legacy server: the server's own requests for input become the
caller's ``input_required`` rounds (``parent/input_bridge.py``), and the caller's answers
its replies, with the call kept in flight between. The server is real: server-everything
(TS SDK 1.x, 2025-11-25) over stdio, behind the wire tap."""

from __future__ import annotations

import asyncio
import sys

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from mcp_schema import MODERN, conforms
from trunkline import CallInput, CallOptions, ClientOptions, InputRequired
from trunkline.errors import InputRoundUnknown, RequestTimeout
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.protocol.mrtr import MrtrLimits
from trunkline.settings import HostSettings, Root

pytestmark = pytest.mark.real_servers

EVERYTHING = realpeers.LEGACY_TS_EVERYTHING
DECLARED = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
ELICIT = {"elicitation": {}}
NAME = {"action": "accept", "content": {"name": "Ada"}}


def everything(tap=None):
    """server-everything, behind the wire tap when ``tap`` is given."""
    argv = EVERYTHING.argv
    if tap is not None:
        argv = [sys.executable, str(PEERS / "tap.py"), "--log", str(tap), "--", *argv]
    return stdio(*argv, env=dict(EVERYTHING.env) or None)


def host(**kwargs) -> Host:
    return Host(client=ClientOptions(capabilities=DECLARED), **kwargs)


def relayed(capabilities=ELICIT, **answers) -> CallInput:
    return CallInput(relay=True, capabilities=capabilities, **answers)


async def asked(host: Host, tool: str, arguments: dict, capabilities=ELICIT, **kw
                ) -> InputRequired:
    first = await host.call_tool_relayed(tool, arguments, call_input=relayed(capabilities), **kw)
    assert isinstance(first, InputRequired), first
    conforms(first.raw, MODERN, "InputRequiredResult")
    return first


def test_a_legacy_servers_elicitation_is_the_callers_round_and_its_answer_the_reply(
        tap, no_leaks):
    async def main():
        async with host() as h:
            await h.add_server("ev", everything(tap), allow_legacy=True)
            first = await asked(h, "trigger-elicitation-request", {})
            [(key, request)] = first.input_requests.items()
            conforms(request, MODERN, "ElicitRequest")
            assert request["params"]["requestedSchema"]["required"] == ["name"]
            state = first.raw["requestState"]
            assert state.startswith(f"tl-input.{h.settings.instance}.")
            done = await h.call_tool_relayed("trigger-elicitation-request", {}, call_input=relayed(
                responses={key: NAME}, request_state=state))
            assert "Name: Ada" in done.text, done.raw
            # The server's call went out once: the round did not repeat it.
            calls = [m for m in taplog.messages(tap) if m.get("method") == "tools/call"]
            assert len(calls) == 1
            [reply] = [m for m in taplog.messages(tap)
                       if "action" in m.get("result", {})]
            assert reply["result"] == NAME
            # A token is used once.
            with pytest.raises(InputRoundUnknown, match="no input round in progress"):
                await h.call_tool_relayed("trigger-elicitation-request", {}, call_input=relayed(
                    responses={key: NAME}, request_state=state))
    run(main())


def test_sampling_and_url_elicitation_are_bridged_as_the_caller_declared_them(no_leaks):
    async def main():
        async with host() as h:
            await h.add_server("ev", everything(), allow_legacy=True)
            first = await asked(h, "trigger-sampling-request", {"prompt": "hi"},
                                {"sampling": {}})
            [(key, request)] = first.input_requests.items()
            conforms(request, MODERN, "CreateMessageRequest")
            answer = {"role": "assistant", "model": "model-7",
                      "content": {"type": "text", "text": "sampled"}}
            done = await h.call_tool_relayed("trigger-sampling-request", {"prompt": "hi"},
                                     call_input=relayed({"sampling": {}}, responses={
                                         key: answer},
                                         request_state=first.raw["requestState"]))
            assert "model-7" in done.text
            url = await asked(h, "trigger-url-elicitation", {"url": "https://example.com/a"},
                              {"elicitation": {"url": {}}})
            [(key, request)] = url.input_requests.items()
            conforms(request, MODERN, "ElicitRequest")
            assert request["params"]["mode"] == "url" and "elicitationId" not in \
                request["params"]
            done = await h.call_tool_relayed(
                "trigger-url-elicitation", {"url": "https://example.com/a"},
                call_input=relayed({"elicitation": {"url": {}}}, responses={
                    key: {"action": "accept"}}, request_state=url.raw["requestState"]))
            assert not done.is_error, done.raw
            # Declared without the URL mode: the server is refused, the caller never asked.
            refused = await h.call_tool_relayed("trigger-url-elicitation",
                                        {"url": "https://example.com/a"},
                                        call_input=relayed({"elicitation": {"form": {}}}))
            assert not isinstance(refused, InputRequired)
            assert "elicitation.url" in orjson.dumps(refused.raw).decode(), refused.raw
    run(main())


def test_a_round_nobody_answers_ends_the_call_and_the_server_is_told(tap, no_leaks):
    async def main():
        async with host(calls=CallOptions(mrtr_limits=MrtrLimits(max_total_s=1.0))) as h:
            await h.add_server("ev", everything(tap), allow_legacy=True)
            first = await asked(h, "trigger-elicitation-request", {})
            # The caller never comes back: within the rounds' total time the call is
            # cancelled, which the server hears, and the token leads nowhere.
            await told_cancelled(tap)
            [(key, _)] = first.input_requests.items()
            with pytest.raises(InputRoundUnknown):
                await h.call_tool_relayed("trigger-elicitation-request", {}, call_input=relayed(
                    responses={key: NAME}, request_state=first.raw["requestState"]))
            assert h.servers()[0].in_flight == 0
    run(main())


def test_a_call_that_times_out_while_parked_hands_its_timeout_to_the_caller(no_leaks):
    async def main():
        async with host() as h:
            await h.add_server("ev", everything(), allow_legacy=True)
            first = await asked(h, "trigger-elicitation-request", {}, timeout=0.5)
            await asyncio.sleep(1.0)
            [(key, _)] = first.input_requests.items()
            with pytest.raises(RequestTimeout):
                await h.call_tool_relayed("trigger-elicitation-request", {}, call_input=relayed(
                    responses={key: NAME}, request_state=first.raw["requestState"]))
    run(main())


def test_a_token_offered_with_another_request_or_by_another_host_is_refused(no_leaks):
    async def main():
        async with host(settings=HostSettings(instance="gw-1")) as h:
            await h.add_server("ev", everything(), allow_legacy=True)
            first = await asked(h, "trigger-elicitation-request", {})
            state = first.raw["requestState"]
            [(key, _)] = first.input_requests.items()
            with pytest.raises(InputRoundUnknown, match="another request"):
                await h.call_tool_relayed("echo", {"message": "x"}, call_input=relayed(
                    responses={key: NAME}, request_state=state))
            other = state.replace("tl-input.gw-1.", "tl-input.gw-2.")
            with pytest.raises(InputRoundUnknown, match="another trunkline host") as raised:
                await h.call_tool_relayed("trigger-elicitation-request", {}, call_input=relayed(
                    responses={key: NAME}, request_state=other))
            assert raised.value.held_elsewhere
            # The call stayed parked for its own request.
            done = await h.call_tool_relayed("trigger-elicitation-request", {}, call_input=relayed(
                responses={key: NAME}, request_state=state))
            assert "Name: Ada" in done.text
    run(main())


def test_a_caller_that_stops_waiting_cancels_the_call(tap, no_leaks):
    async def main():
        async with host() as h:
            await h.add_server("ev", everything(tap), allow_legacy=True)
            waiting = asyncio.ensure_future(h.call_tool_relayed(
                "trigger-long-running-operation", {"duration": 30, "steps": 2},
                call_input=relayed()))
            await asyncio.sleep(0.5)
            waiting.cancel()
            await asyncio.wait([waiting])
            await told_cancelled(tap)
            assert h.servers()[0].in_flight == 0
    run(main())


def test_a_host_closing_with_a_parked_call_leaves_nothing(no_leaks):
    async def main():
        async with host() as h:
            await h.add_server("ev", everything(), allow_legacy=True)
            await asked(h, "trigger-elicitation-request", {})
    run(main())


def test_a_legacy_servers_roots_are_the_operators_never_a_calls(tap, no_leaks):
    asked_for_roots: list[dict] = []

    async def calls_roots(params):
        asked_for_roots.append(params)
        return {"roots": [{"uri": "file:///home/caller-private"}]}

    async def main():
        async with host() as h:
            await h.add_servers(
                [h_config("ev", tap, roots=(Root("file:///srv/shared", "shared"),))]
            )
            result = await h.call_tool("get-roots-list", {}, call_input=CallInput(
                handlers={"roots/list": calls_roots}, capabilities={"roots": {}}))
            assert "file:///srv/shared" in result.text, result.raw
            assert "caller-private" not in result.text
        async with host() as h:
            # Without configured roots, the host's handler (if any) answers: never a call's.
            await h.add_servers([h_config("ev", None, roots=None)])
            result = await h.call_tool("get-roots-list", {}, call_input=CallInput(
                handlers={"roots/list": calls_roots}, capabilities={"roots": {}}))
            assert "caller-private" not in result.text
    run(main())
    assert asked_for_roots == []


async def told_cancelled(tap) -> None:
    """Wait until the server behind the tap was sent ``notifications/cancelled``."""
    for _ in range(400):
        if any(m.get("method") == "notifications/cancelled" for m in taplog.messages(tap)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the server was never told")


def h_config(name, tap, roots):
    from trunkline.settings import ServerConfig

    return ServerConfig(name, everything(tap), allow_legacy=True, roots=roots)
