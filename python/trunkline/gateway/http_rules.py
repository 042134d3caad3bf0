"""The HTTP rules of the gateway's Streamable HTTP face, pure: headers checked against the
body, statuses for errors, who may call, and legacy session ids any replica can verify.

- A modern request (MCP 2026-07-28, basic/transports/streamable-http) must carry
  ``MCP-Protocol-Version`` equal to its ``_meta`` revision, ``Mcp-Method`` equal to its
  method, ``Mcp-Name`` for ``tools/call`` (equal to the tool's name; for the tasks
  extension's ``tasks/get``, ``tasks/update`` and ``tasks/cancel``, to ``taskId``), and
  one ``Mcp-Param-*`` for each ``x-mcp-header`` argument present in the body: a
  mismatch, or a missing header, is 400 with -32020 naming the header.
- A legacy session id (2025-11-25) is ``process.payload.signature``: ``process`` is the
  instance name of the gateway process that opened it (the replica's name, and the copy's
  index under ``--processes``: ``r1_2``), in the clear so that a load balancer can route
  on it; the payload carries that process's boot (random per start), the negotiated
  revision, when it was issued, when it expires (``session_lifetime_s`` after) and how
  long it may be idle (``session_idle_s``), the input capabilities the client declared,
  and, when the client presented an access token, its owner (a digest of the token's
  issuer and subject: the session answers no one else, against session hijacking); the
  signature, over process and payload, is HMAC-SHA256 under a key the replicas share. Any
  replica verifies it; only the process that opened it holds its state
  (``LegacySession.held``), and tells whether it still lives (``legacy_sessions``: ended
  by its client's DELETE, idle, or past its expiry).
- ``Host`` is checked against the names the gateway is reachable by, ``Origin`` against
  the origins it serves as (those names on its port, by scheme, host and port): DNS
  rebinding, and pages of other programs on the same host; API keys are compared in
  constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..protocol import headers as mcp_headers
from ..protocol.versions import (
    HEADER_MISMATCH,
    LEGACY_VERSIONS,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
)
from . import protocol as p
from .admission import OVERLOADED
from .limits import Limits

#: Methods whose ``Mcp-Name`` comes from a params member (the tasks extension's name the
#: task, so that a balancer can route them to the process that holds it).
_NAME_SOURCE = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
                "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def status_for(err: Mapping[str, Any]) -> int:
    """The HTTP status an error answer goes with."""
    data = err.get("data")
    if isinstance(data, Mapping) and data.get("kind") == OVERLOADED:
        # The whole gateway's (its calls, its sessions) is 503; a client's, a server's 429.
        return 503 if data.get("scope") in ("gateway", "sessions") else 429
    code = err.get("code")
    if code == p.METHOD_NOT_FOUND:
        return 404
    if code in (p.PARSE_ERROR, p.INVALID_REQUEST, HEADER_MISMATCH,
                p.UNSUPPORTED_PROTOCOL_VERSION, -32021):
        return 400
    return 200


def _mismatch(header: str, expected: str | None, received: str | None) -> dict[str, Any]:
    return p.error(HEADER_MISMATCH, f"Header mismatch: {header} is {received!r}, the body "
                   f"says {expected!r}",
                   {"header": header, "expected": expected, "received": received})


def check_modern_headers(headers: Mapping[str, str], request: p.Request,
                         header_params: tuple[mcp_headers.HeaderParam, ...] = ()
                         ) -> dict[str, Any] | None:
    """None if the headers agree with the body, else the -32020 error. ``headers`` is keyed
    by lower-case name (``exchange.Exchange.headers``); names are written here as the
    specification spells them, for the errors."""
    def get(name: str) -> str | None:
        return headers.get(name.lower())

    version = request.meta.get(META_PROTOCOL_VERSION)
    received = headers.get("mcp-protocol-version")
    if received != version:
        return _mismatch("MCP-Protocol-Version", version, received)
    received = headers.get("mcp-method")
    if received != request.method:
        return _mismatch("Mcp-Method", request.method, received)
    source = _NAME_SOURCE.get(request.method)
    if source is not None:
        expected = request.params.get(source)
        received = headers.get("mcp-name")
        if not _decoded_equals(received, expected):
            return _mismatch("Mcp-Name", expected if isinstance(expected, str) else None,
                             received)
    if request.method == "tools/call" and header_params:
        arguments = request.params.get("arguments")
        try:
            wanted = mcp_headers.param_headers(header_params,
                                               arguments if isinstance(arguments, dict) else None)
        except mcp_headers.HeaderValueError as exc:
            return p.error(p.INVALID_PARAMS, str(exc))
        for name, value in wanted:
            if not _decoded_equals(get(name), mcp_headers.decode_header_value(value)):
                return _mismatch(name, mcp_headers.decode_header_value(value), get(name))
    return None


def check_version_header(header: str | None, message: Any) -> dict[str, Any] | None:
    """The error answer (a whole message) for a body whose revision disagrees with its
    ``MCP-Protocol-Version`` header, before anything else is read: a modern header over a
    body without the revision in ``_meta`` is -32602 (the revision requires it); a body
    naming another revision than its header is -32020. None when they agree, or when the
    header names a legacy revision (the session's rules apply)."""
    if header is None or header not in MODERN_VERSIONS or not isinstance(message, dict) \
            or "method" not in message or "id" not in message:
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    request_id = message.get("id")
    if version is None:
        return p.error_response(request_id, p.error(
            p.INVALID_PARAMS, f"MCP-Protocol-Version is {header}, whose requests carry "
            f"{META_PROTOCOL_VERSION} in params._meta; this one does not"))
    if version != header:
        return p.error_response(request_id, _mismatch("MCP-Protocol-Version", version, header))
    return None


def _decoded_equals(raw: str | None, expected: Any) -> bool:
    if raw is None or not isinstance(expected, str):
        return False
    try:
        return mcp_headers.decode_header_value(raw) == expected
    except mcp_headers.HeaderValueError:
        return False


# --- who may call ---------------------------------------------------------------------


Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> Origin | None:
    """The origin (RFC 6454) of an ``http`` or ``https`` URL: its scheme, lower-case host
    and port (the scheme's own when it names none); None for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if parts.hostname is None or scheme not in _DEFAULT_PORTS:
        return None
    return scheme, parts.hostname.lower(), _DEFAULT_PORTS[scheme] if port is None else port


def served_origins(hosts: Iterable[str], port: int, urls: Iterable[str] = ()) -> frozenset[Origin]:
    """The origins a page of the gateway's own has: each of ``hosts`` (lower-case bare
    host names) over plain HTTP on the ``port`` it listens on, and the origin of each of
    ``urls`` (the URLs clients reach it by, through a proxy perhaps)."""
    found = {("http", host, port) for host in hosts}
    found.update(o for o in map(origin_of, urls) if o is not None)
    return frozenset(found)


def origin_allowed(origin: str | None, allowed: Collection[Origin]) -> bool:
    """A browser's ``Origin`` must be one of the gateway's own, by scheme, host and port
    (``served_origins``): a page of another program on the same host is not (no header:
    not a browser, nothing to check)."""
    if origin is None:
        return True
    found = origin_of(origin)
    return found is not None and found in allowed


def host_allowed(host_header: str | None, allowed_hosts: Iterable[str]) -> bool:
    """The ``Host`` a request was sent to must be one of ours: a DNS name an attacker
    pointed at 127.0.0.1 is not."""
    if host_header is None:
        return False
    try:
        host = urlsplit(f"//{host_header}").hostname
    except ValueError:
        return False
    return host is not None and host.lower() in set(allowed_hosts)


def loopback_names() -> frozenset[str]:
    return _LOOPBACK_NAMES


# --- legacy session ids -------------------------------------------------------------------


@dataclass(frozen=True)
class LegacySession:
    version: str
    issued: float
    #: The client capabilities the gateway acts on (those input requests need).
    capabilities: dict[str, Any]
    #: ``session_owner`` of the identity that opened it; None: opened without a token.
    owner: str | None = None
    #: The gateway process that opened it: its instance name and its boot.
    instance: str = ""
    boot: str = ""
    #: Whether the process that verified the id is that one: it alone holds the session's
    #: state (its streams, subscriptions, log level, questions waiting for answers).
    held: bool = False
    #: When it ends (seconds since the epoch), and after how long unused.
    expires: float = 0.0
    idle_s: float = 0.0


def session_owner(issuer: str, subject: str) -> str:
    """What a session id carries of who opened it: a digest, so that a subject (often an
    e-mail address) is not written into every request's headers."""
    return _b64(hashlib.sha256(f"{issuer}\0{subject}".encode()).digest()[:16])


