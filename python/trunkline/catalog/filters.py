"""What an operator lets through from one server before pins are even looked at: the
tool filter (``enabledTools`` / ``disabledTools``) and the bounds on what an untrusted
server may put in front of a model. Pure.

Rules:

1. ``ToolFilter``: a tool is kept when its name (the server's own) matches one of the
   ``enabled`` glob patterns (every tool when ``enabled`` is ``None``) and none of the ``disabled``
   ones. Patterns are shell globs (``*``, ``?``, ``[...]``), case-sensitive like tool names.
   The filter is the configuration's, applied to every listing: what a server lists, or
   announces later, can never widen it.
2. ``ToolBounds``: a tool is over a bound when its description is longer than
   ``description_chars``, its input and output schemas together take more than
   ``schema_bytes`` as compact JSON, or nest deeper than ``schema_depth`` (or the whole
   definition does, its ``annotations`` and ``_meta`` included); or its
   definition is not I-JSON (RFC 7493: an integer beyond 2**53 cannot be pinned
   canonically). When more than ``tools_per_server`` tools pass the filter, the ones after
   that many, in the server's order, are over the bound. A tool over a bound is
   quarantined with a warning naming the server, the tool and the bound; it cannot be
   approved, only brought within the bound (by the server, or by the operator's bounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import orjson

from .model import ToolEntry


@dataclass(frozen=True)
class ToolFilter:
    #: ``None``: every tool; ``()``: none.
    enabled: tuple[str, ...] | None = None
    disabled: tuple[str, ...] = ()

    def allows(self, name: str) -> bool:
        if self.enabled is not None and not any(fnmatchcase(name, p) for p in self.enabled):
            return False
        return not any(fnmatchcase(name, p) for p in self.disabled)


@dataclass(frozen=True)
class ToolBounds:
    #: Generous for real servers (the longest descriptions of popular servers run to a
    #: few thousand characters), tight enough that no one tool can fill a model's context.
    description_chars: int = 8192
    schema_bytes: int = 65536
    schema_depth: int = 32
    tools_per_server: int = 512

    def __post_init__(self) -> None:
        for name in ("description_chars", "schema_bytes", "schema_depth", "tools_per_server"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"tool bound {name} must be a positive integer, not {value!r}")

    def violation(self, tool: ToolEntry) -> str | None:
        """Which bound ``tool`` is over (rule 2), as a warning names it, or ``None``."""
        if tool.description is not None and len(tool.description) > self.description_chars:
            return (f"description length {len(tool.description)} > "
                    f"{self.description_chars} characters")
        schemas = [s for s in (tool.input_schema, tool.output_schema) if s is not None]
        # One walk of each field, without recursion (a hostile definition may be deeper
        # than Python's stack), before anything canonicalizes it.
        depths, i_json = {}, True
        for key, value in tool.raw.items():
            depths[key], exact = _walk(value)
            i_json = i_json and exact
        depth = max(depths.get("inputSchema", 0), depths.get("outputSchema", 0))
        if depth > self.schema_depth:
            return f"schema depth {depth} > {self.schema_depth}"
        whole = max(depths.values(), default=0)
        if whole > self.schema_depth:
            return f"definition depth {whole} > {self.schema_depth}"
        if not i_json:
            return "its definition is not I-JSON (an integer beyond 2**53)"
        size = sum(len(orjson.dumps(s)) for s in schemas)
        if size > self.schema_bytes:
            return f"schema size {size} > {self.schema_bytes} bytes"
        return None


def over_count(tools: Sequence[ToolEntry], bounds: ToolBounds) -> list[ToolEntry]:
    """The tools after the first ``tools_per_server`` (rule 2)."""
    return list(tools[bounds.tools_per_server:])


#: I-JSON's exact integers (RFC 7493, 2.2): what RFC 8785 can write.
_SAFE_INTEGER = 2 ** 53 - 1


def _walk(value: Any) -> tuple[int, bool]:
    """Nesting depth of JSON containers (decoded JSON: dicts and lists), and whether every
    integer is I-JSON, without recursion."""
    deepest, exact = 0, True
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()
        elif kind is list:
            children = item
        else:
            if kind is int and not -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                exact = False
            continue
        if level > deepest:
            deepest = level
        for child in children:
            child_kind = type(child)
            if child_kind is dict or child_kind is list:
                stack.append((child, level + 1))
            elif child_kind is int and not -_SAFE_INTEGER <= child <= _SAFE_INTEGER:
                exact = False
    return deepest, exact
