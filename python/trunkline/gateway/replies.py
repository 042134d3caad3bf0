"""The HTTP responses the parts of the HTTP face decide (``http``: the router, ``http_post``:
a POSTed message, ``legacy_sessions``: a 2025-11-25 session's requests), and the passing
of a request to the sibling copy that holds its state (``siblings``), whose response is
passed back as it came.

A handler answers with a ``HttpReply`` (the HTTP face decided the whole response), a JSON-RPC
message (answered as JSON, with the status its error goes with: ``answer``), or None (it
answered itself, as a stream).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import protocol as p
from .admission import retry_after
from .exchange import JSON, Exchange
from .http_rules import session_owner, status_for
from .siblings import Siblings, SiblingUnreachable


@dataclass(slots=True)
class HttpReply:
    """A whole response, as a handler decides it (the router sends it)."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: None: ``headers`` name it (a sibling's response, passed on as it came).
    content_type: bytes | None = JSON


#: What a handler answers with (see the module's docstring).
Handled = HttpReply | p.Message | None
#: A route's handler.
Handler = Callable[[Exchange], Awaitable[Handled]]


def json_reply(message: dict[str, Any], status: int = 200,
               headers: Mapping[str, str] | None = None) -> HttpReply:
    return HttpReply(status, orjson.dumps(message), headers or {})


def answer(message: p.Message, headers: Mapping[str, str] | None = None) -> HttpReply:
    """A JSON-RPC answer with the status its error (if any) goes with, and
    ``Retry-After`` when it is an overload (one passed on as bytes is a result)."""
    if isinstance(message, bytes):
        return HttpReply(200, message, headers or {})
    if "error" not in message:
        return json_reply(message, 200, headers)
    err = message["error"]
    wait = retry_after(err)
    extra = {**(headers or {}), **({"Retry-After": str(wait)} if wait is not None else {})}
    return json_reply(message, status_for(err), extra)


def refusal(status: int, code: int, message: str, **headers: str) -> HttpReply:
    return json_reply(p.error_response(None, p.error(code, message)), status, headers)


def malformed_status(err: dict[str, Any]) -> int:
    """A request refused for its shape (no revision or capabilities in ``_meta``, params
    that are not an object) is 400 even where the code alone (-32602) would not say so."""
    status = status_for(err)
    return 400 if status == 200 else status


def owner(http: Exchange) -> str | None:
    """Whose a legacy session opened on this exchange is (the identity of its access
    token or API key; None: it showed neither)."""
    identity = http.identity
    if identity is None:
        return None
    return session_owner(identity.issuer or identity.kind, identity.subject)


def sibling_for(siblings: Siblings | None, http: Exchange, instance: str) -> int | None:
    """The sibling copy named ``instance``, when a request may be passed to it (one that
    came from a sibling never is: one hop at most)."""
    if siblings is None or http.internal:
        return None
    return siblings.index_of(instance)


async def passed(siblings: Siblings, http: Exchange, body: bytes | None, index: int
                 ) -> HttpReply | None:
    """``http`` passed to sibling ``index``: its whole response, or None when it came as
    an event stream (written to the client as it came)."""
    try:
        answered = await siblings.forward(http, body, index)
    except SiblingUnreachable as exc:
        return refusal(404, p.INVALID_REQUEST, f"Session not found: {exc}; start a new "
                       "session")
    if answered is None:
        return None
    status, content, headers = answered
    return HttpReply(status, content, headers, content_type=None)


__all__ = ["Handled", "Handler", "HttpReply", "answer", "json_reply", "malformed_status", "owner",
           "passed", "refusal", "sibling_for"]
