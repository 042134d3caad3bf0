"""The fleet changed while the host runs (issue 42): a server removed with a call in
flight (drained within the drain timeout, new calls refused as unavailable, its processes
gone), replaced by a new definition (a new worker negotiated afresh while the old one
drains), restarted by the operator, and many changes told to the catalog's watchers once
(``Host.batched``). Against the real mcp 2.x server of ``tests/peers/py_modern_echo.py``
(its ``sleep`` tool keeps a call in flight)."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace

import pytest

import realpeers
from conftest import group_alive, run
from trunkline.channel import ServerState
from trunkline.errors import ServerUnavailable, TransportLost, UnknownTool
from trunkline.params import stdio
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, ServerConfig

pytestmark = pytest.mark.real_servers

# Python servers start in 1-3 s under load: a generous probe deadline.
SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0,
                                                      legacy_probe_timeout_s=20.0))


def echo_server(name: str, **env: str) -> ServerConfig:
    server = realpeers.require(realpeers.MODERN_PY_ECHO)
    return ServerConfig(name, stdio(*server.argv, env={**server.env, **env}))


def tool(host: Host, server: str, local: str) -> str:
    (found,) = [t.name for t in host.tools() if t.server == server and t.local_name == local]
    return found


def status(host: Host, name: str):
    (found,) = [s for s in host.servers() if s.name == name]
    return found


def text(result) -> str:
    return result.content[0]["text"]


async def until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.02)


def gone(pid: int | None) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as exited)."""
    assert pid is not None
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True


def tasks_of(name: str) -> list[str]:
    """The names of the running tasks that are one server's (its scope, its watchers)."""
    return [t.get_name() for t in asyncio.all_tasks()
            if not t.done() and repr(name) in t.get_name()]


def test_a_removed_server_finishes_its_call_in_flight_refuses_new_ones_and_is_gone(no_leaks):
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([echo_server("slow"), echo_server("other")])
            kept = status(host, "other")
            leaving = status(host, "slow")
            sleep = tool(host, "slow", "sleep")
            in_flight = asyncio.ensure_future(host.call_tool(sleep, {"ms": 1500}))
            await until(lambda: status(host, "slow").in_flight == 1, "the call in flight")
            removal = asyncio.ensure_future(host.remove_server("slow", drain_s=60.0))
            await until(lambda: status(host, "slow").state is ServerState.DRAINING,
                        "the server draining")
            with pytest.raises(ServerUnavailable, match="removed from the configuration"):
                await host.call_tool(tool(host, "slow", "echo"), {"text": "late"})
            assert text(await in_flight) == "slept 1500"
            await removal
            assert "slow" not in [s.name for s in host.servers()]
            assert all(t.server != "slow" for t in host.tools())
            with pytest.raises(UnknownTool):
                await host.call_tool(sleep, {"ms": 1})
            assert gone(leaving.worker_pid) and not group_alive(leaving.server_pid)
            assert tasks_of("slow") == []
            # The other server was not touched: same worker, still answering.
            assert status(host, "other").worker_pid == kept.worker_pid
            answer = await host.call_tool(tool(host, "other", "echo"), {"text": "hi"})
            assert text(answer) == "hi"

    run(main())


def test_a_call_that_outlasts_the_drain_timeout_fails_as_unavailable(no_leaks):
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([echo_server("slow")])
            leaving = status(host, "slow")
            stuck = asyncio.ensure_future(
                host.call_tool(tool(host, "slow", "sleep"), {"ms": 60_000}, timeout=120))
            await until(lambda: status(host, "slow").in_flight == 1, "the call in flight")
            await host.remove_server("slow", drain_s=0.3)
            with pytest.raises(ServerUnavailable, match="did not finish within the drain "
                                                        "timeout"):
                await stuck
            assert host.servers() == [] and host.tools() == []
            assert gone(leaving.worker_pid) and not group_alive(leaving.server_pid)

    run(main())


