"""Recall of tool search on real servers' tool definitions (``tool_fleet.py``): the
labelled tool must be among the first results for most labelled queries, in the eight
servers' own catalog (77 tools) and in a fleet of 130 deployments of each (10,010 tools,
names varied by server prefix and spelling). Latency is measured in
``benches/bench_search.py``, never here.

The bars are set under what the index reaches (docs/benchmarks.md, "Tool search"): 43/46 at 5 in
the small catalog, 39/46 at 5 in the fleet, where the 130 copies of one tool tie and
fill the first results. Queries the index misses are in the failure message."""

from __future__ import annotations

import tool_fleet

from trunkline.catalog import Catalog, ToolIndex

K = 5


def recall(catalog: Catalog, k: int) -> tuple[float, list[str]]:
    index = ToolIndex(catalog.entries)
    missed = []
    for query, answers in tool_fleet.LABELLED:
        found = [tool_fleet.origin(m.server, m.entry.local_name) for m in index.search(query, k)]
        if not answers & set(found):
            missed.append(f"{query!r}: wanted {sorted(answers)}, got {found}")
    return 1 - len(missed) / len(tool_fleet.LABELLED), missed


def test_the_labels_name_recorded_tools():
    recorded = {f"{s['server']}/{t['name']}" for s in tool_fleet.recorded() for t in s["tools"]}
    for _query, answers in tool_fleet.LABELLED:
        assert answers <= recorded, answers
    assert len(tool_fleet.LABELLED) >= 40


def test_recall_in_the_real_servers_catalog():
    catalog = tool_fleet.fleet(1)
    assert len(catalog) == 77
    found, missed = recall(catalog, K)
    assert found >= 0.9, "\n".join(missed)
    first, missed_first = recall(catalog, 1)
    assert first >= 0.75, "\n".join(missed_first)


def test_recall_in_a_ten_thousand_tool_fleet():
    catalog = tool_fleet.fleet(130)
    assert len(catalog) >= 10_000
    assert len({e.name for e in catalog}) == len(catalog)
    found, missed = recall(catalog, K)
    assert found >= 0.8, "\n".join(missed)
