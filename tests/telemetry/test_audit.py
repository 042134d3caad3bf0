"""The gateway's audit trail (telemetry/audit.py): records written as JSON lines to a real
file (0600, reopened when rotated away), to a descriptor in whole lines, and as
OpenTelemetry log records (the SDK's in-memory exporter); a full queue and a failing sink
cost records, counted and warned of, never a call; closing writes what is queued and
leaves nothing behind. Then ``serve --audit``: the flags, the gateway's lifetime."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Callable

import pytest
import rfc8785
from opentelemetry._logs import NoOpLoggerProvider, SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

import realpeers
from conftest import PEERS, run
from gateways import fleet_config, real_server
from trunkline.cli.commands import build_parser, gateway_settings, main
from trunkline.errors import ConfigurationError
from trunkline.gateway.serve import Gateway, GatewaySettings
from trunkline.policy import LOCAL, Identity
from trunkline.telemetry import audit as audit_module
from trunkline.telemetry.audit import (
    CANONICAL_MAX_BYTES,
    AuditLog,
    AuditRecord,
    JsonLinesFile,
    OtelLogs,
    Stderr,
    WarningPace,
    _Lines,
    hash_arguments,
)
from trunkline.telemetry.sdk import exporters

KEY = b"an-audit-key-of-32-bytes-0123456"
ALICE = Identity("oauth", "alice", "https://idp.example.com", groups=frozenset({"analysts"}),
                 email="alice@example.com").described()
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def record(n: int = 0, **fields) -> AuditRecord:
    values = {"action": "tools/call", "identity": ALICE, "server": "docs",
              "target": "search", "decision": "allowed", "outcome": "ok",
              "duration_ms": 1.25, "request_id": n, **fields}
    return AuditRecord(**values)


def lines_of(path) -> list[dict]:
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().splitlines()]


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for ``condition`` (a write done in the sink's thread), polling."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.005)


def tasks_but(before: set[asyncio.Task]) -> set[asyncio.Task]:
    """Tasks running now that were not before (``before``: taken when the test began)."""
    return asyncio.all_tasks() - before


class GatedSink:
    """A sink whose writes wait for ``gate``: a disk that does not answer."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.records: list[AuditRecord] = []
        self.closed = False

    async def open(self) -> None:
        pass

    async def write(self, records) -> None:
        self.entered.set()
        await self.gate.wait()
        self.records.extend(records)

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def audit_warnings(caplog):
    caplog.set_level(logging.WARNING, logger="trunkline.audit")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "trunkline.audit"]


# --- records and lines -----------------------------------------------------------------


def test_records_are_json_lines_appended_to_a_0600_file(tmp_path, no_leaks):
    path = tmp_path / "audit.jsonl"

    async def main():
        before = asyncio.all_tasks()
        async with AuditLog(JsonLinesFile(path)) as audit:
            audit.emit(record(1, time=1767225600.5))
            audit.emit(AuditRecord(action="prompts/get", identity=LOCAL.described(),
                                   target="greet", decision="denied", rule="no-prompts",
                                   request_id="r-2", trace_id="0af7651916cd43dd8448eb211c80319c"))
        assert audit.status() == {"written": 2, "dropped": 0, "failed": 0, "queued": 0}
        assert not tasks_but(before)
        async with AuditLog(JsonLinesFile(path)) as again:  # appended, not truncated
            again.emit(record(3))
    run(main())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    first, second, third = lines_of(path)
    assert first == {"time": "2026-01-01T00:00:00.500Z", "action": "tools/call",
                     "identity": {"kind": "oauth", "issuer": "https://idp.example.com",
                                  "subject": "alice"},
                     "server": "docs", "target": "search", "decision": "allowed",
                     "outcome": "ok", "duration_ms": 1.25, "request_id": 1}
    # Fields without a value are left out; the key order is the record's.
    assert list(second) == ["time", "action", "identity", "target", "decision", "rule",
                            "request_id", "trace_id"]
    assert second["identity"] == {"kind": "local", "subject": "local"}
    assert second["rule"] == "no-prompts"
    assert RFC3339_MS.match(second["time"]) and RFC3339_MS.match(third["time"])
    assert third["request_id"] == 3
    text = path.read_text()  # who, never what else is known of them
    assert "analysts" not in text and "alice@example.com" not in text


