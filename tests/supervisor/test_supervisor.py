"""The supervisor with real worker processes and real server subprocesses: routing,
crash isolation, restarts with backoff and intensity limits, back-pressure, and no leaked
process, descriptor, thread or pending call."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
import taplog
import uvloop
from hypothesis import given
from hypothesis import strategies as st

from conftest import child_pids, group_alive, open_fd_kinds, run, scripted
from trunkline.channel import ServerState
from trunkline.errors import RequestTimeout, ServerUnavailable, TransportLost
from trunkline.parent.supervisor import Supervisor
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, RestartPolicy, ServerConfig

FAST_RESTART = RestartPolicy(base_s=0.001, cap_s=0.01, max_restarts=10_000, window_s=1.0)
SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=10.0),
                        restart=FAST_RESTART)
#: Both ways a worker starts (``HostSettings.worker_start``): the tests that are about
#: worker processes run with each.
STARTS = pytest.mark.parametrize("start", ["spawn", "zygote"])


def settings(start: str) -> HostSettings:
    return dataclasses.replace(SETTINGS, worker_start=start)


def echo_params(text: str) -> bytes:
    return orjson.dumps({"name": "echo", "arguments": {"token": text}})


async def echo(sup: Supervisor, server: str, token: str, timeout: float = 30) -> str:
    reply = await sup.request(server, "tools/call", echo_params(token), timeout=timeout)
    result = reply.decode()
    return orjson.loads(result["content"][0]["text"])["token"]


async def wait_state(sup: Supervisor, name: str, state: ServerState, timeout: float = 30):
    handle = sup.handle(name)
    deadline = time.monotonic() + timeout
    while handle.state is not state:
        assert time.monotonic() < deadline, f"{name} stuck in {handle.state}: {handle.reason}"
        await asyncio.sleep(0.01)
    return handle.status()


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


@STARTS
def test_routes_each_call_to_its_server_and_reports_state(no_leaks, start):
    async def main():
        async with Supervisor(settings(start)) as sup:
            statuses = await sup.add_many(
                ServerConfig(f"s{i}", scripted("--name", f"peer-{i}")) for i in range(3))
            assert [s.state for s in statuses] == [ServerState.READY] * 3
            assert {s.era for s in statuses} == {"modern"}
            assert [s.server_info["name"] for s in statuses] == ["peer-0", "peer-1", "peer-2"]
            for i in range(3):
                assert await echo(sup, f"s{i}", f"t{i}") == f"t{i}"
            reply = await sup.request("s1", "tools/list", b"{}", timeout=10)
            assert {"echo", "search"} <= {t["name"] for t in reply.decode()["tools"]}
        assert {s.state for s in sup.statuses()} == {ServerState.STOPPED}
    run(main())


def held(pid: int) -> dict[int, str]:
    """What each descriptor of ``pid`` refers to (``socket:[inode]``, ``pipe:[inode]``, a
    path)."""
    targets = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            targets[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return targets


@pytest.fixture(scope="module")
def uvloop_warmed() -> None:
    """libuv opens a pipe once per process, the first time a loop starts a child, and
    keeps it: made here, before ``no_leaks`` counts descriptors."""
    async def spawn_once():
        process = await asyncio.create_subprocess_exec("true")
        await process.wait()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(spawn_once())


@STARTS
def test_a_worker_and_its_server_hold_nothing_of_the_host_or_each_other(
        uvloop_warmed, no_leaks, start):
    """The server is a stranger to the host: it gets its stdio and nothing else. A server
    holding the worker's end of the channel could write frames to the host (answer other
    calls, fake the worker's state) or read the calls meant for the worker; one holding
    the host's descriptors (a gateway's listening socket, say) could use them. The host
    runs on uvloop here, whose subprocess_exec passes on every inheritable descriptor
    (``close_fds`` ignored): a pipe the host made inheritable must reach neither."""
    async def main():
        async with Supervisor(settings(start)) as sup:
            (status,) = await sup.add_many([ServerConfig("s", scripted())])
            assert status.state is ServerState.READY
            worker, server = held(status.worker_pid), held(status.server_pid)
            hosts = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in host_pipe}
            assert hosts.isdisjoint(worker.values()), worker
            assert hosts.isdisjoint(server.values()), server
            shared = {t for t in worker.values() if t.startswith("socket:")} & set(
                server.values())
            assert shared == set(), f"the server holds the worker's sockets {shared}"
            assert await echo(sup, "s", "still here") == "still here"

    host_pipe = os.pipe()
    try:
        for fd in host_pipe:
            os.set_inheritable(fd, True)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(asyncio.wait_for(main(), 60))
    finally:
        for fd in host_pipe:
            os.close(fd)


def test_a_state_watcher_that_fails_stops_no_server(no_leaks):
    """A watcher of the servers' states that raises (``trunkline probe`` writing its
    progress to a pipe whose reader has gone) is logged; every server still becomes ready
    and is called, instead of a transition left half made and its waiters waiting."""
    told: list[str] = []

    def watcher(handle):
        told.append(handle.state.value)
        if len(told) > 2:
            raise BrokenPipeError(32, "Broken pipe")

    async def main():
        async with Supervisor(SETTINGS, on_state=watcher) as sup:
            statuses = await asyncio.wait_for(
                sup.add_many(ServerConfig(f"s{i}", scripted()) for i in range(3)), 60)
            assert [s.state for s in statuses] == [ServerState.READY] * 3
            assert await echo(sup, "s1", "still") == "still"
        assert "ready" in told
    run(main())


def test_thousands_of_concurrent_calls_each_matched_once(no_leaks):
    """Correctness under load: every result matched to its own call, none lost, none
    doubled."""
    async def main():
        async with Supervisor(SETTINGS) as sup:
            await sup.add_many(ServerConfig(f"s{i}", scripted()) for i in range(4))
            tokens = [f"{i % 4}-{i}-{random.random()}" for i in range(4000)]
            results = await asyncio.gather(*(echo(sup, f"s{int(t[0])}", t) for t in tokens))
            assert results == tokens
    run(main())


@STARTS
@pytest.mark.parametrize("victim", ["server", "worker"])
def test_kill_9_one_server_or_worker_mid_call_others_unaffected(no_leaks, victim, start):
    async def main():
        async with Supervisor(settings(start)) as sup:
            await sup.add_many(ServerConfig(f"s{i}", scripted()) for i in range(3))
            doomed = sup.handle("s0").status()
            # Calls that are certainly in flight on s0 when it dies.
            stuck = [asyncio.ensure_future(sup.request(
                "s0", "tools/call",
                orjson.dumps({"name": "sleep", "arguments": {"seconds": 30}}), timeout=60))
                for _ in range(20)]
            others = [asyncio.ensure_future(echo(sup, f"s{1 + i % 2}", f"tok-{i}"))
                      for i in range(2000)]
            await asyncio.sleep(0.3)
            os.kill(doomed.server_pid if victim == "server" else doomed.worker_pid,
                    signal.SIGKILL)
            for fut in stuck:
                with pytest.raises(TransportLost):
                    await fut
            assert await asyncio.gather(*others) == [f"tok-{i}" for i in range(2000)]
            # The dead pair is replaced: a new worker, a new server, renegotiated.
            status = await wait_state(sup, "s0", ServerState.READY)
            assert status.restarts == 1
            assert status.server_pid != doomed.server_pid
            assert not group_alive(doomed.server_pid)
            assert await echo(sup, "s0", "after") == "after"
    run(main())


@STARTS
def test_transport_lost_carries_exit_code_and_stderr_tail(no_leaks, start):
    async def main():
        async with Supervisor(settings(start)) as sup:
            await sup.add(ServerConfig("c", scripted("--stderr-flood", "4k")))
            with pytest.raises(TransportLost) as info:
                await sup.request("c", "tools/call",
                                  orjson.dumps({"name": "crash", "arguments": {}}), timeout=30)
            assert "exit code 4" in str(info.value)
            assert info.value.stderr_tail
    run(main())


@STARTS
def test_200_crash_restart_cycles_leak_nothing(start):
    """After 200 crash/restart cycles the parent has the same child processes, open file
    descriptors (a forked worker's pidfd among them) and threads as before."""
    async def main():
        async with Supervisor(settings(start)) as sup:
            await sup.add(ServerConfig("crashy", scripted()))
            await asyncio.sleep(0.2)
            before = (child_pids(), open_fd_kinds(), threading.active_count())
            for cycle in range(200):
                with pytest.raises(TransportLost):
                    await sup.request("crashy", "tools/call",
                                      orjson.dumps({"name": "crash", "arguments": {}}),
                                      timeout=30)
                status = await wait_state(sup, "crashy", ServerState.READY)
                assert status.restarts == cycle + 1
            assert await echo(sup, "crashy", "still here") == "still here"
            await asyncio.sleep(0.2)  # let the last reaper thread finish
            after = (child_pids(), open_fd_kinds(), threading.active_count())
            assert len(after[0]) == len(before[0]), "child process count changed"
            assert after[1] == before[1], (
                f"fds gained {after[1] - before[1]}, lost {before[1] - after[1]}")
            assert after[2] == before[2], "thread count changed"
        assert not child_pids()
    run(main(), timeout=600)


@STARTS
def test_sigkill_of_the_host_leaves_no_worker_or_server(start):
    host = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("host_process.py")), "3", start],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        info = json.loads(host.stdout.readline())
        assert info["states"] == ["ready"] * 3
        pids = info["workers"] + info["servers"]
        assert all(process_alive(p) for p in pids)
        host.kill()
        host.wait()
        deadline = time.monotonic() + 15
        while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = [p for p in pids if process_alive(p)]
        assert not survivors, f"orphans after the host was SIGKILLed: {survivors}"
        assert not any(group_alive(p) for p in info["servers"])
    finally:
        if host.poll() is None:
            host.kill()
        host.wait()
        host.stdout.close()


