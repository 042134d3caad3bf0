"""``trunkline status URL`` against a running ``trunkline serve --http``: its servers'
states, eras, calls in flight, latencies, restarts and last errors, as a table, as JSON,
refreshed under a terminal; the status endpoint behind the gateway's OAuth; and the
gateway's JSON log lines. Real gateways, real servers, the command run as a user runs
it."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
from typing import Self

import orjson
import pytest
from aiohttp import web

from conftest import run, scripted
from gateways import HttpGateway, fleet_config
from oidc import start_provider

SCOPE = "mcp:tools"


async def trunkline(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trunkline", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def status_of(gw: HttpGateway, *flags: str) -> dict[str, dict]:
    code, out, err = await trunkline("status", gw.url, "--json", *flags)
    assert code == 0, err
    return {s["name"]: s for s in orjson.loads(out)["servers"]}


async def call(gw: HttpGateway, tool: str, arguments: dict | None = None) -> dict:
    status, answer = await gw.modern("tools/call", {"name": tool,
                                                    "arguments": arguments or {}})
    assert status == 200, answer
    return answer


@pytest.fixture
def fleet(tmp_path):
    """One modern server, and one legacy server that is not allowlisted (refused)."""
    return fleet_config(tmp_path, {"alpha": scripted(), "old": scripted("--era", "legacy")})


def test_states_counts_latencies_restarts_and_last_errors(gateways, fleet):
    async def main():
        gw = await HttpGateway.start(fleet, gateways)
        first = await status_of(gw)
        assert (first["alpha"]["state"], first["alpha"]["era"], first["alpha"]["version"]) \
            == ("ready", "modern", "2026-07-28")
        assert first["alpha"]["last_error"] is None and first["alpha"]["restarts"] == 0
        assert first["old"]["state"] == "unavailable" and first["old"]["era"] is None
        assert "allow_legacy=False" in first["old"]["reason"]
        assert first["old"]["last_error"] == first["old"]["reason"]
        assert first["old"]["answered"] == 0 and first["old"]["p50_ms"] is None
        # Issue 35, item 7: refused for want of the allowlist, with the fix; and a call to
        # a name nobody serves names it as a server that may provide it.
        assert '"allowLegacy": true to its entry' in first["old"]["hint"]
        assert first["alpha"]["hint"] is None
        unknown = await call(gw, "get_current_time")
        assert unknown["error"]["data"] == {"candidates": [
            {"server": "old", "state": "unavailable", "listed": False}]}
        assert f"server 'old' is unavailable ({first['old']['hint']}) and may provide it" \
            in unknown["error"]["message"]

        for i in range(6):
            await call(gw, "echo", {"i": i})
        after = await status_of(gw)
        alpha = after["alpha"]
        assert alpha["answered"] == first["alpha"]["answered"] + 6
        assert 0 < alpha["p50_ms"] <= alpha["p99_ms"]
        assert alpha["in_flight"] == 0

        # A call the server never answers is in flight until its client goes away.
        pending = asyncio.ensure_future(call(gw, "sleep"))
        while (await status_of(gw))["alpha"]["in_flight"] != 1:
            await asyncio.sleep(0.05)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        while (await status_of(gw))["alpha"]["in_flight"] != 0:
            await asyncio.sleep(0.05)

        # A crash: restarted, and its cause is the last error once it is ready again.
        crashed = await call(gw, "crash")
        assert "error" in crashed
        while (now := await status_of(gw))["alpha"]["state"] != "ready":
            await asyncio.sleep(0.05)
        assert now["alpha"]["restarts"] == 1
        assert now["alpha"]["last_error"] and now["alpha"]["last_error_at"] > 0

        code, table, err = await trunkline("status", gw.url)
        assert code == 0, err
        header, *rows = table.splitlines()
        assert header.split() == ["SERVER", "STATE", "ERA", "VERSION", "IN", "FLIGHT",
                                  "CALLS", "P50", "P99", "RESTARTS", "LAST", "ERROR"]
        cells = {row.split()[0]: row.split() for row in rows}
        assert cells["alpha"][1:5] == ["ready", "modern", "2026-07-28", "0"]
        assert cells["alpha"][8] == "1"  # restarts
        assert cells["old"][1] == "unavailable" and "era refused" in table
        assert await gw.stop() == 0
    run(main())


def test_watch_redraws_in_place_on_a_terminal(gateways, fleet):
    async def main():
        gw = await HttpGateway.start(fleet, gateways)
        try:
            async with Terminal(gw.url, "--interval", "0.1") as term:
                await term.until(b"SERVER", 3)  # the first drawing and two refreshes
                text = await term.interrupted()
        finally:
            stopped = await gw.stop()
        assert stopped == 0
        assert "\x1b[" in text and "alpha" in text and "unavailable" in text
        assert "\x1b[2K" in text or "\x1b[1A" in text  # redrawn where it was
    run(main())


def test_sigint_between_refreshes_ends_watch(gateways, fleet):
    async def main():
        gw = await HttpGateway.start(fleet, gateways)
        try:
            async with Terminal(gw.url, "--interval", "3600") as term:
                await term.until(b"alpha")  # drawn: the next refresh is an hour away
                text = await term.interrupted()
        finally:
            stopped = await gw.stop()
        assert stopped == 0
        assert text.count("SERVER") == 2  # the table, and once more as it stopped
    run(main())


@pytest.mark.parametrize("when", ["started", "asked"])
def test_sigint_before_the_first_answer_ends_watch(no_leaks, when):
    """As it starts (the terminal taken, nothing fetched yet or the request on its way)
    and while the gateway holds its request."""
    async def main():
        gateway = await HeldStatus.start()
        try:
            async with Terminal(gateway.url, "--interval", "0.1") as term:
                if when == "started":
                    await term.until(HIDE_CURSOR)
                else:
                    await asyncio.wait_for(gateway.asked.wait(), GUARD)
                text = await term.interrupted()
        finally:
            await gateway.stop()
        assert "SERVER" not in text
    run(main())


def test_sigint_ends_watch_on_a_terminal_nobody_reads(gateways, fleet):
    """The terminal is not read (stopped, not drawn): its redraws cannot be written, and
    a SIGINT still ends the command; what the terminal held unread is dropped so that it
    can be left clean."""
    async def main():
        gw = await HttpGateway.start(fleet, gateways)
        try:
            async with Terminal(gw.url, "--interval", "0.05") as term:
                await term.until(b"alpha")
                term.pause()
                await term.filled()  # by the redraws nobody reads
                text = await term.interrupted()
        finally:
            stopped = await gw.stop()
        assert stopped == 0
        assert "alpha" in text
    run(main())


def test_a_gateway_that_is_not_there_is_a_one_line_error(no_leaks):
    done = subprocess.run([sys.executable, "-m", "trunkline", "status",
                           "http://127.0.0.1:1/mcp"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("trunkline: http://127.0.0.1:1/status: no answer")
    assert len(done.stderr.splitlines()) == 1
    done = subprocess.run([sys.executable, "-m", "trunkline", "status", "ftp://x/"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not an http(s) URL" in done.stderr


@pytest.fixture(scope="module")
def provider():
    started = start_provider()
    yield started
    started.stop()


def test_with_oauth_on_status_needs_a_token_and_never_shows_it(gateways, tmp_path,
                                                                provider):
    path = fleet_config(tmp_path, {"alpha": scripted()})

    async def main():
        gw = await HttpGateway.start(path, gateways, "--oauth-issuer", provider.issuer,
                                     "--oauth-scopes", SCOPE)
        async with gw.http.get(f"{gw.base}/status") as response:
            assert response.status == 401
            assert "resource_metadata" in response.headers["WWW-Authenticate"]
        code, out, err = await trunkline("status", gw.url)
        assert code == 1 and out == "" and "HTTP 401" in err
        token = await provider.token(gw.url, SCOPE)
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        code, out, err = await trunkline("status", gw.url, "--json", "--token-file",
                                         str(token_file))
        assert code == 0, err
        assert [s["state"] for s in orjson.loads(out)["servers"]] == ["ready"]
        code, table, err = await trunkline("status", gw.url, env={"TRUNKLINE_TOKEN": token})
        assert code == 0 and "alpha" in table, err
        # A token without the required scope is refused as /mcp refuses it.
        other = await provider.token(gw.url, "other")
        code, out, err = await trunkline("status", gw.url, env={"TRUNKLINE_TOKEN": other})
        assert code == 1 and "HTTP 403" in err
        assert await gw.stop() == 0
        return [token, other], out + err + table + gw.stderr.decode()
    tokens, shown = run(main())
    for token in tokens:
        assert not any(part in shown for part in token.split(".") if len(part) > 8)


def test_api_keys_protect_status_too(gateways, tmp_path):
    path = fleet_config(tmp_path, {"alpha": scripted()})
    key = "sk-trunkline-status-test-0123456789"

    async def main():
        gw = await HttpGateway.start(path, gateways, env={"TRUNKLINE_API_KEYS": key})
        code, _, err = await trunkline("status", gw.url)
        assert code == 1 and "HTTP 401" in err and key not in err
        code, out, err = await trunkline("status", gw.url, "--json",
                                         env={"TRUNKLINE_TOKEN": key})
        assert code == 0 and key not in out, err
        assert await gw.stop() == 0
    run(main())


def test_json_log_lines_carry_server_tool_and_request_id(gateways, fleet):
    async def main():
        gw = await HttpGateway.start(fleet, gateways, "--log-format", "json",
                                     "--log-level", "info")
        message = gw.message("tools/call", {"name": "echo", "arguments": {"x": 1},
                                            "_meta": {**_meta()}}, request_id="req-42")
        status, answer, _ = await gw.post(message, gw.modern_headers(message))
        assert status == 200 and answer["id"] == "req-42"
        crashed = gw.message("tools/call", {"name": "crash", "arguments": {},
                                            "_meta": _meta()}, request_id=43)
        await gw.post(crashed, gw.modern_headers(crashed))
        assert await gw.stop() == 0
        return gw.stderr
    stderr = run(main())
    lines = [orjson.loads(line) for line in stderr.splitlines()]  # every line is JSON
    assert lines
    for line in lines:
        assert {"time", "level", "logger", "message", "server", "tool",
                "request_id"} <= set(line), line
    answered = [line for line in lines if line["request_id"] == "req-42"]
    assert answered and all((a["server"], a["tool"]) == ("alpha", "echo") for a in answered)
    assert "tools/call answered" in answered[-1]["message"]
    failed = [line for line in lines if line["request_id"] == 43]
    assert failed and failed[-1]["tool"] == "crash" and "failed" in failed[-1]["message"]
    refused = [line for line in lines if line["server"] == "old" and line["level"] ==
               "warning"]
    assert refused and "unavailable: era refused" in refused[0]["message"]
    assert any(line["server"] == "alpha" and "restarting" in line["message"]
               for line in lines)


#: A failure guard for what a test waits for (never a measurement: on time, it is not
#: reached).
GUARD = 60
HIDE_CURSOR, SHOW_CURSOR = b"\x1b[?25l", b"\x1b[?25h"


class Terminal:
    """``trunkline status URL --watch`` on a pseudo-terminal, read as a terminal reads it
    (or, ``pause``d, not read at all)."""

    def __init__(self, url: str, *flags: str) -> None:
        self.args = ("status", url, "--watch", *flags)
        self.screen = bytearray()
        self.proc: asyncio.subprocess.Process | None = None
        self._main = -1
        self._slave = ""
        self._changed = asyncio.Event()
        self._eof = False
        self._reading = False

    async def __aenter__(self) -> Self:
        self._main, child = os.openpty()
        self._slave = os.ttyname(child)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "trunkline", *self.args, stdin=child, stdout=child,
                stderr=child, env={**os.environ, "COLUMNS": "200", "TERM": "xterm"})
        finally:
            os.close(child)
        os.set_blocking(self._main, False)
        self.resume()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.pause()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        os.close(self._main)

    def pause(self) -> None:
        if self._reading:
            asyncio.get_running_loop().remove_reader(self._main)
            self._reading = False

    def resume(self) -> None:
        if not self._reading and not self._eof:
            asyncio.get_running_loop().add_reader(self._main, self._read)
            self._reading = True

    def _read(self) -> None:
        try:
            data = os.read(self._main, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: no one holds the terminal any more
            data = b""
        if data:
            self.screen += data
        else:
            self._eof = True
            self.pause()
        self._changed.set()

    async def until(self, wanted: bytes, count: int = 1) -> None:
        """Read until ``wanted`` has been drawn ``count`` times."""
        async with asyncio.timeout(GUARD):
            while self.screen.count(wanted) < count:
                assert not self._eof, self.screen.decode(errors="replace")
                self._changed.clear()
                await self._changed.wait()

    async def filled(self) -> None:
        """Until a write to the terminal would not go through (it is not being read)."""
        async with asyncio.timeout(GUARD):
            while True:
                fd = os.open(self._slave, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
                try:
                    if not select.select([], [fd], [], 0)[1]:
                        return
                finally:
                    os.close(fd)
                await asyncio.sleep(0.01)

    async def interrupted(self) -> str:
        """SIGINT, as Ctrl-C sends it; it must end the command (exit 130) whether or not
        the terminal is being read, and leave the terminal clean (read once it ended).
        The screen, as text."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(self.proc.wait(), GUARD) == 130
        self.resume()
        async with asyncio.timeout(GUARD):
            while not self._eof:
                self._changed.clear()
                await self._changed.wait()
        screen = bytes(self.screen)
        assert screen.rfind(SHOW_CURSOR) > screen.rfind(HIDE_CURSOR) >= 0, screen[-300:]
        text = screen.decode(errors="replace")
        assert "Traceback" not in text, text[-2000:]
        return text


class HeldStatus:
    """A gateway's ``/status`` that never answers: it notes the request (``asked``) and
    holds it until stopped. (No real gateway holds its status back on demand.)"""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.url = ""
        self._released = asyncio.Event()
        self._runner: web.AppRunner | None = None

    @classmethod
    async def start(cls) -> HeldStatus:
        held = cls()
        app = web.Application()
        app.router.add_get("/status", held._held)
        held._runner = web.AppRunner(app)
        await held._runner.setup()
        await web.TCPSite(held._runner, "127.0.0.1", 0).start()
        held.url = f"http://127.0.0.1:{held._runner.addresses[0][1]}/mcp"
        return held

    async def _held(self, request: web.Request) -> web.Response:
        self.asked.set()
        await self._released.wait()
        return web.Response(status=503)

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()


def _meta() -> dict:
    from gateways import modern_meta

    return modern_meta()