#: The declared client capabilities a session id carries: what the gateway may ask the
#: client for on a server's behalf. The rest is not the gateway's business, and would
#: only grow a header every request repeats.
_CARRIED_CAPABILITIES = ("elicitation", "sampling", "roots")


def valid_instance(name: str) -> bool:
    """An instance name: letters, digits, ``-`` and ``_`` (it leads a session id, which a
    load balancer matches as text)."""
    return bool(name) and name.isascii() and name.replace("-", "").replace("_", "").isalnum()


class SessionSigner:
    """Mints and verifies legacy session ids for the gateway process ``instance`` (started
    as ``boot``); replicas sharing ``key`` verify each other's."""

    def __init__(self, key: bytes, instance: str = "trunkline", boot: str | None = None
                 ) -> None:
        if len(key) < 16:
            raise ValueError("a session key needs at least 16 bytes")
        if not valid_instance(instance):
            raise ValueError(f"an instance name is letters, digits, '-' and '_', not "
                             f"{instance!r}")
        self._key = key
        self.instance = instance
        self.boot = boot or secrets.token_urlsafe(6)

    def mint(self, version: str, capabilities: Mapping[str, Any] | None = None,
             now: float | None = None, owner: str | None = None,
             lifetime_s: float = Limits.session_lifetime_s,
             idle_s: float = Limits.session_idle_s) -> str:
        carried = {k: v for k, v in (capabilities or {}).items()
                   if k in _CARRIED_CAPABILITIES and isinstance(v, dict)}
        issued = now or time.time()
        # The nonce: two sessions opened in the same millisecond with the same capabilities
        # are still two sessions (their ids are whose answers and streams are whose).
        fields = {"v": version, "t": round(issued, 3), "e": round(issued + lifetime_s, 3),
                  "i": idle_s, "c": carried, "n": secrets.token_urlsafe(12), "b": self.boot}
        if owner is not None:
            fields["o"] = owner
        signed = f"{self.instance}.{_b64(orjson.dumps(fields))}"
        return f"{signed}.{self._sign(signed)}"

    def verify(self, session_id: str | None) -> LegacySession | None:
        """The session an id stands for, or None for one this key never signed."""
        if not session_id or session_id.count(".") != 2:
            return None
        signed, signature = session_id.rsplit(".", 1)
        if not hmac.compare_digest(signature, self._sign(signed)):
            return None
        instance, payload = signed.split(".")
        try:
            data = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (ValueError, orjson.JSONDecodeError):
            return None
        version = data.get("v") if isinstance(data, dict) else None
        if version not in LEGACY_VERSIONS or not all(
                isinstance(data.get(k), (int, float)) for k in ("t", "e", "i")):
            return None
        capabilities = data.get("c")
        owner = data.get("o")
        boot = data.get("b") if isinstance(data.get("b"), str) else ""
        return LegacySession(version, float(data["t"]),
                             capabilities if isinstance(capabilities, dict) else {},
                             owner if isinstance(owner, str) else None, instance, boot,
                             held=instance == self.instance and boot == self.boot,
                             expires=float(data["e"]), idle_s=float(data["i"]))

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def cookie(header: str | None, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header; None when it is absent,
    empty, or the header does not parse."""
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None and morsel.value else None
