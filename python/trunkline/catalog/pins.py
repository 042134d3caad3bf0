"""Pinned tool definitions: what each of a server's tools was when it was approved, and
what to do with a listing that differs (the "rug pull"). Pure: no I/O; the pin store
(``parent.pin_store``) reads and writes ``PinRecord`` s.

Rules:

1. A tool's pin is the SHA-256 of the RFC 8785 canonical JSON of its whole definition as
   it came over the wire (name, title, description, inputSchema, outputSchema,
   annotations, icons, anything else), minus the ``_meta`` keys documented as volatile
   (``VOLATILE_META_KEYS``: MCP documents none today, so nothing is left out). A field's
   change anywhere, a schema's included, changes the pin.
2. Pins belong to one server identity (``server_identity(params)``: the command line
   with its environment and working directory, or the URL), never to a configured name
   alone: a record is looked up by identity, so a second server, whatever it is called,
   starts with no approvals.
3. ``judge`` decides each tool of a listing against the server's record:
   - its pin equals the approved one: admitted;
   - it differs: quarantined (``"changed"``), with what changed (``diff``);
   - it has no approved pin and its description is that of an approved tool missing
     from the listing: quarantined (``"renamed"``), whatever rule 4 says;
   - it has no approved pin otherwise: with ``first_sight="trust"`` (trust on first use)
     admitted and pinned; with ``"approve"`` quarantined (``"new"``).
4. A quarantined definition is kept in the record as *pending* (the last one seen), so
   it can be shown (``diff``) and approved (``approve``) without the server running;
   approving makes it the approved pin. An approved pin stays when its tool leaves the
   listing (it may come back unchanged, and rule 3's rename check needs it), up to
   ``KEPT_UNLISTED`` such pins, the last added kept: a server that lists new names on
   every listing cannot grow its record (the host's memory, the store) without bound.
5. The module keeps no state but a memo of digests (``digest``), which never changes an
   answer.
6. ``diff`` is small and structural: dotted paths of the fields whose values differ
   (``"description"``, ``"inputSchema.properties.note"``), objects compared key by key,
   anything else whole, at most ``MAX_CHANGES`` paths.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson
import rfc8785

from .model import ToolEntry

FirstSight = Literal["trust", "approve"]
QuarantineReason = Literal["changed", "new", "renamed", "bound"]

#: ``_meta`` keys whose values may change without the tool changing (rule 1).
VOLATILE_META_KEYS: frozenset[str] = frozenset()
#: Paths ``diff`` reports at most (the rest is summed up as one more line).
MAX_CHANGES = 20
#: Approved pins a record keeps of tools its last listing lacked (rule 4).
KEPT_UNLISTED = 1024
FORMAT = 1


def server_identity(identity: tuple[object, ...]) -> str:
    """A server's identity (``TransportParams.identity()``) as a record key: a hash, so
    the environment's values (which may be secrets) are never stored."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def pinned_definition(raw: Mapping[str, Any],
                      volatile_meta: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The part of a tool object that is pinned (rule 1)."""
    definition = dict(raw)
    meta = definition.get("_meta")
    if volatile_meta and isinstance(meta, Mapping):
        kept = {k: v for k, v in meta.items() if k not in volatile_meta}
        if kept:
            definition["_meta"] = kept
        else:
            del definition["_meta"]
    return definition


def digest(definition: Mapping[str, Any]) -> str:
    """SHA-256 of the definition's RFC 8785 canonical JSON. rfc8785 is pure Python (about
    half a millisecond for a 1 KiB tool), so the digest is remembered by a hash of the
    definition's sorted orjson bytes (a few microseconds): a relisted unchanged tool
    costs that only. Equal bytes are equal JSON, so the memo never changes an answer."""
    memo_key = hashlib.sha256(orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)).digest()
    return _canonical_digest(memo_key, definition)


_MEMO: dict[bytes, str] = {}
#: Digests remembered (one small entry each); past it the memo starts over.
MEMO_ENTRIES = 65536


def _canonical_digest(memo_key: bytes, definition: Mapping[str, Any]) -> str:
    known = _MEMO.get(memo_key)
    if known is None:
        if len(_MEMO) >= MEMO_ENTRIES:
            _MEMO.clear()
        known = _MEMO[memo_key] = hashlib.sha256(rfc8785.dumps(definition)).hexdigest()
    return known


@dataclass(frozen=True)
class Pin:
    digest: str
    definition: Mapping[str, Any] = field(hash=False)

    @classmethod
    def of(cls, raw: Mapping[str, Any], volatile_meta: frozenset[str] = frozenset()) -> Pin:
        definition = pinned_definition(raw, volatile_meta)
        return cls(digest(definition), definition)


@dataclass(frozen=True)
class PinRecord:
    """One server identity's pins: ``approved`` and ``pending`` by tool name (rule 4);
    ``server`` and ``describe`` (its command line or URL) for people reading it."""

    identity: str
    server: str = ""
    describe: str = ""
    approved: Mapping[str, Pin] = field(default_factory=dict, hash=False)
    pending: Mapping[str, Pin] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        def pins(of: Mapping[str, Pin]) -> dict[str, Any]:
            return {name: {"digest": p.digest, "definition": p.definition}
                    for name, p in of.items()}
        return {"format": FORMAT, "identity": self.identity, "server": self.server,
                "describe": self.describe, "approved": pins(self.approved),
                "pending": pins(self.pending)}

    @classmethod
    def from_json(cls, doc: Any) -> PinRecord:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) for anything else."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a pin record")

        def pins(of: Any) -> dict[str, Pin]:
            out = {}
            for name, p in dict(of).items():
                definition = p["definition"]
                if not isinstance(definition, dict) or digest(definition) != p["digest"]:
                    raise ValueError(f"pin of {name!r} does not match its definition")
                out[str(name)] = Pin(p["digest"], definition)
            return out
        return cls(identity=str(doc["identity"]), server=str(doc.get("server", "")),
                   describe=str(doc.get("describe", "")), approved=pins(doc["approved"]),
                   pending=pins(doc.get("pending", {})))


@dataclass(frozen=True)
class Quarantine:
    """Why one tool is kept out."""

    server: str
    tool: str
    reason: QuarantineReason
    changes: tuple[str, ...] = ()
    #: ``"renamed"``: the approved tool whose description it carries.
    renamed_from: str | None = None
    #: ``"bound"``: which bound, with the value and the limit.
    bound: str | None = None

    @property
    def detail(self) -> str:
        """Why, without saying which tool (a ``CatalogWarning`` says that)."""
        approve = "approve it with trunkline pins approve or host.approve_tool"
        if self.reason == "changed":
            return (f"quarantined: its definition changed since it was approved "
                    f"({', '.join(self.changes)}); {approve}")
        if self.reason == "renamed":
            return (f"quarantined: it carries the description of the removed tool "
                    f"{self.renamed_from!r}; {approve}")
        if self.reason == "new":
            return f"quarantined: new tools need approval on this host; {approve}"
        return f"quarantined: over a bound: {self.bound}"

    def __str__(self) -> str:
        return f"server {self.server!r}, tool {self.tool!r}: {self.detail}"


@dataclass(frozen=True)
class PinVerdict:
    admitted: tuple[ToolEntry, ...]
    quarantined: tuple[Quarantine, ...]
    #: The record to keep (trusted first sights pinned, pending definitions updated).
    record: PinRecord


def judge(record: PinRecord, tools: Iterable[ToolEntry], *, first_sight: FirstSight = "trust",
          volatile_meta: frozenset[str] = frozenset()) -> PinVerdict:
    """Rule 3 for one listing's tools (already filtered and within their bounds)."""
    tools = list(tools)
    listed = {t.local_name for t in tools}
    gone = {p.definition.get("description"): name for name, p in record.approved.items()
            if name not in listed and isinstance(p.definition.get("description"), str)
            and p.definition.get("description")}
    approved = dict(record.approved)
    pending: dict[str, Pin] = {}
    admitted, quarantined = [], []
    for tool in tools:
        name = tool.local_name
        pin = Pin.of(tool.raw, volatile_meta)
        known = approved.get(name)
        if known is not None:
            if known.digest == pin.digest:
                admitted.append(tool)
                continue
            quarantined.append(Quarantine(record.server, name, "changed",
                                          diff(known.definition, pin.definition)))
        elif tool.description and tool.description in gone:
            quarantined.append(Quarantine(record.server, name, "renamed",
                                          renamed_from=gone[tool.description]))
        elif first_sight == "trust":
            approved[name] = pin
            admitted.append(tool)
            continue
        else:
            quarantined.append(Quarantine(record.server, name, "new"))
        pending[name] = pin
    unlisted = [name for name in approved if name not in listed]
    for name in unlisted[:max(len(unlisted) - KEPT_UNLISTED, 0)]:
        del approved[name]  # rule 4: the oldest first
    return PinVerdict(tuple(admitted), tuple(quarantined),
                      replace(record, approved=approved, pending=pending))


def approve(record: PinRecord, tool: str) -> PinRecord:
    """The record with ``tool``'s pending definition approved; ``KeyError`` if none is
    pending."""
    pin = record.pending[tool]
    pending = {k: v for k, v in record.pending.items() if k != tool}
    return replace(record, approved={**record.approved, tool: pin}, pending=pending)


def diff(old: Any, new: Any, path: str = "") -> tuple[str, ...]:
    """Rule 6: the dotted paths where ``old`` and ``new`` differ."""
    changes: list[str] = []
    _diff(old, new, path, changes)
    if len(changes) > MAX_CHANGES:
        changes = [*changes[:MAX_CHANGES], f"{len(changes) - MAX_CHANGES} more"]
    return tuple(changes)


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                out.append(here)
            elif old[key] != new[key] or type(old[key]) is not type(new[key]):
                _diff(old[key], new[key], here, out)
    elif old != new or type(old) is not type(new):
        out.append(path or "(the whole definition)")
