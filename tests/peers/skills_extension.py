"""The MCP Skills extension (``io.modelcontextprotocol/skills``, SEP-2640) on the official
Python SDK's extension interface (mcp 2.x ``mcp.server.extension``, SEP-2133), for
tests/peers/conformance_everything.py: skills served as resources, with skills/list,
skills/get and resources/directory/read.

    skills = Skills([Skill({"name": "pdf-tools", "description": "..."}, "# body",
                           {"references/FORMS.md": "..."})])
    server = MCPServer(..., extensions=[skills])

The rules:

- A skill is a directory of text files with ``SKILL.md`` at its root; the final segment
  of its path is its name. Every file is a resource ``skill://<name>/<path>`` (SKILL.md as
  ``text/markdown``, named and described from its frontmatter), read with resources/read.
- ``SKILL.md`` begins with YAML frontmatter; here each value is written as JSON (a YAML
  flow scalar or mapping), so the frontmatter a client parses from the file is exactly
  the object skills/list sends.
- A skill entry is ``{uri, frontmatter, resources}``: ``uri`` the SKILL.md resource, and
  ``resources`` the complete manifest, one ``{uri, digest: "sha256:<hex>", size}`` per
  file (SKILL.md included) over the UTF-8 bytes resources/read serves.
- skills/list answers every entry on one page (a cursor it never issued is -32602);
  skills/get answers one entry by its uri, -32602 for any other; both carry ``ttlMs`` and
  ``cacheScope``.
- The extension is declared as ``{"directoryRead": true}``: resources/directory/read on a
  directory (a skill's root or a folder in it) answers its direct children, files with
  their mime type and folders as ``inode/directory``, on one page; on anything else it
  is -32602.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ResourceBinding
from mcp.server.mcpserver.resources import TextResource
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PaginatedRequestParams, RequestParams

EXTENSION_ID = "io.modelcontextprotocol/skills"
SCHEME = "skill://"
MARKDOWN = "text/markdown"
DIRECTORY = "inode/directory"
#: Caching hints on skills/list and skills/get (SEP-2549): the skills never change.
CACHE = {"ttlMs": 60_000, "cacheScope": "public"}


@dataclass
class Skill:
    """One skill: its frontmatter, the body of its SKILL.md, and its other files by
    path (``references/FORMS.md``)."""

    frontmatter: dict[str, Any]
    body: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.frontmatter["name"]

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.name}/SKILL.md"

    def skill_md(self) -> str:
        lines = [f"{key}: {json.dumps(value)}" for key, value in self.frontmatter.items()]
        return "---\n" + "\n".join(lines) + "\n---\n\n" + self.body

    def contents(self) -> dict[str, str]:
        """Every file by its uri, SKILL.md first."""
        return {self.uri: self.skill_md(),
                **{f"{SCHEME}{self.name}/{path}": text for path, text in self.files.items()}}

    def entry(self) -> dict[str, Any]:
        manifest = []
        for uri, text in self.contents().items():
            data = text.encode()
            manifest.append({"uri": uri, "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
                             "size": len(data)})
        return {"uri": self.uri, "frontmatter": dict(self.frontmatter), "resources": manifest}


class SkillParams(RequestParams):
    uri: str


class DirectoryParams(RequestParams):
    uri: str
    cursor: str | None = None


def mime_type(uri: str) -> str:
    return MARKDOWN if uri.endswith(".md") else "text/plain"


class Skills(Extension):
    """The skills extension over a fixed set of skills."""

    identifier = EXTENSION_ID

    def __init__(self, skills: Sequence[Skill]) -> None:
        self._skills = {skill.uri: skill for skill in skills}
        #: directory uri -> its direct children (uri -> mime type), folders included
        self._directories: dict[str, dict[str, str]] = {}
        for skill in skills:
            for uri in skill.contents():
                child, kind = uri, mime_type(uri)
                while child.rstrip("/") != f"{SCHEME}{skill.name}":
                    parent = child.rsplit("/", 1)[0]
                    self._directories.setdefault(parent, {})[child] = kind
                    child, kind = parent, DIRECTORY

    def settings(self) -> dict[str, Any]:
        return {"directoryRead": True}

    def resources(self) -> Sequence[ResourceBinding]:
        bindings = []
        for skill in self._skills.values():
            for uri, text in skill.contents().items():
                is_skill_md = uri == skill.uri
                bindings.append(ResourceBinding(TextResource(
                    uri=uri, name=skill.name if is_skill_md else uri.rsplit("/", 1)[1],
                    description=skill.frontmatter["description"] if is_skill_md else None,
                    mime_type=mime_type(uri), text=text)))
        return bindings

    def methods(self) -> Sequence[MethodBinding]:
        return (MethodBinding("skills/list", PaginatedRequestParams, self._list),
                MethodBinding("skills/get", SkillParams, self._get),
                MethodBinding("resources/directory/read", DirectoryParams, self._read_directory))

    async def _list(self, ctx: ServerRequestContext[Any, Any],
                    params: PaginatedRequestParams) -> dict[str, Any]:
        if params.cursor is not None:
            raise MCPError(code=INVALID_PARAMS, message="Invalid cursor")
        return {"skills": [skill.entry() for skill in self._skills.values()], **CACHE}

    async def _get(self, ctx: ServerRequestContext[Any, Any],
                   params: SkillParams) -> dict[str, Any]:
        skill = self._skills.get(params.uri)
        if skill is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown skill: {params.uri}",
                           data={"uri": params.uri})
        return {"skill": skill.entry(), **CACHE}

    async def _read_directory(self, ctx: ServerRequestContext[Any, Any],
                              params: DirectoryParams) -> dict[str, Any]:
        children = self._directories.get(params.uri.rstrip("/"))
        if children is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Not a directory: {params.uri}",
                           data={"uri": params.uri})
        if params.cursor is not None:
            raise MCPError(code=INVALID_PARAMS, message="Invalid cursor")
        return {"resources": [{"uri": uri, "name": uri.rsplit("/", 1)[1], "mimeType": kind}
                              for uri, kind in children.items()]}
