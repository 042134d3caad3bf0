"""Shared by the gateway tests: a fleet config on disk, ``trunkline serve`` processes that
never outlive their test, and the 2026-07-28 request metadata."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from mcp_schema import MODERN

from trunkline.params import StdioParams

PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
SUB = "io.modelcontextprotocol/subscriptionId"


def modern_meta(**extra: Any) -> dict[str, Any]:
    return {PV: MODERN, CAPS: {}, **extra}


def fleet_config(tmp_path: Path, servers: dict[str, StdioParams]) -> Path:
    """An ``mcpServers`` file naming ``servers``."""
    path = tmp_path / "mcp.json"
    entries = {name: {"command": params.command, "args": list(params.args),
                      "env": dict(params.env)} for name, params in servers.items()}
    path.write_text(json.dumps({"mcpServers": entries}))
    return path


def alive_with(marker: str) -> list[int]:
    """Live processes whose command line carries ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


class Started:
    """The gateway processes a test started; ``reap`` kills any still running (a test
    that failed before closing its gateway must not leave it behind)."""

    def __init__(self) -> None:
        self._pids: list[int] = []

    def add(self, pid: int) -> None:
        self._pids.append(pid)

    def reap(self) -> None:
        while self._pids:
            pid = self._pids.pop()
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # ended and reaped: this pid may be someone else's by now
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
