"""A legacy server's own requests, as the ``input_required`` rounds of a relayed call: a
pure state machine, events in, decisions out.

A caller that relays a call's input rounds (a gateway serving a 2026-07-28 client: it
answers ``input_required`` results itself, in its next request) may call a tool of a
2025-11-25 server, which asks for input with requests of its own
(``elicitation/create``, ``sampling/createMessage``) while the call runs. The bridge turns
those into rounds of the caller's call, and the caller's answers into the server's
replies, so the server's call is never repeated and never left waiting. The driver
(``parent.input_bridge``) keeps the call in flight between the caller's requests.

Rules:

1. A request of the server's is checked as an ``inputRequests`` entry is
   (``protocol.mrtr``): its shape, and the capabilities the caller declared for this call
   (a URL elicitation needs ``elicitation.url``, sampling with tools ``sampling.tools``).
   One that fails, or one past the bounds (requests waiting at once, the size of one
   request), is refused: the server gets an error reply with the reason, and the caller
   never sees it. ``roots/list`` is never bridged: a legacy server's roots belong to its
   session, which every call shares (``parent.relay``).
2. An accepted request gets a key of its own (``q1``, ``q2``, ...) and waits for its
   answer. ``round`` tells the caller every request it was not told yet, in one
   ``InputRequiredResult``: ``inputRequests`` by key (each request's ``params`` without
   what describes the legacy hop: ``_meta``, ``task``, a URL elicitation's
   ``elicitationId``), ``requestState`` the bridge's token.
3. ``answered`` takes the caller's ``inputResponses``: each told key's answer, checked as
   an MRTR response is, is the server's reply; a told key with no answer, or with one of
   the wrong shape, is an error reply (the caller broke the round, the server is told so).
   Keys the caller was never told are ignored.
4. Bounds (``MrtrLimits``): at most ``max_rounds`` rounds, and none after ``max_total_s``
   from the call's start; past either, ``round`` fails the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ProtocolFailure
from .mrtr import (
    CAPABILITY_OF,
    ELICIT,
    SAMPLE,
    InputRequestItem,
    MrtrLimits,
    check_response,
    parse_input_request,
    undeclared,
)

#: The kinds of a legacy server's own request a call's caller can answer (rule 1).
BRIDGED = frozenset({ELICIT, SAMPLE})
#: ``params`` members that describe the legacy hop, not the question (rule 2).
_HOP_ONLY = ("_meta", "task")


@dataclass(frozen=True)
class Refused:
    """The server's request is refused: it gets an error reply saying ``reason``."""

    reason: str


@dataclass(frozen=True)
class Answered:
    """The server's request ``key`` is answered: ``result``, or an error saying ``error``."""

    key: str
    result: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class InputBridge:
    """The bridged rounds of one call. ``capabilities``: what the caller declared for it;
    ``token``: the ``requestState`` its rounds carry; ``started``: the call's start (the
    caller's clock)."""

    capabilities: dict[str, Any]
    token: str
    started: float
    limits: MrtrLimits = field(default_factory=MrtrLimits)
    rounds: int = 0
    #: Requests waiting for their answers, by key; ``_told`` those the caller was told of.
    _waiting: dict[str, InputRequestItem] = field(default_factory=dict)
    _told: set[str] = field(default_factory=set)
    _next: int = 0

    def asked(self, method: str, params: dict[str, Any]) -> InputRequestItem | Refused:
        """The server asked ``method`` with ``params`` (rule 1)."""
        if method not in BRIDGED:
            return Refused(f"{method} is not relayed to the caller")
        if len(self._waiting) >= self.limits.max_input_requests:
            return Refused(f"{len(self._waiting)} requests of this call already wait for "
                           "the caller (max_input_requests)")
        size = len(orjson.dumps(params))
        if size > self.limits.max_input_requests_bytes:
            return Refused(f"the request is {size} bytes, over the "
                           f"{self.limits.max_input_requests_bytes}-byte limit")
        asked = {k: v for k, v in params.items() if k not in _HOP_ONLY}
        if method == ELICIT and asked.get("mode") == "url":
            asked.pop("elicitationId", None)
        self._next += 1
        item = parse_input_request(f"q{self._next}", {"method": method, "params": asked})
        if isinstance(item, str):
            return Refused(f"a malformed {method} request: {item}")
        refusal = undeclared(item, self.capabilities)
        if refusal is not None:
            what, why = refusal
            return Refused(f"{what} cannot be relayed: {why.replace('the host', 'the caller')}")
        self._waiting[item.key] = item
        return item

    @property
    def untold(self) -> bool:
        """Whether a request waits that the caller was not told of (a round is due)."""
        return len(self._told) < len(self._waiting)

    def round(self, now: float) -> dict[str, Any]:
        """The ``InputRequiredResult`` that tells the caller of the waiting requests (rule
        2); raises ``ProtocolFailure`` past the bounds (rule 4)."""
        self.rounds += 1
        if self.rounds > self.limits.max_rounds:
            raise ProtocolFailure(f"the server still asks for input after "
                                  f"{self.limits.max_rounds} rounds (max_rounds)")
        if now - self.started > self.limits.max_total_s:
            raise ProtocolFailure(f"input rounds exceeded the {self.limits.max_total_s:g} s "
                                  "total-time limit")
        self._told.update(self._waiting)
        return {"resultType": "input_required", "requestState": self.token,
                "inputRequests": {key: {"method": item.method, "params": item.params}
                                  for key, item in self._waiting.items()}}

    def answered(self, responses: Any) -> list[Answered]:
        """The caller's ``inputResponses``: the replies the server gets (rule 3)."""
        given = responses if isinstance(responses, dict) else {}
        replies: list[Answered] = []
        for key in sorted(self._told, key=lambda k: int(k[1:])):
            item = self._waiting.pop(key)
            if key not in given:
                replies.append(Answered(key, error=f"the caller did not answer this "
                                     f"{item.method} request"))
                continue
            try:
                check_response(item, given[key])
            except ValueError as exc:
                replies.append(Answered(key, error=f"the caller's answer was malformed: {exc}"))
            else:
                replies.append(Answered(key, result=dict(given[key])))
        self._told.clear()
        return replies

    def withdrawn(self, key: str) -> None:
        """The server no longer waits for request ``key`` (its connection ended)."""
        self._waiting.pop(key, None)
        self._told.discard(key)


def bridgeable(capabilities: Any) -> bool:
    """Whether a caller that declared ``capabilities`` can answer any bridged kind."""
    return isinstance(capabilities, dict) and any(
        CAPABILITY_OF[kind] in capabilities for kind in BRIDGED)


__all__ = ["BRIDGED", "Answered", "InputBridge", "Refused", "bridgeable"]