def test_a_replaced_server_is_negotiated_afresh_while_the_old_one_drains(no_leaks):
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([echo_server("svc")])
            old = status(host, "svc")
            seen: list[tuple[str, str]] = []
            host.watch_servers(lambda s: seen.append((s.name, s.state.value)))
            in_flight = asyncio.ensure_future(
                host.call_tool(tool(host, "svc", "sleep"), {"ms": 1500}))
            await until(lambda: status(host, "svc").in_flight == 1, "the call in flight")
            new = await host.replace_server(echo_server("svc", CHANGED="1"), drain_s=60.0)
            assert text(await in_flight) == "slept 1500"
            assert new.state is ServerState.READY and new.era == "modern"
            assert new.worker_pid != old.worker_pid
            assert gone(old.worker_pid) and not group_alive(old.server_pid)
            # The new worker was negotiated from its start, and the name never went through
            # draining or stopped for whoever watches it: the new one took its place.
            assert seen[0] == ("svc", "starting") and ("svc", "ready") in seen
            assert not {"draining", "stopped"} & {state for _, state in seen}
            answer = await host.call_tool(tool(host, "svc", "echo"), {"text": "again"})
            assert text(answer) == "again"
            assert status(host, "svc").worker_pid == new.worker_pid

    run(main())


def test_the_operators_restart_starts_a_new_worker_and_lists_it_again(no_leaks):
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([echo_server("svc")])
            before = status(host, "svc")
            after = await host.restart_server("svc")
            assert after.state is ServerState.READY and after.era == "modern"
            assert after.worker_pid != before.worker_pid
            assert gone(before.worker_pid) and not group_alive(before.server_pid)
            assert any(t.local_name == "echo" for t in host.tools())
            answer = await host.call_tool(tool(host, "svc", "echo"), {"text": "back"})
            assert text(answer) == "back"

    run(main())


def test_changes_made_in_a_batch_are_told_to_the_catalogs_watchers_once(no_leaks):
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([echo_server("a"), echo_server("b")])
            told: list[int] = []
            host.watch_catalog(lambda catalog: told.append(len(catalog.entries)))
            with host.batched():
                await asyncio.gather(host.add_servers([echo_server("c")]),
                                     host.remove_server("b", drain_s=5.0))
                assert told == []  # held until the end
            assert len(told) == 1
            assert {t.server for t in host.tools()} == {"a", "c"}
            # A batch that changes nothing anyone sees tells nobody: a restart lists the
            # same tools again.
            with host.batched():
                await host.restart_server("a")
            assert len(told) == 1
            # Unbatched, the same changes are told one by one.
            await host.remove_server("c", drain_s=5.0)
            await host.add_servers([echo_server("b")])
            assert len(told) == 3

    run(main())


def test_a_worker_lost_while_its_server_drains_is_not_started_again(no_leaks):
    """A worker lost while its server drains is not started again: the server is
    leaving."""
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            await host.add_servers([echo_server("slow")])
            leaving = status(host, "slow")
            in_flight = asyncio.ensure_future(
                host.call_tool(tool(host, "slow", "sleep"), {"ms": 60_000}, timeout=120))
            await until(lambda: status(host, "slow").in_flight == 1, "the call in flight")
            removal = asyncio.ensure_future(host.remove_server("slow", drain_s=60.0))
            await until(lambda: status(host, "slow").state is ServerState.DRAINING,
                        "the server draining")
            os.kill(leaving.server_pid, 9)
            with pytest.raises(TransportLost):
                await in_flight
            await removal
            assert host.servers() == []
            assert gone(leaving.worker_pid)

    run(main())


def test_replace_of_an_unknown_server_is_refused_before_anything_starts(no_leaks):
    async def main() -> None:
        async with Host(settings=SETTINGS) as host:
            with pytest.raises(ServerUnavailable):
                await host.replace_server(replace(echo_server("nobody")))
            with pytest.raises(ServerUnavailable):
                await host.remove_server("nobody")
            assert host.servers() == []

    run(main())
