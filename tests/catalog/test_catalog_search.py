"""The tool search index (``trunkline.catalog.search``): how names and text become words,
BM25 scores against a hand computation, field weights, deterministic order, bad input,
and ``ToolSearch`` rebuilding only after a change."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog import ListingDriver, ToolIndex, ToolSearch, build_catalog
from trunkline.catalog.search import K1, B, document, words


def listing(server: str, *tools: dict[str, Any]):
    raw = [{"inputSchema": {"type": "object"}, **t} for t in tools]
    driver = ListingDriver(server, "modern")
    driver.add_page({"resultType": "complete", "tools": raw, "ttlMs": 0, "cacheScope": "public"})
    return driver.finish()


def catalog(*listings):
    return build_catalog(listings, policy="prefix")


# --- words ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("get_current_time", ["get", "current", "time"]),
    ("readMediaFile", ["read", "media", "file"]),
    ("HTTPRequest2Json", ["http", "request", "2", "json"]),
    ("github.search-issues", ["github", "search", "issue"]),
    ("github-2/create_issue", ["github", "2", "create", "issue"]),
    ("List the directories, please!", ["list", "directory"]),
    ("entries classes status boxes branches", ["entry", "class", "status", "box", "branch"]),
    ("Größe der Datei", ["größe", "der", "datei"]),
    ("  __--//  ", []),
])
def test_words_split_names_as_they_are_written(text, expected):
    assert words(text) == expected


def test_a_document_weighs_name_title_description_parameters_and_server():
    (entry,) = catalog(listing("fs", {
        "name": "read_file", "title": "Read a file", "description": "Read contents",
        "inputSchema": {"type": "object", "properties": {"maxBytes": {"type": "integer"}}},
    })).entries
    found = document(entry)
    # name x3 (its words and the run-together name), title x2, description, parameter, server
    assert found.count("readfile") == 3
    assert found.count("read") == 3 + 2 + 1
    assert found.count("file") == 3 + 2
    assert found.count("content") == 1
    assert found.count("max") == found.count("byte") == found.count("maxbytes") == 1
    assert found.count("f") == 0 and found.count("fs") == 1


# --- scores ---------------------------------------------------------------------------


def test_scores_are_okapi_bm25_computed_by_hand():
    tools = catalog(listing("s", {"name": "alpha", "description": "zebra zebra"},
                            {"name": "beta", "description": "zebra"},
                            {"name": "gamma", "description": "lion"})).entries
    index = ToolIndex(tools)
    docs = [document(t) for t in tools]
    average = sum(map(len, docs)) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # "zebra" is in two of three

    def bm25(tf: int, length: int) -> float:
        return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))

    matches = index.search("zebra")
    assert [m.name for m in matches] == ["alpha", "beta"]
    assert matches[0].score == pytest.approx(bm25(2, len(docs[0])))
    assert matches[1].score == pytest.approx(bm25(1, len(docs[1])))


def test_a_name_outweighs_the_same_word_in_a_description():
    index = ToolIndex(catalog(listing("s",
        {"name": "forecast", "description": "Tells what the sky will do"},
        {"name": "almanac", "description": "Old records, not a forecast tool"})).entries)
    assert [m.name for m in index.search("forecast")] == ["forecast", "almanac"]


def test_parameter_names_and_titles_are_searched():
    index = ToolIndex(catalog(listing("s",
        {"name": "t1", "inputSchema": {"type": "object", "properties": {"zipCode": {}}}},
        {"name": "t2", "title": "Weather radar"})).entries)
    assert [m.name for m in index.search("zip code")] == ["t1"]
    assert [m.name for m in index.search("radar")] == ["t2"]


def test_a_run_together_or_differently_spelled_name_finds_the_tool():
    index = ToolIndex(catalog(listing("s", {"name": "read_media_file"},
                                      {"name": "read_text_file"})).entries)
    for query in ("readmediafile", "readMediaFile", "read-media-file", "READ_MEDIA_FILE"):
        assert index.search(query)[0].name == "read_media_file", query


def test_results_carry_the_entry_its_callable_name_and_server():
    merged = catalog(listing("github", {"name": "search"}), listing("gitlab", {"name": "search"}))
    matches = ToolIndex(merged.entries).search("search", limit=5)
    assert [(m.name, m.server) for m in matches] == [
        ("github_search", "github"), ("gitlab_search", "gitlab")]
    assert matches[1].entry.name == "gitlab_search" and matches[1].entry.local_name == "search"
    assert merged.lookup(matches[1].name) is matches[1].entry


def test_ties_keep_the_catalog_order_and_limit_cuts():
    tools = [{"name": f"copy{n}", "description": "same words"} for n in range(5)]
    index = ToolIndex(catalog(listing("s", *tools)).entries)
    assert [m.name for m in index.search("same", limit=3)] == ["copy0", "copy1", "copy2"]
    assert len(index.search("same", limit=50)) == 5


def test_no_words_or_unknown_words_find_nothing():
    index = ToolIndex(catalog(listing("s", {"name": "echo"})).entries)
    assert index.search("") == []
    assert index.search("the of and") == []  # only common words
    assert index.search("xylophone") == []
    assert ToolIndex([]).search("echo") == []


@pytest.mark.parametrize("query, limit, error", [
    (b"echo", 10, TypeError), (None, 10, TypeError), ("echo", 0, ValueError),
    ("echo", -1, ValueError), ("echo", True, ValueError), ("echo", 2.0, ValueError),
])
def test_bad_arguments_are_refused(query, limit, error):
    index = ToolIndex(catalog(listing("s", {"name": "echo"})).entries)
    with pytest.raises(error):
        index.search(query, limit)


# --- rebuilding -----------------------------------------------------------------------


def test_tool_search_rebuilds_only_at_the_first_search_after_a_change():
    current = catalog(listing("s", {"name": "echo"}))
    reads: list[int] = []

    def entries():
        reads.append(1)
        return current.entries

    search = ToolSearch(entries)
    assert reads == []  # nothing built for a catalog nobody searched
    assert [m.name for m in search.search("echo")] == ["echo"]
    search.search("echo")
    search.search("anything")
    assert len(reads) == 1
    current = catalog(listing("s", {"name": "echo"}, {"name": "weather"}))
    assert search.search("weather") == []  # not told yet: the index it has
    search.changed()
    search.changed()
    assert [m.name for m in search.search("weather")] == ["weather"]
    assert len(reads) == 2


name_part = st.text("abcdefghij", min_size=1, max_size=6)
tool = st.fixed_dictionaries({"name": st.builds("_".join, st.lists(name_part, min_size=1,
                                                                   max_size=3)),
                              "description": st.text("abcde fghij", max_size=30)})


@given(st.lists(tool, max_size=12, unique_by=lambda t: t["name"]),
       st.lists(tool, max_size=12, unique_by=lambda t: t["name"]),
       st.lists(name_part, min_size=1, max_size=3))
def test_a_rebuild_reusing_words_ranks_as_a_fresh_build(first, second, query):
    old = ToolIndex(catalog(listing("a", *first), listing("b", *second)).entries)
    changed = catalog(listing("a", *second), listing("c", *first)).entries
    reused, fresh = ToolIndex(changed, previous=old), ToolIndex(changed)
    text = " ".join(query)
    assert [(m.entry, m.score) for m in reused.search(text, 20)] == \
        [(m.entry, m.score) for m in fresh.search(text, 20)]
