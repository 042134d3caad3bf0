"""Every message of the parent <-> worker channel survives its round trip: the bytes one
side writes are what the other side reads back, frame type included."""

from __future__ import annotations

import pytest

from trunkline import _codec
from trunkline import channel as ch
from trunkline.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    HttpStatusError,
    MalformedMessage,
    OversizedMessage,
    RedirectRefused,
    RequestTimeout,
    ServerUnavailable,
    StreamBroken,
    TransportLost,
    TrunklineError,
)
from trunkline.params import http, stdio
from trunkline.protocol.era import NegotiationConfig, Remedy
from trunkline.protocol.identity import ClientIdentity
from trunkline.settings import HostSettings, RestartPolicy, ServerConfig


def one_frame(data: bytes) -> tuple[int, bytes]:
    frames = _codec.FrameSplitter().feed(data)
    assert len(frames) == 1
    return frames[0]


def test_the_hot_frame_numbers_are_the_codecs():
    assert (ch.SUBMIT, ch.RESULT) == (_codec.FRAME_SUBMIT, _codec.FRAME_RESULT)
    kinds = [ch.CANCEL, ch.STOP, ch.SERVER_ANSWER, ch.FAILURE, ch.STATE, ch.LIST_CHANGED,
             ch.LOG, ch.PROGRESS, ch.SERVER_REQUEST, ch.STATS, ch.SUBMIT, ch.RESULT,
             ch.WATCH_RESOURCES, ch.CREDENTIALS, ch.WATCH_TASK, ch.UNWATCH_TASK,
             ch.FORGET_CREDENTIALS, ch.RESOURCE_UPDATED, ch.CREDENTIALS_ASKED, ch.TASK_REPORT,
             _codec.FRAME_SUBMIT_REJECTED, _codec.FRAME_STAMPED, _codec.FRAME_STAMPED_FOR]
    assert len(set(kinds)) == len(kinds), "two messages share a frame type"


@pytest.mark.parametrize("server", [
    ServerConfig("local", stdio("python", "-m", "srv", env={"K": "v"}, cwd="/tmp"),
                 allow_legacy=True, idempotent_tools=frozenset({"get", "list"}),
                 call_timeout_s=12.5, discover_timeout_s=30.0, max_discover_timeout_s=600.0,
                 max_in_flight=7, wait_ready=False),
    ServerConfig("remote", http("https://mcp.example.com/mcp", headers={"X-Api-Key": "k"},
                                verify_tls=False, max_connections=3)),
], ids=["stdio", "http"])
def test_the_worker_spec_carries_the_server_and_the_host_settings_whole(server):
    host = HostSettings(
        identity=ClientIdentity("h", "9.9", "Title", {"elicitation": {}}),
        negotiation=NegotiationConfig(discover_timeout_s=3.0, max_discover_attempts=5),
        restart=RestartPolicy(base_s=0.5, max_restarts=9), max_line_bytes=1 << 20,
        max_frame_bytes=2 << 20, close_wait_s=0.25, term_wait_s=0.75,
        listen={"toolsListChanged": True, "promptsListChanged": True},
        answered_requests=frozenset({"elicitation/create"}), request_ids_per_connection=99)
    spec = ch.WorkerSpec(server=server, host=host, first_request_id=199, request_id_limit=298,
                         proven_modern=True, patience=2)
    back = ch.WorkerSpec.from_bytes(spec.to_bytes())
    assert back == spec
    assert back.server.params == server.params and type(back.server.params) is type(server.params)
    negotiation = back.negotiation()
    assert negotiation.allow_legacy == server.allow_legacy and negotiation.proven_modern
    # Two silent connections before this one: its probes wait four times as long.
    assert negotiation.discover_timeout_s == 4 * (server.discover_timeout_s or 3.0)
    assert negotiation.legacy_probe_timeout_s == 4 * host.negotiation.legacy_probe_timeout_s


def test_a_spec_from_another_install_or_broken_is_refused():
    spec = ch.WorkerSpec(server=ServerConfig("s", stdio("x")), host=HostSettings())
    other = spec.to_bytes().replace(f'"channel_version":{ch.CHANNEL_VERSION}'.encode(),
                                    b'"channel_version":1')
    with pytest.raises(ValueError, match="different installs"):
        ch.WorkerSpec.from_bytes(other)
    broken = spec.to_bytes().replace(b'"command":"x"', b'"command":7')
    with pytest.raises(ValueError, match="invalid worker specification"):
        ch.WorkerSpec.from_bytes(broken)


