"""The call path: one logical request to its server, with its semantics kept.

``CallPath`` sends a ``tools/call`` (or a ``resources/read``, ``prompts/get``) through the
server's handle under the retry rules (``protocol.retry``; every retry a new request), with
a progress token unique to the call when the caller wants progress, a log level for the
call when asked, the idempotency key when given, the ``-32020`` recovery of Streamable
HTTP (the server's ``x-mcp-header`` definitions changed: re-list, send once more), and
the input rounds of a multi round-trip request. The result's checks are ``ResultChecks``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import orjson

from .._codec import KIND_RESULT, RT_ABSENT, RT_COMPLETE
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
from ..protocol.versions import HEADER_MISMATCH, META_LOG_LEVEL
from ..telemetry.calls import CallRecord
from .handle import WorkerHandle
from .input_rounds import CallInput, InputRequired, InputRounds
from .retrying import run_with_retries
from .telemetry import Telemetry

log = logging.getLogger("trunkline.host")

ProgressCallback = Callable[[Any, Any, Any], None]


LogCallback = Callable[[dict[str, Any]], None]

#: Makes a decoded ``tools/call`` result the caller's, checked (``ResultChecks.to_result``).
ResultCheck = Callable[[ToolEntry, Any], Any]


def _ask(handle: WorkerHandle, body: dict[str, Any], call_input: CallInput | None,
         on_progress: ProgressCallback | None, log_level: str | None,
         on_log: LogCallback | None) -> str | None:
    """Write into ``body`` what one request asks of its server besides its params
    (``_meta`` and the input continuation): progress and log messages for this request
    only (one token in ``CallNotices`` for both, and for the handlers of a legacy server's
    own requests about it), a log level (modern servers; a legacy server's logs are its
    session's, the host's ``on_log`` gets them), the input rounds' answers and
    capabilities. The token to unwatch when the request ends, if one was given: nothing
    else of this stays alive with a call in flight (the collector walks what does)."""
    if call_input is None and on_progress is None and log_level is None:
        return None  # on_log without a log level asks the server nothing (most calls)
    token: str | None = None
    if call_input is not None:
        body.update(call_input.continuation())
    meta: dict[str, Any] = dict(body.get("_meta") or {})
    modern = handle.era == "modern"
    logs = on_log if modern and log_level is not None else None
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
            meta.update(call_input.meta())
    if meta:
        body["_meta"] = meta
    return token


class CallPath:
    def __init__(self, *, retry_policy: RetryPolicy, call_timeout: float,
                 input_rounds: InputRounds,
                 relist: Callable[[str, str], Any],
                 telemetry: Telemetry | None = None) -> None:
        self.retry_policy = retry_policy
        self._telemetry = telemetry or Telemetry()
        self.call_timeout = call_timeout
        self._input_rounds = input_rounds
        self._relist = relist

    def timeout_for(self, handle: WorkerHandle, timeout: float | None) -> float:
        """The call's own, else the server's, else the host's."""
        if timeout is not None:
            return timeout
        server_timeout = handle.config.call_timeout
        return self.call_timeout if server_timeout is None else server_timeout

    def call_tool(self, handle: WorkerHandle, entry: ToolEntry,
                  arguments: Mapping[str, Any] | None, checked: ResultCheck, *,
                  timeout: float | None, on_progress: ProgressCallback | None,
                  log_level: str | None, idempotent: bool | None,
                  idempotency_key: str | bool | None, call_input: CallInput | None = None,
                  on_log: LogCallback | None = None,
                  trace_context: dict[str, str] | None = None) -> Coroutine[Any, Any, Any]:
        """The complete result of one ``tools/call``, as ``checked(entry, result)`` makes
        it, or ``InputRequired`` when ``call_input`` relays the rounds. Not a coroutine
        itself: the caller awaits the call's own coroutine, with no frame between (each
        call in flight holds as few objects as it can). ``trace_context`` (checked: see
        ``telemetry.carried``) goes upstream in ``_meta`` as it came, unless the call's
        own span's replaces it."""
        body = {"name": entry.local_name, "arguments": (
            arguments if type(arguments) is dict else dict(arguments or {}))}
        if self._telemetry.recording():
            return self._recorded_call_tool(handle, entry, body, checked, timeout, on_progress,
                                            log_level, idempotent, idempotency_key, call_input,
                                            on_log, trace_context)
        if (on_progress is None and log_level is None and idempotency_key is None
                and call_input is None and trace_context is None):
            # Most calls ask their server nothing beyond the arguments: nothing to write
            # into the body, nothing to watch while they run (``on_log`` alone asks
            # nothing; see ``_ask``), so the params are made here.
            try:
                params = orjson.dumps(body)
            except orjson.JSONEncodeError as exc:
                # Raised where the call is awaited, as from any other path.
                return raising(_unsendable(body, exc))
            return self._call_tool(handle, entry, params, checked,
                                   self.timeout_for(handle, timeout), idempotent)
        if trace_context is not None:
            body["_meta"] = trace_context
        return self._call_tool(handle, entry, None, checked, self.timeout_for(handle, timeout),
                               idempotent, body, idempotency_key, call_input, on_progress,
                               log_level, on_log)

    async def _recorded_call_tool(self, handle: WorkerHandle, entry: ToolEntry,
                                  body: dict[str, Any], checked: ResultCheck,
                                  timeout: float | None, on_progress: ProgressCallback | None,
                                  log_level: str | None, idempotent: bool | None,
                                  idempotency_key: str | bool | None,
                                  call_input: CallInput | None,
                                  on_log: LogCallback | None,
                                  trace_context: dict[str, str] | None) -> Any:
        """``_call_tool`` with its record, made where the call is awaited (its span's
        parent is the context there, or the one the caller gave) and ended on the result
        as the server sent it (its ``isError``), checked after."""
        if trace_context is not None:
            body["_meta"] = trace_context  # what goes upstream when no span replaces it
        record = self._telemetry.call(handle, "tools/call", body, trace_context)
        work = self._call_tool(handle, entry, None, None, self.timeout_for(handle, timeout),
                               idempotent, body, idempotency_key, call_input, on_progress,
                               log_level, on_log, record)
        result = await (work if record is None else record.run(work))
        return result if isinstance(result, InputRequired) else checked(entry, result)

    async def _call_tool(self, handle: WorkerHandle, entry: ToolEntry, params: bytes | None,
                         checked: ResultCheck | None, timeout: float,
                         idempotent: bool | None, body: dict[str, Any] | None = None,
                         idempotency_key: str | bool | None = None,
                         call_input: CallInput | None = None,
                         on_progress: ProgressCallback | None = None,
                         log_level: str | None = None, on_log: LogCallback | None = None,
                         record: CallRecord | None = None) -> Any:
        """One ``tools/call``: sent, retried when the plan says, its result
        ``checked(entry, result)`` (as decoded when ``checked`` is None) or
        ``InputRequired``. A plain call comes with its ``params``; one that asks its
        server more (progress, a log level, an idempotency key, input rounds, a trace
        context) comes with its ``body``, and what it asks is written into its params
        here, where it is awaited, and unwatched when it ends."""
        key: str | None = None
        watched: str | None = None
        if body is not None:
            key = resolve_idempotency_key(idempotency_key)
            params, watched = _prepared(handle, body, key, call_input, on_progress, log_level,
                                        on_log, record)
            del body  # only the bytes stay alive while the call is in flight
        assert params is not None  # given, or made from the body just above
        try:
            # The first attempt is awaited here, not in a helper, and when it can be sent at
            # once (the usual case) its future is awaited here too, ended as
            # ``handle.request`` ends it: one coroutine fewer per call in flight (the
            # collector walks them all, and each costs its creation and its resumption).
            answer: tuple[int, int, bytes, int] | None = None
            deadline: float | None = None
            try:
                sent = handle.send_now("tools/call", params, timeout)
                if sent is None:
                    deadline = handle.now() + timeout
                    reply = await handle.request("tools/call", params, timeout=timeout,
                                                 watched=watched)
                else:
                    future, gen, call_id, started, deadline = sent
                    del sent  # (see SentCall)
                    if watched is not None:
                        handle.notices.sent(watched)
                    try:
                        answer = await future
                    except BaseException as exc:
                        raise handle.unanswered(gen, call_id, "tools/call", timeout,
                                                exc) from None
                    finally:
                        if watched is not None:
                            handle.notices.returned(watched)
                    handle.settle(started, answer[3])
            except Exception as exc:  # noqa: BLE001 - the plan decides; CancelledError passes
                answer = None
                if deadline is None:  # send_now itself failed: the call begins now
                    deadline = handle.now() + timeout
                reply = await self._retried(handle, "tools/call", params, timeout, deadline, exc,
                                            key, entry, idempotent, watched)
            if answer is not None:
                kind, result_type, payload, _ = answer
                if kind == KIND_RESULT and (result_type == RT_COMPLETE
                                            or result_type == RT_ABSENT):
                    # Complete (most answers): decoded as it is, with no ``Reply`` between
                    # (nothing else in the answer needs reading).
                    try:
                        result = decoded_result(payload, handle.name, "tools/call")
                    except MalformedMessage:
                        handle.unreadable()
                        raise
                    return result if checked is None else checked(entry, result)
                reply = handle.reply_of(kind, result_type, payload, "tools/call")
            assert deadline is not None  # set on every path that reaches here
            return await self._finished(handle, entry, params, key, reply, checked, timeout,
                                        deadline, idempotent, call_input, watched)
        finally:
            if watched is not None:
                handle.notices.unwatch(watched)

    async def _finished(self, handle: WorkerHandle, entry: ToolEntry, params: bytes,
                        key: str | None, reply: Reply, checked: ResultCheck | None,
                        timeout: float, deadline: float, idempotent: bool | None,
                        call_input: CallInput | None, watched: str | None) -> Any:
        """A ``tools/call`` whose answer was not simply complete (an error, another result
        type, or one after retries), taken to its end: re-listed and sent once more after
        a header mismatch, its input rounds run (or relayed), its result checked.
        ``watched``: its notices token (each request of it is told as ``sent``)."""
        if reply.error_code == HEADER_MISMATCH and isinstance(handle.config.params,
                                                              HttpParams):
            # The server's x-mcp-header definitions changed under our catalog. It
            # rejected the request before running it, so re-listing and sending once
            # more (a new request) is safe for any tool: ``relist`` raises instead if
            # the new definition is not admitted (its pin changed).
            log.info("server %r: header mismatch on %r (%s); re-listing its tools",
                     handle.name, entry.local_name, reply.error_message)
            await self._relist(handle.name, entry.local_name)
            reply = await self._send(handle, "tools/call", params, timeout, deadline, key,
                                     entry, idempotent, watched)
        try:
            result = reply.decode(server=handle.name, method="tools/call")
        except MalformedMessage:
            handle.unreadable()
            raise
        if _asks_input(result):
            result = await self._input_required(handle, "tools/call", params, key, result,
                                                reply, timeout, call_input, watched)
            if isinstance(result, InputRequired):
                return result
        return result if checked is None else checked(entry, result)

    def read(self, handle: WorkerHandle, method: str, body: dict[str, Any],
             timeout: float | None, call_input: CallInput | None = None, *,
             log_level: str | None = None, on_log: LogCallback | None = None,
             trace_context: dict[str, str] | None = None) -> Coroutine[Any, Any, Any]:
        """A read (``resources/read``, ``prompts/get``): retried after transport loss or a
        timeout; the result as sent (or ``InputRequired``, relayed). ``body`` is the
        caller's to give: what the read asks is written into it (``trace_context`` as for
        ``call_tool``)."""
        if trace_context is not None:
            meta = body.get("_meta")
            body["_meta"] = ({**meta, **trace_context} if isinstance(meta, dict)
                             else trace_context)
        record = self._telemetry.call(handle, method, body, trace_context)
        work = self._read(handle, method, body, timeout, call_input, log_level, on_log, record)
        return work if record is None else record.run(work)

    async def _read(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                    timeout: float | None, call_input: CallInput | None,
                    log_level: str | None, on_log: LogCallback | None,
                    record: CallRecord | None) -> Any:
        timeout = self.timeout_for(handle, timeout)
        deadline = handle.now() + timeout
        params, watched = _prepared(handle, body, None, call_input, None, log_level, on_log,
                                    record)
        try:
            reply = await self._send(handle, method, params, timeout, deadline,
                                     watched=watched)
            try:
                result = reply.decode(server=handle.name, method=method)
            except MalformedMessage:
                handle.unreadable()
                raise
            if _asks_input(result):
                result = await self._input_required(handle, method, params, None, result,
                                                    reply, timeout, call_input, watched)
        finally:
            if watched is not None:
                handle.notices.unwatch(watched)
        if isinstance(result, InputRequired):
            return result
        if not isinstance(result, dict):
            raise MalformedMessage(f"{method} result is not an object", server=handle.name,
                                   method=method)
        return result

    async def _send(self, handle: WorkerHandle, method: str, params: bytes, timeout: float,
                    deadline: float, key: str | None = None, tool: ToolEntry | None = None,
                    idempotent: bool | None = None, watched: str | None = None) -> Reply:
        """The first attempt goes straight out; the retry plan is made, and its driver
        run, only once one failed (most calls never need either)."""
        try:
            return await handle.request(method, params, timeout=timeout, watched=watched)
        except Exception as exc:  # noqa: BLE001 - the plan decides; CancelledError passes
            return await self._retried(handle, method, params, timeout, deadline, exc, key,
                                       tool, idempotent, watched)

    async def _retried(self, handle: WorkerHandle, method: str, params: bytes,
                       timeout: float, deadline: float, failure: Exception,
                       key: str | None = None, tool: ToolEntry | None = None,
                       idempotent: bool | None = None, watched: str | None = None) -> Reply:
        """After the first attempt failed with ``failure``: the retry plan, run."""
        plan = plan_call(self.retry_policy, method, tool=tool, idempotent=idempotent,
                         idempotent_tools=handle.config.idempotent_tools,
                         deadline=deadline, idempotency_key=key)
        return await run_with_retries(_Resend(handle, method, params, timeout, watched), plan,
                                      first_failure=failure)

    async def _input_required(self, handle: WorkerHandle, method: str, params: bytes,
                              key: str | None, result: dict[str, Any], reply: Reply,
                              timeout: float, call_input: CallInput | None,
                              watched: str | None) -> Any:
        """An ``input_required`` result, relayed (a gateway's client answers) or completed
        here, each round resending the request as the caller made it (without this round's
        answers, and without the idempotency key: a round is not a repeat of the same
        request)."""
        if call_input is not None and call_input.relay:
            return InputRequired(result, handle.name)
        original = {k: v for k, v in orjson.loads(params).items()
                    if k not in ("inputResponses", "requestState")}
        return await self._input_rounds.for_call(call_input).complete(
            handle, method, without_idempotency_key(original, key), result, reply, timeout,
            watched)


