"""Settings: one server's (``ServerConfig``) and one host's (``HostSettings``).

Both are plain frozen dataclasses and both cross the process boundary whole, inside the
worker's specification (``trunkline.channel.WorkerSpec``): a new setting is one field
here, read where it is used, and nothing mirrors it by hand. Fields only the parent uses
(``max_in_flight``, ``call_timeout_s``, ``restart``) travel too, and the worker ignores
them.

A setting has one name from the configuration file to the code: a duration ends in ``_s``
(seconds; the file's key in milliseconds ends in ``Ms``), a bound on calls in flight is
``max_in_flight``. ``ServerConfig``'s names of before that rule still work for one release,
with a ``DeprecationWarning`` (``OLD_SERVER_NAMES``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ._codec import DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_LINE_BYTES
from .deprecations import renamed_fields
from .errors import ConfigurationError
from .params import HttpParams, StdioParams, TransportParams, validated_http_params
from .protocol.backoff import Backoff
from .protocol.era import NegotiationConfig
from .protocol.identity import ClientIdentity
from .protocol.tasks import TASKS_EXTENSION, TaskLimits


@dataclass(frozen=True)
class Root:
    """A root a server is told of when it asks (``roots/list``): a ``file://`` URI and an
    optional name for people."""

    uri: str
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri.startswith("file://"):
            raise ConfigurationError(f"a root is a file:// URI, not {self.uri!r}")

    def listed(self) -> dict[str, str]:
        """As ``roots/list`` lists it."""
        return {"uri": self.uri} if self.name is None else {"uri": self.uri, "name": self.name}


#: ``ServerConfig``'s old names (keywords and attributes): the field each one is now.
OLD_SERVER_NAMES = {
    "call_timeout": "call_timeout_s",
    "discover_timeout": "discover_timeout_s",
    "max_discover_timeout": "max_discover_timeout_s",
    "max_inflight": "max_in_flight",
}


#: ``ServerConfig.credentials``: whose credentials an HTTP server is reached with. ``shared``:
#: the host's own (its OAuth client); ``per_user``: each identity's own sign-in to that
#: server; ``exchange``: a token for that server obtained with the caller's (RFC 8693).
CREDENTIAL_MODES = ("shared", "per_user", "exchange")

#: Why ``"passthrough"`` is never a credentials mode: the specification's ban.
PASSTHROUGH_BANNED = (
    "\"passthrough\" is refused: the MCP specification forbids token passthrough "
    "(basic/authorization, \"Token Handling\": MCP servers \"MUST NOT accept or transit any "
    "other tokens\"; Security Best Practices, \"Token Passthrough\"), so a caller's token is "
    "never sent upstream. Use \"per_user\" (each user signs in to this server) or "
    "\"exchange\" (a token issued for this server, by RFC 8693 token exchange)")


def credentials_problem(mode: object, http: bool) -> str | None:
    """What is wrong with ``mode`` as the ``credentials`` of a server (an HTTP one when
    ``http``), or None."""
    if mode == "passthrough":
        return f"\"credentials\": {PASSTHROUGH_BANNED}"
    if mode not in CREDENTIAL_MODES:
        return (f"\"credentials\" must be one of "
                f"{', '.join(repr(m) for m in CREDENTIAL_MODES)}, not {mode!r}")
    if mode != "shared" and not http:
        return (f"\"credentials\": {mode!r} is for HTTP servers; a stdio server's "
                "credentials are its environment (one instance per user instead: "
                "\"instances\": \"per_user\")")
    return None


@renamed_fields(OLD_SERVER_NAMES)
@dataclass(frozen=True)
class ServerConfig:
    """One configured server. ``name`` is the host's own id for it (the prefix of its
    contested tool names); ``params`` how to reach it, which is also what an operator's
    allowlist (``allow_legacy``) is bound to."""

    name: str
    params: TransportParams
    #: Operator intent for this one server: it may get one legacy ``initialize`` when it
    #: gives no positive evidence of the modern era.
    allow_legacy: bool = False
    #: Tools (by the server's local names) safe to repeat after a failure that may have
    #: reached the server; a tool's own ``idempotentHint`` never counts.
    idempotent_tools: frozenset[str] = frozenset()
    #: Seconds for this server's calls; None: the host's (``CallOptions.call_timeout_s``).
    call_timeout_s: float | None = None
    #: Seconds for each ``server/discover`` attempt (``"discoverTimeoutMs"``); None: the
    #: host's negotiation default.
    discover_timeout_s: float | None = None
    #: Seconds the probes' deadlines may grow to after connections on which the server
    #: stayed silent (``"maxDiscoverTimeoutMs"``); None: the host's negotiation default.
    max_discover_timeout_s: float | None = None
    #: Bound on calls in flight to this server; beyond it callers wait (within their
    #: timeout) instead of growing memory without limit.
    max_in_flight: int = 1024
    #: Bound on the tasks of this server the host follows at once (``"maxTasks"``): a
    #: call answered with one more task fails with ``TaskLimitReached`` (the task is
    #: cancelled upstream).
    max_tasks: int = 1024
    #: While the server (re)starts: wait for it within the call's timeout (True), or
    #: fail at once with ServerUnavailable (False).
    wait_ready: bool = True
    #: Glob patterns of the tools (by the server's local names) listed and callable: all
    #: when ``None``; ``disabled_tools`` removes from them (``catalog.filters``).
    enabled_tools: tuple[str, ...] | None = None
    disabled_tools: tuple[str, ...] = ()
    #: What this server is told its roots are when it asks (a legacy server's
    #: ``roots/list``): the operator's, never a caller's. None: the host's ``roots/list``
    #: handler answers (``parent.relay``).
    roots: tuple[Root, ...] | None = None
    #: ``"shared"``: one worker serves every caller; ``"per_user"`` (stdio only): each
    #: identity's calls go to a worker of its own, started with its secrets in the
    #: environment (``parent.instances``).
    instances: str = "shared"
    #: Environment variables a per-user instance gets from the host's ``UserSecrets``, by
    #: name (``"secretEnv"``): the names only are configured, the values are each
    #: identity's own, never a client's.
    secret_env: tuple[str, ...] = ()
    #: Per-user instances of this server at once (``"maxInstances"``).
    max_instances: int = 64
    #: Seconds a per-user instance with no call in flight is kept (``"instanceIdleS"``).
    instance_idle_s: float = 300.0
    #: Whose credentials this server is reached with (``CREDENTIAL_MODES``): anything but
    #: ``"shared"`` is for HTTP servers only, and makes a call made for an identity go with
    #: that identity's credentials (``Host(user_credentials=...)``).
    credentials: str = "shared"

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            # "/" separates server and tool in prefixed names: it must stay unambiguous.
            raise ConfigurationError(
                f"server name {self.name!r}: must be non-empty and contain no '/'")
        for setting in ("call_timeout_s", "discover_timeout_s", "max_discover_timeout_s"):
            value = getattr(self, setting)
            if value is not None and not value > 0:
                raise ConfigurationError(
                    f"server {self.name!r}: {setting} must be positive, not {value!r}")
        if self.max_in_flight < 1:
            raise ConfigurationError(f"server {self.name!r}: max_in_flight must be at least 1")
        if self.max_tasks < 0:
            raise ConfigurationError(f"server {self.name!r}: max_tasks must not be negative")
        if isinstance(self.params, HttpParams):
            validated_http_params(self.params)
        self._check_instances()
        self._check_credentials()

    def _check_instances(self) -> None:
        if self.instances not in INSTANCE_MODES:
            raise ConfigurationError(f"server {self.name!r}: instances must be one of "
                                     f"{list(INSTANCE_MODES)}, not {self.instances!r}")
        if self.instances == "per_user" and not isinstance(self.params, StdioParams):
            raise ConfigurationError(
                f"server {self.name!r}: per-user instances are for stdio servers only (a "
                "Streamable HTTP server is one endpoint: its callers' credentials are "
                "per request)")
        if self.secret_env and self.instances != "per_user":
            raise ConfigurationError(
                f"server {self.name!r}: secret_env needs per-user instances "
                "(\"instances\": \"per_user\")")
        configured = self.params.env if isinstance(self.params, StdioParams) else {}
        for name in self.secret_env:
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                raise ConfigurationError(
                    f"server {self.name!r}: secret_env: {name!r} is not an environment "
                    "variable's name (letters, digits and '_', not starting with a digit)")
            if name in configured:
                raise ConfigurationError(
                    f"server {self.name!r}: secret_env: {name!r} is also set in env; a "
                    "variable is either the operator's or each user's")
        if len(set(self.secret_env)) != len(self.secret_env):
            raise ConfigurationError(f"server {self.name!r}: secret_env names a variable "
                                     "twice")
        if type(self.max_instances) is not int or self.max_instances < 1:
            raise ConfigurationError(
                f"server {self.name!r}: max_instances must be a positive integer")
        if not self.instance_idle_s > 0:
            raise ConfigurationError(
                f"server {self.name!r}: instance_idle_s must be positive, not "
                f"{self.instance_idle_s!r}")

    def _check_credentials(self) -> None:
        problem = credentials_problem(self.credentials, isinstance(self.params, HttpParams))
        if problem is not None:
            raise ConfigurationError(f"server {self.name!r}: {problem}")

    @property
    def per_user_credentials(self) -> bool:
        """Whether a call made for an identity goes with that identity's credentials."""
        return self.credentials != "shared"


