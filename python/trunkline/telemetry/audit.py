"""The gateway's audit trail: one record per decision that matters (each request it
answers or refuses: who asked, which server and target, allowed or denied and by which
rule, the outcome, how long it took, the request's and trace's ids), written as JSON
lines to a file or to stderr, or as OpenTelemetry log records.

``AuditRecord`` is one record, ``hash_arguments`` the only trace of a call's arguments
it may carry, ``AuditLog`` the bounded queue and the writer task between the call path
and a sink (``JsonLinesFile``, ``Stderr``, ``OtelLogs``). ``AuditLog.from_target`` reads
``serve --audit``'s target.

Rules:

1. A record carries no value a request carried: no argument, result, or message that
   could quote one, no token and no API key. ``identity`` says who (``kind``,
   ``issuer``, ``subject``), ``error`` is a kind or a code. Given a key
   (``serve --audit-hash-arguments``), ``arguments_hash`` is the HMAC-SHA256 of the
   arguments' RFC 8785 canonical JSON (``hash_arguments``): equal arguments hash equal
   under one key, so an operator can tell calls with the same arguments apart from
   others without seeing them, and nobody without the key can test a guess.
2. A line is one JSON object: the record's fields in their order, those without a value
   (None) left out, ``time`` in RFC 3339, UTC, to the millisecond.
3. ``AuditLog.emit`` is all the call path pays: synchronous, O(1), never blocking and
   never raising. A record waits in a queue of at most ``max_queue`` records; one more is
   dropped and counted (``dropped``), with a warning at most once per ``WARN_EVERY_S``
   saying how many. The log's writer task takes the queue to the sink in batches of up to
   ``BATCH`` records.
4. A sink's failure (a full disk, a file it may not write) loses that batch's records,
   counted (``failed``) and logged with the reason at most once per ``WARN_EVERY_S``; the
   next batch tries again. A call never sees it.
5. A file is written in a thread (``asyncio.to_thread``), so a slow disk holds up the
   writer, never the loop; it is appended to, created 0600 (an existing file keeps its
   mode), and opened again when its path names another file or none (rotated away),
   which is looked at once per batch. A write that failed part-way leaves its torn line
   alone: the next write starts a line of its own.
6. stderr is written whole lines at a time: each write at most ``PIPE_BUF`` bytes, cut at
   a line's end (a longer line alone), so a log line written meanwhile never lands inside
   a record.
7. Closing (``aclose``) writes what is queued within ``close_timeout_s``, then stops the
   writer (its ``TaskScope``) and closes the sink; what is left is dropped and counted.
   Nothing outlives the log. A file write still stuck in its thread then closes the file
   when it returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import os
import select
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self

import msgspec
import orjson
import rfc8785

from ..errors import ConfigurationError
from ..loop.tasks import TaskScope

if TYPE_CHECKING:
    from opentelemetry._logs import Logger, LoggerProvider

log = logging.getLogger("trunkline.audit")

#: Who decided what of a request: let through, refused by a rule, or refused by a bound.
Decision = Literal["allowed", "denied", "limited"]
#: How a request let through ended: a result, a result with ``isError``, a JSON-RPC or
#: transport error, cancelled by its client, out of time.
Outcome = Literal["ok", "tool_error", "error", "cancelled", "timeout"]

#: Records waiting for the sink at most, by default (rule 3).
MAX_QUEUE = 10_000
#: Records one write takes at most (rule 3).
BATCH = 1024
#: A repeated warning (records dropped, a sink failing) at most this often (rules 3, 4).
WARN_EVERY_S = 10.0
#: How long ``aclose`` waits for what is queued to be written, by default (rule 7).
CLOSE_TIMEOUT_S = 5.0
#: Shortest key ``hash_arguments`` is given (``serve --audit-hash-arguments``).
MIN_KEY_BYTES = 16
#: Arguments longer than this as JSON are hashed from their sorted-key JSON (orjson's)
#: rather than their RFC 8785 form: ``rfc8785`` is pure Python (tens of microseconds for
#: a small object, milliseconds for tens of KiB), and the hash is made on the call path.
CANONICAL_MAX_BYTES = 1024


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One decision about one request, as the audit trail keeps it (rule 1: no value the
    request carried). ``time`` defaults to when the record is made."""

    #: When (seconds since the epoch); written as RFC 3339, UTC, to the millisecond.
    time: float = msgspec.field(default_factory=time.time)
    #: The MCP method: ``tools/call``, ``prompts/get``, ``resources/read``, ...
    action: str
    #: Who asked, as ``policy.Identity.described()`` says: ``kind``, ``subject``, and
    #: ``issuer`` for a token's.
    identity: Mapping[str, str]
    #: The server behind the gateway the request went, or would have gone, to.
    server: str | None = None
    #: The tool's or prompt's name, or the resource's URI.
    target: str | None = None
    decision: Decision
    #: The id of the policy rule that decided.
    rule: str | None = None
    #: How it ended (None when it was not let through).
    outcome: Outcome | None = None
    #: What went wrong, as a kind or a code (``RequestTimeout``, ``-32602``); never a
    #: message, which could quote the request.
    error: str | None = None
    duration_ms: float | None = None
    #: The id the client gave the request.
    request_id: str | int | None = None
    #: The OpenTelemetry trace the request is part of (32 hex digits).
    trace_id: str | None = None
    #: ``hash_arguments`` of the call's arguments, when the operator asked for it.
    arguments_hash: str | None = None


