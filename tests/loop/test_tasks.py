"""TaskScope and gather_all: nothing outlives its owner, a failure is told, not spread."""

from __future__ import annotations

import asyncio
import logging

import pytest

from conftest import run
from trunkline.loop.tasks import TaskScope, gather_all


def test_closing_a_scope_cancels_and_awaits_every_child():
    async def main():
        before = asyncio.all_tasks()
        ended: list[str] = []
        async def child(name: str) -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                ended.append(name)
        async with TaskScope("owner") as scope:
            tasks = [scope.spawn(child(n)) for n in "abc"]
            await asyncio.sleep(0)
        assert sorted(ended) == ["a", "b", "c"] and all(t.done() for t in tasks)
        assert asyncio.all_tasks() == before, "a task outlived its scope"
    run(main())


def test_a_failing_child_is_logged_and_its_siblings_go_on(caplog):
    async def main():
        async with TaskScope("owner") as scope:
            async def boom() -> None:
                raise RuntimeError("bad job")
            sibling = scope.spawn(asyncio.sleep(0.05, result="fine"))
            failed = scope.spawn(boom())
            assert await sibling == "fine"
            assert await failed is None
    with caplog.at_level(logging.ERROR, logger="trunkline.tasks"):
        run(main())
    assert "owner: a background task failed" in caplog.text and "bad job" in caplog.text


def test_nothing_starts_after_close_and_nothing_before_open():
    async def main():
        scope = TaskScope("owner")
        with pytest.raises(RuntimeError, match="before open"):
            scope.spawn(asyncio.sleep(0))
        await scope.open()
        await scope.aclose()
        late = scope.spawn(asyncio.sleep(3600))
        await asyncio.sleep(0)
        assert late.cancelled()
    run(main())


def test_gather_all_raises_the_first_failure_itself_and_leaves_nothing_running():
    async def main():
        cancelled = asyncio.Event()
        async def slow() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        async def fail() -> None:
            await asyncio.sleep(0.01)
            raise KeyError("first")
        with pytest.raises(KeyError, match="first"):
            await gather_all(slow(), fail())
        assert cancelled.is_set()
        assert await gather_all(asyncio.sleep(0, "a"), asyncio.sleep(0, "b")) == ["a", "b"]
    run(main())
