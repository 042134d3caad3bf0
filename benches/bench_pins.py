"""Pinning a listing: what a tool's digest costs the first time it is seen (RFC 8785 with
the pure-Python ``rfc8785``, then SHA-256) and every later time (the memo, keyed by a hash
of the sorted orjson bytes), and a whole screening of a 100-tool listing.

Run: ``.venv/bin/pytest benches/bench_pins.py --benchmark-group-by=group``. Every
benchmark records ``tools`` in ``extra_info``: per-tool cost is mean / tools.
"""

from __future__ import annotations

import copy

import pytest

from trunkline.catalog import ListingDriver, pins
from trunkline.catalog.filters import ToolBounds, ToolFilter
from trunkline.catalog.pins import PinRecord
from trunkline.catalog.screen import screen

#: About the size of a real server's tool: a paragraph of description, a dozen parameters.
TOOL = {"name": "search_issues", "title": "Search issues",
        "description": "Search issues and pull requests by query, state, labels, author. " * 4,
        "inputSchema": {"type": "object", "required": ["p0"], "properties": {
            f"p{i}": {"type": "string", "description": f"parameter {i} of the search"}
            for i in range(12)}},
        "annotations": {"readOnlyHint": True}}
N = 100


def _tools() -> list[dict]:
    out = []
    for i in range(N):
        tool = copy.deepcopy(TOOL)
        tool["name"] = f"tool_{i}"
        out.append(tool)
    return out


@pytest.mark.benchmark(group="pin-digest")
def test_digest_first_sight(benchmark):
    tools = _tools()

    def first():
        pins._MEMO.clear()
        for tool in tools:
            pins.digest(tool)
    benchmark.extra_info["tools"] = N
    benchmark(first)


@pytest.mark.benchmark(group="pin-digest")
def test_digest_remembered(benchmark):
    tools = _tools()
    for tool in tools:
        pins.digest(tool)
    benchmark.extra_info["tools"] = N
    benchmark(lambda: [pins.digest(tool) for tool in tools])


@pytest.mark.benchmark(group="pin-screen")
def test_screen_a_pinned_listing(benchmark):
    driver = ListingDriver("s", "legacy")
    driver.add_page({"tools": _tools()})
    listing = driver.finish()
    record = screen(listing, PinRecord("id"), tool_filter=ToolFilter(),
                    bounds=ToolBounds()).record
    benchmark.extra_info["tools"] = N
    benchmark(lambda: screen(listing, record, tool_filter=ToolFilter(), bounds=ToolBounds()))
