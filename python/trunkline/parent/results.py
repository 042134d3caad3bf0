"""A ``tools/call`` result, checked: its shape, and its structured content against the
``outputSchema`` the tool declared (a server that breaks that promise must not have its
result forwarded as trusted data). ``isError`` results are returned, never raised: the
model is meant to see them and correct itself."""

from __future__ import annotations

from typing import Any

import msgspec

from ..catalog import ToolEntry
from ..errors import MalformedMessage, SchemaViolation
from ..protocol.output_schema import OutputChecker, SchemaRefused


class CallToolResult(msgspec.Struct, frozen=True):
    """One call's complete result, checked. Immutable; a msgspec ``Struct`` rather than a
    frozen dataclass because one is made per call: built in C, it is ~20x cheaper to make
    than the dataclass (whose ``__init__`` sets each field through ``object.__setattr__``).
    ``msgspec.structs.replace`` and ``asdict`` work on it."""

    content: list[dict[str, Any]]
    structured_content: Any = None
    is_error: bool = False
    meta: dict[str, Any] | None = None
    tool: str = ""
    server: str = ""
    #: The result as the server sent it (not in the repr: it repeats the rest).
    raw: dict[str, Any] = {}
    #: The same as the JSON bytes it came in, when it came as a document of its own
    #: (empty otherwise): what a gateway passes on without encoding it again.
    raw_json: bytes = b""

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}"
                          for name in self.__struct_fields__ if name not in _UNSHOWN)
        return f"CallToolResult({shown})"

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (what most models are shown)."""
        return "\n".join(
            block["text"] for block in self.content
            if block.get("type") == "text" and isinstance(block.get("text"), str)
        )


_UNSHOWN = frozenset({"raw", "raw_json"})


class ResultChecks:
    """Turns decoded ``tools/call`` results into ``CallToolResult``; keeps one compiled
    output checker per tool for as long as the catalog it came from."""

    def __init__(self) -> None:
        self._checkers: dict[tuple[str, str], OutputChecker | SchemaRefused] = {}

    def forget(self) -> None:
        """The catalog changed: schemas may have too."""
        self._checkers.clear()

    def to_result(self, entry: ToolEntry, result: Any, raw_json: bytes = b"") -> CallToolResult:
        """``result`` (decoded from ``raw_json``, when it came as bytes of its own),
        checked."""
        if not isinstance(result, dict):
            raise _malformed(entry, "tools/call result is not an object")
        # Absent means "complete" (a MUST for clients; the conformance suite checks it).
        result_type = result.get("resultType", "complete")
        if result_type != "complete":
            raise _malformed(entry, f"tools/call resultType is {result_type!r}")
        content = result.get("content")
        if type(content) is not list:
            raise _malformed(entry, "tools/call result has no content list")
        for block in content:
            if type(block) is not dict:
                raise _malformed(entry, "tools/call result has a content block that is "
                                        "not an object")
        is_error = result.get("isError", False)
        if is_error is not False and is_error is not True:
            raise _malformed(entry, "tools/call isError is not a boolean")
        structured = result.get("structuredContent")
        if entry.output_schema is not None and not is_error:
            self._check_output(entry, result, structured)
        meta = result.get("_meta")
        return CallToolResult(content=content, structured_content=structured, is_error=is_error,
                              meta=meta if type(meta) is dict else None,
                              tool=entry.name, server=entry.server, raw=result,
                              raw_json=raw_json)

    def _check_output(self, entry: ToolEntry, result: dict[str, Any], structured: Any) -> None:
        key = (entry.server, entry.local_name)
        checker = self._checkers.get(key)
        if checker is None:
            try:
                checker = OutputChecker(entry.output_schema)
            except SchemaRefused as exc:
                checker = exc
            self._checkers[key] = checker
        if isinstance(checker, SchemaRefused):
            raise SchemaViolation(
                f"tool {entry.name!r} declares an outputSchema that cannot be used: {checker}",
                server=entry.server, method="tools/call")
        if "structuredContent" not in result:
            raise SchemaViolation(
                f"tool {entry.name!r} declares an outputSchema but returned no "
                "structuredContent", server=entry.server, method="tools/call")
        problems = checker.problems(structured)
        if problems:
            raise SchemaViolation(
                f"tool {entry.name!r} returned structuredContent that violates its "
                f"outputSchema: {'; '.join(problems)}", server=entry.server, method="tools/call")


def _malformed(entry: ToolEntry, message: str) -> MalformedMessage:
    return MalformedMessage(message, server=entry.server, method="tools/call")
