"""Three ``trunkline serve --http`` replicas behind a real HAProxy (``tests/haproxy.py``),
as an operator runs them: round-robin, one session key shared by the replicas, health
checks of ``/readyz``, no retry of a request once it was sent.

Where each request landed is proven three ways: HAProxy's ``X-Replica`` response header,
its request log, and the wire tap of the upstream server behind each replica (every
replica has its own ``tests/peers/scripted.py``, named by a unique command-line marker).
Replicas are then lost the two ways they are lost in production: SIGKILL (calls in flight
there fail at once and visibly, nothing is retried elsewhere, nothing of the replica
lingers) and SIGTERM (it drains: its calls in flight finish while HAProxy moves traffic to
the others)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run, scripted
from gateways import (
    BOTH,
    JSON_ONLY,
    HttpGateway,
    alive_with,
    fleet_config,
    modern_meta,
    sse_messages,
)
from haproxy import Haproxy
from mcp_schema import LEGACY, MODERN
from nginx import Nginx

NAMES = ("r0", "r1", "r2")
SHARED_KEY = {"TRUNKLINE_SESSION_KEY": "replicas-share-this-key-0123456789"}


# --- the cluster ---------------------------------------------------------------------------


@dataclass
class Replica:
    """One ``trunkline serve --http`` process and the upstream server behind it."""

    name: str
    gateway: HttpGateway
    marker: str  # on the upstream's command line (its --name)
    tap: Path

    def upstream_calls(self) -> list[dict[str, Any]]:
        """The ``tools/call`` requests this replica's upstream received."""
        return [m for m in taplog.messages(self.tap) if m.get("method") == "tools/call"]


@dataclass
class Cluster:
    replicas: dict[str, Replica]
    lb: Haproxy
    http: aiohttp.ClientSession
    codes: dict[str, int] = field(default_factory=dict)

    async def stop(self) -> dict[str, int]:
        """Stop HAProxy and every replica still running; each replica's exit code."""
        await self.http.close()
        await self.lb.stop()
        for name, replica in self.replicas.items():
            if name not in self.codes:
                self.codes[name] = await replica.gateway.stop()
        return self.codes


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, gateways: Any, *flags: str, affinity: bool = False
                  ) -> AsyncIterator[Cluster]:
    """Three replicas sharing the session key, each named (``--replica``) as HAProxy knows
    it, HAProxy in front once all are UP (``affinity``: with the session routing of
    docs/how-to/load-balancer.md)."""
    run_id = uuid.uuid4().hex[:10]
    paths, markers, taps = {}, {}, {}
    for name in NAMES:
        (tmp_path / name).mkdir()
        markers[name] = f"replica-{name}-{run_id}"
        taps[name] = tmp_path / name / "tap.jsonl"
        paths[name] = fleet_config(tmp_path / name, {
            "alpha": scripted("--name", markers[name], tap=taps[name])})
    started = await asyncio.gather(*(HttpGateway.start(paths[name], gateways, *flags,
                                                       "--replica", name, env=SHARED_KEY)
                                     for name in NAMES))
    replicas = {name: Replica(name, gw, markers[name], taps[name])
                for name, gw in zip(NAMES, started, strict=True)}
    try:
        lb = await Haproxy.start(tmp_path, {name: r.gateway.url for name, r in replicas.items()},
                                 affinity=affinity)
    except BaseException:
        for replica in replicas.values():
            await replica.gateway.stop()
        raise
    # No connection limit: the load tests hold 150 exchanges open at once.
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    group = Cluster(replicas, lb, http)
    try:
        yield group
    finally:
        await group.stop()


# --- one exchange through the balancer ---------------------------------------------------------


def call_message(request_id: str, name: str, arguments: dict[str, Any],
                 progress: bool = False) -> dict[str, Any]:
    """A tools/call; with ``progress``, asking for progress (``sleep`` then streams at
    once: the gateway answers as SSE only once something comes before the answer)."""
    meta = modern_meta(progressToken=f"p-{request_id}") if progress else modern_meta()
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta}}


