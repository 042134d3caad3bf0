"""Awaitables for an outcome already decided: a function that returns the next step's
coroutine instead of awaiting it (one frame fewer for every call in flight) returns one of
these when it has decided without waiting, so its caller awaits either alike."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


async def ready(value: T) -> T:
    """``value``, as an awaitable."""
    return value


async def raising(exc: BaseException) -> Any:
    """``exc``, raised where it is awaited (as it would be from an ``async def``)."""
    raise exc
