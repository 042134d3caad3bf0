"""What telemetry adds to one call in the parent, in isolation (no server, no channel): a
baseline without any telemetry step, then the call path's own telemetry steps for one
``tools/call`` with telemetry off (the API's no-op providers: ``Telemetry.call`` returns
None) and on (the SDK sampling every call into a batch processor whose exporter drops
the spans, and the duration histogram).
The fan-out benchmark (``bench_fanout.py``, ``trunkline`` against ``trunkline-traced``)
measures the same through the whole host; this one is steadier on a shared machine.

    .venv/bin/pytest benches/bench_telemetry.py --benchmark-columns=min,median,mean
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from trunkline.params import stdio
from trunkline.parent.telemetry import Telemetry

BODY = {"name": "echo", "arguments": {"token": "s3-w517-n12"}}


class _Handle:
    """What ``Telemetry.call`` reads of a ``WorkerHandle``."""

    name = "s0"
    version = "2026-07-28"

    class config:  # stands for the handle's config attribute
        params = stdio("echo")


async def _answer() -> dict[str, Any]:
    return {"content": [], "isError": False}


def _one_call(telemetry: Telemetry, loop: asyncio.AbstractEventLoop) -> None:
    """The telemetry steps of one call: the record, the trace context into ``_meta``, the
    params serialized, the request run and ended."""
    body = dict(BODY)
    record = telemetry.call(_Handle, "tools/call", body)  # type: ignore[arg-type]  # a stand-in handle
    if record is not None:
        record.stamp(body)
    orjson.dumps(body)
    work = _answer()
    loop.run_until_complete(work if record is None else record.run(work))


def _one_call_untraced(loop: asyncio.AbstractEventLoop) -> None:
    """The same steps without any telemetry step: the baseline (the call path before)."""
    body = dict(BODY)
    orjson.dumps(body)
    loop.run_until_complete(_answer())


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_call_baseline(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    benchmark(_one_call_untraced, loop)


def test_call_telemetry_off(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    telemetry = Telemetry()
    assert telemetry.tracer() is None and telemetry.instruments() is None
    benchmark(_one_call, telemetry, loop)


def test_call_telemetry_on(benchmark: Any, loop: asyncio.AbstractEventLoop) -> None:
    from fanout_trunkline import recording_providers

    tracing, metering = recording_providers()
    telemetry = Telemetry(tracer_provider=tracing, meter_provider=metering)
    try:
        benchmark(_one_call, telemetry, loop)
    finally:
        tracing.shutdown()
        metering.shutdown()
