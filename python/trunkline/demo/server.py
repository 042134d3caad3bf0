"""Small, well-behaved MCP stdio servers bundled for ``trunkline demo``.

Run one with::

    python -m trunkline.demo.server --profile {web,docs,archive} [--name NAME] \
        [--crash-after N] [-v]

One program, three profiles. The profile picks the identity, the protocol era and
the tools; the JSON-RPC plumbing is shared.

``web`` (modern, 2026-07-28 only)
    ``search {query, limit?}``  deterministic fake web results, as JSON text content
                                and as ``structuredContent`` (declared ``outputSchema``)
    ``fetch {url, delayMs?}``   a canned page; ``delayMs`` simulates a slow network
                                and makes the call cancellable
``docs`` (modern, 2026-07-28 only)
    ``search {query, limit?}``  built-in MCP documentation snippets (text content)
    ``summarize {text}``        the first sentence of ``text``
                                and one skill (MCP's skills extension, SEP-2640):
                                ``skill://mcp-eras/SKILL.md`` with a reference file,
                                served by ``skills/list``, ``skills/get``,
                                ``resources/list`` and ``resources/read``
``archive`` (legacy, 2025-11-25 and earlier; behaves like a TypeScript SDK 1.x server)
    ``lookup {id}``             one archived record (text + ``structuredContent``)
    ``search {query, limit?}``  archived records whose title or summary match
    ``digest {year?}``          a digest of the archive (of one year's records): run as a
                                task when the call asks for one (``taskSupport``
                                ``optional``), else answered at once

All three expose ``search`` on purpose: the demo shows the host's collision policy on
a three-way clash (a contested name is prefixed with its server's on every server that
has it: ``web_search``, ``docs_search``, ``archive_search``).

Protocol behaviour
------------------
Modern profiles (stateless, no handshake):
  * ``server/discover`` -> ``DiscoverResult`` (supportedVersions ["2026-07-28"],
    capabilities {"tools": {"listChanged": false}}, ttlMs, cacheScope "public"; the
    ``docs`` profile adds {"resources": {}, "extensions":
    {"io.modelcontextprotocol/skills": {}}}).
  * Skills (``docs``): ``skills/list`` (one page), ``skills/get`` (an unknown URI ->
    -32602), ``resources/list`` (the skill's files), ``resources/read`` (an unknown
    URI -> -32602); each entry lists every file with its SHA-256 digest and size.
  * Every request other than ``ping`` and ``initialize`` must carry
    ``params._meta["io.modelcontextprotocol/protocolVersion"]`` (a string) and
    ``params._meta["io.modelcontextprotocol/clientCapabilities"]`` (an object).
    Missing/mistyped protocolVersion -> -32602; a version other than 2026-07-28 ->
    -32022 with data {supported, requested}; then missing/mistyped
    clientCapabilities -> -32602. The version is checked before the capabilities
    because a client speaking another revision needs the -32022 to move on.
  * ``initialize`` -> -32022 listing the supported versions (a modern-only server).
  * Every result carries ``resultType: "complete"`` and ``_meta`` serverInfo;
    ``tools/list`` and ``server/discover`` also carry ``ttlMs`` and ``cacheScope``.
Legacy profile:
  * ``server/discover`` (like any unknown method) -> -32601 Method not found.
  * ``initialize`` -> InitializeResult; the requested protocolVersion is echoed when
    it is one of 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05, else 2025-11-25 is
    proposed. A second ``initialize`` -> -32600.
  * ``tools/list`` / ``tools/call`` are served only after the InitializeResult was
    sent AND ``notifications/initialized`` arrived. Before that they get -32600
    "Server not initialized". (Real TypeScript SDK 1.x servers execute such requests
    anyway; the demo server refuses so a client that skips the handshake - or a
    modern client that never probed - fails visibly instead of silently.)
  * Results have the legacy shape: no resultType, ttlMs, cacheScope or _meta.
Common:
  * ``ping`` -> an empty result in every state (modern: ``{"resultType":"complete",
    "_meta":...}``, legacy: ``{}``); it needs no ``_meta`` - it is a liveness check.
  * Unknown methods -> -32601. Notifications are never answered; only
    ``notifications/cancelled`` (and, legacy, ``notifications/initialized``) act.
  * Unknown tool or malformed ``tools/call`` params -> -32602. Arguments that do not
    satisfy the tool's ``inputSchema`` -> a tool *execution* error (``isError: true``
    with an explanation), so a model can correct itself.
  * ``tools/list`` with a ``cursor`` -> -32602 (this server never issues cursors).
  * Unparseable line -> -32700 without an id; a JSON value that is not a request
    object -> -32600; JSON-RPC responses sent by the client are ignored.
  * ``notifications/cancelled {requestId}`` drops a pending delayed answer
    (``fetch`` with ``delayMs``); nothing is written for that request afterwards.
  * stdout carries only compact JSON-RPC lines ending in ``\\n``. stderr stays silent
    unless ``-v`` is given (or an internal error happens). The process exits 0 on
    stdin EOF without waiting for delayed answers.

Tasks (archive, MCP 2025-11-25 core tasks):
  * ``initialize`` declares ``tasks.requests.tools.call`` and ``tasks.cancel``; a tool
    lists ``execution.taskSupport`` when it can run as a task (``digest``).
  * A ``tools/call`` of such a tool carrying ``task`` (an object) is answered at once
    with ``{"task": {...}}`` (``working``); the task moves through its stages
    (``statusMessage``, ``TASK_STAGE_S`` apart) to ``completed``. Without ``task`` the
    tool answers as any other.
  * ``tasks/get {taskId}`` -> the task; ``tasks/result {taskId}`` -> the tool's result
    (``_meta`` ``io.modelcontextprotocol/related-task``) once the task has ended, the
    answer waiting until then; ``tasks/cancel {taskId}`` -> the task, ``cancelled``
    (-32602 for a task that has ended). An unknown id is -32602. Ids are random; a
    task is forgotten ``TASK_TTL_MS`` after it was created.

``--crash-after N`` exits with code 1 right after the N-th ``tools/call`` answer is
written (any answer, result or error) - a deterministic "server died" for demos.
``--name`` overrides serverInfo.name (default: the profile name).

Standard library only, and nothing from the rest of trunkline: startup stays cheap.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, NoReturn, TypedDict

Json = dict[str, Any]

MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SERVER_VERSION = "1.0.0"

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022

#: The requests about tasks a legacy profile serves (2025-11-25 core tasks).
TASK_METHODS = ("tasks/get", "tasks/result", "tasks/cancel")
#: Freshness hint on cacheable modern results (server/discover, tools/list).
TTL_MS = 300_000
MAX_DELAY_MS = 60_000
#: A task's stages are this far apart (seconds); it is kept this long (milliseconds) and
#: asks to be looked at this often (milliseconds).
TASK_STAGE_S = 0.3
TASK_TTL_MS = 60_000
TASK_POLL_MS = 200
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"


# --------------------------------------------------------------------------- tools


class RpcError(Exception):
    """Answer the request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    def to_json(self) -> Json:
        error: Json = {"code": self.code, "message": str(self)}
        if self.data is not None:
            error["data"] = self.data
        return error


