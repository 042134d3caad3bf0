"""Checking ``structuredContent`` against a tool's ``outputSchema``, within bounds.

A server that declares an ``outputSchema`` promises conforming structured results; when it
breaks that promise the result must not be forwarded as trusted data
(docs/explanation/architecture.md, "Output schemas"). The checker follows the spec's JSON
Schema rules (MCP 2026-07-28, basic/index, JSON Schema Usage): 2020-12 unless ``$schema``
says otherwise, no network ``$ref`` ever (an unresolvable reference rejects the schema
rather than passing everything), and bounded work: a schema too large or too deep, or an
instance too large, is refused instead of validated.

``jsonschema`` is used rather than hand-written validation: it implements every 2020-12
keyword (composition, conditionals, ``$defs``/``$anchor``/``$dynamicRef``) and is the most
widely used validator in Python; its ``referencing`` registry is empty here, so it resolves
only references inside the schema itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import orjson
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable

MAX_SCHEMA_BYTES = 256 * 1024
MAX_SCHEMA_DEPTH = 64
MAX_INSTANCE_BYTES = 8 * 1024 * 1024
#: Errors reported per violation: enough to act on, bounded for hostile inputs.
MAX_REPORTED_ERRORS = 5


class SchemaRefused(ValueError):
    """The schema itself cannot be used (too big, too deep, invalid, unsupported dialect,
    unresolvable reference)."""


def _depth(value: Any, limit: int) -> int:
    """Nesting depth, giving up (returning limit + 1) once past ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    deepest = 0
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


class OutputChecker:
    """A compiled, bounded validator for one tool's ``outputSchema``."""

    def __init__(self, schema: Any) -> None:
        if not isinstance(schema, (dict, bool)):
            raise SchemaRefused("outputSchema must be a JSON Schema object or boolean")
        size = len(orjson.dumps(schema))
        if size > MAX_SCHEMA_BYTES:
            raise SchemaRefused(f"outputSchema is {size} bytes, over {MAX_SCHEMA_BYTES}")
        if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            raise SchemaRefused(f"outputSchema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        default = jsonschema.Draft202012Validator
        cls = jsonschema.validators.validator_for(
            schema,
            default=None,  # type: ignore[arg-type]  # None for an unknown $schema; stubs lack it
        )
        if cls is None:
            if isinstance(schema, dict) and "$schema" in schema:
                raise SchemaRefused(f"unsupported JSON Schema dialect {schema['$schema']!r}")
            cls = default
        try:
            if isinstance(schema, dict):  # true and false are valid schemas as they are
                cls.check_schema(schema)
        except SchemaError as exc:
            raise SchemaRefused(f"outputSchema is not a valid schema: {exc.message}") from exc
        # An empty registry: references resolve inside this schema or not at all.
        self._validator = cls(schema, registry=Registry())

    def problems(self, instance: Any) -> list[str]:
        """Why ``instance`` does not conform (empty when it does)."""
        size = len(orjson.dumps(instance))
        if size > MAX_INSTANCE_BYTES:
            return [f"structuredContent is {size} bytes, over the {MAX_INSTANCE_BYTES} bound"]
        try:
            errors: Iterator[Any] = self._validator.iter_errors(instance)
            out = []
            for error in errors:
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                out.append(f"at {where}: {error.message}")
                if len(out) >= MAX_REPORTED_ERRORS:
                    break
            return out
        except Unresolvable as exc:
            return [f"outputSchema has a reference that does not resolve: {exc}"]
        except RecursionError:
            return ["outputSchema validation exceeded its recursion bound"]