def test_back_pressure_bounds_calls_in_flight_per_server(tap, no_leaks):
    async def main():
        async with Supervisor(SETTINGS) as sup:
            await sup.add(ServerConfig("bp", scripted(tap=tap), max_in_flight=4))
            params = orjson.dumps({"name": "sleep", "arguments": {"seconds": 0.05}})
            await asyncio.gather(*(sup.request("bp", "tools/call", params, timeout=60)
                                   for _ in range(40)))
            # Waiting for a slot is bounded by the call's own timeout.
            slow = orjson.dumps({"name": "sleep", "arguments": {"seconds": 5}})
            busy = [asyncio.ensure_future(sup.request("bp", "tools/call", slow, timeout=60))
                    for _ in range(4)]
            await asyncio.sleep(0.2)
            with pytest.raises(RequestTimeout, match="in-flight slot"):
                await sup.request("bp", "tools/call", params, timeout=0.3)
            await asyncio.gather(*busy)
    run(main())
    in_flight = peak = 0
    calls: set = set()
    for direction, line in taplog.load(tap):
        msg = orjson.loads(line)
        if direction == taplog.IN and msg.get("method") == "tools/call":
            calls.add(msg["id"])
            in_flight += 1
        elif direction == taplog.OUT and "method" not in msg and msg.get("id") in calls:
            in_flight -= 1
        peak = max(peak, in_flight)
    assert peak == 4


