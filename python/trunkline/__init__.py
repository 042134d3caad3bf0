"""trunkline: a high-fanout MCP client host with fail-closed era negotiation.

Everything a host program touches is here (``__all__``): ``Host`` and what it takes
(``ServerConfig``, ``HostSettings``, ``RetryPolicy``, ``stdio``/``http``, ...), what it
gives back (``ToolEntry`` with ``to_openai()``/``to_anthropic()``, ``CallToolResult``,
``ToolTask``, ``ServerStatus``, ...), every exception it raises (``TrunklineError`` and
its family) and the warning its old spellings give (``TrunklineDeprecationWarning``).

Attributes are loaded on first use: ``python -m trunkline.demo.server`` (a bundled demo
server) imports this package and should not pay for asyncio and importlib.metadata.
``dir(trunkline)`` (and so ``help(trunkline)``) names them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .auth import OAuthClient
    from .catalog import CatalogWarning, CollisionPolicy, ToolEntry, ToolMatch
    from .catalog.filters import ToolBounds
    from .catalog.pins import Quarantine
    from .channel import ServerState
    from .deprecations import TrunklineDeprecationWarning
    from .errors import (
        AuthenticationFailed,
        AuthorizationFailed,
        ConfigurationError,
        ConnectionFailure,
        EraRefused,
        HttpStatusError,
        InputNotSupported,
        InputRoundUnknown,
        InstanceLimitReached,
        MalformedMessage,
        NotPermitted,
        OversizedMessage,
        ProtocolFailure,
        RedirectRefused,
        RequestTimeout,
        SchemaViolation,
        ServerError,
        ServerUnavailable,
        SkillVerificationFailed,
        SpawnFailed,
        StoreKeyMissing,
        StoreUnavailable,
        StreamBroken,
        TaskCancelled,
        TaskEnded,
        TaskLimitReached,
        TaskLost,
        ToolCandidate,
        ToolCollision,
        ToolFiltered,
        ToolHidden,
        ToolQuarantined,
        ToolWithheld,
        TransportLost,
        TrunklineError,
        UnknownTool,
        UserSecretMissing,
    )
    from .params import HttpParams, StdioParams, http, stdio
    from .parent.call_request import CallInput
    from .parent.handle import ServerWarning
    from .parent.host import Host, ServerStatus
    from .parent.host_options import (
        CallOptions,
        CatalogOptions,
        ClientOptions,
        TelemetryOptions,
        TrustOptions,
    )
    from .parent.instances import UserSecrets
    from .parent.mrtr import InputRequired
    from .parent.pin_store import PinStore
    from .parent.results import CallToolResult
    from .parent.skills import SkillFile
    from .parent.tasks import TaskStatus, ToolTask
    from .policy import Identity, Policy
    from .protocol.identity import ClientIdentity
    from .protocol.mrtr import MrtrLimits
    from .protocol.retry import RetryPolicy
    from .protocol.skills import SkillEntry, SkillResource
    from .protocol.tasks import TaskLimits
    from .records import FileRecords, MemoryRecords, RedisRecords
    from .settings import HostSettings, RestartPolicy, Root, ServerConfig

_ERRORS = (
    "AuthenticationFailed", "AuthorizationFailed", "ConfigurationError", "ConnectionFailure",
    "EraRefused", "HttpStatusError", "InputNotSupported", "InputRoundUnknown",
    "InstanceLimitReached", "MalformedMessage", "NotPermitted", "OversizedMessage",
    "ProtocolFailure", "RedirectRefused",
    "RequestTimeout", "SchemaViolation", "ServerError", "ServerUnavailable",
    "SkillVerificationFailed", "SpawnFailed", "StoreKeyMissing", "StoreUnavailable",
    "StreamBroken", "TaskCancelled", "TaskEnded", "TaskLimitReached", "TaskLost", "ToolCandidate",
    "ToolCollision", "ToolFiltered", "ToolHidden", "ToolQuarantined", "ToolWithheld",
    "TransportLost", "TrunklineError", "UnknownTool", "UserSecretMissing",
)

#: Each public name: the module it is defined in, and its name there.
_LAZY: dict[str, tuple[str, str]] = {
    # the host and what it is given
    "Host": ("parent.host", "Host"),
    "ServerConfig": ("settings", "ServerConfig"),
    "HostSettings": ("settings", "HostSettings"),
    "ClientOptions": ("parent.host_options", "ClientOptions"),
    "CatalogOptions": ("parent.host_options", "CatalogOptions"),
    "TrustOptions": ("parent.host_options", "TrustOptions"),
    "CallOptions": ("parent.host_options", "CallOptions"),
    "TelemetryOptions": ("parent.host_options", "TelemetryOptions"),
    "RestartPolicy": ("settings", "RestartPolicy"),
    "Root": ("settings", "Root"),
    "RetryPolicy": ("protocol.retry", "RetryPolicy"),
    "MrtrLimits": ("protocol.mrtr", "MrtrLimits"),
    "TaskLimits": ("protocol.tasks", "TaskLimits"),
    "ClientIdentity": ("protocol.identity", "ClientIdentity"),
    "CollisionPolicy": ("catalog.merge", "CollisionPolicy"),
    "ToolBounds": ("catalog.filters", "ToolBounds"),
    "PinStore": ("parent.pin_store", "PinStore"),
    "FileRecords": ("records", "FileRecords"),
    "MemoryRecords": ("records", "MemoryRecords"),
    "RedisRecords": ("records", "RedisRecords"),
    "OAuthClient": ("auth", "OAuthClient"),
    "Identity": ("policy", "Identity"),
    "Policy": ("policy", "Policy"),
    "UserSecrets": ("parent.instances", "UserSecrets"),
    "StdioParams": ("params", "StdioParams"),
    "stdio": ("params", "stdio"),
    "HttpParams": ("params", "HttpParams"),
    "http": ("params", "http"),
    # what it gives back
    "ToolEntry": ("catalog.model", "ToolEntry"),
    "ToolMatch": ("catalog.search", "ToolMatch"),
    "SkillEntry": ("protocol.skills", "SkillEntry"),
    "SkillResource": ("protocol.skills", "SkillResource"),
    "SkillFile": ("parent.skills", "SkillFile"),
    "CatalogWarning": ("catalog.model", "CatalogWarning"),
    "Quarantine": ("catalog.pins", "Quarantine"),
    "CallToolResult": ("parent.results", "CallToolResult"),
    "CallInput": ("parent.call_request", "CallInput"),
    "InputRequired": ("parent.mrtr", "InputRequired"),
    "ToolTask": ("parent.tasks", "ToolTask"),
    "TaskStatus": ("parent.tasks", "TaskStatus"),
    "ServerStatus": ("parent.handle", "ServerStatus"),
    "ServerWarning": ("parent.handle", "ServerWarning"),
    "ServerState": ("channel", "ServerState"),
    # what it raises
    **{name: ("errors", name) for name in _ERRORS},
    # what it warns of
    "TrunklineDeprecationWarning": ("deprecations", "TrunklineDeprecationWarning"),
}

__all__ = [
    "AuthenticationFailed", "AuthorizationFailed", "CallInput", "CallOptions", "CallToolResult",
    "CatalogOptions", "CatalogWarning", "ClientIdentity", "ClientOptions", "CollisionPolicy",
    "ConfigurationError", "ConnectionFailure", "EraRefused", "FileRecords", "Host",
    "HostSettings", "HttpParams", "HttpStatusError", "Identity", "InputNotSupported",
    "InputRequired", "InputRoundUnknown", "InstanceLimitReached", "MalformedMessage",
    "MemoryRecords", "MrtrLimits",
    "NotPermitted", "OAuthClient", "OversizedMessage", "PinStore", "Policy", "ProtocolFailure",
    "Quarantine", "RedirectRefused",
    "RedisRecords", "RequestTimeout", "RestartPolicy", "RetryPolicy", "Root", "SchemaViolation",
    "ServerConfig", "ServerError", "ServerState", "ServerStatus", "ServerUnavailable",
    "ServerWarning", "SkillEntry", "SkillFile", "SkillResource", "SkillVerificationFailed",
    "SpawnFailed", "StdioParams", "StoreKeyMissing", "StoreUnavailable", "StreamBroken",
    "TaskCancelled", "TaskEnded", "TaskLimitReached", "TaskLimits", "TaskLost", "TaskStatus",
    "TelemetryOptions", "ToolBounds", "ToolCandidate", "ToolCollision", "ToolEntry",
    "ToolFiltered", "ToolHidden", "ToolMatch", "ToolQuarantined", "ToolTask", "ToolWithheld",
    "TransportLost", "TrunklineDeprecationWarning", "TrunklineError", "TrustOptions",
    "UnknownTool", "UserSecretMissing", "UserSecrets", "__version__", "http", "stdio",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from .version import VERSION

        value: Any = VERSION
    elif name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
    else:
        raise AttributeError(f"module 'trunkline' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names too: pydoc (``help``) and completion list what ``dir`` gives.
    return sorted({*globals(), *__all__})
