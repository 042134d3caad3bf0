"""The calls of one server: admitted to a slot, sent through its current worker, awaited,
their slots freed.

``CallSlots`` is the hot path of the whole host. A call waits only when it must (its
server not ready yet, or every slot taken: back-pressure, within the call's own
deadline), then takes a slot, a call id in the worker generation's correlator (its
deadline in one min-heap for all calls) and one SUBMIT frame queued for the tick's single
channel write. When its future is resolved (a RESULT, a FAILURE, the deadline, the
worker's loss) its slot is freed: for an answer (``returned``) its latency sampled and
its record told the request id the worker chose, for anything else (``unanswered``) the
failure put in the call's terms.

Rules:

1. ``call`` is the only coroutine of a call in flight (with thousands in flight the
   collector walks every frame they hold). What happens after the first attempt is its
   ``CallEnds``'s: a complete result ends the call at once (``answered``, no await); any
   other answer (``unfinished``) or a failure (``failed``: retries) is taken from there.
2. Every call sent frees its slot exactly once: answered, failed, timed out or cancelled
   (a cancelled call is cancelled in the worker too).
3. A timeout is said in the call's terms (its own seconds), whichever side ended it: the
   worker (from the SUBMIT's arrival, naming the request id) or the parent's backstop,
   ``WORKER_DEADLINE_FIRST_S`` later.
4. A call never goes to a worker that said it is ending: it fails ``ServerUnavailable``,
   unsent, and its retry plan may send it again once the server is back.
5. A call made for an identity to a server reached with each user's own credentials goes
   with that identity's credential slot (``parent.credentials``), looked up at each attempt
   (a slot number may have gone to another identity since the last); every other call
   goes with slot 0, the host's own, at no cost beyond one attribute test.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, cast

from .. import channel as ch
from .._codec import KIND_RESULT, RT_ABSENT, RT_COMPLETE, CodecError, encode_submit
from ..channel import ServerState
from ..errors import MalformedMessage, RequestTimeout, ServerUnavailable, TrunklineError
from ..protocol.reply import Reply
from ..telemetry.calls import note, sent_as
from .call_request import CallRequest
from .latency import LatencyWindow

if TYPE_CHECKING:
    from ..policy.identity import Identity
    from .generation import Generation
    from .handle import WorkerHandle

#: States in which a call waits for the server instead of failing at once.
ON_ITS_WAY = (ServerState.STARTING, ServerState.NEGOTIATING, ServerState.RESTARTING)
#: How long after a call's deadline the parent ends it itself (rule 3).
WORKER_DEADLINE_FIRST_S = 0.05
#: The result types of a complete result (``resultType`` "complete", or none).
_COMPLETE = frozenset((RT_COMPLETE, RT_ABSENT))


class CallEnds(Protocol):
    """What a call's caller decides once its first attempt is over (rule 1)."""

    def answered(self, handle: WorkerHandle, request: CallRequest, result_type: int,
                 payload: bytes) -> Any:
        """A complete result (the RESULT frame's raw ``result``): the call's value."""

    def unfinished(self, handle: WorkerHandle, request: CallRequest,
                   reply: Reply) -> Coroutine[Any, Any, Any]:
        """Any other answer (an error, another result type): taken to the call's end."""

    def failed(self, handle: WorkerHandle, request: CallRequest,
               failure: Exception) -> Coroutine[Any, Any, Any]:
        """The first attempt failed (unsent, timed out, the worker lost, ...)."""


class _Replies:
    """``CallEnds`` of a plain request: its answer as a ``Reply``, its failure raised."""

    def answered(self, handle: WorkerHandle, request: CallRequest, result_type: int,
                 payload: bytes) -> Reply:
        return handle.slots.reply_of(KIND_RESULT, result_type, payload, request.method)

    async def unfinished(self, handle: WorkerHandle, request: CallRequest,
                         reply: Reply) -> Reply:
        return reply

    async def failed(self, handle: WorkerHandle, request: CallRequest,
                     failure: Exception) -> Reply:
        raise failure


REPLIES = _Replies()


