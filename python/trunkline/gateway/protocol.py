"""The gateway's side of MCP, as a server: what a downstream message is, and the answers
that do not depend on the fleet behind it. Pure: JSON objects in, JSON objects out.

Rules (MCP 2026-07-28, basic/index and server/discover; MCP 2025-11-25, basic/lifecycle):

1. A request whose ``params._meta`` names a protocol revision is a modern request, served
   statelessly whatever came before on the connection. A revision we do not serve is
   answered -32022 with the revisions we do; one without ``clientCapabilities`` in its
   ``_meta`` is -32602 (the revision requires both).
2. ``initialize`` opens a legacy session on the connection (2025-11-25 and earlier): the
   client's revision if we serve it, else our newest legacy one. Requests without a
   modern ``_meta`` are served only inside such a session.
3. ``server/discover`` and ``ping`` are answered in either era; ``initialize`` only to a
   legacy client (a modern request for it is an unknown method).
4. Serving a legacy *client* is our own server answering; it never relaxes anything
   toward the servers behind the gateway.
5. A result is served in the client's era, whatever era the server behind spoke: a
   modern client gets ``resultType``, and on the results the 2026-07-28 schema makes
   cacheable (``CACHEABLE``: ``ttlMs`` and ``cacheScope`` required) the server's own hints
   when they are hints, else the conservative ones: ``ttlMs`` 0, ``private`` (a legacy
   server gives none). A legacy client gets no ``resultType``; a modern server's caching
   hints may reach it, which 2025-11-25 allows (a result may carry more).
6. An integer beyond 64 bits anywhere in a message is refused, never rounded: -32602
   naming its place in ``params`` (``arguments.amount``), -32600 elsewhere
   (``protocol.wide_ints``). The faces ask the codec (``wide_integer_at``) of every body.
7. A ``tools/call`` result that rule 5 leaves as the server sent it is passed on as the
   bytes it came in (``passed_on_result``), not decoded and encoded again: checked
   first, as decoded (a key given twice counts as its last, as JSON parsers read it), it
   is the same document. When rule 5 only adds ``resultType``, that key is added to the
   bytes; when it changes more (``_meta`` of the protocol's, a legacy client and a
   ``resultType``), the result is encoded anew. A message to send is therefore a JSON
   object or the bytes of one (``Message``, ``encoded``).
8. A legacy client is served every tool with ``execution`` ``taskSupport``
   ``"optional"``, whatever its server's: the gateway runs any call as a task for it
   (``gateway/tasks.py`` rule 7; a call its server answers at once is held as a task
   that has ended), and answers any call whole when the client does not ask for a task
   (the host waits for the server's task), so never ``"required"``, which would have a
   client that runs no tasks refuse to call the tool at all (the TypeScript SDK 1.x
   does).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any

import msgspec
import orjson

from ..catalog import ToolEntry
from ..errors import (
    ConnectionFailure,
    InputNotSupported,
    InputRoundUnknown,
    InstanceLimitReached,
    NotPermitted,
    RequestTimeout,
    ServerError,
    ServerUnavailable,
    TrunklineError,
    UnknownTool,
)
from ..policy.identity import LOCAL, Identity
from ..protocol import wide_ints
from ..protocol.listen import LISTS, SUBSCRIPTION_ID
from ..protocol.versions import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LEGACY_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
)

PARSE_ERROR = -32700
#: ``_meta`` keys the protocol itself defines (they describe one hop, not the content).
RESERVED_META_PREFIX = "io.modelcontextprotocol/"
INVALID_REQUEST = -32600
RESOURCE_NOT_FOUND_LEGACY = -32002
#: A request the authorization policy does not let its identity make (an
#: implementation-defined code of JSON-RPC's server range: MCP defines none).
NOT_PERMITTED = -32003
#: ``data.kind`` of an overload: the request was refused for a bound that frees up, and
#: ``data.retryAfterS`` says when to come back (HTTP: 429 or 503 with ``Retry-After``).
OVERLOADED = "Overloaded"


class ClientEra(enum.Enum):
    """The era a downstream client speaks (not the era of a server behind us)."""

    MODERN = "modern"
    LEGACY = "legacy"


def request_key(request_id: Any) -> tuple[str, Any]:
    """A request id as the client sent it, fit to key a table: ``1`` and ``"1"`` are two
    ids."""
    return (type(request_id).__name__, request_id)


# The message kinds are msgspec Structs, not frozen dataclasses: one is made per request,
# and a Struct is built in C (a frozen dataclass sets each field through
# ``object.__setattr__``, ~0.5 µs apiece).


class Request(msgspec.Struct, frozen=True):
    id: Any
    method: str
    params: dict[str, Any]
    era: ClientEra
    #: The revision the request speaks: its ``_meta`` one, or the session's.
    version: str
    #: ``params._meta`` when it is an object, else empty (read once: every step asks).
    meta: dict[str, Any] = {}
    #: The W3C trace context its transport carried (the HTTP face's ``traceparent``,
    #: ``tracestate``, ``baggage`` headers) when its ``_meta`` names none; else None.
    trace_headers: dict[str, str] | None = None
    #: Who it is made for: its access token's or API key's identity, else ``LOCAL``.
    identity: Identity = LOCAL


class Notification(msgspec.Struct, frozen=True):
    method: str
    params: dict[str, Any]


class Refused(msgspec.Struct, frozen=True):
    """A message we answer with an error and nothing else (``id`` None: we could not read
    one, or it was a notification, which gets no answer)."""

    id: Any
    error: dict[str, Any]


class Response(msgspec.Struct, frozen=True):
    """The client's answer to a request the gateway sent it (an input request)."""

    id: Any
    result: dict[str, Any] | None
    error: dict[str, Any] | None


