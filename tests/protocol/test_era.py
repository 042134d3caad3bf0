"""The era negotiation state machine, event by event, with no I/O.

Every rule of docs/explanation/architecture.md, "Era negotiation", is a row here: positive evidence
only, no downgrade after modern evidence, one bounded initialize for allowlisted peers,
late modern evidence winning over the fallback, and one session per connection.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.protocol import era as e

MODERN = "2026-07-28"
DISCOVER_OK = {
    "resultType": "complete",
    "supportedVersions": [MODERN],
    "capabilities": {"tools": {"listChanged": True}},
    "ttlMs": 0,
    "cacheScope": "public",
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "srv", "version": "1.0"}},
}
INIT_OK = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "legacy", "version": "0.9"},
}


def machine(allow_legacy: bool = False, **kw) -> tuple[e.EraNegotiation, list[e.Decision]]:
    m = e.EraNegotiation(e.NegotiationConfig(allow_legacy=allow_legacy, **kw))
    return m, m.start()


def kinds(decisions: list[e.Decision]) -> list[type]:
    return [type(d) for d in decisions]


def never_initialize(decisions: list[e.Decision]) -> None:
    assert not any(isinstance(d, e.SendInitialize) for d in decisions)


def test_start_probes_discover_with_preferred_version():
    _, first = machine()
    assert first == [e.SendDiscover(MODERN, 10.0)]


def test_discover_result_selects_modern():
    m, _ = machine()
    out = m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))
    assert kinds(out) == [e.Decide]
    v = out[0].verdict
    assert (v.era, v.version) == (e.Era.MODERN, MODERN)
    assert v.server_info == {"name": "srv", "version": "1.0"}
    assert m.state is e.State.DECIDED


def test_highest_shared_version_is_selected():
    m, _ = machine(modern_versions=("2027-01-01", MODERN))
    out = m.handle(e.Replied(e.Probe.DISCOVER, {**DISCOVER_OK,
                   "supportedVersions": [MODERN, "2027-01-01", "2099-01-01"]}))
    assert out[-1].verdict.version == "2027-01-01"


def test_discover_result_without_shared_version_fails_naming_both_lists():
    m, _ = machine(allow_legacy=True)
    out = m.handle(
        e.Replied(e.Probe.DISCOVER, {**DISCOVER_OK, "supportedVersions": ["2099-01-01"]})
    )
    assert kinds(out) == [e.Fail]
    assert "2099-01-01" in out[0].refusal.reason and MODERN in out[0].refusal.reason


def test_missing_result_type_is_complete_for_discover():
    body = {k: v for k, v in DISCOVER_OK.items() if k != "resultType"}
    m, _ = machine()
    assert kinds(m.handle(e.Replied(e.Probe.DISCOVER, body))) == [e.Decide]


@pytest.mark.parametrize("bad", [
    {**DISCOVER_OK, "resultType": "input_required"},
    {**DISCOVER_OK, "supportedVersions": "2026-07-28"},
    {**DISCOVER_OK, "supportedVersions": [1]},
    {**DISCOVER_OK, "capabilities": []},
    {k: v for k, v in DISCOVER_OK.items() if k != "capabilities"},
    ["not", "an", "object"],
])
def test_malformed_discover_result_is_not_evidence(bad):
    m, _ = machine()
    out = m.handle(e.Replied(e.Probe.DISCOVER, bad))
    assert kinds(out) == [e.Fail]
    never_initialize(out)


def test_32022_retries_discover_with_shared_version_never_initialize():
    m, _ = machine(allow_legacy=True, modern_versions=("2027-01-01", MODERN))
    out = m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "Unsupported protocol version",
                                  {"supported": [MODERN], "requested": "2027-01-01"}))
    assert out == [e.SendDiscover(MODERN, 10.0)]
    out = m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))
    assert out[-1].verdict.version == MODERN


@pytest.mark.parametrize("allow_legacy", [False, True])
@pytest.mark.parametrize("supported", [["2099-01-01"], ["2025-11-25"], []])
def test_32022_without_shared_modern_version_fails_closed(allow_legacy, supported):
    """-32022 with no shared modern revision, including a legacy-only `supported` list."""
    m, _ = machine(allow_legacy=allow_legacy)
    out = m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                                  {"supported": supported, "requested": MODERN}))
    assert kinds(out) == [e.Fail]
    assert str(supported) in out[0].refusal.reason
    never_initialize(out)


@pytest.mark.parametrize("allow_legacy", [False, True])
@pytest.mark.parametrize("code,data", [
    (-32021, {"requiredCapabilities": {"sampling": {}}}),
    (-32020, None),
])
def test_other_modern_errors_never_downgrade(allow_legacy, code, data):
    m, _ = machine(allow_legacy=allow_legacy)
    out = m.handle(e.ErrorReplied(e.Probe.DISCOVER, code, "modern", data))
    assert kinds(out) == [e.Fail]
    assert any("modern" in line for line in m.evidence)


def test_32022_retry_that_times_out_is_not_downgraded_even_when_allowlisted():
    m, _ = machine(allow_legacy=True, modern_versions=("2027-01-01", MODERN))
    m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                            {"supported": [MODERN], "requested": "2027-01-01"}))
    out = m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    assert kinds(out) == [e.Fail]
    never_initialize(out)


def test_32022_loop_is_bounded():
    m, _ = machine(modern_versions=("2027-01-01", MODERN), max_discover_attempts=2)
    m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                            {"supported": [MODERN], "requested": "2027-01-01"}))
    # The server now rejects the version it listed as supported: the attempts run out.
    out = m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                                  {"supported": [MODERN], "requested": MODERN}))
    assert kinds(out) == [e.Fail]
    assert "gave up after 2" in out[0].refusal.reason


def test_32022_naming_the_rejected_version_as_supported_is_asked_again():
    """A one-off rejection of a listed version (the conformance suite's request-metadata
    scenario does exactly this) is retried with that version, within the bound."""
    m, _ = machine()
    out = m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "Unsupported protocol version",
                                  {"supported": [MODERN], "requested": MODERN}))
    assert out == [e.SendDiscover(MODERN, 10.0)]
    assert kinds(m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))) == [e.Decide]


AMBIGUOUS = [
    e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found"),
    e.ErrorReplied(e.Probe.DISCOVER, -32602, "Invalid params"),
    e.ErrorReplied(e.Probe.DISCOVER, -32600, "Invalid request"),
    e.ErrorReplied(e.Probe.DISCOVER, -32000, "Server not initialized"),
    e.ErrorReplied(e.Probe.DISCOVER, -32004, "draft-era unsupported version"),
    # Modern codes with the wrong data shape are look-alikes, not evidence.
    e.ErrorReplied(e.Probe.DISCOVER, -32022, "x", {"supported": "2026-07-28"}),
    e.ErrorReplied(e.Probe.DISCOVER, -32022, "x", None),
    e.ErrorReplied(e.Probe.DISCOVER, -32021, "x", {"requiredCapabilities": []}),
    e.TimedOut(e.Probe.DISCOVER, 10.0),
    e.Unexpected("not a JSON-RPC message: 'hello'"),
    e.Unexpected("a response with id 99, which was never sent"),
    e.Unexpected("the server sent a 'sampling/createMessage' request before its era was known"),
    # HTTP: a status without a recognized modern body, a network error, a broken stream.
    e.ExchangeFailed(e.Probe.DISCOVER, "HTTP 503 without a JSON-RPC answer"),
    e.ExchangeFailed(e.Probe.DISCOVER, "could not connect: connection refused"),
    e.ExchangeFailed(e.Probe.DISCOVER, "HTTP 405 with no body instead of a JSON-RPC answer"),
]


@pytest.mark.parametrize("event", AMBIGUOUS, ids=repr)
def test_ambiguous_without_allowlist_fails_closed(event):
    m, _ = machine(allow_legacy=False)
    out = m.handle(event)
    assert kinds(out) == [e.Fail]
    assert "initialize was never sent" in out[0].refusal.reason
    assert m.refusal is not None and m.refusal.evidence


@pytest.mark.parametrize("event", AMBIGUOUS, ids=repr)
def test_ambiguous_with_allowlist_sends_exactly_one_initialize(event):
    m, _ = machine(allow_legacy=True, legacy_probe_timeout_s=3.0)
    out = m.handle(event)
    assert out == [e.SendInitialize("2025-11-25", 3.0)]
    # More ambiguity while initialize is out never sends a second one.
    assert m.handle(e.Unexpected("garbage")) == []
    assert m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32601, "late")) == []


@pytest.mark.parametrize("event,answered", [
    (e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found"),
     "answered server/discover with error -32601 'Method not found'"),
    (e.ErrorReplied(e.Probe.DISCOVER, -32602, "x" * 500),
     f"answered server/discover with error -32602 '{'x' * 120}...'"),
    (e.Replied(e.Probe.DISCOVER, {"supportedVersions": "2026-07-28"}),
     "answered server/discover with a malformed DiscoverResult"),
    (e.Unexpected("not a JSON-RPC message: 'hello'"),
     "wrote output that answers nothing asked (not a JSON-RPC message: 'hello')"),
], ids=repr)
def test_an_answer_that_proves_no_era_names_the_allowlist_as_the_remedy(event, answered):
    """Issue 35, item 7: the refusal a legacy-only server gets says, as a field, that
    the allowlist would lift it, and what the server answered (its words cut short)."""
    m, _ = machine()
    (fail,) = m.handle(event)
    assert isinstance(fail, e.Fail)
    assert fail.refusal.remedy is e.Remedy.ALLOW_LEGACY
    assert fail.refusal.answered == answered


@pytest.mark.parametrize("allow_legacy,events", [
    # Silence, a network failure, a bare HTTP status, a closed transport: nothing the
    # server said in the protocol.
    (False, [e.TimedOut(e.Probe.DISCOVER, 10.0)]),
    (False, [e.ExchangeFailed(e.Probe.DISCOVER, "could not connect: connection refused")]),
    (False, [e.ExchangeFailed(e.Probe.DISCOVER, "HTTP 503 without a JSON-RPC answer")]),
    (False, [e.Closed("eof")]),
    (False, [e.Rejected(e.Probe.DISCOVER, "HTTP 401")]),
    # Modern, and no version in common; modern, then no usable answer.
    (False, [e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                            {"supported": ["2099-01-01"], "requested": MODERN})]),
    (False, [e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                            {"supported": [MODERN], "requested": MODERN}),
             e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found")]),
    # Allowlisted already: its initialize was refused.
    (True, [e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found"),
            e.ErrorReplied(e.Probe.INITIALIZE, -32602, "bad")]),
], ids=repr)
def test_no_remedy_where_the_allowlist_would_not_lift_the_refusal(allow_legacy, events):
    m, out = machine(allow_legacy=allow_legacy)
    for event in events:
        out = m.handle(event)
    assert kinds(out) == [e.Fail]
    assert out[0].refusal.remedy is None and out[0].refusal.answered is None


@pytest.mark.parametrize("allow_legacy", [False, True])
def test_close_before_evidence_fails_even_when_allowlisted(allow_legacy):
    m, _ = machine(allow_legacy=allow_legacy)
    out = m.handle(e.Closed("server exited (exit code 3)"))
    assert kinds(out) == [e.Fail]
    never_initialize(out)
    assert any("exit code 3" in line for line in m.evidence)


def test_valid_initialize_makes_the_peer_legacy_then_initialized():
    m, _ = machine(allow_legacy=True)
    m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found"))
    out = m.handle(e.Replied(e.Probe.INITIALIZE, INIT_OK))
    assert kinds(out) == [e.SendInitialized, e.Decide]
    v = out[-1].verdict
    assert (v.era, v.version, v.server_info["name"]) == (e.Era.LEGACY, "2025-11-25", "legacy")


@pytest.mark.parametrize("bad", [
    {**INIT_OK, "protocolVersion": "2026-07-28"},
    {**INIT_OK, "protocolVersion": "1999-01-01"},
    {**INIT_OK, "protocolVersion": 20251125},
    {**INIT_OK, "capabilities": None},
    {**INIT_OK, "serverInfo": {"name": "x", "version": ""}},
    {**INIT_OK, "serverInfo": {"name": "", "version": "1"}},
    {**INIT_OK, "serverInfo": {"name": "x"}},
    {k: v for k, v in INIT_OK.items() if k != "serverInfo"},
    "initialized!",
])
def test_malformed_or_unsupported_legacy_result_leaves_peer_unavailable(bad):
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    out = m.handle(e.Replied(e.Probe.INITIALIZE, bad))
    assert kinds(out) == [e.Fail]
    assert not any(isinstance(d, e.SendInitialized) for d in out)


@pytest.mark.parametrize("event", [
    e.TimedOut(e.Probe.INITIALIZE, 3.0),
    e.ErrorReplied(e.Probe.INITIALIZE, -32602, "unsupported", {"supported": ["2024-01-01"]}),
    e.Closed("server exited (exit code 0)"),
])
def test_initialize_failures_fail_closed(event):
    """The bounded initialize probe times out (or errs, or closes) and
    the peer stays unavailable."""
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    assert kinds(m.handle(event)) == [e.Fail]
    assert m.verdict is None


def test_late_discover_result_waits_for_the_outstanding_initialize():
    """One session per connection: a DiscoverResult that arrives while initialize is out
    decides nothing until the initialize's fate is known; refused, and modern stands."""
    m, _ = machine(allow_legacy=True)
    assert kinds(m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))) == [e.SendInitialize]
    assert m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK)) == []
    assert m.state is e.State.CONFIRMING and m.verdict is None
    out = m.handle(e.ErrorReplied(e.Probe.INITIALIZE, -32601, "Method not found"))
    assert kinds(out) == [e.Decide]
    assert out[0].verdict.era is e.Era.MODERN
    assert any("refused the legacy session" in line for line in out[0].verdict.evidence)