def test_a_file_rotated_away_is_opened_again_at_its_path(tmp_path, no_leaks):
    path, rotated = tmp_path / "audit.jsonl", tmp_path / "audit.jsonl.1"

    async def main():
        async with AuditLog(JsonLinesFile(path)) as audit:
            audit.emit(record(1))
            await until(lambda: audit.status()["written"] == 1)
            os.rename(path, rotated)  # logrotate's default: rename, the writer reopens
            audit.emit(record(2))
            await until(lambda: audit.status()["written"] == 2)
            # Renamed again, and something else created at the path meanwhile: the writer
            # goes to the file the path names now.
            os.rename(path, tmp_path / "audit.jsonl.2")
            path.write_bytes(b"")
            audit.emit(record(3))
    run(main())
    assert [line["request_id"] for line in lines_of(rotated)] == [1]
    assert [line["request_id"] for line in lines_of(tmp_path / "audit.jsonl.2")] == [2]
    assert [line["request_id"] for line in lines_of(path)] == [3]
    assert stat.S_IMODE(os.stat(tmp_path / "audit.jsonl.2").st_mode) == 0o600


def test_closing_writes_every_record_queued_in_batches(tmp_path, no_leaks):
    path = tmp_path / "audit.jsonl"
    count = audit_module.BATCH * 2 + 7

    async def main():
        before = asyncio.all_tasks()
        audit = AuditLog(JsonLinesFile(path), max_queue=count)
        for n in range(count):  # queued before the writer starts
            audit.emit(record(n))
        await audit.start()
        await audit.aclose()
        assert audit.status() == {"written": count, "dropped": 0, "failed": 0, "queued": 0}
        assert not tasks_but(before)
    run(main())
    assert [line["request_id"] for line in lines_of(path)] == list(range(count))


def test_stderr_gets_whole_lines_at_most_pipe_buf_bytes_a_write(no_leaks):
    """Each write is one message of a SOCK_SEQPACKET pair, so the reader sees the writes'
    own boundaries: every one ends at a line's end and holds at most PIPE_BUF bytes."""
    count = 200

    async def main():
        reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            async with AuditLog(Stderr(writer.fileno())) as audit:
                for n in range(count):
                    audit.emit(record(n, target="t" * 40))
            writes = []
            reader.setblocking(False)
            while True:
                try:
                    writes.append(reader.recv(1 << 16))
                except BlockingIOError:
                    break
        finally:
            reader.close()
            writer.close()
        return writes
    writes = run(main())
    assert len(writes) > 1 and all(0 < len(w) <= audit_module.select.PIPE_BUF for w in writes)
    assert all(w.endswith(b"\n") for w in writes)
    lines = b"".join(writes).splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == list(range(count))


def test_stderr_is_the_processs_own(capfd, no_leaks):
    async def main():
        async with AuditLog.from_target("-") as audit:
            audit.emit(record(1))
            audit.emit(record(2, decision="limited", outcome=None))
    run(main())
    err = capfd.readouterr().err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(line["request_id"], line["decision"]) for line in lines] == [
        (1, "allowed"), (2, "limited")]
    assert "outcome" not in lines[1]


# --- bounded, never in the call's way --------------------------------------------------


def test_a_full_queue_drops_and_counts_without_waiting(audit_warnings, no_leaks):
    async def main():
        before = asyncio.all_tasks()
        sink = GatedSink()
        audit = AuditLog(sink, max_queue=3)
        await audit.start()
        audit.emit(record(0))
        await sink.entered.wait()  # the writer holds record 0, its sink holds it up
        for n in range(1, 9):  # 3 fit in the queue; 5 are dropped, and emit returns
            audit.emit(record(n))
        assert audit.dropped == 5
        assert audit.status() == {"written": 0, "dropped": 5, "failed": 0, "queued": 4}
        # One warning at the first drop; the next ones within WARN_EVERY_S are counted.
        assert audit_warnings() == [
            "audit: 1 dropped (1 in all): 3 records already wait for gated"]
        sink.gate.set()
        await audit.aclose()
        assert [r.request_id for r in sink.records] == [0, 1, 2, 3]
        assert audit.status() == {"written": 4, "dropped": 5, "failed": 0, "queued": 0}
        assert sink.closed and not tasks_but(before)
        # What the paced warning had not said yet is said when the log closes.
        assert audit_warnings()[1:] == ["audit: 4 dropped (5 in all)"]
        audit.emit(record(9))  # after closing: dropped, counted, never raised
        assert audit.dropped == 6
    run(main())


