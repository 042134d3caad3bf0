"""Progress while a fleet comes up: plain lines on stderr when piped, a live board on a
terminal (a pty), nothing extra with ``--json``; the ``trunkline`` command run as a user
runs it, against real servers."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from conftest import scripted
from gateways import fleet_config
from trunkline.channel import ServerState
from trunkline.cli.progress import FleetBoard, describe
from trunkline.parent.handle import ServerStatus


def trunkline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trunkline", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def fleet(tmp_path):
    """One modern server, and one legacy server that is not allowlisted (refused)."""
    return fleet_config(tmp_path, {"new": scripted(), "old": scripted("--era", "legacy")})


def lines_of(stderr: str, server: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"server {server}: ")]


@pytest.mark.parametrize("command", [("tools",), ("call", "echo", '{"a": 1}'), ("probe",)])
def test_piped_each_state_change_is_a_line_on_stderr(fleet, command, no_leaks):
    done = trunkline(command[0], str(fleet), *command[1:])
    assert done.returncode == (3 if command[0] == "probe" else 0), done.stderr
    assert lines_of(done.stderr, "new")[:2] == ["server new: starting",
                                                "server new: negotiating"]
    assert lines_of(done.stderr, "new")[2].startswith("server new: ready (modern 2026-07-28, ")
    assert len(lines_of(done.stderr, "new")) == 3
    old = lines_of(done.stderr, "old")
    assert old[:2] == ["server old: starting", "server old: negotiating"]
    assert old[2].startswith("server old: unavailable: era refused") and \
        "allow_legacy=False" in old[2] and len(old) == 3
    assert "\x1b[" not in done.stderr  # no terminal, no escape codes
    if command[0] == "call":
        assert orjson.loads(done.stdout) == {"a": 1}  # stdout is the result only


@pytest.mark.parametrize("command", [("tools",), ("call", "echo", '{"a": 1}'), ("probe",)])
def test_with_json_nothing_extra_is_printed(fleet, command, no_leaks):
    """No progress; the host's one warning about a server refused for want of the
    allowlist (its fix) is all there is on stderr (probe shows it in its document)."""
    done = trunkline(command[0], str(fleet), *command[1:], "--json")
    orjson.loads(done.stdout)
    if command[0] == "probe":
        assert done.stderr == "trunkline: 1 of 2 servers unavailable: old\n"
    else:
        assert done.returncode == 0
        (warning,) = done.stderr.splitlines()
        assert warning.startswith("server 'old': unavailable: it answered server/discover")
        assert '"allowLegacy": true' in warning


def test_on_a_terminal_a_live_board_is_drawn(fleet, no_leaks):
    """Under a pseudo-terminal the states are drawn as a board (rows redrawn in place),
    not as plain lines."""
    main, child = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "trunkline", "tools", str(fleet)],
                                stdin=child, stdout=child, stderr=child,
                                env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
        os.close(child)
        child = -1
        chunks = []
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child's side is closed
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(main)
        if child >= 0:
            os.close(child)
    screen = b"".join(chunks).decode(errors="replace")
    assert "server new: starting" not in screen  # not the plain lines
    assert "\x1b[2K" in screen or "\x1b[1A" in screen  # redrawn in place
    for state in ("negotiating", "ready (modern 2026-07-28", "unavailable: era refused"):
        assert state in screen, screen[-2000:]
    assert "tool (canonical)" in screen  # then the command's own output


def status(name: str, state: ServerState, reason: str | None = None) -> ServerStatus:
    return ServerStatus(name=name, state=state, reason=reason)


def test_the_board_says_only_what_is_news():
    board = FleetBoard()
    assert board.note(status("a", ServerState.STARTING))
    assert not board.note(status("a", ServerState.STARTING))
    assert board.note(status("a", ServerState.UNAVAILABLE, "no answer"))
    assert board.note(status("a", ServerState.UNAVAILABLE, "another reason"))
    assert list(board.rows) == ["a"]
    assert describe(status("a", ServerState.RESTARTING, "exit 1")) == "restarting: exit 1"
    assert describe(status("a", ServerState.READY)) == "ready"


def test_with_json_logs_the_changes_are_json_lines_naming_their_server(fleet, no_leaks):
    done = trunkline("tools", str(fleet), "--log-format", "json", "--log-level", "info")
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    changes = [(line["server"], line["level"], line["message"]) for line in lines
               if line["logger"] == "trunkline.fleet"]
    assert ("new", "info", "server new: negotiating") in changes
    refused = [c for c in changes if c[0] == "old" and c[1] == "warning"]
    assert refused and "unavailable: era refused" in refused[0][2]
    quiet = trunkline("tools", str(fleet), "--log-format", "json")  # warnings only
    # The state change, then the host's word on how to lift the refusal.
    assert [(line["level"], line["logger"], line["server"]) for line in
            map(orjson.loads, quiet.stderr.splitlines())] == [
        ("warning", "trunkline.fleet", "old"), ("warning", "trunkline.host", "old")]
