"""The worker's half of a legacy server's own requests: asked of the host in the parent.

The elicitation UI, the model and the roots live in the parent, so each handler the peer
is given sends a ``ServerRequest`` frame and waits for the ``ServerAnswer`` with its key.
A request that came on a call's HTTP response stream carries that call's token there
(``stream``: the transport tagged it; on any other transport a tag can only be the
server's own, and is dropped), so that the parent can ask the call's own client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from .. import channel as ch
from ..protocol.mrtr import InputHandler
from .transports import untagged


class HostQuestions:
    def __init__(self, to_parent: Callable[[bytes], None], *, streamed: bool = False) -> None:
        self._to_parent = to_parent
        self._streamed = streamed
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_key = 0

    def handlers(self, methods: Iterable[str]) -> dict[str, InputHandler]:
        """One handler per request method the host answers."""
        return {method: self._asker(method) for method in methods}

    def _asker(self, method: str) -> InputHandler:
        async def ask(params: dict[str, Any]) -> dict[str, Any]:
            self._next_key += 1
            key = self._next_key
            future = asyncio.get_running_loop().create_future()
            self._waiting[key] = future
            params, stream = untagged(params)
            self._to_parent(ch.ServerRequest(
                key, method, params, stream if self._streamed else None).to_bytes())
            try:
                return await future
            finally:
                self._waiting.pop(key, None)
        return ask

    def on_answer(self, answer: ch.ServerAnswer) -> None:
        future = self._waiting.get(answer.key)
        if future is None or future.done():
            return  # asked by a request that was cancelled meanwhile
        if answer.error is not None or answer.result is None:
            future.set_exception(RuntimeError(answer.error or "no result"))
        else:
            future.set_result(answer.result)
