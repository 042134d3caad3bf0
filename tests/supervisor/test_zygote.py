"""Workers forked from the worker template (``HostSettings(worker_start="zygote")``): one
template per host, every worker a fork of it; a template that dies takes its workers
with it and the servers come back through a new one; nothing outlives the host. (The
supervisor's tests about worker processes run with both ways of starting them.)"""

from __future__ import annotations

import asyncio
import os
import signal

import orjson
import pytest
from test_supervisor import echo, process_alive, settings, wait_state

import httppeers
from conftest import child_pids, group_alive, run, scripted
from httppeers import http_peer  # noqa: F401 - a fixture
from trunkline import http
from trunkline.channel import ServerState
from trunkline.errors import TransportLost
from trunkline.parent.supervisor import Supervisor
from trunkline.settings import ServerConfig


def ppid_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def test_every_worker_is_a_fork_of_one_template(no_leaks):
    async def main():
        async with Supervisor(settings("zygote")) as sup:
            statuses = await sup.add_many(
                ServerConfig(f"s{i}", scripted()) for i in range(4))
            assert {s.state for s in statuses} == {ServerState.READY}
            workers = [s.worker_pid for s in statuses]
            (template,) = {ppid_of(pid) for pid in workers}
            assert template in child_pids()
            assert b"trunkline.worker.zygote" in cmdline(template)
            # Each worker leads its own session, as a spawned one does.
            assert all(os.getsid(pid) == pid for pid in workers)
            for i in range(4):
                assert await echo(sup, f"s{i}", f"t{i}") == f"t{i}"
            # A restarted worker comes from the same template.
            os.kill(workers[0], signal.SIGKILL)
            status = await wait_state(sup, "s0", ServerState.READY)
            while status.worker_pid in (None, workers[0]):
                await asyncio.sleep(0.01)
                status = sup.handle("s0").status()
            assert ppid_of(status.worker_pid) == template
            assert await echo(sup, "s0", "again") == "again"
        assert not process_alive(template)
    run(main())


def test_a_template_that_dies_takes_its_workers_and_the_servers_come_back(no_leaks):
    async def main():
        async with Supervisor(settings("zygote")) as sup:
            statuses = await sup.add_many(
                ServerConfig(f"s{i}", scripted()) for i in range(3))
            workers = [s.worker_pid for s in statuses]
            servers = [s.server_pid for s in statuses]
            (template,) = {ppid_of(pid) for pid in workers}
            stuck = asyncio.ensure_future(sup.request(
                "s0", "tools/call",
                orjson.dumps({"name": "sleep", "arguments": {"seconds": 30}}), timeout=60))
            await asyncio.sleep(0.3)
            os.kill(template, signal.SIGKILL)
            with pytest.raises(TransportLost):
                await stuck
            for i in range(3):
                status = await wait_state(sup, f"s{i}", ServerState.READY)
                while status.worker_pid in workers or status.worker_pid is None:
                    await asyncio.sleep(0.01)
                    status = sup.handle(f"s{i}").status()
                assert ppid_of(status.worker_pid) != template
                assert await echo(sup, f"s{i}", f"back{i}") == f"back{i}"
            assert not any(process_alive(pid) for pid in workers)
            assert not any(group_alive(pid) for pid in servers)
    run(main())


def test_a_template_that_cannot_start_leaves_the_server_unavailable(no_leaks, monkeypatch):
    from trunkline.parent import launchers

    monkeypatch.setattr(launchers, "_TEMPLATE_ARGV", ("/nonexistent/python",))

    async def main():
        async with Supervisor(settings("zygote")) as sup:
            status = await sup.add(ServerConfig("s", scripted()))
            assert status.state is ServerState.UNAVAILABLE
            assert "could not start the worker process" in status.reason
    run(main())


def test_http_and_stdio_workers_come_from_the_same_template(no_leaks, http_peer):
    """The template imports a Streamable HTTP worker's transport (httptools) before the
    first such fork; stdio and HTTP workers alike are its children and work."""
    argv, env = httppeers.scripted()
    peer = http_peer(argv, env)

    async def main():
        async with Supervisor(settings("zygote")) as sup:
            statuses = await sup.add_many([
                ServerConfig("local", scripted()),
                ServerConfig("remote1", http(peer.url)),
                ServerConfig("remote2", http(peer.url)),
            ])
            assert {s.state for s in statuses} == {ServerState.READY}
            assert len({ppid_of(s.worker_pid) for s in statuses}) == 1
            assert await echo(sup, "local", "here") == "here"
            for name in ("remote1", "remote2"):
                reply = await sup.request(name, "tools/call", orjson.dumps(
                    {"name": "echo", "arguments": {"text": name}}), timeout=30)
                assert reply.decode()["content"][0]["text"] == name
    run(main())