Inbound = Request | Notification | Refused | Response | None


def read(message: Any, legacy_version: str | None, identity: Identity = LOCAL) -> Inbound:
    """What a decoded downstream message is, given the connection's legacy session (its
    revision, or None) and who sent it."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return Refused(_id_of(message), error(INVALID_REQUEST, "not a JSON-RPC 2.0 message"))
    method = message.get("method")
    params = message.get("params", {})
    if not isinstance(method, str):
        if "id" in message and ("result" in message or "error" in message):
            result, err = message.get("result"), message.get("error")
            return Response(message["id"], result if isinstance(result, dict) else None,
                            err if isinstance(err, dict) else None)
        return Refused(_id_of(message), error(INVALID_REQUEST, "a request needs a method"))
    if not isinstance(params, dict):
        return Refused(_id_of(message), error(INVALID_PARAMS, "params must be an object"))
    if "id" not in message:
        return Notification(method, params)
    request_id = message["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        return Refused(None, error(INVALID_REQUEST, "a request id must be a string or an integer"))
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        meta = {}
    version = meta.get(META_PROTOCOL_VERSION)
    if version is not None:
        if version not in MODERN_VERSIONS:
            return Refused(request_id, error(
                UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                {"supported": list(MODERN_VERSIONS), "requested": str(version)}))
        if not isinstance(meta.get(META_CLIENT_CAPABILITIES), dict):
            return Refused(request_id, error(
                INVALID_PARAMS, f"a {version} request carries {META_CLIENT_CAPABILITIES} "
                "(an object) in params._meta"))
        return Request(request_id, method, params, ClientEra.MODERN, version, meta,
                       identity=identity)
    if method in ("initialize", "server/discover", "ping"):
        return Request(request_id, method, params, ClientEra.LEGACY,
                       legacy_version or LEGACY_VERSIONS[0], meta, identity=identity)
    if legacy_version is None:
        return Refused(request_id, error(
            INVALID_REQUEST, "no session: send initialize first (2025-11-25), or carry the "
            f"protocol revision in _meta ({MODERN_VERSIONS[0]})"))
    return Request(request_id, method, params, ClientEra.LEGACY, legacy_version, meta,
                   identity=identity)


def wide_integer(message: Any, body: bytes) -> Refused:
    """The refusal of the decoded ``message`` whose ``body`` holds an integer beyond 64
    bits (the codec found one): -32602 naming its place in ``params``, else -32600."""
    found = wide_ints.in_json(body)
    if found is None:  # only a body nested past the exact decoder's depth
        return Refused(_id_of(message), error(
            INVALID_REQUEST, "the message holds an integer beyond 64 bits, which would not "
            "arrive exactly; send it as a string"))
    path, digits = found
    in_params = len(path) > 1 and path[0] == "params"
    where = path[1:] if in_params else path
    return Refused(_id_of(message), error(INVALID_PARAMS if in_params else INVALID_REQUEST,
                                          wide_ints.wording(where, digits),
                                          {"path": wide_ints.described(where)}))


def _id_of(message: Any) -> Any:
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, (int, str)) and not isinstance(request_id, bool) \
        else None


# --- answers ------------------------------------------------------------------------


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


#: A message to send: a JSON object, or one encoded already (rule 7).
Message = dict[str, Any] | bytes


def encoded(message: Message) -> bytes:
    """The message as JSON bytes."""
    return message if isinstance(message, bytes) else orjson.dumps(message)


def encoded_response(request_id: Any, result: bytes) -> bytes:
    """A response carrying ``result``, already JSON, as it is."""
    return b'{"jsonrpc":"2.0","id":%b,"result":%b}' % (orjson.dumps(request_id), result)


def passed_on_result(raw: Mapping[str, Any], raw_json: bytes, era: ClientEra) -> bytes | None:
    """A ``tools/call`` result as the bytes to pass on to a client of ``era`` (rule 7):
    ``raw_json`` (what ``raw`` was decoded from), or it with ``resultType`` added; None
    when it must be encoded anew (``served_result``), or did not come as bytes."""
    if not raw_json or not raw:
        return None
    meta = raw.get("_meta")
    if type(meta) is dict and any(key.startswith(RESERVED_META_PREFIX) for key in meta):
        return None
    if era is ClientEra.MODERN:
        if "resultType" in raw:  # checked "complete" by the host before it got here
            return raw_json
        body = raw_json.rstrip()
        if not body.endswith(b"}"):
            return None
        return body[:-1] + b',"resultType":"complete"}'
    return None if "resultType" in raw else raw_json


def error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        out["data"] = data
    return out


def error_response(request_id: Any, err: dict[str, Any]) -> dict[str, Any]:
    """An error answer; without an ``id`` when the request's could not be read (MCP's
    schema has no null id)."""
    if request_id is None:
        return {"jsonrpc": "2.0", "error": err}
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


class InBandError:
    """A step of answering a request that ended in an error its client is told in band (a
    JSON-RPC error, ``error`` its object), instead of the step's value: one type for every
    such step, told from a value by ``type(x) is InBandError``."""

    __slots__ = ("error",)

    def __init__(self, err: dict[str, Any]) -> None:
        self.error = err

    def response(self, request_id: Any) -> dict[str, Any]:
        """The error answer to request ``request_id``."""
        return error_response(request_id, self.error)


def in_band(code: int, message: str, data: Any = None) -> InBandError:
    return InBandError(error(code, message, data))


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def capabilities(tools_change: bool = True,
                 extensions: Mapping[str, Any] | None = None,
                 tasks: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the gateway serves: the merged tools (announcing changes; in tool-search mode
    its two tools, which never change), the fleet's prompts and resources (announcing
    changes of both lists; with subscriptions, for the resources of servers that offer
    them) and completions, the log messages of each call, the ``extensions`` it relays
    now (``gateway/extensions.py``), when there are any, and to a legacy client its
    core ``tasks`` (``gateway/tasks.py``)."""
    served: dict[str, Any] = {"tools": {"listChanged": tools_change},
                              "prompts": {"listChanged": True},
                              "resources": {"subscribe": True, "listChanged": True},
                              "completions": {}, "logging": {}}
    if tasks is not None:
        served["tasks"] = copy.deepcopy(dict(tasks))
    if extensions:
        served["extensions"] = {key: dict(value) for key, value in extensions.items()}
    return served