class ToolError(Exception):
    """A tool execution error: answered as a result with ``isError: true``."""


@dataclass(frozen=True)
class ToolOutput:
    """What a tool produced. ``delay`` (seconds) postpones the answer; a delayed
    answer can be cancelled with ``notifications/cancelled``."""

    text: Sequence[str]
    structured: Json | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: Json
    run: Callable[[Json], ToolOutput]
    output_schema: Json | None = None
    open_world: bool = False
    #: ``execution.taskSupport`` (``optional``: it runs as a task when asked to).
    task_support: str | None = None
    #: The ``statusMessage`` of each stage it goes through as a task.
    stages: tuple[str, ...] = ()

    def definition(self) -> Json:
        tool: Json = {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.output_schema is not None:
            tool["outputSchema"] = self.output_schema
        tool["annotations"] = {"readOnlyHint": True, "openWorldHint": self.open_world}
        if self.task_support is not None:
            tool["execution"] = {"taskSupport": self.task_support}
        return tool


def _object(properties: Json, required: Sequence[str] = ()) -> Json:
    schema: Json = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


def check_arguments(schema: Json, arguments: Json) -> Json:
    """Validate ``arguments`` against one of this module's own input schemas (flat
    objects of strings and bounded integers - the only keywords they use). Returns
    the arguments with integral floats turned into ints; raises ToolError."""
    properties: Json = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in arguments:
            raise ToolError(f"Missing required argument '{key}'.")
    checked: Json = {}
    for key, value in arguments.items():
        spec = properties.get(key)
        if spec is None:
            raise ToolError(f"Unexpected argument '{key}'; expected: {', '.join(properties)}.")
        if not _TYPES[spec["type"]](value):
            raise ToolError(f"Argument '{key}' must be of type {spec['type']}.")
        if spec["type"] == "integer":
            value = int(value)
            low, high = spec.get("minimum"), spec.get("maximum")
            if (low is not None and value < low) or (high is not None and value > high):
                raise ToolError(f"Argument '{key}' must be between {low} and {high}.")
        if spec["type"] == "string" and len(value) < spec.get("minLength", 0):
            raise ToolError(f"Argument '{key}' must not be empty.")
        checked[key] = value
    return checked


_QUERY = {"type": "string", "minLength": 1, "description": "What to search for."}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 10,
          "description": "At most this many hits (default 3)."}
_SEARCH_INPUT = _object({"query": _QUERY, "limit": _LIMIT}, ["query"])
_DEFAULT_LIMIT = 3


