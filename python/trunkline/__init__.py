"""trunkline: a high-fanout MCP client host with fail-closed era negotiation."""

from importlib.metadata import PackageNotFoundError, version as _version

from .transports import StdioParams, stdio

try:
    __version__ = _version("trunkline")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["StdioParams", "__version__", "stdio"]
