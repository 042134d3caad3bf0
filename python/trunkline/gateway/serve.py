"""A gateway from its settings, without a command line: ``GatewaySettings`` (everything
``trunkline serve`` is told), ``Gateway`` (one process's gateway: its Host, its answers
and its face, started and stopped by ``async with``) and ``serve`` (a gateway until it is
cancelled, or N copies of the command on one socket). The command line only fills the
settings in (``cli.commands``); a program embeds the gateway the same way::

    settings = GatewaySettings(config="mcp.json", port=8000)
    async with Gateway(settings) as gateway:
        print(gateway.url)          # http://127.0.0.1:8000/mcp
        await gateway.serve()       # until cancelled

Rules:

- The host behind the gateway declares every kind of input to its servers
  (``RELAYED_CAPABILITIES``): the gateway relays each request for input to its own client,
  which must have declared it (``answers``). A legacy server's roots are its session's,
  so every client's: the entry's ``roots``, else none (``_no_roots``). It declares the
  client side of the extensions it relays too (``extensions.upstream``: MCP Apps).
- Each modern server is asked to announce every list it serves (``RELAYED_LISTS``), so the
  gateway can relay the changes.
- Starting: the OpenTelemetry SDK from ``OTEL_*`` (and ``metrics``, and ``audit`` to
  OpenTelemetry logs) when anything asks for it (``telemetry.sdk``), then the audit log
  (``telemetry.audit``: its sink opened, so a target that cannot be written fails the
  start), then the host and its servers, then the face (HTTP: bound and accepting when
  ``async with`` is entered). A start that fails stops what it started.
- Stopping (leaving ``async with``, also by cancellation): the HTTP face drains the calls
  in flight for up to ``drain_timeout_s``, then the answers, the host (its workers), the
  audit log (what its calls recorded written first) and the telemetry set up here stop,
  in that order. Nothing outlives the gateway.
- With an admin credential (``admin_keys``, or ``oauth`` and an ``admin_scope``), the
  HTTP face serves the operator API under ``/admin`` (``operator_api``), behind it
  (``admin_access``); without one, nothing is there.
- ``processes`` > 1 (HTTP only): this process serves nothing itself; it runs that many
  copies of the command (``copy_arguments``) on one socket (``processes``).
- The configuration is read again by ``Gateway.reload`` (``serve``: on SIGHUP, passed on
  to every copy; with ``watch_config``, whenever the file's content changes): the fleet
  changes by difference and the policy with it, or a configuration that is wrong is
  refused whole and the one in force stays (``reload``). A new policy takes over for
  every request decided from then on (a call admitted before finishes as it was
  admitted); connections, and calls to servers that did not change, are untouched.
  ``Gateway.reload_policy`` reads the policy alone. What in a policy could never match is
  logged as a warning when it is read.
- ``drain_notice_s`` (HTTP): on stopping, ``/readyz`` answers 503 for that long first
  while everything else still serves, so a load balancer takes the copy out before it
  closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from ..errors import ConfigurationError
from ..parent.host_options import CallOptions, ClientOptions
from ..settings import HostSettings
from ..version import VERSION
from .api_keys import ApiKeys
from .extensions import upstream as upstream_extensions
from .limits import Limits

log = logging.getLogger("trunkline.gateway")

if TYPE_CHECKING:
    from ..loop.tasks import TaskScope
    from ..parent.handle import ServerStatus
    from ..parent.host import Host
    from ..policy import Policy
    from ..telemetry.audit import AuditLog
    from ..telemetry.sdk import Configured
    from .answers import Answerer
    from .bearer import ResourceSettings
    from .http import HttpFace
    from .operator_api import OperatorApi
    from .reload import ReloadOutcome, Reloads
    from .siblings import Siblings

#: A callback told one server's status (``Host.watch_servers``).
ServerWatcher = Callable[["ServerStatus"], None]

#: What the gateway's host declares to the servers behind it: every kind of input, since
#: it passes each request for input on to its client, except a legacy server's roots.
RELAYED_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}},
                                        "sampling": {}, "roots": {},
                                        "extensions": upstream_extensions()}
#: What the gateway's host asks each modern server to announce on its listen stream:
#: every list it serves (a legacy server announces its changes unasked).
RELAYED_LISTS = {"toolsListChanged": True, "promptsListChanged": True,
                 "resourcesListChanged": True}


@dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    """Everything a gateway is told (``trunkline serve``'s arguments, as values)."""

    #: The ``mcpServers`` file of the servers behind the gateway.
    config: str | os.PathLike[str]
    #: The face: one client on stdin/stdout (True), else Streamable HTTP at
    #: ``http://bind:port/mcp`` (port 0: the kernel picks one; ``Gateway.url`` names it).
    stdio: bool = False
    bind: str = "127.0.0.1"
    port: int = 0
    #: Each ``server/discover`` deadline, and how far it may grow while a server stays
    #: silent, for servers whose entry sets no ``discoverTimeoutMs`` /
    #: ``maxDiscoverTimeoutMs`` (seconds; None: the host's defaults).
    discover_timeout_s: float | None = None
    max_discover_timeout_s: float | None = None
    #: Seconds a call behind the gateway is given when its server's entry sets no
    #: ``callTimeoutMs`` (None: the host's default, ``CallOptions.call_timeout_s``).
    call_timeout_s: float | None = None
    #: The names clients reach the HTTP face by besides its bind address (a DNS name, a
    #: load balancer's address): a request addressed to any other ``Host`` is refused,
    #: so a name an attacker points at the gateway is not served (DNS rebinding).
    host_names: tuple[str, ...] = ()
    #: Deprecated, without effect: every tool name is model-safe now.
    model_safe_names: bool = False
    #: Two tools (``search_tools``, ``call_tool``) instead of the whole catalog.
    tool_search: bool = False
    #: Requests behind the gateway at once, in all and for one server (``admission``).
    max_in_flight: int = 16384
    max_per_server: int = 2048
    #: What a client may make the gateway hold (``limits``).
    limits: Limits = field(default_factory=Limits)
    #: Largest request body over HTTP; None: the host's largest message line.
    max_body_bytes: int | None = None
    #: On stopping, how long calls in flight may take to finish.
    drain_timeout_s: float = 10.0
    #: The API keys a client may send (HTTP), each with its name (``api_keys``); bare
    #: values are named ``key-1``, ``key-2``, ... Never shown.
    api_keys: ApiKeys | tuple[bytes, ...] = field(default=(), repr=False)
    #: The gateway as an OAuth protected resource (HTTP); None: no access tokens.
    oauth: ResourceSettings | None = None
    #: The key legacy session ids are signed with (replicas that share their sessions
    #: share it); None: a fresh one for this process. Never shown.
    session_key: bytes | None = field(default=None, repr=False)
    #: This gateway's name among its replicas (letters, digits, '-'); None: a random one.
    replica: str | None = None
    #: Prometheus metrics at ``/metrics`` (HTTP; needs ``trunkline[otel]``).
    metrics: bool = False
    #: Where the audit trail goes (``telemetry.audit``): a file's path, ``-`` or
    #: ``stderr``, ``otel`` (OpenTelemetry logs); None: no audit trail.
    audit: str | None = None
    #: The key of each audit record's ``arguments_hash`` (at least 16 bytes); None: no
    #: hash. Never shown.
    audit_key: bytes | None = field(default=None, repr=False)
    #: Audit records waiting to be written at most; beyond it each is dropped and counted.
    audit_queue: int = 10_000
    #: Gateway processes on one socket (HTTP), each a copy of the command started with
    #: ``copy_arguments`` (``trunkline`` arguments, without ``--processes``).
    processes: int = 1
    copy_arguments: tuple[str, ...] = ()
    #: The inherited listening socket of a copy of ``serve --processes N``.
    listen_fd: int | None = None
    #: The operator's keys (``admin_access``: the operator API under ``/admin``); never
    #: shown, never accepted at ``/mcp``.
    admin_keys: ApiKeys = field(default_factory=ApiKeys, repr=False)
    #: The scope an OAuth access token of the gateway's issuers needs to be an
    #: operator's (with ``oauth``); None: no token is.
    admin_scope: str | None = "trunkline:admin"
    #: Reload whenever the configuration file's content changes (besides SIGHUP).
    watch_config: bool = False
    #: On stopping (HTTP), seconds ``/readyz`` answers 503 before the gateway stops
    #: taking requests, for a load balancer to take it out first.
    drain_notice_s: float = 0.0

    def __post_init__(self) -> None:
        if self.stdio:
            for needs_http, asked in (("processes > 1", self.processes > 1),
                                      ("metrics", self.metrics), ("oauth", self.oauth),
                                      ("a drain notice", self.drain_notice_s > 0),
                                      ("admin keys", bool(self.admin_keys))):
                if asked:
                    raise ConfigurationError(f"{needs_http} needs HTTP, not stdio")
        if self.drain_notice_s < 0:
            raise ConfigurationError("drain_notice_s must not be negative")
        if self.processes < 1 or self.max_in_flight < 1 or self.max_per_server < 1:
            raise ConfigurationError("processes, max_in_flight and max_per_server must be "
                                     "at least 1")
        if self.processes > 1 and not self.copy_arguments:
            raise ConfigurationError("processes > 1 needs copy_arguments (what starts a copy)")
        if self.session_key is not None and len(self.session_key) < 16:
            raise ConfigurationError("the session key needs at least 16 bytes")
        if self.audit is None:
            if self.audit_key is not None:
                raise ConfigurationError("an audit key needs an audit target")
        else:
            from ..telemetry.audit import AuditLog

            AuditLog.from_target(self.audit, hash_key=self.audit_key,
                                 max_queue=self.audit_queue)  # refuses what it cannot use


class Gateway:
    """One process's gateway, from its settings: ``async with`` starts it (``url``: where
    HTTP clients reach it), ``serve`` serves until stdin closes (stdio) or until
    cancelled (HTTP), leaving ``async with`` stops it. ``starting``: told each server's
    status while the fleet comes up (a progress display), not after."""

    def __init__(self, settings: GatewaySettings, *,
                 starting: ServerWatcher | None = None) -> None:
        if settings.processes > 1:
            raise ConfigurationError("a Gateway is one process: serve() runs its copies")
        self.settings = settings
        self._starting = starting
        self._stack = AsyncExitStack()
        self._host: Host | None = None
        self._answerer: Answerer | None = None
        #: The audit trail (``GatewaySettings.audit``), while started; None without one.
        self.audit: AuditLog | None = None
        #: The URL HTTP clients reach the gateway at (``http://HOST:PORT/mcp``); None on
        #: stdio, and until started.
        self.url: str | None = None
        self._reloads: Reloads | None = None
        #: The reloads SIGHUP asks for, and the file's watch: they end with the gateway.
        self._tasks: TaskScope | None = None

    @property
    def host(self) -> Host:
        """The host behind the gateway (started)."""
        if self._host is None:
            raise RuntimeError("the gateway is not started")
        return self._host

    async def __aenter__(self) -> Self:
        try:
            await self._start(self._stack)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stack.aclose()
        finally:
            self._host = self._answerer = self.audit = None
            self._reloads = self._tasks = None
            self.url = None

    async def reload(self, *, signalled: bool = False) -> ReloadOutcome:
        """Read the configuration again and change the fleet and the policy to it
        (``gateway/reload.py``): the outcome, refused (``ok`` False, ``error`` the
        reason, nothing changed) or what changed. One at a time: one asked meanwhile
        waits, then reads the file again. In a copy of ``serve --processes N`` it checks
        the file and has every copy reload (``signalled``: SIGHUP itself asks, so each
        copy reloads its own fleet)."""
        return await self._reloading().reload(signalled=signalled)

    @property
    def reloading(self) -> bool:
        """Whether a reload is being made now."""
        return self._reloads is not None and self._reloads.reloading

    @property
    def last_reload(self) -> ReloadOutcome | None:
        """The last reload's outcome (None before the first)."""
        return None if self._reloads is None else self._reloads.last

    def watch_reloads(self, on_outcome: Callable[[ReloadOutcome], None]
                      ) -> Callable[[], None]:
        """Call ``on_outcome(outcome)`` (on the loop) at the end of every reload, refused
        or made; returns the function that stops it."""
        return self._reloading().watch(on_outcome)

    @property
    def starting(self) -> list[str]:
        """The servers still starting: the fleet's, and those a reload is starting (a new
        definition starts beside the old one, which serves meanwhile)."""
        names = [s.name for s in self.host.servers()
                 if s.state.value in ("starting", "negotiating")]
        more = [] if self._reloads is None else self._reloads.starting
        return names + [n for n in more if n not in names]

    def reload_soon(self) -> None:
        """``reload`` as SIGHUP asks for it: in the background, within the gateway's
        lifetime (its outcome is logged, and in ``last_reload``)."""
        if self._tasks is not None:
            self._tasks.spawn(self.reload(signalled=True), name="reload")

    def _reloading(self) -> Reloads:
        if self._reloads is None:
            raise RuntimeError("the gateway is not started")
        return self._reloads

    def reload_policy(self) -> bool:
        """Read the configuration's policy again and decide by it from now on; a policy
        that cannot be read or does not compile is logged and the one in force stays.
        Whether it changed."""
        from ..config import read_policy

        try:
            policy = read_policy(self.settings.config)
        except ConfigurationError as exc:
            log.error("the policy was not changed: %s", exc)
            return False
        self.host.set_policy(policy)
        _said(policy, [s.name for s in self.host.servers()], reloaded=True)
        return True

    async def serve(self) -> None:
        """Serve: one client on stdin/stdout until it closes stdin, or HTTP clients until
        cancelled."""
        if self._answerer is None:
            raise RuntimeError("the gateway is not started")
        if self.settings.stdio:
            from .stdio import serve_stdio

            await serve_stdio(self._answerer, max_line_bytes=self.host.settings.max_line_bytes)
        else:
            await asyncio.get_running_loop().create_future()

    async def _start(self, stack: AsyncExitStack) -> None:
        from ..parent.host import Host
        from .admission import Admission
        from .answers import Answerer

        settings = self.settings
        if settings.listen_fd is not None:
            from ..lifetime import die_with_parent

            die_with_parent()  # a copy of `serve --processes N`
        to_otel = settings.audit == "otel"
        telemetry = _telemetry(settings.metrics, logs=to_otel)
        if telemetry is not None:
            stack.callback(telemetry.shutdown)
        if settings.audit is not None:
            from ..telemetry.audit import AuditLog

            self.audit = await stack.enter_async_context(AuditLog.from_target(
                settings.audit, hash_key=settings.audit_key, max_queue=settings.audit_queue,
                logger_provider=None if telemetry is None else telemetry.logger_provider))
        instance, siblings = _placement(settings.replica)
        from ..config import read_host_config
        from .reload import Reloads, content_digest

        digest = content_digest(settings.config)  # what --watch-config compares with
        started_with = read_host_config(
            settings.config, discover_timeout_s=settings.discover_timeout_s,
            max_discover_timeout_s=settings.max_discover_timeout_s)
        host = Host.from_config(settings.config, discover_timeout_s=settings.discover_timeout_s,
                                max_discover_timeout_s=settings.max_discover_timeout_s,
                                calls=_calls(settings.call_timeout_s),
                                client=ClientOptions(
                                    capabilities=RELAYED_CAPABILITIES,
                                    input_handlers={"roots/list": _no_roots}),
                                settings=HostSettings(instance=instance, listen=RELAYED_LISTS))
        sign_ins = getattr(host.user_credentials, "sign_ins", None)
        if sign_ins is not None and (settings.stdio or settings.listen_fd is not None):
            await host.aclose()
            raise ConfigurationError(
                "servers whose credentials are each user's (\"per_user\") sign users in "
                "through this gateway's own HTTP pages: serve them with --http, in one "
                "process (not --stdio, not --processes N)")
        unwatch = None if self._starting is None else host.watch_servers(self._starting)
        try:
            self._host = await stack.enter_async_context(host)
        finally:
            if unwatch is not None:
                unwatch()
        _said(host.access.policy, [s.name for s in host.servers()], reloaded=False)
        self._reloads = Reloads(
            host, lambda: read_host_config(
                settings.config, discover_timeout_s=settings.discover_timeout_s,
                max_discover_timeout_s=settings.max_discover_timeout_s),
            started_with, settings.drain_timeout_s,
            on_policy=lambda policy: _said(policy, [s.name for s in host.servers()],
                                           reloaded=True),
            copy=settings.listen_fd is not None)
        from ..loop.tasks import TaskScope

        self._tasks = await stack.enter_async_context(TaskScope("gateway reloads"))
        if settings.watch_config:
            from .reload import watch_file

            # A change seen is this process's to apply, as SIGHUP would be.
            self._tasks.spawn(watch_file(settings.config,
                                         lambda: self.reload(signalled=True), digest),
                              name="config watch")
        limits = settings.limits
        answerer = self._answerer = Answerer(
            host, server_info={"name": "trunkline", "version": VERSION},
            admission=Admission(total=settings.max_in_flight,
                                per_server=settings.max_per_server,
                                client_calls=limits.client_calls,
                                client_server_share=limits.client_server_share,
                                client_rate=limits.client_rate,
                                client_burst=limits.client_burst,
                                timeout_of=host.call_timeout, slots_of=host.call_slots),
            tool_search=settings.tool_search, transport="pipe" if settings.stdio else "tcp",
            limits=limits, audit=self.audit)
        stack.push_async_callback(answerer.aclose)
        if not settings.stdio:
            self.url = await self._start_http(stack, answerer, telemetry, instance, siblings)

    async def _start_http(self, stack: AsyncExitStack, answerer: Answerer,
                          telemetry: Configured | None, instance: str,
                          siblings: Siblings | None) -> str:
        from .copy_metrics import CopyPages
        from .copy_metrics import served as served_metrics
        from .http import HttpFace
        from .http_rules import SessionSigner

        settings = self.settings
        users = self.host.user_credentials
        sign_ins = getattr(users, "sign_ins", None)
        shared = (None if settings.listen_fd is None
                  else socket.socket(fileno=settings.listen_fd))
        metrics = pages = None
        if telemetry is not None and telemetry.prometheus:
            # A copy of `serve --processes N` serves every copy's metrics, not its own alone.
            pages = CopyPages.from_environment(telemetry.metrics_page)
            metrics = served_metrics(telemetry.metrics_page, pages)
        face = HttpFace(answerer, bind=settings.bind, port=settings.port,
                        api_keys=settings.api_keys,
                        signer=SessionSigner(settings.session_key or os.urandom(32), instance),
                        max_body_bytes=(settings.max_body_bytes
                                        or self.host.settings.max_line_bytes),
                        drain_s=settings.drain_timeout_s, sock=shared, oauth=settings.oauth,
                        metrics=metrics, siblings=siblings, names=settings.host_names,
                        sign_ins=sign_ins,
                        subject_tokens=getattr(users, "subject_tokens", None),
                        sign_in_client=getattr(users, "person_client", None),
                        drain_notice_s=settings.drain_notice_s,
                        readiness=lambda: (self.reloading, self.starting))
        operator = self._operator(face, instance, siblings)
        if pages is not None:
            await pages.start()
            stack.push_async_callback(pages.stop)
        url: str = await face.start()
        stack.push_async_callback(face.stop)
        if operator is not None:
            stack.callback(operator.close)  # its event streams end before the face drains
        if sign_ins is not None and not sign_ins.base_url:
            # Users' browsers reach the sign-in pages where clients reach /mcp.
            sign_ins.base_url = url.rsplit("/", 1)[0]
        return url


    def _operator(self, face: HttpFace, instance: str,
                  siblings: Siblings | None) -> OperatorApi | None:
        """The operator API under ``/admin`` (``operator_api``), when an admin credential
        is configured: admin keys, or OAuth with an admin scope."""
        from .admin_access import AdminAccess, copies_key
        from .dashboard_pages import DashboardPages
        from .operator_api import OperatorApi

        settings = self.settings
        scope = settings.admin_scope if settings.oauth is not None else None
        if not settings.admin_keys and not scope:
            return None
        public = settings.oauth.resource if settings.oauth is not None else None
        access = AdminAccess(settings.admin_keys, instance=instance,
                             tokens=lambda: face.token_validator, scope=scope or None,
                             secure_cookies=(public or "").startswith("https:"),
                             copies=None if siblings is None or settings.session_key is None
                             else copies_key(settings.session_key))
        operator = OperatorApi(self, access, config=settings.config, siblings=siblings,
                               copies=access.copies, pages=DashboardPages(access))
        face.admin = operator
        return operator


async def serve(settings: GatewaySettings, *, starting: ServerWatcher | None = None,
                watch: ServerWatcher | None = None,
                serving: Callable[[str | None], None] | None = None) -> int:
    """Run a gateway until it is cancelled (stdio: or until its client closes stdin),
    then stop it; with ``processes`` > 1, that many copies of the command on one socket
    until cancelled. ``starting``: told each server's status while the fleet comes up;
    ``watch``: each change after; ``serving``: called once clients can be served, with the
    URL (None on stdio). Returns the exit status (a copy's that failed to start, else 0)."""
    if settings.processes > 1:
        return await _serve_copies(settings, serving)
    async with Gateway(settings, starting=starting) as gateway:
        if watch is not None:
            gateway.host.watch_servers(watch)
        with _on_signal(signal.SIGHUP, gateway.reload_soon):
            if serving is not None:
                serving(gateway.url)
            await gateway.serve()
    return 0


async def _serve_copies(settings: GatewaySettings,
                        serving: Callable[[str | None], None] | None) -> int:
    from .processes import Copies

    copies = Copies(settings.copy_arguments, settings.processes, settings.bind,
                    settings.port, settings.drain_notice_s + settings.drain_timeout_s)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    if serving is not None:
        ready.add_done_callback(lambda f: serving(f.result()))
    with _on_signal(signal.SIGHUP, lambda: copies.signal_all(signal.SIGHUP)):
        return await copies.run(ready)


@contextlib.contextmanager
def _on_signal(sig: signal.Signals, callback: Callable[[], object]) -> Iterator[None]:
    """``callback`` runs on the loop whenever ``sig`` comes, while in the block (where
    the loop can take signals: the main thread of a Unix process)."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(sig, callback)
    except (NotImplementedError, RuntimeError, ValueError):
        yield  # not the main thread, or no signals here: reload by calling instead
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(sig)


def _said(policy: Policy | None, servers: list[str], *, reloaded: bool) -> None:
    """Log what a policy just read is, and what in it could never match (given the
    configured ``servers``)."""
    if policy is None or not policy.active:
        if reloaded:
            log.warning("policy reloaded: no rules, so every identity sees and calls "
                        "everything")
        return
    if reloaded:
        log.warning("policy reloaded from %s: %d rules (sha256 %s)", policy.origin,
                    len(policy.rules), policy.digest[:12])
    for warning in policy.warnings(servers):
        log.warning("policy: %s", warning)


def _calls(call_timeout_s: float | None) -> CallOptions | None:
    """The host's call defaults for ``GatewaySettings.call_timeout_s`` (None: its own)."""
    return None if call_timeout_s is None else CallOptions(call_timeout_s=call_timeout_s)


async def _no_roots(_params: dict[str, Any]) -> dict[str, Any]:
    """A legacy server's ``roots/list`` behind the gateway, when its entry names none."""
    return {"roots": []}


def _telemetry(metrics: bool, *, logs: bool = False) -> Configured | None:
    """The SDK from ``OTEL_*`` (and ``metrics``, and ``logs``: the audit trail's log
    records), when anything asks for it; the OTel API's no-op otherwise, without importing
    the SDK."""
    wanted = metrics or logs or any(
        key.startswith(("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_"))
        for key in os.environ)
    if not wanted:
        return None
    from ..telemetry.sdk import MissingExtra, configure

    try:
        return configure(prometheus=metrics, logs=logs)
    except (MissingExtra, ValueError) as exc:
        raise ConfigurationError(str(exc)) from None


def _placement(replica: str | None) -> tuple[str, Siblings | None]:
    """This gateway process's instance name (``http_rules``: the replica's name, and for a
    copy of ``serve --processes N`` its index after it), which leads the legacy session ids
    it mints and names it in the input rounds it holds; and its sibling copies, if any."""
    from .http_rules import valid_instance
    from .processes import copy_instance
    from .siblings import from_environment

    replica = replica or os.urandom(3).hex()
    if "_" in replica or not valid_instance(replica):
        raise ConfigurationError(f"replica name {replica!r}: letters, digits and '-' only")
    siblings = from_environment(replica)
    if siblings is None:
        return replica, None
    return copy_instance(replica, siblings.index), siblings