def _terms(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _rank(query: str, entries: Sequence[tuple[str, str]], limit: int) -> list[int]:
    """Indexes of ``(title, body)`` entries sharing words with ``query``: most
    distinct shared words first, then built-in order. Deterministic."""
    wanted = set(_terms(query))
    scored = []
    for index, (title, body) in enumerate(entries):
        score = len(wanted.intersection(_terms(f"{title} {body}")))
        if score:
            scored.append((-score, index))
    return [index for _, index in sorted(scored)[:limit]]


# web ----------------------------------------------------------------------------

_WEB_SITES = (
    ("example.com", "Overview"),
    ("example.org", "Guide"),
    ("example.net", "Reference"),
    ("docs.example.com", "Tutorial"),
    ("blog.example.org", "Field notes"),
    ("wiki.example.net", "Encyclopedia entry"),
    ("news.example.com", "News"),
    ("forum.example.org", "Discussion"),
    ("papers.example.net", "Paper"),
    ("learn.example.com", "Course"),
)

WEB_SEARCH_OUTPUT = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "url": {"type": "string"}},
                "required": ["title", "url"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["results"],
    "additionalProperties": False,
}


def web_search(args: Json) -> ToolOutput:
    query = args["query"].strip()
    limit = args.get("limit", _DEFAULT_LIMIT)
    slug = "-".join(_terms(query)) or "query"
    start = zlib.crc32(query.lower().encode()) % len(_WEB_SITES)
    results = []
    for n in range(limit):
        host, kind = _WEB_SITES[(start + n) % len(_WEB_SITES)]
        results.append({"title": f"{query} - {kind}", "url": f"https://{host}/{slug}/{n + 1}"})
    structured = {"results": results}
    return ToolOutput([json.dumps(structured, separators=(",", ":"))], structured)


def web_fetch(args: Json) -> ToolOutput:
    url = args["url"]
    if not url.startswith(("http://", "https://")):
        raise ToolError("Only http:// and https:// URLs can be fetched.")
    page = (
        f"Fetched {url} (canned demo page; no network access was used).\n\n"
        "# Example Domain\n\n"
        "This domain is for use in illustrative examples in documents. "
        "You may use this domain in literature without prior coordination or asking for permission."
    )
    return ToolOutput([page], delay=args.get("delayMs", 0) / 1000)


WEB_TOOLS = (
    Tool(
        "search",
        "Web search",
        "Search the web (demo: deterministic fake results, no network). Returns titles and URLs.",
        _SEARCH_INPUT,
        web_search,
        output_schema=WEB_SEARCH_OUTPUT,
        open_world=True,
    ),
    Tool(
        "fetch",
        "Fetch a page",
        "Fetch a web page and return its text (demo: a canned page). "
        "delayMs simulates a slow network.",
        _object(
            {
                "url": {"type": "string", "minLength": 1, "description": "http(s) URL to fetch."},
                "delayMs": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_DELAY_MS,
                    "description": "Answer only after this many milliseconds (default 0).",
                },
            },
            ["url"],
        ),
        web_fetch,
        open_world=True,
    ),
)


# docs ---------------------------------------------------------------------------

DOC_SNIPPETS = (
    (
        "server/discover",
        "Modern servers answer server/discover with their supported versions, capabilities "
        "and identity. A dual-era client sends it first on stdio to tell modern from legacy "
        "servers.",
    ),
    (
        "Request _meta",
        "Every modern request carries io.modelcontextprotocol/protocolVersion and "
        "io.modelcontextprotocol/clientCapabilities in params._meta. A request without them is "
        "rejected with -32602.",
    ),
    (
        "Unsupported protocol version",
        "A server that does not implement the requested version answers -32022 with "
        "data.supported and data.requested. The client retries with a mutually supported version.",
    ),
    (
        "resultType",
        "Every modern result carries resultType. complete is a final result; input_required "
        "asks the client for more input. Legacy results omit it and count as complete.",
    ),
    (
        "Caching with ttlMs and cacheScope",
        "server/discover and tools/list results carry ttlMs and cacheScope. A result stays fresh "
        "for ttlMs milliseconds after receipt; public results may be shared across users.",
    ),
    (
        "Tool name collisions",
        "Tool names are unique only within one server. A host that merges several servers should "
        "disambiguate colliding names, for example by prefixing a server identifier.",
    ),
    (
        "Structured tool output",
        "A tool may declare an outputSchema. Its structuredContent must then conform, and the "
        "client should validate it. The serialized JSON should also appear as text content.",
    ),
    (
        "Cancellation on stdio",
        "On stdio a client cancels a request with notifications/cancelled carrying the requestId. "
        "The server should stop the work and send nothing more for that request.",
    ),
    (
        "Legacy initialize handshake",
        "Servers of revision 2025-11-25 and earlier expect initialize, then "
        "notifications/initialized, before anything else. The client must not fall back to it "
        "after modern evidence.",
    ),
    (
        "stdio framing",
        "On stdio each JSON-RPC message is one line of compact JSON. The server writes only MCP "
        "messages to stdout; logs go to stderr. Closing stdin asks the server to exit.",
    ),
)


