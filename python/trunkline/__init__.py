"""trunkline: a high-fanout MCP client host with fail-closed era negotiation.

Attributes are loaded on first use: ``python -m trunkline.demo.server`` (a bundled demo
server) imports this package and should not pay for asyncio and importlib.metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .host import CallToolResult, Host
    from .transports.http_params import HttpParams, http
    from .transports.stdio import StdioParams, stdio

__all__ = ["CallToolResult", "Host", "HttpParams", "StdioParams", "__version__", "http",
           "stdio"]

_LAZY = {
    "Host": ("host", "Host"),
    "CallToolResult": ("host", "CallToolResult"),
    "StdioParams": ("transports.stdio", "StdioParams"),
    "stdio": ("transports.stdio", "stdio"),
    "HttpParams": ("transports.http_params", "HttpParams"),
    "http": ("transports.http_params", "http"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trunkline")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
    else:
        raise AttributeError(f"module 'trunkline' has no attribute {name!r}")
    globals()[name] = value
    return value
