"""How many requests the gateway has behind it at once: per client, per server and overall.

Rules: a request answered from behind the gateway (a ``tools/call``, a prompt, a resource)
is admitted only while, at once,

1. its client has fewer than ``client_calls`` requests behind the gateway (across every
   server), and fewer than its share of its server (``client_share``: ``ceil(
   client_server_share * places)``, at least 1, where a server's places are the fewer
   of ``per_server`` and the calls the server itself takes at once, its
   ``max_in_flight``, beyond which calls wait for a slot), so that no one client ever
   holds all of a server and the others always find room;
2. when ``client_rate`` is set (above 0), its client has a token in its bucket: a
   bucket holds ``client_burst`` tokens, is full to begin with, gains ``client_rate``
   tokens a second, continuously, up to full again, and each request admitted takes one
   (``ClientRates``). So a client starts ``client_rate`` requests a second on average,
   and up to ``client_burst`` at once after an idle spell; a request refused takes none;
3. fewer than ``per_server`` requests are with its server and fewer than ``total`` with
   the whole fleet.

Otherwise it is refused at once, never queued without bound, with an error naming the
bound it met, the client's own first (``data.scope``: ``client``, with the ``budget``
named, ``client_calls``, ``client_server_share`` or ``client_rate``; ``server``;
``gateway``), and when to come back (HTTP: 429 for a client over its budget or a busy
server, 503 for a busy gateway, each with ``Retry-After``). A client over a budget of
calls in flight waits for its own requests: it is told the seconds until the earliest
deadline of those that hold the budget (each was admitted with its server's call timeout
ahead of it; by then one of them has ended, answered or not). A client over its rate is
told the whole seconds until its bucket has a token again (at least 1). Others' requests
end at times it cannot know: it is told 1 s.

A client is whatever the face names it by (``Answerer``'s ``client_key``): a legacy
session, a modern client's HTTP connection, the stdio face's one client. None is no
client: only the server and gateway bounds apply. A request counts against its client
from its admission until it ends, wherever its client is meanwhile (a legacy call outlives
its connection). Within these bounds, the server's own in-flight limit
(``ServerConfig.max_in_flight``) still applies: a call waits for a slot within its
deadline. A refusal disturbs no other client's request.

The per-client bookkeeping, per request: its admission time under its client and server
(a dict entry; the first entry of a server's is its oldest), nothing else, and nothing
kept for a client with nothing behind the gateway. With a rate, per client whose bucket
is not full: one time, when it will be full again; a bucket full again is as good as
none, and is dropped at a later admission (``ClientRates``), so the buckets kept are at
most the clients that started a request in the last ``client_burst / client_rate``
seconds. Without one, nothing, and one test per request.

Everything here is counted by one gateway process: a client whose requests are spread
over N processes (``serve --processes N``, replicas) may reach N times its budgets.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from . import protocol as p
from .limits import Limits

#: Seconds a client refused for others' requests (a busy server or gateway) is told to
#: wait before trying again.
RETRY_AFTER_S = 1
OVERLOADED = p.OVERLOADED
#: The bound a refusal names (``data.scope``); the first is the client's own.
CLIENT, SERVER, GATEWAY = "client", "server", "gateway"


class Admission:
    def __init__(self, *, total: int, per_server: int,
                 client_calls: int = Limits.client_calls,
                 client_server_share: float = Limits.client_server_share,
                 client_rate: float = Limits.client_rate,
                 client_burst: int | None = Limits.client_burst,
                 timeout_of: Callable[[str | None], float] = lambda _server: 60.0,
                 slots_of: Callable[[str], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``timeout_of(server)``: the seconds a request to ``server`` (None: to the
        fleet) is given, which tells a client over its budget when to come back;
        ``slots_of(server)``: the calls the server takes at once (None: as many as
        ``per_server``); ``client_rate``: 0 for no rate bound (``client_burst`` None:
        ``default_burst(client_rate)``)."""
        if total < 1 or per_server < 1 or client_calls < 1:
            raise ValueError("admission bounds must be at least 1")
        if not 0 < client_server_share <= 1:
            raise ValueError("client_server_share is a fraction, above 0 and at most 1")
        self.total = total
        self.per_server = per_server
        self.client_calls = client_calls
        self.client_server_share = client_server_share
        #: Each client's bucket, when requests are bounded by rate (rule 2).
        self.rates = ClientRates(client_rate, client_burst) if client_rate else None
        self._timeout_of = timeout_of
        self._slots_of = slots_of
        self._clock = clock
        self._in = 0
        self._by_server: dict[str, int] = {}
        #: Each client with requests behind the gateway: how many, and when each was
        #: admitted, by server (insertion order: the oldest first).
        self._calls: dict[Hashable, int] = {}
        self._held: dict[Hashable, dict[str | None, dict[Hashable, float]]] = {}

    def enter(self, server: str | None, client: Hashable = None,
              ticket: Hashable = None) -> dict[str, Any] | None:
        """Admit one request of ``client`` (to ``server``, when it is known): None, or the
        refusal. ``ticket``: what names this request until it ``leave``\\ s (anything
        unique to it while it runs; needed when ``client`` is not None)."""
        held = None if client is None else self._held.get(client)
        if held is not None:  # the client has requests in flight already
            refusal = self._over_budget(server, client, held)
            if refusal is not None:
                return refusal
        if self.rates is not None and client is not None:
            wait = self.rates.take(client, self._clock())
            if wait:
                return self.rates.refusal(wait)
        if server is not None and self._by_server.get(server, 0) >= self.per_server:
            return self._busy(client, overloaded(SERVER, self.per_server, server))
        if self._in >= self.total:
            return self._busy(client, overloaded(GATEWAY, self.total, None))
        self._in += 1
        if server is not None:
            self._by_server[server] = self._by_server.get(server, 0) + 1
        if client is not None:
            if held is None:  # most often: a client's one request at a time
                self._held[client] = {server: {ticket: self._clock()}}
                self._calls[client] = 1
            else:
                admitted = held.get(server)
                if admitted is None:
                    held[server] = {ticket: self._clock()}
                else:
                    admitted[ticket] = self._clock()
                self._calls[client] += 1
        return None

    def leave(self, server: str | None, client: Hashable = None,
              ticket: Hashable = None) -> None:
        """The request ``enter`` admitted (with the same arguments) has ended."""
        self._in -= 1
        if server is not None:
            left = self._by_server[server] - 1
            if left:
                self._by_server[server] = left
            else:
                del self._by_server[server]
        if client is None:
            return
        calls = self._calls[client]
        if calls == 1:
            del self._calls[client], self._held[client]
            return
        self._calls[client] = calls - 1
        held = self._held[client]
        admitted = held[server]
        if len(admitted) == 1:
            del held[server]
        else:
            del admitted[ticket]

    @property
    def in_flight(self) -> int:
        return self._in

    def places(self, server: str) -> int:
        """How many requests ``server`` may have behind the gateway and running at once."""
        slots = self.per_server if self._slots_of is None else self._slots_of(server)
        return min(self.per_server, slots)

    def client_share(self, server: str) -> int:
        """How many of ``server``'s places one client may hold."""
        return max(1, math.ceil(self.client_server_share * self.places(server)))

    def held_by(self, client: Hashable, server: str | None = None) -> int:
        """How many requests ``client`` has behind the gateway (with ``server``, when
        given)."""
        if server is None:
            return self._calls.get(client, 0)
        return len(self._held.get(client, {}).get(server, ()))

    def _busy(self, client: Hashable, refusal: dict[str, Any]) -> dict[str, Any]:
        """``refusal``, for a busy server or gateway: the token ``enter`` took of
        ``client``'s goes back (the request was not admitted)."""
        if self.rates is not None and client is not None:
            self.rates.give_back(client, self._clock())
        return refusal

    def _over_budget(self, server: str | None, client: Hashable,
                     held: dict[str | None, dict[Hashable, float]]) -> dict[str, Any] | None:
        """The refusal of a request to ``server`` of a client that ``held`` these already
        (by server), when it is over one of its budgets: back once the earliest deadline
        of the requests that hold that budget has passed."""
        holding: list[tuple[str | None, dict[Hashable, float]]]
        admitted = held.get(server)
        if server is not None and admitted is not None and \
                len(admitted) >= (share := self.client_share(server)):
            budget, limit, holding = "client_server_share", share, [(server, admitted)]
            what = (f"this client has {limit} requests in flight with server {server!r}, "
                    f"its share (client_server_share {self.client_server_share:g} of the "
                    f"server's {self.places(server)} places)")
        elif self._calls[client] >= self.client_calls:
            budget, limit, holding = "client_calls", self.client_calls, list(held.items())
            what = f"this client has {limit} requests in flight, its limit (client_calls)"
            server = None
        else:
            return None
        # Per server every request has the same timeout: its oldest ends first.
        earliest = min(next(iter(times.values())) + self._timeout_of(name)
                       for name, times in holding)
        wait = max(RETRY_AFTER_S, math.ceil(earliest - self._clock()))
        return overloaded(CLIENT, limit, server, wait, budget, what)