def docs_search(args: Json) -> ToolOutput:
    query = args["query"]
    hits = _rank(query, DOC_SNIPPETS, args.get("limit", _DEFAULT_LIMIT))
    if not hits:
        return ToolOutput([f"No documentation snippet matches {query!r}."])
    return ToolOutput([f"{DOC_SNIPPETS[i][0]}: {DOC_SNIPPETS[i][1]}" for i in hits])


_SENTENCE = re.compile(r".+?[.!?](?=\s|$)", re.DOTALL)


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = _SENTENCE.match(text)
    return match.group(0) if match else text


def docs_summarize(args: Json) -> ToolOutput:
    summary = first_sentence(args["text"])
    if not summary:
        raise ToolError("Nothing to summarize: text is blank.")
    return ToolOutput([summary])


DOCS_TOOLS = (
    Tool(
        "search",
        "Search MCP docs",
        "Search built-in Model Context Protocol documentation snippets. One text block per hit.",
        _SEARCH_INPUT,
        docs_search,
    ),
    Tool(
        "summarize",
        "Summarize text",
        "Summarize a text (demo: returns its first sentence).",
        _object({"text": {"type": "string", "description": "The text to summarize."}}, ["text"]),
        docs_summarize,
    ),
)


#: The docs profile's skills: each skill's path -> its files (path -> text).
DOCS_SKILLS: dict[str, dict[str, str]] = {
    "mcp-eras": {
        "SKILL.md": "---\nname: mcp-eras\ndescription: Tell which MCP era a server speaks, "
                    "and what follows from it\n---\n\n# MCP eras\n\nA server that answers "
                    "server/discover is modern (2026-07-28); one that needs initialize is "
                    "legacy. See references/HANDSHAKE.md for the old handshake.\n",
        "references/HANDSHAKE.md": "# The initialize handshake\n\ninitialize, its result, "
                                   "then notifications/initialized: one session per "
                                   "connection.\n",
    },
}
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"


def _skill_entry(path: str, files: dict[str, str]) -> Json:
    """A skill's SEP-2640 entry: its frontmatter, and every file's digest and size."""
    header = files["SKILL.md"].split("---\n")[1]
    frontmatter = dict(line.split(": ", 1) for line in header.strip().splitlines())
    return {"uri": f"skill://{path}/SKILL.md", "frontmatter": frontmatter, "resources": [
        {"uri": f"skill://{path}/{name}",
         "digest": "sha256:" + hashlib.sha256(text.encode()).hexdigest(),
         "size": len(text.encode())} for name, text in sorted(files.items())]}


def _skill_files(skills: dict[str, dict[str, str]]) -> dict[str, str]:
    return {f"skill://{path}/{name}": text for path, files in skills.items()
            for name, text in files.items()}


# archive ------------------------------------------------------------------------

class ArchiveRecord(TypedDict):
    id: str
    title: str
    year: int
    summary: str


ARCHIVE_RECORDS: tuple[ArchiveRecord, ...] = (
    {
        "id": "mcp-2024-11-05",
        "title": "MCP revision 2024-11-05",
        "year": 2024,
        "summary": "First public revision: initialize handshake, stdio and HTTP+SSE "
                   "transports, tools, resources and prompts.",
    },
    {
        "id": "mcp-2025-03-26",
        "title": "MCP revision 2025-03-26",
        "year": 2025,
        "summary": "Streamable HTTP replaces HTTP+SSE; OAuth authorization; tool annotations.",
    },
    {
        "id": "mcp-2025-06-18",
        "title": "MCP revision 2025-06-18",
        "year": 2025,
        "summary": "Structured tool output with outputSchema, elicitation, resource links; "
                   "JSON-RPC batching removed.",
    },
    {
        "id": "mcp-2025-11-25",
        "title": "MCP revision 2025-11-25",
        "year": 2025,
        "summary": "Tasks, URL elicitation, icons and sampling with tools: the last "
                   "revision with the initialize handshake.",
    },
    {
        "id": "rfc-2119",
        "title": "RFC 2119: Key words for use in RFCs",
        "year": 1997,
        "summary": "Defines MUST, SHOULD and MAY, the requirement levels used throughout "
                   "the MCP specification.",
    },
    {
        "id": "json-rpc-2.0",
        "title": "JSON-RPC 2.0 Specification",
        "year": 2010,
        "summary": "The stateless request, response and notification envelope that MCP "
                   "messages use.",
    },
)
_RECORDS_BY_ID = {record["id"]: record for record in ARCHIVE_RECORDS}

