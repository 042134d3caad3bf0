"""How trunkline's log lines are written: ``--log-format text`` or ``json``.

Rules:

- ``json``: one JSON object per line on stderr, always with ``time`` (ISO 8601, UTC),
  ``level``, ``logger``, ``message``, ``server``, ``tool`` and ``request_id`` (null when
  the line is about none: ``log_context``), ``trace_id`` when a trace is current, and
  ``error`` (the traceback) when the line reports an exception.
- ``text``: ``LEVEL logger: message``, as a person reads it.
- The command line's logging only (``configure``, called by ``cli``; a program that
  embeds trunkline keeps its own): every line on stderr is in the chosen format,
  trunkline's (``trunkline.*``, at ``--log-level``) and the libraries' (asyncio,
  uvicorn: warnings and worse). Worker processes inherit it (through their environment,
  ``TRUNKLINE_LOG_FORMAT`` and ``TRUNKLINE_LOG_LEVEL``), their lines naming their
  server: they write to the same stderr.
- The formatter is our own (a few lines on orjson, already a dependency) rather than a
  library such as python-json-logger: the fields are fixed, and the context they come
  from is trunkline's.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from typing import IO

import orjson

from . import log_context

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
ENV_FORMAT, ENV_LEVEL = "TRUNKLINE_LOG_FORMAT", "TRUNKLINE_LOG_LEVEL"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        bound = log_context.current()
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
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
    """Write ``trunkline.*`` records at ``level`` (default: warning) and above, and other
    loggers' warnings, to stderr, formatted as ``log_format`` says. With neither given,
    nothing is configured (Python's last-resort handler prints warnings, its default)."""
    if log_format is None and level is None:
        return
    os.environ[ENV_FORMAT], os.environ[ENV_LEVEL] = log_format or "text", level or "warning"
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("trunkline").setLevel((level or "warning").upper())


def configure_inherited(server: str) -> None:
    """A worker process: log as the command that started it does, every line naming
    ``server`` (bound before the worker's loop starts, so every task inherits it)."""
    log_format, level = os.environ.get(ENV_FORMAT), os.environ.get(ENV_LEVEL)
    if log_format in FORMATS and level in LEVELS:
        configure(log_format, level)
        log_context.bind(server, None, None)


__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "configure", "configure_inherited"]
