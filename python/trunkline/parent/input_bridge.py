"""Relayed calls to legacy servers, whose own requests for input become the caller's
``input_required`` rounds: the I/O around ``protocol.input_bridge.InputBridge``.

A caller that relays its calls' rounds (``CallInput(relay=True)``: a gateway, whose
2026-07-28 client answers them) gets the same rounds from a 2025-11-25 server, which asks
with requests of its own while the call runs. Such a call runs as a task of the host's:
when the server asks, the caller's await ends with ``InputRequired`` whose
``requestState`` is the call's token, and the call is *parked*, still in flight, until the
caller's next call with that token and the answers (``resume``), which go to the server
as its replies; the caller then waits on for the result, or the next round.

Rules:

1. A token is ``tl-input.<host instance>.<secret>``: unguessable (it is the only thing
   that binds an answer to its call: whoever holds it answers), and naming the host that
   holds the call (``HostSettings.instance``), so another host (a sibling gateway
   process) can tell it is not its own and say so. A token is used once: resuming takes
   the call out of the parked set, and another round brings another token-holding
   result with the same token.
2. A parked call waits for its caller until its own deadline (the call's timeout from its
   start, plus a little to hand over the result that came at its end) or the rounds'
   total-time bound, whichever comes first; then it is cancelled (the server is told) and
   forgotten, and a late resume finds nothing (``InputRoundUnknown``).
3. The caller that stops waiting (cancelled) cancels the call; every request of the
   server's still waiting is answered with an error, never left hanging.
4. Resuming names the request it continues (method and target): a token offered with
   another request is refused and the call stays parked for the right one.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Callable, Coroutine
from typing import Any, TypeGuard

from ..errors import InputRoundUnknown, ServerUnavailable
from ..loop.tasks import TaskScope
from ..protocol.input_bridge import BRIDGED, InputBridge, Refused
from ..protocol.mrtr import InputHandler, MrtrLimits
from .call_request import CallInput
from .mrtr import InputRequired

#: What every token starts with (rule 1).
TOKEN_PREFIX = "tl-input."
#: After its own deadline, how long a parked call keeps a result that came at its end.
_HANDOVER_S = 5.0


class RequestRefused(Exception):
    """A server's request the bridge will not relay: its reply is an error saying why."""


