"""One server's ``tools/list``, page by page: a pure driver the host feeds results to.

The host asks ``next_params()`` for the params of the next request, sends it through its
own I/O, and hands the decoded ``result`` to ``add_page``; ``True`` means "fetch another
page". When it returns ``False``, ``finish()`` yields the validated ``ToolListing``.

Server faults in the *list* (wrong shapes, a cursor loop, too many pages, a bad
``resultType``) raise ``MalformedMessage`` naming the server: a half-read list must not
reach the catalog. Faults in *one tool* quarantine that tool with a warning; the rest of
the list loads. Misuse by the caller (a page after the end, ``finish`` too early) raises
``RuntimeError``, because that is a bug in the host, not the server.

If the server rejects a cursor mid-list (-32602), throw the driver away and start a new
one: the specification says to discard every page and start over (MCP 2026-07-28,
server/utilities/pagination).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import MalformedMessage
from ..protocol.era import Era
from ..protocol.validate import json_type
from .model import CacheScope, CatalogWarning, ToolEntry, ToolListing, WarningKind

METHOD = "tools/list"
#: A list longer than this many pages is treated as a hostile or broken server. Real
#: servers put dozens of tools on a page; 100 pages is far past any honest catalog.
DEFAULT_MAX_PAGES = 100
#: The tool-name SHOULD of MCP 2026-07-28, server/tools. Names outside it are kept (clients
#: must cope) but warned.
STANDARD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")

_MISSING = object()


def _short(text: str, limit: int = 64) -> str:
    """A cursor or name for an error message: cursors are opaque and can be huge."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


