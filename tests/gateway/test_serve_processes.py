"""``trunkline serve --http --processes N``: N whole gateways accepting on one socket, run
as an operator runs it. Where each call went is read from the upstreams' wire tap (each
copy has its own worker and upstream, so the tap's pid names the copy)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import taplog

from conftest import run, scripted
from gateways import HttpGateway, alive_with, fleet_config, sse_messages


def calls_by_pid(tap: Any) -> dict[int, list[Any]]:
    seen: dict[int, list[Any]] = {}
    for rec in taplog.load_records(tap):
        if rec["dir"] != taplog.IN:
            continue
        message = orjson.loads(rec["line"])
        if message.get("method") == "tools/call":
            seen.setdefault(rec["pid"], []).append(message["params"]["arguments"]["i"])
    return seen


async def fresh_connection_call(gw: HttpGateway, i: int) -> dict[str, Any]:
    """One call on its own TCP connection (each connection is accepted by one copy)."""
    return await gw.modern_on_new_connection("tools/call",
                                             {"name": "echo", "arguments": {"i": i}})


def copies(marker: str) -> list[int]:
    """The `serve --processes` copies alive (they carry --listen-fd), of this test's
    gateway (its config path in their command line)."""
    return [pid for pid in alive_with(marker) if pid in alive_with("--listen-fd")]


def test_copies_share_one_socket_and_a_session_is_served_by_its_copy(gateways, tmp_path, tap):
    path = fleet_config(tmp_path, {"alpha": scripted("--name", "procs-up-1", tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2")
        assert len(copies(str(path))) == 2
        answers = await asyncio.gather(*(fresh_connection_call(gw, i) for i in range(60)))
        assert [orjson.loads(a["result"]["content"][0]["text"]) for a in answers] == [
            {"i": i} for i in range(60)]
        by_pid = calls_by_pid(tap)
        assert sorted(i for got in by_pid.values() for i in got) == list(range(60)), \
            "every call reached an upstream exactly once"
        assert len(by_pid) == 2 and all(by_pid.values()), \
            f"both copies served calls: {({p: len(c) for p, c in by_pid.items()})}"
        # A legacy session's state is its copy's: whichever copy accepts a connection (the
        # kernel's choice), the session's requests are served by the copy that opened it
        # (the other passes them on), every one answered.
        session, _ = await gw.legacy_session()
        for i in range(100, 140):
            async with aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(force_close=True)) as http:
                async with http.post(gw.url, data=orjson.dumps(gw.message("tools/call", {
                        "name": "echo", "arguments": {"i": i}})), headers=session) as response:
                    assert response.status == 200, await response.text()
                    *_, answer = [m async for m in sse_messages(response)]
                    assert orjson.loads(answer["result"]["content"][0]["text"]) == {"i": i}
        legacy = {pid: [n for n in got if n >= 100] for pid, got in calls_by_pid(tap).items()}
        ran = [pid for pid, got in legacy.items() if got]
        assert len(ran) == 1 and legacy[ran[0]] == list(range(100, 140)), \
            f"one copy served the session: {({p: len(c) for p, c in legacy.items()})}"
        assert await gw.stop() == 0
    run(main())
    assert not alive_with("procs-up-1") and not copies(str(path))


def test_a_copy_that_dies_is_started_again_and_sigterm_leaves_nothing(gateways, tmp_path,
                                                                       tap):
    path = fleet_config(tmp_path, {"alpha": scripted("--name", "procs-up-2", tap=tap)})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--processes", "2", "--metrics")
        before = copies(str(path))
        assert len(before) == 2
        # Where the copies serve their metrics to each other (the command's own folder).
        environ = dict(item.split(b"=", 1) for item in
                       Path(f"/proc/{before[1]}/environ").read_bytes().split(b"\0") if item)
        pages_dir = environ[b"TRUNKLINE_COPIES_DIR"].decode()
        assert os.path.isdir(pages_dir)
        os.kill(before[0], signal.SIGKILL)
        # The other copy goes on serving while the dead one is replaced.
        answers = await asyncio.gather(*(fresh_connection_call(gw, i) for i in range(20)))
        assert all("result" in a for a in answers)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = copies(str(path))
            if len(now) == 2 and before[0] not in now:
                break
            await asyncio.sleep(0.1)
        now = copies(str(path))
        assert len(now) == 2 and before[0] not in now and before[1] in now, (before, now)
        # The killed copy's upstream went with its worker; the new copy has its own.
        deadline = time.monotonic() + 10
        while len(alive_with("procs-up-2")) != 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(alive_with("procs-up-2")) == 2
        answers = await asyncio.gather(*(fresh_connection_call(gw, i) for i in range(20, 40)))
        assert all("result" in a for a in answers)
        # The new copy serves its metrics where the dead one did: any copy's page has both.
        for _ in range(4):
            async with aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(force_close=True)) as http:
                async with http.get(f"{gw.base}/metrics") as response:
                    page = await response.text()
            assert 'trunkline_copy="0"' in page and 'trunkline_copy="1"' in page
        assert await gw.stop() == 0
        return pages_dir
    pages_dir = run(main())
    assert not alive_with("procs-up-2") and not copies(str(path))
    assert not os.path.exists(pages_dir), os.listdir(pages_dir)


def test_processes_need_http(tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    done = subprocess.run([sys.executable, "-m", "trunkline", "serve", str(path), "--stdio",
                           "--processes", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--processes needs --http" in done.stderr
