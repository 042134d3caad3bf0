"""The internal message set between the parent and a worker: small, versioned, one module.

Frames on the duplex channel (an AF_UNIX socketpair) are ``u32 LE length | u8 type | body``
where length counts the type byte and the body. The hot-path frames have fixed binary
layouts handled by the Rust codec:

- ``SUBMIT`` (parent -> worker): ``u64 call_id | u32 timeout_ms | u16 method_len | method |
  params JSON`` (empty params = none). Serialized once in the parent; the worker stamps
  the JSON-RPC id and ``_meta`` around the params without decoding them.
- ``RESULT`` (worker -> parent): ``u64 call_id | u8 kind | u8 result_type | payload``; for
  a result the payload is the raw ``result`` value, for an error the raw response line. The
  worker never decodes it; the parent decodes it once, at the caller.

Everything else is rare and carries a small JSON object (orjson): the worker's
configuration, cancels, failures, state changes, tool list updates, the server's log
messages and progress notifications (forwarded with their params, undecided: the parent
routes progress to the one call that asked for it and logs to the host).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson

#: Bumped whenever a frame layout or a JSON field changes meaning. The worker refuses a
#: configuration from a parent speaking another version (both come from one install, so
#: a mismatch means a stale process, and failing loudly beats misreading frames).
CHANNEL_VERSION = 2

_HEADER = struct.Struct("<IB")
_CANCEL = struct.Struct("<Q")
_FAILURE_HEAD = struct.Struct("<Q")

# Frame types. The numeric values of SUBMIT and RESULT are shared with the Rust codec.
SUBMIT = 1
CANCEL = 2
CONFIGURE = 3
STOP = 4
#: parent -> worker: the host's answer to a server-initiated request (legacy era),
#: ``{"key", "result"}`` or ``{"key", "error": {"code", "message"}}``.
SERVER_ANSWER = 5
RESULT = 16
FAILURE = 17
STATE = 18
TOOLS = 19
LOG = 20
PROGRESS = 21
#: worker -> parent: a legacy server's request for the host (elicitation, sampling,
#: roots), ``{"key", "method", "params"}``; answered with SERVER_ANSWER.
SERVER_REQUEST = 22


#: List-change notifications a worker forwards (in a TOOLS frame) as the list that changed.
LIST_CHANGED = {
    "notifications/tools/list_changed": "tools",
    "notifications/prompts/list_changed": "prompts",
    "notifications/resources/list_changed": "resources",
}


class ServerState(enum.Enum):
    """What the host sees of one server (DESIGN.md §1)."""

    STARTING = "starting"
    NEGOTIATING = "negotiating"
    READY = "ready"
    RESTARTING = "restarting"
    UNAVAILABLE = "unavailable"
    STOPPED = "stopped"


class FailureKind(enum.IntEnum):
    """Why the worker failed one call without a server answer; mapped to the error tree."""

    UNAVAILABLE = 1
    TRANSPORT_LOST = 2
    TIMEOUT = 3
    MALFORMED = 4
    #: HTTP: this call's exchange ended without an answer (the others carry on).
    STREAM_BROKEN = 5
    #: HTTP: a status without a JSON-RPC answer; ``status`` travels beside the message.
    HTTP_STATUS = 6
    #: HTTP 401/403; ``status`` and ``challenge`` travel beside the message.
    AUTHENTICATION = 7


def frame(kind: int, body: bytes = b"") -> bytes:
    return _HEADER.pack(len(body) + 1, kind) + body


def json_frame(kind: int, obj: Any) -> bytes:
    return frame(kind, orjson.dumps(obj))


def cancel_frame(call_id: int) -> bytes:
    return frame(CANCEL, _CANCEL.pack(call_id))


def parse_cancel(body: bytes) -> int:
    return _CANCEL.unpack_from(body)[0]


def failure_frame(call_id: int, kind: FailureKind, message: str, **extra: Any) -> bytes:
    payload = orjson.dumps({"kind": int(kind), "message": message, **extra})
    return frame(FAILURE, _FAILURE_HEAD.pack(call_id) + payload)


def parse_failure(body: bytes) -> tuple[int, dict[str, Any]]:
    (call_id,) = _FAILURE_HEAD.unpack_from(body)
    return call_id, orjson.loads(body[_FAILURE_HEAD.size :])


@dataclass(frozen=True)
class StateReport:
    """A worker's view of its server, sent on every change."""

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
    extra: dict[str, Any] = field(default_factory=dict)

    def to_frame(self) -> bytes:
        return json_frame(
            STATE,
            {
                "state": self.state.value,
                "era": self.era,
                "version": self.version,
                "capabilities": self.capabilities,
                "server_info": self.server_info,
                "instructions": self.instructions,
                "evidence": list(self.evidence),
                "reason": self.reason,
                "stderr_tail": self.stderr_tail,
                "server_pid": self.server_pid,
                "exit_code": self.exit_code,
                "extra": self.extra,
            },
        )

    @classmethod
    def from_body(cls, body: bytes) -> StateReport:
        d = orjson.loads(body)
        return cls(
            state=ServerState(d["state"]),
            era=d.get("era"),
            version=d.get("version"),
            capabilities=d.get("capabilities"),
            server_info=d.get("server_info"),
            instructions=d.get("instructions"),
            evidence=tuple(d.get("evidence") or ()),
            reason=d.get("reason"),
            stderr_tail=d.get("stderr_tail"),
            server_pid=d.get("server_pid"),
            exit_code=d.get("exit_code"),
            extra=d.get("extra") or {},
        )
