"""The Prometheus page of ``serve --processes N``: every copy's samples, each labelled with
its copy, each family once (``gateway/copy_metrics.py``). Pages written by
prometheus_client itself, read back by its parser."""

from __future__ import annotations

import asyncio
import socket

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


def test_a_copy_that_is_gone_or_stuck_is_left_out_and_the_rest_served(tmp_path):
    """Copy 1 accepts and never answers, copy 2 left its socket behind and is gone; the
    page still comes, with copies 0 and 3 (the stuck one left out at its timeout); every
    socket of ours is removed on stop."""
    from conftest import run
    from trunkline.gateway.copy_metrics import CopyPages, socket_path

    async def main():
        ours = [CopyPages(lambda i=i: (page(i + 1, []), "text/plain"), str(tmp_path), i)
                for i in (0, 3)]
        for pages in ours:
            await pages.start()
        held: list[asyncio.StreamWriter] = []

        async def never_answer(reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
            held.append(writer)

        stuck = await asyncio.start_unix_server(never_answer, path=str(socket_path(tmp_path, 1)))
        gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        gone.bind(str(socket_path(tmp_path, 2)))
        gone.close()  # its file stays, nobody listens: connecting is refused
        try:
            # (A stuck copy costs the page its timeout, 2 s; run() bounds the whole.)
            text, content_type = await ours[0].page()
        finally:
            stuck.close()
            for writer in held:
                writer.close()
            await stuck.wait_closed()
            for pages in ours:
                await pages.stop()
        return text, content_type

    text, content_type = run(main())
    assert content_type == "text/plain"
    got = samples(text)
    assert got[("calls_total", (("server", "echo"), (LABEL, "0")))] == 1
    assert got[("calls_total", (("server", "echo"), (LABEL, "3")))] == 4
    assert {dict(labels)[LABEL] for _name, labels in got} == {"0", "3"}
    assert not socket_path(tmp_path, 0).exists() and not socket_path(tmp_path, 3).exists()
