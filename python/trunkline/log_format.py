"""How trunkline's log lines are written: ``--log-format text`` or ``json``.

Rules:

- ``json``: one JSON object per line on stderr, always with ``time`` (ISO 8601, UTC),
  ``level``, ``logger``, ``message``, ``server``, ``tool`` and ``request_id`` (null when
  the line is about none: ``log_context``), ``trace_id`` when a trace is current, and
  ``error`` (the traceback) when the line reports an exception.
- ``text``: ``LEVEL logger: message``, as a person reads it.
- Only trunkline's own loggers (``trunkline.*``) are configured; a program that embeds
  trunkline keeps its own logging.
- The formatter is our own (a few lines on orjson, already a dependency) rather than a
  library such as python-json-logger: the fields are fixed, and the context they come
  from is trunkline's.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from typing import IO

import orjson

from . import log_context

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        bound = log_context.current()
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "server": getattr(record, "server", bound.server),
            "tool": getattr(record, "tool", bound.tool),
            "request_id": getattr(record, "request_id", bound.request_id),
        }
        trace = log_context.trace_id()
        if trace is not None:
            line["trace_id"] = trace
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure(log_format: str | None, level: str | None,
              stream: IO[str] | None = None) -> None:
    """Send ``trunkline.*`` records at ``level`` (default: warning) and above to stderr,
    formatted as ``log_format`` says. With neither given, nothing is configured (Python's
    last-resort handler prints warnings, as before)."""
    if log_format is None and level is None:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("trunkline")
    logger.addHandler(handler)
    logger.setLevel((level or "warning").upper())
    logger.propagate = False


__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "configure"]
