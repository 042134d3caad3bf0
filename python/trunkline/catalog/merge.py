"""Merging listings into one catalog: deterministic order, explicit collision policy.

Order: servers in their *configured* order, each server's tools sorted by name (code
point order, so no locale can change it). The order in which servers became ready never
matters.

Names (``catalog.names``): every tool's name matches ``[a-zA-Z0-9_-]{1,64}``, so it goes
to an LLM API as it is, and depends on which tools the servers offer, never on the order
they are configured in. Collisions, never a silent overwrite
(docs/explanation/architecture.md, "Tool names"), as the policy says:

- ``prefix`` (the default): a name one server offers stays that server's; a name two or
  more offer is *contested*, and every one of them is exposed as ``<server>_<tool>``
  (``<server>`` being the host's own configuration id, never ``serverInfo.name``, which
  is not unique), each with a ``prefixed`` warning. No server keeps a contested name, so
  none can take another's by being configured first.
- ``prefix-all``: every tool is ``<server>_<tool>``, contested or not (as fastmcp's
  multi-server client and langchain-mcp-adapters' ``tool_name_prefix`` name them).
- ``reject``: any name offered by two servers raises ``ToolCollision`` naming the tool and
  every server offering it.

Names from before (``<server>/<tool>``, the aliases of ``model_safe_aliases``, and a
contested name, which reached its first configured server) are still found by
``Catalog.lookup`` for one release, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, get_args

from ..deprecations import warn_deprecated
from ..errors import ConfigurationError, ToolCollision
from .model import CatalogWarning, ToolEntry, ToolListing
from .names import escaped_alias, is_model_safe, tool_names

CollisionPolicy = Literal["prefix", "prefix-all", "reject"]
COLLISION_POLICIES: tuple[str, ...] = get_args(CollisionPolicy)


class Catalog:
    """The merged, routed tool catalog. Immutable; rebuild it when a listing changes."""

    __slots__ = ("_index", "_other", "entries", "policy", "warnings")

    def __init__(
        self,
        entries: Sequence[ToolEntry],
        warnings: Sequence[CatalogWarning],
        policy: CollisionPolicy,
    ) -> None:
        self.entries: tuple[ToolEntry, ...] = tuple(entries)
        self.warnings: tuple[CatalogWarning, ...] = tuple(warnings)
        self.policy = policy
        index: dict[str, ToolEntry] = {}
        for entry in self.entries:
            index[entry.name] = entry
            if entry.alias is not None:
                index[entry.alias] = entry
        self._index: Mapping[str, ToolEntry] = index
        #: The names ``lookup`` finds besides the entries' own (built at the first miss).
        self._other: Mapping[str, tuple[ToolEntry, bool]] | None = None

    def lookup(self, name: str) -> ToolEntry:
        """The entry whose name is ``name``; else the one whose ``<server>_<tool>`` it is
        (every tool answers to that too, when it is no other tool's name, so a name a
        model was given still works after the servers around it came or went: a contested
        name that is no longer contested is bare again); else the one whose name it was
        before every name was model-safe (with a ``DeprecationWarning``, for one
        release)."""
        entry = self.find(name)
        if entry is None:
            raise KeyError(f"no tool named {name!r} in the catalog ({len(self.entries)} "
                           "tools)")
        return entry

    def find(self, name: str) -> ToolEntry | None:
        """``lookup``, with None when no tool has that name (no exception to make and
        catch on a path where a miss is common)."""
        entry = self._index.get(name)
        if entry is None:
            entry, deprecated = self._other_names().get(name, (None, False))
            if deprecated and entry is not None:
                warn_deprecated(self._old_name_said(name, entry))
        return entry

    def server_of(self, name: str) -> str | None:
        """The server whose tool ``name`` is (as ``lookup`` finds it, without a warning),
        or None when no tool has that name."""
        entry = self._index.get(name) or self._other_names().get(name, (None, False))[0]
        return None if entry is None else entry.server

    def route(self, name: str) -> tuple[str, str]:
        """``(server, local_name)`` for a ``tools/call`` the model made by ``name``."""
        entry = self.lookup(name)
        return entry.server, entry.local_name

    def for_model(self) -> list[dict[str, Any]]:
        """Tool declarations in MCP's shape: the name, the description, the input schema
        (``ToolEntry.to_openai`` and ``to_anthropic`` give the LLM APIs' shapes)."""
        declarations = []
        for entry in self.entries:
            declaration: dict[str, Any] = {"name": entry.model_name}
            if entry.description is not None:
                declaration["description"] = entry.description
            declaration["inputSchema"] = entry.input_schema
            declarations.append(declaration)
        return declarations

    def _other_names(self) -> Mapping[str, tuple[ToolEntry, bool]]:
        """Each name ``lookup`` finds besides the entries' own, with whether it is
        deprecated: every tool's ``<server>_<tool>`` (left out where two tools have the
        same), then the names tools had before every name was model-safe (the first
        configured server's tool kept its own name, a later one's was
        ``<server>/<tool>``; and the model-safe alias of either; none under
        ``prefix-all``, which is newer). Never another tool's name."""
        if self._other is None:
            other: dict[str, tuple[ToolEntry, bool]] = {}
            prefixed = Counter(f"{e.server}_{e.local_name}" for e in self.entries)
            for entry in self.entries:
                spelling = f"{entry.server}_{entry.local_name}"
                if prefixed[spelling] == 1 and spelling not in self._index:
                    other[spelling] = (entry, False)
            first: dict[str, ToolEntry] = {}
            for entry in self.entries if self.policy != "prefix-all" else ():
                first.setdefault(entry.local_name, entry)
                was = entry.local_name if first[entry.local_name] is entry \
                    else f"{entry.server}/{entry.local_name}"
                for spelling in (was, was if is_model_safe(was) else escaped_alias(was)):
                    if spelling not in self._index:
                        other.setdefault(spelling, (entry, True))
            self._other = other
        return self._other

    def _old_name_said(self, name: str, entry: ToolEntry) -> str:
        said = (f"tool name {name!r} is deprecated and stops working in the next release: "
                f"call {entry.name!r}")
        if name == entry.local_name and name != entry.name:
            others = [e.server for e in self.entries
                      if e.local_name == name and e is not entry]
            if others:
                said += (f" (servers {_and([entry.server, *others])} all offer {name!r}; it "
                         f"reaches {entry.server!r}, the first configured, until then)")
        return said

    def __iter__(self) -> Iterator[ToolEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __repr__(self) -> str:
        return (
            f"<Catalog {len(self.entries)} tools, policy={self.policy!r}, "
            f"{len(self.warnings)} warnings>"
        )


def build_catalog(
    listings: Iterable[ToolListing],
    *,
    policy: CollisionPolicy = "prefix",
    model_safe_aliases: bool = False,
    server_order: Sequence[str] | None = None,
) -> Catalog:
    """Merge one ``ToolListing`` per server into a ``Catalog``.

    ``listings`` are in configured order, unless ``server_order`` (the configured server
    ids) is given, in which case they may come in any order, e.g. as servers became
    ready. Configured servers without a listing are simply absent. ``model_safe_aliases``
    is deprecated: every name is model-safe.

    Raises ``ConfigurationError`` for an unknown policy, two listings of one server, or a
    listing of a server not in ``server_order``; ``ToolCollision`` as the policy says."""
    if policy not in COLLISION_POLICIES:
        raise ConfigurationError(f"unknown collision policy {policy!r}; use 'prefix', "
                                 "'prefix-all' or 'reject'")
    if model_safe_aliases:
        warn_deprecated("model_safe_aliases is deprecated: every tool name is model-safe")
    ordered = _in_configured_order(list(listings), server_order)
    tools = [entry for listing in ordered for entry in _by_name(listing.tools)]
    warnings = [warning for listing in ordered for warning in listing.warnings]
    if policy == "reject":
        _reject_collisions(tools)
    names = tool_names([(entry.server, entry.local_name) for entry in tools],
                       prefix_all=policy == "prefix-all")
    entries = [entry if entry.name == name else replace(entry, name=name)
               for entry, name in zip(tools, names, strict=True)]
    if policy == "prefix":
        warnings.extend(_prefixed_warnings(entries))
    return Catalog(entries, warnings, policy)


def _in_configured_order(
    listings: list[ToolListing], server_order: Sequence[str] | None
) -> list[ToolListing]:
    seen: set[str] = set()
    for listing in listings:
        if listing.server in seen:
            raise ConfigurationError(
                f"two tool listings for server {listing.server!r}", server=listing.server
            )
        seen.add(listing.server)
    if server_order is None:
        return listings
    position = {server: index for index, server in enumerate(server_order)}
    for listing in listings:
        if listing.server not in position:
            raise ConfigurationError(
                f"a tool listing for unconfigured server {listing.server!r}",
                server=listing.server,
            )
    return sorted(listings, key=lambda listing: position[listing.server])


def _by_name(tools: Iterable[ToolEntry]) -> list[ToolEntry]:
    # Code point order: no locale or collation setting can change the catalog.
    return sorted(tools, key=lambda entry: entry.local_name)


def _claims(tools: Sequence[ToolEntry]) -> dict[str, list[int]]:
    """Every plain name and the positions of the tools offering it, first claimant first."""
    claims: dict[str, list[int]] = {}
    for position, entry in enumerate(tools):
        claims.setdefault(entry.local_name, []).append(position)
    return claims


def _reject_collisions(tools: Sequence[ToolEntry]) -> None:
    claims = _claims(tools).values()
    collisions = [[tools[p] for p in owners] for owners in claims if len(owners) > 1]
    if not collisions:
        return
    lines = [
        f"tool {owners[0].local_name!r} is offered by servers {_and(e.server for e in owners)}"
        for owners in collisions
    ]
    raise ToolCollision(
        "tool name collision under the 'reject' policy: " + "; ".join(lines)
        + " (rename the tool on one server, or use the 'prefix' policy)",
        name=collisions[0][0].local_name,
        claimants=[(e.server, e.local_name) for e in collisions[0]],
    )


def prefixed_names(claimants: Sequence[tuple[str, str]], kind: str = "tool") -> list[str]:
    """The name each ``(server, local name)`` is exposed as under the rule the gateway
    names prompts by (they go to no LLM API as function names), in the same order: the
    first claimant of a name keeps it, every later one becomes ``<server>/<name>``.
    Plain names are settled first, so a prefixed name can never displace one; a prefixed
    name that is already taken raises ``ToolCollision`` (``kind`` names what collided in
    its message: "tool", "prompt")."""
    first: dict[str, int] = {}
    for position, (_, local) in enumerate(claimants):
        first.setdefault(local, position)
    holder: dict[str, int] = dict(first)
    names = [local for _, local in claimants]
    for position, (server, local) in enumerate(claimants):
        if first[local] == position:
            continue
        prefixed = f"{server}/{local}"
        taken = holder.get(prefixed)
        if taken is not None:
            raise _prefixed_collision(kind, claimants[position], claimants[first[local]],
                                      prefixed, claimants[taken])
        holder[prefixed] = position
        names[position] = prefixed
    return names


def _prefixed_warnings(entries: Sequence[ToolEntry]) -> list[CatalogWarning]:
    """One ``prefixed`` warning per tool whose name is contested."""
    offering: dict[str, list[str]] = {}
    for entry in entries:
        offering.setdefault(entry.local_name, []).append(entry.server)
    return [
        CatalogWarning(entry.server, "prefixed",
                       f"exposed as {entry.name!r} because servers "
                       f"{_and(offering[entry.local_name])} all offer {entry.local_name!r}",
                       entry.local_name)
        for entry in entries if len(offering[entry.local_name]) > 1
    ]


def _prefixed_collision(kind: str, loser: tuple[str, str], first: tuple[str, str],
                        prefixed: str, taken_by: tuple[str, str]) -> ToolCollision:
    return ToolCollision(
        f"{kind} {loser[1]!r} of server {loser[0]!r} collides with the same name on "
        f"server {first[0]!r}, and its prefixed name {prefixed!r} is already the name of "
        f"{kind} {taken_by[1]!r} of server {taken_by[0]!r}; refusing to invent "
        "another name (rename a server id in the configuration, or a " + kind + ")",
        name=prefixed,
        claimants=[taken_by, loser],
    )


def _and(items: Iterable[str]) -> str:
    quoted = [repr(item) for item in items]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
