"""``trunkline serve --http`` changes its fleet while it serves (issue 42): the
configuration file is rewritten and the gateway told (SIGHUP, or ``--watch-config``) while
clients call without pause, and every change is made by difference.

Behind it, real servers of both eras: the TypeScript SDK v2 server (``modern-ts``) and the
mcp 1.x time server (legacy), which stay; two mcp 2.x echo servers, one removed and one
whose arguments change; added, a second mcp 1.x time server that takes a while to start
(with ``--watch-config``: a second ``modern-ts``). In front, modern (2026-07-28) clients
calling over Streamable HTTP on 127.0.0.1, a legacy (2025-11-25) session calling too, a
modern listen stream granted every list and the legacy session's GET stream.

What is checked, reload by reload:

- no call to a server that stays fails, and those servers keep their processes;
- the calls in flight to a removed server finish within the drain timeout, or fail with
  an error naming it once it is over (never a hang); a new call to it fails at once; its
  processes (server and worker) end;
- a changed server serves on while it is replaced (no call to it fails), its old
  processes end and the new one runs with the new arguments;
- ``/readyz`` says a reload is under way and which servers are still starting, and stays
  ready;
- a file that cannot be read is refused with the reason in the log, and the fleet serves
  on; a file that changes nothing changes nothing;
- each stream hears one ``notifications/<list>/list_changed`` per reload that changed what
  it sees in that list (tools, prompts, resources) and none for one that did not;
- the gateway holds as many descriptors (but its clients' connections) after the reloads
  as before, with as many servers; when it stops, no process of the run is left (each
  carries the run's marker in its environment, read from ``/proc``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

import realpeers
from conftest import run
from gateways import SUB, HttpGateway, modern_meta, sse_messages
from mcp_schema import LEGACY

pytestmark = pytest.mark.real_servers

#: Each list a client sees, and the notification that says it changed.
LISTS = ("tools", "prompts", "resources")
CHANGED = {f"notifications/{kind}/list_changed": kind for kind in LISTS}
#: Seconds a removed server's calls in flight are given (``serve --drain-timeout``).
DRAIN_S = 3.0
#: Seconds the added server takes before it starts (a slow starter, for ``/readyz``).
SLOW_START_S = 2
#: Bounds against a hang (never pass/fail thresholds): one call, one wait for a state.
CALL_BOUND_S = 30.0
WAIT_BOUND_S = 30.0
#: The gateway says each reload, made or refused (a reload that changes nothing: at info).
LOG_INFO = ("--log-level", "info")
#: The variable each process of a run carries (its value: the run's marker).
MARKER = "TRUNKLINE_RELOAD_LOAD_RUN"


# -- the fleet on disk ---------------------------------------------------------------------

def entry(server: realpeers.RealServer, run_id: str, *extra: str,
          legacy: bool = False) -> dict[str, Any]:
    """An ``mcpServers`` entry for a real server, its processes marked with ``run_id``."""
    realpeers.require(server)
    found: dict[str, Any] = {"command": server.argv[0],
                             "args": [*server.argv[1:], *extra],
                             "env": {**server.env, MARKER: run_id}}
    if legacy:
        found["allowLegacy"] = True
    return found


def slow_entry(server: realpeers.RealServer, run_id: str, *,
               legacy: bool = False) -> dict[str, Any]:
    """``server`` started only after ``SLOW_START_S`` seconds (a shell waits, then becomes
    the server)."""
    found = entry(server, run_id, legacy=legacy)
    sleep = shutil.which("sleep")
    assert sleep is not None
    return {**found, "command": "/bin/sh",
            "args": ["-c", f'{sleep} {SLOW_START_S} && exec "$0" "$@"', *server.argv]}


def write_config(path: Path, servers: dict[str, dict[str, Any]] | str) -> None:
    """Put a configuration in place at once (a reload never reads half a file)."""
    draft = path.with_suffix(".draft")
    draft.write_text(servers if isinstance(servers, str)
                     else json.dumps({"mcpServers": servers}, indent=2))
    os.replace(draft, path)


# -- processes, from /proc -----------------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    """One process, by pid and start time (a pid may be reused; the pair may not)."""

    pid: int
    started: int

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat[2] == self.started and stat[0] != b"Z"


def _stat(pid: int) -> tuple[bytes, int, int] | None:
    """(state, ppid, start time) of ``pid``; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[19])


