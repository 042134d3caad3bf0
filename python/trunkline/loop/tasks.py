"""Structured concurrency for objects with a lifetime: trio's nursery, on asyncio.TaskGroup.

A host re-listing a server, a handle restarting its worker, a transport reading one HTTP
exchange: each owner opens one ``TaskScope`` when it starts, starts its background tasks
in it, and closes it when it closes. Closing cancels whatever is still running and waits
for every task, so nothing outlives its owner.

The scope is an ``asyncio.TaskGroup`` held open by one runner task; closing the scope
cancels the runner, which makes the group cancel and await its children (the group's own,
public semantics). A child's failure is logged with the scope's name and goes no further:
one background job failing must not take its owner down (its callers see their own
errors), which is also what keeps the group from aborting its siblings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

log = logging.getLogger("trunkline.tasks")

T = TypeVar("T")


class TaskScope:
    """The background tasks of one owner (``name`` says which, in logs)."""

    __slots__ = ("name", "_group", "_runner", "_closed")

    def __init__(self, name: str) -> None:
        self.name = name
        self._group: asyncio.TaskGroup | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closed = False

    async def open(self) -> Self:
        """Start the scope (idempotent); ``spawn`` works from here on."""
        if self._runner is None and not self._closed:
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[None] = loop.create_future()
            self._runner = loop.create_task(self._run(ready), name=f"{self.name} tasks")
            await ready
        return self

    async def _run(self, ready: asyncio.Future[None]) -> None:
        async with asyncio.TaskGroup() as group:
            self._group = group
            ready.set_result(None)
            # Held open until the scope closes: cancelling this await makes the group
            # cancel its children and wait for them.
            await asyncio.get_running_loop().create_future()

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None
              ) -> asyncio.Task[T | None]:
        """Run ``coro`` as a child of the scope. After ``aclose`` began, nothing new
        starts: the coroutine is closed and a cancelled task is returned."""
        if self._group is None or self._closed:
            coro.close()
            if self._group is None and not self._closed:
                raise RuntimeError(f"{self.name}: spawn() before open()")
            task: asyncio.Task[T | None] = asyncio.get_running_loop().create_task(_nothing())
            task.cancel()
            return task
        task = self._group.create_task(self._guarded(coro), name=name)
        # A child cancelled before its first step never ran ``coro``: close it, so it is
        # not reported as never awaited (closing a finished coroutine does nothing).
        task.add_done_callback(lambda _task: coro.close())
        return task

    async def _guarded(self, coro: Coroutine[Any, Any, T]) -> T | None:
        try:
            return await coro
        except Exception:  # a background job's failure is logged, not spread
            log.exception("%s: a background task failed", self.name)
            return None

    def cancel(self) -> None:
        """Start closing from synchronous code: nothing new starts, everything running is
        cancelled; ``aclose`` waits for the end."""
        self._closed = True
        if self._runner is not None:
            self._runner.cancel()

    async def aclose(self) -> None:
        """Cancel every task still running and wait for all of them. Idempotent."""
        self.cancel()
        runner = self._runner
        if runner is None or runner.done():
            return
        # wait() rather than await: the runner ends cancelled, which is no error here,
        # while a cancellation of the caller itself still propagates.
        await asyncio.wait([runner])

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _nothing() -> None:
    return None


async def gather_all(*coros: Coroutine[Any, Any, T]) -> list[T]:
    """Run ``coros`` concurrently and return their results in order. The first failure
    cancels the others and is raised as itself (not wrapped in an exception group), once
    all of them have ended: none is left running behind the caller."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coro) for coro in coros]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]