#: ``ServerConfig.instances``'s values.
INSTANCE_MODES = ("shared", "per_user")
#: An environment variable's name, as POSIX shells take it.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class RestartPolicy(Backoff):
    """When a server goes down: capped exponential backoff with full jitter between
    attempts, and a restart intensity limit (Erlang/OTP style)."""

    base_s: float = 0.05
    max_restarts: int = 5
    window_s: float = 30.0
    #: After the intensity limit trips, the server stays unavailable this long, then one
    #: fresh attempt is made (``retry()`` makes it at once).
    cool_down_s: float = 60.0
    #: A server that has not answered yet (its era is unproven, it stayed silent) is
    #: probed again in a fresh process after this backoff: the same curve, its own cap.
    reprobe_cap_s: float = 30.0


@dataclass(frozen=True)
class HostSettings:
    """What every worker of one host shares."""

    identity: ClientIdentity = field(default_factory=ClientIdentity)
    negotiation: NegotiationConfig = field(default_factory=NegotiationConfig)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    #: The pacing of one server's listings after it announced a change
    #: (``catalog.relisting``): a burst of announcements is one listing, and a change
    #: after a quiet spell is listed at once; while the server keeps announcing changes
    #: (on every listing), its listings are ``base_s`` apart, then doubling, up to
    #: ``cap_s``.
    relist: Backoff = field(default_factory=lambda: Backoff(base_s=0.5, factor=2.0,
                                                            cap_s=30.0))
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    #: Largest channel frame: a reply of ``max_line_bytes`` plus its frame head must fit.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: The stop ladder of a stdio server: after its stdin is closed it gets this long to
    #: exit, then SIGTERM and ``term_wait_s``, then SIGKILL.
    close_wait_s: float = 2.0
    term_wait_s: float = 2.0
    #: What each modern server's listen stream asks to be told (``subscriptions/listen``
    #: filter); only the lists a server says it announces are asked for.
    listen: Mapping[str, bool] = field(
        default_factory=lambda: {"toolsListChanged": True})
    #: Server-initiated requests (legacy era) the host answers, e.g.
    #: ``"elicitation/create"``; the worker refuses the rest itself.
    answered_requests: frozenset[str] = frozenset()
    #: The host holds an OAuth client (``Host(oauth=...)``): a Streamable HTTP server's
    #: 401/403 is answered with the credentials it gives, asked over the channel.
    oauth: bool = False
    #: JSON-RPC ids one connection may use: worker ``n`` of a server uses
    #: ``[1 + (n-1)*block, n*block]``, so an id never repeats for one server. A connection
    #: that uses its block up is replaced (2**32 of them: 2**21 connections stay below
    #: 2**53, which JavaScript servers read exactly).
    request_ids_per_connection: int = 1 << 32
    #: How workers start (``parent.launchers``): ``"zygote"``, forks of one worker template
    #: per host, which start in milliseconds and share the template's memory (Linux 5.3+
    #: for pidfds; elsewhere it falls back to spawning, with a warning), or ``"spawn"``,
    #: a fresh interpreter each.
    worker_start: str = "zygote"
    #: Names this host in what it hands out that only it can take back (the token of a
    #: call waiting for its caller's input, ``parent.input_bridge``), so that another
    #: host (a sibling gateway process) knows such a token is not its own. Letters,
    #: digits, ``-`` and ``_`` only.
    instance: str = field(default_factory=lambda: secrets.token_hex(4))
    #: The MCP extensions this host implements: each is declared to a modern server that
    #: declares it too (``io.modelcontextprotocol/tasks``: tools/call may answer with a
    #: task, followed to its end). Empty: none is negotiated.
    extensions: tuple[str, ...] = (TASKS_EXTENSION,)
    #: How tasks are followed (``protocol.tasks``): the floor and cap of the wait between
    #: two looks, the wait when the server names none, failed looks tolerated.
    task_limits: TaskLimits = field(default_factory=TaskLimits)
    #: Per-user server instances at once, over every server (``"maxUserInstances"``;
    #: each server's own bound is ``ServerConfig.max_instances``).
    max_user_instances: int = 512

    def __post_init__(self) -> None:
        # A reply line becomes one RESULT frame: the frame limit must hold the line limit.
        if self.max_frame_bytes < self.max_line_bytes + 64:
            raise ConfigurationError(
                f"max_frame_bytes ({self.max_frame_bytes}) must exceed max_line_bytes "
                f"({self.max_line_bytes}) by at least 64 bytes of frame head"
            )
        if self.worker_start not in ("spawn", "zygote"):
            raise ConfigurationError(
                f"worker_start must be 'spawn' or 'zygote', not {self.worker_start!r}")
        if not self.instance or not self.instance.isascii() \
                or not self.instance.replace("-", "").replace("_", "").isalnum():
            raise ConfigurationError(
                f"instance must be letters, digits, '-' and '_', not {self.instance!r}")
        if type(self.max_user_instances) is not int or self.max_user_instances < 1:
            raise ConfigurationError("max_user_instances must be a positive integer")
        if not (self.close_wait_s >= 0 and self.term_wait_s >= 0):
            raise ConfigurationError("the stop ladder's waits must not be negative")

    @property
    def stop_timeout_s(self) -> float:
        """How long a stopping worker gets before it is killed: its server's whole stop
        ladder, plus a margin for the worker's own exit."""
        return self.close_wait_s + self.term_wait_s + 2.0

    def negotiation_for(self, server: ServerConfig, *, proven_modern: bool = False,
                        patience: int = 0) -> NegotiationConfig:
        """The negotiation one server gets: the host's, with that server's allowlist
        entry and deadlines, and what earlier connections showed: that it is modern, or
        that it stayed silent ``patience`` times in a row (its probes wait longer)."""
        host = self.negotiation
        return replace(
            host,
            allow_legacy=server.allow_legacy,
            proven_modern=proven_modern or host.proven_modern,
            discover_timeout_s=(host.discover_timeout_s if server.discover_timeout_s is None
                                else server.discover_timeout_s),
            max_discover_timeout_s=(host.max_discover_timeout_s
                                    if server.max_discover_timeout_s is None
                                    else server.max_discover_timeout_s),
        ).after_silence(patience)
