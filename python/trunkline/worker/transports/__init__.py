"""Transports: how JSON-RPC lines reach one server and come back, inside its worker.

stdio moves bytes and knows nothing of JSON-RPC; Streamable HTTP (``http``, imported only
when an HTTP server is configured) must read each message to choose its headers and to
map HTTP outcomes to the request they belong to. Their parameters are value types in
``trunkline.params``."""

from typing import Any

#: Where a log message or a (legacy) server's own request from a request's HTTP response
#: stream carries that request's progress token on its way through the worker, which
#: takes it out again (``channel.Notice.stream``, ``channel.ServerRequest.stream``). Here,
#: not in ``http``, so the readers need no HTTP client.
STREAM_TAG = "dev.trunkline/stream"


def untagged(params: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``params`` without the stream tag an HTTP transport put in its ``_meta`` (the
    server's own ``_meta`` stays), and the tag (None: there was none)."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or STREAM_TAG not in meta:
        return params, None
    stream = meta[STREAM_TAG]
    rest = {k: v for k, v in meta.items() if k != STREAM_TAG}
    params = {k: v for k, v in params.items() if k != "_meta"}
    if rest:
        params["_meta"] = rest
    return params, stream if isinstance(stream, str) else None