@dataclass
class Exchange:
    """One POST through HAProxy, as the client saw it."""

    request_id: Any
    replica: str | None = None  # X-Replica
    status: int | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)  # messages with an id
    error: str | None = None  # how the exchange failed at the client, if it did
    headers_seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def answer(self) -> dict[str, Any] | None:
        return self.answers[-1] if self.answers else None


async def post(http: aiohttp.ClientSession, url: str, message: dict[str, Any],
               accept: str = JSON_ONLY, headers: dict[str, str] | None = None,
               exchange: Exchange | None = None) -> Exchange:
    """POST ``message``; never raises for what the network or HAProxy does to it (that is
    recorded in ``error``/``status``), and never waits longer than 20 s (a hang is an
    error too)."""
    done = exchange or Exchange(message.get("id"))
    sent = headers if headers is not None else HttpGateway.modern_headers(message, accept)

    async def talk() -> None:
        async with http.post(url, data=orjson.dumps(message), headers=sent) as response:
            done.replica = response.headers.get("X-Replica")
            done.status = response.status
            done.headers_seen.set()
            if response.content_type == "text/event-stream":
                async for note in sse_messages(response):
                    if "id" in note:
                        done.answers.append(note)
            elif response.content_type == "application/json":
                raw = await response.read()
                if raw:
                    done.answers.append(orjson.loads(raw))
            else:
                await response.read()
    try:
        await asyncio.wait_for(talk(), 20)
    except TimeoutError:
        done.error = "hang: no end within 20 s"
    except aiohttp.ClientError as exc:
        done.error = f"{type(exc).__name__}: {exc}"
    done.headers_seen.set()
    return done


def text_of(exchange: Exchange) -> str:
    answer = exchange.answer
    assert answer is not None and "result" in answer, exchange
    return answer["result"]["content"][0]["text"]


async def until(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


# --- processes of a replica ------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``: pid -> command line."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] != "Z":
            parents[int(entry)] = stat[1]
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = _cmdline(pid)
                frontier.append(pid)
    return found


def still_running(processes: dict[int, str]) -> dict[int, str]:
    """Those of ``processes`` still running (not a zombie, and the same command line, so
    a reused pid is not mistaken for one of them)."""
    return {pid: cmd for pid, cmd in processes.items()
            if (stat := _stat(pid)) is not None and stat[0] != "Z" and _cmdline(pid) == cmd}


def kill_leftovers(processes: dict[int, str]) -> None:
    """A failed test must not leave the replica's processes behind: each leads its own
    process group (workers and servers start in new sessions)."""
    for pid in still_running(processes):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- the tests -------------------------------------------------------------------------------


def test_modern_requests_spread_over_every_replica_and_all_succeed(gateways, tmp_path):
    async def main():
        async with cluster(tmp_path, gateways) as c:
            discover = {"jsonrpc": "2.0", "id": "discover", "method": "server/discover",
                        "params": {"_meta": modern_meta()}}
            found = await post(c.http, c.lb.url, discover)
            assert found.status == 200, found
            assert found.answer["result"]["supportedVersions"] == [MODERN]
            listing = {"jsonrpc": "2.0", "id": "list", "method": "tools/list",
                       "params": {"_meta": modern_meta()}}
            listed = await post(c.http, c.lb.url, listing)
            assert {"echo", "sleep", "chatty"} <= {t["name"]
                                                   for t in listed.answer["result"]["tools"]}
            # 30 calls at once, every other one accepting an SSE stream (an echo has no
            # progress, so each is answered as JSON).
            exchanges = await asyncio.gather(*(
                post(c.http, c.lb.url, call_message(f"echo-{i}", "echo", {"i": i}),
                     BOTH if i % 2 else JSON_ONLY) for i in range(30)))
            for i, ex in enumerate(exchanges):
                assert ex.error is None and ex.status == 200, ex
                assert [a["id"] for a in ex.answers] == [f"echo-{i}"], ex
                assert json.loads(text_of(ex)) == {"i": i}
            by_header = {name: {ex.answer["id"] for ex in exchanges if ex.replica == name}
                         for name in NAMES}
            assert all(by_header.values()), f"a replica answered nothing: {by_header}"
            # Each replica's upstream ran exactly the calls its header claims.
            for name, replica in c.replicas.items():
                ran = {f"echo-{m['params']['arguments']['i']}" for m in replica.upstream_calls()}
                assert ran == by_header[name], name
            logged = Counter(entry.replica for entry in c.lb.requests()
                             if entry.mcp_method == "tools/call" and entry.status == 200)
            assert logged == Counter({n: len(ids) for n, ids in by_header.items()})
            assert await c.stop() == {name: 0 for name in NAMES}
    run(main(), timeout=60)


async def open_session(c: Cluster) -> tuple[dict[str, str], str]:
    """A legacy session opened through the balancer: its headers, and the replica that
    opened it."""
    plain = {"Accept": BOTH, "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {},
                       "clientInfo": {"name": "old", "version": "1"}}}
    async with c.http.post(c.lb.url, data=orjson.dumps(init), headers=plain) as response:
        assert response.status == 200
        session = response.headers["Mcp-Session-Id"]
        minted_by = response.headers["X-Replica"]
        assert (await response.json())["result"]["protocolVersion"] == LEGACY
    assert session.startswith(f"{minted_by}."), "the id names the replica that holds it"
    return {**plain, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}, minted_by


