"""``--log-format json``: the formatter and the context every line carries, through
Python's real logging (the gateway's lines end to end: tests/gateway/test_serve_status.py)."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from trunkline import log_context
from trunkline.log_format import JsonFormatter


@pytest.fixture
def written():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("trunkline.test-log-format")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, lambda: [orjson.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)


def test_a_line_carries_what_is_bound_and_its_own_extra_wins(written):
    logger, lines = written
    logger.info("outside")
    token = log_context.bind("alpha", "echo", 7)
    try:
        logger.info("inside %s", "a request")
        logger.warning("about another", extra={"server": "beta"})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
    finally:
        log_context.unbind(token)
    logger.info("after")
    outside, inside, other, failed, after = lines()
    assert (outside["server"], outside["tool"], outside["request_id"]) == (None, None, None)
    assert inside["message"] == "inside a request" and inside["level"] == "info"
    assert (inside["server"], inside["tool"], inside["request_id"]) == ("alpha", "echo", 7)
    assert (other["server"], other["tool"]) == ("beta", "echo")
    assert "ValueError: boom" in failed["error"]
    assert after["server"] is None
    assert inside["time"].endswith("+00:00") and inside["logger"] == logger.name
    assert "trace_id" not in inside  # no span is current


def test_the_current_trace_id_is_on_the_line(written):
    trace = pytest.importorskip("opentelemetry.trace")
    logger, lines = written
    context = trace.SpanContext(trace_id=0x0AF7651916CD43DD8448EB211C80319C,
                                span_id=0x00F067AA0BA902B7, is_remote=False,
                                trace_flags=trace.TraceFlags(1))
    with trace.use_span(trace.NonRecordingSpan(context)):
        logger.info("traced")
    logger.info("untraced")
    traced, untraced = lines()
    assert traced["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert "trace_id" not in untraced
