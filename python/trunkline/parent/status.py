"""What the host knows of one server, for operators: ``ServerStatus`` (its state, its
worker's report, its counters) and ``ServerWarning`` (what the configuration could lift).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..channel import ServerState, StateReport
from ..protocol.era import Remedy


@dataclass(frozen=True)
class ServerStatus:
    """What the host knows of one server, for operators. What the server's current worker
    reported (era, evidence, stderr tail, ...) is read from its last ``StateReport``."""

    name: str
    state: ServerState
    reason: str | None = None
    #: Workers started after the first (crash restarts and re-probes).
    restarts: int = 0
    worker_pid: int | None = None
    #: Calls sent and not yet answered.
    in_flight: int = 0
    #: Replies that came after their caller gave up (timeout, cancel), dropped; over the
    #: host's lifetime.
    late_replies: int = 0
    #: Lines that broke the protocol after the era was decided, dropped; same.
    protocol_violations: int = 0
    #: Seconds from starting the current worker to its era verdict (None: not yet).
    time_to_verdict_s: float | None = None
    #: What last went wrong: why the server last restarted or became unavailable, or a
    #: call that got no reply in time (None: nothing yet); kept after it recovered.
    last_error: str | None = None
    #: When that was (seconds since the epoch).
    last_error_at: float | None = None
    #: Why the catalog does not hold the server's tools as it lists them now: its last
    #: listing failed (the error, and when it is listed again), or its tools collide.
    #: Its tools are left out until a listing succeeds, or stay as last listed if one
    #: did before. None: its last listing succeeded (or none was made yet). A server
    #: whose first listing failed is ``ready`` with this set: its connection is up (its
    #: prompts and resources are served), only its tools are not.
    listing_error: str | None = None
    #: A per-user server's instances now (``parent.instances``: starting, serving, idle
    #: or stopping), besides the worker this status is of; None for a shared server.
    instances: int | None = None
    report: StateReport | None = field(default=None, repr=False)

    @property
    def era(self) -> str | None:
        return self.report.era if self.report else None

    @property
    def version(self) -> str | None:
        return self.report.version if self.report else None

    @property
    def capabilities(self) -> dict[str, Any] | None:
        return self.report.capabilities if self.report else None

    @property
    def extensions(self) -> tuple[str, ...]:
        """The ids of the MCP extensions the server declared (``capabilities.extensions``),
        as it listed them; empty before it is ready or when it declared none."""
        declared = (self.capabilities or {}).get("extensions")
        return tuple(declared) if isinstance(declared, dict) else ()

    @property
    def server_info(self) -> dict[str, Any] | None:
        return self.report.server_info if self.report else None

    @property
    def instructions(self) -> str | None:
        return self.report.instructions if self.report else None

    @property
    def evidence(self) -> tuple[str, ...]:
        return self.report.evidence if self.report else ()

    @property
    def stderr_tail(self) -> str | None:
        return self.report.stderr_tail if self.report else None

    @property
    def server_pid(self) -> int | None:
        return self.report.server_pid if self.report else None

    @property
    def hint(self) -> str | None:
        """What the operator can do about an unavailable server, when its configuration
        can lift the refusal: one that answered but proved no era, and is not allowlisted
        (a legacy-only server), is told how to allowlist it. None otherwise."""
        report = self.report
        if self.state is not ServerState.UNAVAILABLE or report is None \
                or report.remedy is not Remedy.ALLOW_LEGACY:
            return None
        return (f"it {report.answered}, no evidence of the modern era, and is not "
                "allowlisted for legacy: add \"allowLegacy\": true to its entry "
                "(allow_legacy=True) if you trust it")


#: Machine-readable ``ServerWarning`` kinds:
#:
#: - ``not-allowlisted``: refused for want of the legacy allowlist (``ServerStatus.hint``).
#: - ``listing-failed``: its tools could not be listed (``ServerStatus.listing_error``).
ServerWarningKind = Literal["not-allowlisted", "listing-failed"]


@dataclass(frozen=True)
class ServerWarning:
    """A configured server the operator can bring up by changing its configuration; said
    as a ``CatalogWarning`` says what it worked around (``server``, ``kind``, ``message``;
    ``tool`` always None)."""

    server: str
    kind: ServerWarningKind
    message: str
    tool: None = None

    @classmethod
    def of(cls, status: ServerStatus) -> ServerWarning | None:
        """The warning ``status`` calls for, if any (for a refusal the configuration can
        lift)."""
        if status.hint is None:
            return None
        return cls(status.name, "not-allowlisted", f"unavailable: {status.hint}")

    @classmethod
    def of_listing(cls, status: ServerStatus) -> ServerWarning | None:
        """The warning a failed listing of ``status``'s server calls for, if any."""
        if status.listing_error is None:
            return None
        return cls(status.name, "listing-failed", status.listing_error)

    def __str__(self) -> str:
        return f"server {self.server!r}: {self.message}"


__all__ = ["ServerStatus", "ServerWarning", "ServerWarningKind"]