class BridgedCall:
    """One relayed call to a legacy server, from its start to its result."""

    def __init__(self, calls: BridgedCalls, bridge: InputBridge, target: tuple[str, ...],
                 server: str, expires_at: float) -> None:
        self._calls = calls
        self.bridge = bridge
        #: What the call is (method and target): a resume must name the same (rule 4).
        self.target = target
        self.server = server
        self.expires_at = expires_at
        self._loop = asyncio.get_running_loop()
        self._outcome: asyncio.Future[Any] = self._loop.create_future()
        self._news: asyncio.Future[None] | None = None
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._expiry: asyncio.TimerHandle | None = None
        #: While parked: done when the call is taken up again or ends (``InputRequired.held``).
        self._held: asyncio.Future[None] | None = None
        self.task: asyncio.Task[Any] | None = None

    @property
    def token(self) -> str:
        return self.bridge.token

    def handlers(self) -> dict[str, InputHandler]:
        """The call's handlers of the server's requests: each a question to the caller."""
        return {kind: functools.partial(self._ask, kind) for kind in BRIDGED}

    async def run(self, work: Coroutine[Any, Any, Any]) -> None:
        """The call itself (a task of the host's): its outcome is kept for ``next``."""
        try:
            result = await work
        except asyncio.CancelledError:
            # Only the bridge cancels the call, and then nobody waits for it but a caller
            # of a host that is closing.
            self._settle(exception=ServerUnavailable(
                "the call was cancelled: the host is closing", server=self.server))
            raise
        except Exception as exc:  # noqa: BLE001 - the caller's to see
            self._settle(exception=exc)
        else:
            self._settle(result=result)

    def _settle(self, *, result: Any = None, exception: BaseException | None = None) -> None:
        if not self._outcome.done():
            if exception is None:
                self._outcome.set_result(result)
            else:
                self._outcome.set_exception(exception)
                self._outcome.exception()  # retrieved: nobody may come for it (rule 2)
        if self._held is not None and not self._held.done():
            self._held.set_result(None)  # parked, it holds its server's slot no more
        self._wake()

    async def _ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request of the server's, asked of the caller in the call's next round."""
        asked = self.bridge.asked(method, params)
        if isinstance(asked, Refused):
            raise RequestRefused(asked.reason)
        answer: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._answers[asked.key] = answer
        self._wake()
        try:
            return await answer
        finally:
            self._answers.pop(asked.key, None)
            self.bridge.withdrawn(asked.key)

    def _wake(self) -> None:
        news, self._news = self._news, None
        if news is not None and not news.done():
            news.set_result(None)

    async def next(self) -> Any:
        """What the caller gets next: the call's result, or the round that asks it
        something (and parks the call)."""
        try:
            while True:
                if self.bridge.untold:
                    raw = self.bridge.round(self._loop.time())
                    self._calls.park(self)
                    return InputRequired(raw, self.server, self._held)
                if self._outcome.done():
                    self._calls.forget(self)
                    return self._outcome.result()
                self._news = self._loop.create_future()
                await self._news
        except BaseException:
            self.cancel("the caller stopped waiting for the call")
            raise

    def answer(self, responses: Any) -> None:
        """The caller's answers to the last round, as the server's replies."""
        for reply in self.bridge.answered(responses):
            waiting = self._answers.get(reply.key)
            if waiting is None or waiting.done():
                continue
            if reply.error is not None:
                waiting.set_exception(RequestRefused(reply.error))
            else:
                assert reply.result is not None
                waiting.set_result(reply.result)

    def parked(self) -> None:
        self._held = self._loop.create_future()
        self._expiry = self._loop.call_at(self.expires_at, self._expired)

    def unparked(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self._held is not None and not self._held.done():
            self._held.set_result(None)

    def _expired(self) -> None:
        self._expiry = None
        self._calls.forget(self)
        self.cancel("the caller did not answer the call's input round in time")

    def cancel(self, why: str) -> None:
        """End the call (rule 3): its task is cancelled, the server's waiting requests are
        answered with an error."""
        self.unparked()
        self._calls.forget(self)
        for answer in self._answers.values():
            if not answer.done():
                answer.set_exception(RequestRefused(why))
        if self.task is not None and not self.task.done():
            self.task.cancel()


class BridgedCalls:
    """The bridged calls of one host, and those parked between their caller's requests."""

    def __init__(self, scope: TaskScope, limits: MrtrLimits, instance: str) -> None:
        self._scope = scope
        self._limits = limits
        self._prefix = f"{TOKEN_PREFIX}{instance}."
        self._parked: dict[str, BridgedCall] = {}
        self._running: set[BridgedCall] = set()

    @staticmethod
    def claims(request_state: Any) -> TypeGuard[str]:
        """Whether ``request_state`` is a bridged call's token (this host's or another's)."""
        return isinstance(request_state, str) and request_state.startswith(TOKEN_PREFIX)

    def start(self, make: Callable[[CallInput], Coroutine[Any, Any, Any]],
              capabilities: dict[str, Any], target: tuple[str, ...], server: str,
              timeout: float) -> Coroutine[Any, Any, Any]:
        """Run the call ``make(call_input)`` makes (``call_input``: the handlers that ask
        the caller); the coroutine that gives the caller its result or first round."""
        now = asyncio.get_running_loop().time()
        bridge = InputBridge(capabilities, self._prefix + secrets.token_urlsafe(24), now,
                             self._limits)
        expires = min(now + timeout + _HANDOVER_S, now + self._limits.max_total_s)
        call = BridgedCall(self, bridge, target, server, expires)
        work = make(CallInput(handlers=call.handlers(), capabilities=capabilities))
        call.task = self._scope.spawn(call.run(work), name=f"bridged call on {server}")
        self._running.add(call)
        return call.next()

    async def resume(self, request_state: str, target: tuple[str, ...],
                     responses: Any) -> Any:
        """The caller's next request of a parked call: its answers go to the server, and
        the caller waits for what comes next (rules 1, 4)."""
        call = self._parked.get(request_state)
        if call is None:
            if not request_state.startswith(self._prefix):
                raise InputRoundUnknown(
                    "requestState names an input round another trunkline host holds (a "
                    "sibling gateway process or replica): send the answers to the one that "
                    "asked", held_elsewhere=True)
            raise InputRoundUnknown(
                "requestState names no input round in progress: it ended (the call timed "
                "out, or its answers came already) or never was")
        if call.target != target:
            raise InputRoundUnknown(
                "requestState belongs to another request: answer an input round with the "
                "request that received it")
        del self._parked[request_state]
        call.unparked()
        call.answer(responses)
        return await call.next()

    def park(self, call: BridgedCall) -> None:
        self._parked[call.token] = call
        call.parked()

    def forget(self, call: BridgedCall) -> None:
        self._running.discard(call)
        if self._parked.get(call.token) is call:
            del self._parked[call.token]

    @property
    def parked(self) -> int:
        return len(self._parked)

    def close(self) -> None:
        """The host is closing: every bridged call ends (the scope cancels their tasks)."""
        for call in list(self._running):
            call.cancel("the host is closing")


__all__ = ["TOKEN_PREFIX", "BridgedCall", "BridgedCalls", "RequestRefused"]
