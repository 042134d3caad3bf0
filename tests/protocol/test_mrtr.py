"""The MRTR state machine (MCP 2026-07-28, basic/patterns/mrtr), event by event, no I/O.

Results are written here as raw bytes, the way a server sends them, and decoded with
orjson, the way the driver does: so a test can put escapes into ``requestState`` that a
re-encode would rewrite, and check the retry still carries them byte for byte. Every retry
is stamped with the real codec and validated against the official 2026-07-28 schema.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_schema import MODERN, validate_message
from trunkline import _codec
from trunkline.errors import MalformedMessage, ProtocolFailure
from trunkline.protocol import mrtr as m

# An InputRequiredResult asking for one elicitation and one sampling, with a request
# state, and the answers to both (the shapes of the specification's own examples).
TWO_KINDS_RESULT = orjson.dumps({
    "resultType": "input_required",
    "inputRequests": {
        "repo_owner": {"method": "elicitation/create", "params": {
            "message": "Which account owns the repository?",
            "requestedSchema": {"type": "object", "properties": {"owner": {"type": "string"}},
                                "required": ["owner"]}}},
        "largest_moon": {"method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {
                "type": "text", "text": "Which moon of Saturn is the largest?"}}],
            "maxTokens": 50}},
    },
    "requestState": "c3RlcD0yO3JlcG89dHJ1bmtsaW5l",
})
TWO_KINDS_RESPONSES = {
    "repo_owner": {"action": "accept", "content": {"owner": "trunkline"}},
    "largest_moon": {"role": "assistant", "model": "any-model", "stopReason": "endTurn",
                     "content": {"type": "text", "text": "Titan."}},
}
STATE_ONLY_RESULT = b'{"resultType":"input_required","requestState":"cGFnZT0z"}'
CALL = {"name": "get_weather", "arguments": {"location": "New York"}}
ALL_CAPS: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {"tools": {}},
    "roots": {},
}

SAMPLING_REQ = {
    "method": "sampling/createMessage",
    "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Capital of France?"}}],
        "maxTokens": 100,
    },
}
FORM_REQ = {
    "method": "elicitation/create",
    "params": {
        "message": "Your GitHub username?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
URL_REQ = {
    "method": "elicitation/create",
    "params": {"mode": "url", "message": "Set your API key", "url": "https://mcp.example.com/key"},
}
ROOTS_REQ = {"method": "roots/list"}
TOOLS_SAMPLING_REQ = {
    "method": "sampling/createMessage",
    "params": {
        **SAMPLING_REQ["params"],
        "tools": [{"name": "t", "inputSchema": {"type": "object"}}],
    },
}

SAMPLING_RES = {
    "role": "assistant",
    "content": {"type": "text", "text": "Paris."},
    "model": "m-1",
    "stopReason": "endTurn",
}
FORM_RES = {"action": "accept", "content": {"name": "octocat"}}
ROOTS_RES = {"roots": [{"uri": "file:///home/u/repo", "name": "repo"}]}


def loop(
    method: str = "tools/call",
    params: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
    now: float = 100.0,
    **limits: Any,
) -> m.MrtrLoop:
    return m.MrtrLoop(
        method,
        CALL if params is None else params,
        ALL_CAPS if caps is None else caps,
        m.MrtrLimits(**limits),
        now,
        server="srv",
    )


def input_required(requests: dict[str, Any] | None = None, state: bytes | None = None) -> bytes:
    """A raw InputRequiredResult; ``state`` is the requestState JSON literal, verbatim."""
    parts = [b'"resultType": "input_required"']
    if requests is not None:
        parts.append(b'"inputRequests": ' + orjson.dumps(requests))
    if state is not None:
        parts.append(b'"requestState" : ' + state)
    return b"{" + b", ".join(parts) + b"}"


def feed(lp: m.MrtrLoop, raw: bytes, now: float = 101.0) -> m.Decision:
    return lp.on_result(orjson.loads(raw), raw, now)


def stamped(method: str, resend: m.Resend, id: int = 2) -> bytes:
    """The retry line the driver would write: the real stamper, the same capabilities."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": resend.client_capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "trunkline-test", "version": "0"},
    }
    return _codec.stamp_request(id, method, resend.params, orjson.dumps(meta))


