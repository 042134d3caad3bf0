"""How many requests the gateway has behind it at once, overall and per server.

Rules: a request answered from behind the gateway (a ``tools/call``, a prompt, a resource)
is admitted only while fewer than ``per_server`` requests are already with its server and
fewer than ``total`` with the whole fleet; otherwise it is refused at once, never queued
without bound, with an error saying which bound it met and when to come back (HTTP: 429
for one busy server, 503 for a busy gateway, both with ``Retry-After``). Within a bound,
the server's own in-flight limit (``ServerConfig.max_inflight``) still applies: a call
waits for a slot within its deadline. A refusal disturbs no other client's request.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from . import protocol as p

#: Seconds a refused client is told to wait before trying again.
RETRY_AFTER_S = 1
OVERLOADED = "Overloaded"


class Admission:
    def __init__(self, *, total: int, per_server: int) -> None:
        if total < 1 or per_server < 1:
            raise ValueError("admission bounds must be at least 1")
        self.total = total
        self.per_server = per_server
        self._in = 0
        self._by_server: Counter[str] = Counter()

    def check(self, server: str | None) -> dict[str, Any] | None:
        """The refusal a request to ``server`` would get now, or None (nothing changes)."""
        if server is not None and self._by_server[server] >= self.per_server:
            return overloaded("server", self.per_server, server)
        if self._in >= self.total:
            return overloaded("gateway", self.total, None)
        return None

    def enter(self, server: str | None) -> dict[str, Any] | None:
        """Admit one request (to ``server``, when it is known): None, or the refusal."""
        refusal = self.check(server)
        if refusal is not None:
            return refusal
        self._in += 1
        if server is not None:
            self._by_server[server] += 1
        return None

    def leave(self, server: str | None) -> None:
        self._in -= 1
        if server is not None:
            self._by_server[server] -= 1
            if not self._by_server[server]:
                del self._by_server[server]

    @property
    def in_flight(self) -> int:
        return self._in


def overloaded(scope: str, limit: int, server: str | None) -> dict[str, Any]:
    where = f"server {server!r} has" if server is not None else "the gateway has"
    data: dict[str, Any] = {"kind": OVERLOADED, "scope": scope, "limit": limit,
                            "retryAfterS": RETRY_AFTER_S}
    if server is not None:
        data["server"] = server
    return p.error(p.INTERNAL_ERROR, f"{where} {limit} requests in flight, its limit; "
                   f"retry after {RETRY_AFTER_S} s", data)


def retry_after(err: dict[str, Any]) -> int | None:
    """The ``Retry-After`` an error answer asks for (an overload), else None."""
    data = err.get("data")
    if isinstance(data, dict) and data.get("kind") == OVERLOADED:
        return int(data.get("retryAfterS", RETRY_AFTER_S))
    return None