@pytest.mark.parametrize("initialize_fate", [
    e.Replied(e.Probe.INITIALIZE, INIT_OK),
    e.Replied(e.Probe.INITIALIZE, {"not": "an InitializeResult"}),
    e.TimedOut(e.Probe.INITIALIZE, 10.0),
    e.ExchangeFailed(e.Probe.INITIALIZE, "the stream broke"),
], ids=repr)
def test_discover_result_and_an_accepted_initialize_mean_two_sessions(initialize_fate):
    """The reverse race (TS SDK v2 serveStdio started slowly): the server answers the
    discover *and* takes the late initialize, or may have. The connection is abandoned
    and the next one starts as proven modern."""
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))
    out = m.handle(initialize_fate)
    assert kinds(out) == [e.Renegotiate]
    assert "two sessions" in out[0].reason or "legacy session" in out[0].reason
    assert m.state is e.State.ABANDONED and m.proven_modern and m.verdict is None
    assert m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK)) == []


def test_a_late_discover_result_after_a_legacy_verdict_means_two_sessions():
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    assert kinds(m.handle(e.Replied(e.Probe.INITIALIZE, INIT_OK))) == [e.SendInitialized, e.Decide]
    assert m.awaits_discover
    assert m.handle(e.Unexpected("noise")) == []
    out = m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))
    assert kinds(out) == [e.Renegotiate] and m.proven_modern


