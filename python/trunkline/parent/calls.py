"""The call path: one logical request to its server, with its semantics kept.

``CallPath`` takes a ``CallRequest`` (a ``tools/call``, or a read such as
``resources/read``, ``prompts/get``) to its server's ``CallSlots``, which send it, and
decides what only the caller's semantics can: the retry rules (``protocol.retry``; every
retry a new request), a progress token unique to the call when the caller wants progress,
a log level for the call when asked, the idempotency key when given, the ``-32020``
recovery of Streamable HTTP (the server's ``x-mcp-header`` definitions changed: re-list,
send once more), and the input rounds of a multi round-trip request. The result's checks
are ``ResultChecks``.

A ``tools/call``'s only coroutine while it waits is its slots' ``call``: what the call
path decides after the first attempt are the call's ``CallEnds`` (``_ToolCallEnds``): a
complete result decoded and checked at once, anything else (an error, another result
type, a failure) taken on from there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import orjson

from ..catalog import ToolEntry
from ..errors import MalformedMessage
from ..loop.awaitables import raising
from ..params import HttpParams
from ..protocol import wide_ints
from ..protocol.reply import Reply, decoded_result
from ..protocol.retry import (
    Attempt,
    RetryPolicy,
    plan_call,
    resolve_idempotency_key,
    with_idempotency_key,
    without_idempotency_key,
)
from ..protocol.tasks import RESULT_TYPE_TASK, task_view
from ..protocol.versions import HEADER_MISMATCH, META_LOG_LEVEL
from ..telemetry.calls import CallRecord
from .call_request import CallRequest
from .handle import WorkerHandle
from .mrtr import InputRequired, InputRounds
from .retry import run_with_retries
from .tasks import ToolTask
from .telemetry import Telemetry

log = logging.getLogger("trunkline.host")

#: Makes a decoded ``tools/call`` result the caller's, checked (``ResultChecks.to_result``),
#: given the bytes it was decoded from when it came as a document of its own.
ResultCheck = Callable[[ToolEntry, Any, bytes], Any]


def _ask(handle: WorkerHandle, body: dict[str, Any], request: CallRequest) -> str | None:
    """Write into ``body`` what one request asks of its server besides its params
    (``_meta`` and the input continuation): progress and log messages for this request
    only (one token in ``CallNotices`` for both, and for the handlers of a legacy server's
    own requests about it), a log level (modern servers; a legacy server's logs are its
    session's, the host's ``on_log`` gets them), the input rounds' answers and
    capabilities. The token to unwatch when the request ends, if one was given: nothing
    else of this stays alive with a call in flight (the collector walks what does)."""
    call_input, on_progress = request.call_input, request.on_progress
    log_level = request.log_level
    if call_input is None and on_progress is None and log_level is None:
        return None  # on_log without a log level asks the server nothing (most calls)
    token: str | None = None
    if call_input is not None:
        body.update(call_input.continuation())
    meta: dict[str, Any] = dict(body.get("_meta") or {})
    modern = handle.era == "modern"
    logs = request.on_log if modern and log_level is not None else None
    # A legacy server asks for input with requests of its own, which the call's handlers
    # answer when they can be told to be this call's (``CallNotices``).
    asks = call_input.handlers if call_input is not None and not modern else None
    if on_progress is not None or logs is not None or asks:
        progress = None if on_progress is None else (lambda p: on_progress(
            p.get("progress"), p.get("total"), p.get("message")))
        token = handle.notices.watch(progress, logs, asks)
        meta["progressToken"] = token
    if modern:
        if log_level is not None:
            meta[META_LOG_LEVEL] = log_level
        if call_input is not None:
            meta.update(call_input.meta(handle.extensions))
    if meta:
        body["_meta"] = meta
    return token


class CallPath:
    """Each call's way to its server's slots, and what its semantics decide on the way:
    retries, the header-mismatch re-listing, input rounds."""

    def __init__(self, *, retry_policy: RetryPolicy, call_timeout_s: float,
                 input_rounds: InputRounds,
                 relist: Callable[[str, str], Any],
                 checked: ResultCheck,
                 telemetry: Telemetry | None = None) -> None:
        self.retry_policy = retry_policy
        self._telemetry = telemetry or Telemetry()
        self.call_timeout_s = call_timeout_s
        self.input_rounds = input_rounds
        self._relist = relist
        self._checked = checked
        #: A ``tools/call``'s ends: its result checked, or (a recorded call, checked once
        #: its record has the result as sent) not.
        self._ends = _ToolCallEnds(self, checked)
        self._unchecked_ends = _ToolCallEnds(self, None)

    def timeout_for(self, handle: WorkerHandle, timeout: float | None) -> float:
        """The call's own, else the server's, else the host's."""
        if timeout is not None:
            return timeout
        server_timeout = handle.config.call_timeout_s
        return self.call_timeout_s if server_timeout is None else server_timeout

    def call_tool(self, handle: WorkerHandle,
                  request: CallRequest) -> Coroutine[Any, Any, Any]:
        """The complete result of one ``tools/call`` (``request.entry``'s tool), checked,
        or ``InputRequired`` when its ``call_input`` relays the rounds. Not a coroutine
        itself: the caller awaits the call's own coroutine, with no frame between (each
        call in flight holds as few objects as it can). A ``trace_context`` goes upstream
        in ``_meta`` as it came, unless the call's own span's replaces it."""
        entry = request.entry
        assert entry is not None  # the host looked the tool up
        arguments = request.arguments
        body = {"name": entry.local_name, "arguments": (
            arguments if type(arguments) is dict else dict(arguments or {}))}
        if handle.task_mode == "legacy" and _as_legacy_task(entry, request.detached):
            body["task"] = {}  # task-augmented (2025-11-25): the server's TTL
            request.task_asked = True
        request.timeout = self.timeout_for(handle, request.timeout)
        if self._telemetry.recording():
            return self._recorded_call_tool(handle, request, body)
        if (request.on_progress is None and request.log_level is None
                and request.idempotency_key is None and request.call_input is None
                and request.trace_context is None):
            # Most calls ask their server nothing beyond the arguments (no progress, log
            # level, idempotency key, input rounds or trace context; ``on_log`` alone asks
            # nothing): nothing to write into the body, nothing to watch while they run,
            # so the params are made here.
            try:
                request.params = orjson.dumps(body)
            except orjson.JSONEncodeError as exc:
                # Raised where the call is awaited, as from any other path.
                return raising(_unsendable(body, exc))
            return handle.slots.call(request, self._ends)
        if request.trace_context is not None:
            body["_meta"] = request.trace_context
        return self._asking(handle, request, body, self._ends, None)

    async def _recorded_call_tool(self, handle: WorkerHandle, request: CallRequest,
                                  body: dict[str, Any]) -> Any:
        """A ``tools/call`` with its record, made where the call is awaited (its span's
        parent is the context there, or the one the caller gave) and ended on the result
        as the server sent it (its ``isError``), checked after."""
        trace_context = request.trace_context
        if trace_context is not None:
            body["_meta"] = trace_context  # what goes upstream when no span replaces it
        record = self._telemetry.call(handle, "tools/call", body, trace_context)
        work = self._asking(handle, request, body, self._unchecked_ends, record)
        result = await (work if record is None else record.run(work))
        if isinstance(result, InputRequired):
            return result
        assert request.entry is not None  # a tools/call's, looked up by the host
        return self._checked(request.entry, result, request.answered_json)

    async def _asking(self, handle: WorkerHandle, request: CallRequest, body: dict[str, Any],
                      ends: _ToolCallEnds, record: CallRecord | None) -> Any:
        """A ``tools/call`` that asks its server more than its arguments (progress, a log
        level, an idempotency key, input rounds, a trace context), or is recorded: what
        it asks is written into its params here, where it is awaited, and unwatched when
        it ends."""
        request.key = resolve_idempotency_key(request.idempotency_key)
        _prepare(handle, request, body, record)
        del body  # only the bytes stay alive while the call is in flight
        try:
            return await handle.slots.call(request, ends)
        finally:
            if request.watched is not None:
                handle.notices.unwatch(request.watched)

    async def finished(self, handle: WorkerHandle, request: CallRequest, reply: Reply,
                       checked: ResultCheck | None) -> Any:
        """A ``tools/call`` whose answer was not simply complete (an error, another result
        type, or one after retries), taken to its end: re-listed and sent once more after
        a header mismatch, its input rounds run (or relayed), its result
        ``checked(entry, result, b"")`` (as decoded when ``checked`` is None)."""
        entry = request.entry
        assert entry is not None
        if reply.error_code == HEADER_MISMATCH and isinstance(handle.config.params,
                                                              HttpParams):
            # The server's x-mcp-header definitions changed under our catalog. It
            # rejected the request before running it, so re-listing and sending once
            # more (a new request) is safe for any tool: ``relist`` raises instead if
            # the new definition is not admitted (its pin changed).
            log.info("server %r: header mismatch on %r (%s); re-listing its tools",
                     handle.name, entry.local_name, reply.error_message)
            await self._relist(handle.name, entry.local_name)
            reply = await self._send(handle, request)
        try:
            result = reply.decode(server=handle.name, method="tools/call")
        except MalformedMessage:
            handle.unreadable()
            raise
        if _asks_input(result):
            result = await self._input_required(handle, request, result, reply)
            if isinstance(result, InputRequired):
                return result
        if _is_task(handle, result):
            task = self.task_of(handle, request, result, checked)
            if request.detached:
                return task
            return await _waited(task)
        return result if checked is None else checked(entry, result, b"")

    def task_of(self, handle: WorkerHandle, request: CallRequest, result: dict[str, Any],
                checked: ResultCheck | None) -> ToolTask:
        """A ``tools/call`` answered with a task: followed from now on, its final result
        checked as a complete answer's would be, the input it asks for answered by the
        call's handlers (or kept for the caller's ``respond``, when it relays its
        rounds)."""
        entry = request.entry
        assert entry is not None
        legacy = handle.task_mode == "legacy"
        view = task_view(result, legacy=legacy, created=True)
        call_input = request.call_input
        rounds = None if call_input is not None and call_input.relay else (
            self.input_rounds.for_call(call_input))

        def finish(final: dict[str, Any], raw: bytes) -> Any:
            return final if checked is None else checked(entry, final, raw)
        task = handle.tasks.follow(view, tool=request.name or entry.name, finish=finish,
                                   rounds=rounds, legacy=legacy,
                                   deadline=None if request.detached else request.deadline,
                                   identity=request.identity)
        if request.on_status is not None:
            request.on_status(task.status)
            task.watch(request.on_status)
        return task

    def read(self, handle: WorkerHandle, request: CallRequest) -> Coroutine[Any, Any, Any]:
        """A read (``resources/read``, ``prompts/get``; ``request.arguments`` its params):
        retried after transport loss or a timeout; the result as sent (or
        ``InputRequired``, relayed). The ``trace_context`` goes as for ``call_tool``."""
        body = dict(request.arguments or {})
        trace_context = request.trace_context
        if trace_context is not None:
            meta = body.get("_meta")
            body["_meta"] = ({**meta, **trace_context} if isinstance(meta, dict)
                             else trace_context)
        record = self._telemetry.call(handle, request.method, body, trace_context)
        work = self._read(handle, request, body, record)
        return work if record is None else record.run(work)

    async def _read(self, handle: WorkerHandle, request: CallRequest, body: dict[str, Any],
                    record: CallRecord | None) -> Any:
        method = request.method
        request.timeout = timeout = self.timeout_for(handle, request.timeout)
        request.deadline = handle.slots.now() + timeout
        _prepare(handle, request, body, record)
        try:
            reply = await self._send(handle, request)
            try:
                result = reply.decode(server=handle.name, method=method)
            except MalformedMessage:
                handle.unreadable()
                raise
            if _asks_input(result):
                result = await self._input_required(handle, request, result, reply)
        finally:
            if request.watched is not None:
                handle.notices.unwatch(request.watched)
        if isinstance(result, InputRequired):
            return result
        if not isinstance(result, dict):
            raise MalformedMessage(f"{method} result is not an object", server=handle.name,
                                   method=method)
        return result

    async def _send(self, handle: WorkerHandle, request: CallRequest) -> Reply:
        """One more request of ``request`` (its deadline kept); the retry plan is made,
        and its driver run, only once it failed."""
        try:
            return await handle.slots.request(request.method, request.params,
                                              timeout=request.timeout or 0.0,
                                              watched=request.watched,
                                              identity=request.identity)
        except Exception as exc:  # noqa: BLE001 - the plan decides; CancelledError passes
            return await self.retried(handle, request, exc)

    async def retried(self, handle: WorkerHandle, request: CallRequest,
                      failure: Exception) -> Reply:
        """After an attempt of ``request`` failed with ``failure``: the retry plan, run."""
        plan = plan_call(self.retry_policy, request.method, tool=request.entry,
                         idempotent=request.idempotent,
                         idempotent_tools=handle.config.idempotent_tools,
                         deadline=request.deadline, idempotency_key=request.key)
        return await run_with_retries(_Resend(handle, request), plan, first_failure=failure)

    async def _input_required(self, handle: WorkerHandle, request: CallRequest,
                              result: dict[str, Any], reply: Reply) -> Any:
        """An ``input_required`` result, relayed (a gateway's client answers) or completed
        here, each round resending the request as the caller made it (without this round's
        answers, and without the idempotency key: a round is not a repeat of the same
        request)."""
        call_input = request.call_input
        if call_input is not None and call_input.relay:
            return InputRequired(result, handle.name)
        assert request.params is not None and request.timeout is not None
        original = {k: v for k, v in orjson.loads(request.params).items()
                    if k not in ("inputResponses", "requestState")}
        return await self.input_rounds.for_call(call_input).complete(
            handle, request.method, without_idempotency_key(original, request.key), result,
            reply, request.timeout, request.watched, request.identity)