def _asks_input(result: Any) -> bool:
    """Whether a decoded result is ``input_required`` (a multi round-trip request's round),
    told without a coroutine: most results are complete."""
    return type(result) is dict and result.get("resultType") == "input_required"


class _Resend:
    """One more attempt of a request after a failure: the same params (the worker gives
    each attempt its own id), its timeout capped to what is left of the call's deadline.
    A class, not a closure: a closure would make cells of the request's variables for
    every call in flight, not only the ones that fail (the GC walks them all)."""

    __slots__ = ("_handle", "_method", "_params", "_timeout", "_watched")

    def __init__(self, handle: WorkerHandle, method: str, params: bytes,
                 timeout: float, watched: str | None = None) -> None:
        self._handle, self._method = handle, method
        self._params, self._timeout = params, timeout
        self._watched = watched

    async def __call__(self, attempt: Attempt) -> Reply:
        left = attempt.remaining_s
        timeout = self._timeout if left is None else max(min(self._timeout, left), 0.001)
        return await self._handle.request(self._method, self._params, timeout=timeout,
                                          watched=self._watched)


def _prepared(handle: WorkerHandle, body: dict[str, Any], key: str | None,
              call_input: CallInput | None, on_progress: ProgressCallback | None,
              log_level: str | None, on_log: LogCallback | None,
              record: CallRecord | None) -> tuple[bytes, str | None]:
    """A request's params, serialized once for all its attempts, and the notices token it
    watches while it runs (``_ask``). Only the bytes stay alive during the call: the GC walks every
    object each call in flight holds, so a call holds as few as it can. The trace
    context, when a span is recorded, goes into ``_meta`` here, for every era, over the
    one the caller gave (already in ``body``): the same on every attempt and every input
    round."""
    watched = None
    try:
        if (key is None and record is None and call_input is None and on_progress is None
                and log_level is None):
            return orjson.dumps(body), None  # most calls: nothing to write into the body
        watched = _ask(handle, body, call_input, on_progress, log_level, on_log)
        if record is not None:
            record.stamp(body)
        return orjson.dumps(body if key is None else with_idempotency_key(body, key)), watched
    except orjson.JSONEncodeError as exc:
        if watched is not None:  # nothing will be sent, so nothing will come to watch
            handle.notices.unwatch(watched)
        raise _unsendable(body, exc) from None


def _unsendable(body: dict[str, Any], exc: orjson.JSONEncodeError) -> TypeError:
    """What to raise for a request's params orjson could not write: an integer beyond 64
    bits named by its place (``arguments.amount``), anything else as orjson said."""
    found = wide_ints.in_value(body)
    return exc if found is None else TypeError(wide_ints.wording(*found))
