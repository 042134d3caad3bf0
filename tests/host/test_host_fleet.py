"""One bad server never takes the fleet (issue 36, findings 3 and 4), through the whole
host: a good server beside a hostile one (``tests/peers/hostile.py``; ``scripted.py`` for
a listing that is never answered). A server whose first listing fails in any way is
left out with the reason and listed again later while the others serve; a server that
changes its tool list all the time is listed far less often than it says so, in one log
line per listing, and calls to every server are answered meanwhile."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path

import orjson
import pytest
import taplog

from conftest import PEERS, run, scripted
from trunkline import CatalogOptions, Host
from trunkline.errors import UnknownTool
from trunkline.params import StdioParams, stdio
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, RestartPolicy

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0),
                        restart=RestartPolicy(base_s=0.01, cap_s=0.05),
                        max_line_bytes=1 << 20)


def hostile(*flags: str, tap: Path | None = None) -> StdioParams:
    env = {} if tap is None else {"TRUNKLINE_TAP": str(tap)}
    return stdio(sys.executable, str(PEERS / "hostile.py"), *flags, env=env)


def config(tmp_path: Path, servers: dict[str, StdioParams]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        name: {"command": p.command, "args": list(p.args), "env": dict(p.env)}
        for name, p in servers.items()}}))
    return path


def listings(tap: Path, after: float = 0.0) -> int:
    """The first pages of tools/list the server was asked for after ``after``."""
    return sum(1 for r in taplog.load_records(tap) if r["dir"] == taplog.IN and r["t"] > after
               and (m := orjson.loads(r["line"])).get("method") == "tools/list"
               and "cursor" not in (m.get("params") or {}))


async def until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.05)


def status(host: Host, name: str):
    (found,) = [s for s in host.servers() if s.name == name]
    return found


#: Each way a first listing fails, and what the server's status then says.
FIRST_LISTINGS = {
    "cursor-loop": (("--tools-list", "cursor-loop"),
                    "page 2: nextCursor 'same' repeats an earlier cursor (a loop)"),
    "cursor-endless": (("--tools-list", "cursor-endless"),
                       "the list did not end within 100 pages"),
    "huge-line": (("--tools-list", "huge-line:2M"), "over the line limit of 1048576 bytes"),
    "crash": (("--tools-list", "crash"), "server exited (exit code 4)"),
    # Unreadable (nested past the codec's depth): today dropped, so the list times out.
    "deep": (("--tools-list", "deep:100000"), ""),
    "silent": (None, "the list was not complete within 2 s"),
}


@pytest.mark.parametrize("mode", list(FIRST_LISTINGS))
def test_a_server_whose_first_listing_fails_is_left_out_and_the_others_serve(
        mode, tmp_path, tap, no_leaks):
    flags, said = FIRST_LISTINGS[mode]
    bad = (hostile(*flags, tap=tap) if flags is not None
           else scripted("--tools-list", "silence", tap=tap))
    path = config(tmp_path, {"good": hostile(), "bad": bad})

    async def main():
        async with Host.from_config(path, settings=SETTINGS,
                                    catalog=CatalogOptions(list_timeout_s=2.0)) as host:
            entered = time.time()
            assert [(t.name, t.server) for t in host.tools()] == [("echo", "good")]
            assert (await host.call_tool("echo", {"n": 1})).text == '{"n":1}'
            error = status(host, "bad").listing_error
            assert error is not None and error.startswith("tools/list failed: ")
            assert said in error and "its tools are left out" in error
            assert status(host, "good").listing_error is None
            assert [(w.server, w.kind, w.message) for w in host.warnings
                    if w.kind == "listing-failed"] == [("bad", "listing-failed", error)]
            with pytest.raises(UnknownTool) as unknown:
                await host.call_tool("bad_echo", {})
            assert [c.server for c in unknown.value.candidates] == ["bad"]
            # Listed again in the background (a crashing one on its new connections).
            await until(lambda: listings(tap, after=entered) > 0, "bad listed again")
            assert [t.server for t in host.tools()] == ["good"]
    run(main(), timeout=120)


def test_a_server_that_recovers_is_listed_and_merged_without_anyone_asking(tmp_path, tap,
                                                                           no_leaks):
    path = config(tmp_path, {"good": hostile(), "bad": hostile(
        "--tools-list", "cursor-loop", "--bad-listings", "2", tap=tap)})

    async def main():
        async with Host.from_config(path, settings=SETTINGS) as host:
            changed = []
            host.watch_catalog(lambda catalog: changed.append(len(catalog)))
            assert "repeats an earlier cursor" in status(host, "bad").listing_error
            await until(lambda: "bad_echo" in {t.name for t in host.tools()}, "bad merged")
            assert changed and status(host, "bad").listing_error is None
            assert (await host.call_tool("bad_echo", {"n": 2})).text == '{"n":2}'
    run(main(), timeout=120)
    assert listings(tap) == 3  # two failed, one merged, no more


def test_under_reject_a_late_listing_that_collides_is_not_merged_and_says_so(tmp_path, tap,
                                                                              no_leaks):
    """The collision policy is the operator's: at start-up it refuses as documented; a
    server listed later whose tools collide is kept out, the rest of the catalog intact."""
    path = config(tmp_path, {"good": hostile(), "late": hostile(
        "--tools-list", "cursor-loop", "--bad-listings", "1", tap=tap)})

    async def main():
        async with Host.from_config(path, settings=SETTINGS,
                                    catalog=CatalogOptions(collision="reject")) as host:
            await until(lambda: (status(host, "late").listing_error or "").startswith(
                "its new tools were not merged: tool name collision"), "the collision said")
            assert "'echo' is offered by servers 'good' and 'late'" in status(
                host, "late").listing_error
            assert [(t.name, t.server) for t in host.tools()] == [("echo", "good")]
            assert (await host.call_tool("echo", {"n": 3})).text == '{"n":3}'
    run(main(), timeout=120)


def test_a_server_that_changes_its_tools_all_the_time_is_listed_far_less_often(
        tmp_path, tap, no_leaks, caplog):
    """Every 20 ms a list change, every listing 200 renamed tools (each quarantined as a
    rename): the other server's calls are all answered meanwhile, and so are the churning
    server's own (it waits for one listing, never for the announcements after it)."""
    path = config(tmp_path, {"good": hostile(), "churn": hostile("--churn", "20:200",
                                                                 tap=tap)})

    async def main():
        async with Host.from_config(path, settings=SETTINGS) as host:
            made = answered = 0
            while announced(tap) < 150:
                made += 1
                if (await host.call_tool("good_echo", {"n": made})).text == f'{{"n":{made}}}':
                    answered += 1
                await asyncio.sleep(0.005)
            assert made > 0 and answered == made
            listed = listings(tap)
            # Paced: the gaps double from 0.5 s while it changes on every listing.
            assert listed <= 12, f"listed {listed} times for {announced(tap)} announcements"
            said = [r.getMessage() for r in caplog.records if r.name.startswith("trunkline")]
            # One line per listing at most (its quarantines), never one per tool.
            assert len(said) <= listed, said[:5]
            assert any("200 tools quarantined (200 renamed" in line for line in said)
            assert (await host.call_tool("churn_echo", {"n": 0}, timeout=60)).text == '{"n":0}'

    with caplog.at_level(logging.INFO, logger="trunkline"):
        run(main(), timeout=180)


def announced(tap: Path) -> int:
    """The list changes the server announced (only it writes that method's name)."""
    return tap.read_bytes().count(b"notifications/tools/list_changed") if tap.exists() else 0
