"""Model-safe aliases: every canonical name mapped into ``[a-zA-Z0-9_-]{1,64}``.

LLM function-calling APIs accept only that alphabet and length, while MCP tool names (and
our ``<server>/<tool>`` prefixes) may hold ``/``, ``.``, spaces, any Unicode, and run to
128 characters or more. The scheme:

1. A name that already matches keeps itself: it is what the model would see anyway.
2. Any other name is *escaped*: each character outside the alphabet becomes ``_``, the
   result is cut to leave room, and ``_`` plus the first 8 hex digits of the SHA-256 of
   the original name (UTF-8) is appended: ``github.search`` -> ``github_search_6d8eba8b``.
   The readable stem helps the model; the digest keeps names that escape to the same
   stem (``a/b``, ``a.b``, ``a b``) apart.
3. Injectivity is checked, not hoped for: an escaped alias that equals an alias already
   taken (a self-mapped name such as ``a_b_<those 8 digits>``, or a digest prefix clash)
   gets a longer digest, 4 digits at a time, up to 63. Names are processed in sorted
   order, so the mapping depends only on the set of names, never on arrival order, and a
   name's alias changes only when such a clash appears.

A pure escape (``/`` -> ``_2f``) would be injective without a digest, but it cannot
honour the 64-character limit, so the digest is needed anyway.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from ..errors import ConfigurationError

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


def escaped_alias(name: str, digest_length: int = FIRST_DIGEST_LENGTH) -> str:
    """Step 2 of the scheme, with a given digest length."""
    stem = _UNSAFE.sub("_", name)[: MAX_LENGTH - 1 - digest_length]
    return f"{stem}_{_digest(name)[:digest_length]}"


def _digest_lengths() -> Iterable[int]:
    yield from range(FIRST_DIGEST_LENGTH, _MAX_DIGEST_LENGTH, _DIGEST_STEP)
    yield _MAX_DIGEST_LENGTH


def assign_aliases(names: Iterable[str]) -> dict[str, str]:
    """An injective map from each (distinct) name to a model-safe alias."""
    ordered = sorted(set(names))
    aliases = {name: name for name in ordered if is_model_safe(name)}
    taken = set(aliases)
    for name in ordered:
        if name in aliases:
            continue
        for length in _digest_lengths():
            alias = escaped_alias(name, length)
            if alias not in taken:
                break
        else:  # needs a 252-bit SHA-256 prefix collision
            raise ConfigurationError(f"no model-safe alias could be found for tool {name!r}")
        aliases[name] = alias
        taken.add(alias)
    return aliases
