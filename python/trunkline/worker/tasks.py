"""The worker's half of following tasks: each task the parent watches is looked at with
``tasks/get`` when its machine (``protocol.tasks.TaskPoll``) says, and only what changed
goes to the parent (``TaskReport``).

The looks stay in the worker, beside the connection they go over: a parent waiting on a
thousand tasks is woken when one of them moves, never per look, and no look costs it
anything. One coroutine per followed task, in the worker's scope; none while no task is
followed.

A legacy (2025-11-25) server's task gives its payload with ``tasks/result``, a request
that waits until the task ends; it is sent once the task ended, or as soon as it asks for
input (the server then sends its questions, as requests of its own, while that request
waits: they reach the host like any other of its requests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from .. import channel as ch
from .._codec import raw_member
from ..errors import MalformedMessage, TrunklineError
from ..loop.tasks import TaskScope
from ..protocol.tasks import (
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    Changed,
    Ended,
    Forgotten,
    Look,
    Overdue,
    Step,
    TaskLimits,
    TaskPoll,
    TaskView,
    task_view,
)
from .peer import Peer

log = logging.getLogger("trunkline.worker")

#: Seconds one ``tasks/get`` or ``tasks/cancel`` may take.
LOOK_TIMEOUT_S = 30.0


class TaskPoller:
    def __init__(self, peer: Peer, to_parent: Callable[[bytes], None],
                 limits: TaskLimits) -> None:
        self._peer = peer
        self._to_parent = to_parent
        self._limits = limits
        self._scope = TaskScope(f"tasks of {peer.name!r}")
        #: Each followed task's coroutine and the server's id of it, by the parent's key.
        #: Each followed task's coroutine, id and credential slot, by key.
        self._following: dict[int, tuple[asyncio.Task[None], str, int]] = {}

    def __len__(self) -> int:
        return len(self._following)

    async def open(self) -> None:
        await self._scope.open()

    async def aclose(self) -> None:
        self._following.clear()
        await self._scope.aclose()

    def watch(self, watch: ch.TaskWatch) -> None:
        old = self._following.pop(watch.key, None)
        if old is not None:
            old[0].cancel()
        task = self._scope.spawn(self._follow(watch), name=f"task {watch.key}")
        self._following[watch.key] = (task, watch.task_id, watch.credential)

    def unwatch(self, unwatch: ch.TaskUnwatch) -> None:
        following = self._following.pop(unwatch.key, None)
        if following is None:
            return
        task, task_id, credential = following
        task.cancel()
        if unwatch.cancel:
            # Cooperative: its answer is waited for by nobody.
            self._scope.spawn(self._cancel(task_id, credential), name="tasks/cancel")

    # -- one task ------------------------------------------------------------------------

    async def _follow(self, watch: ch.TaskWatch) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        created = TaskView(watch.task_id, watch.status, watch.status_message,
                           watch.poll_interval_ms, watch.ttl_ms, watch.created_at,
                           watch.last_updated_at)
        poll = TaskPoll(created, now, limits=self._limits,
                        deadline=None if watch.deadline_s is None else now + watch.deadline_s)
        step: Step = Look(now) if watch.resumed else poll.first(now)
        if isinstance(step, Changed) and not step.asks:
            step = Look(step.at)  # the parent has the creation: only news crosses
        params = orjson.dumps({"taskId": watch.task_id})
        result: bytes | None = None  # the final result, as the server wrote it
        fetched = False  # a legacy task's tasks/result was answered
        looked: list[bytes] = []  # the last look's answer, as the server wrote it
        try:
            while True:
                if isinstance(step, Changed):
                    self._report(watch.key, step.view, asks=step.asks)
                    if watch.legacy and step.view.status == INPUT_REQUIRED:
                        # Its questions come while tasks/result waits; so does its end.
                        step, result = await self._legacy_end(watch, poll.view)
                        fetched = True
                        continue
                elif isinstance(step, Ended):
                    if watch.legacy and not fetched and step.view.status in (COMPLETED,
                                                                             FAILED):
                        step, result = await self._legacy_end(watch, step.view)
                        fetched = True
                        continue
                    self._ended(watch.key, step.view, result)
                    return
                elif isinstance(step, Forgotten):
                    self._send(ch.TaskReport(key=watch.key, status=poll.view.status,
                                             lost=step.reason))
                    return
                elif isinstance(step, Overdue):
                    self._send(ch.TaskReport(key=watch.key, status=poll.view.status,
                                             overdue=True))
                    await self._cancel(watch.task_id, watch.credential)
                    return
                await asyncio.sleep(max(step.at - loop.time(), 0.0))
                late = poll.due(loop.time())
                if late is not None:
                    step = late
                    continue
                step, result = await self._look(watch, poll, params, looked)
        except MalformedMessage as exc:
            self._send(ch.TaskReport(key=watch.key, status=poll.view.status,
                                     lost="the server's answer about the task is "
                                          f"malformed: {exc.message}"))
        finally:
            current = self._following.get(watch.key)
            if current is not None and current[0] is asyncio.current_task():
                del self._following[watch.key]

    async def _look(self, watch: ch.TaskWatch, poll: TaskPoll, params: bytes,
                    looked: list[bytes]) -> tuple[Step, bytes | None]:
        """One ``tasks/get``, and what the machine makes of it. An answer byte for byte
        the last one's is the same look, not decoded again (most looks: the task works
        on)."""
        now = asyncio.get_running_loop().time
        try:
            reply = await self._peer.request("tasks/get", params, timeout=LOOK_TIMEOUT_S,
                                             credential=watch.credential)
        except TrunklineError as exc:
            return poll.failed(None, now(), exc.message), None
        if reply.is_error:
            return poll.failed(reply.error_code, now(), reply.error_message or ""), None
        raw = reply.result
        if raw is not None and looked and looked[0] == raw:
            return poll.seen(poll.view, now()), None
        view = task_view(reply.decode(server=self._peer.name, method="tasks/get"),
                         legacy=watch.legacy, task_id=watch.task_id)
        if raw is not None:
            looked[:] = [raw]
        step = poll.seen(view, now())
        if isinstance(step, Ended) and view.status == COMPLETED and not watch.legacy:
            # The result crosses as the server wrote it (decoded once, in the parent).
            assert reply.result is not None
            return step, raw_member(reply.result, "result")
        return step, None

    async def _legacy_end(self, watch: ch.TaskWatch,
                          view: TaskView) -> tuple[Step, bytes | None]:
        """A legacy task's payload: ``tasks/result`` waits until the task ends."""
        params = orjson.dumps({"taskId": watch.task_id})
        try:
            reply = await self._peer.request(
                "tasks/result", params,
                timeout=watch.deadline_s if watch.deadline_s is not None else 24 * 3600.0,
                credential=watch.credential)
        except TrunklineError as exc:
            return Forgotten(f"tasks/result failed: {exc.message}"), None
        if reply.is_error:
            error = {"code": reply.error_code, "message": reply.error_message or ""}
            if reply.error_data is not None:
                error["data"] = reply.error_data
            return Ended(TaskView(view.task_id, FAILED, view.status_message,
                                  error=error)), None
        return Ended(TaskView(view.task_id, COMPLETED, view.status_message)), reply.result

    def _ended(self, key: int, view: TaskView, result: bytes | None) -> None:
        if view.status == COMPLETED and result is None:
            result = orjson.dumps(view.result)
        self._report(key, view, result=result if view.status == COMPLETED else None,
                     error=view.error)

    def _report(self, key: int, view: TaskView, *, asks: dict[str, Any] | None = None,
                result: bytes | None = None, error: dict[str, Any] | None = None) -> None:
        self._send(ch.TaskReport(
            key=key, status=view.status, status_message=view.status_message,
            poll_interval_ms=view.poll_interval_ms, ttl_ms=view.ttl_ms,
            created_at=view.created_at, last_updated_at=view.last_updated_at,
            asks=orjson.dumps(asks).decode() if asks else None, error=error), result or b"")

    def _send(self, report: ch.TaskReport, result: bytes = b"") -> None:
        self._to_parent(report.to_bytes(result))

    async def _cancel(self, task_id: str, credential: int) -> None:
        try:
            reply = await self._peer.request(
                "tasks/cancel", orjson.dumps({"taskId": task_id}), timeout=LOOK_TIMEOUT_S,
                credential=credential)
        except TrunklineError as exc:
            log.info("server %r: tasks/cancel failed: %s", self._peer.name, exc.message)
            return
        if reply.is_error:
            log.info("server %r: tasks/cancel refused: [%s] %s", self._peer.name,
                     reply.error_code, reply.error_message)


__all__ = ["TaskPoller"]
