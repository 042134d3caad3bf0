"""Tool search: a BM25 index over a catalog's entries, so a model can find the few tools it
needs among thousands without every definition in its context. Pure: no I/O, no clock.

Rules:

1. A tool is one document, built from the fields a model would search by, each repeated
   by its weight (BM25F's simplification: a field's weight scales its term frequencies):
   the name the model calls (x3: the canonical name, with its ``<server>/`` prefix when it
   has one), the title (x2: ``display_name`` when it differs from the name), the
   description (x1), the input schema's parameter names (x1, top level) and the server's
   name (x1, for "the github one" queries).
2. Words are split the way tool names are written: on anything that is not a letter or a
   digit (``snake_case``, ``kebab-case``, ``dotted.names``, ``server/tool``) and at case
   changes (``camelCase``, ``HTTPRequest`` -> ``http request``), lowercased, a plural
   ending taken off (``files`` -> ``file``, ``entries`` -> ``entry``, ``branches`` ->
   ``branch``; no further stemming: a stemmer finds no more tools), and common English
   words dropped (they match everything and cost time). A name also counts as one word
   with its separators removed (``readMediaFile`` -> ``readmediafile``), so a query
   that runs the words together still finds it.
3. Scores are Okapi BM25 (k1 1.2, b 0.75, Lucene's always-positive idf), precomputed
   per (word, tool) when the index is built: a query only adds up the postings of its
   distinct words. Ties go to the catalog's order, so results are deterministic.
4. The index is immutable (``ToolIndex(entries)``). ``ToolSearch`` keeps the index of a
   changing catalog: told that it changed, it builds a new one at the next search (never
   per query, and never for a catalog nobody searches), reusing the words of every tool
   whose entry is unchanged (a list change of one server re-reads that server's tools).

Why our own BM25 and not a library: with the per-word weights precomputed, a query over
10,000 tools is a few dictionary walks, and the whole index is a few dozen lines with no
numpy/scipy in the gateway's process.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .model import ToolEntry

K1 = 1.2
B = 0.75
NAME_WEIGHT = 3
TITLE_WEIGHT = 2
DEFAULT_LIMIT = 10

#: Runs of letters and digits (any script); ``_`` is a separator, not a letter.
_RUNS = re.compile(r"[^\W_]+")
#: Inside an ASCII run: ``HTTPRequest`` -> ``HTTP``, ``Request``; ``get2Files`` -> ``get``,
#: ``2``, ``Files``.
_CASE_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOP_WORDS = frozenset(
    "a an and are as at be by can do for from how i in into is it its me my of on or "
    "please that the this to use using via what when which with would you your".split())


def words(text: str) -> list[str]:
    """Rule 2's words of ``text``, in order, repeats kept."""
    out: list[str] = []
    for run in _RUNS.findall(text):
        parts = _CASE_PARTS.findall(run) if run.isascii() else [run]
        for part in parts:
            word = _singular(part.lower())
            if word not in _STOP_WORDS:
                out.append(word)
    return out


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _name_words(name: str) -> list[str]:
    parts = words(name)
    joined = "".join(part.lower() for part in _RUNS.findall(name))
    if len(parts) > 1 and joined:
        parts.append(joined)
    return parts


def document(entry: ToolEntry) -> list[str]:
    """Rule 1: the words one tool is found by, each field repeated by its weight."""
    found = _name_words(entry.name) * NAME_WEIGHT
    title = entry.display_name
    if title != entry.name:
        found += words(title) * TITLE_WEIGHT
    if entry.description:
        found += words(entry.description)
    properties = entry.input_schema.get("properties")
    if isinstance(properties, dict):
        for parameter in properties:
            if isinstance(parameter, str):
                found += _name_words(parameter)
    found += words(entry.server)
    return found


@dataclass(frozen=True)
class ToolMatch:
    """One search result: the catalog entry and how well it matched (higher is better)."""

    entry: ToolEntry
    score: float

    @property
    def name(self) -> str:
        """The name the model calls the tool by (its catalog name)."""
        return self.entry.model_name

    @property
    def server(self) -> str:
        return self.entry.server


class ToolIndex:
    """An immutable BM25 index of catalog entries (rules 1-4)."""

    __slots__ = ("entries", "_documents", "_postings")

    def __init__(self, entries: Iterable[ToolEntry], *, previous: ToolIndex | None = None
                 ) -> None:
        """``previous``: an index of an earlier version of the catalog, whose unchanged
        entries' words are reused (reading words is most of the cost of a build)."""
        self.entries: tuple[ToolEntry, ...] = tuple(entries)
        known = previous._documents if previous is not None else {}
        documents = [known.get(entry) or Counter(document(entry)) for entry in self.entries]
        self._documents: dict[ToolEntry, Counter[str]] = dict(
            zip(self.entries, documents, strict=True))
        lengths = [sum(counts.values()) for counts in documents]
        average = (sum(lengths) / len(lengths)) if lengths else 0.0
        frequency: Counter[str] = Counter()
        for counts in documents:
            frequency.update(counts.keys())
        total = len(documents)
        idf = {word: math.log(1.0 + (total - n + 0.5) / (n + 0.5))
               for word, n in frequency.items()}
        postings: dict[str, dict[int, float]] = {}
        for position, (counts, length) in enumerate(zip(documents, lengths, strict=True)):
            norm = K1 * (1.0 - B + B * length / average) if average else K1
            for word, tf in counts.items():
                weight = idf[word] * tf * (K1 + 1.0) / (tf + norm)
                postings.setdefault(word, {})[position] = weight
        self._postings: dict[str, dict[int, float]] = postings

    def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[ToolMatch]:
        """The ``limit`` best matches for ``query``, best first; none when no word of the
        query is in the index (or the query has no words)."""
        if not isinstance(query, str):
            raise TypeError(f"a search query is a string, not {type(query).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive integer, not {limit!r}")
        found = [self._postings[word] for word in dict.fromkeys(_name_words(query))
                 if word in self._postings]
        if not found:
            return []
        # The longest posting list is copied (in C), the others added to it: a common word
        # costs no Python loop over its thousands of tools.
        found.sort(key=len)
        scores = dict(found.pop())
        get = scores.get
        for postings in found:
            for position, weight in postings.items():
                scores[position] = get(position, 0.0) + weight
        best = heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], -item[0]))
        return [ToolMatch(self.entries[position], score) for position, score in best]

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<ToolIndex {len(self.entries)} tools, {len(self._postings)} words>"


class ToolSearch:
    """The index of a changing catalog (rule 4): ``entries()`` reads the catalog's current
    entries, ``changed()`` says they changed, ``search`` searches them."""

    __slots__ = ("_entries", "_index", "_stale")

    def __init__(self, entries: Callable[[], Sequence[ToolEntry]]) -> None:
        self._entries = entries
        self._index: ToolIndex | None = None
        self._stale = True

    def changed(self) -> None:
        self._stale = True

    def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[ToolMatch]:
        if self._stale or self._index is None:
            self._index = ToolIndex(self._entries(), previous=self._index)
            self._stale = False
        return self._index.search(query, limit)