def valid_retry(method: str, resend: m.Resend, id: int = 2) -> dict[str, Any]:
    line = stamped(method, resend, id)
    return validate_message(line, MODERN)["params"]


def fail_of(decision: m.Decision) -> m.ProtocolFailure:
    assert isinstance(decision, m.Fail), decision
    return decision.error


# --- pass-through ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"resultType":"complete","content":[]}',
        b'{"content":[{"type":"text","text":"legacy"}]}',  # legacy: absent means complete
    ],
)
def test_final_results_pass_through_as_done(raw):
    lp = loop()
    out = feed(lp, raw)
    assert out == m.Done(orjson.loads(raw))
    assert lp.done and lp.rounds == 0


@pytest.mark.parametrize("method", ["tools/list", "resources/list", "server/discover", "ping"])
def test_input_required_on_other_methods_is_a_protocol_error(method):
    lp = loop(method, params={})
    err = fail_of(feed(lp, input_required({"a": ROOTS_REQ}, b'"s"')))
    assert type(err) is ProtocolFailure
    assert method in str(err) and "tools/call" in err.message
    assert (err.server, err.method) == ("srv", method)
    assert lp.state is m.State.FAILED


@pytest.mark.parametrize("value", ["task", "", None, 1])
def test_unknown_result_type_is_malformed(value):
    err = fail_of(loop().on_result({"resultType": value}, b"{}", 101.0))
    assert isinstance(err, MalformedMessage) and "resultType" in err.message


def test_non_object_result_is_malformed():
    assert isinstance(fail_of(loop().on_result([1], b"[1]", 101.0)), MalformedMessage)


# --- the multi-round flow -------------------------------------------------------------


def test_two_rounds_sampling_then_elicitation_then_done():
    lp = loop(caps={"sampling": {}, "elicitation": {}})
    # Round 1: a sampling request, with state.
    need = feed(lp, input_required({"capital": SAMPLING_REQ}, b'"round-1"'), now=101.0)
    assert isinstance(need, m.NeedInput)
    assert need.round == 1 and need.deadline == 700.0
    [item] = need.requests
    assert (item.key, item.method, item.capability, item.mode) == (
        "capital",
        "sampling/createMessage",
        "sampling",
        None,
    )
    assert item.params == SAMPLING_REQ["params"]
    resend = lp.responses_ready({"capital": SAMPLING_RES}, now=102.0)
    assert isinstance(resend, m.Resend) and resend.round == 1
    params = valid_retry("tools/call", resend, id=2)
    assert params["name"] == CALL["name"] and params["arguments"] == CALL["arguments"]
    assert params["inputResponses"] == {"capital": SAMPLING_RES}
    assert params["requestState"] == "round-1"
    assert resend.client_capabilities == {"sampling": {}, "elicitation": {}}

    # Round 2: a form elicitation, new state; round 1's state and answers are gone.
    need = feed(lp, input_required({"login": FORM_REQ}, b'"round-2"'), now=103.0)
    assert isinstance(need, m.NeedInput) and need.round == 2
    assert [(i.key, i.mode) for i in need.requests] == [("login", "form")]
    resend2 = lp.responses_ready({"login": FORM_RES}, now=104.0)
    params2 = valid_retry("tools/call", resend2, id=3)
    assert params2["inputResponses"] == {"login": FORM_RES}
    assert params2["requestState"] == "round-2"
    # The same capabilities on every retry; the original params repeat verbatim.
    assert resend2.client_capabilities == resend.client_capabilities
    assert resend.params.startswith(orjson.dumps(CALL)[:-1])
    assert resend2.params.startswith(orjson.dumps(CALL)[:-1])

    done = feed(lp, b'{"resultType":"complete","content":[{"type":"text","text":"ok"}]}', 105.0)
    assert isinstance(done, m.Done) and lp.done and lp.rounds == 2