class _ToolCallEnds:
    """How a ``tools/call`` goes on after its first attempt (``CallEnds``): a complete
    result decoded and checked at once; anything else to ``CallPath.finished``, after
    the retries when the attempt failed."""

    __slots__ = ("_checked", "_path")

    def __init__(self, path: CallPath, checked: ResultCheck | None) -> None:
        self._path = path
        self._checked = checked

    def answered(self, handle: WorkerHandle, request: CallRequest, result_type: int,
                 payload: bytes) -> Any:
        # Complete (most answers): decoded as it is, with no ``Reply`` between (nothing
        # else in the answer needs reading).
        try:
            result = decoded_result(payload, handle.name, "tools/call")
        except MalformedMessage:
            handle.unreadable()
            raise
        checked, entry = self._checked, request.entry
        if checked is None:  # a recorded call: checked after its record has the result
            request.answered_json = payload
            return result
        assert entry is not None  # a tools/call's, looked up by the host
        return checked(entry, result, payload)

    def unfinished(self, handle: WorkerHandle, request: CallRequest,
                   reply: Reply) -> Coroutine[Any, Any, Any]:
        return self._path.finished(handle, request, reply, self._checked)

    async def failed(self, handle: WorkerHandle, request: CallRequest,
                     failure: Exception) -> Any:
        reply = await self._path.retried(handle, request, failure)
        return await self._path.finished(handle, request, reply, self._checked)