def marked(run_id: str) -> dict[Proc, dict[str, Any]]:
    """Every live process carrying the run's marker: its parent and the server it runs
    (``role``: the fleet entry's name, from ``TRUNKLINE_RELOAD_LOAD_ROLE``) and argv."""
    needle = f"{MARKER}={run_id}".encode()
    found: dict[Proc, dict[str, Any]] = {}
    for entry_name in os.listdir("/proc"):
        if not entry_name.isdigit():
            continue
        pid = int(entry_name)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        stat = _stat(pid)
        if needle not in environ or stat is None or stat[0] == b"Z":
            continue
        role = next((v.split(b"=", 1)[1].decode() for v in environ
                     if v.startswith(b"TRUNKLINE_RELOAD_LOAD_ROLE=")), None)
        found[Proc(pid, stat[2])] = {"ppid": stat[1], "role": role, "argv": argv}
    return found


def servers_of(run_id: str) -> dict[str, list[tuple[Proc, Proc | None, list[str]]]]:
    """Each fleet entry's live server processes: (server, its parent: the worker, argv)."""
    everything = marked(run_id)
    by_pid = {p.pid: p for p in everything}
    found: dict[str, list[tuple[Proc, Proc | None, list[str]]]] = {}
    for proc, seen in everything.items():
        if seen["role"] is not None:
            parent = by_pid.get(seen["ppid"])
            if parent is None:  # the worker does not carry the marker: read it by pid
                stat = _stat(seen["ppid"])
                parent = None if stat is None else Proc(seen["ppid"], stat[2])
            found.setdefault(seen["role"], []).append((proc, parent, seen["argv"]))
    return found


def one_server(run_id: str, role: str) -> tuple[Proc, Proc, list[str]]:
    (found,) = servers_of(run_id).get(role, [])
    server, worker, argv = found
    assert worker is not None, (role, server)
    return server, worker, argv


def fd_kinds(pid: int) -> Counter[str]:
    """What ``pid`` holds open, by kind, counted: ``unix socket`` (a worker's channel, the
    worker template's), ``tcp socket`` (the listening socket, a client's connection),
    ``pipe``, ``anon_inode:[pidfd]`` (a worker), a file's path."""
    with open(f"/proc/{pid}/net/unix") as f:
        unix = {line.split()[6] for line in f.readlines()[1:]}
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            kinds["unix socket" if target[8:-1] in unix else "tcp socket"] += 1
        else:
            kinds[target.split(":[", 1)[0] if target.startswith("pipe:") else target] += 1
    return kinds


def held(pid: int) -> Counter[str]:
    """What ``pid`` holds open but its clients' connections: what its fleet holds."""
    kinds = fd_kinds(pid)
    del kinds["tcp socket"]
    return kinds


# -- the clients ---------------------------------------------------------------------------

@dataclass
class Call:
    who: str
    tool: str
    started: float
    ended: float
    outcome: str  # "ok", or what went wrong
    answer: Any = None


def outcome_of(status: int, answer: Any) -> str:
    if status != 200 or not isinstance(answer, dict):
        return f"status {status}: {str(answer)[:300]}"
    if "error" in answer:
        return f"error: {str(answer['error'])[:300]}"
    if answer.get("result", {}).get("isError"):
        return f"tool error: {str(answer['result'])[:300]}"
    return "ok"


async def modern_call(gw: HttpGateway, who: str, tool: str, arguments: dict[str, Any],
                      calls: list[Call] | None = None) -> Call:
    started = time.monotonic()
    try:
        status, answer = await asyncio.wait_for(
            gw.modern("tools/call", {"name": tool, "arguments": arguments}), CALL_BOUND_S)
        outcome = outcome_of(status, answer)
    except Exception as exc:  # noqa: BLE001 - a lost call is what the test looks for
        answer, outcome = None, f"lost: {exc!r}"
    call = Call(who, tool, started, time.monotonic(), outcome, answer)
    if calls is not None:
        calls.append(call)
    return call