def test_a_late_discover_error_after_a_legacy_verdict_settles_it():
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    m.handle(e.Replied(e.Probe.INITIALIZE, INIT_OK))
    assert m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found")) == []
    assert not m.awaits_discover
    assert m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK)) == []
    assert m.verdict.era is e.Era.LEGACY


def test_a_legacy_verdict_after_a_discover_error_awaits_nothing():
    m, _ = machine(allow_legacy=True)
    m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found"))
    m.handle(e.Replied(e.Probe.INITIALIZE, INIT_OK))
    assert m.verdict.era is e.Era.LEGACY
    assert not m.awaits_discover, "an answered discover cannot be answered again"


def test_late_modern_error_to_discover_waits_for_the_outstanding_initialize():
    m, _ = machine(allow_legacy=True, modern_versions=("2027-01-01", MODERN))
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    assert m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32022, "x",
                                   {"supported": [MODERN], "requested": "2027-01-01"})) == []
    out = m.handle(e.ErrorReplied(e.Probe.INITIALIZE, -32600, "Invalid request"))
    assert out == [e.SendDiscover(MODERN, 10.0)]
    assert kinds(m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))) == [e.Decide]


def test_a_modern_error_to_initialize_is_modern_evidence():
    """Issue 11, defect 2: an allowlisted server whose discover answer is slow gets the one
    initialize and answers it with -32022 listing only modern revisions: it has proved it
    is modern. Discover is asked again (a new id), never initialize."""
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    out = m.handle(e.ErrorReplied(e.Probe.INITIALIZE, -32022, "Unsupported protocol version",
                                  {"supported": [MODERN], "requested": "2025-11-25"}))
    assert out == [e.SendDiscover(MODERN, 10.0)]
    assert m.proven_modern
    out = m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))
    assert kinds(out) == [e.Decide] and out[0].verdict.era is e.Era.MODERN
    assert any("a modern error, so the peer is modern" in line for line in out[0].verdict.evidence)