def _as_legacy_task(entry: ToolEntry, detached: bool) -> bool:
    """Whether a legacy server is asked to run a call of ``entry`` as a task: always for
    a tool that requires it, when the caller takes the task for one that allows it."""
    execution = entry.raw.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support == "required" or (detached and support == "optional")


def _is_task(handle: WorkerHandle, result: Any) -> bool:
    """Whether a decoded ``tools/call`` result is a task the host follows: a modern
    ``CreateTaskResult`` (``resultType: "task"``) when the extension was negotiated, a
    legacy one (``{"task": {...}}``) to a task-augmented call. Any other ``resultType``
    is the result check's to refuse."""
    mode = handle.task_mode
    if mode is None or type(result) is not dict:
        return False
    if mode == "modern":
        return result.get("resultType") == RESULT_TYPE_TASK
    return "task" in result


async def _waited(task: ToolTask) -> Any:
    """A task's end, for the call that waits on it: a caller that stops waiting (its
    deadline, a cancellation) cancels the task upstream."""
    try:
        return await task.wait()
    except asyncio.CancelledError:
        await task.cancel()
        raise


def _asks_input(result: Any) -> bool:
    """Whether a decoded result is ``input_required`` (a multi round-trip request's round),
    told without a coroutine: most results are complete."""
    return type(result) is dict and result.get("resultType") == "input_required"