_FIELDS: tuple[str, ...] = AuditRecord.__struct_fields__


def record_fields(record: AuditRecord) -> dict[str, Any]:
    """The record as its line's object (rule 2)."""
    fields: dict[str, Any] = {"time": _rfc3339(record.time)}
    for name in _FIELDS:
        if name != "time":
            value = getattr(record, name)
            if value is not None:
                fields[name] = value
    return fields


def record_line(record: AuditRecord) -> bytes:
    """The record as one JSON line, its newline included (rule 2)."""
    return orjson.dumps(record_fields(record), default=_plain,
                        option=orjson.OPT_APPEND_NEWLINE)


def _rfc3339(epoch: float) -> str:
    stamp = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return stamp.removesuffix("+00:00") + "Z"


def _plain(value: Any) -> Any:
    """What orjson cannot write as it is: a mapping other than a dict (an identity)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError


def hash_arguments(arguments: Any, key: bytes) -> str:
    """``hmac-sha256:<hex>``: the HMAC-SHA256 under ``key`` of the arguments' RFC 8785
    canonical JSON (rule 1). Never raises: arguments RFC 8785 cannot write (an integer
    beyond 2**53, a float NaN) or longer than ``CANONICAL_MAX_BYTES`` are hashed from
    another form of their own (``_hashed_form``), still equal for equal arguments."""
    return "hmac-sha256:" + hmac.new(key, _hashed_form(arguments), hashlib.sha256).hexdigest()


def _hashed_form(arguments: Any) -> bytes:
    """The bytes ``hash_arguments`` hashes: the RFC 8785 form, else orjson's with sorted
    keys, else ``repr``'s. Each but the first starts with a NUL byte and its name, which no
    JSON text starts with, so two different forms never give the same bytes."""
    try:
        sorted_json: bytes | None = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, RecursionError):
        sorted_json = None
    if sorted_json is None or len(sorted_json) <= CANONICAL_MAX_BYTES:
        try:
            return rfc8785.dumps(arguments)
        except (rfc8785.CanonicalizationError, TypeError, RecursionError):
            pass
    if sorted_json is not None:
        return b"\x00sorted\x00" + sorted_json
    try:
        return b"\x00repr\x00" + repr(arguments).encode("utf-8", "backslashreplace")
    except Exception:  # noqa: BLE001 - whatever it is, the call must not fail for its hash
        return b"\x00unrepresentable\x00"


class WarningPace:
    """When a repeated warning is due (pure): the first at once, then at most one per
    ``every`` seconds, each saying how many occurrences it stands for since the last."""

    __slots__ = ("_every", "_next", "_pending")

    def __init__(self, every: float | None = None) -> None:
        self._every = WARN_EVERY_S if every is None else every
        self._next = -math.inf
        self._pending = 0

    def add(self, count: int, now: float) -> int:
        """Count ``count`` more at ``now`` (a monotonic clock); returns how many the
        warning due now names, 0 when none is due."""
        self._pending += count
        if now < self._next:
            return 0
        self._next = now + self._every
        return self.take()

    def take(self) -> int:
        """What no warning named yet (for a last one), and start over."""
        pending, self._pending = self._pending, 0
        return pending


class WriteFailed(Exception):
    """A sink wrote part of a batch: ``lost`` of its records were not written."""

    def __init__(self, lost: int, reason: str) -> None:
        super().__init__(reason)
        self.lost = lost
        self.reason = reason


class Sink(Protocol):
    """Where an ``AuditLog`` writes: ``open`` before the first batch (an ``OSError``
    there is the operator's to hear), ``write`` each batch (``WriteFailed`` when part
    of it was lost, any other exception when all of it was), ``close`` at the end."""

    #: What the sink is, for log lines: ``file /var/log/audit.jsonl``, ``stderr``.
    name: str

    async def open(self) -> None: ...

    async def write(self, records: Sequence[AuditRecord]) -> None: ...

    async def close(self) -> None: ...


class AuditLog:
    """The audit trail of one gateway: ``emit`` a record from the call path; the log's
    writer task takes the records to ``sink`` (rules 3, 4, 7). ``async with`` (or
    ``start`` and ``aclose``) runs it. ``hash_key``: the key of ``arguments_hash``
    (None: no hash is made)."""

    def __init__(self, sink: Sink, *, hash_key: bytes | None = None,
                 max_queue: int = MAX_QUEUE, close_timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        if max_queue < 1:
            raise ConfigurationError("the audit queue needs room for at least 1 record")
        if hash_key is not None and len(hash_key) < MIN_KEY_BYTES:
            raise ConfigurationError(
                f"the audit hash key needs at least {MIN_KEY_BYTES} bytes")
        self.sink = sink
        self._hash_key = hash_key
        self._max_queue = max_queue
        self._close_timeout_s = close_timeout_s
        self._queue: deque[AuditRecord] = deque()
        self._wake = asyncio.Event()
        self._scope = TaskScope("audit log")
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._opened = False
        self._writing = 0
        self._written = self._dropped = self._failed = 0
        self._drops = WarningPace()
        self._failures = WarningPace()

    @classmethod
    def from_target(cls, text: str, *, hash_key: bytes | None = None,
                    max_queue: int = MAX_QUEUE, logger_provider: Any = None) -> AuditLog:
        """The log ``serve --audit TEXT`` asks for: ``-`` or ``stderr``, ``otel``
        (``logger_provider``, else the global one), else a file's path (``./otel`` for a
        file of that name)."""
        return cls(sink_for(text, logger_provider=logger_provider), hash_key=hash_key,
                   max_queue=max_queue)

    # --- what the call path uses ---------------------------------------------------------

    def emit(self, record: AuditRecord) -> None:
        """Queue ``record`` for the sink, or drop and count it when the queue is full or
        the log closed. Synchronous, O(1), never raises; call it on the loop's thread."""
        queue = self._queue
        if len(queue) < self._max_queue and not self._closing:
            queue.append(record)
            self._wake.set()
            return
        self._dropped += 1
        due = self._drops.add(1, time.monotonic())
        if due:
            self._warn_dropped(due)

    def arguments_hash(self, arguments: Any) -> str | None:
        """``hash_arguments(arguments)`` under the log's key; None without a key."""
        key = self._hash_key
        return None if key is None else hash_arguments(arguments, key)

    @property
    def hashes_arguments(self) -> bool:
        """Whether ``arguments_hash`` makes a hash (the operator gave a key)."""
        return self._hash_key is not None

    @property
    def dropped(self) -> int:
        """Records dropped for want of room in the queue (or emitted after closing)."""
        return self._dropped

    def status(self) -> dict[str, int]:
        """Counts of records: ``written`` by the sink, ``dropped`` (rule 3), ``failed``
        (rule 4), ``queued`` (waiting, or being written now)."""
        return {"written": self._written, "dropped": self._dropped, "failed": self._failed,
                "queued": len(self._queue) + self._writing}

    # --- the lifetime ------------------------------------------------------------------

    async def start(self) -> Self:
        """Open the sink (``ConfigurationError`` when it cannot be) and start the writer."""
        if self._writer is not None or self._closing:
            return self
        try:
            await self.sink.open()
        except OSError as exc:
            raise ConfigurationError(f"audit {self.sink.name}: {_reason(exc)}") from None
        self._opened = True
        await self._scope.open()
        self._writer = self._scope.spawn(self._drain(), name="audit writer")
        return self

    async def aclose(self) -> None:
        """Write what is queued within ``close_timeout_s``, then stop (rule 7). Idempotent."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        try:
            if self._writer is not None:
                await asyncio.wait([self._writer], timeout=self._close_timeout_s)
        finally:
            await self._scope.aclose()
            left = len(self._queue) + self._writing
            if left:
                self._queue.clear()
                self._writing = 0
                self._dropped += left
                log.warning("audit %s: %d dropped (%d in all): not written within %g s of "
                            "closing", self.sink.name, left, self._dropped,
                            self._close_timeout_s)
            self._last_warnings()
            if self._opened:
                self._opened = False
                await self.sink.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the writer --------------------------------------------------------------------

    async def _drain(self) -> None:
        queue = self._queue
        while True:
            await self._wake.wait()
            self._wake.clear()
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), BATCH))]
                await self._write(batch)
            if self._closing:
                return

    async def _write(self, batch: list[AuditRecord]) -> None:
        self._writing = len(batch)  # still counted if the write is cancelled (rule 7)
        try:
            await self.sink.write(batch)
        except WriteFailed as exc:
            lost, reason = exc.lost, exc.reason
        except Exception as exc:  # noqa: BLE001 - a sink's failure is counted, never spread
            lost, reason = len(batch), _reason(exc)
        else:
            lost, reason = 0, ""
        self._writing = 0
        self._written += len(batch) - lost
        if lost:
            self._failed += lost
            due = self._failures.add(lost, time.monotonic())
            if due:
                log.warning("audit %s: %d lost (%d in all): %s", self.sink.name, due,
                            self._failed, reason)

    def _warn_dropped(self, count: int) -> None:
        why = ("the log is closed" if self._closing
               else f"{self._max_queue} records already wait for {self.sink.name}")
        log.warning("audit: %d dropped (%d in all): %s", count, self._dropped, why)

    def _last_warnings(self) -> None:
        """What the paced warnings have not said yet, said once at the end."""
        dropped, failed = self._drops.take(), self._failures.take()
        if dropped:
            log.warning("audit: %d dropped (%d in all)", dropped, self._dropped)
        if failed:
            log.warning("audit %s: %d lost (%d in all)", self.sink.name, failed,
                        self._failed)


def sink_for(text: str, *, logger_provider: Any = None) -> Sink:
    """The sink ``serve --audit TEXT`` names (``AuditLog.from_target``); nothing is opened."""
    if not text.strip():
        raise ConfigurationError("an audit target is a file's path, '-' (stderr) or 'otel'")
    if text in ("-", "stderr"):
        return Stderr()
    if text == "otel":
        return OtelLogs(logger_provider)
    return JsonLinesFile(text)


def _reason(exc: BaseException) -> str:
    """Why a write failed, without its message (which could quote what was written): an
    ``OSError``'s description of its errno, else the exception's class."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def _encoded(records: Sequence[AuditRecord]) -> tuple[list[bytes], int]:
    """The records' lines, and how many could not be written as JSON (left out)."""
    lines, unwritable = [], 0
    for record in records:
        try:
            lines.append(record_line(record))
        except (orjson.JSONEncodeError, TypeError):
            unwritable += 1
    return lines, unwritable


