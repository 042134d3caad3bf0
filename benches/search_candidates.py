"""One-off: the BM25 implementations considered for tool search, on the benchmark's
10,010-tool catalog (``tests/catalog/tool_fleet.py``) and labelled queries, each fed the
same words (``trunkline.catalog.search.document`` / ``words``): time to build the index,
p50 and p99 time per query (top 10), and recall@1/@5 of the labelled tool.

Needs the candidates, which trunkline does not depend on, in a scratch environment:

    python -m venv /tmp/bm25 && /tmp/bm25/bin/pip install bm25s rank-bm25 orjson msgspec jsonschema
    PYTHONPATH=python /tmp/bm25/bin/python benches/search_candidates.py

The numbers are in docs/benchmarks.md, "Libraries chosen by measurement".
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "catalog"))

import tool_fleet

from trunkline.catalog.search import ToolIndex, document, words

COPIES = 130
ROUNDS = 5

Search = Callable[[str, int], list[int]]


def ours(entries: list) -> Search:
    index = ToolIndex(entries)
    position = {id(entry): at for at, entry in enumerate(entries)}
    return lambda query, k: [position[id(m.entry)] for m in index.search(query, k)]


def bm25s_index(entries: list) -> Search:
    import bm25s
    import numpy as np

    corpus = [document(entry) for entry in entries]
    vocabulary: dict[str, int] = {}
    ids = [[vocabulary.setdefault(word, len(vocabulary)) for word in doc] for doc in corpus]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocabulary),
                    show_progress=False)

    def search(query: str, k: int) -> list[int]:
        known = [vocabulary[w] for w in dict.fromkeys(words(query)) if w in vocabulary]
        if not known:
            return []
        scores = retriever.get_scores(known)
        top = np.argsort(-scores, kind="stable")[:k]
        return [int(i) for i in top if scores[i] > 0]
    return search


def rank_bm25_index(entries: list) -> Search:
    import numpy as np
    from rank_bm25 import BM25Okapi

    okapi = BM25Okapi([document(entry) for entry in entries])

    def search(query: str, k: int) -> list[int]:
        scores = okapi.get_scores(list(dict.fromkeys(words(query))))
        top = np.argsort(-scores, kind="stable")[:k]
        return [int(i) for i in top if scores[i] > 0]
    return search


def measure(name: str, make: Callable[[list], Search], entries: list) -> None:
    started = time.perf_counter()
    search = make(entries)
    built = time.perf_counter() - started
    times: list[float] = []
    hits = {1: 0, 5: 0}
    for _ in range(ROUNDS):
        for query, _answers in tool_fleet.LABELLED:
            started = time.perf_counter()
            search(query, 10)
            times.append(time.perf_counter() - started)
    for query, answers in tool_fleet.LABELLED:
        found = [entries[i] for i in search(query, 5)]
        for k in hits:
            if answers & {tool_fleet.origin(e.server, e.local_name) for e in found[:k]}:
                hits[k] += 1
    times.sort()
    print(f"{name:10} build {built * 1e3:7.0f} ms  p50 {statistics.median(times) * 1e3:6.2f} ms"
          f"  p99 {times[int(len(times) * 0.99)] * 1e3:6.2f} ms  recall@1 "
          f"{hits[1]}/{len(tool_fleet.LABELLED)}  recall@5 {hits[5]}/{len(tool_fleet.LABELLED)}")


def main() -> None:
    entries = list(tool_fleet.fleet(COPIES).entries)
    print(f"{len(entries)} tools, {len(tool_fleet.LABELLED)} labelled queries")
    for name, make in (("trunkline", ours), ("bm25s", bm25s_index),
                       ("rank-bm25", rank_bm25_index)):
        measure(name, make, entries)


if __name__ == "__main__":
    main()
