"""The bridge between a legacy server's own requests and a relayed call's input rounds,
event by event (``protocol/input_bridge.py``): no process, no loop."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_schema import MODERN, conforms
from trunkline.errors import ProtocolFailure
from trunkline.protocol.input_bridge import InputBridge, Refused, bridgeable
from trunkline.protocol.mrtr import MrtrLimits

FORM = {"message": "Your name?", "requestedSchema": {
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
URL = {"mode": "url", "message": "Sign in", "url": "https://example.com/x",
       "elicitationId": "e-1"}
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}],
          "maxTokens": 8}
ACCEPTED = {"action": "accept", "content": {"name": "Ada"}}
SAMPLED = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "4"}}


def bridge(capabilities=None, **limits) -> InputBridge:
    caps = {"elicitation": {}, "sampling": {}} if capabilities is None else capabilities
    return InputBridge(caps, "tl-input.abc.secret", started=0.0, limits=MrtrLimits(**limits))


def test_a_round_tells_every_waiting_request_once_as_the_modern_schema_has_it():
    b = bridge()
    assert not b.untold
    first = b.asked("elicitation/create", {**FORM, "_meta": {"progressToken": 7}})
    second = b.asked("sampling/createMessage", SAMPLE)
    assert (first.key, second.key) == ("q1", "q2")
    assert b.untold
    result = b.round(1.0)
    conforms(result, MODERN, "InputRequiredResult")
    kinds = {"elicitation/create": "ElicitRequest",
             "sampling/createMessage": "CreateMessageRequest"}
    for entry in result["inputRequests"].values():
        conforms(entry, MODERN, kinds[entry["method"]])
    assert result["requestState"] == "tl-input.abc.secret"
    assert result["inputRequests"]["q1"] == {"method": "elicitation/create", "params": FORM}
    assert not b.untold, "told once"
    third = b.asked("elicitation/create", FORM)
    assert b.untold and third.key == "q3"


def test_answers_become_the_servers_replies_and_a_missing_or_bad_one_an_error():
    b = bridge()
    b.asked("elicitation/create", FORM)
    b.asked("sampling/createMessage", SAMPLE)
    b.asked("elicitation/create", FORM)
    b.round(1.0)
    replies = {r.key: r for r in b.answered({"q1": ACCEPTED, "q2": {"role": "robot"},
                                              "q9": ACCEPTED})}
    assert replies["q1"].result == ACCEPTED and replies["q1"].error is None
    assert replies["q2"].result is None and "malformed" in replies["q2"].error
    assert replies["q3"].result is None and "did not answer" in replies["q3"].error
    assert "q9" not in replies, "a key the caller was never told of is ignored"
    assert not b.untold and b.answered({}) == [], "each told request is answered once"


def test_answers_that_are_not_an_object_answer_every_told_request_with_an_error():
    b = bridge()
    b.asked("sampling/createMessage", SAMPLE)
    b.round(1.0)
    [reply] = b.answered(["not", "an", "object"])
    assert reply.error is not None and "did not answer" in reply.error


def test_a_url_elicitation_loses_its_legacy_id_and_needs_the_url_capability():
    assert isinstance(bridge({"elicitation": {"form": {}}}).asked("elicitation/create", URL),
                      Refused)
    b = bridge({"elicitation": {"url": {}}})
    item = b.asked("elicitation/create", URL)
    assert item.params == {"mode": "url", "message": "Sign in", "url": "https://example.com/x"}
    conforms(b.round(1.0), MODERN, "InputRequiredResult")


@pytest.mark.parametrize(("caps", "method", "params", "why"), [
    ({}, "elicitation/create", FORM, "did not declare the 'elicitation' capability"),
    ({"elicitation": {}}, "sampling/createMessage", SAMPLE, "'sampling'"),
    ({"sampling": {}}, "sampling/createMessage", {**SAMPLE, "tools": []}, "sampling.tools"),
    ({"roots": {}}, "roots/list", {}, "not relayed"),
    ({"elicitation": {}}, "elicitation/create", {"message": 3}, "malformed"),
])
def test_what_the_caller_cannot_answer_is_refused_to_the_server(caps, method, params, why):
    b = bridge(caps)
    refused = b.asked(method, params)
    assert isinstance(refused, Refused) and why in refused.reason, refused
    assert "the host" not in refused.reason, "the caller declared it, not the host"
    assert not b.untold


def test_the_bounds_end_the_rounds():
    b = bridge(max_rounds=2, max_input_requests=2, max_input_requests_bytes=400)
    assert not isinstance(b.asked("sampling/createMessage", SAMPLE), Refused)
    assert not isinstance(b.asked("sampling/createMessage", SAMPLE), Refused)
    assert "already wait" in b.asked("sampling/createMessage", SAMPLE).reason
    b.round(1.0)
    b.answered({})
    big = {**SAMPLE, "systemPrompt": "x" * 500}
    assert "over the 400-byte limit" in b.asked("sampling/createMessage", big).reason
    b.asked("sampling/createMessage", SAMPLE)
    b.round(2.0)
    b.answered({})
    b.asked("sampling/createMessage", SAMPLE)
    with pytest.raises(ProtocolFailure, match="after 2 rounds"):
        b.round(3.0)
    late = bridge(max_total_s=10)
    late.asked("sampling/createMessage", SAMPLE)
    with pytest.raises(ProtocolFailure, match="total-time"):
        late.round(11.0)


def test_a_withdrawn_request_is_not_told_nor_answered():
    b = bridge()
    item = b.asked("sampling/createMessage", SAMPLE)
    b.withdrawn(item.key)
    assert not b.untold


@given(st.lists(st.sampled_from(["elicitation/create", "sampling/createMessage"]),
                min_size=1, max_size=12), st.data())
def test_every_told_request_gets_exactly_one_reply(methods, data):
    b = bridge(max_input_requests=16)
    told: set[str] = set()
    replied: list[str] = []
    for method in methods:
        b.asked(method, FORM if method == "elicitation/create" else SAMPLE)
        if data.draw(st.booleans()):
            told.update(b.round(1.0)["inputRequests"])
            answers = {k: ACCEPTED for k in told if data.draw(st.booleans())}
            replied.extend(r.key for r in b.answered(answers))
    if b.untold:
        told.update(b.round(1.0)["inputRequests"])
    replied.extend(r.key for r in b.answered({}))
    assert sorted(replied) == sorted(told) and len(set(replied)) == len(replied)


def test_bridgeable_asks_for_a_kind_the_caller_can_answer():
    assert bridgeable({"elicitation": {}}) and bridgeable({"sampling": {}})
    assert not bridgeable({"roots": {}}) and not bridgeable({}) and not bridgeable(None)