def test_a_legacy_session_reaching_another_replica_is_told_where_it_is_held(gateways,
                                                                            tmp_path):
    # Round-robin without the affinity recipe: the replica that opened the session serves
    # it; the others say, with the 404 that makes a client start a new session, that they
    # do not hold it and why (never a 202 that then does nothing).
    async def main():
        async with cluster(tmp_path, gateways) as c:
            in_session, minted_by = await open_session(c)
            answered = [await post(c.http, c.lb.url, {
                "jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"i": i}}}, headers=in_session)
                for i in range(6)]
            assert {ex.replica for ex in answered} == set(NAMES)
            for ex in answered:
                if ex.replica == minted_by:
                    assert ex.status == 200 and ex.answer["id"] == ex.request_id, ex
                else:
                    assert ex.status == 404, ex
                    message = ex.answer["error"]["message"]
                    assert minted_by in message and "start a new session" in message, message
            ran = {name: [m["params"]["arguments"]["i"] for m in r.upstream_calls()]
                   for name, r in c.replicas.items()}
            assert [name for name, got in ran.items() if got] == [minted_by], ran
            assert await c.stop() == {name: 0 for name in NAMES}
    run(main(), timeout=60)


def test_with_affinity_on_the_session_id_every_request_reaches_its_replica(gateways, tmp_path):
    async def main():
        async with cluster(tmp_path, gateways, affinity=True) as c:
            in_session, minted_by = await open_session(c)
            async with c.http.post(c.lb.url, headers=in_session, data=orjson.dumps(
                    {"jsonrpc": "2.0", "method": "notifications/initialized"})) as response:
                assert response.status == 202
            listed = await post(c.http, c.lb.url, {"jsonrpc": "2.0", "id": 1,
                                                   "method": "tools/list"}, headers=in_session)
            assert "echo" in [t["name"] for t in listed.answer["result"]["tools"]], listed
            calls = [await post(c.http, c.lb.url, {
                "jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"i": i}}}, headers=in_session)
                for i in range(6)]
            for i, ex in enumerate(calls):
                assert ex.error is None and ex.status == 200, ex
                assert ex.answer["id"] == 10 + i and json.loads(text_of(ex)) == {"i": i}
            assert {ex.replica for ex in [listed, *calls]} == {minted_by}
            # Modern requests, which hold no session, still go round every replica.
            modern = [await post(c.http, c.lb.url, call_message(f"m{i}", "echo", {"i": i}))
                      for i in range(6)]
            assert {ex.replica for ex in modern} == set(NAMES)
            # An id no replica signed is refused by whichever replica gets it.
            forged = {**in_session, "Mcp-Session-Id": in_session["Mcp-Session-Id"][:-2] + (
                "AA" if in_session["Mcp-Session-Id"][-2:] != "AA" else "BB")}
            refused = await post(c.http, c.lb.url, {"jsonrpc": "2.0", "id": 99,
                                                    "method": "tools/list"}, headers=forged)
            assert refused.status == 404
            assert await c.stop() == {name: 0 for name in NAMES}
    run(main(), timeout=60)


@pytest.mark.real_servers
def test_the_nginx_recipe_keeps_a_legacy_session_on_its_replica(gateways, tmp_path):
    async def main():
        started = {}
        for name in NAMES:
            (tmp_path / name).mkdir()
            path = fleet_config(tmp_path / name, {"alpha": scripted("--name", f"ng-{name}")})
            started[name] = await HttpGateway.start(path, gateways, "--replica", name,
                                                    env=SHARED_KEY)
        address = {name: gw.url.split("/")[2] for name, gw in started.items()}
        lb = await Nginx.start(tmp_path / "nginx", {n: gw.url for n, gw in started.items()})
        try:
            async with aiohttp.ClientSession() as http:
                plain = {"Accept": BOTH, "Content-Type": "application/json"}
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": LEGACY, "capabilities": {},
                                   "clientInfo": {"name": "old", "version": "1"}}}
                async with http.post(lb.url, data=orjson.dumps(init), headers=plain) as r:
                    assert r.status == 200, await r.text()
                    session = r.headers["Mcp-Session-Id"]
                    owner = session.split(".")[0]
                    assert r.headers["X-Replica"] == address[owner]
                in_session = {**plain, "Mcp-Session-Id": session,
                              "MCP-Protocol-Version": LEGACY}
                calls = [await post(http, lb.url, {
                    "jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"i": i}}}, headers=in_session)
                    for i in range(6)]
                assert all(ex.status == 200 and json.loads(text_of(ex)) == {"i": i}
                           for i, ex in enumerate(calls)), calls
                assert {ex.replica for ex in calls} == {address[owner]}
                modern = [await post(http, lb.url, call_message(f"m{i}", "echo", {"i": i}))
                          for i in range(6)]
                assert all(ex.status == 200 for ex in modern)
                assert len({ex.replica for ex in modern}) == 3, "the rest goes round"
            python = realpeers.PEERS_DIR / "py-legacy" / "bin" / "python"
            client = await asyncio.create_subprocess_exec(
                str(python), str(PEERS / "sdk_client.py"), "echo", json.dumps({"via": "ng"}),
                "--", lb.url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(client.communicate(), 60)
            assert client.returncode == 0, err.decode()[-3000:]
            done = json.loads(out.decode().strip().splitlines()[-1])
            assert json.loads(done["result"]["content"][0]["text"]) == {"via": "ng"}
        finally:
            await lb.stop()
        assert [await gw.stop() for gw in started.values()] == [0, 0, 0]
    run(main(), timeout=90)


@pytest.mark.real_servers
@pytest.mark.parametrize("venv", ["py-modern", "py-legacy"])
def test_the_official_python_clients_through_the_balancer(gateways, tmp_path, venv):
    python = realpeers.PEERS_DIR / venv / "bin" / "python"
    async def main():
        async with cluster(tmp_path, gateways, affinity=True) as c:
            client = await asyncio.create_subprocess_exec(
                str(python), str(PEERS / "sdk_client.py"), "echo", json.dumps({"via": venv}),
                "--", c.lb.url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(client.communicate(), 60)
            assert client.returncode == 0, err.decode()[-3000:]
            done = json.loads(out.decode().strip().splitlines()[-1])
            assert json.loads(done["result"]["content"][0]["text"]) == {"via": venv}
            assert {"echo", "sleep"} <= set(done["tools"])
            if venv == "py-modern":
                assert done["sdk"].startswith("2.") and MODERN in done["protocol"]
            else:
                assert done["sdk"].startswith("1.") and done["protocol"] == LEGACY
            exchanges = [e for e in c.lb.requests() if e.path == "/mcp"]
            # Every request served, the legacy client's closing DELETE (which ends its
            # session) included.
            assert all(e.status < 400 for e in exchanges), exchanges
            # A modern client's requests went round the replicas; a legacy client's all went
            # to the replica that opened its session (the affinity recipe); each was served.
            assert len(exchanges) >= 3 and len({e.replica for e in exchanges}) == (
                3 if venv == "py-modern" else 1), exchanges
            ran = {name: [m["params"]["arguments"] for m in r.upstream_calls()]
                   for name, r in c.replicas.items()}
            assert sorted(ran.values(), key=len) == [[], [], [{"via": venv}]], ran
            assert await c.stop() == {name: 0 for name in NAMES}
    run(main(), timeout=90)


def test_a_replica_killed_under_load_fails_only_its_own_calls_and_leaves_nothing(
        gateways, tmp_path):
    async def main():
        async with cluster(tmp_path, gateways) as c:
            victim = c.replicas["r1"]
            survivors = set(NAMES) - {"r1"}
            processes = descendants(victim.gateway.proc.pid)
            assert any("trunkline.worker" in cmd for cmd in processes.values()), processes
            assert any(victim.marker in cmd for cmd in processes.values()), processes
            try:
                await killed_under_load(c, victim, survivors, processes)
            finally:
                kill_leftovers(processes)
            codes = await c.stop()
            assert codes == {"r0": 0, "r1": -signal.SIGKILL, "r2": 0}
    run(main(), timeout=90)


async def killed_under_load(c: Cluster, victim: Replica, survivors: set[str],
                            processes: dict[int, str]) -> None:
    # 150 calls of 3 s in flight at once, half of them streamed (SSE), half plain JSON.
    exchanges = [Exchange(f"load-{i}") for i in range(150)]
    tasks = [asyncio.ensure_future(post(
        c.http, c.lb.url, call_message(ex.request_id, "sleep", {"seconds": 3,
                                                                 "call": ex.request_id},
                                       progress=bool(i % 2)),
        BOTH if i % 2 else JSON_ONLY, exchange=ex)) for i, ex in enumerate(exchanges)]
    try:
        await until(lambda: sum(len(r.upstream_calls()) for r in c.replicas.values()) >= 150,
                    20, "all 150 calls reached an upstream")
        on_victim = {m["params"]["arguments"]["call"] for m in victim.upstream_calls()}
        assert on_victim, "round-robin gave the victim nothing"
        os.kill(victim.gateway.proc.pid, signal.SIGKILL)
        assert await victim.gateway.proc.wait() == -signal.SIGKILL
        c.codes[victim.name] = -signal.SIGKILL
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    by_id = {ex.request_id: ex for ex in exchanges}
    assert not [ex for ex in exchanges if ex.error and ex.error.startswith("hang")]
    # Every call was delivered exactly once, to one replica: none was retried.
    delivered = Counter(m["params"]["arguments"]["call"]
                        for r in c.replicas.values() for m in r.upstream_calls())
    assert delivered == Counter({ex.request_id: 1 for ex in exchanges})
    for ex in exchanges:
        assert len(ex.answers) <= 1 and all(a["id"] == ex.request_id for a in ex.answers), ex
    # Off the victim: every call completed with its result.
    for request_id in set(by_id) - on_victim:
        ex = by_id[request_id]
        assert ex.error is None and ex.status == 200 and ex.replica in survivors, ex
        assert text_of(ex) == "slept 3s"
    # On the victim: a call that ended before the kill has its result; every call still in
    # flight failed, visibly, at the client. Streamed calls had their 200 and headers
    # already: the stream is cut before its answer. Plain ones get HAProxy's 502 naming
    # the replica.
    failed = []
    for request_id in sorted(on_victim):
        ex = by_id[request_id]
        assert ex.replica == victim.name, ex
        if ex.answers:
            assert ex.error is None and text_of(ex) == "slept 3s", ex
            continue
        failed.append(ex)
        if int(request_id.split("-")[1]) % 2 == 1:  # streamed
            assert ex.status == 200 and ex.error is not None, ex
        else:
            assert ex.status == 502 and ex.error is None, ex
    assert failed, "the kill hit no call in flight"
    # HAProxy logged the same exchanges as aborted by the server side.
    aborted = [e for e in c.lb.requests()
               if e.replica == victim.name and e.termination.startswith("S")]
    assert len(aborted) == len(failed), aborted
    # HAProxy takes the dead replica out; fresh requests go to the others and succeed.
    await c.lb.wait_for(lambda states: states[victim.name] == "DOWN", 10)
    fresh = [await post(c.http, c.lb.url, call_message(f"fresh-{i}", "echo", {"i": i}))
             for i in range(6)]
    for i, ex in enumerate(fresh):
        assert ex.status == 200 and json.loads(text_of(ex)) == {"i": i}, ex
    assert {ex.replica for ex in fresh} == survivors
    # Nothing of the killed replica is left: its workers and its upstream server notice
    # their parent is gone and end on their own.
    with contextlib.suppress(AssertionError):
        await until(lambda: not still_running(processes) and not alive_with(victim.marker),
                    10, "the killed replica's processes ended")
    left = still_running(processes)
    assert not left and not alive_with(victim.marker), (
        f"10 s after SIGKILL of the replica (pid {victim.gateway.proc.pid}) these of its "
        f"processes still run: {left}; with the marker: {alive_with(victim.marker)}")


def test_a_replica_stopped_under_load_drains_while_the_others_take_over(gateways, tmp_path):
    async def main():
        async with cluster(tmp_path, gateways) as c:
            victim = c.replicas["r1"]
            survivors = set(NAMES) - {"r1"}
            # Wave 1: 60 calls of 2 s in flight, streamed, so each names its replica.
            first = await start_calls(c, [f"first-{i}" for i in range(60)])
            await asyncio.wait_for(asyncio.gather(*(ex.headers_seen.wait()
                                                    for ex, _ in first)), 20)
            await until(lambda: len(victim.upstream_calls()) == sum(
                ex.replica == victim.name for ex, _ in first), 20,
                "the victim's upstream received all its calls")
            draining = [ex for ex, _ in first if ex.replica == victim.name]
            assert draining, "round-robin gave the victim nothing"
            victim.gateway.proc.send_signal(signal.SIGTERM)
            # Wave 2, while it drains: one new call every 20 ms.
            second = []
            for i in range(60):
                second += await start_calls(c, [f"second-{i}"], seconds=0.2)
                await asyncio.sleep(0.02)
            await asyncio.gather(*(task for _, task in (*first, *second)))
            for ex, _ in (*first, *second):
                seconds = "2" if ex.request_id.startswith("first") else "0.2"
                assert ex.error is None and ex.status == 200, ex
                assert [a["id"] for a in ex.answers] == [ex.request_id], ex
                assert text_of(ex) == f"slept {seconds}s", ex
            late = [ex for ex, _ in second if ex.replica == victim.name]
            assert not late, f"the stopping replica took new calls: {late}"
            assert {ex.replica for ex, _ in second} == survivors
            delivered = Counter(m["params"]["arguments"]["call"]
                                for r in c.replicas.values() for m in r.upstream_calls())
            assert delivered == Counter({ex.request_id: 1 for ex, _ in (*first, *second)})
            assert await asyncio.wait_for(victim.gateway.proc.wait(), 15) == 0
            await c.lb.wait_for(lambda states: states[victim.name] == "DOWN", 10)
            await until(lambda: not alive_with(victim.marker), 10, "its upstream ended")
            assert await c.stop() == {name: 0 for name in NAMES}
    run(main(), timeout=90)


async def start_calls(c: Cluster, ids: list[str], seconds: float = 2
                      ) -> list[tuple[Exchange, asyncio.Future[Exchange]]]:
    started = []
    for request_id in ids:
        ex = Exchange(request_id)
        message = call_message(request_id, "sleep", {"seconds": seconds, "call": request_id})
        started.append((ex, asyncio.ensure_future(
            post(c.http, c.lb.url, message, BOTH, exchange=ex))))
    return started
