"""Transports: how JSON-RPC lines reach one server and come back.

stdio moves bytes and knows nothing of JSON-RPC; Streamable HTTP (``transports.http``,
imported only when an HTTP server is configured) must read each message to choose its
headers and to map HTTP outcomes to the request they belong to. The ``http()`` helper is
``trunkline.http`` (here the name ``http`` is that submodule)."""

from .http_params import HttpParams
from .stdio import StdioParams, StdioTransport, stdio

__all__ = ["HttpParams", "StdioParams", "StdioTransport", "stdio"]