ARCHIVE_RECORD_OUTPUT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "title": {"type": "string"},
        "year": {"type": "integer"},
        "summary": {"type": "string"},
    },
    "required": ["id", "title", "year", "summary"],
    "additionalProperties": False,
}


def archive_lookup(args: Json) -> ToolOutput:
    record = _RECORDS_BY_ID.get(args["id"])
    if record is None:
        known = ", ".join(_RECORDS_BY_ID)
        raise ToolError(f"No archived record with id {args['id']!r}. Known ids: {known}.")
    return ToolOutput([json.dumps(record, separators=(",", ":"))], dict(record))


def archive_search(args: Json) -> ToolOutput:
    query = args["query"]
    entries = [(r["title"], r["summary"]) for r in ARCHIVE_RECORDS]
    hits = _rank(query, entries, args.get("limit", _DEFAULT_LIMIT))
    if not hits:
        return ToolOutput([f"No archived record matches {query!r}."])
    lines = [f"{r['id']}: {r['title']} ({r['year']})" for r in (ARCHIVE_RECORDS[i] for i in hits)]
    return ToolOutput(["\n".join(lines)])


def archive_digest(args: Json) -> ToolOutput:
    year = args.get("year")
    records = [r for r in ARCHIVE_RECORDS if year is None or r["year"] == year]
    if not records:
        raise ToolError(f"No archived record from {year}.")
    lines = [f"{r['year']} {r['title']}: {r['summary']}" for r in records]
    return ToolOutput([f"Digest of {len(records)} archived records:\n" + "\n".join(lines)])


ARCHIVE_TOOLS = (
    Tool(
        "lookup",
        "Look up a record",
        "Return one archived record by id (e.g. mcp-2025-06-18, rfc-2119).",
        _object({"id": {"type": "string", "description": "The record id."}}, ["id"]),
        archive_lookup,
        output_schema=ARCHIVE_RECORD_OUTPUT,
    ),
    Tool(
        "search",
        "Search the archive",
        "Search archived records (old MCP revisions and related standards) by title and summary.",
        _SEARCH_INPUT,
        archive_search,
    ),
    Tool(
        "digest",
        "Digest the archive",
        "A digest of every archived record, or of one year's. Takes a while: runs as a "
        "task when the client asks for one.",
        _object({"year": {"type": "integer", "minimum": 1900, "maximum": 2100,
                          "description": "Only the records of this year."}}),
        archive_digest,
        task_support="optional",
        stages=("Reading the records...", "Writing the digest..."),
    ),
)


# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    name: str
    modern: bool
    description: str
    tools: tuple[Tool, ...]
    instructions: str
    #: Skills served (path -> files), modern profiles only.
    skills: dict[str, dict[str, str]] = field(default_factory=dict)
    tools_by_name: dict[str, Tool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools_by_name", {t.name: t for t in self.tools})


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "web",
            True,
            "modern (2026-07-28) fake web search: search, fetch",
            WEB_TOOLS,
            "Use search to find pages and fetch to read one. Results are canned demo data.",
        ),
        Profile(
            "docs",
            True,
            "modern (2026-07-28) MCP documentation snippets: search, summarize",
            DOCS_TOOLS,
            "Use search for questions about the Model Context Protocol.",
            DOCS_SKILLS,
        ),
        Profile(
            "archive",
            False,
            "legacy (2025-11-25) record archive, initialize handshake: lookup, search, "
            "digest (a task)",
            ARCHIVE_TOOLS,
            "Use search to find archived records and lookup to read one by id.",
        ),
    )
}


# --------------------------------------------------------------------------- server

#: The requests a profile with skills answers besides its tools'.
_SKILL_METHODS = ("skills/list", "skills/get", "resources/list", "resources/read")


def _now_iso() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


@dataclass
class DemoTask:
    """One tool call run as a task (2025-11-25 core tasks)."""

    id: str
    tool: Tool
    arguments: Json
    created: str
    born: float  #: ``time.monotonic()`` at creation
    status: str = "working"
    message: str = ""
    updated: str = ""
    step: int = 0
    result: Json | None = None
    timer: threading.Timer | None = None
    #: ``tasks/result`` requests waiting for its end, by id.
    waiting: list[Any] = field(default_factory=list)

    def wire(self) -> Json:
        return {"taskId": self.id, "status": self.status, "statusMessage": self.message,
                "createdAt": self.created, "lastUpdatedAt": self.updated,
                "ttl": TASK_TTL_MS, "pollInterval": TASK_POLL_MS}


def _id_key(request_id: Any) -> tuple[bool, Any]:
    # 1 and "1" are different JSON-RPC ids.
    return (isinstance(request_id, str), request_id)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


