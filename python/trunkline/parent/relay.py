"""A legacy server's own requests (elicitation, sampling, roots), answered in the parent,
the answer sent back to the worker that asked and never to a later one (a restarted
worker's server did not ask). A kind nobody answers is answered with an error: the server
is never left waiting.

Who answers:

- ``roots/list``: the server's configured roots (``ServerConfig.roots``), else the host's
  handler; never one call's. A legacy server's roots belong to its session, which every
  call on the connection shares, and servers keep them (server-everything caches them per
  session): one caller's roots would become every caller's.
- elicitation and sampling: the handlers of the call the request belongs to, else the
  host's. A request about a task (its ``_meta`` names it: ``related-task``) belongs to
  the call that task is (``ServerTasks.handler_for``), never to another call in flight;
  any other is the call ``CallNotices.handler_for`` finds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import channel as ch
from ..protocol.mrtr import ROOTS, InputHandler
from ..settings import Root
from .generation import Generation


class ServerRequestRelay:
    def __init__(self, handlers: Mapping[str, InputHandler],
                 call_handler: Callable[[ch.ServerRequest], InputHandler | None],
                 roots: tuple[Root, ...] | None = None) -> None:
        """``call_handler``: the handler of the call a request belongs to, if any;
        ``roots``: the server's configured roots."""
        self._handlers = dict(handlers)
        self._call_handler = call_handler
        self._roots = roots

    def relay(self, gen: Generation, request: ch.ServerRequest) -> None:
        gen.scope.spawn(self._answer(gen, request), name=f"answer {request.method}")

    def _handler(self, request: ch.ServerRequest) -> InputHandler | None:
        if request.method == ROOTS:
            if self._roots is not None:
                return self._configured_roots
            return self._handlers.get(ROOTS)
        return self._call_handler(request) or self._handlers.get(request.method)

    async def _configured_roots(self, _params: dict[str, Any]) -> dict[str, Any]:
        assert self._roots is not None
        return {"roots": [root.listed() for root in self._roots]}

    async def _answer(self, gen: Generation, request: ch.ServerRequest) -> None:
        handler = self._handler(request)
        try:
            if handler is None:
                raise LookupError(f"{request.method} cannot be answered here: the call it "
                                  "belongs to (if any) cannot take it, and the host has no "
                                  "handler for it")
            answer = ch.ServerAnswer(request.key, result=await handler(request.params))
        except Exception as exc:  # noqa: BLE001 - the server is told why, not left waiting
            answer = ch.ServerAnswer(request.key, error=str(exc) or type(exc).__name__)
        if not gen.ending:
            gen.send(answer.to_bytes())
