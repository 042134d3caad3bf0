"""Retry policy for requests: whether a failed request may be re-issued, and when.

Pure logic, no I/O, no wall clock: the host owns sending (``trunkline.parent.retry``
drives these rules); this module only decides. Every retry is a *new* JSON-RPC request
with a *new* id (MCP 2026-07-28, basic/patterns/cancellation: an id is never reused);
building it is the caller's job. The rules:

- **Reads are retried by default** after transport loss, a timeout, ``-32603``, or an
  answer too large to read (``OversizedMessage``):
  ``READ_METHODS`` (``tools/list``, ``prompts/list``, ``resources/list``,
  ``resources/templates/list``, ``resources/read``, ``prompts/get``, ``server/discover``,
  ``completion/complete``). ``RetryPolicy(retry_reads=False)`` turns this off.
- **Everything else** (``tools/call`` above all, and any method not listed) is retried
  after it *may have reached the server* only when the caller said it is safe: per call
  (``idempotent=True``) or per tool in the server config (``idempotent_tools``). A tool's
  ``idempotentHint`` annotation is untrusted and is **not an input** here; ``plan_call``
  accepts the catalog's ``ToolEntry`` but reads only its ``local_name``.
- **A request that never left the parent** (``Outcome.NOT_SENT``: the server was
  restarting, no in-flight slot) is retried for every method: it has not gone out yet,
  and each retry still goes out at most once.
- **Final errors are never retried**: business errors (``ServerError`` other than
  ``-32603``), protocol violations (``MalformedMessage``, ``SchemaViolation``),
  ``EraRefused``, ``SpawnFailed``, configuration errors, anything unknown.
- **Always bounded**: by ``RetryPolicy.max_attempts`` (sends, counting the first) and, when
  the call has a deadline, no retry is scheduled that would start at or after it.

Backoff is ``protocol.backoff.Backoff`` (restarts use the same): before retry ``k`` (0 for
the first retry) the wait is uniform in ``[0, min(cap_s, base_s * factor**k)]``.

Classification table (``classify(exc, sent=None)``; LOST and TIMEOUT abbreviate
``MAYBE_DELIVERED_TRANSPORT_LOST`` and ``MAYBE_DELIVERED_TIMEOUT``)::

    exception                                  default       sent=False   sent=True
    ServerUnavailable (restarting, not ready)  NOT_SENT      NOT_SENT     LOST
    ServerUnavailable, stopped / unavailable   FINAL         FINAL        FINAL
    TransportLost (incl. StreamBroken)         LOST          NOT_SENT     LOST
    HttpStatusError 429/502/503/504            LOST          NOT_SENT     LOST
    RequestTimeout                             TIMEOUT       NOT_SENT     TIMEOUT
    ServerError -32603 (answered)              SERVER_FAULT  SERVER_FAULT SERVER_FAULT
    OversizedMessage (answered, unreadable)    SERVER_FAULT  SERVER_FAULT SERVER_FAULT
    ServerError, any other code                FINAL         FINAL        FINAL
    SpawnFailed, MalformedMessage, SchemaViolation, EraRefused, AuthenticationFailed,
    other HttpStatusError, ConfigurationError,
    any other exception                        FINAL         FINAL        FINAL

``RequestTimeout`` is raised both *after* the write (no reply in time) and *before* it
(server not ready in time, no free in-flight slot); the type cannot tell them apart, so
the default is the safe one (maybe delivered), and a host that knows the request was never
written says so in the error's ``sent`` attribute, which the driver passes on.

Host integration (the intended use)::

    plan = plan_call(policy, "tools/call", tool=entry,          # ToolEntry or local name
                     idempotent=caller_flag,                    # None: not said
                     idempotent_tools=server_cfg_idempotent,    # names, from config
                     deadline=loop.time() + call_timeout_s,     # optional, clock of now()
                     idempotency_key=True)                      # True: generate one

    async def send(attempt: Attempt) -> Reply:
        params = attempt.stamp(call_params)                     # _meta key, same each time
        left = attempt.remaining_s                              # None: no deadline
        timeout = per_try if left is None else min(per_try, left)
        return await handle.slots.request("tools/call", orjson.dumps(params),
                                          timeout=timeout)

    reply = await run_with_retries(send, plan)          # trunkline.parent.retry

For hand-rolled loops the pieces are public: ``classify`` then ``RetryPlan.decide``, which
returns ``Retry(after_s, attempt)`` or ``GiveUp(reason, outcome)``.
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import (
    ConfigurationError,
    HttpStatusError,
    OversizedMessage,
    RequestTimeout,
    ServerError,
    ServerUnavailable,
    SpawnFailed,
    TransportLost,
)
from .backoff import Backoff

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "INTERNAL_ERROR",
    "READ_METHODS",
    "Attempt",
    "GiveUp",
    "GiveUpReason",
    "Outcome",
    "Retry",
    "RetryPlan",
    "RetryPolicy",
    "classify",
    "new_idempotency_key",
    "plan_call",
    "resolve_idempotency_key",
    "with_idempotency_key",
    "without_idempotency_key",
]

#: Requests that only read, safe to repeat (docs/explanation/architecture.md, "Retries").
READ_METHODS: frozenset[str] = frozenset({
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/get",
    "server/discover",
    "completion/complete",
})

#: JSON-RPC "Internal error": a server fault, retried only for idempotent operations.
INTERNAL_ERROR = -32603

#: The ``params._meta`` key that carries an idempotency key to the server, identical on
#: every retry of one logical call. Reverse-DNS prefix (MCP 2026-07-28, basic/index,
#: _meta) (not reserved: its second label is neither ``modelcontextprotocol`` nor ``mcp``).
IDEMPOTENCY_META_KEY = "dev.trunkline/idempotencyKey"

# ServerUnavailable states in which waiting a backoff cannot help within one call.
_HOPELESS_STATES = frozenset({"stopped", "unavailable", "draining"})

#: HTTP statuses that say "not now" rather than "never": overload, a proxy between
#: restarts. Whether the request ran is unknown, so only safe methods are repeated.
TRANSIENT_HTTP_STATUSES = frozenset({429, 502, 503, 504})


class Outcome(enum.Enum):
    """What one failed attempt means for retrying."""

    #: The request never left the parent: safe to send, for any method.
    NOT_SENT = "not_sent"
    #: Written, then the transport died: the server may have acted on it.
    MAYBE_DELIVERED_TRANSPORT_LOST = "maybe_delivered_transport_lost"
    #: Written, no reply in time: the server may have acted on it.
    MAYBE_DELIVERED_TIMEOUT = "maybe_delivered_timeout"
    #: Delivered, and the server answered ``-32603`` (or too much to read): retry only
    #: if idempotent.
    SERVER_FAULT = "server_fault"
    #: Never retried.
    FINAL = "final"


def classify(exc: BaseException, *, sent: bool | None = None) -> Outcome:
    """Map one attempt's error to an ``Outcome`` (table in the module docstring).

    ``sent`` overrides the guess for connection losses and timeouts when the caller knows:
    ``False`` (never written) makes them ``NOT_SENT``; ``True`` makes a
    ``ServerUnavailable`` maybe-delivered. It never makes a final error retryable."""
    if isinstance(exc, ServerError):
        return Outcome.SERVER_FAULT if exc.code == INTERNAL_ERROR else Outcome.FINAL
    if isinstance(exc, OversizedMessage):
        return Outcome.SERVER_FAULT
    if isinstance(exc, SpawnFailed):
        return Outcome.FINAL
    if isinstance(exc, ServerUnavailable):
        if exc.state in _HOPELESS_STATES:
            return Outcome.FINAL
        return Outcome.MAYBE_DELIVERED_TRANSPORT_LOST if sent else Outcome.NOT_SENT
    if isinstance(exc, TransportLost) or (
        isinstance(exc, HttpStatusError) and exc.status in TRANSIENT_HTTP_STATUSES
    ):
        return Outcome.NOT_SENT if sent is False else Outcome.MAYBE_DELIVERED_TRANSPORT_LOST
    if isinstance(exc, RequestTimeout):
        return Outcome.NOT_SENT if sent is False else Outcome.MAYBE_DELIVERED_TIMEOUT
    return Outcome.FINAL


# --- policy --------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy(Backoff):
    """Capped exponential backoff with full jitter, and an attempt limit.

    ``max_attempts`` counts sends, the first included: 1 means never retry."""

    max_attempts: int = 3
    #: Retry ``READ_METHODS`` after maybe-delivered failures without being told they are
    #: idempotent. (``NOT_SENT`` is retried regardless.)
    retry_reads: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise ConfigurationError(
                "retry policy needs an integer max_attempts >= 1 "
                f"(got {self.max_attempts!r})")


# --- decisions -----------------------------------------------------------------------


class GiveUpReason(enum.Enum):
    FINAL = "final error"
    UNSAFE = "may have reached the server and is not known to be idempotent"
    ATTEMPTS = "attempt limit reached"
    DEADLINE = "the next attempt would start after the call's deadline"


@dataclass(frozen=True)
class Retry:
    """Send again after ``after_s`` seconds; ``attempt`` is that send's index (0-based:
    the first retry is attempt 1)."""

    after_s: float
    attempt: int


@dataclass(frozen=True)
class GiveUp:
    reason: GiveUpReason
    outcome: Outcome

    def __str__(self) -> str:
        return f"{self.reason.value} ({self.outcome.value})"


@dataclass(frozen=True)
class RetryPlan:
    """The retry rules for one logical call. Immutable; ``decide`` is pure given ``rng``.

    ``idempotent`` is already resolved (caller's flag or server config, never a tool
    annotation). ``deadline`` is absolute, on the clock the driver's ``now`` reads."""

    policy: RetryPolicy
    method: str
    idempotent: bool = False
    deadline: float | None = None
    idempotency_key: str | None = None

    def may_repeat(self, outcome: Outcome) -> bool:
        """Whether an attempt that ended in ``outcome`` may be sent again (limits aside)."""
        if outcome is Outcome.FINAL:
            return False
        if outcome is Outcome.NOT_SENT:
            return True
        return self.idempotent or (self.policy.retry_reads and self.method in READ_METHODS)

    def decide(self, attempts_made: int, outcome: Outcome, *, rng: random.Random,
               remaining_s: float | None = None) -> Retry | GiveUp:
        """After ``attempts_made`` sends (>= 1), the last ending in ``outcome``: retry or
        give up. ``remaining_s`` is ``deadline - now`` (``None``: no deadline)."""
        if not self.may_repeat(outcome):
            reason = GiveUpReason.FINAL if outcome is Outcome.FINAL else GiveUpReason.UNSAFE
            return GiveUp(reason, outcome)
        if attempts_made >= self.policy.max_attempts:
            return GiveUp(GiveUpReason.ATTEMPTS, outcome)
        after = self.policy.delay(attempts_made - 1, rng)
        if remaining_s is not None and after >= remaining_s:
            return GiveUp(GiveUpReason.DEADLINE, outcome)
        return Retry(after_s=after, attempt=attempts_made)