def test_an_elicitation_and_a_sampling_round_trip():
    lp = loop(caps={"elicitation": {}, "sampling": {}})
    need = feed(lp, TWO_KINDS_RESULT)
    assert isinstance(need, m.NeedInput)
    assert [(i.key, i.method, i.mode) for i in need.requests] == [
        ("repo_owner", "elicitation/create", "form"),
        ("largest_moon", "sampling/createMessage", None),
    ]
    params = valid_retry("tools/call", lp.responses_ready(TWO_KINDS_RESPONSES, 102.0))
    assert params["inputResponses"] == TWO_KINDS_RESPONSES
    assert params["requestState"] == "c3RlcD0yO3JlcG89dHJ1bmtsaW5l"


def test_request_state_only_result_retries_at_once():
    raw = STATE_ONLY_RESULT
    lp = loop(caps={})
    resend = feed(lp, raw)
    assert isinstance(resend, m.Resend) and resend.round == 1
    params = valid_retry("tools/call", resend)
    assert "inputResponses" not in params
    assert params["requestState"] == orjson.loads(raw)["requestState"]
    assert lp.state is m.State.AWAITING_RESULT


def test_an_empty_input_requests_map_retries_at_once():
    lp = loop()
    resend = feed(lp, input_required({}, b'"s"'))
    assert isinstance(resend, m.Resend)
    params = valid_retry("tools/call", resend)
    assert params["inputResponses"] == {} and params["requestState"] == "s"


def test_request_state_is_not_carried_into_a_round_that_has_none():
    lp = loop()
    feed(lp, input_required({"r": ROOTS_REQ}, b'"first"'))
    assert b"first" in lp.responses_ready({"r": ROOTS_RES}, 102.0).params
    feed(lp, input_required({"r": ROOTS_REQ}))  # round 2: no requestState
    params = orjson.loads(lp.responses_ready({"r": ROOTS_RES}, 104.0).params)
    assert "requestState" not in params and params["inputResponses"] == {"r": ROOTS_RES}


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("resources/read", {"uri": "file:///etc/motd"}),
        ("prompts/get", {"name": "greet", "arguments": {"who": "you"}}),
        ("tools/call", CALL),
    ],
)
def test_every_mrtr_method_retries_with_valid_params(method, params):
    lp = loop(method, params=params)
    feed(lp, input_required({"r": ROOTS_REQ, "u": URL_REQ}, b'"st"'))
    resend = lp.responses_ready({"u": {"action": "accept"}, "r": ROOTS_RES}, 102.0)
    assert orjson.loads(resend.params) == {
        **params,
        "inputResponses": {"r": ROOTS_RES, "u": {"action": "accept"}},
        "requestState": "st",
    }
    sent = valid_retry(method, resend)
    # Responses go out in the server's key order, whatever order the host answered in.
    assert list(sent["inputResponses"]) == ["r", "u"]


def test_empty_original_params_splice_cleanly():
    lp = loop(params={}, caps={})
    assert feed(lp, input_required(None, b'"s"')).params == b'{"requestState":"s"}'
    lp = loop(params={})
    feed(lp, input_required({"r": ROOTS_REQ}))
    resend = lp.responses_ready({"r": ROOTS_RES}, 102.0)
    assert resend.params == b'{"inputResponses":{"r":' + orjson.dumps(ROOTS_RES) + b"}}"


def test_original_meta_is_kept_and_capabilities_must_agree():
    caps = {"roots": {}}
    params = {**CALL, "_meta": {"progressToken": "p1",
                                "io.modelcontextprotocol/clientCapabilities": caps}}
    lp = loop(params=params, caps=caps)
    feed(lp, input_required({"r": ROOTS_REQ}))
    sent = orjson.loads(lp.responses_ready({"r": ROOTS_RES}, 102.0).params)
    assert sent["_meta"] == params["_meta"]
    with pytest.raises(ValueError, match="clientCapabilities"):
        loop(params=params, caps={"roots": {}, "sampling": {}})