def test_closing_gives_up_on_a_sink_that_never_answers(audit_warnings, no_leaks):
    async def main():
        before = asyncio.all_tasks()
        sink = GatedSink()
        audit = AuditLog(sink, close_timeout_s=0.05)
        await audit.start()
        for n in range(3):
            audit.emit(record(n))
        await sink.entered.wait()
        audit.emit(record(3))
        await audit.aclose()  # the gate never opens
        assert audit.status() == {"written": 0, "dropped": 4, "failed": 0, "queued": 0}
        assert sink.closed and not tasks_but(before)
        assert audit_warnings() == [
            "audit gated: 4 dropped (4 in all): not written within 0.05 s of closing"]
    run(main())


def test_warnings_are_paced():
    pace = WarningPace(every=10.0)
    assert pace.add(1, now=100.0) == 1  # the first at once
    assert pace.add(2, now=101.0) == 0
    assert pace.add(3, now=109.9) == 0
    assert pace.add(1, now=110.0) == 6  # every occurrence since the last warning
    assert pace.add(4, now=115.0) == 0
    assert pace.take() == 4 and pace.take() == 0


# --- a failing sink --------------------------------------------------------------------


def test_a_full_disk_loses_records_counted_and_warned_of(audit_warnings, monkeypatch,
                                                         no_leaks):
    """/dev/full: every write fails with ENOSPC, as on a full disk."""
    monkeypatch.setattr(audit_module, "WARN_EVERY_S", 3600.0)

    async def main():
        before = asyncio.all_tasks()
        async with AuditLog(JsonLinesFile("/dev/full")) as audit:
            for n in range(3):
                audit.emit(record(n))
            await until(lambda: audit.status()["failed"] == 3)
            audit.emit(record(3))  # calls go on: emit neither waits nor raises
            await until(lambda: audit.status()["failed"] == 4)
        assert audit.status() == {"written": 0, "dropped": 0, "failed": 4, "queued": 0}
        assert not tasks_but(before)
    run(main())
    said = audit_warnings()
    assert said[0] == "audit file /dev/full: 3 lost (3 in all): No space left on device"
    assert said[1:] == ["audit file /dev/full: 1 lost (4 in all)"]  # on closing


def test_a_path_that_became_a_directory_fails_then_recovers(tmp_path, audit_warnings,
                                                             no_leaks):
    path = tmp_path / "audit.jsonl"

    async def main():
        async with AuditLog(JsonLinesFile(path)) as audit:
            audit.emit(record(1))
            await until(lambda: audit.status()["written"] == 1)
            os.rename(path, tmp_path / "old.jsonl")
            path.mkdir()
            audit.emit(record(2))
            await until(lambda: audit.status()["failed"] == 1)
            path.rmdir()
            audit.emit(record(3))  # the next batch tries again
            await until(lambda: audit.status()["written"] == 2)
    run(main())
    assert [line["request_id"] for line in lines_of(path)] == [3]
    assert audit_warnings() == [f"audit file {path}: 1 lost (1 in all): Is a directory"]


def test_a_sink_that_raises_is_named_by_its_class_never_its_message(audit_warnings,
                                                                      no_leaks):
    class Broken(GatedSink):
        async def write(self, records) -> None:
            raise RuntimeError("a message that could quote a request: hunter2")

    async def main():
        async with AuditLog(Broken()) as audit:
            audit.emit(record(1))
            await until(lambda: audit.status()["failed"] == 1)
    run(main())
    assert audit_warnings() == ["audit gated: 1 lost (1 in all): RuntimeError"]


