"""Transports: how bytes reach one server. They know nothing of JSON-RPC."""

from .stdio import StdioParams, StdioTransport, stdio

__all__ = ["StdioParams", "StdioTransport", "stdio"]
