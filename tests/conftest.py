"""Shared test helpers: running coroutines, spawning test peers, counting leaks."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from trunkline.params import StdioParams, stdio

T = TypeVar("T")
TESTS = Path(__file__).resolve().parent
PEERS = TESTS / "peers"
# The peers' tap-log reader is shared by the peers (stdlib only) and the tests.
sys.path.append(str(PEERS))

# A shell starting a command in the background without job control (`cmd &` in a
# script, `nohup ... &`) starts it with SIGINT ignored, and every process it starts
# inherits that: Python then installs no KeyboardInterrupt handler, and the tests that
# press Ctrl-C (on this process or on a command they start) would wait for a signal
# that is dropped. The tests are about a terminal's Ctrl-C, so they restore its
# default here (a handler set here is reset to the default in each child at exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: Any) -> str:
    from mcp_schema import validator_name

    return f"MCP messages are validated against {validator_name()}"


@pytest.fixture(autouse=True)
def _config_home(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    """What a host keeps by default under the user's config directory (tokens, pins) goes
    to a directory of the test's own, in this process and in every process it starts."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))


def run(coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
    """Run one test coroutine on a fresh loop, bounded so a bug cannot hang the suite."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def scripted(
    *flags: str, tap: Path | None = None, env: dict[str, str] | None = None
) -> StdioParams:
    """A ``tests/peers/scripted.py`` server with the given behaviour flags."""
    extra = dict(env or {})
    if tap is not None:
        extra["TRUNKLINE_TAP"] = str(tap)
    return stdio(sys.executable, str(PEERS / "scripted.py"), *flags, env=extra)


def _processes() -> Iterator[tuple[int, bytes, int, int]]:
    """(pid, state, ppid, pgrp) of every live process, read from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the parenthesized command: state ppid pgrp ...
        fields = stat[stat.rindex(b")") + 2 :].split()
        yield int(entry), fields[0], int(fields[1]), int(fields[2])


async def end_process(process: asyncio.subprocess.Process, sig: int = signal.SIGTERM,
                      timeout_s: float = 10) -> int | None:
    """End a service a test started under asyncio: ``sig``, then SIGKILL if it outlives
    ``timeout_s``; reaped either way. Its exit status."""
    if process.returncode is None:
        process.send_signal(sig)
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 10) -> None:
    """End a service a test started: SIGTERM, then SIGKILL if it outlives ``timeout_s``;
    reaped either way."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def child_pids() -> set[int]:
    """Live (non-zombie) direct children of this process."""
    me = os.getpid()
    return {pid for pid, state, ppid, _ in _processes() if ppid == me and state != b"Z"}


def group_alive(pgid: int) -> bool:
    """Whether any live process is still in process group ``pgid``."""
    return any(pgrp == pgid and state != b"Z" for _, state, _, pgrp in _processes())


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def open_fd_kinds() -> Counter[str]:
    """What this process holds open, by kind ("socket", "pipe", "anon_inode:[pidfd]", a
    file's path), counted. A restarted worker's pidfd and channel socket take whatever
    numbers are free, so a long run compares kinds, not numbers."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor os.listdir itself held, closed by now
            continue
        kinds[re.sub(r":\[\d+\]$", "", target)] += 1
    return kinds


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail the test if it leaves a child process or a file descriptor behind."""
    children_before = child_pids()
    fds_before = open_fds()
    yield
    leaked_children = child_pids() - children_before
    # os.listdir itself holds one descriptor while it runs; compare sets, not counts.
    leaked_fds = {fd for fd in open_fds() - fds_before if os.path.exists(f"/proc/self/fd/{fd}")}
    descriptions = {fd: os.readlink(f"/proc/self/fd/{fd}") for fd in leaked_fds
                    if os.path.exists(f"/proc/self/fd/{fd}")}
    assert not leaked_children, "child processes outlived the test: " + ", ".join(
        f"{pid} {_cmdline(pid)}" for pid in sorted(leaked_children))
    assert not descriptions, f"file descriptors outlived the test: {descriptions}"


@pytest.fixture
def tap(tmp_path: Path) -> Path:
    return tmp_path / "tap.jsonl"


@pytest.fixture
def gateways(no_leaks: None) -> Iterator[Any]:
    """The ``trunkline serve`` processes a test starts (``gateways.add(pid)``), killed if
    still running when it ends, before ``no_leaks`` (which this depends on) looks."""
    from gateways import Started

    started = Started()
    yield started
    started.reap()
