"""Merging listings into one catalog: deterministic order, explicit collision policy.

Order: servers in their *configured* order, each server's tools sorted by name (code
point order, so no locale can change it). The order in which servers became ready never
matters.

Collisions, never a silent overwrite (docs/architecture.md, "Tool names"):

- ``prefix``: the first server (in configured order) keeps the plain name; every later
  server offering the same name exposes it as ``<server>/<tool>``, ``<server>`` being the
  host's own configuration id (never ``serverInfo.name``, which is not unique). Plain
  names are settled first, then prefixed ones are checked against everything taken; a
  prefixed name that is already taken raises ``ToolCollision`` rather than inventing a
  third name the operator never chose.
- ``reject``: any name offered by two servers raises ``ToolCollision`` naming the tool and
  every server offering it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, get_args

from ..errors import ConfigurationError, ToolCollision
from .model import CatalogWarning, ToolEntry, ToolListing
from .names import assign_aliases

CollisionPolicy = Literal["prefix", "reject"]
COLLISION_POLICIES: tuple[str, ...] = get_args(CollisionPolicy)


class Catalog:
    """The merged, routed tool catalog. Immutable; rebuild it when a listing changes."""

    __slots__ = ("entries", "warnings", "policy", "_index")

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
        # An alias is either its own canonical name or model-safe where the canonical
        # names it could equal are not, so the two name spaces cannot shadow each other.
        self._index: Mapping[str, ToolEntry] = index

    def lookup(self, name: str) -> ToolEntry:
        """The entry whose canonical name or alias is ``name``."""
        entry = self._index.get(name)
        if entry is None:
            raise KeyError(
                f"no tool named {name!r} in the catalog "
                f"({len(self.entries)} tools; names are canonical names or model-safe aliases)"
            )
        return entry

    def server_of(self, name: str) -> str | None:
        """The server whose tool ``name`` is, or None when no tool has that name."""
        entry = self._index.get(name)
        return None if entry is None else entry.server

    def route(self, name: str) -> tuple[str, str]:
        """``(server, local_name)`` for a ``tools/call`` the model made by ``name``."""
        entry = self.lookup(name)
        return entry.server, entry.local_name

    def for_model(self) -> list[dict[str, Any]]:
        """Tool declarations for an LLM: the alias (when built with aliases) or the
        canonical name, the description, and the input schema."""
        declarations = []
        for entry in self.entries:
            declaration: dict[str, Any] = {"name": entry.model_name}
            if entry.description is not None:
                declaration["description"] = entry.description
            declaration["inputSchema"] = entry.input_schema
            declarations.append(declaration)
        return declarations

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
    ready. Configured servers without a listing are simply absent.

    Raises ``ConfigurationError`` for an unknown policy, two listings of one server, or a
    listing of a server not in ``server_order``; ``ToolCollision`` as the policy says."""
    if policy not in COLLISION_POLICIES:
        raise ConfigurationError(f"unknown collision policy {policy!r}; use 'prefix' or 'reject'")
    ordered = _in_configured_order(list(listings), server_order)
    tools = [entry for listing in ordered for entry in _by_name(listing.tools)]
    warnings = [warning for listing in ordered for warning in listing.warnings]
    if policy == "reject":
        _reject_collisions(tools)
        entries = tools
    else:
        entries = _prefix_collisions(tools, warnings)
    if model_safe_aliases:
        aliases = assign_aliases(entry.name for entry in entries)
        entries = [replace(entry, alias=aliases[entry.name]) for entry in entries]
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
    """The name each ``(server, local name)`` is exposed as under the ``prefix`` policy,
    in the same order: the first claimant of a name keeps it, every later one becomes
    ``<server>/<name>``. Plain names are settled first, so a prefixed name can never
    displace one; a prefixed name that is already taken raises ``ToolCollision``
    (``kind`` names what collided in its message: "tool", "prompt")."""
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


def _prefix_collisions(
    tools: Sequence[ToolEntry], warnings: list[CatalogWarning]
) -> list[ToolEntry]:
    names = prefixed_names([(entry.server, entry.local_name) for entry in tools])
    first_server: dict[str, str] = {}
    entries = list(tools)
    for position, (entry, name) in enumerate(zip(tools, names, strict=True)):
        first_server.setdefault(entry.local_name, entry.server)
        if name == entry.local_name:
            continue
        entries[position] = replace(entry, name=name)
        warnings.append(CatalogWarning(
            entry.server, "prefixed",
            f"exposed as {name!r} because server {first_server[entry.local_name]!r} already "
            f"offers {entry.local_name!r}",
            entry.local_name,
        ))
    return entries


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
