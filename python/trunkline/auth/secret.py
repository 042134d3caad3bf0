"""A string that never prints: access and refresh tokens, client secrets, PKCE verifiers.

Rules:

- ``repr`` and ``str`` of a ``Secret`` are a fixed placeholder, so a secret inside a
  dataclass, a log record, an f-string or an exception message shows as ``<secret>``.
- The value comes out only through ``reveal()``, called at the one place it is put on the
  wire (a header, a form field) or in the store's file; ``grep reveal`` finds them all.
- Two secrets compare in constant time.
"""

from __future__ import annotations

import hmac

PLACEHOLDER = "<secret>"


class Secret:
    """One secret value; printable only as a placeholder."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError("a secret must be a non-empty string")
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return PLACEHOLDER

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return PLACEHOLDER

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    # Never a dict key or set member: nothing needs it, and a hash of the value is a leak.
    __hash__ = None  # type: ignore[assignment]  # None: unhashable, as the data model says