def test_a_modern_error_to_initialize_naming_legacy_revisions_is_no_evidence():
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    out = m.handle(e.ErrorReplied(e.Probe.INITIALIZE, -32022, "x",
                                  {"supported": ["2025-06-18", MODERN], "requested": "2025-11-25"}))
    assert kinds(out) == [e.Fail] and not m.proven_modern


def test_a_missing_capability_error_to_initialize_fails_as_modern():
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    out = m.handle(e.ErrorReplied(e.Probe.INITIALIZE, -32021, "x",
                                  {"requiredCapabilities": {"sampling": {}}}))
    assert kinds(out) == [e.Fail]
    assert "requires client capabilities" in out[0].refusal.reason
    assert out[0].refusal.proven_modern


@pytest.mark.parametrize("allow_legacy", [False, True])
def test_proven_modern_never_gets_initialize(allow_legacy):
    m, first = machine(allow_legacy=allow_legacy, proven_modern=True)
    assert kinds(first) == [e.SendDiscover]
    assert any("earlier connection proved" in line for line in m.evidence)
    out = m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    never_initialize(out)
    assert kinds(out) == [e.Fail]
    assert out[0].refusal.next_attempt is e.NextAttempt.LATER


def test_silence_is_no_evidence_yet_and_answers_are_final():
    """Issue 11, defect 4: a deadline that passed in silence fails *for now*; an answer
    that is not evidence fails for good."""
    m, _ = machine()
    out = m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    assert out[0].refusal.next_attempt is e.NextAttempt.LATER
    assert "initialize was never sent" in out[0].refusal.reason
    m, _ = machine()
    out = m.handle(e.ErrorReplied(e.Probe.DISCOVER, -32601, "Method not found"))
    assert out[0].refusal.next_attempt is e.NextAttempt.NEVER
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    out = m.handle(e.TimedOut(e.Probe.INITIALIZE, 10.0))
    assert out[0].refusal.next_attempt is e.NextAttempt.LATER
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0))
    out = m.handle(e.ErrorReplied(e.Probe.INITIALIZE, -32602, "bad"))
    assert out[0].refusal.next_attempt is e.NextAttempt.NEVER


