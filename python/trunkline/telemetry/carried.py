"""A caller's W3C trace context (``traceparent``, ``tracestate``, ``baggage``), checked
before it goes upstream as it came. Pure: no OpenTelemetry.

A host that records no span of its own is no hop of the trace, so it passes the context
its caller gave on to the server unchanged, in ``params._meta`` (W3C Trace Context asks
an intermediary that does not trace to do so). Rules:

1. Only the three keys, each a string; any other key, or a value that is not a string,
   is no trace context and raises.
2. ``traceparent`` is ``version-trace_id-parent_id-flags`` in lower-case hex, neither id
   all zeros, the version not ``ff``; version ``00`` has nothing after its flags, a later
   one may (``-`` and more). A malformed one is dropped, never forwarded, and
   ``tracestate`` with it: it means nothing without its parent.
3. ``tracestate`` and ``baggage`` are printable ASCII (tabs allowed) of at most 8,192
   characters (what W3C Baggage asks every platform to carry; tracestate asks 512): a
   longer or stranger one is dropped. Baggage stands on its own (a specification of its
   own): it goes without a ``traceparent`` too.
4. Nothing left: no context (None).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

KEYS = ("traceparent", "tracestate", "baggage")
MAX_CHARS = 8192

_TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
    r"(-[\x20-\x7e]*)?")
_LIST = re.compile(r"[\t\x20-\x7e]*")


def carried(context: Mapping[str, str]) -> dict[str, str] | None:
    """What of ``context`` goes upstream (rules 2-4), or None; raises for what is no trace
    context (rule 1)."""
    if not isinstance(context, Mapping):
        raise TypeError("trace_context must be a mapping of traceparent, tracestate, baggage")
    for key, value in context.items():
        if key not in KEYS:
            raise ValueError(f"trace_context takes {', '.join(KEYS)}, not {key!r}")
        if not isinstance(value, str):
            raise TypeError(f"trace_context's {key} must be a string")
    passed: dict[str, str] = {}
    parent = context.get("traceparent")
    if parent is not None and _is_traceparent(parent):
        passed["traceparent"] = parent
        state = context.get("tracestate")
        if state is not None and _is_list(state):
            passed["tracestate"] = state
    baggage = context.get("baggage")
    if baggage is not None and _is_list(baggage):
        passed["baggage"] = baggage
    return passed or None


def picked(carrier: Mapping[str, Any]) -> dict[str, str]:
    """The three keys of a carrier (a request's ``_meta``, an HTTP request's lower-cased
    headers) whose values are strings: nothing else of it."""
    return {k: v for k in KEYS if isinstance(v := carrier.get(k), str)}


def _is_traceparent(value: str) -> bool:
    match = _TRACEPARENT.fullmatch(value)
    return match is not None and not (match.group(1) and value.startswith("00"))


def _is_list(value: str) -> bool:
    return len(value) <= MAX_CHARS and _LIST.fullmatch(value) is not None
