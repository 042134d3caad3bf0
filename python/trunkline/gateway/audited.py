"""What the gateway writes to the audit trail (``telemetry.audit``): one record for each
request it sends behind it or refuses to, made where the ``Answerer`` decides.

Rules:

1. Every ``tools/call``, ``prompts/get``, ``resources/read``, ``completion/complete``,
   ``skills/get`` and ``resources/directory/read`` gets one record: ``allowed`` with how
   it ended, ``denied`` when the policy refused it (the rule's id; a refusal as for
   something that does not exist is ``denied`` too: the operator is told what the client
   was not; so is a call of a tool not in the catalog, ``UnknownTool``), or ``limited``
   when a bound refused it (``admission``). Listings are not
   recorded: what they show is the policy's, decided the same way for every listing.
2. A record names the identity (``Identity.described``: kind, issuer, subject), the
   server, the tool, prompt or URI as the client named it, the rule that decided, the
   request's id and trace id; never an argument's value (``arguments_hash`` only, when the
   operator gave a key). An error is named by its kind or code, never its message.
3. Recording costs a call nothing when there is no audit trail (``Answerer.audit`` None);
   with one, the record is queued (``AuditLog.emit``), never written on the call's path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from .. import log_context
from ..errors import NotPermitted, RequestTimeout, ServerError, TrunklineError, UnknownTool
from ..parent.host import Host
from ..parent.results import CallToolResult
from ..policy.decisions import Allowed, Item
from ..telemetry.audit import AuditLog, AuditRecord, Decision, Outcome
from . import protocol as p
from . import tool_search

#: The methods recorded (rule 1), and where each names what it uses.
AUDITED = frozenset({"tools/call", "prompts/get", "resources/read", "completion/complete",
                     "skills/get", "resources/directory/read"})


class Auditor:
    """The records of one gateway process's requests (rules 1-3)."""

    def __init__(self, log: AuditLog, host: Host, *, tool_search: bool = False) -> None:
        self.log = log
        self._host = host
        self._tool_search = tool_search

    def refused(self, request: p.Request, server: str | None, decision: Decision,
                rule: str | None = None, error: str | None = None) -> None:
        """``request`` was not let through: by the policy (``denied``) or a bound."""
        target, arguments = self._target(request)
        self._emit(request, server, target, arguments, decision, rule, None, error, None)

    def ended(self, request: p.Request, server: str | None, started: float,
              result: Any = None, failure: BaseException | None = None) -> None:
        """``request`` was sent behind the gateway (admitted at ``started``,
        ``time.perf_counter``) and ended with ``result`` or ``failure``."""
        target, arguments = self._target(request)
        duration_ms = round((time.perf_counter() - started) * 1000, 3)
        if isinstance(failure, (NotPermitted, UnknownTool)):
            # Refused before it was sent: by a rule, or for a tool not there (to the
            # client) or hidden (``ToolHidden``: the operator is told which).
            self._emit(request, server, target, arguments, "denied",
                       getattr(failure, "rule", None), None, type(failure).__name__, None)
            return
        outcome, error = _outcome(result, failure)
        self._emit(request, server, target, arguments, "allowed",
                   self._allowed_by(request, server, target, arguments), outcome, error,
                   duration_ms)

    def _target(self, request: p.Request) -> tuple[str | None, Any]:
        params = request.params
        if request.method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if self._tool_search and name == tool_search.CALL and isinstance(arguments, dict):
                name, arguments = arguments.get("name"), arguments.get("arguments")
            return (name if isinstance(name, str) else None), arguments
        if request.method == "prompts/get":
            name = params.get("name")
            return (name if isinstance(name, str) else None), params.get("arguments")
        ref = params.get("ref")
        if isinstance(ref, dict):  # completion/complete
            named = ref.get("name", ref.get("uri"))
            return (named if isinstance(named, str) else None), params.get("argument")
        uri = params.get("uri")
        return (uri if isinstance(uri, str) else None), None

    def _allowed_by(self, request: p.Request, server: str | None, target: str | None,
                    arguments: Any) -> str | None:
        """The rule that let ``request`` through (None: no policy), asked again of the
        cached decisions, uncounted."""
        access = self._host.access
        if not access.active or target is None:
            return None
        arguments = arguments if isinstance(arguments, Mapping) else None
        if request.method == "tools/call":
            entry = self._host.tool_entry(target, request.identity)
            decision = access.may_call_tool(request.identity, entry, arguments, count=False) \
                if entry is not None else None
        elif server is not None:
            kind = "prompt" if request.method == "prompts/get" else "resource"
            decision = access.may_call(request.identity, Item(kind, server, target),
                                       count=False)
        else:
            decision = None
        return decision.rule if isinstance(decision, Allowed) else None

    def _emit(self, request: p.Request, server: str | None, target: str | None,
              arguments: Any, decision: Decision, rule: str | None, outcome: Outcome | None,
              error: str | None, duration_ms: float | None) -> None:
        self.log.emit(AuditRecord(
            action=request.method, identity=request.identity.described(), server=server,
            target=target, decision=decision, rule=rule, outcome=outcome, error=error,
            duration_ms=duration_ms, request_id=request.id, trace_id=log_context.trace_id(),
            arguments_hash=None if arguments is None else self.log.arguments_hash(arguments)))


def _outcome(result: Any, failure: BaseException | None) -> tuple[Outcome, str | None]:
    if failure is None:
        if isinstance(result, CallToolResult) and result.is_error:
            return "tool_error", None
        return "ok", None
    if isinstance(failure, asyncio.CancelledError):
        return "cancelled", None
    if isinstance(failure, RequestTimeout):
        return "timeout", type(failure).__name__
    if isinstance(failure, ServerError):
        return "error", str(failure.code)
    if isinstance(failure, TrunklineError):
        return "error", type(failure).__name__
    return "error", "internal"