async def legacy_call(gw: HttpGateway, session: dict[str, str], who: str, tool: str,
                      arguments: dict[str, Any], calls: list[Call]) -> Call:
    started = time.monotonic()
    message = gw.message("tools/call", {"name": tool, "arguments": arguments})
    try:
        status, answer, _ = await asyncio.wait_for(gw.post(message, session), CALL_BOUND_S)
        outcome = outcome_of(status, answer)
    except Exception as exc:  # noqa: BLE001 - a lost call is what the test looks for
        answer, outcome = None, f"lost: {exc!r}"
    call = Call(who, tool, started, time.monotonic(), outcome, answer)
    calls.append(call)
    return call


#: What the load asks of the servers that stay: the modern TS server and the legacy one.
STAYING_LOAD = [("keep_sleep", {"ms": 40}), ("keep_echo", {"text": "hi"}),
                ("old_get_current_time", {"timezone": "UTC"})]


@dataclass
class Load:
    """Clients calling the servers that stay without pause until ``stop``: modern ones
    and one legacy session."""

    gw: HttpGateway
    legacy: dict[str, str]
    modern_clients: int = 3
    calls: list[Call] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            for n in range(self.modern_clients):
                tasks.create_task(self._modern(n))
            tasks.create_task(self._legacy())

    async def _modern(self, n: int) -> None:
        turn = n
        while not self.stopping.is_set():
            tool, arguments = STAYING_LOAD[turn % len(STAYING_LOAD)]
            await modern_call(self.gw, f"modern-{n}", tool, arguments, self.calls)
            turn += 1

    async def _legacy(self) -> None:
        turn = 0
        while not self.stopping.is_set():
            tool, arguments = STAYING_LOAD[1 + turn % 2]
            await legacy_call(self.gw, self.legacy, "legacy", tool, arguments, self.calls)
            turn += 1

    def in_flight_at(self, moment: float) -> int:
        return sum(1 for c in self.calls if c.started < moment < c.ended)

    async def under_way(self) -> None:
        """Until each client has been answered at least once."""
        await until(lambda: {c.who for c in self.calls} >= {
            "legacy", *(f"modern-{n}" for n in range(self.modern_clients))},
            "every client was answered")


class Heard:
    """What one stream carried, read as it comes until the stream ends."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.messages: list[dict[str, Any]] = []
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in sse_messages(self.response):
            self.messages.append(message)

    def changes(self) -> list[dict[str, Any]]:
        """The list change notifications it carried."""
        return [m for m in self.messages if m.get("method") in CHANGED]

    def counted(self) -> Counter[str]:
        """How many changes of each list it carried."""
        return Counter(CHANGED[m["method"]] for m in self.changes())

    async def close(self) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self.task), WAIT_BOUND_S)
        finally:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.response.close()


async def listen(gw: HttpGateway) -> tuple[Any, Heard]:
    """A modern listen stream granted every list's changes, acknowledged."""
    granted = {f"{kind}ListChanged": True for kind in LISTS}
    message = gw.message("subscriptions/listen", {"notifications": granted,
                                                  "_meta": modern_meta()})
    response = await gw.http.post(gw.url, data=orjson.dumps(message),
                                  headers=gw.modern_headers(message))
    assert response.status == 200, await response.text()
    heard = Heard(response)
    await until(lambda: heard.messages, "the listen stream was acknowledged")
    assert heard.messages[0]["params"] == {"_meta": {SUB: message["id"]},
                                           "notifications": granted}, heard.messages
    return message["id"], heard


async def legacy_stream(gw: HttpGateway) -> tuple[dict[str, str], Heard]:
    """A legacy session and its GET stream."""
    session, _ = await gw.legacy_session()
    response = await gw.http.get(gw.url, headers={
        "Accept": "text/event-stream", "Mcp-Session-Id": session["Mcp-Session-Id"],
        "MCP-Protocol-Version": LEGACY})
    assert response.status == 200, await response.text()
    return session, Heard(response)


# -- the gateway ---------------------------------------------------------------------------

