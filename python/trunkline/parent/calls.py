"""The call path: one logical request to its server, with its semantics kept.

``CallPath`` sends a ``tools/call`` (or a ``resources/read``, ``prompts/get``) through the
server's handle under the retry rules (``protocol.retry``; every retry a new request), with
a progress token unique to the call when the caller wants progress, a log level for the
call when asked, the idempotency key when given, the ``-32020`` recovery of Streamable
HTTP (the server's ``x-mcp-header`` definitions changed: re-list, send once more), and
the input rounds of a multi round-trip request. The result's checks are ``ResultChecks``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ..catalog import ToolEntry
from ..errors import MalformedMessage
from ..params import HttpParams
from ..protocol.reply import Reply
from ..protocol.retry import (
    Attempt,
    RetryPlan,
    RetryPolicy,
    plan_call,
    with_idempotency_key,
)
from ..protocol.versions import HEADER_MISMATCH, META_LOG_LEVEL
from .handle import WorkerHandle
from .input_rounds import CallInput, InputRequired, InputRounds
from .retrying import run_with_retries

log = logging.getLogger("trunkline.host")

ProgressCallback = Callable[[Any, Any, Any], None]


LogCallback = Callable[[dict[str, Any]], None]


class _Asking:
    """What one request asks of its server besides its params, written into its body
    (``_meta`` and the input continuation) on entry, for as long as it runs: progress and
    log messages for this request only (one token in ``CallNotices`` for both, and for
    the handlers of a legacy server's own requests about it), a log level (modern
    servers; a legacy server's logs are its session's, the host's ``on_log`` gets them),
    the input rounds' answers and capabilities."""

    def __init__(self, handle: WorkerHandle, body: dict[str, Any],
                 call_input: CallInput | None, on_progress: ProgressCallback | None,
                 log_level: str | None, on_log: LogCallback | None) -> None:
        self._handle = handle
        self._token: str | None = None
        if call_input is not None:
            body.update(call_input.continuation())
        meta: dict[str, Any] = dict(body.get("_meta") or {})
        modern = handle.era == "modern"
        logs = on_log if modern and log_level is not None else None
        # A legacy server asks for input with requests of its own, which the call's
        # handlers answer when they can be told to be this call's (``CallNotices``).
        asks = call_input.handlers if call_input is not None and not modern else None
        if on_progress is not None or logs is not None or asks:
            progress = None if on_progress is None else (lambda p: on_progress(
                p.get("progress"), p.get("total"), p.get("message")))
            self._token = handle.notices.watch(progress, logs, asks)
            meta["progressToken"] = self._token
        if modern:
            if log_level is not None:
                meta[META_LOG_LEVEL] = log_level
            if call_input is not None:
                meta.update(call_input.meta())
        if meta:
            body["_meta"] = meta

    def __enter__(self) -> _Asking:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._token is not None:
            self._handle.notices.unwatch(self._token)


class CallPath:
    def __init__(self, *, retry_policy: RetryPolicy, call_timeout: float,
                 input_rounds: InputRounds,
                 relist: Callable[[str], Any]) -> None:
        self.retry_policy = retry_policy
        self.call_timeout = call_timeout
        self._input_rounds = input_rounds
        self._relist = relist

    def timeout_for(self, handle: WorkerHandle, timeout: float | None) -> float:
        """The call's own, else the server's, else the host's."""
        if timeout is not None:
            return timeout
        server_timeout = handle.config.call_timeout
        return self.call_timeout if server_timeout is None else server_timeout

    async def call_tool(self, handle: WorkerHandle, entry: ToolEntry,
                        arguments: Mapping[str, Any] | None, *, timeout: float | None,
                        on_progress: ProgressCallback | None, log_level: str | None,
                        idempotent: bool | None, idempotency_key: str | bool | None,
                        call_input: CallInput | None = None,
                        on_log: LogCallback | None = None) -> Any:
        """The decoded, complete result of one ``tools/call`` (its checks are the
        caller's), or ``InputRequired`` when ``call_input`` relays the rounds."""
        body: dict[str, Any] = {"name": entry.local_name, "arguments": dict(arguments or {})}
        timeout = self.timeout_for(handle, timeout)
        plan = plan_call(self.retry_policy, "tools/call", tool=entry, idempotent=idempotent,
                         idempotent_tools=handle.config.idempotent_tools,
                         deadline=asyncio.get_running_loop().time() + timeout,
                         idempotency_key=idempotency_key)
        with _Asking(handle, body, call_input, on_progress, log_level, on_log):
            reply = await self._send(handle, "tools/call", body, plan, timeout)
            if reply.error_code == HEADER_MISMATCH and isinstance(handle.config.params,
                                                                  HttpParams):
                # The server's x-mcp-header definitions changed under our catalog. It
                # rejected the request before running it, so re-listing and sending once
                # more (a new request) is safe for any tool.
                log.info("server %r: header mismatch on %r (%s); re-listing its tools",
                         handle.name, entry.local_name, reply.error_message)
                await self._relist(handle.name)
                reply = await self._send(handle, "tools/call", body, plan, timeout)
            return await self._completed(handle, "tools/call", body, reply, timeout, call_input)

    async def read(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                   timeout: float | None, call_input: CallInput | None = None, *,
                   log_level: str | None = None, on_log: LogCallback | None = None) -> Any:
        """A read (``resources/read``, ``prompts/get``): retried after transport loss or a
        timeout; the result as sent (or ``InputRequired``, relayed)."""
        timeout = self.timeout_for(handle, timeout)
        plan = plan_call(self.retry_policy, method,
                         deadline=asyncio.get_running_loop().time() + timeout)
        body = dict(body)
        with _Asking(handle, body, call_input, None, log_level, on_log):
            reply = await self._send(handle, method, body, plan, timeout)
            result = await self._completed(handle, method, body, reply, timeout, call_input)
        if isinstance(result, InputRequired):
            return result
        if not isinstance(result, dict):
            raise MalformedMessage(f"{method} result is not an object", server=handle.name,
                                   method=method)
        return result

    async def _send(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                    plan: RetryPlan, timeout: float) -> Reply:
        """The first attempt goes straight out; the retry driver runs only once one
        failed (most calls never need it)."""
        key = plan.idempotency_key
        try:
            return await handle.request(
                method, orjson.dumps(body if key is None else with_idempotency_key(body, key)),
                timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - the plan decides; CancelledError passes
            first_failure = exc

        async def send(attempt: Attempt) -> Reply:
            left = attempt.remaining_s
            return await handle.request(
                method, orjson.dumps(attempt.stamp(body)),
                timeout=timeout if left is None else max(min(timeout, left), 0.001))
        return await run_with_retries(send, plan, first_failure=first_failure)

    async def _completed(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                         reply: Reply, timeout: float, call_input: CallInput | None) -> Any:
        result = reply.decode(server=handle.name, method=method)
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            if call_input is not None and call_input.relay:
                return InputRequired(result, handle.name)
            original = {k: v for k, v in body.items()
                        if k not in ("inputResponses", "requestState")}
            result = await self._input_rounds.for_call(call_input).complete(
                handle, method, original, result, reply, timeout)
        return result
