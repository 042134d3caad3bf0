"""Transports: how JSON-RPC lines reach one server and come back, inside its worker.

stdio moves bytes and knows nothing of JSON-RPC; Streamable HTTP (``http``, imported only
when an HTTP server is configured) must read each message to choose its headers and to
map HTTP outcomes to the request they belong to. Their parameters are value types in
``trunkline.params``."""

#: Where a log message from a request's HTTP response stream carries that request's
#: progress token on its way to the worker's notification router, which takes it out again
#: (``channel.Notice.stream``). Here, not in ``http``, so the router needs no aiohttp.
STREAM_TAG = "dev.trunkline/stream"