def test_a_state_report_round_trips():
    report = ch.StateReport(
        state=ch.ServerState.UNAVAILABLE, era=None, version=None, capabilities={"tools": {}},
        server_info={"name": "n", "version": "1"}, instructions="be nice",
        evidence=("a", "b"), reason="era refused: silence", stderr_tail="boom",
        server_pid=42, exit_code=-9, retry_later=True, proven_modern=True,
        remedy=Remedy.ALLOW_LEGACY, answered="answered server/discover with error -32601")
    kind, body = one_frame(report.to_bytes())
    assert kind == ch.STATE and ch.StateReport.from_bytes(body) == report
    assert b'"remedy":"allow_legacy"' in body  # the enum's value, not its name


@pytest.mark.parametrize("message,kind", [
    (ch.Stats(late_replies=3, protocol_violations=1), ch.STATS),
    (ch.ListChanged("prompts"), ch.LIST_CHANGED),
    (ch.ServerRequest(7, "elicitation/create", {"message": "?"}), ch.SERVER_REQUEST),
    (ch.ServerAnswer(7, result={"action": "accept"}), ch.SERVER_ANSWER),
    (ch.ServerAnswer(8, error="no handler"), ch.SERVER_ANSWER),
    (ch.CredentialQuestion(1, status=401, challenge="Bearer", rejected="Bearer t"),
     ch.CREDENTIALS_ASKED),
    (ch.CredentialQuestion(2), ch.CREDENTIALS_ASKED),
    (ch.CredentialQuestion(3, slot=2**32 - 1), ch.CREDENTIALS_ASKED),
    (ch.CredentialAnswer(3, authorization="Bearer u", slot=7), ch.CREDENTIALS),
    (ch.CredentialsForgotten([7, 9]), ch.FORGET_CREDENTIALS),
    (ch.CredentialAnswer(1, authorization="Bearer t", renew_at=1.5), ch.CREDENTIALS),
    (ch.CredentialAnswer(2, error="refused", reason="resource_mismatch", issuer="https://as"),
     ch.CREDENTIALS),
], ids=repr)
def test_json_messages_round_trip(message, kind):
    got_kind, body = one_frame(message.to_bytes())
    assert got_kind == kind and type(message).from_bytes(body) == message


@pytest.mark.parametrize("kind", [ch.LOG, ch.PROGRESS])
def test_notices_round_trip_under_either_frame(kind):
    notice = ch.Notice({"progressToken": "tl-1", "progress": 0.5, "message": "half"})
    got_kind, body = one_frame(notice.to_bytes(kind))
    assert got_kind == kind and ch.Notice.from_bytes(body) == notice


def test_cancel_and_stop_frames():
    kind, body = one_frame(ch.cancel_frame(2**64 - 1))
    assert kind == ch.CANCEL and ch.cancel_from_bytes(body) == 2**64 - 1
    assert one_frame(ch.stop_frame()) == (ch.STOP, b"")


FAILURES = [
    ServerUnavailable("server is negotiating", state="negotiating", sent=False),
    TransportLost("server exited", exit_code=3),
    RequestTimeout("no reply within 1 s", timeout_s=1.0),
    MalformedMessage("request cannot be sent", sent=False),
    StreamBroken("the stream broke"),
    HttpStatusError("HTTP 503", status=503, body="busy"),
    AuthenticationFailed("HTTP 401", status=401, challenge='Bearer realm="x"'),
    AuthorizationFailed("PRM for another resource", status=401, challenge="Bearer",
                        reason="resource_mismatch", issuer="https://as.example"),
    OversizedMessage("the answer was 20 bytes", size=20, limit=10),
    RedirectRefused("HTTP 307 to elsewhere", status=307, location="http://elsewhere/mcp"),
]


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
def test_every_failure_kind_comes_back_as_the_same_error(error):
    error.method = "tools/call"
    error.request_id = 9_007
    kind, body = one_frame(ch.Failure.to_bytes(2**40, error))
    assert kind == ch.FAILURE
    call_id, back = ch.Failure.from_bytes(body, server="s")
    assert call_id == 2**40 and type(back) is type(error)
    assert (back.message, back.method, back.sent, back.server, back.request_id) == (
        error.message, error.method, error.sent, "s", 9_007)
    for _kind, cls, fields in ch.FAILURES:
        if type(error) is cls:
            assert all(getattr(back, f) == getattr(error, f) for f in fields)


def test_every_row_of_the_failure_table_is_exercised():
    assert {type(e) for e in FAILURES} == {cls for _k, cls, _f in ch.FAILURES}


def test_an_error_with_no_row_travels_as_a_lost_transport():
    _, back = ch.Failure.from_bytes(one_frame(ch.Failure.to_bytes(1, TrunklineError("odd")))[1])
    assert type(back) is TransportLost and back.message == "odd"
    assert back.request_id is None  # never sent: no id