class Log:
    """The gateway's stderr, read as it comes (a pipe nobody reads would stop it)."""

    def __init__(self, gw: HttpGateway) -> None:
        assert gw.proc.stderr is not None
        self._stream = gw.proc.stderr
        self.lines: list[str] = []
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while line := await self._stream.readline():
            self.lines.append(line.decode(errors="replace").rstrip())

    def said(self, *words: str, after: int = 0) -> list[str]:
        return [line for line in self.lines[after:] if all(w in line for w in words)]

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def readyz(gw: HttpGateway) -> tuple[int, dict[str, Any]]:
    async with gw.http.get(gw.base + "/readyz") as response:
        return response.status, await response.json()


async def tool_names(gw: HttpGateway) -> list[str]:
    _, answer = await gw.modern("tools/list")
    return [tool["name"] for tool in answer["result"]["tools"]]


async def offered(gw: HttpGateway) -> dict[str, list[Any]]:
    """What a modern client sees in each list (resources: with their templates)."""
    seen: dict[str, list[Any]] = {}
    for kind, methods in (("tools", ("tools/list",)), ("prompts", ("prompts/list",)),
                          ("resources", ("resources/list", "resources/templates/list"))):
        seen[kind] = []
        for method in methods:
            status, answer = await gw.modern(method)
            assert status == 200 and "result" in answer, (method, answer)
            seen[kind].append([v for k, v in sorted(answer["result"].items())
                               if k in ("tools", "prompts", "resources", "resourceTemplates")])
    return seen


class Expected:
    """What each stream is to hear: for each list, one change for each reload that changed
    what a client sees in it, none for one that did not."""

    def __init__(self, gw: HttpGateway, *streams: Heard) -> None:
        self.gw = gw
        self.streams = streams
        #: The lists' changes a client saw, counted over the reloads so far.
        self.changes: Counter[str] = Counter()
        self._seen: dict[str, list[Any]] = {}

    async def before(self) -> None:
        self._seen = await offered(self.gw)

    async def after(self, what: str) -> set[str]:
        """What the reload just made changed, counted; once every stream heard all that
        was counted so far, and no more. The lists it changed."""
        seen = await offered(self.gw)
        changed = {kind for kind in LISTS if seen[kind] != self._seen[kind]}
        self.changes.update(changed)
        self._seen = seen
        await until(lambda: all(s.counted() >= self.changes for s in self.streams),
                    f"every stream heard {dict(self.changes)} ({what})")
        self.check(what)
        return changed

    def check(self, what: str) -> None:
        """No stream heard more than it was to, so far."""
        for stream in self.streams:
            assert stream.counted() == self.changes, (what, stream.messages)


