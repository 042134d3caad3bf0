"""trunkline: a high-fanout MCP client host with fail-closed era negotiation.

Attributes are loaded on first use: ``python -m trunkline.demo.server`` (a bundled demo
server) imports this package and should not pay for asyncio and importlib.metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .channel import ServerState
    from .params import HttpParams, StdioParams, http, stdio
    from .parent.host import Host, ServerStatus
    from .parent.input_rounds import CallInput, InputRequired
    from .parent.results import CallToolResult
    from .settings import HostSettings, ServerConfig

__all__ = ["CallInput", "CallToolResult", "Host", "HostSettings", "HttpParams", "InputRequired",
           "ServerConfig", "ServerState", "ServerStatus", "StdioParams", "__version__", "http",
           "stdio"]

_LAZY = {
    "Host": ("parent.host", "Host"),
    "ServerStatus": ("parent.handle", "ServerStatus"),
    "CallToolResult": ("parent.results", "CallToolResult"),
    "CallInput": ("parent.input_rounds", "CallInput"),
    "InputRequired": ("parent.input_rounds", "InputRequired"),
    "ServerState": ("channel", "ServerState"),
    "ServerConfig": ("settings", "ServerConfig"),
    "HostSettings": ("settings", "HostSettings"),
    "StdioParams": ("params", "StdioParams"),
    "stdio": ("params", "stdio"),
    "HttpParams": ("params", "HttpParams"),
    "http": ("params", "http"),
}


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
