"""What of one server's listing reaches the model. Pure.

Rules, in order, for each tool of a ``ToolListing``:

1. The server's ``ToolFilter`` (``filters`` rule 1): a tool it leaves out is *filtered*:
   never listed, never pinned, a call to it refused (``ToolFiltered``).
2. The ``ToolBounds`` (``filters`` rule 2): a tool over one is *quarantined* with a
   warning naming the server, the tool and the bound; never pinned.
3. The server's pins (``pins.judge``): admitted, or quarantined with a warning saying why
   (changed and what, renamed, new).

The result, ``Screening``, carries the listing as the catalog merges it (only admitted
tools, the warnings added), what was withheld and why (for a refused call's error), and
the pin record to keep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .filters import ToolBounds, ToolFilter, over_count
from .model import CatalogWarning, ToolListing
from .pins import FirstSight, PinRecord, Quarantine, judge


@dataclass(frozen=True)
class Screening:
    listing: ToolListing
    filtered: frozenset[str]
    quarantined: dict[str, Quarantine]
    record: PinRecord


def screen(listing: ToolListing, record: PinRecord, *, tool_filter: ToolFilter,
           bounds: ToolBounds, first_sight: FirstSight = "trust",
           volatile_meta: frozenset[str] = frozenset()) -> Screening:
    server = listing.server
    record = replace(record, server=server)
    passed = [t for t in listing.tools if tool_filter.allows(t.local_name)]
    filtered = frozenset(t.local_name for t in listing.tools) - {t.local_name for t in passed}
    held: list[Quarantine] = []
    for tool in over_count(passed, bounds):
        held.append(Quarantine(server, tool.local_name, "bound",
                               bound=f"more than {bounds.tools_per_server} tools per server"))
    within = []
    for tool in passed[:bounds.tools_per_server]:
        violation = bounds.violation(tool)
        if violation is None:
            within.append(tool)
        else:
            held.append(Quarantine(server, tool.local_name, "bound", bound=violation))
    verdict = judge(record, within, first_sight=first_sight, volatile_meta=volatile_meta)
    held.extend(verdict.quarantined)
    warnings = [CatalogWarning(server, "withheld", q.detail, tool=q.tool) for q in held]
    admitted = replace(listing, tools=verdict.admitted,
                       warnings=(*listing.warnings, *warnings))
    return Screening(admitted, filtered, {q.tool: q for q in held}, verdict.record)