class _Resend:
    """One more attempt of a request after a failure: the same params (the worker gives
    each attempt its own id), its timeout capped to what is left of the call's deadline.
    A class, not a closure: a closure would make cells of the request's variables for
    every call in flight, not only the ones that fail (the GC walks them all)."""

    __slots__ = ("_handle", "_request")

    def __init__(self, handle: WorkerHandle, request: CallRequest) -> None:
        self._handle, self._request = handle, request

    async def __call__(self, attempt: Attempt) -> Reply:
        request = self._request
        timeout = request.timeout or 0.0
        left = attempt.remaining_s
        if left is not None:
            timeout = max(min(timeout, left), 0.001)
        return await self._handle.slots.request(request.method, request.params,
                                                timeout=timeout, watched=request.watched,
                                                identity=request.identity)


def _prepare(handle: WorkerHandle, request: CallRequest, body: dict[str, Any],
             record: CallRecord | None) -> None:
    """A request's params (``request.params``), serialized once for all its attempts, and
    the notices token it watches while it runs (``request.watched``; ``_ask``). Only the
    bytes stay alive during the call: the GC walks every object each call in flight
    holds, so a call holds as few as it can. The trace context, when a span is recorded,
    goes into ``_meta`` here, for every era, over the one the caller gave (already in
    ``body``): the same on every attempt and every input round."""
    key = request.key
    try:
        if (key is None and record is None and request.call_input is None
                and request.on_progress is None and request.log_level is None):
            request.params = orjson.dumps(body)  # most calls: nothing to write into the body
            return
        request.watched = _ask(handle, body, request)
        if record is not None:
            record.stamp(body)
        request.params = orjson.dumps(body if key is None else with_idempotency_key(body, key))
    except orjson.JSONEncodeError as exc:
        if request.watched is not None:  # nothing will be sent, so nothing will come
            handle.notices.unwatch(request.watched)
            request.watched = None
        raise _unsendable(body, exc) from None


def _unsendable(body: dict[str, Any], exc: orjson.JSONEncodeError) -> TypeError:
    """What to raise for a request's params orjson could not write: an integer beyond 64
    bits named by its place (``arguments.amount``), anything else as orjson said."""
    found = wide_ints.in_value(body)
    return exc if found is None else TypeError(wide_ints.wording(*found))