class Server:
    """One stdio connection. ``serve`` blocks until stdin EOF."""

    def __init__(
        self,
        profile: Profile,
        out: BinaryIO,
        *,
        name: str | None = None,
        crash_after: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.profile = profile
        self.info = {"name": name or profile.name, "version": SERVER_VERSION}
        self.out = out
        self.crash_after = crash_after
        self.verbose = verbose
        self.lock = threading.Lock()  # guards stdout, pending and calls_answered
        self.pending: dict[tuple[bool, Any], threading.Timer] = {}
        self.calls_answered = 0
        # Legacy lifecycle: "new" -> "initializing" (InitializeResult sent) -> "ready".
        self.state = "new"
        #: Tool calls run as tasks, by id (guarded by ``lock``).
        self.tasks: dict[str, DemoTask] = {}

    # -- I/O ------------------------------------------------------------------

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"[demo {self.info['name']}] {text}", file=sys.stderr, flush=True)

    def _write_locked(self, message: Json) -> None:
        data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        try:
            self.out.write(data)
            self.out.flush()
        except (BrokenPipeError, ValueError):  # the client closed our stdout
            os._exit(0)

    def _answer_locked(self, request_id: Any, body: Json, method: str) -> None:
        self._write_locked({"jsonrpc": "2.0", "id": request_id, **body})
        if method == "tools/call":
            self.calls_answered += 1
            if self.crash_after is not None and self.calls_answered >= self.crash_after:
                self.log(f"--crash-after {self.crash_after}: exiting")
                os._exit(1)

    def answer(self, request_id: Any, body: Json, method: str) -> None:
        with self.lock:
            self._answer_locked(request_id, body, method)

    def serve(self, stdin: BinaryIO) -> int:
        for line in iter(stdin.readline, b""):
            if line.strip():
                self.handle_line(line)
        self.log("stdin closed: exiting")
        with self.lock:
            for timer in self.pending.values():
                timer.cancel()
            self.pending.clear()
            for task in self.tasks.values():
                if task.timer is not None:
                    task.timer.cancel()
            self.tasks.clear()
        return 0

    # -- dispatch ---------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        try:
            message = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            self.log("unparseable line")
            self.answer_error(None, RpcError(PARSE_ERROR, "Parse error"))
            return
        if not isinstance(message, dict):
            self.answer_error(
                None, RpcError(INVALID_REQUEST, "Invalid request: expected a JSON object"))
            return
        has_id = "id" in message
        request_id = message.get("id")
        method = message.get("method")
        if not isinstance(method, str):
            if has_id and ("result" in message or "error" in message):
                self.log("ignoring a JSON-RPC response from the client")
                return
            self.answer_error(request_id if _valid_id(request_id) else None,
                              RpcError(INVALID_REQUEST, "Invalid request: no method"))
            return
        if message.get("jsonrpc") != "2.0" or (has_id and not _valid_id(request_id)):
            self.answer_error(request_id if _valid_id(request_id) else None,
                              RpcError(INVALID_REQUEST, "Invalid request: bad jsonrpc or id"))
            return
        params = message.get("params", {})
        if not has_id:
            self.notification(method, params)
            return
        try:
            with self.lock:
                if _id_key(request_id) in self.pending:
                    raise RpcError(INVALID_REQUEST,
                                   "Request id is already in use by a pending request")
            if params is not None and not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            result = self.request(request_id, method, params or {})
        except RpcError as error:
            self.answer_error(request_id, error, method)
            return
        except Exception as exc:  # noqa: BLE001 - a bug in this server: report it, keep serving
            print(f"[demo {self.info['name']}] internal error in {method}: {exc!r}",
                  file=sys.stderr, flush=True)
            self.answer_error(request_id, RpcError(INTERNAL_ERROR, "Internal error"), method)
            return
        if result is not None:
            self.answer(request_id, {"result": result}, method)

    def answer_error(self, request_id: Any, error: RpcError, method: str = "") -> None:
        if request_id is None:
            with self.lock:
                self._write_locked({"jsonrpc": "2.0", "error": error.to_json()})
            return
        self.answer(request_id, {"error": error.to_json()}, method)

    def notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict) \
                and _valid_id(params.get("requestId")):
            with self.lock:
                timer = self.pending.pop(_id_key(params["requestId"]), None)
                if timer is not None:
                    timer.cancel()
                    self.log(f"cancelled request {params['requestId']!r}")
        elif method == "notifications/initialized" and not self.profile.modern \
                and self.state == "initializing":
            self.state = "ready"

    def request(self, request_id: Any, method: str, params: Json) -> Json | None:
        """The result for a request, or None when the answer is delayed."""
        if method == "ping":
            return self.result({})
        if self.profile.modern:
            if method == "initialize":
                requested = params.get("protocolVersion")
                raise self.unsupported(requested if isinstance(requested, str) else "")
            served = ("server/discover", "tools/list", "tools/call",
                      *(_SKILL_METHODS if self.profile.skills else ()))
            if method not in served:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            self.check_meta(params)
            if method == "server/discover":
                capabilities: Json = {"tools": {"listChanged": False}}
                if self.profile.skills:
                    capabilities.update(resources={}, extensions={SKILLS_EXTENSION: {}})
                return self.result(
                    {
                        "supportedVersions": [MODERN_VERSION],
                        "capabilities": capabilities,
                        "instructions": self.profile.instructions,
                    },
                    cacheable=True,
                )
            if method in _SKILL_METHODS:
                return self.skills(method, params)
        else:
            if method == "initialize":
                return self.initialize(params)
            if method not in ("tools/list", "tools/call", *TASK_METHODS):
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            if self.state != "ready":
                raise RpcError(INVALID_REQUEST, "Server not initialized")
            if method in TASK_METHODS:
                return self.task_request(request_id, method, params)
        if method == "tools/list":
            if params.get("cursor") is not None:
                raise RpcError(INVALID_PARAMS, "Invalid cursor: this server does not paginate")
            return self.result({"tools": [t.definition() for t in self.profile.tools]},
                               cacheable=True)
        return self.call_tool(request_id, params)

    def skills(self, method: str, params: Json) -> Json:
        """``skills/list``, ``skills/get``, ``resources/list``, ``resources/read`` of the
        profile's skills."""
        entries = {f"skill://{path}/SKILL.md": _skill_entry(path, files)
                   for path, files in sorted(self.profile.skills.items())}
        files = _skill_files(self.profile.skills)
        if method == "skills/list":
            return self.result({"skills": list(entries.values())}, cacheable=True)
        if method == "resources/list":
            listed = []
            for file_uri in sorted(files):
                item: Json = {"uri": file_uri, "name": file_uri.rsplit("/", 1)[-1],
                              "mimeType": "text/markdown"}
                if file_uri in entries:
                    item.update(name=entries[file_uri]["frontmatter"]["name"],
                                description=entries[file_uri]["frontmatter"]["description"])
                listed.append(item)
            return self.result({"resources": listed}, cacheable=True)
        uri = params.get("uri")
        if method == "skills/get":
            if uri not in entries:
                raise RpcError(INVALID_PARAMS, f"No skill is served at {uri}")
            return self.result({"skill": entries[uri]}, cacheable=True)
        if uri not in files:
            raise RpcError(INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})
        return self.result({"contents": [{"uri": uri, "mimeType": "text/markdown",
                                          "text": files[uri]}]}, cacheable=True)

    def check_meta(self, params: Json) -> None:
        meta = params.get("_meta")
        if not isinstance(meta, dict) or not isinstance(meta.get(PROTOCOL_VERSION_KEY), str):
            raise RpcError(INVALID_PARAMS,
                           f"params._meta must carry {PROTOCOL_VERSION_KEY} (a string)")
        if meta[PROTOCOL_VERSION_KEY] != MODERN_VERSION:
            raise self.unsupported(meta[PROTOCOL_VERSION_KEY])
        if not isinstance(meta.get(CLIENT_CAPABILITIES_KEY), dict):
            raise RpcError(INVALID_PARAMS,
                           f"params._meta must carry {CLIENT_CAPABILITIES_KEY} (an object)")

    def unsupported(self, requested: str) -> RpcError:
        return RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Unsupported protocol version; this server speaks {MODERN_VERSION} only",
            {"supported": [MODERN_VERSION], "requested": requested},
        )

    def result(self, body: Json, *, cacheable: bool = False) -> Json:
        if not self.profile.modern:
            return body
        result: Json = {"resultType": "complete", **body}
        if cacheable:
            result["ttlMs"] = TTL_MS
            result["cacheScope"] = "public"
        result["_meta"] = {SERVER_INFO_KEY: dict(self.info)}
        return result

    def initialize(self, params: Json) -> Json:
        if self.state != "new":
            raise RpcError(INVALID_REQUEST, "Server already initialized")
        requested = params.get("protocolVersion")
        info = params.get("clientInfo")
        if (
            not isinstance(requested, str)
            or not isinstance(params.get("capabilities"), dict)
            or not isinstance(info, dict)
            or not isinstance(info.get("name"), str)
            or not isinstance(info.get("version"), str)
        ):
            raise RpcError(INVALID_PARAMS, "initialize needs protocolVersion, capabilities and "
                                           "clientInfo {name, version}")
        self.state = "initializing"
        capabilities: Json = {"tools": {}}
        if any(tool.task_support for tool in self.profile.tools):
            capabilities["tasks"] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
        return {
            "protocolVersion": requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0],
            "capabilities": capabilities,
            "serverInfo": dict(self.info),
            "instructions": self.profile.instructions,
        }

    def call_tool(self, request_id: Any, params: Json) -> Json | None:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs a tool name")
        tool = self.profile.tools_by_name.get(name)
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = params.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "arguments must be an object")
        task = params.get("task")
        if task is not None and not self.profile.modern and tool.task_support is not None:
            if not isinstance(task, dict):
                raise RpcError(INVALID_PARAMS, "task must be an object")
            return {"task": self.start_task(tool, arguments)}
        try:
            reply = tool.run(check_arguments(tool.input_schema, arguments))
        except ToolError as error:
            return self.result({"content": [{"type": "text", "text": str(error)}], "isError": True})
        body: Json = {"content": [{"type": "text", "text": text} for text in reply.text]}
        if reply.structured is not None:
            body["structuredContent"] = reply.structured
        result = self.result(body)
        if reply.delay <= 0:
            return result
        self.answer_later(request_id, result, reply.delay)
        return None

    # -- tasks (legacy profile) ------------------------------------------------------

    def start_task(self, tool: Tool, arguments: Json) -> Json:
        now = _now_iso()
        task = DemoTask(secrets.token_urlsafe(12), tool, arguments, now, time.monotonic(),
                        message=tool.stages[0] if tool.stages else "", updated=now)
        with self.lock:
            self.tasks[task.id] = task
            self._schedule_locked(task)
            return task.wire()

    def _schedule_locked(self, task: DemoTask) -> None:
        task.timer = threading.Timer(TASK_STAGE_S, self._advance, (task,))
        task.timer.daemon = True
        task.timer.start()

    def _advance(self, task: DemoTask) -> None:
        """The task's next stage, or its end (the tool run, its answer kept)."""
        with self.lock:
            if task.status != "working" or self.tasks.get(task.id) is not task:
                return
            task.step += 1
            task.updated = _now_iso()
            if task.step < len(task.tool.stages):
                task.message = task.tool.stages[task.step]
                self._schedule_locked(task)
                return
            try:
                reply = task.tool.run(check_arguments(task.tool.input_schema, task.arguments))
                body: Json = {"content": [{"type": "text", "text": t} for t in reply.text]}
            except ToolError as error:
                body = {"content": [{"type": "text", "text": str(error)}], "isError": True}
            task.result = body
            task.status, task.message, task.timer = "completed", "Done.", None
            for waiting in task.waiting:
                self._answer_locked(waiting, {"result": self._task_result(task)}, "tasks/result")
            task.waiting.clear()

    def _task_result(self, task: DemoTask) -> Json:
        assert task.result is not None
        return {**task.result, "_meta": {RELATED_TASK_KEY: {"taskId": task.id}}}

    def task_request(self, request_id: Any, method: str, params: Json) -> Json | None:
        task_id = params.get("taskId")
        with self.lock:
            born_after = time.monotonic() - TASK_TTL_MS / 1000
            for old in [t for t in self.tasks.values() if t.born < born_after]:
                if old.timer is not None:
                    old.timer.cancel()
                del self.tasks[old.id]
            task = self.tasks.get(task_id) if isinstance(task_id, str) else None
            if task is None:
                raise RpcError(INVALID_PARAMS, f"Unknown task: {task_id!r}")
            if method == "tasks/get":
                return task.wire()
            if method == "tasks/cancel":
                if task.status != "working":
                    raise RpcError(INVALID_PARAMS, f"Task {task.id} has ended ({task.status})")
                if task.timer is not None:
                    task.timer.cancel()
                task.status, task.message, task.timer = "cancelled", "Cancelled.", None
                task.updated = _now_iso()
                for waiting in task.waiting:
                    self._write_locked({"jsonrpc": "2.0", "id": waiting, "error": {
                        "code": INVALID_REQUEST, "message": "The task was cancelled"}})
                task.waiting.clear()
                return task.wire()
            if task.status == "completed":
                return self._task_result(task)
            if task.status == "cancelled":
                raise RpcError(INVALID_REQUEST, "The task was cancelled")
            task.waiting.append(request_id)  # tasks/result: answered at its end
            return None

    def answer_later(self, request_id: Any, result: Json, delay: float) -> None:
        key = _id_key(request_id)

        def fire() -> None:
            with self.lock:
                if self.pending.pop(key, None) is not None:  # not cancelled meanwhile
                    self._answer_locked(request_id, {"result": result}, "tools/call")

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self.lock:
            self.pending[key] = timer
        timer.start()


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trunkline.demo.server",
        description="A small bundled MCP stdio server for `trunkline demo`.",
    )
    parser.add_argument("--profile", required=True, choices=list(PROFILES),
                        help="which server to be")
    parser.add_argument("--name", help="serverInfo.name (default: the profile name)")
    parser.add_argument(
        "--crash-after",
        type=int,
        metavar="N",
        help="exit with code 1 right after answering N tools/call requests",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="diagnostics on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.crash_after is not None and args.crash_after < 1:
        build_parser().error("--crash-after must be at least 1")
    server = Server(
        PROFILES[args.profile],
        sys.stdout.buffer,
        name=args.name,
        crash_after=args.crash_after,
        verbose=args.verbose,
    )
    try:
        return server.serve(sys.stdin.buffer)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
