"""Tool search over a 10,010-tool catalog made of real servers' definitions
(``tests/catalog/tool_fleet.py``: eight recorded servers, 130 deployments of each, names
varied by server prefix and spelling): time per query (the labelled queries, in turn,
top 10), time to build the index, and to build it again after one server's list changed
(the words of unchanged tools reused). Recall is asserted in
``tests/catalog/test_search_recall.py``; here it is only recorded beside the timings.

    .venv/bin/pytest benches/bench_search.py --benchmark-json=SEARCH.json
    .venv/bin/python benches/bench_search.py report SEARCH.json

Smoke run (CI, ``--benchmark-disable``): one round each; timings are never judged.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "catalog"))

import tool_fleet

from trunkline.catalog import ToolIndex

COPIES = 130
FLEET = tool_fleet.fleet(COPIES)
INDEX = ToolIndex(FLEET.entries)


def _recall(k: int) -> float:
    hits = 0
    for query, answers in tool_fleet.LABELLED:
        found = {tool_fleet.origin(m.server, m.entry.local_name) for m in INDEX.search(query, k)}
        hits += bool(answers & found)
    return hits / len(tool_fleet.LABELLED)


def test_search_one_query(benchmark: Any) -> None:
    queries = itertools.cycle(query for query, _ in tool_fleet.LABELLED)
    rounds = 1 if benchmark.disabled else 20 * len(tool_fleet.LABELLED)
    benchmark.group = "search"
    found = benchmark.pedantic(INDEX.search, setup=lambda: ((next(queries), 10), {}),
                               rounds=rounds, iterations=1, warmup_rounds=0)
    assert found  # the first query has answers
    benchmark.extra_info.update(tools=len(FLEET), queries=len(tool_fleet.LABELLED),
                                recall_at_1=_recall(1), recall_at_5=_recall(5))


def test_build_the_index(benchmark: Any) -> None:
    benchmark.group = "search"
    built = benchmark.pedantic(ToolIndex, args=(FLEET.entries,),
                               rounds=1 if benchmark.disabled else 5, iterations=1)
    assert len(built) == len(FLEET)
    benchmark.extra_info.update(tools=len(FLEET))


def test_rebuild_after_one_server_changed(benchmark: Any) -> None:
    """The catalog changed (one deployment gone, every entry a new object): the previous
    index's words are reused for every tool whose entry is unchanged."""
    catalog = tool_fleet.fleet(COPIES, leave_out="github-7")
    benchmark.group = "search"
    built = benchmark.pedantic(lambda: ToolIndex(catalog.entries, previous=INDEX),
                               rounds=1 if benchmark.disabled else 5, iterations=1)
    assert len(built) == len(catalog) == len(FLEET) - 26
    benchmark.extra_info.update(tools=len(catalog))


def report(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    rows = {b["name"]: b for b in data["benchmarks"] if b["group"] == "search"}
    search = rows["test_search_one_query"]
    info = search["extra_info"]
    return "\n".join([
        f"Tool search over {info['tools']:,} tools ({info['queries']} labelled queries, "
        "top 10):", "",
        "| what | median | min | max |", "|---|---:|---:|---:|",
        *(f"| {name} | {rows[key]['stats']['median'] * 1e3:.2f} ms "
          f"| {rows[key]['stats']['min'] * 1e3:.2f} ms | {rows[key]['stats']['max'] * 1e3:.2f} ms |"
          for name, key in (("one query (p50 = median)", "test_search_one_query"),
                            ("build the index", "test_build_the_index"),
                            ("build again, one server changed",
                             "test_rebuild_after_one_server_changed"))),
        "", f"recall@1 {info['recall_at_1']:.2f}, recall@5 {info['recall_at_5']:.2f}"])


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        sys.exit("usage: bench_search.py report SEARCH.json")
    print(report(sys.argv[2]))
