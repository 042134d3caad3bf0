"""The skills of several servers as one list, each under a name no other skill has.

A skill is the pair of its server and its ``SKILL.md`` URI (SEP-2640, "Skill URIs"): two
servers may both serve ``skill://refunds/SKILL.md``, and those are two skills. Its
frontmatter ``name`` is a label, not an identifier (two skills of one server may share
it). So skills are named as tools are (``catalog.names``), with the skill's *path* (its URI
without the scheme and ``/SKILL.md``, unique within its server) in the place of a tool's
local name:

1. A path no other listed server serves keeps it, made model-safe: ``git-workflow`` stays
   ``git-workflow``; ``acme/billing/refunds`` is escaped (``acme_billing_refunds_`` and a
   digest), so two paths that escape alike stay apart.
2. A path two or more servers serve is contested: every one of them is
   ``<server>_<path>`` (escaped where it must be), none keeps the bare path, so which
   server a name reaches never depends on the configured order. Under the ``prefix-all``
   policy every skill is.
3. The names depend only on the set of ``(server, path)`` pairs listed.
4. Where rule 2 cannot name a skill without taking another's name (server ``acme``'s
   contested ``refunds`` beside another server's own path ``acme/refunds``), every skill
   is named as under ``prefix-all``: a skill is never left out for its name.

Order: servers in configured order, each server's skills by URI (code point order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..errors import ToolCollision
from ..protocol.skills import SkillEntry
from .names import tool_names


def skill_names(listings: Sequence[tuple[str, Sequence[SkillEntry]]], *,
                prefix_all: bool = False) -> list[SkillEntry]:
    """The entries of ``listings`` (each ``(server, its entries)``, in configured order)
    as one list, each named by the rules above."""
    entries = [e for _server, listed in listings for e in sorted(listed, key=_by_uri)]
    # A path is unique within its server (a URI is); keep one entry per (server, URI).
    seen: set[tuple[str, str]] = set()
    unique = []
    for e in entries:
        if (e.server, e.uri) not in seen:
            seen.add((e.server, e.uri))
            unique.append(e)
    claimants = [(e.server, e.path) for e in unique]
    try:
        names = tool_names(claimants, prefix_all=prefix_all)
    except ToolCollision:  # a contested path's key is another skill's own path
        names = tool_names(claimants, prefix_all=True)
    return [replace(e, name=name) for e, name in zip(unique, names, strict=True)]


def _by_uri(entry: SkillEntry) -> str:
    return entry.uri
