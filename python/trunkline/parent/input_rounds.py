"""Multi round-trip requests, driven: the I/O around ``protocol.mrtr.MrtrLoop``.

When a result says ``input_required``, each of its input requests goes to the host's
handler for its kind, and the original request is sent again (a new id) with the answers
in ``inputResponses`` and the server's ``requestState`` exactly as it sent it, until the
result is complete. trunkline never answers an input request by itself; other calls to
the same server go on meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
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
)
from ..protocol.reply import Reply
from .handle import WorkerHandle


class InputRounds:
    def __init__(self, handlers: Mapping[str, InputHandler], capabilities: Mapping[str, Any],
                 limits: MrtrLimits) -> None:
        self._handlers = dict(handlers)
        self._capabilities = dict(capabilities)
        self.limits = limits

    async def complete(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                       result: dict[str, Any], reply: Reply, timeout: float) -> Any:
        """Rounds until the result is complete (or a bound, or the deadline, ends them)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        server = handle.name
        mrtr = MrtrLoop(method, body, self._capabilities, self.limits, loop.time(),
                        server=server)
        decision = mrtr.on_result(result, reply.result or b"", loop.time())
        while True:
            if isinstance(decision, Done):
                return decision.result
            if isinstance(decision, Fail):
                raise decision.error
            if isinstance(decision, NeedInput):
                responses = await self._answer(server, method, decision)
                decision = mrtr.responses_ready(responses, loop.time())
                continue
            assert isinstance(decision, Resend)
            left = deadline - loop.time()
            if left <= 0:
                raise RequestTimeout(f"input rounds exceeded {timeout:g} s",
                                     timeout_s=timeout, server=server, method=method)
            reply = await handle.request(method, decision.params, timeout=left)
            decoded = reply.decode(server=server, method=method)
            decision = mrtr.on_result(decoded, reply.result or b"", loop.time())

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