def test_original_params_are_snapshotted():
    params = {"name": "t", "arguments": {"x": 1}}
    lp = loop(params=params)
    params["arguments"]["x"] = 2  # the caller mutates its dict after starting
    feed(lp, input_required({"r": ROOTS_REQ}))
    assert orjson.loads(lp.responses_ready({"r": ROOTS_RES}, 102.0).params)["arguments"] == {"x": 1}


# --- requestState byte for byte ---------------------------------------------------------

TRICKY_STATE = rb'"caf\u00e9 \/path\/ \"q\" \ud83d\ude00 tab\t \u0041"'


def test_request_state_is_echoed_byte_for_byte():
    # Re-encoding this value would change it: orjson writes é, / and A literally.
    assert orjson.dumps(orjson.loads(TRICKY_STATE)) != TRICKY_STATE
    lp = loop()
    raw = input_required({"s": SAMPLING_REQ}, TRICKY_STATE)
    feed(lp, raw)
    resend = lp.responses_ready({"s": SAMPLING_RES}, 102.0)
    assert b'"requestState":' + TRICKY_STATE in resend.params
    line = stamped("tools/call", resend)
    assert b'"requestState":' + TRICKY_STATE in line  # the stamper keeps it too
    assert validate_message(line, MODERN)["params"]["requestState"] == orjson.loads(TRICKY_STATE)


def _encode_char(c: str, how: int) -> str:
    if c in '"\\':
        return "\\" + c
    if ord(c) < 0x20 or how == 1:
        if ord(c) > 0xFFFF:
            hi, lo = divmod(ord(c) - 0x10000, 0x400)
            return f"\\u{0xD800 + hi:04x}\\u{0xDC00 + lo:04X}"
        return f"\\u{ord(c):04x}"
    if c == "/" and how == 2:
        return "\\/"
    return c


@given(
    st.lists(
        st.tuples(st.characters(exclude_categories=["Cs"]), st.integers(0, 2)), max_size=40
    )
)
def test_any_spelling_of_request_state_survives(chars):
    literal = ('"' + "".join(_encode_char(c, how) for c, how in chars) + '"').encode()
    lp = loop(caps={})
    resend = feed(lp, input_required(None, literal))
    assert isinstance(resend, m.Resend)
    assert resend.params == orjson.dumps(CALL)[:-1] + b',"requestState":' + literal + b"}"
    assert orjson.loads(resend.params)["requestState"] == "".join(c for c, _ in chars)


def test_request_state_never_shows_in_reprs_or_errors():
    secret = b'"TOP-SECRET-' + b"x" * 200 + b'"'
    lp = loop(max_request_state_bytes=64)
    err = fail_of(feed(lp, input_required({"r": ROOTS_REQ}, secret)))
    assert "TOP-SECRET" not in str(err) and "213 bytes" in str(err)
    lp = loop()
    resend = feed(lp, input_required(None, secret))
    assert "TOP-SECRET" not in repr(resend) and "TOP-SECRET" not in repr(lp)


def test_duplicate_request_state_is_malformed():
    raw = b'{"resultType":"input_required","requestState":"a","requestState":"b"}'
    err = fail_of(loop().on_result(orjson.loads(raw), raw, 101.0))
    assert isinstance(err, MalformedMessage) and "duplicate" in err.message


