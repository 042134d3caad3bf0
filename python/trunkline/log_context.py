"""What a log line is about: the server, the tool and the request being worked on, and
the current trace.

Rules:

- The gateway binds them once per request it answers (``bind``), in the task that
  answers it; every line logged in that task (and in what it awaits) carries them, with
  no argument passed down. A line's own ``extra={"server": ...}`` wins over the binding.
- The request id is the one the gateway's client chose (the id it will see in the
  answer), as sent: a string or a number.
- The trace id comes from OpenTelemetry's current span when ``opentelemetry`` is
  importable and a valid span is current (32 hex digits); otherwise there is none. It is
  looked up only when a line is written, never on the call path.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, NamedTuple

Token = contextvars.Token


class Bound(NamedTuple):
    server: str | None = None
    tool: str | None = None
    request_id: Any = None


_NOTHING = (None, None, None)
#: A plain tuple (server, tool, request id): bound once per request the gateway answers,
#: while a line is written far more rarely, so the named view is made only then
#: (``current``; making a ``NamedTuple`` runs its ``__new__`` in Python).
_BOUND: contextvars.ContextVar[tuple[str | None, str | None, Any]] = contextvars.ContextVar(
    "trunkline_log_context", default=_NOTHING)


def bind(server: str | None, tool: str | None, request_id: Any) -> Token:
    """Bind until ``unbind(token)`` (in the same task)."""
    return _BOUND.set((server, tool, request_id))


def unbind(token: Token) -> None:
    _BOUND.reset(token)


def current() -> Bound:
    return Bound._make(_BOUND.get())


def _trace_id_reader() -> Callable[[], str | None]:
    try:
        from opentelemetry import trace
    except ImportError:
        return lambda: None

    def read() -> str | None:
        context = trace.get_current_span().get_span_context()
        return format(context.trace_id, "032x") if context.is_valid else None
    return read


#: The current trace's id, or None.
trace_id = _trace_id_reader()

__all__ = ["Bound", "bind", "current", "trace_id", "unbind"]
