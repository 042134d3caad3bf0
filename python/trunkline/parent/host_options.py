"""What a ``Host`` is made of besides its ``HostSettings`` (which also travel to every
worker), in groups: who the host is to its servers (``ClientOptions``), how its catalog
is named and listed (``CatalogOptions``), what of a listing it trusts (``TrustOptions``),
its calls' defaults (``CallOptions``) and where its telemetry goes
(``TelemetryOptions``). Each is a frozen value; what is not given is the default.

``Host``'s keywords of before the groups (``collision=``, ``call_timeout=``, ...) still
work for one release, with a ``DeprecationWarning``: ``from_keywords`` says where each
goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..catalog import CollisionPolicy
from ..catalog.filters import ToolBounds
from ..protocol.identity import ClientIdentity
from ..protocol.mrtr import InputHandler, MrtrLimits
from ..protocol.retry import RetryPolicy

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .pin_store import PinStore


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """Who the host is to its servers, and how it answers what they ask."""

    #: ``{"name", "version", "title"}`` or a ``ClientIdentity`` (None: trunkline's).
    info: Mapping[str, str] | ClientIdentity | None = None
    #: The client capabilities declared (``sampling``, ``elicitation``, ``roots``); a
    #: server asking for anything undeclared fails the call locally.
    capabilities: Mapping[str, Any] | None = None
    #: ``{"sampling/createMessage": f, "elicitation/create": g, "roots/list": h}``, each
    #: ``async (params) -> result``: a server's ``input_required`` rounds, and a legacy
    #: server's own requests of those kinds.
    input_handlers: Mapping[str, InputHandler] | None = None
    #: ``on_log(server, params)``: every ``notifications/message`` a server sends that no
    #: call took (None: the ``trunkline.host`` logger).
    on_log: Callable[[str, dict[str, Any]], None] | None = None


@dataclass(frozen=True, kw_only=True)
class CatalogOptions:
    """How the merged catalog names the servers' tools, and how long a listing may take."""

    #: What a tool name two servers list becomes (``"prefix"``: ``server_tool`` on every
    #: server listing it, a name one server lists stays bare; ``"prefix-all"``: every
    #: tool ``server_tool``; ``"reject"``: the later server is refused). Names are the
    #: same whatever the order of the servers (``catalog.names``).
    collision: CollisionPolicy = "prefix"
    #: Deprecated, without effect: every tool name is one the LLM APIs accept now.
    model_safe_names: bool = False
    #: Seconds for one whole listing of a server's tools, every page of it.
    list_timeout_s: float = 30.0


@dataclass(frozen=True, kw_only=True)
class TrustOptions:
    """What of a server's listing reaches the catalog: its pins and bounds."""

    #: Each tool's approved definition, by server identity (None: in memory). The caller
    #: owns it.
    pins: PinStore | None = None
    #: A tool seen for the first time waits for ``approve_tool`` (instead of being
    #: trusted on first use).
    approve_first_sight: bool = False
    #: What is too big to put in front of a model is quarantined.
    tool_bounds: ToolBounds | None = None


@dataclass(frozen=True, kw_only=True)
class CallOptions:
    """The defaults of every call: its seconds, its retries, its input rounds' bounds."""

    #: Seconds a call is given when neither it nor its server says.
    call_timeout_s: float = 60.0
    #: Capped exponential backoff with full jitter (None: ``RetryPolicy()``).
    retry: RetryPolicy | None = None
    #: Bounds on a call's input rounds (None: ``MrtrLimits()``).
    mrtr_limits: MrtrLimits | None = None


@dataclass(frozen=True, kw_only=True)
class TelemetryOptions:
    """Where the host's spans and metrics go (None: OpenTelemetry's global providers,
    no-op until an application sets them)."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None


#: ``Host``'s keywords of before the groups: the group (its ``Host`` keyword) and field
#: each one is now.
OLD_KEYWORDS: dict[str, tuple[str, str]] = {
    "client_info": ("client", "info"),
    "capabilities": ("client", "capabilities"),
    "input_handlers": ("client", "input_handlers"),
    "on_log": ("client", "on_log"),
    "collision": ("catalog", "collision"),
    "model_safe_names": ("catalog", "model_safe_names"),
    "list_timeout": ("catalog", "list_timeout_s"),
    "pins": ("trust", "pins"),
    "approve_first_sight": ("trust", "approve_first_sight"),
    "tool_bounds": ("trust", "tool_bounds"),
    "call_timeout": ("calls", "call_timeout_s"),
    "retry": ("calls", "retry"),
    "mrtr_limits": ("calls", "mrtr_limits"),
    "tracer_provider": ("telemetry", "tracer_provider"),
    "meter_provider": ("telemetry", "meter_provider"),
}

_GROUPS: dict[str, type[Any]] = {
    "client": ClientOptions, "catalog": CatalogOptions, "trust": TrustOptions,
    "calls": CallOptions, "telemetry": TelemetryOptions,
}


def from_keywords(groups: dict[str, Any], keywords: Mapping[str, Any]) -> dict[str, Any]:
    """``groups`` (keyword: the group given, or None) with the old ``keywords`` put in
    their places, over what the groups say; every group made (its defaults where none was
    given). Raises ``TypeError`` for a keyword ``Host`` never took."""
    unknown = sorted(set(keywords) - set(OLD_KEYWORDS))
    if unknown:
        raise TypeError(f"Host() got an unexpected keyword argument {unknown[0]!r}")
    moved: dict[str, dict[str, Any]] = {}
    for keyword, value in keywords.items():
        group, name = OLD_KEYWORDS[keyword]
        moved.setdefault(group, {})[name] = value
    made = {}
    for group, cls in _GROUPS.items():
        given = groups.get(group)
        base = cls() if given is None else given
        made[group] = replace(base, **moved[group]) if group in moved else base
    return made


def deprecation(keywords: Mapping[str, Any]) -> str:
    """What the warning for the old ``keywords`` says: where each goes now."""
    where = ", ".join(
        f"{keyword}= -> {OLD_KEYWORDS[keyword][0]}={_GROUPS[OLD_KEYWORDS[keyword][0]].__name__}"
        f"({OLD_KEYWORDS[keyword][1]}=...)" for keyword in keywords if keyword in OLD_KEYWORDS)
    return f"Host keywords of before the option groups are deprecated: {where}"


__all__ = ["CallOptions", "CatalogOptions", "ClientOptions", "TelemetryOptions",
           "TrustOptions"]
