"""What the host tells an operator: each server's state changes as they happen
(``Host.watch_servers``), the latency of its recent calls (``Host.call_latency``,
``parent/latency.py``) and its last error; through real worker processes and servers."""

from __future__ import annotations

import asyncio

import pytest
from conftest import run, scripted
from gateways import fleet_config

from trunkline.channel import ServerState
from trunkline.errors import RequestTimeout, TransportLost
from trunkline.parent.host import Host
from trunkline.parent.latency import WINDOW, LatencyWindow
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, RestartPolicy

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0),
                        restart=RestartPolicy(base_s=0.01, cap_s=0.05))


def test_watchers_see_each_server_come_up_and_fail_closed_before_the_host_is_entered(
        tmp_path, no_leaks):
    path = fleet_config(tmp_path, {"new": scripted(), "old": scripted("--era", "legacy")})
    seen: list[tuple[str, str, str | None]] = []

    async def main():
        host = Host.from_config(path)
        stop = host.watch_servers(lambda s: seen.append((s.name, s.state.value, s.reason)))
        async with host:
            stop()
        return host

    run(main())
    new = [(state, reason) for name, state, reason in seen if name == "new"]
    old = [(state, reason) for name, state, reason in seen if name == "old"]
    assert new == [("starting", None), ("negotiating", None), ("ready", None)]
    assert [state for state, _ in old] == ["starting", "negotiating", "unavailable"]
    assert "allow_legacy=False" in old[-1][1]
    # Stopped after the watcher was removed: nothing more came.
    assert not any(state == "stopped" for _, state, _ in seen)


def test_a_crash_is_seen_as_restarting_then_ready_and_stays_the_last_error(no_leaks):
    states: list[str] = []

    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted())
            host.watch_servers(lambda s: states.append(s.state.value))
            with pytest.raises(TransportLost):
                await host.call_tool("crash", {}, timeout=30)
            while host.servers()[0].state is not ServerState.READY:
                await asyncio.sleep(0.01)
            return host.servers()[0]

    status = run(main())
    assert states[:4] == ["restarting", "starting", "negotiating", "ready"], states
    assert status.restarts == 1
    assert status.last_error and status.last_error_at is not None
    assert status.reason is None  # ready again: the reason went, the last error stays


def test_call_latency_counts_answered_calls_only(no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            await host.add_server("s", scripted())
            before = host.call_latency("s")
            for i in range(5):
                await host.call_tool("echo", {"i": i})
            answered = host.call_latency("s")
            with pytest.raises(RequestTimeout):
                await host.call_tool("sleep", {}, timeout=0.2)  # never answered
            return before, answered, host.call_latency("s"), host.servers()[0]

    before, answered, after, status = run(main())
    assert answered.answered == before.answered + 5
    assert after.answered == answered.answered  # the timeout is no sample...
    assert "no reply within 0.2 s" in status.last_error  # ...it is the last error
    assert status.in_flight == 0  # the timed-out call's slot was given back
    assert 0 < answered.p50_s <= answered.p99_s


def test_window_percentiles_are_nearest_ranks_of_the_last_window():
    window = LatencyWindow()
    assert window.summary().p50_s is None and window.summary().answered == 0
    for ms in range(1, 101):  # 1..100 ms
        window.add(ms / 1000)
    summary = window.summary()
    assert (summary.answered, summary.p50_s, summary.p99_s) == (100, 0.050, 0.099)
    for _ in range(WINDOW):  # the old samples leave the window
        window.add(2.0)
    summary = window.summary()
    assert (summary.answered, summary.p50_s, summary.p99_s) == (100 + WINDOW, 2.0, 2.0)
    for _ in range(WINDOW // 2 + 1):  # now most of the window
        window.add(0.5)
    assert window.summary().p50_s == 0.5 and window.summary().p99_s == 2.0