# --- capability gating ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "request_", "what", "why"),
    [
        ({"elicitation": {}}, URL_REQ, "url mode", "elicitation.url"),
        ({"elicitation": {"form": {}}}, URL_REQ, "url mode", "elicitation.url"),
        ({"elicitation": {"url": {}}}, FORM_REQ, "form mode", "without the form mode"),
        ({"sampling": {}}, FORM_REQ, "form mode", "'elicitation' capability"),
        ({"elicitation": {"form": {}, "url": {}}},
         {"method": "elicitation/create", "params": {**URL_REQ["params"], "mode": "telepathy"}},
         "telepathy mode", "no capability covers"),
        ({"sampling": {}}, TOOLS_SAMPLING_REQ, "with tools", "sampling.tools"),
        ({"sampling": {"context": {}}},
         {"method": "sampling/createMessage",
          "params": {**SAMPLING_REQ["params"], "toolChoice": {"mode": "auto"}}},
         "with tools", "sampling.tools"),
        ({"elicitation": {}}, SAMPLING_REQ, "sampling/createMessage", "'sampling' capability"),
        ({"elicitation": {}, "sampling": {"tools": {}}}, ROOTS_REQ, "roots/list", "'roots'"),
        ({}, ROOTS_REQ, "roots/list", "'roots'"),
    ],
)
def test_undeclared_input_kinds_fail_the_call_locally(caps, request_, what, why):
    lp = loop(caps=caps)
    err = fail_of(feed(lp, input_required({"k": request_}, b'"s"')))
    assert isinstance(err, m.InputNotSupported) and isinstance(err, ProtocolFailure)
    assert err.key == "k" and what in err.kind
    assert why in err.message and "inputRequests['k']" in err.message
    assert (err.server, err.method) == ("srv", "tools/call")
    assert lp.state is m.State.FAILED
    with pytest.raises(RuntimeError):
        lp.responses_ready({"k": {}}, 102.0)


def test_one_undeclared_entry_fails_the_round_before_the_host_sees_any():
    lp = loop(caps={"elicitation": {}})
    out = feed(lp, input_required({"ok": FORM_REQ, "bad": URL_REQ}))
    assert fail_of(out).key == "bad"


@pytest.mark.parametrize(
    ("caps", "request_", "mode"),
    [
        ({"elicitation": {}}, FORM_REQ, "form"),
        ({"elicitation": {"form": {}}},
         {"method": "elicitation/create", "params": {**FORM_REQ["params"], "mode": "form"}},
         "form"),
        ({"elicitation": {"url": {}}}, URL_REQ, "url"),
        ({"sampling": {"tools": {}}}, TOOLS_SAMPLING_REQ, None),
        ({"roots": {}}, {"method": "roots/list", "params": {}}, None),
    ],
)
def test_declared_input_kinds_are_handed_to_the_host(caps, request_, mode):
    need = feed(loop(caps=caps), input_required({"k": request_}))
    assert isinstance(need, m.NeedInput)
    assert need.requests[0].mode == mode


# --- bounds -------------------------------------------------------------------------------


def test_rounds_are_bounded():
    lp = loop(max_rounds=2)
    for r in (1, 2):
        assert isinstance(feed(lp, input_required({"r": ROOTS_REQ})), m.NeedInput)
        assert lp.responses_ready({"r": ROOTS_RES}, 102.0).round == r
    err = fail_of(feed(lp, input_required({"r": ROOTS_REQ})))
    assert type(err) is ProtocolFailure and "2 rounds" in err.message
    with pytest.raises(RuntimeError):
        feed(lp, b'{"resultType":"complete"}')


def test_rounds_bound_counts_state_only_rounds_too():
    lp = loop(max_rounds=3, caps={})
    for _ in range(3):
        assert isinstance(feed(lp, input_required(None, b'"busy"')), m.Resend)
    assert "3 rounds" in fail_of(feed(lp, input_required(None, b'"busy"'))).message


def test_total_time_is_bounded_with_an_injected_clock():
    lp = loop(now=1000.0, max_total_s=30.0)
    assert lp.deadline == 1030.0
    need = feed(lp, input_required({"r": ROOTS_REQ}), now=1010.0)
    assert need.deadline == 1030.0
    lp.responses_ready({"r": ROOTS_RES}, now=1020.0)
    # The server asks again after the deadline: fail, do not prompt again.
    err = fail_of(feed(lp, input_required({"r": ROOTS_REQ}), now=1030.5))
    assert type(err) is ProtocolFailure and "30 s" in err.message


