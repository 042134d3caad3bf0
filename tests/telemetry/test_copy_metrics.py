"""The Prometheus page of ``serve --processes N``: every copy's samples, each labelled with
its copy, each family once (``gateway/copy_metrics.py``). Pages written by
prometheus_client itself, read back by its parser."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trunkline.gateway.copy_metrics import LABEL, merge


def page(calls: int, seconds: list[float], *, extra: bool = False) -> bytes:
    registry = CollectorRegistry()
    counter = Counter("calls", "Calls made", ["server"], registry=registry)
    counter.labels("echo").inc(calls)
    histogram = Histogram("call_duration_seconds", "How long", ["server"], registry=registry,
                          buckets=(0.1, 1.0))
    for s in seconds:
        histogram.labels("echo").observe(s)
    if extra:
        Counter("only_here", "One copy has it", registry=registry).inc()
    return generate_latest(registry)


def samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text.decode()) for s in f.samples
            if not s.name.endswith("_created")}


def test_every_copys_samples_labelled_each_family_once():
    merged = merge([("0", page(3, [0.05, 2.0])), ("1", page(5, [0.5], extra=True))])
    text = merged.decode()
    # One HELP and one TYPE per family, whatever the number of copies.
    assert text.count("# TYPE calls_total counter") == 1
    assert text.count("# TYPE call_duration_seconds histogram") == 1
    got = samples(merged)
    assert got[("calls_total", (("server", "echo"), (LABEL, "0")))] == 3
    assert got[("calls_total", (("server", "echo"), (LABEL, "1")))] == 5
    assert got[("call_duration_seconds_count", (("server", "echo"), (LABEL, "0")))] == 2
    assert got[("call_duration_seconds_bucket", (("le", "0.1"), ("server", "echo"),
                                                 (LABEL, "0")))] == 1
    assert got[("call_duration_seconds_bucket", (("le", "1.0"), ("server", "echo"),
                                                 (LABEL, "1")))] == 1
    assert got[("only_here_total", ((LABEL, "1"),))] == 1
    # Nothing is summed or lost: every sample of every page is there once, with its copy.
    expected = {(name, tuple(sorted([*labels, (LABEL, copy)]))): value
                for copy, one in (("0", page(3, [0.05, 2.0])), ("1", page(5, [0.5], extra=True)))
                for (name, labels), value in samples(one).items()}
    assert got == expected


def test_no_pages_is_an_empty_page():
    assert merge([]) == b""
