"""Tool names: what each tool of the merged catalog is called, by models and clients alike.

LLM function-calling APIs (OpenAI's, Anthropic's) accept only ``[a-zA-Z0-9_-]{1,64}``,
while MCP tool names may hold ``.``, ``/``, spaces, any Unicode, and run to 128
characters or more; two servers may offer the same name. Every name the catalog gives is
in that alphabet, names exactly one tool, and depends only on the set of ``(server,
tool)`` pairs, never on the order of servers in the configuration:

1. A tool whose name no other server offers keeps it (under ``prefix-all``: none does).
2. A name two or more servers offer is *contested*: every one of them is called
   ``<server>_<tool>``, none keeps the bare name, so which server a name reaches never
   depends on which was configured first (``tool_names``).
3. A name outside the alphabet (``github.search``, a server id with a space, a name over
   64 characters) is *escaped*: each character outside becomes ``_``, the result is cut
   to leave room, and ``_`` plus the first 8 hex digits of the SHA-256 of the tool's key
   is appended: ``github.search`` -> ``github_search_6d8eba8b``. The key is the name
   itself for a tool that keeps its name, ``<server>/<tool>`` for a prefixed one (server
   ids hold no ``/``). The readable stem helps the model; the digest keeps names that
   escape to the same stem (``a/b``, ``a.b``, ``a b``) apart.
4. Injectivity is checked, not hoped for. Names of step 1 are settled first and never
   displaced. A prefixed name that one of them already is, or that two tools would get
   (server ``a_b``'s ``c`` and server ``a``'s ``b_c``), is escaped instead. An escaped
   name that is taken gets a longer digest, 4 digits at a time, up to 63. Names are
   settled in sorted order of their keys, so the outcome depends only on the set.

A pure escape (``/`` -> ``_2f``) would be injective without a digest, but it cannot
honour the 64-character limit, so the digest is needed anyway. ``assign_aliases`` is
steps 3 and 4 for a set of names alone.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from ..errors import ConfigurationError, ToolCollision

MODEL_SAFE = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_LENGTH = 64
FIRST_DIGEST_LENGTH = 8
_DIGEST_STEP = 4
_MAX_DIGEST_LENGTH = MAX_LENGTH - 1  # "_" + digest, with an empty stem
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def is_model_safe(name: str) -> bool:
    # fullmatch, not match with "$": "$" would also accept a trailing newline.
    return MODEL_SAFE.fullmatch(name) is not None


def _digest(name: str) -> str:
    # surrogatepass: a JSON "\ud800" escape decodes to a lone surrogate, which plain
    # UTF-8 refuses to encode; such a name is odd but must still get an alias.
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def escaped_alias(key: str, digest_length: int = FIRST_DIGEST_LENGTH) -> str:
    """Step 3 of the scheme for ``key``, with a given digest length."""
    stem = _UNSAFE.sub("_", key)[: MAX_LENGTH - 1 - digest_length]
    return f"{stem}_{_digest(key)[:digest_length]}"


def _digest_lengths() -> Iterable[int]:
    yield from range(FIRST_DIGEST_LENGTH, _MAX_DIGEST_LENGTH, _DIGEST_STEP)
    yield _MAX_DIGEST_LENGTH


def assign_aliases(names: Iterable[str]) -> dict[str, str]:
    """Steps 3 and 4 for a set of names alone: an injective map from each (distinct)
    name to itself where it is model-safe, else to its escape."""
    ordered = sorted(set(names))
    aliases = {name: name for name in ordered if is_model_safe(name)}
    taken = set(aliases)
    for name in ordered:
        if name not in aliases:
            aliases[name] = _free_escape(name, taken)
    return aliases


def tool_names(claimants: Sequence[tuple[str, str]], *, prefix_all: bool = False) -> list[str]:
    """The name of each ``(server, local name)``, in the same order (the scheme above).
    Raises ``ToolCollision`` only when a prefixed tool's key is another tool's own name
    (a tool named ``b/c`` beside server ``b``'s contested ``c``): no name can be derived
    for both without inventing one the operator never chose."""
    offered = Counter(local for _, local in claimants)
    keeps = [not prefix_all and offered[local] == 1 for _, local in claimants]
    keys = [local if kept else f"{server}/{local}"
            for (server, local), kept in zip(claimants, keeps, strict=True)]
    own = {key: position for position, key in enumerate(keys) if keeps[position]}
    names: list[str | None] = [None] * len(claimants)
    taken: set[str] = set()
    for key, position in own.items():  # step 1
        if is_model_safe(key):
            names[position] = key
            taken.add(key)
    wanted: dict[str, list[int]] = {}  # step 2
    for position, (server, local) in enumerate(claimants):
        if not keeps[position]:
            _check_key(keys[position], own, claimants, position)
            wanted.setdefault(f"{server}_{local}", []).append(position)
    for name, positions in wanted.items():
        if len(positions) == 1 and name not in taken and is_model_safe(name):
            names[positions[0]] = name
            taken.add(name)
    unnamed = sorted((p for p, name in enumerate(names) if name is None), key=keys.__getitem__)
    for position in unnamed:  # steps 3 and 4
        names[position] = _free_escape(keys[position], taken)
    return [name for name in names if name is not None]


def _check_key(key: str, own: dict[str, int], claimants: Sequence[tuple[str, str]],
               position: int) -> None:
    holder = own.get(key)
    if holder is not None:
        server, local = claimants[position]
        raise ToolCollision(
            f"tool {local!r} of server {server!r} is offered by another server too, and "
            f"its prefixed key {key!r} is already the name of tool {claimants[holder][1]!r} "
            f"of server {claimants[holder][0]!r}; refusing to invent another name (rename "
            "a server id in the configuration, or a tool)",
            name=key, claimants=[claimants[holder], claimants[position]])


def _free_escape(key: str, taken: set[str]) -> str:
    """The shortest escape of ``key`` not ``taken`` (which it joins)."""
    for length in _digest_lengths():
        name = escaped_alias(key, length)
        if name not in taken:
            taken.add(name)
            return name
    # needs a 252-bit SHA-256 prefix collision
    raise ConfigurationError(f"no model-safe alias could be found for tool {key!r}")
