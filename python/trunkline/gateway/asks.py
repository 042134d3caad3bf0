"""Requests the gateway sends a legacy client on a server's behalf (the input a server
behind needs: ``elicitation/create``, ``sampling/createMessage``, ``roots/list``), waiting
for the client's answers.

Ids are unguessable (``trunkline-`` and 16 random bytes) and each ask belongs to one owner
(the connection, or the legacy session over HTTP): an answer from anyone else, or to an id
never asked, is not taken. A client's JSON-RPC error fails the ask with that error; a
cancelled ask forgets its id, so a late answer is dropped; an owner that goes (its session
ended) fails the asks it still had.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

from ..errors import MalformedMessage, ServerError
from . import protocol as p


class Asks:
    def __init__(self) -> None:
        self._waiting: dict[str, tuple[Any, asyncio.Future[dict[str, Any]]]] = {}

    async def ask(self, send: Callable[[dict[str, Any]], None], method: str,
                  params: dict[str, Any], owner: Any = None) -> dict[str, Any]:
        """Send the request with ``send``; the client's result."""
        request_id = f"trunkline-{secrets.token_urlsafe(16)}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (owner, answer)
        try:
            send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await answer
        finally:
            self._waiting.pop(request_id, None)

    def answered(self, response: p.Response, owner: Any = None) -> bool:
        """Take a client's response; whether it answered an ask of ``owner``'s."""
        waiting = self._waiting.get(response.id) if isinstance(response.id, str) else None
        if waiting is None or waiting[0] != owner or waiting[1].done():
            return False
        answer = waiting[1]
        if response.error is not None:
            err = response.error
            code = err.get("code")
            answer.set_exception(ServerError(
                f"the client answered {err.get('message', 'an error')}",
                code=code if isinstance(code, int) else p.INTERNAL_ERROR,
                data=err.get("data")))
        elif response.result is None:
            answer.set_exception(MalformedMessage("the client's answer has no result object"))
        else:
            answer.set_result(response.result)
        return True

    def fail(self, owner: Any, error: Exception) -> None:
        """Every ask of ``owner``'s still waiting fails with ``error`` (its session ended)."""
        for waiting_owner, answer in list(self._waiting.values()):
            if waiting_owner == owner and not answer.done():
                answer.set_exception(error)

    def __len__(self) -> int:
        return len(self._waiting)
