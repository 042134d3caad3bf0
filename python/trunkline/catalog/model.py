"""The values the catalog passes around: warnings, one server's listing, one catalog entry.

All frozen. The JSON sub-objects they hold (schemas, annotations, the raw tool) are the
decoded objects the caller handed in, not copies: copying every schema of a high-fanout
catalog on every refetch buys nothing when nobody mutates them. Treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..protocol.era import Era

CacheScope = Literal["public", "private"]

#: Machine-readable warning kinds (``CatalogWarning.kind``).
#:
#: - ``quarantined``: a malformed tool was left out; the rest of the server's list loads.
#: - ``task-required``: a legacy tool that must run as a task, which we do not implement.
#: - ``duplicate``: a second tool with a name already seen on the same server (dropped).
#: - ``nonstandard-name``: kept, but outside ``[A-Za-z0-9_.-]{1,128}``.
#: - ``bad-field``: an optional display field of the wrong type, treated as absent.
#: - ``cache-scope``: missing, unknown or inconsistent ``cacheScope``; read as private.
#: - ``ttl``: a ``ttlMs`` that is not a non-negative integer; read as 0.
#: - ``prefixed``: a tool exposed as ``<server>_<tool>`` because other servers offer its name.
#: - ``withheld``: a well-formed tool kept out by its pin or a bound (``catalog.screen``).
WarningKind = Literal[
    "quarantined",
    "task-required",
    "duplicate",
    "nonstandard-name",
    "bad-field",
    "cache-scope",
    "ttl",
    "prefixed",
    "withheld",
]


@dataclass(frozen=True)
class CatalogWarning:
    """Something a server sent that the catalog worked around; never fatal on its own."""

    server: str
    kind: WarningKind
    message: str
    tool: str | None = None

    def __str__(self) -> str:
        where = f"server {self.server!r}"
        if self.tool is not None:
            where += f", tool {self.tool!r}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class ToolEntry:
    """One tool as the host exposes it.

    ``name`` is the name the model sees and calls (always ``[a-zA-Z0-9_-]{1,64}``: see
    ``catalog.names``); ``local_name`` is what ``tools/call`` carries to ``server``. In a
    ``ToolListing`` (before merging) ``name == local_name``; ``build_catalog`` names it.
    ``to_openai()`` and ``to_anthropic()`` are the tool as those APIs declare one.

    Dict-valued fields are excluded from the hash (they are unhashable) but not from
    equality, so equal entries still hash alike.
    """

    name: str
    server: str
    local_name: str
    title: str | None
    description: str | None
    input_schema: Mapping[str, Any] = field(hash=False)
    output_schema: Mapping[str, Any] | None = field(default=None, hash=False)
    annotations: Mapping[str, Any] | None = field(default=None, hash=False)
    #: The tool object exactly as the server sent it (icons, ``_meta``, ... for display).
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)
    #: Deprecated: ``None`` (every ``name`` is model-safe now, so it needs no alias).
    alias: str | None = None

    @property
    def display_name(self) -> str:
        """The precedence of MCP 2026-07-28, server/tools: ``title``, then
        ``annotations.title``, then ``name``."""
        if self.title:
            return self.title
        annotated = self.annotations.get("title") if self.annotations else None
        if isinstance(annotated, str) and annotated:
            return annotated
        return self.name

    @property
    def model_name(self) -> str:
        """The name a model calls this tool by: ``name``."""
        return self.alias if self.alias is not None else self.name

    def to_openai(self, api: Literal["chat", "responses"] = "chat") -> dict[str, Any]:
        """The tool as OpenAI's function calling declares one: for the Chat Completions
        API (``tools=[...]``) ``{"type": "function", "function": {"name", "description",
        "parameters"}}``; for the Responses API (``api="responses"``) ``{"type":
        "function", "name", "description", "parameters", "strict": false}`` (``strict``
        is true there unless said, and strict mode refuses most MCP input schemas: it
        needs every property required and ``additionalProperties: false``). No
        description, no ``description`` key. The schema is the catalog's own object:
        copy it before changing it."""
        function: dict[str, Any] = {"name": self.model_name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.input_schema
        if api == "chat":
            return {"type": "function", "function": function}
        if api == "responses":
            return {"type": "function", **function, "strict": False}
        raise ValueError(f"api must be 'chat' or 'responses', not {api!r}")

    def to_anthropic(self) -> dict[str, Any]:
        """The tool as Anthropic's Messages API declares one (``tools=[...]``): ``{"name",
        "description", "input_schema"}`` (no description, no ``description`` key). The
        schema is the catalog's own object: copy it before changing it."""
        tool: dict[str, Any] = {"name": self.model_name}
        if self.description is not None:
            tool["description"] = self.description
        tool["input_schema"] = self.input_schema
        return tool


@dataclass(frozen=True)
class ToolListing:
    """Every page of one server's ``tools/list``, validated and deduplicated.

    ``tools`` are in the server's order with malformed tools, duplicates and (legacy)
    task-required tools already removed. ``ttl_ms`` is the minimum over the pages: the
    list is cached as one unit, so it is as fresh as its stalest page. That is stricter
    than the spec's per-page caching and never serves a page past its own TTL as long as
    the cache's clock starts at the first page's receipt.
    """

    server: str
    era: Era
    protocol_version: str | None
    tools: tuple[ToolEntry, ...]
    ttl_ms: int
    cache_scope: CacheScope
    warnings: tuple[CatalogWarning, ...] = ()
    pages: int = 1