class ListingDriver:
    """Follows ``nextCursor`` across every page of one server's ``tools/list``."""

    def __init__(
        self,
        server: str,
        era: Era | str,
        *,
        protocol_version: str | None = None,
        max_pages: int = DEFAULT_MAX_PAGES,
        task_calls: bool = False,
    ) -> None:
        """``task_calls``: the host runs this (legacy) server's tool calls as tasks, so a
        tool that must be called as one is admitted."""
        if max_pages < 1:
            raise ValueError("max_pages must be at least 1")
        self.server = server
        self.era = Era(era)
        self.protocol_version = protocol_version
        self.max_pages = max_pages
        self.task_calls = task_calls
        self._cursor: str | None = None  # cursor for the next request; None = first page
        self._seen_cursors: set[str] = set()
        self._pages = 0
        self._state = "fetching"  # -> "done" | "failed"
        self._tools: list[ToolEntry] = []
        self._names: set[str] = set()
        self._warnings: list[CatalogWarning] = []
        self._ttl_ms: int | None = None
        self._ttl_problems: dict[str, int] = {}
        self._scopes: list[str | None] = []
        self._listing: ToolListing | None = None

    # --- the three calls the host makes --------------------------------------------

    def next_params(self) -> dict[str, Any]:
        """Params for the next ``tools/list`` request: ``{}`` or ``{"cursor": c}``."""
        self._require("fetching", "next_params")
        # "Was a cursor given" is the only test: an empty string is a real cursor.
        return {} if self._cursor is None else {"cursor": self._cursor}

    def add_page(self, result: Any) -> bool:
        """Take one decoded ``tools/list`` result; ``True`` when another page is needed.

        The driver keeps references into ``result``; the caller must not mutate it later.
        """
        self._require("fetching", "add_page")
        page = self._pages + 1
        try:
            tools, next_cursor = self._check_page(result, page)
        except MalformedMessage:
            self._state = "failed"
            raise
        self._pages = page
        self._absorb_cache_hints(result)
        for index, raw in enumerate(tools, start=1):
            self._absorb_tool(raw, f"tool {index} on page {page}")
        if next_cursor is None:
            self._state = "done"
            return False
        self._seen_cursors.add(next_cursor)
        self._cursor = next_cursor
        return True

    def finish(self) -> ToolListing:
        """The validated listing; only after ``add_page`` returned ``False``."""
        self._require("done", "finish")
        if self._listing is None:
            ttl_ms, scope = self._final_cache_hints()
            self._listing = ToolListing(
                server=self.server,
                era=self.era,
                protocol_version=self.protocol_version,
                tools=tuple(self._tools),
                ttl_ms=ttl_ms,
                cache_scope=scope,
                warnings=tuple(self._warnings),
                pages=self._pages,
            )
        return self._listing

    @property
    def done(self) -> bool:
        return self._state == "done"

    @property
    def pages(self) -> int:
        return self._pages

    # --- page shape ------------------------------------------------------------------

    def _require(self, state: str, call: str) -> None:
        if self._state != state:
            raise RuntimeError(
                f"ListingDriver.{call}() for server {self.server!r} while {self._state}"
            )

    def _malformed(self, message: str) -> MalformedMessage:
        return MalformedMessage(message, server=self.server, method=METHOD)

    def _check_page(self, result: Any, page: int) -> tuple[list[Any], str | None]:
        """Every list-level check, before anything from the page is taken."""
        if not isinstance(result, dict):
            raise self._malformed(
                f"page {page}: result is a JSON {json_type(result)}, not an object"
            )
        self._check_result_type(result, page)
        tools = result.get("tools", _MISSING)
        if tools is _MISSING:
            raise self._malformed(f"page {page}: result has no 'tools'")
        if not isinstance(tools, list):
            raise self._malformed(
                f"page {page}: 'tools' is a JSON {json_type(tools)}, not an array"
            )
        return tools, self._check_next_cursor(result, page)

    def _check_result_type(self, result: dict[str, Any], page: int) -> None:
        value = result.get("resultType", _MISSING)
        if value is _MISSING:
            # Absent means complete for earlier-era servers (MCP 2026-07-28, basic/index,
            # ResultType). A server we proved modern MUST send it, so absence there is a
            # violation (docs/explanation/architecture.md, "Missing resultType").
            if self.era is Era.LEGACY:
                return
            raise self._malformed(f"page {page}: modern result has no resultType")
        if value == "complete":
            return
        if value == "input_required":
            raise self._malformed(
                f"page {page}: resultType 'input_required' is only legal for tools/call, "
                "resources/read and prompts/get"
            )
        # Unknown values are invalid (basic/index, ResultType); we advertise no extension that
        # adds any.
        raise self._malformed(f"page {page}: unknown resultType {value!r}")

    def _check_next_cursor(self, result: dict[str, Any], page: int) -> str | None:
        cursor = result.get("nextCursor")
        if cursor is None:  # missing or null: the end
            return None
        if not isinstance(cursor, str):
            raise self._malformed(
                f"page {page}: nextCursor is a JSON {json_type(cursor)}, not a string"
            )
        if cursor in self._seen_cursors:
            raise self._malformed(
                f"page {page}: nextCursor {_short(cursor)} repeats an earlier cursor (a loop)"
            )
        if page >= self.max_pages:
            raise self._malformed(f"the list did not end within {self.max_pages} pages")
        return cursor

    # --- cache hints -----------------------------------------------------------------

    def _absorb_cache_hints(self, result: dict[str, Any]) -> None:
        if self.era is Era.LEGACY:
            # Legacy (2025-11-25) results carry no cache metadata; never require it, and
            # do not read meaning into fields the legacy schema does not define.
            return
        ttl = self._page_ttl(result.get("ttlMs", _MISSING))
        self._ttl_ms = ttl if self._ttl_ms is None else min(self._ttl_ms, ttl)
        scope = result.get("cacheScope")
        self._scopes.append(scope if scope in ("public", "private") else None)

    def _page_ttl(self, value: Any) -> int:
        if value is _MISSING:
            problem = "ttlMs missing"
        elif isinstance(value, bool) or not isinstance(value, int):
            problem = f"ttlMs is a JSON {json_type(value)}, not an integer"
        elif value < 0:
            problem = "ttlMs negative"
        else:
            return value
        self._ttl_problems[problem] = self._ttl_problems.get(problem, 0) + 1
        return 0

    def _final_cache_hints(self) -> tuple[int, CacheScope]:
        if self.era is Era.LEGACY:
            return 0, "private"
        for problem, count in self._ttl_problems.items():
            self._warn("ttl", f"{problem} on {count} of {self._pages} page(s); read as 0")
        return self._ttl_ms or 0, self._final_scope()

    def _final_scope(self) -> CacheScope:
        scopes = set(self._scopes)
        if scopes == {"public"}:
            return "public"
        if None in scopes:
            # Private is the safe reading: it can only cost a refetch, never a leak.
            self._warn(
                "cache-scope", "cacheScope missing or not 'public'/'private'; read as private"
            )
        elif scopes == {"public", "private"}:
            self._warn("cache-scope", "pages disagree on cacheScope; the whole list is private")
        return "private"

    # --- tools -----------------------------------------------------------------------

    def _warn(self, kind: WarningKind, message: str, tool: str | None = None) -> None:
        self._warnings.append(CatalogWarning(self.server, kind, message, tool))

    def _absorb_tool(self, raw: Any, where: str) -> None:
        entry = self._parse_tool(raw, where)
        if entry is None:
            return
        if entry.local_name in self._names:
            # Only a SHOULD in the spec: decided deterministically
            # (docs/explanation/architecture.md, "Tool names"). The first keeps its place.
            self._warn(
                "duplicate", f"{where} repeats the name of an earlier tool; dropped",
                entry.local_name,
            )
            return
        self._names.add(entry.local_name)
        if not STANDARD_NAME.fullmatch(entry.local_name):
            self._warn(
                "nonstandard-name",
                "name is outside [A-Za-z0-9_.-]{1,128}; kept, expose it to models through an alias",
                entry.local_name,
            )
        self._tools.append(entry)

    def _parse_tool(self, raw: Any, where: str) -> ToolEntry | None:
        """A ``ToolEntry`` (``name == local_name``), or ``None`` after warning why not."""
        if not isinstance(raw, dict):
            self._warn("quarantined", f"{where} is a JSON {json_type(raw)}, not an object")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            if "name" not in raw:
                problem = "has no name"
            elif name == "":
                problem = "has an empty name"
            else:
                problem = f"has a name that is a JSON {json_type(name)}, not a string"
            self._warn("quarantined", f"{where} {problem}")
            return None
        schema_problem = self._schema_problem(raw)
        if schema_problem is not None:
            self._warn("quarantined", f"{where}: {schema_problem}", name)
            return None
        if self._requires_task(raw):
            self._warn(
                "task-required",
                f"{where} must be called as a task, and the server did not declare "
                "tasks.requests.tools.call (or the host follows no tasks); left out",
                name,
            )
            return None
        output_schema = raw.get("outputSchema")
        return ToolEntry(
            name=name,
            server=self.server,
            local_name=name,
            title=self._optional(raw, "title", str, name),
            description=self._optional(raw, "description", str, name),
            input_schema=raw["inputSchema"],
            output_schema=output_schema,
            annotations=self._optional(raw, "annotations", dict, name),
            raw=raw,
        )

    def _schema_problem(self, raw: dict[str, Any]) -> str | None:
        schema = raw.get("inputSchema", _MISSING)
        if schema is _MISSING:
            return "inputSchema is missing"
        if not isinstance(schema, dict):
            return f"inputSchema is a JSON {json_type(schema)}, not an object"
        if schema.get("type") != "object":
            # Tool arguments are always objects; the spec requires the root to say so.
            return f"inputSchema root type is {schema.get('type')!r}, not 'object'"
        output = raw.get("outputSchema")
        if output is None:
            return None
        if not isinstance(output, dict):
            return f"outputSchema is a JSON {json_type(output)}, not an object"
        if self.era is Era.LEGACY and output.get("type") != "object":
            # Legacy structuredContent is always an object, so its schema root must be.
            return f"legacy outputSchema root type is {output.get('type')!r}, not 'object'"
        return None

    def _requires_task(self, raw: dict[str, Any]) -> bool:
        # MCP 2025-11-25: a "required" task-support tool cannot be called without tasks.
        if self.era is not Era.LEGACY or self.task_calls:
            return False
        execution = raw.get("execution")
        return isinstance(execution, dict) and execution.get("taskSupport") == "required"

    def _optional(self, raw: dict[str, Any], key: str, kind: type, tool: str) -> Any:
        """An optional field, or ``None`` (with a warning when it had the wrong type).

        A bad display field is not worth losing the tool over; null counts as absent
        because many SDKs serialize unset optionals that way."""
        value = raw.get(key)
        if value is None or isinstance(value, kind):
            return value
        self._warn("bad-field", f"{key} is a JSON {json_type(value)}; ignored", tool)
        return None