class CallSlots:
    """One server's calls in flight: admission to a slot, send, await, the slot freed."""

    def __init__(self, handle: WorkerHandle) -> None:
        self._handle = handle
        self._notices = handle.notices
        # Read on every call: kept at hand rather than behind two attribute lookups.
        self._max_in_flight = handle.config.max_in_flight
        self._max_frame_bytes = handle.settings.max_frame_bytes
        #: The host's identities by slot, for a server reached with each user's own
        #: credentials (rule 5); None: every call goes with slot 0.
        self._user_slots = handle.user_slots
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        #: Calls sent whose slots are not free yet.
        self.in_flight = 0
        #: The latencies of this server's recent calls (``Host.call_latency``).
        self.latency = LatencyWindow()
        #: The handle's loop, kept: ``asyncio.get_running_loop()`` costs a ``getpid()``.
        self.loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> float:
        """The loop's clock (without ``asyncio.get_running_loop()``)."""
        return (self.loop or asyncio.get_running_loop()).time()

    def request(self, method: str, params: bytes | None, *, timeout: float,
                watched: str | None = None,
                identity: object | None = None) -> Coroutine[Any, Any, Reply]:
        """One request through the worker, its answer as a ``Reply``. ``watched``: the
        ``CallNotices`` token of the call it belongs to, told while the request is with
        the server; ``identity``: who it is made for (rule 5). (Not a coroutine itself:
        ``call`` is the request's only frame.)"""
        return self.call(CallRequest(method=method, params=params, timeout=timeout,
                                     watched=watched, identity=identity), REPLIES)

    async def call(self, request: CallRequest, ends: CallEnds) -> Any:
        """The first attempt of ``request`` (its ``params``, within its ``timeout``), and
        its end as ``ends`` decides (rule 1).

        Per call: one future, one correlator entry, one SUBMIT frame queued for the
        tick's single channel write, one deadline in the correlator. No task, no
        wait_for, no object but the future beside this coroutine."""
        method = request.method
        timeout = request.timeout
        assert timeout is not None  # the call path gave it its seconds (CallRequest rule 1)
        handle = self._handle
        loop = self.loop or asyncio.get_running_loop()
        started = perf_counter()  # the loop's clock may tick in milliseconds (uvloop)
        request.deadline = deadline = loop.time() + timeout
        try:
            left = timeout
            if handle.state is not ServerState.READY or self.in_flight >= self._max_in_flight:
                await self._admitted(method, deadline, timeout)
                left = deadline - loop.time()
            gen = handle.current
            if gen is None or gen.ending:
                raise ServerUnavailable(handle.unavailable_message(),
                                        state=handle.state.value, server=handle.name,
                                        method=method, sent=False)
            credential = 0 if self._user_slots is None else self.credential_of(
                request.identity)
            future: asyncio.Future[Any] = loop.create_future()
            call_id = self._submit(gen, future, method, request.params, deadline, left,
                                   credential)
        except Exception as exc:  # noqa: BLE001 - the ends decide; CancelledError passes
            return await ends.failed(handle, request, exc)
        watched = request.watched
        if watched is not None:
            self._notices.sent(watched)
        failure: Exception | None = None
        try:
            answer = await future
        except BaseException as exc:  # noqa: BLE001 - its slot freed whatever it is; a cancel passes
            error = self.unanswered(gen, call_id, method, timeout, exc)
            if not isinstance(error, Exception):
                raise error from None  # cancelled: passed on as it is
            failure = error
        finally:
            if watched is not None:
                self._notices.returned(watched)
        if failure is not None:
            return await ends.failed(handle, request, failure)
        kind, result_type, payload, request_id = answer
        self.returned(started, request_id)
        if kind == KIND_RESULT and result_type in _COMPLETE and not request.task_asked:
            return ends.answered(handle, request, result_type, payload)
        return await ends.unfinished(handle, request,
                                     self.reply_of(kind, result_type, payload, method))

    def credential_of(self, identity: object | None) -> int:
        """The credential slot a request made for ``identity`` goes with (rule 5)."""
        if self._user_slots is None or identity is None:
            return 0
        return self._user_slots.slot_for(cast("Identity", identity), self._handle.name)

    def _submit(self, gen: Generation, future: asyncio.Future[Any], method: str,
                params: bytes | None, deadline: float, left: float, credential: int) -> int:
        """Queue the SUBMIT and take a slot; ``left``: what is left of the timeout after
        any wait, ``credential`` the call's credential slot (rule 5). The call's id in
        ``gen``."""
        backstop = deadline + WORKER_DEADLINE_FIRST_S
        call_id = gen.calls.allocate(future, backstop)
        try:
            ms = max(int(left * 1000), 1)
            # Slot 0 is the codec's default: no keyword to parse on the shared path.
            frame = encode_submit(call_id, ms, method, params, self._max_frame_bytes) \
                if not credential else encode_submit(call_id, ms, method, params,
                                                     self._max_frame_bytes, credential=credential)
        except CodecError as exc:
            gen.calls.discard(call_id)
            raise MalformedMessage(f"request cannot be sent: {exc}",
                                   server=self._handle.name, method=method,
                                   sent=False) from None
        gen.out.push(frame)
        gen.deadlines.note(backstop)
        self.in_flight += 1
        return call_id

    def reply_of(self, kind: int, result_type: int, payload: bytes, method: str) -> Reply:
        """A RESULT frame's answer to a ``method`` request, as a ``Reply`` (an error
        response that does not decode raises ``MalformedMessage``, counted)."""
        try:
            return Reply.from_frame(kind, result_type, payload, server=self._handle.name,
                                    method=method)
        except MalformedMessage:
            self._handle.unreadable()
            raise

    def returned(self, started: float, request_id: int) -> None:
        """A call sent at ``started`` was answered (by the request with ``request_id``):
        its slot is free, its latency sampled, its record told."""
        self._release()
        self.latency.add(perf_counter() - started)
        sent_as(request_id)

    def unanswered(self, gen: Generation, call_id: int, method: str, timeout: float,
                   exc: BaseException) -> BaseException:
        """What to raise for a ``method`` call sent as ``call_id`` of ``gen`` whose
        future failed with ``exc`` (its slot is freed): a timeout in this call's terms; a
        cancellation as it is, after telling the worker; anything else as it is, naming
        ``method`` (the worker's FAILURE cannot: it forwards calls without reading them)."""
        self._release()
        if isinstance(exc, RequestTimeout):
            self._handle.note_error(f"{method}: no reply within {timeout:g} s")
            error = RequestTimeout(f"no reply within {timeout:g} s", timeout_s=timeout,
                                   server=self._handle.name, method=method)
            error.request_id = exc.request_id  # the worker's, when it ended it
            return error
        if isinstance(exc, asyncio.CancelledError):
            if gen.calls.discard(call_id) is not None and not gen.gone:
                gen.send(ch.cancel_frame(call_id))
        elif isinstance(exc, TrunklineError) and exc.method is None:
            exc.method = method
        return exc

    def expired(self, gen: Generation, expired: list[tuple[Any, Any]]) -> None:
        """Deadlines passed: tell the worker to cancel those calls (it sends
        ``notifications/cancelled``) and resolve their callers at once. A reply that still
        comes is dropped and counted by the demux as stale."""
        if gen.gone:
            return
        for call_id, future in expired:
            gen.send(ch.cancel_frame(call_id))
            if not future.done():
                future.set_exception(RequestTimeout("deadline passed",
                                                    server=self._handle.name))

    async def drained(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every call in flight to free its slot (a server
        draining before it stops); whether they all did. Waits as a call waiting for a
        slot does (``_waiters``), and hands on a wake-up a waiting call needed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.in_flight > 0:
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, deadline - loop.time())
            except TimeoutError:
                return False
            finally:
                if not waiter.done():
                    waiter.cancel()
            if self.in_flight < self._max_in_flight:
                self._wake_one()
        return True

    def _wake_one(self) -> None:
        """A slot is free: the first call still waiting for one takes it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self) -> None:
        self.in_flight -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _admitted(self, method: str, deadline: float, timeout: float) -> None:
        """Wait, within the call's deadline, for its server to be ready and a slot free."""
        if self._handle.state is not ServerState.READY:
            await self._wait_ready(deadline, timeout, method)
        if self.in_flight >= self._max_in_flight:
            await self._wait_slot(deadline, timeout, method)

    async def _wait_ready(self, deadline: float, timeout: float, method: str) -> None:
        handle = self._handle
        loop = asyncio.get_running_loop()
        waited = handle.state
        note("wait_for_server", {"trunkline.server.state": waited.value})
        while handle.state is not ServerState.READY:
            if not handle.config.wait_ready or handle.state not in ON_ITS_WAY:
                raise ServerUnavailable(
                    handle.unavailable_message(), state=handle.state.value,
                    server=handle.name, method=method, sent=False)
            try:
                await asyncio.wait_for(handle.next_change(), deadline - loop.time())
            except TimeoutError:
                raise RequestTimeout(
                    f"server was not ready within {timeout:g} s ({handle.state.value})",
                    timeout_s=timeout, server=handle.name, method=method, sent=False,
                ) from None
        note("server_ready", {"trunkline.server.state": waited.value})

    async def _wait_slot(self, deadline: float, timeout: float, method: str) -> None:
        """Back-pressure: wait, within the call's own deadline, for a free slot."""
        loop = asyncio.get_running_loop()
        while self.in_flight >= self._max_in_flight:
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, deadline - loop.time())
            except TimeoutError:
                raise RequestTimeout(
                    f"no free in-flight slot within {timeout:g} s "
                    f"(max_in_flight={self._max_in_flight})",
                    timeout_s=timeout, server=self._handle.name, method=method, sent=False,
                ) from None
            finally:
                if not waiter.done():
                    waiter.cancel()


__all__ = ["ON_ITS_WAY", "REPLIES", "WORKER_DEADLINE_FIRST_S", "CallEnds", "CallSlots"]
