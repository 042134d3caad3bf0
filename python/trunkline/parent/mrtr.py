"""Multi round-trip requests, driven: the I/O around ``protocol.mrtr.MrtrLoop``.

When a result says ``input_required``, each of its input requests goes to the host's
handler for its kind, and the original request is sent again (a new id) with the answers
in ``inputResponses`` and the server's ``requestState`` exactly as it sent it, until the
result is complete. trunkline never answers an input request by itself; other calls to
the same server go on meanwhile.

One call may bring its own ``CallInput`` (the gateway does, for the client it serves):
its own handlers and the capabilities they answer for, or ``relay``: the
``input_required`` result goes back to the caller as ``InputRequired``, and the caller's
next call carries the answers (``responses``, ``request_state``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputNotSupported, RequestTimeout
from ..loop.tasks import gather_all
from ..protocol.mrtr import (
    Done,
    Fail,
    InputHandler,
    MrtrLimits,
    MrtrLoop,
    NeedInput,
    Resend,
    check_response,
)
from ..protocol.reply import Reply
from ..protocol.tasks import RESULT_TYPE_TASK
from ..protocol.versions import META_CLIENT_CAPABILITIES
from ..telemetry.calls import note
from .call_request import CallInput, with_extensions
from .handle import WorkerHandle
from .tasks import checked_entries


@dataclass(frozen=True)
class InputRequired:
    """A relayed ``input_required`` result: the server's ``inputRequests`` and
    ``requestState`` for the caller to answer (``raw`` is the result as sent)."""

    raw: dict[str, Any]
    server: str = ""
    #: For a round the host holds the call of (a legacy server's questions, bridged:
    #: ``parent.input_bridge``): done once that call is taken up again or has ended. The
    #: call holds its server's slot meanwhile: a caller that counts what its clients hold
    #: counts it until then.
    held: asyncio.Future[None] | None = field(default=None, compare=False, repr=False)

    @property
    def input_requests(self) -> dict[str, Any]:
        requests = self.raw.get("inputRequests")
        return requests if isinstance(requests, dict) else {}


_TASK = frozenset({RESULT_TYPE_TASK})
_NONE: frozenset[str] = frozenset()


class InputRounds:
    def __init__(self, handlers: Mapping[str, InputHandler], capabilities: Mapping[str, Any],
                 limits: MrtrLimits) -> None:
        self._handlers = dict(handlers)
        self._capabilities = dict(capabilities)
        self.limits = limits

    def for_call(self, call_input: CallInput | None) -> InputRounds:
        """The rounds of one call: its own handlers, when it brought some."""
        if call_input is None or (not call_input.handlers and call_input.capabilities is None):
            return self
        return InputRounds(call_input.handlers, self._capabilities
                           if call_input.capabilities is None else call_input.capabilities,
                           self.limits)

    def handler(self, method: str) -> InputHandler | None:
        """The handler these rounds answer ``method`` with, if any."""
        return self._handlers.get(method)

    async def complete(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                       result: dict[str, Any], reply: Reply, timeout: float,
                       watched: str | None = None, identity: object | None = None) -> Any:
        """Rounds until the result is complete (or a bound, or the deadline, ends them);
        a ``tools/call`` to a server that runs tasks may end in one (its caller follows
        it). ``watched``: the call's notices token, ``identity`` who it is made for
        (``CallSlots.request``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        server = handle.name
        # A call that declares capabilities of its own declares the host's extensions
        # beside them (``CallInput.meta``): its rounds declare the same.
        meta = body.get("_meta")
        declared = with_extensions(self._capabilities, handle.extensions) if (
            isinstance(meta, dict) and META_CLIENT_CAPABILITIES in meta) else self._capabilities
        final = _TASK if method == "tools/call" and handle.task_mode == "modern" else _NONE
        mrtr = MrtrLoop(method, body, declared, self.limits, loop.time(), server=server,
                        final_types=final)
        decision = mrtr.on_result(result, reply.result or b"", loop.time())
        while True:
            if isinstance(decision, Done):
                return decision.result
            if isinstance(decision, Fail):
                raise decision.error
            if isinstance(decision, NeedInput):
                note("input_round", {"trunkline.input.kinds": sorted(
                    {item.method for item in decision.requests})})
                responses = await self._answer(server, method, decision)
                decision = mrtr.responses_ready(responses, loop.time())
                continue
            assert isinstance(decision, Resend)
            left = deadline - loop.time()
            if left <= 0:
                raise RequestTimeout(f"input rounds exceeded {timeout:g} s",
                                     timeout_s=timeout, server=server, method=method)
            reply = await handle.slots.request(method, decision.params, timeout=left,
                                               watched=watched, identity=identity)
            decoded = reply.decode(server=server, method=method)
            decision = mrtr.on_result(decoded, reply.result or b"", loop.time())

    async def answer_entries(self, server: str, asks: Mapping[str, Any]) -> dict[str, Any]:
        """A task's ``inputRequests`` (``parent.tasks``) answered by these handlers: each
        entry checked and gated by the capabilities as a round's are, each answer's
        shape checked; the first failure is the task's."""
        need = NeedInput(tuple(checked_entries(server, asks, self._capabilities)), 0, 0.0)
        responses = await self._answer(server, "tasks/get", need)
        for item in need.requests:
            try:
                check_response(item, responses[item.key])
            except ValueError as exc:
                raise InputNotSupported(f"the host's answer is not one: {exc}", key=item.key,
                                        kind=item.method, server=server,
                                        method="tasks/update") from None
        return responses

    async def _answer(self, server: str, method: str, need: NeedInput) -> dict[str, Any]:
        async def answer(item: Any) -> tuple[str, Any]:
            handler = self._handlers.get(item.method)
            if handler is None:
                raise InputNotSupported(
                    f"server asked for {item.method} but the host registered no handler for "
                    "it", key=item.key, kind=item.method, server=server, method=method)
            return item.key, await handler(dict(item.params or {}))
        # The first handler's failure is the call's; the others are cancelled with it.
        return dict(await gather_all(*(answer(item) for item in need.requests)))