#: The notification that each list the gateway serves changed.
LIST_CHANGED = {which: method for which, _, method in LISTS}


def list_changed(which: str, subscription: Any = None) -> dict[str, Any]:
    """The notification that the ``tools``, ``prompts`` or ``resources`` list changed: on
    the listen stream ``subscription`` (its request id), or, None, to a legacy session."""
    params = {} if subscription is None else {"_meta": {SUBSCRIPTION_ID: subscription}}
    return notification(LIST_CHANGED[which], params)


def discover_result(server_info: Mapping[str, Any], instructions: str | None, *,
                    tools_change: bool = True,
                    extensions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resultType": "complete",
        "supportedVersions": list(MODERN_VERSIONS),
        "capabilities": capabilities(tools_change, extensions),
        # The fleet behind us changes: nothing about it may be cached.
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {META_SERVER_INFO: dict(server_info)},
    }
    if instructions:
        result["instructions"] = instructions
    return result


def initialize_result(requested: Any, server_info: Mapping[str, Any],
                      instructions: str | None, *, tools_change: bool = True,
                      extensions: Mapping[str, Any] | None = None,
                      tasks: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The legacy handshake's answer: the client's revision when we serve it, else ours."""
    version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
    result: dict[str, Any] = {"protocolVersion": version,
                              "capabilities": capabilities(tools_change, extensions, tasks),
                              "serverInfo": dict(server_info)}
    if instructions:
        result["instructions"] = instructions
    return result


def served_tool(entry: ToolEntry, era: ClientEra = ClientEra.MODERN) -> dict[str, Any]:
    """A catalog entry as the gateway's own tool: the upstream definition, under the name
    the catalog gave it (canonical, or the model-safe alias when the host has them); to
    a legacy client, with ``taskSupport`` ``"optional"`` (rule 8)."""
    tool = {key: value for key, value in entry.raw.items() if key != "name"}
    tool["name"] = entry.model_name
    if era is ClientEra.LEGACY:
        execution = tool.get("execution")
        tool["execution"] = {**(execution if isinstance(execution, dict) else {}),
                             "taskSupport": "optional"}
    return tool


def list_result(member: str, items: list[dict[str, Any]], era: ClientEra) -> dict[str, Any]:
    """A whole list (``tools``, ``prompts``, ``resources``, ``resourceTemplates``) in one
    page."""
    if era is ClientEra.LEGACY:
        return {member: items}
    # Never a promise the servers behind did not make: no caching, private to the caller.
    return {"resultType": "complete", member: items, "ttlMs": 0, "cacheScope": "private"}


#: The results of these requests are 2026-07-28 ``CacheableResult``s: ``ttlMs`` and
#: ``cacheScope`` are required (rule 5).
CACHEABLE = frozenset({"tools/list", "prompts/list", "resources/list",
                       "resources/templates/list", "resources/read", "skills/list",
                       "skills/get"})
CACHE_SCOPES = frozenset({"private", "public"})


def served_result(raw: Mapping[str, Any], era: ClientEra, method: str) -> dict[str, Any]:
    """An upstream result (``tools/call``, ``prompts/get``, ``resources/read``, ...: the
    ``method`` it answers, since a result does not say), as our answer in the client's
    era (rule 5). The protocol's own ``_meta`` keys described the hop behind us (that
    server's info), so they stay behind; the server's other ``_meta`` keys pass
    through."""
    result = dict(raw)
    meta = result.pop("_meta", None)
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if not k.startswith(RESERVED_META_PREFIX)}
        if kept:
            result["_meta"] = kept
    if era is ClientEra.MODERN:
        # An input_required result is relayed as it is: the client answers it.
        if result.get("resultType") != "input_required":
            result["resultType"] = "complete"
            if method in CACHEABLE:
                _with_cache_hints(result)
    else:
        result.pop("resultType", None)
    return result


def _with_cache_hints(result: dict[str, Any]) -> None:
    """Keep the server's caching hints where they are hints; put the conservative ones
    (stale at once, private to the caller) where they are missing or are not."""
    ttl = result.get("ttlMs")
    if type(ttl) is not int or ttl < 0:
        result["ttlMs"] = 0
    if result.get("cacheScope") not in CACHE_SCOPES:
        result["cacheScope"] = "private"


def missing_capabilities(required: Mapping[str, Any]) -> dict[str, Any]:
    """-32021: the request needs client capabilities the client did not declare."""
    return error(MISSING_REQUIRED_CLIENT_CAPABILITY,
                 "Missing required client capability: " + ", ".join(sorted(required)),
                 {"requiredCapabilities": dict(required)})


def error_for(exc: BaseException) -> dict[str, Any]:
    """A failure behind the gateway, as the JSON-RPC error the client gets. An upstream's
    own JSON-RPC error passes through as it was; everything else names the server and
    what happened, never more (no stderr tail: it is the operator's, not the client's)."""
    if isinstance(exc, ServerError):
        return error(exc.code, exc.message, exc.data)
    if isinstance(exc, InputRoundUnknown):
        return error(INVALID_PARAMS, exc.message)
    if isinstance(exc, UnknownTool):
        # As for a tool whose server went away (``Answerer._gone``): the servers not ready
        # that could serve it, and their states.
        candidates = [{"server": c.server, "state": c.state, "listed": c.listed}
                      for c in exc.candidates]
        return error(INVALID_PARAMS, exc.message,
                     {"candidates": candidates} if candidates else None)
    if isinstance(exc, NotPermitted):
        return not_permitted(exc.message)
    if isinstance(exc, InstanceLimitReached):
        return instances_busy(exc)
    if isinstance(exc, TrunklineError):
        data: dict[str, Any] = {"server": exc.server, "kind": type(exc).__name__}
        if isinstance(exc, ServerUnavailable) and exc.state:
            data["state"] = exc.state
        if isinstance(exc, RequestTimeout) and exc.timeout_s is not None:
            data["timeoutS"] = exc.timeout_s
        if isinstance(exc, InputNotSupported):
            data["input"] = exc.kind
        where = f"server {exc.server!r}: " if exc.server else ""
        kind = "unreachable" if isinstance(exc, ConnectionFailure) else "failed"
        return error(INTERNAL_ERROR, f"{where}{kind}: {exc.message}", data)
    return error(INTERNAL_ERROR, "internal error")


def instances_busy(exc: InstanceLimitReached) -> dict[str, Any]:
    """A call that needed a per-user instance of its server while every one the bound
    allows had a call in flight: an overload (``data.kind``), of the server's own bound
    (``scope`` ``server``, ``budget`` ``maxInstances``) or the host's (``instances``,
    ``maxUserInstances``), so HTTP answers it 429 with ``Retry-After`` and a legacy
    stream's error carries ``retryAfterS``."""
    scope, budget = ("server", "maxInstances") if exc.scope == "server" else (
        "instances", "maxUserInstances")
    return error(INTERNAL_ERROR, f"server {exc.server!r}: {exc.message}",
                 {"kind": OVERLOADED, "scope": scope, "budget": budget, "limit": exc.limit,
                  "retryAfterS": exc.retry_after_s, "server": exc.server})


def not_permitted(message: str) -> dict[str, Any]:
    """The error for what the policy refuses: what was asked, never which rule refused."""
    return error(NOT_PERMITTED, message, {"kind": "NotPermitted"})


def resource_not_found(uri: str, era: ClientEra) -> dict[str, Any]:
    """2026-07-28: -32602 with the URI; 2025-11-25 and earlier: -32002."""
    code = INVALID_PARAMS if era is ClientEra.MODERN else RESOURCE_NOT_FOUND_LEGACY
    return error(code, f"Resource not found: {uri}", {"uri": uri})


def unknown_method(method: str) -> dict[str, Any]:
    return error(METHOD_NOT_FOUND, f"Method not found: {method}")
