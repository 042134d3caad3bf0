"""What one client, or the gateway as a whole, may make ``trunkline serve`` hold: the
bounds, in one place. Pure.

A shared backend is only as good as its worst tenant. The rule these bounds make true:
whatever one client can make the gateway hold (memory, call slots, queue entries,
subscriptions, connections) is bounded per client, and the rest keep their service. A
client is a legacy session (HTTP), a modern client's connection (HTTP), or the stdio
face's one client (once identities exist: an identity). Each bound is enforced where the
state it limits is created, and meeting it is a clear error naming it (a JSON-RPC error,
or over HTTP the status that says so, with an honest ``Retry-After`` where waiting helps),
never a silent drop and never a slowdown of anyone else. How often a client may start
calls (``client_rate``) is bounded too, off by default: a rate is the operator's to choose.

Every bound is counted by the gateway process that holds the state: under ``serve
--processes N``, or N replicas behind a load balancer, a client whose requests are spread
over the processes may reach N times a per-client bound (a legacy session is one
process's, so its bounds are its own).

The defaults are set so that one busy agent never meets them. An operator changes any of
them with ``serve --limit NAME=VALUE`` (repeatable; ``NAME`` is a field below).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigurationError

MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    # -- calls ---------------------------------------------------------------------------
    #: Requests one client has behind the gateway at once, across every server.
    client_calls: int = 1024
    #: The share of one server's places (the fewer of ``--max-per-server`` and the calls
    #: the server runs at once) one client may hold: no client holds all of a server.
    client_server_share: float = 0.5
    #: Requests one client may start per second, on average (0: no bound; the bounds on
    #: calls in flight protect the gateway already), and at once after an idle spell
    #: (None: two seconds' worth, ``max(1, ceil(2 * client_rate))``): a token bucket
    #: per client (``gateway/admission.py``, rule 3).
    client_rate: float = 0.0
    client_burst: int | None = None

    # -- tasks ---------------------------------------------------------------------------
    #: Tasks one client holds (MCP tasks: running, or ended and kept for their TTL), and
    #: the gateway process in all; at a bound the oldest ended one goes, and when none has
    #: ended, a call that could make one more is refused (``gateway/tasks.py``).
    client_tasks: int = 1024
    tasks: int = 16384
    #: How long an ended task is kept for its client at most (a server's shorter ``ttlMs``
    #: is kept to).
    task_ttl_s: float = 3600.0

    # -- subscriptions -------------------------------------------------------------------
    #: Resource URIs one modern ``subscriptions/listen`` request may name.
    listen_uris: int = 1024
    #: Resource subscriptions one legacy session may hold.
    session_subscriptions: int = 1024

    # -- streams -------------------------------------------------------------------------
    #: Messages waiting for one stream's reader (a call's, a listen stream, a legacy
    #: session's GET stream); beyond it the reader is behind: progress is coalesced to the
    #: latest, and a reader that stays behind ``stream_behind_s`` has its stream ended.
    stream_backlog: int = 1024
    stream_behind_s: float = 30.0
    #: Bytes of finished legacy call streams kept for resumption, per session and in all;
    #: beyond, the oldest finished ones go (a new call is never refused for them).
    session_kept_bytes: int = 8 * MiB
    kept_bytes: int = 256 * MiB

    # -- sessions ------------------------------------------------------------------------
    #: A legacy session unused this long ends, and so does any after this long.
    session_idle_s: float = 3600.0
    session_lifetime_s: float = 86400.0
    #: Legacy sessions one gateway process holds at once: a new one ends the least
    #: recently active one with no stream open to its client (if every one has, it is
    #: refused, 503).
    sessions: int = 16384

    # -- connections ---------------------------------------------------------------------
    #: Open HTTP connections, in all and from one peer address (an IPv6 /64); beyond, a
    #: new one is answered 503 as it is accepted (``http_server``, rule 6).
    connections: int = 4096
    peer_connections: int = 256
    #: A request's head must arrive within this; its body at least this fast (over each
    #: ``http_server.BODY_WINDOW_S``); else 408.
    head_timeout_s: float = 10.0
    body_min_bytes_per_s: int = 1024
    #: File descriptors kept free for health checks and the servers behind: new
    #: connections are refused before the process runs out.
    spare_descriptors: int = 64

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in _MAY_BE_NONE and value is None:
                continue
            if field.name in _MAY_BE_ZERO and value == 0 and not isinstance(value, bool):
                continue
            # ``not value > 0`` refuses NaN too, which compares false to everything.
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not value > 0:
                also = " or 0" if field.name in _MAY_BE_ZERO else ""
                raise ConfigurationError(f"limit {field.name} must be a positive number"
                                         f"{also}, not {value!r}")
        if self.client_server_share > 1:
            raise ConfigurationError("limit client_server_share is a fraction, at most 1")
        if not math.isfinite(self.client_rate):
            raise ConfigurationError("limit client_rate must be a finite number of calls "
                                     "per second (0 for no bound)")
        if self.client_burst is not None:
            if not isinstance(self.client_burst, int):
                raise ConfigurationError(f"limit client_burst must be a whole number of "
                                         f"calls, not {self.client_burst!r}")
            if not self.client_rate:
                raise ConfigurationError("limit client_burst is the size of client_rate's "
                                         "bucket: give client_rate too")

    @classmethod
    def parse(cls, pairs: list[str] | None) -> Limits:
        """The defaults, with ``NAME=VALUE`` pairs (``serve --limit``) over them."""
        known = {field.name: field for field in fields(cls)}
        given: dict[str, Any] = {}
        for pair in pairs or ():
            name, sep, text = pair.partition("=")
            field = known.get(name.strip().replace("-", "_"))
            if not sep or field is None:
                raise ConfigurationError(
                    f"--limit {pair!r}: expected NAME=VALUE, NAME one of {sorted(known)}")
            kind = int if field.type in ("int", int, "int | None") else float
            try:
                given[field.name] = kind(text.strip())
            except ValueError:
                number = "an integer" if kind is int else "a number"
                raise ConfigurationError(
                    f"--limit {pair!r}: {field.name} takes {number}") from None
        return dataclasses.replace(cls(), **given)


#: Fields that may be 0 (no bound), and fields that may be None (derived from another).
_MAY_BE_ZERO = frozenset({"client_rate"})
_MAY_BE_NONE = frozenset({"client_burst"})


__all__ = ["Limits"]
