"""``CallNotices`` on its own: which call a server's word about a call belongs to. Logs
and progress are also covered end to end (``test_host.py``, ``test_host_http.py``); here,
the rule for a legacy server's own requests, which name no call."""

from __future__ import annotations

from trunkline.channel import ServerRequest
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
    assert notices.handler_for(asked(), in_flight=1) is elicit_a
    # Another request in flight, even one that cannot be asked: it could be that one's.
    assert notices.handler_for(asked(), in_flight=2) is None
    b = notices.watch(None, asks={"elicitation/create": elicit_b})
    assert notices.handler_for(asked(), in_flight=2) is None
    notices.unwatch(a)
    notices.unwatch(b)
    assert notices.handler_for(asked(), in_flight=1) is None


def test_progress_for_a_call_that_wants_none_is_not_counted_as_stray():
    notices = CallNotices("srv")
    token = notices.watch(None, asks={"elicitation/create": elicit_a})
    notices.progress({"progressToken": token, "progress": 1})
    assert notices.dropped == 0
    notices.progress({"progressToken": "tl-999", "progress": 1})
    assert notices.dropped == 1