def test_slow_host_callbacks_hit_the_time_bound():
    lp = loop(now=0.0, max_total_s=10.0)
    feed(lp, input_required({"e": FORM_REQ}), now=1.0)
    err = fail_of(lp.responses_ready({"e": FORM_RES}, now=10.01))
    assert "total-time" in err.message and lp.state is m.State.FAILED


def test_a_final_result_after_the_deadline_is_still_done():
    lp = loop(now=0.0, max_total_s=10.0)
    feed(lp, input_required({"r": ROOTS_REQ}), now=1.0)
    lp.responses_ready({"r": ROOTS_RES}, now=2.0)
    assert isinstance(feed(lp, b'{"resultType":"complete","content":[]}', now=99.0), m.Done)


def test_oversized_request_state_is_refused():
    lp = loop(max_request_state_bytes=10)
    ok = feed(loop(max_request_state_bytes=10), input_required(None, b'"12345678"'))
    assert isinstance(ok, m.Resend)  # 10 bytes with the quotes: at the limit
    err = fail_of(feed(lp, input_required(None, b'"123456789"')))
    assert type(err) is ProtocolFailure and "11 bytes" in err.message


def test_too_many_input_requests_are_refused():
    requests = {f"k{i}": ROOTS_REQ for i in range(5)}
    assert isinstance(feed(loop(max_input_requests=5), input_required(requests)), m.NeedInput)
    requests["k5"] = ROOTS_REQ
    err = fail_of(feed(loop(max_input_requests=5), input_required(requests)))
    assert "6 entries" in err.message


def test_oversized_input_requests_are_refused():
    big = {"method": "elicitation/create",
           "params": {**FORM_REQ["params"], "message": "x" * 5000}}
    err = fail_of(feed(loop(max_input_requests_bytes=4096), input_required({"b": big})))
    assert "inputRequests is" in err.message and "4096-byte" in err.message


def test_limits_are_checked():
    for bad in ({"max_rounds": 0}, {"max_input_requests": -1}, {"max_total_s": 0},
                {"max_request_state_bytes": True}):
        with pytest.raises(ValueError):
            m.MrtrLimits(**bad)


# --- malformed InputRequiredResults -------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"resultType":"input_required"}', "neither inputRequests nor requestState"),
        (b'{"resultType":"input_required","requestState":7}', "requestState is a JSON number"),
        (b'{"resultType":"input_required","requestState":null}', "requestState is a JSON null"),
        (b'{"resultType":"input_required","inputRequests":[]}', "not an object"),
        (b'{"resultType":"input_required","inputRequests":{"a":1}}', "inputRequests['a']"),
        (b'{"resultType":"input_required","inputRequests":{"a":{}}}', "no string 'method'"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"tools/call"}}}',
         "unknown method 'tools/call'"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create"}}}',
         "no params object"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list",'
         b'"params":[]}}}', "roots/list params"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create",'
         b'"params":{"message":"m"}}}}', "requestedSchema"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create",'
         b'"params":{"mode":"url","message":"m"}}}}', "no string 'url'"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create",'
         b'"params":{"mode":1,"message":"m","url":"u"}}}}', "mode is a JSON number"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"sampling/createMessage",'
         b'"params":{"messages":[]}}}}', "maxTokens"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"sampling/createMessage",'
         b'"params":{"messages":"hi","maxTokens":5}}}}', "messages"),
        (b'{"resultType":"input_required","inputRequests":{"a":{"method":"sampling/createMessage",'
         b'"params":{"messages":[],"maxTokens":5,"tools":{}}}}}', "'tools' is not an array"),
    ],
)
def test_malformed_input_required_results(raw, problem):
    err = fail_of(feed(loop(), raw))
    assert isinstance(err, MalformedMessage)
    assert problem in err.message, err.message


def test_raw_result_must_be_the_decoded_one():
    raw = input_required(None, b'"s"')
    with pytest.raises(ValueError, match="raw_result"):
        loop().on_result(orjson.loads(raw), b'{"resultType":"input_required"}', 101.0)