def test_a_record_that_is_not_json_is_lost_alone(tmp_path, audit_warnings, no_leaks):
    path = tmp_path / "audit.jsonl"

    async def main():
        async with AuditLog(JsonLinesFile(path)) as audit:
            audit.emit(record(1))
            audit.emit(record(2, identity={"kind": object()}))
            audit.emit(record(3))
        assert audit.status() == {"written": 2, "dropped": 0, "failed": 1, "queued": 0}
    run(main())
    assert [line["request_id"] for line in lines_of(path)] == [1, 3]
    assert audit_warnings() == [
        f"audit file {path}: 1 lost (1 in all): a record that is not JSON"]


def test_a_write_torn_part_way_leaves_its_line_alone():
    """A descriptor that takes part of a write, then fails (a non-blocking pipe with two
    pages free): the lines written whole are counted, the torn one is lost, and the next
    write starts a line of its own."""
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(write_end, False)
        with pytest.raises(BlockingIOError):
            while True:
                os.write(write_end, b"x" * 4096)
        filled = b""
        while len(filled) < 8192:
            filled += os.read(read_end, 8192 - len(filled))
        lines = _Lines()
        line = b"y" * 2999 + b"\n"
        with pytest.raises(audit_module.WriteFailed) as failed:
            lines.write(write_end, [line] * 4)  # 12,000 bytes: 8,192 fit
        assert failed.value.lost == 2 and failed.value.reason == os.strerror(11)
        assert lines.torn
        os.set_blocking(read_end, False)
        with pytest.raises(BlockingIOError):  # empty the pipe
            while True:
                os.read(read_end, 1 << 16)
        lines.write(write_end, [b'{"n":1}\n'])
        assert os.read(read_end, 100) == b'\n{"n":1}\n' and not lines.torn
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_target_that_cannot_be_opened_fails_the_start(tmp_path, no_leaks):
    async def main():
        before = asyncio.all_tasks()
        with pytest.raises(ConfigurationError, match=r"audit file .*: Is a directory"):
            await AuditLog(JsonLinesFile(tmp_path)).start()
        with pytest.raises(ConfigurationError, match="No such file or directory"):
            await AuditLog(JsonLinesFile(tmp_path / "none" / "audit.jsonl")).start()
        assert not tasks_but(before)
    run(main())
    with pytest.raises(ConfigurationError, match="a file's path, '-' \\(stderr\\) or 'otel'"):
        AuditLog.from_target(" ")
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        AuditLog.from_target("-", hash_key=b"short")


# --- the arguments' hash ---------------------------------------------------------------


def test_equal_arguments_hash_equal_and_no_value_is_written(tmp_path, no_leaks):
    arguments = {"query": "quarterly numbers", "password": "hunter2", "limit": 10,
                 "nested": {"b": [1, 2.0, "é"], "a": None}}
    same = {"nested": {"a": None, "b": [1, 2, "é"]}, "limit": 10.0,
            "password": "hunter2", "query": "quarterly numbers"}  # reordered, 10 as 10.0
    digest = hash_arguments(arguments, KEY)
    expected = hmac.new(KEY, rfc8785.dumps(arguments), hashlib.sha256).hexdigest()
    assert digest == f"hmac-sha256:{expected}"
    assert hash_arguments(same, KEY) == digest
    assert hash_arguments({**arguments, "password": "hunter3"}, KEY) != digest
    assert hash_arguments(arguments, b"another-key-0123456789") != digest
    path = tmp_path / "audit.jsonl"

    async def main():
        async with AuditLog(JsonLinesFile(path), hash_key=KEY) as audit:
            assert audit.hashes_arguments
            audit.emit(record(1, arguments_hash=audit.arguments_hash(arguments)))
        assert AuditLog(JsonLinesFile(path)).arguments_hash(arguments) is None  # no key
    run(main())
    text = path.read_text()
    assert json.loads(text)["arguments_hash"] == digest
    for value in ("quarterly", "hunter2", "password", "query", "nested"):
        assert value not in text


def nested(depth: int) -> list:
    deep: list = []
    for _ in range(depth):
        deep = [deep]
    return deep