def test_refused_server_is_unavailable_without_restart_and_isolated(no_leaks):
    async def main():
        async with Supervisor(SETTINGS) as sup:
            statuses = await sup.add_many([
                ServerConfig("legacy", scripted("--era", "legacy")),
                ServerConfig("good", scripted()),
            ])
            refused, good = statuses
            assert refused.state is ServerState.UNAVAILABLE
            assert "era refused" in refused.reason and refused.evidence
            assert good.state is ServerState.READY
            with pytest.raises(ServerUnavailable, match="era refused"):
                await echo(sup, "legacy", "x")
            assert await echo(sup, "good", "y") == "y"
            await asyncio.sleep(0.2)
            assert sup.handle("legacy").status().restarts == 0
    run(main())


@STARTS
def test_spawn_failure_is_reported(no_leaks, start):
    async def main():
        async with Supervisor(settings(start)) as sup:
            from trunkline.params import stdio
            status = await sup.add(ServerConfig("ghost", stdio("/nonexistent/mcp-server")))
            assert status.state is ServerState.UNAVAILABLE
            assert "spawn failed" in status.reason
    run(main())


def test_crash_loop_trips_the_intensity_limit_and_retry_recovers(no_leaks):
    policy = RestartPolicy(base_s=0.001, cap_s=0.01, max_restarts=2, window_s=60,
                           cool_down_s=3600)
    async def main():
        async with Supervisor(HostSettings(restart=policy)) as sup:
            await sup.add(ServerConfig("loop", scripted()))
            crash = orjson.dumps({"name": "crash", "arguments": {}})
            for _ in range(2):
                with pytest.raises(TransportLost):
                    await sup.request("loop", "tools/call", crash, timeout=30)
                await wait_state(sup, "loop", ServerState.READY)
            with pytest.raises(TransportLost):
                await sup.request("loop", "tools/call", crash, timeout=30)
            status = await wait_state(sup, "loop", ServerState.UNAVAILABLE)
            assert "crash loop" in status.reason
            with pytest.raises(ServerUnavailable, match="crash loop"):
                await echo(sup, "loop", "x")
            status = await sup.retry("loop")
            assert status.state is ServerState.READY
            assert await echo(sup, "loop", "back") == "back"
    run(main())


