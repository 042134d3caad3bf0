"""Which HTTP headers each message gets, and what the transport learns from the answers
that decides them. Pure: messages and answers in, header maps out (MCP 2026-07-28 and
2025-11-25, basic/transports/streamable-http).

- A modern request carries ``MCP-Protocol-Version`` read from its own ``_meta`` (so the
  two can never differ), ``Mcp-Method``, ``Mcp-Name`` where the method names something,
  and ``Mcp-Param-*`` for the ``x-mcp-header`` arguments of the tool it calls. The
  annotations come from the ``tools/list`` answers; a tool whose annotations are invalid
  is removed from the answer, so nothing above the transport ever sees it.
- A legacy message carries the session's ``MCP-Protocol-Version`` and ``Mcp-Session-Id``,
  both learned from the ``initialize`` exchange.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .._codec import KIND_REQUEST, scan
from . import headers as mcp_headers
from .versions import META_PROTOCOL_VERSION

log = logging.getLogger("trunkline.transports.http")

ACCEPT = "application/json, text/event-stream"
#: Methods whose ``Mcp-Name`` header comes from a params member.
_NAME_SOURCE = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
#: The tasks extension's methods: their ``Mcp-Name`` is ``params.taskId``, so that an
#: intermediary routes every request about one task to the instance that holds it.
_TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


@dataclass(slots=True)
class Outgoing:
    """One JSON-RPC line on its way out, classified once.

    ``params`` is what the transport reads of the message's params object (None when there
    is none). For a request that ``classify`` made, it holds only the members the headers
    and the request's stream are decided by (``_meta``, ``name``, ``uri``), decoded from the
    scan's spans: a call's 64 KiB argument is not decoded to learn which tool it calls.
    ``params_span`` then says where the whole object is in ``line``, and ``all_params``
    decodes it, for the one reader that needs more (the ``x-mcp-header`` arguments of an
    annotated tool). Otherwise ``params`` is the whole object."""

    line: bytes
    kind: int
    id: Any
    method: str | None
    params: dict[str, Any] | None
    params_span: tuple[int, int] | None = None

    @classmethod
    def classify(cls, line: bytes) -> Outgoing:
        """Scan ``line`` and decode the params members a request is routed by; a
        notification's params (small; a cancellation's ``requestId`` is read) whole."""
        env = scan(line)
        span = env.params_span
        if span is None:
            return cls(line, env.kind, env.id, env.method, None)
        if env.kind != KIND_REQUEST:
            return cls(line, env.kind, env.id, env.method, orjson.loads(line[span[0]:span[1]]))
        params: dict[str, Any] = {}
        for key, member in (("_meta", env.meta_span), ("name", env.name_span),
                            ("uri", env.uri_span)):
            if member is not None:
                params[key] = orjson.loads(line[member[0]:member[1]])
        return cls(line, env.kind, env.id, env.method, params, span)

    def all_params(self) -> dict[str, Any] | None:
        """The whole params object, decoded now if ``params`` holds only some members."""
        if self.params_span is None:
            return self.params
        start, end = self.params_span
        return orjson.loads(memoryview(self.line)[start:end])

    @property
    def modern_version(self) -> str | None:
        """The revision this message is stamped with in ``_meta``; None for legacy."""
        meta = self.params.get("_meta") if self.params else None
        version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
        return version if isinstance(version, str) else None


class HeaderPlan:
    """The header state of one endpoint for one transport lifetime."""

    def __init__(self, configured: Mapping[str, str], server: str | None = None) -> None:
        self._configured = dict(configured)
        self._server = server
        #: Tools whose arguments travel in Mcp-Param-* headers, learned from tools/list.
        self._tool_params: dict[str, tuple[mcp_headers.HeaderParam, ...]] = {}
        #: The legacy session, learned from the initialize exchange.
        self.legacy_version: str | None = None
        self.session_id: str | None = None

    @property
    def legacy(self) -> bool:
        return self.legacy_version is not None or self.session_id is not None

    def base(self) -> dict[str, str]:
        headers = dict(self._configured)
        headers["Accept"] = ACCEPT
        headers["Content-Type"] = "application/json"
        return headers

    def session(self) -> dict[str, str]:
        headers = {}
        if self.legacy_version is not None:
            headers["MCP-Protocol-Version"] = self.legacy_version
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    def one_way(self) -> dict[str, str]:
        """A notification or a (legacy) response."""
        return {**self.base(), **self.session()}

    def stream(self, last_event_id: str | None) -> dict[str, str]:
        """A legacy GET stream: resumption, or the session's standalone stream."""
        headers = self.base()
        del headers["Content-Type"]
        headers["Accept"] = "text/event-stream"
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        headers.update(self.session())
        return headers

    def request(self, out: Outgoing) -> dict[str, str]:
        """Raises ``HeaderValueError`` when an annotated argument cannot be encoded."""
        version = out.modern_version
        if version is None:
            return self.one_way()
        assert out.method is not None
        headers = self.base()
        headers["MCP-Protocol-Version"] = version
        headers["Mcp-Method"] = out.method
        source = _NAME_SOURCE.get(out.method)
        params = out.params or {}
        if source is not None and isinstance(params.get(source), str):
            headers["Mcp-Name"] = mcp_headers.encode_header_value(params[source])
        elif out.method in _TASK_METHODS:
            task_id = (out.all_params() or {}).get("taskId")  # small params: decoded whole
            if isinstance(task_id, str):
                headers["Mcp-Name"] = mcp_headers.encode_header_value(task_id)
        if out.method == "tools/call":
            name = params.get("name")
            annotated = self._tool_params.get(name)  # type: ignore[arg-type]  # a non-str: None
            if annotated:
                # Asked only now, when the table says this tool needs them: a tool learned
                # after the call was classified still gets its headers.
                arguments = (out.all_params() or {}).get("arguments")
                headers.update(mcp_headers.param_headers(
                    annotated, arguments if isinstance(arguments, dict) else None))
        return headers

    def learn(self, method: str | None, line: bytes) -> bytes:
        """Read the answer to ``method`` before it goes up; returns the line to deliver."""
        if method == "tools/list":
            return self._learn_tools(line)
        if method == "initialize":
            result = orjson.loads(line).get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self.legacy_version = version
        return line

    def _learn_tools(self, line: bytes) -> bytes:
        message = orjson.loads(line)
        result = message.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return line
        kept, table = mcp_headers.filter_tools_result(result)
        for name, reason in table.dropped:
            log.warning("server %r: tool %r dropped: invalid x-mcp-header annotation (%s)",
                        self._server, name, reason)
            self._tool_params.pop(name, None)
        for tool in kept["tools"]:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                self._tool_params.pop(tool["name"], None)
        self._tool_params.update(table.by_tool)
        if not table.dropped:
            return line
        message["result"] = kept
        return orjson.dumps(message) + b"\n"