@pytest.mark.parametrize("arguments", [
    {"id": 2**60},  # beyond RFC 8785's integers (2**53)
    {"x": float("nan")},
    {"s": "\ud800"},  # a lone surrogate: no UTF-8
    {"big": "z" * (CANONICAL_MAX_BYTES + 1)},
    {"deep": nested(100_000)},  # deeper than any of the three forms goes
], ids=["wide-int", "nan", "surrogate", "long", "deep"])
def test_arguments_rfc8785_cannot_write_still_hash(arguments):
    digest = hash_arguments(arguments, KEY)
    assert re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", digest)
    assert hash_arguments(arguments, KEY) == digest


def test_a_long_value_is_hashed_from_its_sorted_json():
    big = {"b": "z" * CANONICAL_MAX_BYTES, "a": 1}
    assert hash_arguments(big, KEY) == hash_arguments({"a": 1, "b": "z" * CANONICAL_MAX_BYTES},
                                                      KEY)
    assert hash_arguments(big, KEY) != hash_arguments({**big, "a": 2}, KEY)


# --- OpenTelemetry logs ----------------------------------------------------------------


def test_records_become_opentelemetry_log_records(no_leaks):
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    trace_id = "0af7651916cd43dd8448eb211c80319c"

    async def main():
        before = asyncio.all_tasks()
        async with AuditLog(OtelLogs(provider)) as audit:
            audit.emit(record(7, time=1767225600.25, trace_id=trace_id,
                              arguments_hash="hmac-sha256:00"))
            audit.emit(AuditRecord(action="resources/read",
                                   identity=Identity.api_key("k1").described(),
                                   target="file:///a", decision="denied", rule="r-9"))
        assert not tasks_but(before)
    run(main())
    provider.shutdown()
    first, second = (r.log_record for r in exporter.get_finished_logs())
    assert first.severity_number is SeverityNumber.INFO and first.severity_text == "INFO"
    assert first.event_name == "trunkline.audit"
    assert first.timestamp == 1767225600250000000
    assert first.trace_id == int(trace_id, 16)
    assert first.body == {"time": "2026-01-01T00:00:00.250Z", "action": "tools/call",
                          "identity": dict(ALICE), "server": "docs", "target": "search",
                          "decision": "allowed", "outcome": "ok", "duration_ms": 1.25,
                          "request_id": 7, "trace_id": trace_id,
                          "arguments_hash": "hmac-sha256:00"}
    assert dict(first.attributes) == {
        "mcp.method.name": "tools/call", "trunkline.server": "docs",
        "trunkline.audit.target": "search", "trunkline.audit.decision": "allowed",
        "trunkline.audit.outcome": "ok", "trunkline.audit.duration_ms": 1.25,
        "jsonrpc.request.id": "7", "trunkline.audit.arguments_hash": "hmac-sha256:00",
        "enduser.id": "alice", "trunkline.audit.identity.kind": "oauth",
        "trunkline.audit.identity.issuer": "https://idp.example.com"}
    assert dict(second.attributes) == {
        "mcp.method.name": "resources/read", "trunkline.audit.target": "file:///a",
        "trunkline.audit.decision": "denied", "trunkline.audit.rule": "r-9",
        "enduser.id": "k1", "trunkline.audit.identity.kind": "api_key"}
    assert second.trace_id == 0


def test_opentelemetry_logs_need_a_provider_that_records():
    async def main():
        with pytest.raises(ConfigurationError, match="OTEL_LOGS_EXPORTER"):
            await AuditLog(OtelLogs(NoOpLoggerProvider())).start()
    run(main())


