"""``CallNotices`` on its own: which call a server's word about a call belongs to. Logs
and progress are also covered end to end (``test_host.py``, ``test_host_http.py``,
``tests/gateway/test_serve_logs.py``); here, the rules for what names no call: a legacy
server's own requests, and a stdio server's log lines."""

from __future__ import annotations

from trunkline.channel import Notice, ServerRequest
from trunkline.parent.call_notices import CallNotices


async def elicit_a(params):
    return {"action": "accept", "content": {"by": "a"}}


async def elicit_b(params):
    return {"action": "accept", "content": {"by": "b"}}


def asked(stream=None, method="elicitation/create"):
    return ServerRequest(1, method, {"message": "?"}, stream)


def test_a_tagged_request_goes_to_the_call_on_whose_stream_it_came():
    notices = CallNotices("srv")
    a = notices.watch(None, asks={"elicitation/create": elicit_a})
    b = notices.watch(None, asks={"elicitation/create": elicit_b})
    assert notices.handler_for(asked(a), in_flight=2) is elicit_a
    assert notices.handler_for(asked(b), in_flight=2) is elicit_b
    # A kind the call cannot answer, or a token of no call (finished, or made up): none.
    assert notices.handler_for(asked(a, "sampling/createMessage"), in_flight=2) is None
    assert notices.handler_for(asked("tl-999"), in_flight=2) is None
    notices.unwatch(a)
    assert notices.handler_for(asked(a), in_flight=1) is None


def test_an_untagged_request_is_a_calls_only_while_it_is_the_servers_one_request():
    notices = CallNotices("srv")
    a = notices.watch(None, asks={"elicitation/create": elicit_a})
    # Watched, but its request not with the server (waiting for a slot, between retries
    # or rounds): the one request in flight is another's.
    assert notices.handler_for(asked(), in_flight=1) is None
    notices.sent(a)
    assert notices.handler_for(asked(), in_flight=1) is elicit_a
    # Another request in flight, even one that cannot be asked: it could be that one's.
    assert notices.handler_for(asked(), in_flight=2) is None
    b = notices.watch(None, asks={"elicitation/create": elicit_b})
    notices.sent(b)
    assert notices.handler_for(asked(), in_flight=2) is None
    notices.returned(a)
    assert notices.handler_for(asked(), in_flight=1) is elicit_b
    notices.unwatch(a)
    notices.unwatch(b)
    assert notices.handler_for(asked(), in_flight=1) is None


def logged(stream=None):
    return Notice({"level": "info", "data": "a line"}, stream)


def test_an_untagged_log_line_is_a_calls_only_while_its_request_is_the_one_in_flight():
    """A stdio server's log line names no request, and a server may log for a request
    that asked for none: the line is the asking call's only while that call's request is
    the server's one request in flight; else it is the host's, never another call's."""
    notices = CallNotices("srv")
    got: list[dict] = []
    a = notices.watch(None, got.append)
    notices.sent(a)
    # A plain request (asking nothing, so not watched) is in flight beside it: the line
    # may be that one's.
    assert notices.log(logged(), unstreamed_modern=True, in_flight=2) is False
    assert notices.log(logged(), unstreamed_modern=True, in_flight=1) is True
    assert got == [{"level": "info", "data": "a line"}]
    # Its request came back (it waits to retry): the one in flight is someone else's.
    notices.returned(a)
    assert notices.log(logged(), unstreamed_modern=True, in_flight=1) is False
    # A server with per-request streams (HTTP) tags the line: exact, whatever is in flight.
    assert notices.log(logged(a), unstreamed_modern=False, in_flight=3) is True
    # A legacy server's lines are its session's.
    notices.sent(a)
    assert notices.log(logged(), unstreamed_modern=False, in_flight=1) is False
    notices.unwatch(a)
    assert notices.log(logged(), unstreamed_modern=True, in_flight=1) is False
    assert len(got) == 2


def test_the_one_request_in_flight_that_asked_for_no_logs_keeps_them_from_any_call():
    notices = CallNotices("srv")
    got: list[dict] = []
    notices.watch(None, got.append)
    b = notices.watch(lambda params: None)  # progress only
    notices.sent(b)
    assert notices.log(logged(), unstreamed_modern=True, in_flight=1) is False
    assert got == []


def test_progress_for_a_call_that_wants_none_is_not_counted_as_stray():
    notices = CallNotices("srv")
    token = notices.watch(None, asks={"elicitation/create": elicit_a})
    notices.progress({"progressToken": token, "progress": 1})
    assert notices.dropped == 0
    notices.progress({"progressToken": "tl-999", "progress": 1})
    assert notices.dropped == 1
