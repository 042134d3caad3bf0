"""The one error tree of trunkline.

Three families a host can tell apart with ``except``:

- ``ConnectionFailure``: the server could not be reached (spawn failed, transport lost,
  server unavailable, an HTTP status without an answer, authentication refused). Safe
  reads may be retried; side effects are unknown.
- ``ProtocolFailure``: the server (or its absence) violated the protocol: malformed
  message, schema violation, era refused, timeout.
- ``ServerError``: the server answered with a JSON-RPC error (business error). A tool
  result with ``isError: true`` is *returned*, never raised.

``ConfigurationError`` sits beside them: the host's own configuration is wrong.

Every error names the server and, where one is involved, the method; transport failures
carry the tail of the server's stderr, because that is where a crashing server says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol.era import Remedy


class TrunklineError(Exception):
    """Base of every error trunkline raises.

    ``sent`` says whether the request reached the wire before it failed: ``False`` when it
    never left the host (its server was restarting, no in-flight slot was free), so even a
    call that is not idempotent may be sent again; ``None`` when nobody knows.

    ``request_id`` is the JSON-RPC id the request went out with, when it went out and the
    part that failed it knew the id (the worker, which chose it); else None."""

    request_id: int | str | None = None

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        method: str | None = None,
        stderr_tail: str | None = None,
        sent: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.server = server
        self.method = method
        self.stderr_tail = stderr_tail
        self.sent = sent

    def __str__(self) -> str:
        where = []
        if self.server is not None:
            where.append(f"server {self.server!r}")
        if self.method is not None:
            where.append(f"method {self.method!r}")
        text = f"{self.message} ({', '.join(where)})" if where else self.message
        if self.stderr_tail:
            text += f"\n--- stderr tail ---\n{self.stderr_tail}"
        return text


class ConfigurationError(TrunklineError):
    """The host's configuration is invalid (bad server entry, tool-name collision under
    the ``reject`` policy, ...)."""


class StoreKeyMissing(ConfigurationError):
    """A store is asked to keep per-user credentials without the key that seals them
    (``TRUNKLINE_STORE_KEY``)."""


class ToolCollision(ConfigurationError):
    """Two tools cannot both have the name ``name``.

    ``claimants`` are the ``(server, local_name)`` pairs that wanted it, in catalog
    order."""

    def __init__(self, message: str, *, name: str, claimants: Sequence[tuple[str, str]]) -> None:
        super().__init__(message)
        self.name = name
        self.claimants = tuple(claimants)


@dataclass(frozen=True)
class ToolCandidate:
    """A configured server that is not ready and could own a tool name no ready server
    serves. ``listed``: it listed a tool by that name when it was last ready (it owns
    it); False: it was never listed, so it only may. ``reason``: why it is not ready;
    ``hint``: what the operator can do about it (``ServerStatus.hint``), if anything."""

    server: str
    state: str
    reason: str | None = None
    hint: str | None = None
    listed: bool = False

    def __str__(self) -> str:
        why = self.hint or self.reason
        if self.listed:
            return (f"server {self.server!r} listed it but is {self.state}"
                    + (f": {why}" if why else ""))
        return (f"server {self.server!r} is {self.state}" + (f" ({why})" if why else "")
                + " and may provide it")


class UnknownTool(TrunklineError, KeyError):
    """No tool by that name in the merged catalog. ``candidates``: the configured servers
    that are not ready and could own it (``ToolCandidate``), in configured order; the
    message names them too."""

    def __init__(self, message: str, *, candidates: Sequence[ToolCandidate] = (),
                 **kw: Any) -> None:
        super().__init__(message, **kw)
        self.candidates = tuple(candidates)

    def __str__(self) -> str:
        return TrunklineError.__str__(self)


class StoreUnavailable(TrunklineError):
    """A shared store (Redis: pins, or tokens outside an OAuth flow) could not read or
    write a record. The message names the store by scheme, host, port and database and the
    kind of failure only."""


class NotPermitted(TrunklineError):
    """The authorization policy does not let the caller's identity do this (``tool``:
    the name it was asked by). ``rule`` is the id of the rule that refused (None: no rule
    allowed it): the operator's to know, never in the message a client is shown."""

    def __init__(self, message: str, *, tool: str, rule: str | None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.tool = tool
        self.rule = rule


class ToolHidden(UnknownTool):
    """The tool is there, but the caller's identity may not see it: to the caller it is
    an unknown tool, with exactly the message one gets (``rule``: as ``NotPermitted``'s)."""

    def __init__(self, message: str, *, rule: str | None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.rule = rule


class ToolWithheld(UnknownTool):
    """The tool exists on its server but is kept from the model and from calls (a subclass
    of ``UnknownTool``: to a caller it is not in the catalog). ``tool`` is the server's own
    name for it."""

    def __init__(self, message: str, *, server: str, tool: str) -> None:
        super().__init__(message, server=server, method="tools/call")
        self.tool = tool


class ToolFiltered(ToolWithheld):
    """The server's ``enabledTools`` / ``disabledTools`` leave this tool out."""


class ToolQuarantined(ToolWithheld):
    """The tool's definition is not approved: it changed since it was pinned (``changes``
    says what: ``"description"``, ``"inputSchema.properties.x"``, ...), it is new and the
    host approves first sights itself, it reappeared under a new name, or it is over a
    bound (``bound``). It stays out until ``host.approve_tool(server, tool)`` or
    ``trunkline pins approve``; a tool over a bound stays out until it is within it."""

    def __init__(self, message: str, *, server: str, tool: str, reason: str,
                 changes: Sequence[str] = (), bound: str | None = None) -> None:
        super().__init__(message, server=server, tool=tool)
        self.reason = reason
        self.changes = tuple(changes)
        self.bound = bound


# --- connection family ---------------------------------------------------------------


class ConnectionFailure(TrunklineError):
    """The server could not be reached."""


class SpawnFailed(ConnectionFailure):
    """The server process could not be started (missing executable, bad cwd, ...)."""


class TransportLost(ConnectionFailure):
    """The transport died with the request in flight (process exit, EOF, broken pipe)."""

    def __init__(self, message: str, *, exit_code: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.exit_code = exit_code


class ServerUnavailable(ConnectionFailure):
    """The server is not ready (negotiating, restarting, refused, stopped)."""

    def __init__(self, message: str, *, state: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.state = state


class StreamBroken(TransportLost):
    """The HTTP exchange carrying this one request failed before its response arrived
    (connection refused or reset, the response stream ended early). Other requests to the
    server are unaffected; the retry policy decides whether it is sent again (with a new
    id)."""


class HttpStatusError(ConnectionFailure):
    """The server (or a proxy in front of it) answered an HTTP request with a status that
    carries no JSON-RPC answer (a 5xx, an unexpected 4xx). ``body`` is a short excerpt."""

    def __init__(self, message: str, *, status: int, body: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.body = body


class RedirectRefused(HttpStatusError):
    """The server answered with a redirect that was not followed: to another origin
    (scheme, host or port; configured headers and requests go to the configured origin
    only), from https to http, a method-changing redirect (301/302/303: MCP requests are
    POSTs), or one hop too many. ``location`` is where it pointed."""

    def __init__(self, message: str, *, status: int, location: str | None = None,
                 **kw: Any) -> None:
        super().__init__(message, status=status, **kw)
        self.location = location


class AuthenticationFailed(ConnectionFailure):
    """HTTP 401 or 403: the server wants credentials this host did not present (or
    rejected them). Never evidence about the server's protocol era. ``challenge`` is the
    ``WWW-Authenticate`` header, if the server sent one."""

    def __init__(self, message: str, *, status: int, challenge: str | None = None,
                 **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.challenge = challenge


class AuthorizationFailed(AuthenticationFailed):
    """The OAuth flow for a server produced no token this host may use (``trunkline.auth``).

    The message names what was refused and why, for the operator: which metadata document
    was refused (a protected resource metadata ``resource`` for another server, an
    authorization server ``issuer`` other than the one asked, no PKCE ``S256``), a redirect
    that failed its checks (``state``, RFC 9207 ``iss``), a token endpoint's refusal, no way
    to identify this client (and what to configure), or the step-up limit. ``reason`` is a
    short stable word for programs (``"resource_mismatch"``, ``"issuer_mismatch"``, ...);
    ``issuer`` the authorization server involved, if one was. No secret ever appears in it:
    no token, client secret, code or code verifier."""

    def __init__(self, message: str, *, reason: str, status: int = 401,
                 issuer: str | None = None, **kw: Any) -> None:
        super().__init__(message, status=status, **kw)
        self.reason = reason
        self.issuer = issuer


class UserCredentialsMissing(AuthorizationFailed):
    """A call made for an identity to a server reached with each user's own credentials
    (``ServerConfig.credentials`` ``"per_user"`` or ``"exchange"``), on a host that has no
    credential sources for users (``Host(user_credentials=...)``). Nothing was sent."""

    def __init__(self, message: str, **kw: Any) -> None:
        kw.setdefault("reason", "no_user_credentials")
        super().__init__(message, **kw)


# --- protocol family -----------------------------------------------------------------


class ProtocolFailure(TrunklineError):
    """The peer's traffic violated the protocol, or a protocol deadline passed."""


class MalformedMessage(ProtocolFailure):
    """A line from the server was not a valid JSON-RPC message, or a result had the wrong
    shape for its method."""


class OversizedMessage(MalformedMessage):
    """The server's answer to this request was longer than the host accepts
    (``max_line_bytes``); it was skipped without being buffered. The server did answer,
    so only a request that is safe to repeat is sent again."""

    def __init__(self, message: str, *, size: int, limit: int, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.size = size
        self.limit = limit


class SchemaViolation(ProtocolFailure):
    """A result did not match the schema the server itself declared (``outputSchema``)."""


class RequestTimeout(ProtocolFailure):
    """No answer arrived within the request's deadline (counted from the write)."""

    def __init__(self, message: str, *, timeout_s: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.timeout_s = timeout_s


class InputNotSupported(ProtocolFailure):
    """The server asked for input of a kind the host did not declare in the request's
    ``clientCapabilities`` (or that no capability covers). The call fails locally; nothing
    is retried. ``key`` is the ``inputRequests`` key, ``kind`` what was asked for
    (``"elicitation/create (url mode)"``, ``"sampling/createMessage with tools"``, ...)."""

    def __init__(self, message: str, *, key: str, kind: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.key = key
        self.kind = kind


class SkillVerificationFailed(ProtocolFailure):
    """A file of a skill (MCP's skills extension) is not what the skill's entry described,
    so it is not used: ``kind`` says how (``size``, ``digest``, ``frontmatter``: its
    ``SKILL.md``'s frontmatter differs from the entry's; ``unlisted``: the entry lists no
    such file, so it was not read; ``dynamic``: the skill publishes no digests and the
    caller did not accept that; ``unreadable``: the read held no content for it).
    ``uri`` is the file's. The content may be stale (the skill changed since its entry was
    listed): ``Host.get_skill`` gives the current entry."""

    def __init__(self, message: str, *, kind: str, uri: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.kind = kind
        self.uri = uri


class InputRoundUnknown(TrunklineError):
    """A call's ``requestState`` names an input round this host does not hold: one that
    ended (timed out, answered already), one of another request, or one another host
    holds (``held_elsewhere``: a sibling gateway process or replica asked it)."""

    def __init__(self, message: str, *, held_elsewhere: bool = False, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.held_elsewhere = held_elsewhere


class EraRefused(ProtocolFailure):
    """Era negotiation failed closed: the peer gave no positive evidence of an era we may
    speak with it. ``evidence`` lists what was observed, in order.

    ``retry_later``: nothing was heard in time, which is no evidence against the server;
    a fresh connection may succeed. ``renegotiate``: the connection was abandoned because
    it holds two sessions; a fresh one is due at once. ``proven_modern``: the server proved
    the modern era, so no later connection sends it ``initialize``. ``remedy``
    (``protocol.era.Remedy``): what the operator can do about it (``ALLOW_LEGACY``: the
    server answered but proved no era, and it is not allowlisted), with ``answered``, that
    answer in short."""

    def __init__(self, message: str, *, evidence: Sequence[str] = (), retry_later: bool = False,
                 renegotiate: bool = False, proven_modern: bool = False,
                 remedy: Remedy | None = None, answered: str | None = None,
                 **kw: Any) -> None:
        super().__init__(message, **kw)
        self.evidence = tuple(evidence)
        self.retry_later = retry_later
        self.renegotiate = renegotiate
        self.proven_modern = proven_modern
        self.remedy = remedy
        self.answered = answered

    def __str__(self) -> str:
        text = super().__str__()
        if self.evidence:
            text += "\nevidence:\n" + "\n".join(f"  - {e}" for e in self.evidence)
        return text


# --- business family -----------------------------------------------------------------


class TaskEnded(TrunklineError):
    """A task the host followed ended without a result: cancelled on its server
    (``TaskCancelled``), or no longer known to it (``TaskLost``). ``task_id`` names it."""

    def __init__(self, message: str, *, task_id: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.task_id = task_id


class TaskCancelled(TaskEnded):
    """The server says the task was cancelled."""


class TaskLost(TaskEnded):
    """The server no longer knows the task: it forgot it (a restart, its TTL passed), or
    stopped answering about it."""


class TaskLimitReached(TrunklineError):
    """The server answered with a task while the host already follows as many of its
    tasks as it may (``ServerConfig.max_tasks``); the new task was cancelled upstream."""


class InstanceLimitReached(TrunklineError):
    """A per-user instance of the server was needed (its caller has none running) while
    as many as the bound allows are running, every one of them with a call in flight:
    the call is refused at once, never queued, and may be made again after
    ``retry_after_s`` seconds. ``scope`` names the bound met: ``"server"`` (its
    ``max_instances``) or ``"host"`` (``max_user_instances``); ``limit`` is its value."""

    def __init__(self, message: str, *, scope: str, limit: int, retry_after_s: int,
                 **kw: Any) -> None:
        super().__init__(message, sent=False, **kw)
        self.scope = scope
        self.limit = limit
        self.retry_after_s = retry_after_s


class UserSecretMissing(TrunklineError):
    """A per-user instance could not be started: the host's ``UserSecrets`` holds no
    value for some of the server's ``secret_env`` names for the caller (``missing``: the
    variables' names, never a value). The caller stores them, then calls again."""

    def __init__(self, message: str, *, missing: Sequence[str], **kw: Any) -> None:
        super().__init__(message, sent=False, **kw)
        self.missing = tuple(missing)


class ServerError(TrunklineError):
    """The server answered the request with a JSON-RPC error object."""

    def __init__(self, message: str, *, code: int, data: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.code = code
        self.data = data

    def __str__(self) -> str:
        return f"[{self.code}] {super().__str__()}"
