"""A real MCP server on fastmcp 4.x serving skills (SEP-2640) and an MCP App, over stdio.

Runs in the .peers/fastmcp venv (tests/realpeers.py: FASTMCP_SKILLS):

    .peers/fastmcp/bin/python tests/peers/fastmcp_skills.py [--skills DIR] [--drifted]
        [--app]

* ``--skills DIR``: fastmcp's ``SkillsDirectoryProvider`` over DIR, re-read on every
  request (``reload=True``): a test that edits a file after listing makes the entry the
  host holds stale, as an edited skill folder does in use.
* ``--drifted``: a ``SkillManifestProvider`` (fastmcp's provider for skills whose manifest
  is stored apart from their files) serving skill ``drifted``, whose stored manifest's
  frontmatter says another description than its ``SKILL.md`` while its digest and size
  are those of the file: a catalog that drifted from its files.
* ``--extension ID``: a fastmcp ``ServerExtension`` that declares ``ID`` and adds no
  method (an extension a client of this server could know and a gateway does not).
* ``--app``: an MCP App (``io.modelcontextprotocol/ui``): tool ``clock`` whose
  ``_meta.ui.resourceUri`` is ``ui://clock/view`` (an HTML resource, mime
  ``text/html;profile=mcp-app``), and the app-only tool ``clock_tick``.

Always: tool ``echo {text}``. fastmcp declares ``io.modelcontextprotocol/ui`` on every
server, and ``io.modelcontextprotocol/skills`` once a skills provider is added.
"""

from __future__ import annotations

import argparse
import hashlib

from fastmcp import FastMCP
from fastmcp.apps.config import AppConfig
from fastmcp.server.extensions import ServerExtension
from fastmcp.skills import SkillManifest
from fastmcp.skills.provider import (
    SkillFileResource,
    SkillManifestProvider,
    SkillsDirectoryProvider,
)

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--skills", action="append", default=[])
parser.add_argument("--drifted", action="store_true")
parser.add_argument("--app", action="store_true")
parser.add_argument("--extension", action="append", default=[])
ARGS = parser.parse_args()

server = FastMCP("trunkline-fastmcp-skills", version="0.1.0")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


DRIFTED_MD = (b"---\nname: drifted\ndescription: What the file says\n---\n\n"
              b"# Drifted\n\nThe body.\n")


class DriftedSkills(SkillManifestProvider):
    """One skill whose stored manifest's frontmatter is not its file's."""

    async def load_manifests(self) -> dict[str, SkillManifest]:
        digest = "sha256:" + hashlib.sha256(DRIFTED_MD).hexdigest()
        return {"drifted": SkillManifest.model_validate({
            "frontmatter": {"name": "drifted", "description": "What the listing says"},
            "files": {"SKILL.md": {"digest": digest, "size": len(DRIFTED_MD)}}})}

    async def read_file(self, resource: SkillFileResource) -> bytes:
        return DRIFTED_MD


class Declared(ServerExtension):
    """An extension declared, with no method of its own."""

    def __init__(self, identifier: str) -> None:
        self.identifier = identifier


for identifier in ARGS.extension:
    server.add_extension(Declared(identifier))
for root in ARGS.skills:
    server.add_provider(SkillsDirectoryProvider(root, reload=True))
if ARGS.drifted:
    server.add_provider(DriftedSkills())

if ARGS.app:
    VIEW = "ui://clock/view"

    @server.tool(description="The time, with a clock face.", app=AppConfig(resource_uri=VIEW))
    def clock() -> str:
        return "12:00"

    @server.tool(description="Advance the clock (the view calls it).",
                 app=AppConfig(resource_uri=VIEW, visibility=["app"]))
    def clock_tick() -> str:
        return "12:01"

    @server.resource(VIEW, description="The clock's face.")
    def clock_view() -> str:
        return "<!DOCTYPE html><html><body><p id=clock>12:00</p></body></html>"


if __name__ == "__main__":
    server.run(show_banner=False)