async def until(condition: Any, what: str, seconds: float = WAIT_BOUND_S) -> None:
    """Wait for ``condition()`` (a coroutine function's result is awaited), bounded."""
    deadline = time.monotonic() + seconds
    while True:
        got = condition()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def reloaded(gw: HttpGateway, log: Log, mark: int) -> list[dict[str, Any]]:
    """After SIGHUP: ``/readyz`` read without pause until the gateway said the reload is
    done (a line of its log after ``mark``) and ``/readyz`` says no reload is under way;
    every ``/readyz`` document read meanwhile."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT_BOUND_S
    while True:
        status, document = await readyz(gw)
        seen.append({"status": status, **document})
        if reload_logged(log, mark) and not document.get("reloading"):
            return seen
        assert time.monotonic() < deadline, ("the reload never ended", log.lines[mark:])
        await asyncio.sleep(0.02)


def reload_logged(log: Log, mark: int) -> list[str]:
    """The lines after ``mark`` saying a reload of the configuration ended (made or
    refused)."""
    return [line for line in log.lines[mark:]
            if "configuration reloaded" in line or "configuration not reloaded" in line]


async def _wind_down(load: Any, loading: Any, gw: HttpGateway, heards: tuple[Any, ...],
                     log: Any) -> int:
    """Stop the calls, then the gateway (SIGTERM) and the streams heard; its exit code."""
    if load is not None:
        load.stopping.set()
    if loading is not None:
        await asyncio.gather(asyncio.wait_for(loading, WAIT_BOUND_S), return_exceptions=True)
    if gw.proc.returncode is None:
        gw.proc.send_signal(signal.SIGTERM)
    for heard in heards:
        if heard is not None:
            await heard.close()
    await log.stop()
    return int(await gw.stop())


# -- the tests -----------------------------------------------------------------------------

def test_sighup_adds_removes_changes_and_refuses_while_clients_call(gateways, tmp_path):
    run_id = uuid.uuid4().hex
    config = tmp_path / "mcp.json"

    def role(name: str, found: dict[str, Any]) -> dict[str, Any]:
        return {**found, "env": {**found["env"], "TRUNKLINE_RELOAD_LOAD_ROLE": name}}

    fleet = {
        "keep": role("keep", entry(realpeers.MODERN_TS, run_id)),
        "old": role("old", entry(realpeers.LEGACY_PY_TIME, run_id, legacy=True)),
        "gone": role("gone", entry(realpeers.MODERN_PY_ECHO, run_id)),
        "chg": role("chg", entry(realpeers.MODERN_PY_ECHO, run_id)),
    }
    write_config(config, fleet)

    async def main() -> None:
        gw = await HttpGateway.start(config, gateways, "--drain-timeout", str(DRAIN_S), *LOG_INFO,
                                     env={MARKER: run_id})
        log = Log(gw)
        load: Load | None = None
        loading: asyncio.Task[None] | None = None
        modern_heard: Heard | None = None
        legacy_heard: Heard | None = None
        try:
            await until(lambda: {"keep", "old", "gone", "chg"} <= set(servers_of(run_id)),
                        "every server of the fleet runs")
            staying = {name: one_server(run_id, name)[:2] for name in ("keep", "old")}
            # The gateway holds one pidfd per worker (per server it runs).
            held_at_start = held(gw.proc.pid)
            assert held_at_start["anon_inode:[pidfd]"] == len(fleet), held_at_start
            assert (await readyz(gw))[1].get("reloading") is False
            listen_id, modern_heard = await listen(gw)
            session, legacy_heard = await legacy_stream(gw)
            load = Load(gw, session)
            loading = asyncio.ensure_future(load.run())
            await load.under_way()
            expected = Expected(gw, modern_heard, legacy_heard)
            await expected.before()
            signalled: dict[str, float] = {}

            # 1. Add a legacy server that takes a while to start (its tools' names are
            # the unchanged legacy server's too: a model sees both prefixed from now on).
            fleet["slow"] = role("slow", slow_entry(realpeers.LEGACY_PY_TIME, run_id,
                                                    legacy=True))
            write_config(config, fleet)
            mark = len(log.lines)
            signalled["add"] = time.monotonic()
            gw.proc.send_signal(signal.SIGHUP)
            seen = await reloaded(gw, log, mark)
            assert any(d.get("reloading") and "slow" in d.get("starting", ()) for d in seen), \
                seen
            assert all(d["status"] == 200 and d["ready"] for d in seen), seen
            status, document = await readyz(gw)
            assert status == 200 and document["starting"] == [] and not document["reloading"]
            assert "slow_get_current_time" in await tool_names(gw)
            call = await modern_call(gw, "check", "slow_get_current_time", {"timezone": "UTC"})
            assert call.outcome == "ok", call
            assert "tools" in await expected.after("add")

            # 2. Remove a server while calls to it are in flight: the short ones finish,
            # the long one is cut at the drain timeout, a new one fails at once.
            gone_server, gone_worker, _ = one_server(run_id, "gone")
            gone_calls = [asyncio.ensure_future(modern_call(gw, "gone", "gone_sleep",
                                                            {"ms": ms}))
                          for ms in (600, 900, 60_000)]
            await until(lambda: in_flight(gw, "gone", 3), "the calls reached the server")
            del fleet["gone"]
            write_config(config, fleet)
            mark = len(log.lines)
            signalled["remove"] = time.monotonic()
            gw.proc.send_signal(signal.SIGHUP)
            await until(lambda: reloading(gw), "the reload began")
            refused = await modern_call(gw, "check", "gone_echo", {"text": "late"})
            assert not gone_calls[2].done(), "the long call ended before the drain timeout"
            assert refused.outcome != "ok" and "gone" in refused.outcome, refused
            short_one, short_two, cut = await asyncio.gather(*gone_calls)
            assert short_one.outcome == short_two.outcome == "ok", (short_one, short_two)
            assert cut.outcome != "ok" and "gone" in cut.outcome, cut
            assert "lost" not in cut.outcome, cut
            # Bounds against a hang: the drain timeout, and time to stop a worker.
            assert cut.ended - signalled["remove"] < DRAIN_S + 15, cut
            await reloaded(gw, log, mark)
            names = await tool_names(gw)
            assert not [n for n in names if n.startswith("gone_")], names
            after = await modern_call(gw, "check", "gone_echo", {"text": "later"})
            assert after.outcome != "ok" and "gone_echo" in after.outcome, after
            await until(lambda: not gone_server.alive() and not gone_worker.alive(),
                        "the removed server's processes ended")
            assert "gone" not in servers_of(run_id)
            assert "tools" in await expected.after("remove")

            # 3. Change a server's arguments while calls to it are in flight and more
            # come: the old one serves until the new one is ready, then drains (its
            # calls finish); its processes end, the new one runs with the new arguments.
            chg_server, chg_worker, chg_argv = one_server(run_id, "chg")
            assert "--listen" not in chg_argv
            chg_calls = [asyncio.ensure_future(modern_call(gw, "chg", "chg_sleep", {"ms": ms}))
                         for ms in (300, 700)]
            await until(lambda: in_flight(gw, "chg", 2), "the calls reached the server")
            replacing = asyncio.Event()

            async def calling_chg() -> list[Call]:
                made: list[Call] = []
                while not replacing.is_set():
                    await modern_call(gw, "chg", "chg_echo", {"text": "on"}, made)
                return made

            more_calls = asyncio.ensure_future(calling_chg())
            fleet["chg"] = role("chg", entry(realpeers.MODERN_PY_ECHO, run_id, "--listen"))
            write_config(config, fleet)
            mark = len(log.lines)
            signalled["change"] = time.monotonic()
            gw.proc.send_signal(signal.SIGHUP)
            await reloaded(gw, log, mark)
            replacing.set()
            made = await asyncio.wait_for(more_calls, WAIT_BOUND_S)
            in_flight_then = await asyncio.gather(*chg_calls)
            assert all(c.outcome == "ok" for c in (*in_flight_then, *made)), \
                [c for c in (*in_flight_then, *made) if c.outcome != "ok"]
            assert any(c.started > signalled["change"] for c in made), made
            await until(lambda: not chg_server.alive() and not chg_worker.alive(),
                        "the changed server's old processes ended")
            _, _, new_argv = one_server(run_id, "chg")
            assert new_argv[-1] == "--listen", new_argv
            call = await modern_call(gw, "check", "chg_echo", {"text": "again"})
            assert call.outcome == "ok", call
            await expected.after("change")

            # 4. A file that cannot be read: refused with the reason, nothing changes.
            write_config(config, '{"mcpServers": {"keep": ')
            mark = len(log.lines)
            signalled["broken"] = time.monotonic()
            gw.proc.send_signal(signal.SIGHUP)
            await until(lambda: reload_logged(log, mark), "the refusal was logged")
            said = "\n".join(log.lines[mark:])
            assert "mcp.json" in said and "JSON" in said, said
            status, document = await readyz(gw)
            assert status == 200 and not document["reloading"], document
            assert sorted(servers_of(run_id)) == ["chg", "keep", "old", "slow"]
            call = await modern_call(gw, "check", "slow_get_current_time", {"timezone": "UTC"})
            assert call.outcome == "ok", call
            assert not await expected.after("broken")

            # 5. The same fleet written again: a reload that changes nothing.
            write_config(config, fleet)
            mark = len(log.lines)
            signalled["same"] = time.monotonic()
            gw.proc.send_signal(signal.SIGHUP)
            await reloaded(gw, log, mark)
            assert "nothing changed" in reload_logged(log, mark)[-1]
            assert not await expected.after("same")
            load.stopping.set()
            await asyncio.wait_for(loading, WAIT_BOUND_S)

            # The servers that stayed were never touched.
            for name, (server, worker) in staying.items():
                assert server.alive() and worker.alive(), name
                assert one_server(run_id, name)[:2] == (server, worker), name
            calls = load.calls
            failed = [c for c in calls if c.outcome != "ok"]
            assert not failed, failed[:5]
            for step, moment in signalled.items():
                assert load.in_flight_at(moment) > 0, f"no call in flight at {step}"
                assert any(c.started > moment for c in calls), f"no call after {step}"
            # As many servers as at the start: as many descriptors, but the clients'.
            assert held(gw.proc.pid) == held_at_start, (held_at_start, fd_kinds(gw.proc.pid))
        finally:
            code = await _wind_down(load, loading, gw, (modern_heard, legacy_heard), log)
        assert code == 0, gw.stderr.decode()[-3000:]
        # Stopped, the streams ended: what they carried is all they ever will.
        expected.check("stopped")
        assert all(m["params"] == {"_meta": {SUB: listen_id}}
                   for m in modern_heard.changes()), modern_heard.messages
        assert all(m["params"] == {} for m in legacy_heard.changes()), legacy_heard.messages
        await until(lambda: not marked(run_id), "no process of the run is left")

    run(main(), timeout=240)


def test_watch_config_reloads_when_the_file_changes(gateways, tmp_path):
    run_id = uuid.uuid4().hex
    config = tmp_path / "mcp.json"
    fleet = {"keep": entry(realpeers.MODERN_TS, run_id),
             "old": entry(realpeers.LEGACY_PY_TIME, run_id, legacy=True)}
    write_config(config, fleet)

    async def main() -> None:
        gw = await HttpGateway.start(config, gateways, "--watch-config", *LOG_INFO,
                                     "--drain-timeout", str(DRAIN_S), env={MARKER: run_id})
        log = Log(gw)
        load = loading = modern_heard = legacy_heard = None
        try:
            _, modern_heard = await listen(gw)
            session, legacy_heard = await legacy_stream(gw)
            load = Load(gw, session, modern_clients=2)
            loading = asyncio.ensure_future(load.run())
            await load.under_way()
            expected = Expected(gw, modern_heard, legacy_heard)
            await expected.before()
            # Added by writing the file alone: no signal.
            fleet["more"] = entry(realpeers.MODERN_TS, run_id)
            write_config(config, fleet)
            changed_at = time.monotonic()
            await until(lambda: has_tool(gw, "more_echo"), "the watched file was reloaded")
            call = await modern_call(gw, "check", "more_echo", {"text": "watched"})
            assert call.outcome == "ok", call
            assert "tools" in await expected.after("add")
            # A file that cannot be read: refused with the reason, nothing changes.
            mark = len(log.lines)
            write_config(config, "not json at all")
            await until(lambda: reload_logged(log, mark), "the refusal was logged")
            assert "mcp.json" in "\n".join(log.lines[mark:])
            assert not await expected.after("broken")
            # The good file back: what it names is what runs, so nothing changes.
            mark = len(log.lines)
            write_config(config, fleet)
            await until(lambda: reload_logged(log, mark), "the good file was read again")
            assert "nothing changed" in reload_logged(log, mark)[-1]
            assert not await expected.after("same")
            load.stopping.set()
            await asyncio.wait_for(loading, WAIT_BOUND_S)
            failed = [c for c in load.calls if c.outcome != "ok"]
            assert not failed, failed[:5]
            assert load.in_flight_at(changed_at) > 0
        finally:
            code = await _wind_down(load, loading, gw, (modern_heard, legacy_heard), log)
        assert code == 0, gw.stderr.decode()[-3000:]
        expected.check("stopped")
        await until(lambda: not marked(run_id), "no process of the run is left")

    run(main(), timeout=180)


# -- what the gateway says -----------------------------------------------------------------

async def in_flight(gw: HttpGateway, server: str, count: int) -> bool:
    """Whether ``server`` has at least ``count`` calls in flight (``/status``)."""
    async with gw.http.get(gw.base + "/status") as response:
        document = await response.json()
    return any(s["name"] == server and s["in_flight"] >= count for s in document["servers"])


async def reloading(gw: HttpGateway) -> bool:
    return bool((await readyz(gw))[1].get("reloading"))


async def has_tool(gw: HttpGateway, name: str) -> bool:
    return name in await tool_names(gw)