class _NamedTool(Protocol):
    @property
    def local_name(self) -> str: ...


def plan_call(
    policy: RetryPolicy,
    method: str,
    *,
    tool: str | _NamedTool | None = None,
    idempotent: bool | None = None,
    idempotent_tools: Collection[str] = frozenset(),
    deadline: float | None = None,
    idempotency_key: str | bool | None = None,
) -> RetryPlan:
    """The host-facing entry: resolve idempotency and the key, and return the plan.

    - ``idempotent``: the caller's per-call word; ``True``/``False`` wins over the config.
    - ``tool``: for ``tools/call``, the tool's local name (as the server knows it) or the
      catalog ``ToolEntry``, of which only ``local_name`` is read; its annotations
      (``idempotentHint``, ``readOnlyHint``) are untrusted and never consulted.
    - ``idempotent_tools``: local tool names the server config marks idempotent.
    - ``idempotency_key``: a key string, ``True`` to generate one, ``None``/``False`` none.
    """
    if idempotent is None:
        name = tool if isinstance(tool, str) or tool is None else tool.local_name
        idempotent = (method == "tools/call" and name is not None
                      and name in idempotent_tools)
    return RetryPlan(policy, method, idempotent=bool(idempotent), deadline=deadline,
                     idempotency_key=resolve_idempotency_key(idempotency_key))


