"""Integers beyond 64 bits: where one is in a message, and the error that names it.

JSON sets no bound on integers, but the decoders and encoders on trunkline's path keep
them in 64 bits: orjson reads an integer outside ``[-2**63, 2**64)`` as the nearest
float, without a word, and refuses to write one. Such an integer is never rounded on its
way through: a downstream request that holds one is refused (``-32602`` when it is in
``params``), and a Host API caller's arguments that hold one raise where the call is
awaited. Either error names the integer by its place (``arguments.amount``) and its
length, and asks for it as a string. (Passing it on exactly would need the request's own
bytes carried past every decode; most servers could not read it exactly anyway.)

Pure: finding the integer and wording the error. The gateway learns that a body holds one
from the codec (``_codec.wide_integer_at``: one pass of 64-byte compares over a body
without 19 digits in a row); only then is the body decoded again, exactly, here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

#: The range a 64-bit decoder keeps exactly (the signed and the unsigned one together).
LOWEST, HIGHEST = -(1 << 63), (1 << 64) - 1

Path = tuple[str | int, ...]


class _Digits:
    """An integer of a body decoded here, kept as its digits: Python converts at most 4,300
    digits to an ``int``, and only the place and the length are needed."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def wide(self) -> bool:
        return len(self.text) >= 19 and not LOWEST <= int(self.text[:21]) <= HIGHEST


def in_json(body: bytes) -> tuple[Path, int] | None:
    """The place of the first integer beyond 64 bits in the JSON document ``body`` and
    its number of digits, or None (none, or a body this decoder cannot read)."""
    try:
        value = json.loads(body, parse_int=_Digits)
    except (ValueError, RecursionError):
        return None
    found = _first(value, lambda v: type(v) is _Digits and v.wide())
    if found is None:
        return None
    path, digits = found
    return path, len(digits.text.lstrip("-"))


def in_value(value: Any) -> tuple[Path, int] | None:
    """The place of the first ``int`` beyond 64 bits in a value made of dicts, lists and
    tuples, and its number of digits, or None."""
    found = _first(value, lambda v: type(v) is int and not LOWEST <= v <= HIGHEST)
    if found is None:
        return None
    path, number = found
    return path, _digit_count(number)


def described(path: Path) -> str:
    """A place as a reader writes it: ``arguments.items[2].amount``; a key that would read
    ambiguously in that form is quoted (``arguments["a.b"]``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and part.isprintable() and not any(c in '.[]"' or c.isspace() for c in part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out or "the message"


def wording(path: Path, digits: int) -> str:
    """The error's words for an integer of ``digits`` digits at ``path``."""
    return (f"{described(path)}: an integer beyond 64 bits ({digits} digits), which would "
            "not arrive exactly; send it as a string")


def _first(value: Any, matches: Callable[[Any], bool]) -> tuple[Path, Any] | None:
    """The first value, in document order, that ``matches``, with its place. Iterative:
    a value nested as deep as a decoder allows never meets the recursion limit."""
    stack: list[tuple[Path, Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if matches(item):
            return path, item
        if isinstance(item, dict):
            stack.extend(((*path, key), inner) for key, inner in reversed(item.items()))
        elif isinstance(item, (list, tuple)):
            stack.extend(((*path, i), inner) for i, inner in reversed(list(enumerate(item))))
    return None


def _digit_count(number: int) -> int:
    """How many decimal digits ``abs(number)`` has, without converting it to text (which
    Python refuses past 4,300 digits)."""
    magnitude = abs(number)
    estimate = max(1, int(magnitude.bit_length() * 0.30102999566398120))
    while magnitude >= 10 ** estimate:
        estimate += 1
    while estimate > 1 and magnitude < 10 ** (estimate - 1):
        estimate -= 1
    return estimate
