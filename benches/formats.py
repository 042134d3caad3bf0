"""How the benchmark reports write numbers: calls per second and milliseconds, short and
with the precision a noisy 2-core machine supports. Shared by report.py and
bench_gateway.py."""

from __future__ import annotations


def rate(v: float) -> str:
    """Calls per second: 123,456 -> "123k", 12,345 -> "12.3k", 1,234 -> "1,234"."""
    if v >= 100_000:
        return f"{v / 1000:.0f}k"
    if v >= 10_000:
        return f"{v / 1000:.1f}k"
    return f"{v:,.0f}"


def ms(v: float) -> str:
    """Milliseconds with three significant digits (at most three decimals)."""
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"