class _Lines:
    """Whole lines written to a descriptor (blocking; a sink's thread): in one write, or
    in writes of at most ``chunk`` bytes cut at lines' ends. After a write that failed
    part-way the next one starts with a newline, so the torn line stays alone (rule 5)."""

    __slots__ = ("chunk", "torn")

    def __init__(self, chunk: int | None = None) -> None:
        self.chunk = chunk
        self.torn = False

    def write(self, fd: int, lines: list[bytes]) -> None:
        """Write every line, or raise ``WriteFailed`` naming how many were not."""
        for start, end in self._runs(lines):
            data = b"".join(lines[start:end])
            if self.torn:
                data = b"\n" + data
            done = 0
            try:
                while done < len(data):
                    done += os.write(fd, memoryview(data)[done:])
            except OSError as exc:
                whole = _whole_lines(data, done, self.torn)
                if done:
                    self.torn = data[done - 1:done] != b"\n"
                raise WriteFailed(len(lines) - start - whole, _reason(exc)) from None
            self.torn = False

    def _runs(self, lines: list[bytes]) -> list[tuple[int, int]]:
        """The lines each write takes, as ``(start, end)`` indices."""
        if self.chunk is None:
            return [(0, len(lines))]
        runs, start, size = [], 0, 0
        for at, line in enumerate(lines):
            if at > start and size + len(line) > self.chunk:
                runs.append((start, at))
                start, size = at, 0
            size += len(line)
        if start < len(lines):
            runs.append((start, len(lines)))
        return runs


