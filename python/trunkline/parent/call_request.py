"""One call, as one object: what its caller asked and what the call path learns on the way.

``Host.call_tool`` and ``Host.request`` build a ``CallRequest`` once; it goes whole through
``CallPath`` (retries, re-listing, input rounds) into the server's ``CallSlots`` (sent,
awaited, its slot freed). A new option of a call is one field here, not a parameter of
every function it passes through; how its input rounds go (``CallInput``, the caller's
too) is here beside it, so the call's shape depends on nothing that drives it.

Rules:

1. The caller's fields are set when the request is built and never changed, except
   ``timeout``, which becomes the seconds the call is given (its own, else its server's,
   else the host's; less what it waited for its server's tools to be listed again).
2. What the call path learns (``entry``, ``params``, ``key``, ``watched``, ``deadline``)
   is set once, before the first attempt; every attempt and every input round reads it.
   ``answered_json`` is set once, by the answer.
3. A relayed call to a legacy server runs with its own copy (``msgspec.structs.replace``),
   whose ``call_input`` is the bridge's.
4. It is a msgspec ``Struct`` with ``gc=False``: built in C, and never walked by the
   collector while the call is in flight. So no reference cycle may outlive a call
   through it: it holds the caller's values and the call's own scalars, and only the
   call's own frames (gone when it ends) refer to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ..protocol.mrtr import InputHandler
from ..protocol.versions import META_CLIENT_CAPABILITIES

if TYPE_CHECKING:
    from ..catalog import ToolEntry

#: ``on_progress(progress, total, message)``: a call's progress notifications.
ProgressCallback = Callable[[Any, Any, Any], None]
#: ``on_log(params)``: a call's log messages (``notifications/message`` params).
LogCallback = Callable[[dict[str, Any]], None]


class CallInput(msgspec.Struct, frozen=True):
    """How one call's input rounds go, instead of the host's handlers. (A msgspec
    ``Struct``: a gateway makes one per call, and it is built in C.)"""

    #: Answer the rounds with these (``{"elicitation/create": f, ...}``).
    handlers: Mapping[str, InputHandler] = {}
    #: The client capabilities this call declares to a modern server instead of the
    #: host's (``_meta`` ``clientCapabilities``), and that its rounds are checked against;
    #: None: the host's.
    capabilities: Mapping[str, Any] | None = None
    #: Run no rounds: an ``input_required`` result is the call's result (``InputRequired``).
    relay: bool = False
    #: Sent with the call: the answers to a previous ``input_required`` of the same call
    #: (``inputResponses``) and its ``requestState``, as the caller received them.
    responses: Mapping[str, Any] | None = None
    request_state: str | None = None

    def meta(self, extensions: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What this call adds to a modern request's ``_meta``: its capabilities, which
        replace the host's there, with ``extensions`` (those the host declared to the
        server) beside theirs (``with_extensions``)."""
        if self.capabilities is None:
            return {}
        return {META_CLIENT_CAPABILITIES: with_extensions(self.capabilities, extensions)}

    def continuation(self) -> dict[str, Any]:
        """The params members that carry the answers, if any."""
        out: dict[str, Any] = {}
        if self.responses is not None:
            out["inputResponses"] = dict(self.responses)
        if self.request_state is not None:
            out["requestState"] = self.request_state
        return out


def with_extensions(capabilities: Mapping[str, Any],
                    extensions: Mapping[str, Any] | None) -> dict[str, Any]:
    """A call's own client capabilities as a modern request declares them: the extensions
    the host declared to its server (``WorkerHandle.extensions``: tasks it follows, MCP
    Apps) stay declared beside the call's own, which win."""
    declared = dict(capabilities)
    if extensions:
        own = declared.get("extensions")
        declared["extensions"] = {**extensions, **(own if isinstance(own, dict) else {})}
    return declared


class CallRequest(msgspec.Struct, gc=False):
    """One logical request to one server (a ``tools/call``, or a read such as
    ``resources/read``), from its caller to its end. (``Host.call_tool`` builds it with
    its fields in order: positional arguments cost less than keywords, once per call.)"""

    #: The JSON-RPC method.
    method: str
    #: ``tools/call``: the tool as the caller named it (canonical name or alias).
    name: str = ""
    #: ``tools/call``: the tool's arguments; a read: its params.
    arguments: Mapping[str, Any] | None = None
    #: Seconds: the caller's (None: the server's, else the host's), then the call's (rule 1).
    timeout: float | None = None
    #: Whether the call is safe to repeat after it may have reached its server.
    idempotent: bool | None = None
    #: ``dev.trunkline/idempotencyKey``: a string, or True for a generated one.
    idempotency_key: str | bool | None = None
    on_progress: ProgressCallback | None = None
    log_level: str | None = None
    on_log: LogCallback | None = None
    #: This call's own input-round handlers, or the relay of its rounds to the caller.
    call_input: CallInput | None = None
    #: A W3C trace context the call continues, already checked (``telemetry.carried``).
    trace_context: dict[str, str] | None = None
    #: Who the call is made for: reserved for per-user authorization and credentials.
    identity: object | None = None
    #: ``Host.start_tool``: a task the server answers with is the caller's to wait on
    #: (a ``ToolTask`` is returned), and a legacy server is asked to run the call as one
    #: whenever the tool allows it.
    detached: bool = False
    #: ``call_tool(on_status=...)``: told each status of the task the server runs the
    #: call as, if it runs it as one (``parent.tasks.TaskStatus``).
    on_status: Callable[[Any], None] | None = None

    # What the call path learns on the way (rule 2).

    #: ``tools/call``: the catalog's entry the name resolved to.
    entry: ToolEntry | None = None
    #: The params as sent, serialized once for every attempt.
    params: bytes | None = None
    #: The idempotency key as sent (a generated one resolved), identical on every retry.
    key: str | None = None
    #: The ``CallNotices`` token the call's progress, logs and questions come under.
    watched: str | None = None
    #: When the call's timeout ends (the loop's clock): its retries end there too.
    deadline: float = 0.0
    #: A legacy server was asked to run the call as a task (``params.task``): its answer
    #: has no ``resultType``, and is taken on as a task's creation, never as complete.
    task_asked: bool = False
    #: The complete result's bytes, when a recorded call's record takes the result
    #: before it is checked (``CallPath``): checked after, with them.
    answered_json: bytes = b""


__all__ = ["CallInput", "CallRequest", "LogCallback", "ProgressCallback", "with_extensions"]