# --- the host's responses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "response", "problem"),
    [
        (FORM_REQ, {"action": "maybe"}, "action"),
        (FORM_REQ, {"action": ["accept"]}, "action"),
        (FORM_REQ, {"action": "decline", "content": {"name": "x"}}, "accepted form"),
        (URL_REQ, {"action": "accept", "content": {}}, "accepted form"),
        (FORM_REQ, {"action": "accept", "content": {"name": {"nested": 1}}}, "content"),
        (FORM_REQ, {"action": "accept", "resultType": "complete"}, "resultType"),
        (SAMPLING_REQ, {**SAMPLING_RES, "role": "system"}, "role"),
        (SAMPLING_REQ, {"role": "assistant", "content": "Paris"}, "model"),
        (SAMPLING_REQ, {"role": "assistant", "model": "m", "content": "Paris"}, "content"),
        (ROOTS_REQ, {"roots": [{"uri": "https://example.com"}]}, "file://"),
        (ROOTS_REQ, {"roots": "file:///"}, "array"),
        (ROOTS_REQ, None, "not an object"),
    ],
)
def test_badly_shaped_host_responses_raise(request_, response, problem):
    lp = loop()
    feed(lp, input_required({"k": request_}))
    with pytest.raises(ValueError, match=problem):
        lp.responses_ready({"k": response}, 102.0)
    assert lp.state is m.State.AWAITING_INPUT  # the host may still answer properly


def test_responses_must_answer_exactly_the_requested_keys():
    lp = loop()
    feed(lp, input_required({"a": ROOTS_REQ, "b": ROOTS_REQ}))
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        lp.responses_ready({"a": ROOTS_RES}, 102.0)
    with pytest.raises(ValueError, match=r"unexpected \['c'\]"):
        lp.responses_ready({"a": ROOTS_RES, "b": ROOTS_RES, "c": ROOTS_RES}, 102.0)
    assert isinstance(lp.responses_ready({"b": ROOTS_RES, "a": ROOTS_RES}, 102.0), m.Resend)


def test_misuse_is_refused():
    lp = loop()
    with pytest.raises(RuntimeError):
        lp.responses_ready({}, 101.0)
    feed(lp, input_required({"r": ROOTS_REQ}))
    with pytest.raises(RuntimeError):
        feed(lp, b'{"resultType":"complete"}')
    with pytest.raises(ValueError, match="requestState"):
        m.MrtrLoop("tools/call", {"name": "x", "requestState": "s"}, {}, None, 0.0)
    with pytest.raises(ValueError, match="inputResponses"):
        m.MrtrLoop("tools/call", {"name": "x", "inputResponses": {}}, {}, None, 0.0)
    with pytest.raises(ValueError, match="'roots' must be an object"):
        m.MrtrLoop("tools/call", {"name": "x"}, {"roots": True}, None, 0.0)


# --- the codec primitive ------------------------------------------------------------------


def test_raw_member_returns_the_exact_bytes():
    raw = b'{ "a" : "x\\u00e9\\/" , "b": { "c" : [1, 2] }, "n": 1.50 }'
    assert _codec.raw_member(raw, "a") == b'"x\\u00e9\\/"'
    assert _codec.raw_member(raw, "b") == b'{ "c" : [1, 2] }'
    assert _codec.raw_member(raw, "n") == b"1.50"
    assert _codec.raw_member(raw, "c") is None  # not top-level
    assert _codec.raw_member(b'{"\\u0061":1}', "a") == b"1"  # keys compare decoded


@pytest.mark.parametrize("bad", [b"[]", b'"s"', b"", b"{", b'{"a":1}x', b'{"a":1,"a":2}',
                                 b'{"a":"\xff"}'])
def test_raw_member_refuses_non_objects_and_ambiguity(bad):
    with pytest.raises(_codec.CodecError):
        _codec.raw_member(bad, "a")