def _whole_lines(data: bytes, done: int, led_by_newline: bool) -> int:
    """How many of the lines in ``data`` its first ``done`` bytes hold whole."""
    whole = data.count(b"\n", 0, done)
    return whole - 1 if led_by_newline and done > 0 else whole


class JsonLinesFile:
    """Records as JSON lines appended to the file at ``path`` (rule 5)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.name = f"file {self.path}"
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._lines = _Lines()
        #: Held by the thread that writes or closes the file: never both at once.
        self._lock = threading.Lock()

    async def open(self) -> None:
        await asyncio.to_thread(self._open_locked)

    async def write(self, records: Sequence[AuditRecord]) -> None:
        lines, unwritable = _encoded(records)
        await asyncio.to_thread(self._write_locked, lines)
        if unwritable:
            raise WriteFailed(unwritable, "a record that is not JSON")

    async def close(self) -> None:
        if self._lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self._lock.release()
        else:
            # A write stuck in its thread (a hung disk) holds the lock: the file is closed
            # when it returns (rule 7), by a thread nobody waits for.
            asyncio.get_running_loop().run_in_executor(None, self._close_locked)

    def _open_locked(self) -> None:
        with self._lock:
            self._open()

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        stat = os.fstat(fd)
        self._fd, self._identity = fd, (stat.st_dev, stat.st_ino)
        self._lines.torn = False

    def _write_locked(self, lines: list[bytes]) -> None:
        with self._lock:
            if self._fd is not None and self._rotated():
                os.close(self._fd)
                self._fd = None
            if self._fd is None:
                self._open()
            assert self._fd is not None
            self._lines.write(self._fd, lines)

    def _rotated(self) -> bool:
        """Whether the path names another file than the one open, or none."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return True
        except OSError:  # the path cannot be looked at now: the open file is still ours
            return False
        return (stat.st_dev, stat.st_ino) != self._identity

    def _close_locked(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Stderr:
    """Records as JSON lines on the process's stderr (rule 6), written in a thread: a
    reader that does not read holds up the writer, never the loop."""

    name = "stderr"

    def __init__(self, fd: int = 2) -> None:
        self._fd = fd
        self._lines = _Lines(chunk=select.PIPE_BUF)

    async def open(self) -> None:
        return None

    async def write(self, records: Sequence[AuditRecord]) -> None:
        lines, unwritable = _encoded(records)
        await asyncio.to_thread(self._lines.write, self._fd, lines)
        if unwritable:
            raise WriteFailed(unwritable, "a record that is not JSON")

    async def close(self) -> None:
        return None


class OtelLogs:
    """Records as OpenTelemetry log records (``opentelemetry._logs``), to
    ``logger_provider`` (None: the global one): severity INFO, event
    ``trunkline.audit``, the record's object as the body, its fields as attributes
    (``trunkline.audit.*``, and the conventions' ``mcp.method.name``, ``enduser.id``,
    ``jsonrpc.request.id``, ``error.type``), its trace id as the log record's."""

    name = "OpenTelemetry logs"

    def __init__(self, logger_provider: LoggerProvider | None = None) -> None:
        self._provider = logger_provider
        self._logger: Logger | None = None

    async def open(self) -> None:
        from opentelemetry import _logs

        from ..version import VERSION

        provider = self._provider or _logs.get_logger_provider()
        if type(provider).__module__.startswith(_logs.__name__):
            # The API's own no-op and stand-in record nothing.
            raise ConfigurationError(
                "audit records as OpenTelemetry logs need a logs exporter: set "
                "OTEL_LOGS_EXPORTER, or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)")
        self._logger = provider.get_logger("trunkline.audit", VERSION)

    async def write(self, records: Sequence[AuditRecord]) -> None:
        from opentelemetry._logs import LogRecord, SeverityNumber

        logger = self._logger
        assert logger is not None
        for record in records:
            body = record_fields(record)
            body["identity"] = dict(record.identity)
            logger.emit(LogRecord(
                timestamp=round(record.time * 1e6) * 1000, context=_trace_context(record.trace_id),
                severity_number=SeverityNumber.INFO, severity_text="INFO",
                event_name="trunkline.audit", body=body, attributes=otel_attributes(record)))

    async def close(self) -> None:
        self._logger = None


#: Attribute names of the record's fields as OpenTelemetry log attributes.
_ATTRIBUTES = {"action": "mcp.method.name", "server": "trunkline.server",
               "request_id": "jsonrpc.request.id", "error": "error.type"}


def otel_attributes(record: AuditRecord) -> dict[str, str | int | float]:
    """The record's fields as flat log attributes: ``trunkline.audit.<field>`` but where
    the semantic conventions have a name (``_ATTRIBUTES``); the identity's subject as
    ``enduser.id``, its kind and issuer as ``trunkline.audit.identity.*``."""
    attributes: dict[str, str | int | float] = {}
    for name in _FIELDS:
        value = getattr(record, name)
        if value is None or name in ("time", "identity", "trace_id"):
            continue
        if name == "request_id":
            value = str(value)
        attributes[_ATTRIBUTES.get(name, f"trunkline.audit.{name}")] = value
    for key, value in record.identity.items():
        if key == "subject":
            attributes["enduser.id"] = value
        else:
            attributes[f"trunkline.audit.identity.{key}"] = value
    return attributes


def _trace_context(trace_id: str | None) -> Any:
    """A context whose span names ``trace_id`` (no span id: the record is no span's), so
    the log record carries the request's trace; an empty context when there is none."""
    from opentelemetry import context, trace

    if trace_id is None or len(trace_id) != 32:
        return context.Context()
    try:
        number = int(trace_id, 16)
    except ValueError:
        return context.Context()
    span = trace.NonRecordingSpan(trace.SpanContext(number, trace.INVALID_SPAN_ID, True))
    return trace.set_span_in_context(span, context.Context())