class _FixedDelay(RestartPolicy):
    """Full jitter can pick a delay of ~0; this test needs the RESTARTING state to last."""

    def delay(self, attempt: int, rng: random.Random) -> float:
        return 0.5


def test_calls_wait_for_a_restart_within_their_timeout(no_leaks):
    slow_restart = _FixedDelay(max_restarts=100)
    async def main():
        async with Supervisor(HostSettings(restart=slow_restart)) as sup:
            await sup.add(ServerConfig("w", scripted()))
            os.kill(sup.handle("w").status().server_pid, signal.SIGKILL)
            await wait_state(sup, "w", ServerState.RESTARTING)
            assert await echo(sup, "w", "patient", timeout=30) == "patient"
            await sup.add(ServerConfig("f", scripted(), wait_ready=False))
            os.kill(sup.handle("f").status().server_pid, signal.SIGKILL)
            await wait_state(sup, "f", ServerState.RESTARTING)
            with pytest.raises(ServerUnavailable, match="restarting"):
                await echo(sup, "f", "impatient")
    run(main())


@STARTS
def test_shutdown_of_a_stubborn_server_is_bounded(no_leaks, start):
    async def main():
        sup = Supervisor(settings(start))
        await sup.add(ServerConfig("stubborn", scripted("--ignore-eof", "--ignore-sigterm")))
        status = sup.handle("stubborn").status()
        await sup.aclose()  # bounded: run() below fails the test if it hangs
        assert not group_alive(status.server_pid)
        assert not process_alive(status.worker_pid)
    run(main(), timeout=60)


@given(attempt=st.integers(0, 60), seed=st.integers(0, 2**32))
def test_backoff_delay_is_full_jitter_within_the_cap(attempt, seed):
    policy = RestartPolicy(base_s=0.05, factor=2.0, cap_s=5.0)
    delay = policy.delay(attempt, random.Random(seed))
    assert 0.0 <= delay <= min(5.0, 0.05 * 2.0 ** attempt)


def test_backoff_uses_the_whole_jitter_range():
    policy = RestartPolicy(base_s=1.0, factor=2.0, cap_s=4.0)
    rng = random.Random(7)
    delays = [policy.delay(5, rng) for _ in range(2000)]
    assert max(delays) <= 4.0 and max(delays) > 3.8 and min(delays) < 0.2


def test_timeout_cancels_on_the_wire_and_late_replies_are_dropped(tap, no_leaks):
    async def main():
        async with Supervisor(SETTINGS) as sup:
            await sup.add(ServerConfig("t", scripted(tap=tap)))
            never = orjson.dumps({"name": "sleep", "arguments": {}})
            late = orjson.dumps({"name": "sleep", "arguments": {"seconds": 0.5}})
            with pytest.raises(RequestTimeout, match=r"no reply within 0\.2 s") as info:
                await sup.request("t", "tools/call", never, timeout=0.2)
            assert info.value.server == "t" and info.value.method == "tools/call"
            # Many deadlines at once, interleaved with calls that do answer in time.
            results = await asyncio.gather(
                *(sup.request("t", "tools/call", late, timeout=0.1) for _ in range(5)),
                *(echo(sup, "t", f"ok{i}") for i in range(5)),
                return_exceptions=True)
            assert all(isinstance(r, RequestTimeout) for r in results[:5])
            assert results[5:] == [f"ok{i}" for i in range(5)]
            await asyncio.sleep(0.3)
    run(main())
    records = [orjson.loads(line) for line in taplog.lines(tap, taplog.IN)]
    calls = [m["id"] for m in records if m.get("method") == "tools/call"
             and m["params"]["name"] == "sleep"]
    cancelled = [m["params"]["requestId"] for m in records
                 if m.get("method") == "notifications/cancelled"]
    assert sorted(cancelled) == sorted(calls) and len(calls) == 6
