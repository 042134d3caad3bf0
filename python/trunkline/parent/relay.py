"""A legacy server's own requests (elicitation, sampling, roots), answered in the parent
by the handlers of the call they belong to (``CallNotices.handler_for``), else by the
host's input handlers, the answer sent back to the worker that asked and never to a
later one (a restarted worker's server did not ask). A kind nobody has a handler for is
answered with an error: the server is never left waiting."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .. import channel as ch
from ..protocol.mrtr import InputHandler
from .generation import Generation


class ServerRequestRelay:
    def __init__(self, handlers: Mapping[str, InputHandler],
                 call_handler: Callable[[ch.ServerRequest], InputHandler | None]) -> None:
        """``call_handler``: the handler of the call a request belongs to, if any."""
        self._handlers = dict(handlers)
        self._call_handler = call_handler

    def relay(self, gen: Generation, request: ch.ServerRequest) -> None:
        gen.scope.spawn(self._answer(gen, request), name=f"answer {request.method}")

    async def _answer(self, gen: Generation, request: ch.ServerRequest) -> None:
        handler = self._call_handler(request) or self._handlers.get(request.method)
        try:
            if handler is None:
                raise LookupError(f"the host answers no {request.method} requests")
            answer = ch.ServerAnswer(request.key, result=await handler(request.params))
        except Exception as exc:  # noqa: BLE001 - the server is told why, not left waiting
            answer = ch.ServerAnswer(request.key, error=str(exc) or type(exc).__name__)
        if not gen.ending:
            gen.send(answer.to_bytes())