def default_burst(rate: float) -> int:
    """The bucket's size when ``client_burst`` is not given: two seconds' worth of
    ``rate``, at least one request."""
    return max(1, math.ceil(2 * rate))


class ClientRates:
    """Each client's token bucket (rule 2), kept as the time its bucket will be full
    again: that time less ``client_burst - 1`` intervals (``1 / client_rate`` s each) is
    when it has a token. A request admitted moves it one interval on (from now, when it
    had passed: a bucket holds no more than full). A bucket is full again at most
    ``client_burst`` intervals after it was last taken from; they are kept in that order,
    and those first in line that are full are dropped as another is taken from: what is
    behind the first one not full was taken from within those intervals."""

    def __init__(self, rate: float, burst: int | None = None) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError("client_rate is a finite number of requests a second, above 0")
        if burst is None:
            burst = default_burst(rate)
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError("client_burst is a whole number of requests, at least 1")
        self.rate = rate
        self.burst = burst
        self._interval = 1.0 / rate
        #: How far ahead of now a bucket may be full again and still have a token: the
        #: bucket less one; and what of a token is let go, a thousandth of an interval,
        #: so that a sum's rounding never refuses a token the bucket holds.
        self._ahead = (burst - 1) * self._interval
        self._slack = 1e-3 * self._interval
        self._full_at: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        """How many clients have a bucket kept (one that is not full, or not yet
        dropped)."""
        return len(self._full_at)

    def take(self, client: Hashable, now: float) -> float:
        """Take a token of ``client``'s: 0.0 when it had one, else the seconds until it
        will (nothing taken)."""
        full_at = self._full_at
        at = full_at.get(client)
        if at is None or at < now:
            at = now
        elif (wait := at - now - self._ahead) > self._slack:
            return wait
        full_at[client] = at + self._interval
        full_at.move_to_end(client)
        # The buckets first in line that are full again go (this one is not: it has
        # just been taken from).
        while True:
            first, first_at = next(iter(full_at.items()))
            if first_at > now:
                return 0.0
            del full_at[first]

    def give_back(self, client: Hashable, now: float) -> None:
        """The token ``take`` took of ``client``'s just now, for a request refused
        after all."""
        at = self._full_at[client] - self._interval
        if at <= now:
            del self._full_at[client]
        else:
            self._full_at[client] = at

    def refusal(self, wait: float) -> dict[str, Any]:
        """The refusal of a request whose client has no token for ``wait`` seconds."""
        seconds = max(RETRY_AFTER_S, math.ceil(wait - self._slack))
        what = (f"this client starts requests faster than its rate (client_rate "
                f"{self.rate:g} a second, client_burst {self.burst} at once)")
        return overloaded(CLIENT, self.rate, None, seconds, "client_rate", what)


def overloaded(scope: str, limit: float, server: str | None, wait: int = RETRY_AFTER_S,
               budget: str | None = None, what: str | None = None) -> dict[str, Any]:
    if what is None:
        where = f"server {server!r} has" if server is not None else "the gateway has"
        what = f"{where} {limit} requests in flight, its limit"
    data: dict[str, Any] = {"kind": OVERLOADED, "scope": scope, "limit": limit,
                            "retryAfterS": wait}
    if budget is not None:
        data["budget"] = budget
    if server is not None:
        data["server"] = server
    return p.error(p.INTERNAL_ERROR, f"{what}; retry after {wait} s", data)


def retry_after(err: dict[str, Any]) -> int | None:
    """The ``Retry-After`` an error answer asks for (an overload), else None."""
    data = err.get("data")
    if isinstance(data, dict) and data.get("kind") == OVERLOADED:
        return int(data.get("retryAfterS", RETRY_AFTER_S))
    return None