def test_discover_timeout_while_initializing_is_ignored():
    m, _ = machine(allow_legacy=True)
    m.handle(e.Unexpected("garbage"))
    assert m.handle(e.TimedOut(e.Probe.DISCOVER, 10.0)) == []
    assert m.state is e.State.INITIALIZING


def test_initialize_reply_without_initialize_is_a_violation():
    m, _ = machine(allow_legacy=True)
    assert kinds(m.handle(e.Replied(e.Probe.INITIALIZE, INIT_OK))) == [e.Fail]


def test_verdict_is_final():
    m, _ = machine(allow_legacy=True)
    m.handle(e.Replied(e.Probe.DISCOVER, DISCOVER_OK))
    for event in [*AMBIGUOUS, e.Closed("x"), e.Replied(e.Probe.INITIALIZE, INIT_OK)]:
        assert m.handle(event) == []
    assert m.verdict is not None and m.verdict.era is e.Era.MODERN


def test_start_twice_is_an_error():
    m, _ = machine()
    with pytest.raises(RuntimeError):
        m.start()


@pytest.mark.parametrize("allow_legacy", [False, True])
@pytest.mark.parametrize("status", [401, 403])
def test_authentication_challenge_is_never_era_evidence(allow_legacy, status):
    """HTTP 401/403 to the probe: fail with the authentication reason, even for an
    allowlisted peer (a challenge says nothing about the era)."""
    m, _ = machine(allow_legacy=allow_legacy)
    out = m.handle(e.Rejected(e.Probe.DISCOVER, f"HTTP {status}"))
    assert kinds(out) == [e.Fail]
    never_initialize(out)
    assert "authentication failed" in out[0].refusal.reason
    assert any(f"HTTP {status}" in line for line in m.evidence)


