"""trunkline's adapters for the fan-out harness (benches/fanout.py).

* ``trunkline``: what users call. One ``Host``, each echo server added with
  ``add_servers``; every call is ``host.call_tool(<the server's echo, as the catalog
  names it>, arguments)`` and its text read off the ``CallToolResult``.
* ``trunkline-traced``: the same with OpenTelemetry on (the SDK, ``otel`` extra): a
  tracer provider sampling every call (``ALWAYS_ON``) into a batch processor whose
  exporter drops the spans (the cost measured is trunkline's and the SDK's, not a
  collector's), and a meter provider recording the duration histogram.
  ``TRUNKLINE_BENCH_SAMPLED=0.01`` samples that share of the calls instead.
* ``trunkline-supervisor``: the layer below, as a second figure. One ``Supervisor`` and
  ``handle.slots.request`` with pre-serialized params, the result decoded here.

Both: a worker process per echo server, calls routed through the parent's channel to each
worker; the parent serializes each request once, the worker stamps it and forwards the
undecoded reply, the result is decoded once, in the parent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

import orjson

from trunkline import CallOptions, Host, TelemetryOptions
from trunkline.params import stdio
from trunkline.parent.supervisor import Supervisor
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, ServerConfig

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=30.0))


def _configs(server_argvs: Sequence[Sequence[str]]) -> list[ServerConfig]:
    # Room for the harness's whole in-flight window on every server.
    return [ServerConfig(f"s{i}", stdio(argv[0], *argv[1:]), max_in_flight=1 << 16)
            for i, argv in enumerate(server_argvs)]


def _arguments(token: str, size: int | None) -> dict[str, Any]:
    return {"token": token} if size is None else {"token": token, "size": size}


class TrunklineClient:
    name: ClassVar[str] = "trunkline"
    event_loop: ClassVar[str] = "uvloop"
    slow: ClassVar[bool] = False

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        self._host = Host(settings=SETTINGS, calls=CallOptions(call_timeout_s=120.0))
        await self._connect(server_argvs)

    async def _connect(self, server_argvs: Sequence[Sequence[str]]) -> None:
        await self._host.__aenter__()
        for status in await self._host.add_servers(_configs(server_argvs)):
            if status.era != "modern":
                raise RuntimeError(f"echo server not ready: {status}")
        by_server = {entry.server: entry.name for entry in self._host.tools()}
        self._tools = [by_server[f"s{i}"] for i in range(len(server_argvs))]

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        result = await self._host.call_tool(self._tools[server_index], _arguments(token, size))
        if result.is_error:
            raise RuntimeError(f"isError result: {result.raw!r}")
        return result.content[0]["text"]  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        await self._host.__aexit__(None, None, None)


class TracedClient(TrunklineClient):
    name: ClassVar[str] = "trunkline-traced"

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        ratio = float(os.environ.get("TRUNKLINE_BENCH_SAMPLED", "1"))
        self._tracing, self._metering = recording_providers(ratio)
        self._host = Host(settings=SETTINGS, calls=CallOptions(call_timeout_s=120.0),
                          telemetry=TelemetryOptions(tracer_provider=self._tracing,
                                                     meter_provider=self._metering))
        await self._connect(server_argvs)

    async def close(self) -> None:
        await super().close()
        self._tracing.shutdown()
        self._metering.shutdown()


def recording_providers(ratio: float = 1.0) -> tuple[Any, Any]:
    """A tracer provider sampling ``ratio`` of the traces, its spans batched and dropped,
    and a meter provider read in memory: telemetry's whole cost in the process, nothing
    exported (the OpenTelemetry SDK, from the ``otel`` extra)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracing = TracerProvider(sampler=ALWAYS_ON if ratio >= 1 else TraceIdRatioBased(ratio))
    tracing.add_span_processor(BatchSpanProcessor(Dropped()))
    return tracing, MeterProvider(metric_readers=[InMemoryMetricReader()])


class SupervisorClient:
    name: ClassVar[str] = "trunkline-supervisor"
    event_loop: ClassVar[str] = "uvloop"
    slow: ClassVar[bool] = False

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        self._sup = Supervisor(SETTINGS)
        for status in await self._sup.add_many(_configs(server_argvs)):
            if status.era != "modern":
                raise RuntimeError(f"echo server not ready: {status}")
        self._handles = [self._sup.handle(f"s{i}") for i in range(len(server_argvs))]

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        reply = await self._handles[server_index].slots.request(
            "tools/call", orjson.dumps({"name": "echo", "arguments": _arguments(token, size)}),
            timeout=120.0)
        result = reply.decode()
        if result.get("isError"):
            raise RuntimeError(f"isError result: {result!r}")
        return result["content"][0]["text"]  # type: ignore[no-any-return]  # the echoed text

    async def close(self) -> None:
        await self._sup.aclose()


#: The columns this file adds to the harness, by client name.
ADAPTERS = {TrunklineClient.name: TrunklineClient, TracedClient.name: TracedClient,
            SupervisorClient.name: SupervisorClient}