# --- idempotency keys ----------------------------------------------------------------


def resolve_idempotency_key(idempotency_key: str | bool | None) -> str | None:
    """The key a call carries: ``True`` a fresh one, ``None``/``False`` none, a string
    itself."""
    if idempotency_key is None or idempotency_key is False:
        return None
    return new_idempotency_key() if idempotency_key is True else idempotency_key


def new_idempotency_key() -> str:
    """A fresh key: 32 hex digits of a random UUID."""
    return uuid.uuid4().hex


def with_idempotency_key(params: Mapping[str, Any] | None,
                         key: str | None) -> dict[str, Any]:
    """A copy of ``params`` with ``_meta[IDEMPOTENCY_META_KEY] = key`` (``params`` and its
    ``_meta`` are not mutated). With ``key=None`` a plain shallow copy."""
    out = dict(params or {})
    if key is None:
        return out
    meta = out.get("_meta")
    kept = meta if isinstance(meta, Mapping) else {}
    out["_meta"] = {**kept, IDEMPOTENCY_META_KEY: key}
    return out


def without_idempotency_key(params: dict[str, Any], key: str | None) -> dict[str, Any]:
    """``params`` (mutated) with the key ``with_idempotency_key`` put in ``_meta`` taken
    out again, and ``_meta`` with it when nothing else is left in it."""
    meta = params.get("_meta")
    if key is not None and isinstance(meta, dict) and meta.get(IDEMPOTENCY_META_KEY) == key:
        del meta[IDEMPOTENCY_META_KEY]
        if not meta:
            del params["_meta"]
    return params




@dataclass(frozen=True)
class Attempt:
    """What a driver's ``send`` gets for each attempt: build a new request (new id) from
    it."""

    #: 0 for the first send, 1 for the first retry, ...
    index: int
    #: The call's idempotency key, the same object on every attempt (or ``None``).
    idempotency_key: str | None
    #: Seconds left before the call's deadline when this attempt starts (``None``: no
    #: deadline). Cap the attempt's own timeout to it.
    remaining_s: float | None

    def stamp(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return with_idempotency_key(params, self.idempotency_key)
