"""``trunkline serve --http --metrics`` scraped by a real Prometheus (Debian's
``prometheus``, from .ci/install-system), started here on 127.0.0.1 with its own
configuration and data directory, and asked through its HTTP query API; in front of the
gateway, the real mcp 2.3.0 echo server."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

import realpeers
from conftest import run, stop_process
from gateways import HttpGateway, fleet_config, real_server

pytestmark = pytest.mark.real_servers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Prometheus:
    """One ``prometheus`` process scraping ``target`` (host:port) every second."""

    def __init__(self, directory: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed: run .ci/install-system"
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: trunkline\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(directory / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=directory)
        self._directory = directory

    async def query(self, expr: str, deadline_s: float = 90.0) -> list[dict[str, Any]]:
        """The query's result once it has one (Prometheus must start and scrape first)."""
        stop_at = time.monotonic() + deadline_s
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(f"{self.url}/api/v1/query",
                                           params={"query": expr}) as response:
                        body = await response.json()
                    if body.get("status") == "success" and body["data"]["result"]:
                        return body["data"]["result"]
                except aiohttp.ClientConnectionError:
                    pass  # not listening yet
                if time.monotonic() > stop_at:
                    log = (self._directory / "prometheus.log").read_text()
                    raise AssertionError(f"no result for {expr!r}: {log[-2000:]}")
                await asyncio.sleep(0.5)

    def stop(self) -> None:
        stop_process(self.process, 20)
        self._log.close()


@pytest.fixture
def prometheus_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    return directory


def test_prometheus_scrapes_the_gateways_metrics(gateways, tmp_path, prometheus_dir):
    realpeers.require(realpeers.MODERN_PY_ECHO)
    path = fleet_config(tmp_path, {"echo": real_server(realpeers.MODERN_PY_ECHO)})

    async def main():
        gateway = await HttpGateway.start(path, gateways, "--metrics",
                                          env={"OTEL_SERVICE_NAME": "gw-under-test"})
        prometheus = None
        try:
            for text in ("one", "two"):
                status, answer = await gateway.modern(
                    "tools/call", {"name": "echo", "arguments": {"text": text}})
                assert status == 200 and answer["result"]["content"][0]["text"] == text
            async with gateway.http.get(f"{gateway.base}/metrics") as response:
                assert response.status == 200
                page = await response.text()
            assert "mcp_server_operation_duration" in page, page[:2000]

            prometheus = Prometheus(prometheus_dir, gateway.base.split("//")[1])
            served = await prometheus.query(
                'mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call"}')
            assert [r["value"][1] for r in served] == ["2"]
            assert served[0]["metric"]["gen_ai_tool_name"] == "echo"
            sent = await prometheus.query(
                'mcp_client_operation_duration_seconds_count{mcp_method_name="tools/call"}')
            assert [(r["metric"]["trunkline_server"], r["value"][1]) for r in sent] == [
                ("echo", "2")]
            ready = await prometheus.query(
                'trunkline_server_state{trunkline_server_state="ready"}')
            assert [(r["metric"]["trunkline_server"], r["value"][1]) for r in ready] == [
                ("echo", "1")]
            up = await prometheus.query('up{job="trunkline"}')
            assert up[0]["value"][1] == "1"
        finally:
            if prometheus is not None:
                prometheus.stop()
            assert await gateway.stop() == 0
    run(main(), timeout=240)


def test_one_scrape_counts_every_copy_of_serve_processes(gateways, tmp_path,
                                                         prometheus_dir):
    """``--processes 2``: the kernel spreads the connections over the copies, and a scrape
    reaches one of them; the page it gets holds both copies' series, each labelled with
    its copy, so Prometheus counts every call once."""
    realpeers.require(realpeers.MODERN_PY_ECHO)
    path = fleet_config(tmp_path, {"echo": real_server(realpeers.MODERN_PY_ECHO)})
    calls = 40
    count = 'mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call"}'

    async def main():
        gateway = await HttpGateway.start(path, gateways, "--metrics", "--processes", "2")
        prometheus = None
        try:
            answers = await asyncio.gather(*(gateway.modern_on_new_connection(
                "tools/call", {"name": "echo", "arguments": {"text": str(i)}})
                for i in range(calls)))
            assert [a["result"]["content"][0]["text"] for a in answers] == [
                str(i) for i in range(calls)]
            # Any copy's page (each scrape on a connection of its own) has both copies.
            for _ in range(4):
                async with aiohttp.ClientSession(
                        connector=aiohttp.TCPConnector(force_close=True)) as http:
                    async with http.get(f"{gateway.base}/metrics") as response:
                        assert response.status == 200
                        page = await response.text()
                per_copy = {s.labels["trunkline_copy"]: s.value
                            for f in text_string_to_metric_families(page) for s in f.samples
                            if s.name == "mcp_server_operation_duration_seconds_count"
                            and s.labels.get("mcp_method_name") == "tools/call"}
                assert set(per_copy) == {"0", "1"} and all(per_copy.values()), per_copy
                assert sum(per_copy.values()) == calls

            prometheus = Prometheus(prometheus_dir, gateway.base.split("//")[1])
            total = await prometheus.query(f"sum({count})")
            assert total[0]["value"][1] == str(calls)
            copies = await prometheus.query(f"count(count by (trunkline_copy) ({count}))")
            assert copies[0]["value"][1] == "2"
        finally:
            if prometheus is not None:
                prometheus.stop()
            assert await gateway.stop() == 0
    run(main(), timeout=240)


def test_metrics_needs_http(tmp_path):
    """``--metrics`` on stdio is refused before anything starts (there is no page)."""
    path = fleet_config(tmp_path, {})
    done = subprocess.run([sys.executable, "-m", "trunkline", "serve", str(path), "--stdio",
                           "--metrics"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--metrics needs --http" in done.stderr
