"""Shared hypothesis strategies and reference helpers for the codec tests."""

from __future__ import annotations

from hypothesis import strategies as st

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(I64_MIN, I64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=25,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
json_ids = st.integers(I64_MIN, I64_MAX) | st.text(max_size=20)


def reference_lines(data: bytes, max_line: int) -> list[bytes | int]:
    """What the splitter must produce, computed the obvious way: bytes for lines, the size
    (an int) for oversized lines."""
    parts = data.split(b"\n")
    out: list[bytes | int] = []
    for part in parts:
        if part.endswith(b"\r"):
            part = part[:-1]
        if not part:
            continue
        out.append(len(part) if len(part) > max_line else part)
    return out
