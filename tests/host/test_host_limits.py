"""Answers over the size limit (issue 11, defect 5): the request they answer fails at once
with the server, the size and the limit; a safe read is retried; other requests go on; the
worker never holds the line (its memory stays near the limit, whatever the line's size)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import pytest
import taplog

import httppeers
from conftest import run, scripted
from httppeers import http_peer  # noqa: F401 - a fixture
from trunkline import http
from trunkline.errors import OversizedMessage
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings

LIMIT = 1 << 20
SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0),
                        max_line_bytes=LIMIT)


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_an_oversized_answer_fails_its_call_at_once_and_the_others_go_on(no_leaks, tap):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted(tap=tap))
            # The call's own timeout is long: only the answer itself can end it early.
            big = asyncio.ensure_future(host.call_tool("big", {"bytes": 3 * LIMIT}, timeout=10))
            small = await asyncio.gather(*(host.call_tool("echo", {"i": i}) for i in range(50)))
            assert [json.loads(r.text) for r in small] == [{"i": i} for i in range(50)]
            with pytest.raises(OversizedMessage) as info:
                await big
            error = info.value
            assert error.server == "s" and error.limit == LIMIT and error.size > 3 * LIMIT
            assert f"{error.size} bytes" in str(error) and f"{LIMIT} bytes" in str(error)
            # Not idempotent: the server did answer, so the call was not sent again.
            assert getattr(error, "attempts", 1) == 1
            after = await host.call_tool("echo", {"after": True})
            assert json.loads(after.text) == {"after": True}
            return error
    error = run(main())
    # The worker named the request it skipped the answer to: the id the server received.
    [big] = [json.loads(line) for line in taplog.lines(tap, taplog.IN) if b'"big"' in line]
    assert error.request_id == big["id"]


def test_an_oversized_listing_is_retried_as_a_safe_read(no_leaks, tap):
    """tools/list is a read: retried under the retry policy (each time a new request with
    a new id), then the server's status names the size and the limit (it is added
    unlisted, and listed again later)."""
    async def main():
        async with Host(settings=SETTINGS) as host:
            status = await host.add_server("many", scripted("--extra-tools", "20000",
                                                            tap=tap))
            assert "over the line limit of 1048576 bytes" in status.listing_error
            return time.time(), host.retry_policy.max_attempts
    added_at, attempts = run(main())
    lists = [json.loads(r["line"]) for r in taplog.load_records(tap)
             if r["dir"] == taplog.IN and r["t"] <= added_at and '"tools/list"' in r["line"]]
    assert len(lists) == attempts == 3 and len({m["id"] for m in lists}) == 3


def test_the_worker_never_holds_an_oversized_line(no_leaks):
    """A 64 MiB answer against the default 16 MiB limit: the worker's peak memory grows by
    less than 1.5 times the limit (the line is skimmed for its id, never assembled; what
    is held is at most the limit's worth of a line that might still have fitted)."""
    limit = 16 << 20
    settings = replace(SETTINGS, max_line_bytes=limit)
    async def main():
        async with Host(settings=settings) as host:
            status = await host.add_server("s", scripted())
            # Warm the path with a call just under the limit, so the baseline includes
            # the buffers an ordinary large answer needs.
            await host.call_tool("big", {"bytes": limit // 2}, timeout=30)
            before = peak_rss_bytes(status.worker_pid)
            with pytest.raises(OversizedMessage):
                await host.call_tool("big", {"bytes": 64 << 20}, timeout=60)
            grown = peak_rss_bytes(status.worker_pid) - before
            assert grown < 1.5 * limit, f"the worker's peak grew by {grown >> 20} MiB"
    run(main())


def test_an_oversized_http_answer_fails_its_call_the_same_way(no_leaks, http_peer, tmp_path):
    """Over Streamable HTTP the body is read up to the limit, no further."""
    argv, env = httppeers.scripted()
    server = http_peer(argv, env, record=tmp_path / "record.jsonl")
    settings = replace(SETTINGS, max_line_bytes=64 << 10)
    async def main():
        async with Host(settings=settings) as host:
            await host.add_server("remote", http(server.url))
            with pytest.raises(OversizedMessage) as info:
                await host.call_tool("echo", {"text": "x" * (100 << 10)}, timeout=10)
            assert info.value.server == "remote" and info.value.limit == 64 << 10
            small = await host.call_tool("echo", {"text": "fits"})
            assert small.text == "fits"
    run(main())
