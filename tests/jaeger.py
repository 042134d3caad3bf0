"""A real trace backend for the OTLP export test: Jaeger (installed by .ci/install-jaeger
into .peers/jaeger/), started on 127.0.0.1 with a configuration of our own (OTLP/HTTP
in; traces to memory storage and the query API, ``/api/traces/{trace id}``; metrics to
the OpenTelemetry Collector's Prometheus exporter, which Jaeger's binary includes, read as
its page; nothing else listens)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

from conftest import stop_process

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / ".peers" / "jaeger" / "jaeger"

_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    metrics:
      receivers: [otlp]
      exporters: [prometheus]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  prometheus:
    endpoint: 127.0.0.1:{metrics}
  jaeger_storage_exporter:
    trace_storage: memory_store
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Jaeger:
    def __init__(self, directory: Path) -> None:
        assert BINARY.exists(), "jaeger is not installed: run .ci/install-jaeger"
        self.otlp_port, query, query_grpc, metrics = (free_port() for _ in range(4))
        self.otlp_endpoint = f"http://127.0.0.1:{self.otlp_port}"
        self.query_url = f"http://127.0.0.1:{query}"
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        config = directory / "jaeger.yaml"
        config.write_text(_CONFIG.format(otlp=self.otlp_port, query=query,
                                         query_grpc=query_grpc, metrics=metrics))
        self._log_path = directory / "jaeger.log"
        self._log = open(self._log_path, "wb")  # noqa: SIM115 - closed in stop
        self.process = subprocess.Popen([str(BINARY), "--config", f"file:{config}"],
                                        stdout=self._log, stderr=subprocess.STDOUT,
                                        cwd=directory)

    async def ready(self, deadline_s: float = 60.0) -> None:
        """Until both the OTLP receiver and the query API accept connections."""
        stop_at = time.monotonic() + deadline_s
        for port in (self.otlp_port, int(self.query_url.rsplit(":", 1)[1])):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    if self.process.poll() is not None or time.monotonic() > stop_at:
                        raise AssertionError(f"jaeger did not start: {self.log()}") from None
                    await asyncio.sleep(0.2)

    async def trace(self, trace_id: str, spans: int, deadline_s: float = 60.0
                    ) -> dict[str, Any]:
        """The trace once it holds at least ``spans`` spans (export is batched)."""
        stop_at = time.monotonic() + deadline_s
        got: dict[str, Any] = {}
        async with aiohttp.ClientSession() as http:
            while True:
                async with http.get(f"{self.query_url}/api/traces/{trace_id}") as response:
                    if response.status == 200:
                        data = (await response.json()).get("data") or []
                        got = data[0] if data else {}
                if len(got.get("spans", [])) >= spans:
                    return got
                if time.monotonic() > stop_at:
                    raise AssertionError(f"trace {trace_id}: {got} {self.log()}")
                await asyncio.sleep(0.3)

    async def metrics(self, wanted: str, deadline_s: float = 60.0) -> str:
        """The Prometheus page of the metrics received, once it mentions ``wanted``
        (metrics are exported on an interval)."""
        stop_at = time.monotonic() + deadline_s
        page = ""
        async with aiohttp.ClientSession() as http:
            while True:
                async with http.get(self.metrics_url) as response:
                    page = await response.text()
                if wanted in page:
                    return page
                if time.monotonic() > stop_at:
                    raise AssertionError(f"no {wanted!r} in {page[-2000:]} {self.log()}")
                await asyncio.sleep(0.3)

    def log(self) -> str:
        return self._log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        stop_process(self.process, 20)
        self._log.close()


def tags(span: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger span's tags as a dict (the span's attributes, and ``span.kind``)."""
    return {tag["key"]: tag["value"] for tag in span.get("tags", [])}
