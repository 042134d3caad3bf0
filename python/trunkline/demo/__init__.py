"""Bundled demo MCP servers for ``trunkline demo``: no network, no configuration.

``demo_servers()`` lists them in a fixed order (web, docs, archive), each with the argv
that starts it (``python -m trunkline.demo.server --profile NAME`` on the running
interpreter). See ``trunkline/demo/server.py`` for the protocol behaviour and tools.

All three servers expose a tool named ``search``: the demo uses the three-way
collision to show the host's name-prefix policy.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["DemoServer", "demo_servers"]


@dataclass(frozen=True)
class DemoServer:
    """One bundled server, ready to be configured as a stdio peer."""

    #: Configured server name (also its serverInfo.name and its profile).
    name: str
    #: Command line that starts it:
    #: ``(sys.executable, "-m", "trunkline.demo.server", "--profile", name)``.
    argv: tuple[str, ...]
    #: True for the legacy (2025-11-25) server: the host must allowlist it for the
    #: ``initialize`` fallback, otherwise it fails closed.
    allow_legacy: bool
    #: One line for humans.
    description: str


def demo_servers() -> list[DemoServer]:
    """The bundled servers in a fixed order: web, docs, archive."""
    # Imported here, not at module level: ``python -m trunkline.demo.server`` imports
    # this package first, and an eager import would make runpy warn on stderr.
    from .server import PROFILES

    return [
        DemoServer(
            name=profile.name,
            argv=(sys.executable, "-m", "trunkline.demo.server", "--profile", profile.name),
            allow_legacy=not profile.modern,
            description=profile.description,
        )
        for profile in PROFILES.values()
    ]
