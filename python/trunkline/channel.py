"""The wire between the parent and a worker: every message, both directions, in one place.

Rules (see ``docs/explanation/architecture.md``, "The channel"):

1. The worker's specification (``WorkerSpec``) goes once, as JSON, to the worker's stdin.
   Everything after it travels on one duplex AF_UNIX socket as frames:
   ``u32 LE length | u8 type | body``, the length counting the type byte and the body.
2. The two hot frames have fixed binary layouts that only the Rust codec reads and
   writes (their type numbers are the codec's, imported here, never restated):
   ``SUBMIT`` (parent -> worker) ``u64 call_id | u32 timeout_ms | u32 credential | u16
   method_len | method | params JSON`` (``credential``: the slot of the identity whose
   credentials the request goes with, 0 the host's own) and ``RESULT`` (worker -> parent)
   ``u64 call_id | i64 request_id | u8 kind | u8 result_type | payload``, ``request_id``
   being the JSON-RPC id the worker chose for the request. Neither side decodes the
   payload on the way through.
3. Every other frame is rare and carries one small JSON message, typed here
   (``msgspec``): each has ``to_bytes()`` giving the whole frame and ``from_bytes(body)``.
4. Frames are applied in the order they were sent, in both directions.
5. Both ends come from one install: ``CHANNEL_VERSION`` changes whenever a frame layout
   or a field changes meaning, and a worker refuses a specification of another version.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections.abc import Callable
from typing import Any, ClassVar

import msgspec

from ._codec import FRAME_RESULT, FRAME_SUBMIT
from .errors import (
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
from .protocol.era import NegotiationConfig, Remedy
from .settings import HostSettings, ServerConfig

CHANNEL_VERSION = 13

_HEADER = struct.Struct("<IB")
_CALL_ID = struct.Struct("<Q")
_LENGTH = struct.Struct("<I")

# --- frame types -----------------------------------------------------------------------

#: parent -> worker, binary (codec): one call.
SUBMIT = FRAME_SUBMIT
#: parent -> worker: forget one call (its caller gave up); ``u64 call_id``.
CANCEL = 2
#: parent -> worker: stop the server and exit; no body.
STOP = 4
#: parent -> worker: the host's answer to a server's own request (``ServerAnswer``).
SERVER_ANSWER = 5
#: parent -> worker: resource URIs the host now wants updates of, and no longer does
#: (``ResourceWatch``: a change, never the whole set but to a new worker).
WATCH_RESOURCES = 6
#: parent -> worker: the host's answer to ``CREDENTIALS_ASKED`` (``CredentialAnswer``).
CREDENTIALS = 7
#: parent -> worker: follow one of the server's tasks to its end (``TaskWatch``).
WATCH_TASK = 8
#: parent -> worker: stop following a task, and cancel it upstream (``TaskUnwatch``).
UNWATCH_TASK = 9
#: parent -> worker: drop the credentials held for these slots at once, and never ask for
#: them again under those numbers (``CredentialsForgotten``).
FORGET_CREDENTIALS = 10
#: worker -> parent, binary (codec): one call's answer.
RESULT = FRAME_RESULT
#: worker -> parent: one call failed without an answer (``Failure``).
FAILURE = 17
#: worker -> parent: the server's state changed (``StateReport``).
STATE = 18
#: worker -> parent: the server said one of its lists changed (``ListChanged``).
LIST_CHANGED = 19
#: worker -> parent: the params of a ``notifications/message`` (``Notice``).
LOG = 20
#: worker -> parent: the params of a ``notifications/progress`` (``Notice``).
PROGRESS = 21
#: worker -> parent: a legacy server's own request for the host (``ServerRequest``).
SERVER_REQUEST = 22
#: worker -> parent: the worker's counters, when they change (``Stats``).
STATS = 23
#: worker -> parent: the params of a ``notifications/resources/updated`` (``Notice``) for
#: a watched resource.
RESOURCE_UPDATED = 24
#: worker -> parent: an HTTP server wants credentials (``CredentialQuestion``). Its own
#: frame, never a ``ServerRequest``: nothing a server sends can become one.
CREDENTIALS_ASKED = 25
#: worker -> parent: a followed task moved, asks for input, or ended (``TaskReport``).
TASK_REPORT = 26


def frame(kind: int, body: bytes = b"") -> bytes:
    return _HEADER.pack(len(body) + 1, kind) + body


class ChannelProtocol(asyncio.Protocol):
    """Either end of the channel: bytes to ``on_data``, its end to ``on_closed`` (once
    per event: EOF and the connection's loss may both be reported); ``writing_paused``
    while the other end is behind in reading, and ``on_writable`` when it caught up."""

    def __init__(self, on_data: Callable[[bytes], None],
                 on_closed: Callable[[str], None],
                 on_writable: Callable[[], None] | None = None) -> None:
        self._on_data = on_data
        self._on_closed = on_closed
        self._on_writable = on_writable
        self.writing_paused = False

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._on_writable is not None:
            self._on_writable()

    def data_received(self, data: bytes) -> None:
        self._on_data(data)

    def eof_received(self) -> bool:
        self._on_closed("the other end closed the channel")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_closed("the channel was lost")


class _Json(msgspec.Struct, frozen=True):
    """A JSON message of the channel; subclasses name their frame type in ``FRAME``."""

    FRAME: ClassVar[int]

    def to_bytes(self) -> bytes:
        return frame(self.FRAME, _ENCODER.encode(self))

    @classmethod
    def from_bytes(cls, body: bytes | memoryview) -> Any:
        return msgspec.json.decode(body, type=cls)


_ENCODER = msgspec.json.Encoder()


# --- the worker's specification ------------------------------------------------------


class _Version(msgspec.Struct):
    channel_version: int = 0


class WorkerSpec(msgspec.Struct, frozen=True):
    """Everything a worker needs, written once to its stdin: its server, the host's
    settings, and what this worker generation inherits from the ones before it."""

    server: ServerConfig
    host: HostSettings
    #: The first JSON-RPC id this worker may use, and one past the last: every worker
    #: generation of one server gets its own block, so no id repeats across restarts.
    first_request_id: int = 1
    request_id_limit: int = 1 << 53
    #: An earlier connection proved the server modern: it never gets ``initialize``.
    proven_modern: bool = False
    #: The connections right before this one on which the server stayed silent
    #: (``RestartPlanner.patience``): this one's probes wait longer.
    patience: int = 0
    channel_version: int = CHANNEL_VERSION

    def negotiation(self) -> NegotiationConfig:
        return self.host.negotiation_for(self.server, proven_modern=self.proven_modern,
                                         patience=self.patience)

    def to_bytes(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> WorkerSpec:
        """Raises ``ValueError`` for another channel version or an invalid spec."""
        version = msgspec.json.decode(data, type=_Version).channel_version
        if version != CHANNEL_VERSION:
            raise ValueError(f"channel version {version} != {CHANNEL_VERSION}: the parent "
                             "and this worker come from different installs")
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as exc:
            raise ValueError(f"invalid worker specification: {exc}") from None


# --- state -------------------------------------------------------------------------------


class ServerState(enum.Enum):
    """What the host sees of one server."""

    STARTING = "starting"
    NEGOTIATING = "negotiating"
    READY = "ready"
    RESTARTING = "restarting"
    UNAVAILABLE = "unavailable"
    #: Removed or replaced (a reload): its calls in flight finish, no new one is sent.
    DRAINING = "draining"
    STOPPED = "stopped"


class StateReport(_Json, frozen=True, kw_only=True):
    """A worker's view of its server, sent on every change."""

    FRAME = STATE
    state: ServerState
    era: str | None = None
    version: str | None = None
    capabilities: dict[str, Any] | None = None
    server_info: dict[str, Any] | None = None
    instructions: str | None = None
    evidence: tuple[str, ...] = ()
    reason: str | None = None
    stderr_tail: str | None = None
    server_pid: int | None = None
    exit_code: int | None = None
    #: UNAVAILABLE without evidence against the server (it stayed silent): probe it
    #: again later, in a fresh process, instead of giving up on it.
    retry_later: bool = False
    #: The server proved the modern era on this connection: every later connection
    #: negotiates without ``initialize``.
    proven_modern: bool = False
    #: UNAVAILABLE, and what the operator can do about it (``EraRefused.remedy``), with
    #: the answer that proved no era, in short.
    remedy: Remedy | None = None
    answered: str | None = None


class Stats(_Json, frozen=True, kw_only=True):
    FRAME = STATS
    #: Replies that came after their caller gave up (timeout, cancel), dropped.
    late_replies: int = 0
    #: Lines that broke the protocol after the era was decided, dropped.
    protocol_violations: int = 0


# --- notifications and server requests ----------------------------------------------


class ListChanged(_Json, frozen=True):
    FRAME = LIST_CHANGED
    #: ``"tools"``, ``"prompts"`` or ``"resources"``.
    which: str


class ResourceWatch(_Json, frozen=True):
    """A change of the URIs to hear updates of: ``removed`` no longer, ``added`` from now
    on (applied in that order; a URI is in one of them at most). A new worker is sent its
    server's whole set once, as ``added``; after that each change is only what changed,
    so what crosses grows with the change, never with the set."""

    FRAME = WATCH_RESOURCES
    added: list[str] = []
    removed: list[str] = []


class Notice(msgspec.Struct, frozen=True):
    """A server notification the parent routes (log messages, progress), its params
    forwarded as sent. The frame type says which. ``stream`` is the progress token of the
    request on whose response stream a log message came (Streamable HTTP), when it had
    one: the parent gives the message to that call."""

    params: dict[str, Any]
    stream: str | None = None

    def to_bytes(self, kind: int) -> bytes:
        return frame(kind, _ENCODER.encode(self))

    @classmethod
    def from_bytes(cls, body: bytes) -> Notice:
        return msgspec.json.decode(body, type=cls)


class ServerRequest(_Json, frozen=True):
    """A legacy server's own request (elicitation, sampling, roots), for the host;
    ``stream``: the token of the call on whose HTTP response stream it came."""

    FRAME = SERVER_REQUEST
    key: int
    method: str
    params: dict[str, Any] = {}
    stream: str | None = None


class CredentialQuestion(_Json, frozen=True):
    """A worker asks the host for its server's ``Authorization`` header of credential
    slot ``slot`` (0: the host's own OAuth client; another: the identity the parent gave
    that number, ``SUBMIT``'s ``credential``): when the held one is due for renewal
    (``status`` None), or because the server answered ``status`` 401/403 with
    ``challenge`` (its ``WWW-Authenticate``) to a request that carried ``rejected`` (None:
    no header). ``key`` is unique within the worker, across slots."""

    FRAME = CREDENTIALS_ASKED
    key: int
    status: int | None = None
    challenge: str | None = None
    rejected: str | None = None
    slot: int = 0

    def __repr__(self) -> str:  # the refused header is a secret: never printed
        return (f"CredentialQuestion(key={self.key}, slot={self.slot}, status={self.status}, "
                f"challenge={self.challenge!r}, rejected={_redacted(self.rejected)})")


class CredentialAnswer(_Json, frozen=True):
    """The answer to ``CredentialQuestion`` ``key``: the header to send (None: none is
    held) and the wall-clock time (``time.time()``) after which to ask again, or why no
    credentials could be had (``error``, an operator's message without secrets)."""

    FRAME = CREDENTIALS
    key: int
    authorization: str | None = None
    renew_at: float | None = None
    error: str | None = None
    #: With ``error``: ``AuthorizationFailed.reason`` and ``.issuer``.
    reason: str | None = None
    issuer: str | None = None
    #: With a DPoP-bound ``authorization``: the private JWK (JSON text) of the key its
    #: proofs are signed with, by the worker for each request (``auth.dpop`` rule 4).
    dpop_key: str | None = None
    #: The question's slot, as asked.
    slot: int = 0

    def __repr__(self) -> str:
        return (f"CredentialAnswer(key={self.key}, slot={self.slot}, authorization="
                f"{_redacted(self.authorization)}, renew_at={self.renew_at}, "
                f"dpop_key={_redacted(self.dpop_key)}, error={self.error!r})")


class CredentialsForgotten(_Json, frozen=True):
    """Drop what is held for these credential slots now (an identity's credentials were
    revoked, or its slot number is about to be given to another identity): a request
    already waiting for one of them fails, and a later request of that number asks
    afresh."""

    FRAME = FORGET_CREDENTIALS
    slots: list[int]


def _redacted(secret: str | None) -> str:
    return "None" if secret is None else "'<redacted>'"


class ServerAnswer(_Json, frozen=True):
    """The host's answer to ``ServerRequest`` ``key``: a result, or an error message."""

    FRAME = SERVER_ANSWER
    key: int
    result: dict[str, Any] | None = None
    error: str | None = None


# --- tasks -------------------------------------------------------------------------------


class TaskWatch(_Json, frozen=True, kw_only=True):
    """Follow task ``task_id`` of the server (``protocol.tasks``), reporting under
    ``key``: from its creation, or again after a restart (the last look the parent had).
    ``deadline_s``: seconds left until the caller stops waiting (None: no deadline)."""

    FRAME = WATCH_TASK
    key: int
    task_id: str
    legacy: bool = False
    status: str = "working"
    status_message: str | None = None
    poll_interval_ms: float | None = None
    ttl_ms: float | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    deadline_s: float | None = None
    #: After a restart: the server's task is looked at once at once, to learn whether it
    #: still knows it.
    resumed: bool = False
    #: The credential slot of the call that started the task: its looks go with it.
    credential: int = 0


class TaskUnwatch(_Json, frozen=True):
    """Stop following the task under ``key``; ``cancel``: send ``tasks/cancel``."""

    FRAME = UNWATCH_TASK
    key: int
    cancel: bool = False


class TaskReport(_Json, frozen=True, kw_only=True):
    """What the worker learned of the task under ``key``: its latest look, the input it
    asks for that was not asked before (``asks``, the ``inputRequests`` object as JSON
    text), and at its end the JSON-RPC error it failed with (``error``), or why it was
    given up (``lost``; ``overdue``: the caller's deadline). A completed task's result
    follows the message in the frame as the bytes the server sent (``with_result``):
    ``u32 length | message JSON | result``."""

    FRAME = TASK_REPORT
    key: int
    status: str
    status_message: str | None = None
    poll_interval_ms: float | None = None
    ttl_ms: float | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    asks: str | None = None
    error: dict[str, Any] | None = None
    lost: str | None = None
    overdue: bool = False

    def to_bytes(self, result: bytes = b"") -> bytes:
        head = _ENCODER.encode(self)
        return frame(TASK_REPORT, _LENGTH.pack(len(head)) + head + result)

    @classmethod
    def from_bytes(cls, body: bytes | memoryview) -> Any:
        """``(report, result bytes)``."""
        (length,) = _LENGTH.unpack_from(body)
        end = _LENGTH.size + length
        report = msgspec.json.decode(body[_LENGTH.size:end], type=cls)
        return report, bytes(body[end:])


# --- calls -------------------------------------------------------------------------------


def cancel_frame(call_id: int) -> bytes:
    return frame(CANCEL, _CALL_ID.pack(call_id))


def cancel_from_bytes(body: bytes) -> int:
    return _CALL_ID.unpack_from(body)[0]


def stop_frame() -> bytes:
    return frame(STOP)


class FailureKind(enum.IntEnum):
    """Why the worker failed one call without a server answer."""

    UNAVAILABLE = 1
    TRANSPORT_LOST = 2
    TIMEOUT = 3
    MALFORMED = 4
    STREAM_BROKEN = 5
    HTTP_STATUS = 6
    AUTHENTICATION = 7
    OVERSIZED = 8
    REDIRECT = 9
    AUTHORIZATION = 10


#: The one table between failure kinds and errors: each kind, its error class, and the
#: attributes of that class that travel beside the message. Most specific class first:
#: an error is sent as the first row it is an instance of.
FAILURES: tuple[tuple[FailureKind, type[TrunklineError], tuple[str, ...]], ...] = (
    (FailureKind.OVERSIZED, OversizedMessage, ("size", "limit")),
    (FailureKind.MALFORMED, MalformedMessage, ()),
    (FailureKind.STREAM_BROKEN, StreamBroken, ("exit_code",)),
    (FailureKind.TRANSPORT_LOST, TransportLost, ("exit_code",)),
    (FailureKind.REDIRECT, RedirectRefused, ("status", "location", "body")),
    (FailureKind.HTTP_STATUS, HttpStatusError, ("status", "body")),
    (FailureKind.AUTHORIZATION, AuthorizationFailed,
     ("status", "challenge", "reason", "issuer")),
    (FailureKind.AUTHENTICATION, AuthenticationFailed, ("status", "challenge")),
    (FailureKind.TIMEOUT, RequestTimeout, ("timeout_s",)),
    (FailureKind.UNAVAILABLE, ServerUnavailable, ("state",)),
)
_BY_KIND = {kind: (cls, fields) for kind, cls, fields in FAILURES}


class _FailureBody(msgspec.Struct, frozen=True):
    kind: FailureKind
    message: str
    method: str | None = None
    sent: bool | None = None
    details: dict[str, Any] = {}
    request_id: int | str | None = None


class Failure:
    """One call failed in the worker: ``u64 call_id`` then the error as JSON. The parent
    rebuilds the same error class with the same details (the request's JSON-RPC id
    included, when it was sent), naming its server."""

    @staticmethod
    def to_bytes(call_id: int, error: TrunklineError) -> bytes:
        # The first class the error is; anything else the worker could not tell apart is
        # the transport's loss.
        kind, fields = next(((kind, fields) for kind, cls, fields in FAILURES
                             if isinstance(error, cls)), (FailureKind.TRANSPORT_LOST, ()))
        body = _FailureBody(kind, error.message, error.method, error.sent,
                            {name: getattr(error, name) for name in fields}, error.request_id)
        return frame(FAILURE, _CALL_ID.pack(call_id) + _ENCODER.encode(body))

    @staticmethod
    def from_bytes(body: bytes, server: str | None = None) -> tuple[int, TrunklineError]:
        (call_id,) = _CALL_ID.unpack_from(body)
        decoded = msgspec.json.decode(body[_CALL_ID.size:], type=_FailureBody)
        cls, fields = _BY_KIND[decoded.kind]
        details = {name: decoded.details.get(name) for name in fields}
        error = cls(decoded.message, server=server, method=decoded.method,
                    sent=decoded.sent, **details)
        error.request_id = decoded.request_id
        return call_id, error
