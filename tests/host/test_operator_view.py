"""What the host tells an operator: each server's state changes as they happen
(``Host.watch_servers``), the latency of its recent calls (``Host.call_latency``,
``parent/latency.py``), its last error, and how to lift a refusal for want of the legacy
allowlist; through real worker processes and servers."""

from __future__ import annotations

import asyncio
import logging

import pytest

import realpeers
from conftest import run, scripted
from gateways import fleet_config
from trunkline.channel import ServerState
from trunkline.errors import RequestTimeout, ToolCandidate, TransportLost, UnknownTool
from trunkline.params import StdioParams
from trunkline.parent.handle import ServerWarning
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


@pytest.mark.real_servers
@pytest.mark.parametrize("server,tool,answer", [
    (realpeers.LEGACY_PY_TIME, "get_current_time",
     "answered server/discover with error -32602 'Invalid request parameters'"),
    (realpeers.LEGACY_TS_EVERYTHING, "echo",
     "answered server/discover with error -32601 'Method not found'"),
], ids=lambda v: getattr(v, "name", None))
def test_a_server_refused_for_want_of_the_allowlist_is_said_once_with_the_fix(
        tmp_path, caplog, no_leaks, server, tool, answer):
    """Issue 35, item 7: mcp-server-time on mcp 1.x and server-everything (legacy only),
    configured without ``allowLegacy``, are refused (fail closed), and the host says so
    at the default log level: one warning naming the server, what it answered and the
    fix, not said again when it is refused again the same way; its status and the host's
    warnings carry the same; a call to one of its tools names it as a server that may
    provide it, and why it is unavailable. Its environment's secret appears nowhere."""
    realpeers.require(server)
    secret = "sk-live-0123456789abcdef"
    path = fleet_config(tmp_path, {"legacy": StdioParams(
        server.argv[0], tuple(server.argv[1:]), {**server.env, "API_KEY": secret})})

    async def main():
        async with Host.from_config(path, discover_timeout_s=20.0) as host:
            (status,) = host.servers()
            warnings = host.warnings
            with pytest.raises(UnknownTool) as unknown:
                await host.call_tool(tool, {})
            again = await host.retry("legacy")  # refused again, the same way
            return status, warnings, unknown.value, again

    status, warnings, unknown, again = run(main())
    assert status.state is ServerState.UNAVAILABLE
    assert status.hint is not None and again.hint == status.hint
    assert status.hint.startswith(f"it {answer}, ")
    assert '"allowLegacy": true' in status.hint and "allow_legacy=True" in status.hint
    assert warnings == [ServerWarning("legacy", "not-allowlisted",
                                      f"unavailable: {status.hint}")]
    said = [r for r in caplog.records if r.name == "trunkline.host"
            and "allowLegacy" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert said[0].getMessage() == f"server 'legacy': unavailable: {status.hint}"
    assert unknown.candidates == (ToolCandidate("legacy", "unavailable", status.reason,
                                                status.hint, listed=False),)
    assert f"server 'legacy' is unavailable ({status.hint}) and may provide it" \
        in str(unknown)
    everything = [str(unknown), *map(str, warnings), *(r.getMessage() for r in caplog.records)]
    assert not any(secret in text for text in everything)


def test_other_refusals_give_no_allowlist_hint_and_a_known_owner_is_named_as_one(
        tmp_path, caplog, no_leaks):
    """A modern server with no revision in common (-32022) is refused for a reason the
    allowlist would not lift: no hint, no warning, but a call to a name nobody serves
    says it may provide it, and why it is unavailable. A server that listed a tool and
    then went down (a crash loop) is named as its owner; one whose listing lacks a name
    is not named for it."""
    path = fleet_config(tmp_path, {
        "s": scripted(), "new": scripted("--discover", "error-32022:2099-01-01")})
    settings = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0),
                            restart=RestartPolicy(max_restarts=0))

    async def main():
        async with Host.from_config(path, settings=settings) as host:
            with pytest.raises(TransportLost):
                await host.call_tool("crash", {}, timeout=30)
            while host.servers()[0].state is not ServerState.UNAVAILABLE:  # the crash loop
                await asyncio.sleep(0.01)
            errors = {}
            for name in ("echo", "nope"):
                with pytest.raises(UnknownTool) as unknown:
                    await host.call_tool(name, {})
                errors[name] = unknown.value
            return host.servers(), host.warnings, errors

    (s, new), warnings, errors = run(main())
    assert new.state is ServerState.UNAVAILABLE and "no shared modern" in (new.reason or "")
    assert new.hint is None and s.hint is None
    assert not any(isinstance(w, ServerWarning) for w in warnings)
    assert not any("allowLegacy" in r.getMessage() for r in caplog.records)
    assert errors["echo"].candidates == (
        ToolCandidate("s", "unavailable", s.reason, None, listed=True),
        ToolCandidate("new", "unavailable", new.reason, None, listed=False))
    assert f"server 's' listed it but is unavailable: {s.reason}" in str(errors["echo"])
    assert f"server 'new' is unavailable ({new.reason}) and may provide it" \
        in str(errors["echo"])
    assert [c.server for c in errors["nope"].candidates] == ["new"]
