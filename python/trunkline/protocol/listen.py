"""One ``subscriptions/listen`` stream, as a pure state machine, and the one table of
list-change notifications.

The worker owns the stream: it opens a listen request with the filter the host asked for,
and every notification on the connection passes through ``accept``, which decides from
the subscription id alone whether it belongs to this stream (MCP 2026-07-28,
basic/patterns/subscriptions): nothing counts before the server's acknowledgement, nothing
without the listen request's id (compared with its JSON type: ``1`` is not ``"1"``; a
notification for another stream is dropped, never routed), and nothing the server did not
agree to send. Resource subscriptions ride the same stream: the filter's
``resourceSubscriptions`` names URIs, the acknowledgement says which of them the server
honours, and a ``notifications/resources/updated`` counts for a URI it honours or a
sub-resource of one (``resource_matches``). A graceful close (the listen result) or a
server-sent
``notifications/cancelled`` for the listen id ends the stream; the worker then opens a new
one with a new id and has the lists refetched, since changes may have been missed. The
modern stream is never resumed (no Last-Event-ID on stdio, and none on HTTP either).
"""

from __future__ import annotations

import enum
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

#: The lists a server announces changes of: each list's name (also the server capability
#: that says it can), the listen filter field that asks for it, and the notification.
LISTS: tuple[tuple[str, str, str], ...] = (
    ("tools", "toolsListChanged", "notifications/tools/list_changed"),
    ("prompts", "promptsListChanged", "notifications/prompts/list_changed"),
    ("resources", "resourcesListChanged", "notifications/resources/list_changed"),
)
#: Filter field -> (its notification, the list it concerns).
FILTERS = {field: (notification, which) for which, field, notification in LISTS}
#: Filter field -> the server capability that makes it worth asking for.
CAPABILITY_FOR = {field: which for which, field, _ in LISTS}
#: List-changed notification -> the list it concerns (a legacy server sends them on its
#: connection, unasked).
LIST_CHANGED = {notification: which for which, _, notification in LISTS}
#: The filter field naming resources to hear updates of, and the update itself.
RESOURCE_SUBSCRIPTIONS = "resourceSubscriptions"
RESOURCE_UPDATED = "notifications/resources/updated"


def resource_matches(updated: str, subscribed: str) -> bool:
    """Whether an update of ``updated`` concerns a subscription to ``subscribed``: the
    same URI, or a sub-resource of it (the spec lets the server name one)."""
    if updated == subscribed:
        return True
    return updated.startswith(subscribed if subscribed.endswith("/") else subscribed + "/")


def subscriptions_of(updated: str, subscribed: Container[str]) -> list[str]:
    """The members of ``subscribed`` an update of ``updated`` concerns
    (``resource_matches``), found by looking up the URI and each of its prefixes that ends
    at a ``/`` (with and without it): as many look-ups as the URI has slashes, however
    many URIs are subscribed."""
    found = [updated] if updated in subscribed else []
    at = updated.find("/")
    while at != -1:
        for prefix in (updated[:at], updated[:at + 1]):
            if prefix != updated and prefix in subscribed and prefix not in found:
                found.append(prefix)
        at = updated.find("/", at + 1)
    return found


def can_subscribe(capabilities: dict[str, Any]) -> bool:
    """Whether the server offers resource subscriptions (``resources.subscribe``)."""
    resources = capabilities.get("resources")
    return isinstance(resources, dict) and resources.get("subscribe") is True


def filter_for(capabilities: dict[str, Any], wanted: dict[str, bool]) -> dict[str, bool]:
    """The filter to ask for: what the host wants, restricted to the lists the server
    says it can announce (``capabilities.<list>.listChanged``)."""
    out = {}
    for key, want in wanted.items():
        cap = capabilities.get(CAPABILITY_FOR.get(key, ""))
        if want and isinstance(cap, dict) and cap.get("listChanged") is True:
            out[key] = True
    return out


class Verdict(enum.Enum):
    ACKNOWLEDGED = "acknowledged"  # the stream is live; ``honoured`` says what it carries
    CHANGED = "changed"            # a list changed: refetch ``which``
    UPDATED = "updated"            # a subscribed resource changed: ``uri``
    CLOSED = "closed"              # the server ended the stream: listen again
    DROP = "drop"                  # not for this stream (or not yet): ignore, but count


@dataclass
class Accepted:
    verdict: Verdict
    which: str | None = None
    reason: str = ""
    uri: str | None = None


@dataclass
class ListenStream:
    """The stream opened by the listen request ``request_id`` with ``requested`` (list
    flags, and ``resourceSubscriptions``: URIs)."""

    request_id: int | str
    requested: dict[str, Any]
    acknowledged: bool = False
    honoured: dict[str, bool] = field(default_factory=dict)
    #: The requested URIs the server agreed to send updates of.
    resources: frozenset[str] = frozenset()
    dropped: int = 0

    def _ours(self, params: Any) -> bool:
        meta = params.get("_meta") if isinstance(params, dict) else None
        sid = meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        return type(sid) is type(self.request_id) and sid == self.request_id

    def accept(self, method: str, params: Any) -> Accepted:
        if method == "notifications/subscriptions/acknowledged":
            if not self._ours(params) or self.acknowledged:
                return self._drop("acknowledgement for another (or the same) subscription")
            self.acknowledged = True
            granted = params.get("notifications") if isinstance(params, dict) else None
            granted = granted if isinstance(granted, dict) else {}
            # Only what we asked for counts, whatever the server claims to grant.
            self.honoured = {k: True for k, v in granted.items()
                             if v is True and self.requested.get(k) is True}
            uris = granted.get(RESOURCE_SUBSCRIPTIONS)
            asked = frozenset(self.requested.get(RESOURCE_SUBSCRIPTIONS) or ())
            if isinstance(uris, list):
                self.resources = frozenset(u for u in uris if isinstance(u, str) and u in asked)
            return Accepted(Verdict.ACKNOWLEDGED)
        if method == "notifications/cancelled":
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if type(request_id) is type(self.request_id) and request_id == self.request_id:
                return Accepted(Verdict.CLOSED, reason="the server cancelled the stream")
            return self._drop("a server-sent cancellation for no stream of ours")
        for key, (notification, which) in FILTERS.items():
            if method == notification:
                if not self.acknowledged:
                    return self._drop("before the acknowledgement")
                if not self._ours(params):
                    return self._drop("without this stream's subscriptionId")
                if not self.honoured.get(key):
                    return self._drop("a notification type the stream did not agree to")
                return Accepted(Verdict.CHANGED, which=which)
        if method == RESOURCE_UPDATED:
            uri = params.get("uri") if isinstance(params, dict) else None
            if not self.acknowledged:
                return self._drop("before the acknowledgement")
            if not self._ours(params):
                return self._drop("without this stream's subscriptionId")
            if not isinstance(uri, str) or not subscriptions_of(uri, self.resources):
                return self._drop(f"an update of {uri!r}, which the stream did not agree to")
            return Accepted(Verdict.UPDATED, uri=uri)
        return self._drop(f"{method} does not travel on a listen stream")

    def _drop(self, reason: str) -> Accepted:
        self.dropped += 1
        return Accepted(Verdict.DROP, reason=reason)