@pytest.mark.parametrize(("env", "logs"), [
    ({}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://c:4318/v1/logs"}, ["otlp"]),
    ({"OTEL_LOGS_EXPORTER": "console"}, ["console"]),
    ({"OTEL_LOGS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, []),
])
def test_logs_exporters_asked_by_the_environment(env, logs):
    assert exporters("logs", env) == logs


# --- serve --audit ---------------------------------------------------------------------


def serve_settings(*args: str) -> GatewaySettings:
    ns = build_parser().parse_args(["serve", "mcp.json", "--stdio", *args])
    ns.argv = []
    return gateway_settings(ns)


def test_serve_flags_become_the_gateways_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("TRUNKLINE_AUDIT_KEY", KEY.decode())
    target = str(tmp_path / "audit.jsonl")
    settings = serve_settings("--audit", target, "--audit-hash-arguments")
    assert settings.audit == target and settings.audit_key == KEY
    assert KEY.decode() not in repr(settings)
    plain = serve_settings("--audit", "otel")
    assert plain.audit == "otel" and plain.audit_key is None
    assert serve_settings().audit is None


def test_serve_refuses_a_missing_or_short_key_and_a_bad_target(monkeypatch, capsys):
    monkeypatch.delenv("TRUNKLINE_AUDIT_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="needs its key in TRUNKLINE_AUDIT_KEY"):
        serve_settings("--audit", "-", "--audit-hash-arguments")
    monkeypatch.setenv("TRUNKLINE_AUDIT_KEY", "too-short")
    with pytest.raises(ConfigurationError, match="TRUNKLINE_AUDIT_KEY needs at least 16"):
        serve_settings("--audit", "-", "--audit-hash-arguments")
    with pytest.raises(ConfigurationError, match="a file's path"):
        serve_settings("--audit", "")
    with pytest.raises(SystemExit) as exited:
        main(["serve", "mcp.json", "--stdio", "--audit-hash-arguments"])
    assert exited.value.code == 2
    assert "--audit-hash-arguments needs --audit" in capsys.readouterr().err
    with pytest.raises(ConfigurationError, match="an audit key needs an audit target"):
        GatewaySettings(config="mcp.json", audit_key=KEY)


def trunkline_serve(*args: str, env: dict[str, str] | None = None
                    ) -> subprocess.CompletedProcess[str]:
    """``trunkline serve ARGS`` with no ``OTEL_*`` variable but ``env``'s, its stdin closed
    at once (on stdio: served, then stopped)."""
    return subprocess.run([sys.executable, "-m", "trunkline", "serve", *args],
                          capture_output=True, text=True, timeout=120, input="",
                          env={**{k: v for k, v in os.environ.items()
                                  if not k.startswith("OTEL_")}, **(env or {})})


def test_serve_stops_at_once_for_a_target_it_cannot_write(tmp_path, no_leaks):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "alpha": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]}}}))
    missing = tmp_path / "none" / "audit.jsonl"
    done = trunkline_serve(str(config), "--stdio", "--audit", str(missing))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"trunkline: audit file {missing}: No such file or directory")
    done = trunkline_serve(str(config), "--stdio", "--audit", "otel")
    assert done.returncode == 2, done.stderr
    assert "need a logs exporter: set OTEL_LOGS_EXPORTER" in done.stderr


@pytest.mark.real_servers
def test_the_gateway_holds_its_audit_log_while_it_runs(tmp_path, no_leaks):
    """``Gateway.audit``: open (the file made, 0600) once the gateway is, written and
    closed with it; nothing of it outlives the gateway."""
    config = fleet_config(tmp_path, {"py": real_server(realpeers.require(
        realpeers.MODERN_PY_ECHO))})
    path = tmp_path / "audit.jsonl"
    settings = GatewaySettings(config=config, stdio=True, audit=str(path), audit_key=KEY)
    assert KEY.decode() not in repr(settings)

    async def main():
        before = asyncio.all_tasks()
        async with Gateway(settings) as gateway:
            audit = gateway.audit
            assert audit is not None and audit.hashes_arguments
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            audit.emit(record(1, arguments_hash=audit.arguments_hash({"text": "hi"})))
        assert gateway.audit is None
        assert audit.status()["written"] == 1
        assert not tasks_but(before)
    run(main())
    [line] = lines_of(path)
    assert line["arguments_hash"] == hash_arguments({"text": "hi"}, KEY)


def test_serve_sends_audit_records_to_opentelemetry_logs_when_an_exporter_is_set(
        tmp_path, no_leaks):
    """``--audit otel`` with ``OTEL_LOGS_EXPORTER=console``: the SDK's logger provider is
    set up and the gateway starts (and stops when its stdin closes)."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "alpha": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]}}}))
    done = trunkline_serve(str(config), "--stdio", "--audit", "otel",
                           env={"OTEL_LOGS_EXPORTER": "console"})
    assert done.returncode == 0, done.stderr
    assert "logs exporter" not in done.stderr