def test_authentication_challenge_to_the_legacy_initialize_fails():
    m, _ = machine(allow_legacy=True)
    assert kinds(m.handle(e.ExchangeFailed(e.Probe.DISCOVER, "HTTP 404"))) == [e.SendInitialize]
    out = m.handle(e.Rejected(e.Probe.INITIALIZE, "HTTP 401"))
    assert kinds(out) == [e.Fail] and m.verdict is None


def test_failed_initialize_exchange_fails_closed():
    m, _ = machine(allow_legacy=True)
    m.handle(e.ExchangeFailed(e.Probe.DISCOVER, "HTTP 400 with an unrecognized body"))
    out = m.handle(e.ExchangeFailed(e.Probe.INITIALIZE, "HTTP 500"))
    assert kinds(out) == [e.Fail]
    assert "initialize probe got no answer" in out[0].refusal.reason


def test_failed_discover_exchange_while_initializing_is_ignored():
    m, _ = machine(allow_legacy=True)
    m.handle(e.TimedOut(e.Probe.DISCOVER, 1.0))
    assert m.handle(e.ExchangeFailed(e.Probe.DISCOVER, "stream broke")) == []
    assert kinds(m.handle(e.Replied(e.Probe.INITIALIZE, INIT_OK))) == [e.SendInitialized, e.Decide]


_events = st.sampled_from([
    *AMBIGUOUS,
    e.Rejected(e.Probe.DISCOVER, "HTTP 401"),
    e.ExchangeFailed(e.Probe.INITIALIZE, "HTTP 500"),
    e.Closed("eof"),
    e.Replied(e.Probe.INITIALIZE, INIT_OK),
    e.Replied(e.Probe.INITIALIZE, {**INIT_OK, "serverInfo": {}}),
    e.TimedOut(e.Probe.INITIALIZE, 1.0),
    e.ErrorReplied(e.Probe.DISCOVER, -32022, "x", {"supported": [MODERN], "requested": "z"}),
    e.ErrorReplied(e.Probe.DISCOVER, -32021, "x", {"requiredCapabilities": {}}),
    e.Replied(e.Probe.DISCOVER, DISCOVER_OK),
])


@given(allow_legacy=st.booleans(), events=st.lists(_events, max_size=12))
def test_invariants_for_any_event_sequence(allow_legacy, events):
    """Whatever the server does: at most one initialize, never initialize without the
    allowlist, never initialize after modern evidence, never a legacy verdict without a
    valid InitializeResult, at most one verdict, and the allowlist named as a refusal's
    remedy only where it would have let initialize go out."""
    m, out = machine(allow_legacy=allow_legacy)
    history = list(out)
    modern_seen = False
    for event in events:
        proves_modern = (
            isinstance(event, e.ErrorReplied)
            and event.code in (-32021, -32022)
            and isinstance(event.data, dict)
            and (isinstance(event.data.get("supported"), list)
                 or isinstance(event.data.get("requiredCapabilities"), dict))
        ) or (isinstance(event, e.Replied) and event.probe is e.Probe.DISCOVER)
        modern_seen = modern_seen or proves_modern
        decisions = m.handle(event)
        if any(isinstance(d, e.SendInitialize) for d in decisions):
            assert allow_legacy and not modern_seen
        for d in decisions:
            if isinstance(d, e.Fail) and d.refusal.remedy is not None:
                # Allowlisting is named only where it would have let initialize go out.
                assert not allow_legacy and not modern_seen and d.refusal.answered
        history.extend(decisions)
    inits = [d for d in history if isinstance(d, e.SendInitialize)]
    assert len(inits) <= (1 if allow_legacy else 0)
    ends = [d for d in history if isinstance(d, (e.Decide, e.Fail))]
    assert len(ends) <= 1
    renegotiations = [i for i, d in enumerate(history) if isinstance(d, e.Renegotiate)]
    assert len(renegotiations) <= 1
    assert not renegotiations or renegotiations[0] == len(history) - 1, "nothing after it"
    if m.verdict is not None and m.verdict.era is e.Era.LEGACY:
        assert inits and any(isinstance(d, e.SendInitialized) for d in history)
