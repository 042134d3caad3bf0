"""The public host API: many servers, one collision-safe tool catalog, calls routed to
their owners.

``Host`` is a facade over three parts, each with one job: the ``Supervisor`` (a worker
process per server: start, route, restart, stop), the ``CatalogKeeper`` (each server's
listing and the merged catalog, kept in step with the servers) and the ``CallPath`` (one
logical request to its server: retries, progress, input rounds), whose tool results the
``ResultChecks`` check. A server that is not ready is never sent a call: the call waits
for it within its timeout, or fails at once with the reason; a call to a name no ready
server serves names the servers not ready that could serve it, and why they are not.

A server refused for want of the legacy allowlist (it answered, but proved no era) is
said once, as a warning on the ``trunkline.host`` logger naming the server, its answer and
the fix, and is in ``servers()`` (``ServerStatus.hint``) and ``warnings`` for as long as
it stays refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self, TypeGuard, cast

import msgspec

from ..auth.user_sign_in import SignIns
from ..catalog import Catalog, CatalogWarning, ToolEntry
from ..catalog.filters import ToolBounds
from ..catalog.pins import PinRecord, Quarantine
from ..catalog.search import DEFAULT_LIMIT, ToolMatch, ToolSearch
from ..channel import ServerState
from ..config import ConfigSource, read_host_config
from ..deprecations import renamed_keywords, warn_deprecated
from ..errors import (
    AuthorizationFailed,
    ConfigurationError,
    NotPermitted,
    RequestTimeout,
    ServerUnavailable,
    ToolCandidate,
    ToolCollision,
    ToolHidden,
    UnknownTool,
)
from ..loop.awaitables import raising
from ..loop.tasks import TaskScope
from ..params import HttpParams, TransportParams
from ..policy.decisions import Access, Allowed, Denied, Item
from ..policy.document import Policy
from ..policy.identity import LOCAL, LOCAL_KIND, Identity
from ..protocol.identity import ClientIdentity
from ..protocol.input_bridge import bridgeable
from ..protocol.listen import can_subscribe
from ..protocol.mrtr import CAPABILITY_OF, MRTR_METHODS, MrtrLimits
from ..protocol.retry import RetryPolicy
from ..protocol.skills import SkillEntry
from ..protocol.tasks import TaskView
from ..protocol.versions import LOG_LEVELS
from ..settings import OLD_SERVER_NAMES, HostSettings, Root, ServerConfig
from ..telemetry.carried import carried
from . import host_options
from .call_request import CallInput, CallRequest, ProgressCallback
from .calls import CallPath
from .credentials import CredentialSlots, UserCredentials
from .handle import ServerStatus, ServerWarning, WorkerHandle
from .host_options import (
    CallOptions,
    CatalogOptions,
    ClientOptions,
    TelemetryOptions,
    TrustOptions,
)
from .input_bridge import BridgedCalls
from .instances import UserInstances, UserSecrets
from .latency import LatencySummary
from .listing import CatalogKeeper
from .mrtr import InputRequired, InputRounds
from .pin_store import PinStore, pins_for
from .results import CallToolResult, ResultChecks
from .sign_in_rounds import SignInRounds
from .skills import SkillFile, SkillReader
from .supervisor import Supervisor
from .tasks import TaskStatus, ToolTask
from .telemetry import Telemetry
from .user_calls import UserCalls
from .user_catalogs import UserCatalogs

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..auth import OAuthClient
    from ..auth.redis_store import RedisStore
    from ..auth.store import FileStore
    from ..telemetry.calls import CallRecord
    from .user_credentials import UserCredentialSources

log = logging.getLogger("trunkline.host")

#: The lists besides the tools that a server may offer and announce changes of.
OFFERINGS = ("prompts", "resources")

#: ``Host.from_config``'s old keywords: the name each one is now.
_OLD_FROM_CONFIG_NAMES = {"discover_timeout": "discover_timeout_s",
                          "max_discover_timeout": "max_discover_timeout_s"}


class Host:
    """A fleet of MCP servers as one: a worker process per server, their tools merged into
    one catalog without one server shadowing another, each call routed to its owner.
    ``async with Host.from_config("mcp.json") as host: ...`` (the documentation's
    getting-started page for the library walks through it)."""

    def __init__(
        self,
        *,
        settings: HostSettings | None = None,
        client: ClientOptions | None = None,
        catalog: CatalogOptions | None = None,
        trust: TrustOptions | None = None,
        calls: CallOptions | None = None,
        telemetry: TelemetryOptions | None = None,
        oauth: OAuthClient | None = None,
        policy: Policy | None = None,
        user_secrets: UserSecrets | None = None,
        user_credentials: UserCredentials | None = None,
        **old_keywords: Any,
    ) -> None:
        """``settings`` (``HostSettings``): what every worker is told too (how workers
        start, negotiation, restarts, frame bounds, the instance's name). The option
        groups (``parent/host_options.py``): ``client`` (``ClientOptions``: the client
        info and capabilities the servers are told, the handlers of their input rounds,
        ``on_log`` for their log messages), ``catalog`` (``CatalogOptions``: the
        collision policy, model-safe names, the listing timeout), ``trust``
        (``TrustOptions``: pins, first sights, bounds), ``calls`` (``CallOptions``: the
        default timeout, retries, input-round bounds) and ``telemetry``
        (``TelemetryOptions``: the OpenTelemetry providers).

        ``client.on_log(server, params)`` receives every ``notifications/message`` a
        server sends (``params``: ``level``, ``logger``, ``data``) that no call took,
        tagged with the server's name; without it they go to the ``trunkline.host``
        logger.

        ``client.input_handlers`` answer a server's ``input_required`` rounds (multi
        round-trip requests): ``{"sampling/createMessage": f, "elicitation/create": g,
        "roots/list": h}``, each ``async (params) -> result``; the same handlers answer
        a legacy server's own requests of those kinds. Declare the matching
        ``client.capabilities`` (``sampling``, ``elicitation``, ``roots``): a server
        asking for anything undeclared fails the call locally, and trunkline never
        answers an input request by itself.

        ``oauth`` (``trunkline.auth.OAuthClient``): the credentials of protected Streamable
        HTTP servers. A server's 401/403 is answered with a token from it (discovery,
        authorization, refresh, step-up: all in this process, one flight per server), and
        the request is sent again; tokens are renewed before they expire. The caller owns
        it (closes it after the host). Without it a 401/403 fails the request with
        ``AuthenticationFailed``.

        ``user_credentials``: each user's own credentials, for the servers whose
        ``credentials`` mode is not ``"shared"``: an object whose
        ``source_for(server, identity)`` gives that identity's ``CredentialSource``
        (``parent.credentials``; an ``OAuthClient`` is one). A call or request made with
        ``identity=`` to such a server goes with that identity's credentials only (its
        credential slot: one worker carries every identity's requests, each with its own
        header; a 401 renews that identity's alone); without ``identity=`` it goes with
        the host's (``oauth``). Without ``user_credentials``, a call made for an identity
        to such a server raises ``UserCredentialsMissing``. ``forget_credentials`` drops
        an identity's.

        ``trust.pins`` (``PinStore``; in memory by default): each tool's approved
        definition, by server identity. A tool whose definition changed (or, with
        ``approve_first_sight``, any tool not approved yet) is quarantined until
        ``approve_tool``; ``tool_bounds`` (``ToolBounds``) quarantine what is too big to
        put in front of a model. The caller owns ``pins``.

        ``telemetry`` (OpenTelemetry's tracer and meter providers): where this host's
        spans and metrics go; without them the global providers (no-op until an
        application sets them), so telemetry is off and costs nothing unless configured.

        ``catalog.list_timeout_s``: seconds for one whole listing of a server's tools, every
        page of it; a server whose listing fails (that one, a malformed or unreadable
        list, a crash) is that server's failure only (``ServerStatus.listing_error``).

        ``policy`` (``trunkline.Policy``): who may see and call what. With one, every
        listing and call is decided for the identity it is made for (``identity=``; none
        given: ``Identity`` ``local``): a tool the identity may not list is not in its
        ``tools()`` or ``search_tools()``, and calling it raises ``ToolHidden`` (an
        ``UnknownTool`` whose message is exactly an unknown tool's); one it may list but
        not call raises ``NotPermitted``. ``set_policy`` changes it.

        ``user_secrets`` (``UserSecrets``): each identity's values of the environment
        variables a per-user server names (``ServerConfig.secret_env``). A server
        configured ``instances="per_user"`` runs one worker per identity that calls it
        (``identity=``), started on its first call with those values in its server's
        environment, stopped after ``instance_idle_s`` idle, bounded per server
        (``max_instances``) and in all (``HostSettings.max_user_instances``): beyond,
        the call fails at once with ``InstanceLimitReached``. Its tools are listed by
        one shared worker with the configured environment only, which also serves the
        calls made without an identity or as ``local`` (``parent/instances.py``).

        The keywords of before the groups (``collision=``, ``call_timeout=``, ...) still
        work, with a ``DeprecationWarning`` naming each one's group."""
        groups = {"client": client, "catalog": catalog, "trust": trust, "calls": calls,
                  "telemetry": telemetry}
        if old_keywords:
            made = host_options.from_keywords(groups, old_keywords)
            warn_deprecated(host_options.deprecation(old_keywords))
            client, catalog, trust = made["client"], made["catalog"], made["trust"]
            calls, telemetry = made["calls"], made["telemetry"]
        client = client or ClientOptions()
        catalog = catalog or CatalogOptions()
        trust = trust or TrustOptions()
        calls = calls or CallOptions()
        telemetry = telemetry or TelemetryOptions()
        base = settings or HostSettings()
        identity = (_identity(client.info, client.capabilities)
                    if (client.info or client.capabilities) else base.identity)
        handlers = dict(client.input_handlers or {})
        # The worker passes on a legacy server's request of any kind the host declared:
        # a call's own handlers (``CallInput``) may answer it where the host has none.
        declared = {method for method, capability in CAPABILITY_OF.items()
                    if capability in identity.capabilities}
        self.settings = replace(base, identity=identity,
                                answered_requests=frozenset(handlers) | declared,
                                oauth=oauth is not None)
        #: Each identity's credential slot, for servers reached with users' own credentials.
        self._credential_slots = CredentialSlots(
            user_credentials, forget=lambda slots: self._servers.forget_credentials(slots))
        mrtr_limits = calls.mrtr_limits or MrtrLimits()
        self._scope = TaskScope("host")
        self.telemetry = Telemetry(tracer_provider=telemetry.tracer_provider,
                                   meter_provider=telemetry.meter_provider,
                                   statuses=lambda: self._servers.statuses())
        self._servers = Supervisor(self.settings, on_state=self._on_server_state,
                                   on_list_changed=self._on_list_changed,
                                   on_log=client.on_log or _log_to_logger,
                                   input_handlers=handlers,
                                   oauth=oauth, credential_slots=self._credential_slots)
        self._results = ResultChecks()
        #: Per-user instances of the servers configured so, and those servers' names.
        self._instances = UserInstances(self._servers.instance_handle, scope=self._scope,
                                        secrets=user_secrets,
                                        max_total=self.settings.max_user_instances)
        self._per_user: set[str] = set()
        #: The authorization policy and its decisions (``trunkline.policy``).
        self.access = Access(policy)
        #: Capped exponential backoff with full jitter; reads are retried after transport
        #: loss or a timeout, tools/call only when declared idempotent.
        self.retry_policy = calls.retry or RetryPolicy()
        if catalog.model_safe_names:
            warn_deprecated("model_safe_names=True is deprecated: every tool name is "
                            "model-safe now")
        self._catalog = CatalogKeeper(
            self._servers, policy=catalog.collision, list_timeout_s=catalog.list_timeout_s,
            retry_policy=self.retry_policy, scope=self._scope, on_rebuilt=self._on_rebuilt,
            pins=trust.pins, bounds=trust.tool_bounds,
            first_sight="approve" if trust.approve_first_sight else "trust",
            telemetry=self.telemetry,
            gaps=self.settings.relist,
            # A listing that failed is tried again on the restarts' curve, capped as a
            # re-probe is: the server is up, but not usable yet.
            retries=replace(self.settings.restart, cap_s=self.settings.restart.reprobe_cap_s))
        self._calls = CallPath(
            retry_policy=self.retry_policy, call_timeout_s=calls.call_timeout_s,
            input_rounds=InputRounds(handlers, identity.capabilities, mrtr_limits),
            relist=self._relist_for_call, checked=self._results.to_result,
            telemetry=self.telemetry)
        #: Relayed calls to legacy servers, whose questions become their callers' rounds.
        self._bridged = BridgedCalls(self._scope, mrtr_limits,
                                     self.settings.instance)
        #: Each identity's catalog and calls, where some servers act as each user.
        self._user_catalogs = UserCatalogs(self._catalog, self._servers,
                                           holds_credential=self._holds_credential,
                                           reach=self.retry,
                                           on_changed=self._user_catalog_changed)
        sign_ins = getattr(user_credentials, "sign_ins", None)
        self._user_calls = UserCalls(
            self._user_catalogs, self._servers, self._credential_slots,
            SignInRounds(sign_ins) if isinstance(sign_ins, SignIns) else None,
            host_input=lambda: CallInput(handlers=handlers,
                                         capabilities=self.settings.identity.capabilities),
            timeout_for=lambda server, timeout: self._calls.timeout_for(
                self._servers.handle(server), timeout),
            reach=self.retry)
        #: Skills (MCP's skills extension): entries on demand, files read and verified.
        self._skills = SkillReader(self.request, self._servers.statuses,
                                   lambda name: self._servers.handle(name).status(),
                                   prefix_all=catalog.collision == "prefix-all")
        self._pending_config: list[ServerConfig] = []
        self._catalog_watchers: list[Callable[[Catalog], None]] = []
        self._server_watchers: list[Callable[[ServerStatus], None]] = []
        #: Each watcher of the offerings: told of an announced change, and of a server
        #: that came or went (the second, when given).
        self._offering_watchers: list[tuple[Callable[[str], None],
                                            Callable[[str], None] | None]] = []
        #: The lists of ``OFFERINGS`` each ready server declares: a server that comes or
        #: goes changes the fleet's.
        self._offered: dict[str, frozenset[str]] = {}
        self._last_entries = self._catalog.catalog.entries
        #: The servers whose refusal for want of the allowlist was logged: said once, not
        #: again until the server is ready or refused for another reason.
        self._hinted: set[str] = set()
        #: While ``batched``: what its watchers will be told at its end.
        self._held: _Held | None = None
        #: The tool search index, built again at the first search after a change.
        self._search = ToolSearch(lambda: self._catalog.tools())
        self.watch_catalog(lambda _catalog: self._search.changed())
        self._closed = False
        #: ``call_tool_relayed`` is making its call (``call_tool``'s relay is not deprecated).
        self._relaying = False
        #: An OAuth client this host made (``from_config``), closed with it.
        self._owned_oauth: OAuthClient | None = None
        #: A pin store this host made (``from_config``), closed with it.
        self._owned_pins: PinStore | None = None
        #: A token store the configuration's per-user secrets are read from, when no OAuth
        #: client of the host's owns it.
        self._owned_store: object = None
        #: Users' credential sources this host made (``from_config``), closed with it.
        self._owned_users: UserCredentialSources | None = None

    # -- lifetime ------------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: ConfigSource | None = None, *,
                    discover_timeout_s: float | None = None,
                    max_discover_timeout_s: float | None = None, **kwargs: Any) -> Host:
        """A host for the servers of an ``{"mcpServers": {...}}`` configuration: a file's
        path, or that mapping itself (the decoded file a host already holds); they start
        when the host is entered (``async with``). ``discover_timeout_s`` (seconds) applies
        to the servers whose entry sets no ``"discoverTimeoutMs"``,
        ``max_discover_timeout_s`` to those that set no ``"maxDiscoverTimeoutMs"``. Other
        keyword arguments go to ``Host()``.

        With a Streamable HTTP server in it (and no ``oauth=`` given), the host has an
        OAuth client of its own, as the ``"oauth"`` keys describe
        (``config.read_host_config``), closed with the host: tokens a person stored with
        ``trunkline login`` are used and refreshed, client credentials are obtained, and an
        authorization that needs a person fails saying to run ``trunkline login``.

        Pins are kept where the tokens are (the ``"oauth"`` ``store``: its ``pins``
        subdirectory, or the same Redis), with the ``"pins"`` settings. A top-level
        ``"collision"`` is the catalog's ``collision`` policy (unless ``catalog`` is
        given here)."""
        if "path" in kwargs:  # the name ``config`` had while it could only be a path
            warn_deprecated("Host.from_config(path=...) is deprecated: pass the file's path "
                            "(or the mcpServers mapping) first, or as config=...")
            config = kwargs.pop("path")
        if config is None:
            raise TypeError("Host.from_config() needs a configuration: a file's path or an "
                            "{\"mcpServers\": {...}} mapping")
        old = {name: kwargs.pop(name) for name in _OLD_FROM_CONFIG_NAMES if name in kwargs}
        if old:
            new = renamed_keywords(old, _OLD_FROM_CONFIG_NAMES, "Host.from_config")
            discover_timeout_s = new.get("discover_timeout_s", discover_timeout_s)
            max_discover_timeout_s = new.get("max_discover_timeout_s", max_discover_timeout_s)
        read = read_host_config(config, discover_timeout_s=discover_timeout_s,
                                max_discover_timeout_s=max_discover_timeout_s)
        if (read.collision is not None and kwargs.get("catalog") is None
                and "collision" not in kwargs):
            kwargs["catalog"] = CatalogOptions(collision=read.collision)
        trust = kwargs.get("trust") or TrustOptions(
            approve_first_sight=read.pins.approve_first_sight,
            tool_bounds=ToolBounds(**read.pins.bounds) if read.pins.bounds else None)
        owned_pins = None
        if trust.pins is None and "pins" not in kwargs:
            owned_pins = pins_for(read.oauth.store)
            trust = replace(trust, pins=owned_pins)
        kwargs["trust"] = trust
        owned = None
        if "oauth" not in kwargs and any(isinstance(c.params, HttpParams) for c in read.servers):
            from ..auth.configured import oauth_client_from
            from ..auth.sign_in import SignInRequired

            file = read.path if read.path is not None else "CONFIG.json"
            owned = kwargs["oauth"] = oauth_client_from(
                read.oauth, SignInRequired(
                    f"run `trunkline login {file} SERVER`, SERVER being this server's name "
                    "in it"))
        owned_store = None
        if "user_secrets" not in kwargs and any(c.secret_env for c in read.servers):
            # Per-user instances start with their users' secrets, from the sealed store.
            from ..auth.configured import token_store_from
            from ..auth.user_store import StoredUserSecrets, UserRecordStore

            store = token_store_from(read.oauth) if owned is None else owned.store
            owned_store = None if owned is not None else store
            kwargs["user_secrets"] = StoredUserSecrets(cast("UserRecordStore", store))
        owned_users = None
        if "user_credentials" not in kwargs and \
                any(c.credentials != "shared" for c in read.servers):
            # Servers that act as each user: each identity's tokens in the sealed store.
            from .user_credentials import UserCredentialSources

            oauth_client = kwargs.get("oauth")
            if oauth_client is None:
                raise ConfigurationError("servers that act as each user need the host's "
                                         "OAuth client and its token store")
            owned_users = kwargs["user_credentials"] = UserCredentialSources.from_config(
                read.oauth, read.servers, oauth_client.store)
        if "policy" not in kwargs:
            kwargs["policy"] = read.policy
        if read.max_user_instances is not None:
            kwargs["settings"] = replace(kwargs.get("settings") or HostSettings(),
                                         max_user_instances=read.max_user_instances)
        host = cls(**kwargs)
        host._owned_oauth = owned
        host._owned_pins = owned_pins
        host._owned_store = owned_store
        host._owned_users = owned_users
        host._pending_config = read.servers
        return host

    async def __aenter__(self) -> Self:
        self.telemetry.instruments()  # the servers' gauges exist from the start
        await self._scope.open()
        if self._pending_config:
            configs, self._pending_config = self._pending_config, []
            try:
                await self.add_servers(configs)
            except BaseException:
                await self.aclose()
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        self._bridged.close()
        await self._scope.aclose()
        await self._instances.aclose()
        await self._servers.aclose()
        if self._owned_users is not None:
            await self._owned_users.aclose()
        if self._owned_oauth is not None:
            await self._owned_oauth.aclose()
        if self._owned_pins is not None:
            await self._owned_pins.aclose()
        closing = getattr(self._owned_store, "aclose", None)
        if closing is not None:
            await closing()

    # -- servers -------------------------------------------------------------------------

    async def add_server(
        self,
        name: str,
        transport: TransportParams,
        *,
        allow_legacy: bool = False,
        max_in_flight: int = 1024,
        wait_ready: bool = True,
        call_timeout_s: float | None = None,
        discover_timeout_s: float | None = None,
        max_discover_timeout_s: float | None = None,
        idempotent_tools: Sequence[str] = (),
        enabled_tools: Sequence[str] | None = None,
        disabled_tools: Sequence[str] = (),
        roots: Sequence[str | Root] | None = None,
        credentials: str = "shared",
        **old_names: Any,
    ) -> ServerStatus:
        """Start one server, decide its era, list its tools and merge them. Under the
        ``reject`` policy a tool-name collision stops the new server and raises
        ``ToolCollision`` naming both servers and the tool. ``call_timeout_s`` overrides
        the host's default for this server's calls (a call's own ``timeout`` wins over
        both); ``discover_timeout_s`` the deadline of its ``server/discover`` (a slow
        starter), and ``max_discover_timeout_s`` how far that deadline may grow after
        starts on which the server stayed silent; ``max_in_flight`` bounds its calls in
        flight (beyond, calls wait for a slot within their timeout).
        ``idempotent_tools`` names (by the server's own local names) the tools that are
        safe to repeat, so a call to them may be retried after it may have reached the
        server; a tool's own ``idempotentHint`` is untrusted and never counts.
        ``enabled_tools`` / ``disabled_tools`` (glob patterns of local names) choose the
        tools listed and callable. ``roots`` (``file://`` URIs, or ``Root`` objects) are what
        the server is told its roots are when it asks (declare the ``roots`` capability);
        without them the host's ``roots/list`` handler answers a legacy server, never one
        call's (its roots are its session's, shared by every call). ``credentials``
        (``"shared"``, ``"per_user"``, ``"exchange"``; HTTP servers only beyond the first):
        whose credentials a call made for an identity goes with (``user_credentials``).

        The names of before the unit rule (``call_timeout=``, ``discover_timeout=``,
        ``max_discover_timeout=``, ``max_inflight=``) still work, with a
        ``DeprecationWarning``."""
        unknown = sorted(set(old_names) - set(OLD_SERVER_NAMES))
        if unknown:
            raise TypeError(f"Host.add_server() got an unexpected keyword argument {unknown[0]!r}")
        config = ServerConfig(name, transport, allow_legacy=allow_legacy,
                              idempotent_tools=frozenset(idempotent_tools),
                              call_timeout_s=call_timeout_s,
                              discover_timeout_s=discover_timeout_s,
                              max_discover_timeout_s=max_discover_timeout_s,
                              max_in_flight=max_in_flight, wait_ready=wait_ready,
                              enabled_tools=None if enabled_tools is None
                              else tuple(enabled_tools),
                              disabled_tools=tuple(disabled_tools),
                              roots=None if roots is None else tuple(
                                  r if isinstance(r, Root) else Root(r) for r in roots),
                              credentials=credentials)
        if old_names:
            config = replace(config, **renamed_keywords(old_names, OLD_SERVER_NAMES,
                                                        "Host.add_server"))
        return (await self.add_servers([config]))[0]

    async def add_servers(self, configs: Sequence[ServerConfig]) -> list[ServerStatus]:
        """Start several servers concurrently (their tools' names do not depend on the
        order given: a contested name is prefixed on every server that has it).

        Each server's era verdict and first listing are waited for within their own
        deadlines (``discover_timeout_s``, ``list_timeout_s``), never longer, and no server
        fails another: one that is unavailable, or whose listing fails (``status.
        listing_error`` says why), is left out of the catalog and tried again in the
        background. Only a collision under ``reject`` (the configuration's, not a
        server's fault) raises."""
        await self._scope.open()
        names = [c.name for c in configs]
        per_user = [c for c in configs if c.instances == "per_user"]
        for config in per_user:
            self._instances.add(config)  # refused before anything starts
        self._per_user.update(c.name for c in per_user)
        self._catalog.adding.update(names)  # their first listing is here, not in a callback
        own_credentials = {c.name for c in configs if c.credentials != "shared"}
        if own_credentials and self._credential_slots.user_credentials is not None:
            # Listed by each identity as itself (``user_catalogs``). Without sources for
            # users there is nothing to list as: a call made for an identity fails
            # (``UserCredentialsMissing``), one made for nobody is the host's own.
            self._catalog.per_identity = self._catalog.per_identity | own_credentials
        try:
            await self._servers.add_many(configs)
            await self._catalog.list_ready(names)
        finally:
            self._catalog.adding.difference_update(names)
        try:
            self._catalog.rebuild()
        except ToolCollision:
            self._catalog.drop(names)
            for name in names:
                await self._servers.remove(name)
                await self._instances.remove(name)
                self._per_user.discard(name)
            self._catalog.rebuild()
            raise
        self._catalog.follow(names)
        return [self._servers.handle(name).status() for name in names]

    def servers(self) -> list[ServerStatus]:
        """State, era, version, reason, evidence and counters of every server, in
        configured order; a per-user server's ``instances``: its per-user workers now."""
        statuses = self._servers.statuses()
        if not self._per_user:
            return statuses
        return [replace(s, instances=self._instances.count(s.name))
                if s.name in self._per_user else s for s in statuses]

    @property
    def user_instances(self) -> int:
        """Per-user instances over every server now (``HostSettings.max_user_instances``
        bounds them)."""
        return self._instances.total

    async def retry(self, name: str) -> ServerStatus:
        """Try an unavailable server again (fresh restart budget), or list a ready one
        whose listing failed again now; a server that is ready is listed and merged
        before this returns (or its ``listing_error`` says why not)."""
        return await self._listed_after(name, self._servers.retry(name))

    async def remove_server(self, name: str, *, drain_s: float = 10.0) -> None:
        """Take server ``name`` out of the fleet. From the call on, a new call to it fails
        at once (``ServerUnavailable``: the server was removed from the configuration;
        its state is ``draining``); calls in flight get up to ``drain_s`` seconds to
        finish, then fail (``ServerUnavailable``, never a hang); then its worker (and its
        per-user instances) stop and its tools leave the catalog. An unknown name raises
        ``ServerUnavailable``."""
        handle = self._servers.handle(name)
        handle.retire("the server was removed from the configuration")
        await handle.drain(drain_s)
        await self._instances.remove(name)
        await self._servers.remove(name)  # stopped: its tools leave the catalog
        self._per_user.discard(name)
        self._hinted.discard(name)
        self._catalog.drop([name])
        self._catalog.forget_cache(name)
        self._catalog.per_identity = self._catalog.per_identity - {name}
        self._catalog.rebuild_or_keep()

    async def replace_server(self, config: ServerConfig, *,
                             drain_s: float = 10.0) -> ServerStatus:
        """Run ``config`` as its server's new definition (same name): a new worker starts
        and is negotiated afresh beside the old one, then takes the server's calls and
        its place in the catalog (listed anew; a new command or URL is a new identity,
        so its pins and allowlist are its own); the old worker then drains (its calls
        in flight get up to ``drain_s`` seconds) and stops. Returns the new one's
        status (unavailable, like any server that does not start, is tried again in
        the background)."""
        name = config.name
        self._servers.handle(name)  # an unknown name raises before anything starts
        if config.instances == "per_user":
            self._instances.check(config)  # refused before anything starts
        self._catalog.adding.add(name)
        try:
            new = self._servers.staged(config)
            try:
                await new.start()
            except BaseException:
                new.detach()  # the name is still the old one's: its stop is no news
                await new.aclose()
                raise
            old = self._servers.swap(new)
        except BaseException:
            self._catalog.adding.discard(name)
            raise
        # From here the old worker is no server's: whatever happens, it is stopped here.
        old.detach()
        old.retire("the server's definition was replaced")
        try:
            try:
                self._catalog.replaced(name)
                own = config.credentials != "shared" and self.user_credentials is not None
                self._catalog.per_identity = (self._catalog.per_identity | {name} if own
                                              else self._catalog.per_identity - {name})
                await self._catalog.list_ready([name])
                if new.state is not ServerState.READY or new.listing_error is not None:
                    self._catalog.unlist(name)  # the old definition's tools are not its
            finally:
                self._catalog.adding.discard(name)
            try:
                self._catalog.rebuild()
            except ToolCollision as exc:
                self._catalog.unlist(name)
                new.note_listing(f"its tools were not merged: {exc.message}")
                log.error("server %r: %s", name, new.listing_error, extra={"server": name})
                self._catalog.rebuild_or_keep()
            self._catalog.follow([name])
            await self._instances.remove(name)
            self._per_user.discard(name)
            if config.instances == "per_user":
                self._instances.add(config)
                self._per_user.add(name)
            await old.drain(drain_s)
        finally:
            await old.aclose()
        return new.status()

    async def restart_server(self, name: str) -> ServerStatus:
        """Stop server ``name``'s worker and start a new one (the operator's restart): a
        fresh restart budget, its era negotiated again, its tools listed again before
        this returns. Calls in flight through the old worker fail as on any restart
        (retried as their rules say); new ones wait for the new worker."""
        return await self._listed_after(
            name, self._servers.restart(name, "restarted by the operator"))

    async def _listed_after(self, name: str,
                            started: Coroutine[Any, Any, ServerStatus]) -> ServerStatus:
        """Run ``started`` (a retry or a restart of server ``name``), then, the server
        ready, list it afresh and merge it before returning its status."""
        self._catalog.adding.add(name)
        try:
            status = await started
            if status.state is ServerState.READY:
                self._catalog.forget_cache(name)
                await self._catalog.list_ready([name])
        finally:
            self._catalog.adding.discard(name)
        self._catalog.rebuild_or_keep()
        self._catalog.follow([name])
        return self._servers.handle(name).status()

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Within the block (however many awaits it spans), the catalog's and the
        offerings' watchers are not told of each change: at its end each is told once,
        if anything it watches changed (a reload's many server changes are one
        list-change notification). Blocks nest: the outermost one's end tells."""
        outer = self._held is None
        if outer:
            self._held = _Held(self._catalog.catalog.entries)
        try:
            yield
        finally:
            if outer:
                held, self._held = self._held, None
                assert held is not None
                if held.catalog and (held.forced
                                     or self._catalog.catalog.entries != held.entries):
                    self._tell_catalog(self._catalog.catalog)
                for which, announced in sorted(held.offerings.items()):
                    self._offerings_changed(which, announced=announced)

    @property
    def batching(self) -> bool:
        """Whether a ``batched`` block is under way (its changes not told yet)."""
        return self._held is not None

    def call_timeout(self, name: str | None = None) -> float:
        """The seconds a call to server ``name`` is given when it names none (the server's
        ``call_timeout_s``, else the host's); the host's for no name, or an unknown one."""
        handle = None if name is None else self._servers.get(name)
        return self._calls.call_timeout_s if handle is None else \
            self._calls.timeout_for(handle, None)

    def call_slots(self, name: str) -> int:
        """How many calls server ``name`` takes at once (``ServerConfig.max_in_flight``;
        beyond, calls wait for a slot); for an unknown name, the default's."""
        handle = self._servers.get(name)
        return (handle.config if handle is not None else ServerConfig).max_in_flight

    def call_latency(self, name: str) -> LatencySummary:
        """How many of ``name``'s calls were answered, and the p50/p99 seconds of the
        recent ones (``parent/latency.py``)."""
        return self._servers.handle(name).latency.summary()

    def watch_servers(self, on_change: Callable[[ServerStatus], None]) -> Callable[[], None]:
        """Call ``on_change(status)`` (on the loop, synchronously) when a server is added
        (starting) and whenever its state changes (negotiating, ready, restarting,
        unavailable with its reason, stopped) or, while it is down, its reason does (the
        next attempt decided); may be called before the host is entered,
        to follow its servers as they come up. Returns the function that stops it."""
        self._server_watchers.append(on_change)
        return lambda: self._server_watchers.remove(on_change) \
            if on_change in self._server_watchers else None

    def _on_server_state(self, handle: WorkerHandle) -> None:
        self.telemetry.server_state(handle)
        if self._server_watchers:
            status = handle.status()
            for watcher in list(self._server_watchers):
                try:
                    watcher(status)
                except Exception:  # one watcher must not break the host
                    log.exception("a server watcher failed")
        if handle.state in (ServerState.READY, ServerState.UNAVAILABLE):
            self._say_hint(handle)
        if not self._closed:
            self._catalog.on_server_state(handle)
            self._offerings_moved(handle)

    def _say_hint(self, handle: WorkerHandle) -> None:
        """A refusal the operator can lift is logged when it is first known; one the
        server's own state ended (ready, or refused otherwise) may be said again."""
        warning = ServerWarning.of(handle.status())
        if warning is None:
            self._hinted.discard(handle.name)
        elif handle.name not in self._hinted:
            self._hinted.add(handle.name)
            log.warning("%s", warning, extra={"server": handle.name})

    def _on_list_changed(self, handle: WorkerHandle, which: str) -> None:
        self.telemetry.list_changed(handle.name, which)
        if not self._closed:
            self._catalog.on_list_changed(handle, which)
            if which in OFFERINGS:
                self._offerings_changed(which, announced=True)

    # -- prompts and resources -------------------------------------------------------------

    def watch_offerings(self, on_change: Callable[[str], None], *,
                        on_moved: Callable[[str], None] | None = None
                        ) -> Callable[[], None]:
        """Call ``on_change(which)`` (``"prompts"`` or ``"resources"``; on the loop,
        synchronously) when a server announced that that list of its changed, and when a
        server declaring it became ready or stopped being ready: the fleet's list may not
        be what it was. With ``on_moved``, the second (a server came or went, and nobody
        said its list changed) is told to it instead, so that whoever serves the lists may
        list them again and compare. Within ``batched`` each list is told once, to
        ``on_change`` if any server announced a change of it. The host keeps no such list
        (``request`` asks the servers for them); this tells whoever serves them. Returns
        the function that stops the watching."""
        watcher = (on_change, on_moved)
        self._offering_watchers.append(watcher)
        return lambda: self._offering_watchers.remove(watcher) \
            if watcher in self._offering_watchers else None

    def _offerings_moved(self, handle: WorkerHandle) -> None:
        capabilities = (handle.report.capabilities if handle.report else None) or {}
        offered = frozenset(which for which in OFFERINGS if capabilities.get(which) is not None) \
            if handle.state is ServerState.READY else frozenset()
        before = self._offered.pop(handle.name, frozenset())
        if offered:
            self._offered[handle.name] = offered
        for which in sorted(before ^ offered):
            self._offerings_changed(which, announced=False)

    def _offerings_changed(self, which: str, *, announced: bool) -> None:
        """Tell the watchers list ``which`` changed: ``announced`` by a server, or may
        have, a server having come or gone."""
        if self._held is not None:
            self._held.offerings[which] = self._held.offerings.get(which, False) or announced
            return
        for on_change, on_moved in list(self._offering_watchers):
            try:
                (on_change if announced or on_moved is None else on_moved)(which)
            except Exception:  # one watcher must not break the host
                log.exception("an offerings watcher failed")

    # -- the catalog ---------------------------------------------------------------------

    def tools(self, *, identity: Identity | None = None) -> list[ToolEntry]:
        """The merged catalog as last listed (no I/O); with a policy, the tools
        ``identity`` may list (none given: ``local``); where some servers act as each
        user, of the identity's own catalog (``lists_per_identity``)."""
        if not self.access.active and not self._catalog.per_identity:
            return self._catalog.tools()
        return list(self.access.tools_visible(identity, self._catalog_of(identity).entries))

    def _catalog_of(self, identity: Identity | None) -> Catalog:
        """The catalog ``identity`` is listed and routed by as last built: the shared one,
        or where some servers act as each user, its own (``user_catalogs``)."""
        if self._catalog.per_identity:
            own = self._user_catalogs.cached(identity or LOCAL)
            if own is not None:
                return own
        return self._catalog.catalog

    def set_policy(self, policy: Policy | None) -> None:
        """Decide by ``policy`` from now on (None: no policy). Calls already admitted
        finish under the policy that admitted them; every catalog watcher is told, since
        what each identity sees may have changed."""
        self.access.replace(policy)
        self._tell_catalog(self._catalog.catalog, forced=True)

    @property
    def catalog(self) -> Catalog:
        return self._catalog.catalog

    @property
    def warnings(self) -> list[ServerWarning | CatalogWarning]:
        """What the operator may want to act on: a ``ServerWarning`` for each server
        refused for want of the legacy allowlist (with the fix), and for each whose tools
        could not be listed (why), then the catalog's ``CatalogWarning``s (what it worked
        around in the listed servers' tools). Both have ``server``, ``kind``, ``message``
        and ``tool``, and read well as ``str``."""
        statuses = self.servers()
        refused = [w for w in map(ServerWarning.of, statuses) if w is not None]
        unlisted = [w for w in map(ServerWarning.of_listing, statuses) if w is not None]
        return [*refused, *unlisted, *self._catalog.warnings]

    def watch_catalog(self, on_change: Callable[[Catalog], None]) -> Callable[[], None]:
        """Call ``on_change(catalog)`` (on the loop, synchronously) whenever the merged
        catalog changes: a server's tools changed, a server came, went or came back; and
        when a server announced that its tools changed (``list_changed``), once they are
        listed again, even if the merged catalog came out the same (a tool added and
        removed again: whoever relays the announcement still makes it). Returns the
        function that stops the watching."""
        self._catalog_watchers.append(on_change)
        return lambda: self._catalog_watchers.remove(on_change) \
            if on_change in self._catalog_watchers else None

    def _on_rebuilt(self, announced: bool) -> None:
        self._results.forget()
        self.access.forget()
        catalog = self._catalog.catalog
        if catalog.entries == self._last_entries and not announced:
            return  # rebuilt, but nothing a client could see changed, nor was it said to
        self._last_entries = catalog.entries
        self._tell_catalog(catalog, forced=announced)

    def _tell_catalog(self, catalog: Catalog, *, forced: bool = False) -> None:
        """Every catalog watcher is told (``forced``: even if the entries came out the
        same: a server announced a change, the policy or an identity's catalog changed),
        or while ``batched``, will be at its end."""
        held = self._held
        if held is not None:
            held.catalog = True
            held.forced = held.forced or forced
            return
        for watcher in list(self._catalog_watchers):
            try:
                watcher(catalog)
            except Exception:  # one watcher must not break the catalog
                log.exception("a catalog watcher failed")

    def search_tools(self, query: str, *, limit: int = DEFAULT_LIMIT,
                     identity: Identity | None = None) -> list[ToolMatch]:
        """The ``limit`` tools of ``tools()`` that best match ``query`` (BM25 over names,
        titles, descriptions and parameter names; ``catalog/search.py``), best first, each
        a ``ToolMatch`` (``.entry``, ``.name`` the model calls, ``.server``, ``.score``).
        No I/O: it searches the catalog as last listed. With a policy, only tools
        ``identity`` may list are found (a search never reveals another)."""
        if not self.access.active:
            return self._search.search(query, limit)
        view = self.access.view(identity)
        # Every match, to keep ``limit`` the identity may list (a bad ``limit`` passes on
        # as it is, for the index to refuse as it does without a policy).
        everything = limit if isinstance(limit, bool) or not isinstance(limit, int) or \
            limit < 1 else max(limit, len(self._catalog.catalog.entries))
        found = self._search.search(query, everything)
        return [m for m in found
                if type(self.access.tool_verdict(view, m.entry).listed) is Allowed][:limit]

    async def list_tools(self, *, identity: Identity | None = None) -> list[ToolEntry]:
        """The merged catalog, refetching (lazily, now that it is needed) every listing
        whose TTL has passed; for ``identity`` (none given: ``local``) as ``tools`` says,
        with its own listings of the servers that act as each user made first
        (``user_catalogs``)."""
        await self._catalog.list_stale()
        if self._catalog.per_identity:
            await self._user_catalogs.catalog_for(identity or LOCAL)
        return self.tools(identity=identity)

    async def _holds_credential(self, server: str, identity: Identity) -> bool:
        """Whether ``identity`` has a credential of its own at ``server`` now."""
        users = self._credential_slots.user_credentials
        url = getattr(self._servers.handle(server).config.params, "url", None)
        if users is None or not isinstance(url, str):
            return False
        try:
            return await users.source_for(server, identity).authorization_for(url) is not None
        except AuthorizationFailed:
            return False

    def _user_catalog_changed(self, identity: Identity) -> None:
        """An identity's own catalog changed (it signed in): the catalog's watchers look
        again at what each of their identities sees."""
        self._tell_catalog(self._catalog.catalog, forced=True)

    async def refresh_tools(self, server: str | None = None) -> list[ToolEntry]:
        """Re-list one server (or all) now, whatever the TTL says, e.g. after the server
        reported a list change."""
        await self._catalog.refresh([server] if server is not None else self._servers.names())
        return self.tools()

    async def approve_tool(self, server: str, tool: str) -> None:
        """Approve the quarantined definition of ``tool`` (the server's own name for it):
        it becomes the tool's pin and enters the catalog. Raises ``UnknownTool`` when no
        definition of it waits for approval (or it is over a bound, which no approval
        lifts)."""
        await self._catalog.approve(server, tool)

    def quarantined(self) -> list[Quarantine]:
        """The quarantined tools of the listed servers, each saying why."""
        return self._catalog.quarantined()

    def pin_record(self, server: str) -> PinRecord | None:
        """``server``'s pins as its last listing left them: the approved definition of each
        tool, and the one waiting for approval (``approve_tool``); None before it was
        listed."""
        return self._catalog.pin_record(server)

    # -- calls ---------------------------------------------------------------------------

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        log_level: str | None = None,
        idempotent: bool | None = None,
        idempotency_key: str | bool | None = None,
        call_input: CallInput | None = None,
        on_log: Callable[[dict[str, Any]], None] | None = None,
        trace_context: Mapping[str, str] | None = None,
        on_status: Callable[[TaskStatus], None] | None = None,
        identity: Identity | None = None,
    ) -> Coroutine[Any, Any, CallToolResult]:
        """Call a tool by its canonical name (or model-safe alias): a coroutine to await
        (or to run as a task). JSON-RPC errors raise ``ServerError``; ``isError`` results
        are returned. A bad name or argument raises when it is awaited, like the rest.

        ``on_progress(progress, total, message)`` receives the server's progress
        notifications for this call only (a ``progressToken`` unique to the call is sent
        in ``_meta``). ``log_level`` asks a modern server to send log messages at that
        level or above for this call (``io.modelcontextprotocol/logLevel``); they reach
        ``on_log(params)`` when given (over stdio only while this call's request is the
        server's one request in flight: a log message names no request), else the host's
        ``on_log``.

        A call that failed before it left the host (its server restarting) is sent again
        once the server is back. After it may have reached the server (transport lost,
        timeout) it is retried only if it is idempotent: ``idempotent=True`` here, or the
        tool listed in the server's ``idempotent_tools``. ``idempotency_key`` (a string, or
        ``True`` for a generated one) is carried in ``_meta`` under
        ``dev.trunkline/idempotencyKey``, identical on every retry, so a server that knows
        it can deduplicate. Every retry is a new JSON-RPC request with a new id.

        ``call_input`` gives this call its own input-round handlers. A call whose rounds
        go back to its caller is ``call_tool_relayed``'s (``CallInput(relay=True)`` here
        still relays, deprecated).

        ``trace_context`` is a W3C trace context the call continues (``traceparent``,
        ``tracestate``, ``baggage``: those keys only, strings, else ``ValueError`` /
        ``TypeError``). With tracing off it goes to the server as it is, in ``_meta``
        (this host is no hop of the trace); a malformed ``traceparent`` (and its
        ``tracestate``) or a value over 8,192 characters is dropped, never forwarded
        (``telemetry.carried``). With tracing on, the call's span is its child (instead
        of the current span's), and the span's context goes.

        A server may run the call as a task (MCP tasks: a modern server that declared
        ``io.modelcontextprotocol/tasks``, or a legacy one for a tool whose
        ``taskSupport`` is ``required``): the call then waits for the task's end within
        its timeout, ``on_status(TaskStatus)`` told its first status and each change,
        the input it asks for answered by the call's (else the host's) handlers. A
        caller that stops waiting (the timeout, a cancellation) cancels the task on its
        server. ``start_tool`` takes the task instead.

        ``identity``: who the call is made for, when the host has a policy (none given:
        ``local``); a tool it may not see raises ``ToolHidden``, one it may not call
        ``NotPermitted``, before anything is sent. A call of a per-user server's tool
        (``instances="per_user"``) goes to ``identity``'s own instance of it (none, or
        ``local``: the shared one); ``InstanceLimitReached`` when none can start."""
        if call_input is not None and call_input.relay and not self._relaying:
            warn_deprecated("call_tool(call_input=CallInput(relay=True)) is deprecated: "
                            "use call_tool_relayed, which may return InputRequired")
        # Not a coroutine function itself: the call's own coroutine (its slots') is what
        # the caller awaits, with no frame of this one between while it is in flight (each
        # call in flight holds as few objects as it can; the collector walks them).
        request = CallRequest(  # in field order (see CallRequest)
            "tools/call", name, arguments, timeout, idempotent, idempotency_key,
            on_progress, log_level, on_log, call_input)
        if on_status is not None:
            request.on_status = on_status
        if identity is not None:
            request.identity = identity
        return self._routed(request, trace_context)

    def _routed(self, request: CallRequest, trace_context: Mapping[str, str] | None
                ) -> Coroutine[Any, Any, Any]:
        """A ``tools/call`` on its way: a resumed bridged round to its call, a call whose
        server's tools are being listed again (or a bridged one) to ``_call_screened``,
        any other to its server's call path. Not a coroutine itself (see ``call_tool``);
        what is wrong with the call raises where it is awaited."""
        call_input = request.call_input
        if call_input is not None and BridgedCalls.claims(call_input.request_state):
            return self._bridged.resume(call_input.request_state, ("tools/call", request.name),
                                        call_input.responses)
        if self._catalog.per_identity:
            if request.identity is None:
                request.identity = LOCAL  # the person at this host: its own credentials
            return self._user_calls.call(
                request, cast("Identity", request.identity),
                lambda catalog, entry: self._routed_in(catalog, request, trace_context, entry))
        return self._routed_in(self._catalog.catalog, request, trace_context)

    def _routed_in(self, catalog: Catalog, request: CallRequest,
                   trace_context: Mapping[str, str] | None,
                   found: ToolEntry | None = None) -> Coroutine[Any, Any, Any]:
        """``_routed``, the tool looked up in ``catalog`` (``found``: already, there)."""
        name, arguments, call_input = request.name, request.arguments, request.call_input
        log_level, on_log = request.log_level, request.on_log
        try:
            if self.access.active:
                entry = self._permitted(name, arguments, request.identity, catalog)
            else:
                entry = found if found is not None else self._entry(name, catalog)
            # A dict needs no ABC check (the common case, and the check is not free).
            if type(arguments) is not dict and arguments is not None and not isinstance(
                    arguments, Mapping):
                raise TypeError("arguments must be a mapping")
            if log_level is not None or on_log is not None:
                _check_logs(log_level, on_log)
            if trace_context is not None:
                request.trace_context = carried(trace_context)
            settling = self._catalog.settling(entry.server)
            handle = None if settling else self._servers.handle(entry.server)
        except Exception as exc:  # noqa: BLE001 - raised where the caller awaits
            return raising(exc)
        if settling or (call_input is not None and call_input.relay and handle is not None
                        and _bridged(handle, call_input)):
            return self._call_screened(request)
        assert handle is not None
        request.entry = entry
        identity = request.identity
        if self._per_user and entry.server in self._per_user and _own_instance(identity):
            return self._on_instance(entry.server, identity,
                                     lambda own: self._calls.call_tool(own, request))
        return self._calls.call_tool(handle, request)

    async def _on_instance(self, server: str, identity: Identity,
                           work: Callable[[WorkerHandle], Coroutine[Any, Any, Any]]) -> Any:
        """``work`` on ``identity``'s own instance of per-user ``server`` (started for
        it if it has none: ``InstanceLimitReached`` at a bound), counted in use
        meanwhile."""
        handle = self._servers.handle(server)
        if handle.state is ServerState.DRAINING:
            raise ServerUnavailable(handle.unavailable_message(), state=handle.state.value,
                                    server=server, sent=False)
        instance = self._instances.enter(server, identity)
        try:
            return await work(await self._instances.ready(instance))
        finally:
            self._instances.leave(instance)

    def call_tool_relayed(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_input: CallInput,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        log_level: str | None = None,
        idempotent: bool | None = None,
        idempotency_key: str | bool | None = None,
        on_log: Callable[[dict[str, Any]], None] | None = None,
        trace_context: Mapping[str, str] | None = None,
        identity: Identity | None = None,
    ) -> Coroutine[Any, Any, CallToolResult | InputRequired]:
        """``call_tool`` for a caller that answers the call's input rounds itself (a
        gateway, whose client does): with ``CallInput(relay=True)`` an ``input_required``
        result comes back as ``InputRequired`` (the server's ``inputRequests`` and
        ``requestState``), and the caller's next call carries the answers in its
        ``call_input`` (``responses``, ``request_state``). A legacy server asks with
        requests of its own instead: for a relayed call they become the same rounds
        (``parent.input_bridge``), the call staying in flight until the caller's next
        call, with the answers and the round's ``requestState``. Any other ``call_input``
        (handlers of the call's own) is as ``call_tool`` takes it."""
        # ``call_tool`` itself (one frame fewer on every call), told that its relay is
        # this entry's: not the deprecated form. It only builds the call's coroutine, so
        # nothing else runs while the flag is up.
        self._relaying = True
        try:
            return self.call_tool(name, arguments, timeout=timeout, on_progress=on_progress,
                                  log_level=log_level, idempotent=idempotent,
                                  idempotency_key=idempotency_key, call_input=call_input,
                                  on_log=on_log, trace_context=trace_context,
                                  identity=identity)
        finally:
            self._relaying = False

    async def start_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        call_input: CallInput | None = None,
        on_progress: ProgressCallback | None = None,
        log_level: str | None = None,
        on_log: Callable[[dict[str, Any]], None] | None = None,
        trace_context: Mapping[str, str] | None = None,
        identity: Identity | None = None,
    ) -> ToolTask | CallToolResult:
        """Call a tool and take the task its server runs it as (MCP tasks) instead of
        waiting for its end: a ``ToolTask`` (its ``task_id``, ``status``, ``wait()``,
        ``cancel()``, ``respond()``), or the ``CallToolResult`` itself when the server
        answered at once. A legacy server is asked to run the call as a task whenever the
        tool allows it (``taskSupport`` ``optional`` or ``required``); a modern one
        decides itself. ``timeout`` bounds the call that starts the task, not the task;
        the input the task asks for goes to ``call_input``'s handlers, else the host's.
        ``on_progress``, ``log_level`` and ``on_log`` are the starting call's, as
        ``call_tool`` takes them. With ``CallInput(relay=True)`` the task's input is kept
        in ``status.input_requests`` for ``respond``; a caller whose input may be asked
        before the task exists (a gateway's client) uses ``start_tool_relayed``, which
        returns those rounds.

        ``call_tool`` on such a tool waits for the task itself (within its timeout; a
        caller that stops waiting cancels the task upstream)."""
        result: ToolTask | CallToolResult = await self._start(
            name, arguments, timeout, call_input, on_progress, log_level, on_log,
            trace_context, identity)
        return result

    async def start_tool_relayed(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_input: CallInput,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        log_level: str | None = None,
        on_log: Callable[[dict[str, Any]], None] | None = None,
        trace_context: Mapping[str, str] | None = None,
        identity: Identity | None = None,
    ) -> ToolTask | CallToolResult | InputRequired:
        """``start_tool`` for a caller that answers the call's input itself (a gateway,
        whose client does), as ``call_tool_relayed`` is ``call_tool``'s: with
        ``CallInput(relay=True)`` the rounds before the server answers (with a task, or
        at once) come back as ``InputRequired``, and the caller's next call carries the
        answers; the input the task asks for later is kept in its
        ``status.input_requests`` for ``ToolTask.respond``."""
        result: ToolTask | CallToolResult | InputRequired = await self._start(
            name, arguments, timeout, call_input, on_progress, log_level, on_log,
            trace_context, identity)
        return result

    def _start(self, name: str, arguments: Mapping[str, Any] | None, timeout: float | None,
               call_input: CallInput | None, on_progress: ProgressCallback | None,
               log_level: str | None, on_log: Callable[[dict[str, Any]], None] | None,
               trace_context: Mapping[str, str] | None, identity: Identity | None
               ) -> Coroutine[Any, Any, Any]:
        """The call of ``start_tool`` and ``start_tool_relayed``: one whose task is the
        caller's (``detached``)."""
        request = CallRequest(  # in field order (see CallRequest)
            "tools/call", name, arguments, timeout, None, None, on_progress, log_level,
            on_log, call_input, identity=identity, detached=True)
        return self._routed(request, trace_context)

    def resume_task(self, tool: str, task_id: str, *,
                    call_input: CallInput | None = None,
                    identity: Identity | None = None) -> ToolTask:
        """Follow again a task started earlier (``ToolTask.task_id``, of a call of
        ``tool``), for a caller that stopped waiting or a host that restarted: its
        server is asked about it at once, and ``wait()`` ends with ``TaskLost`` if the
        server no longer knows it. Raises ``ValueError`` if the tool's server runs no
        tasks. ``identity``: who the call that started it was made for (its credentials
        are the ones the task is asked about with, as ``user_credentials`` says)."""
        entry = self._entry(tool)
        handle = self._servers.handle(entry.server)
        if handle.task_mode is None:
            raise ValueError(f"server {entry.server!r} runs no tasks (it is not ready, or "
                             "declared no task support)")
        rounds = None if call_input is not None and call_input.relay else (
            self._calls.input_rounds.for_call(call_input))
        checked = self._results.to_result
        return handle.tasks.follow(
            TaskView(task_id, "working"), tool=tool, rounds=rounds,
            legacy=handle.task_mode == "legacy", resumed=True, identity=identity,
            finish=lambda result, raw: checked(entry, result, raw))

    async def _call_screened(self, request: CallRequest) -> Any:
        """A call whose server's tools are being listed again (made once they are), or a
        relayed call to a legacy server (bridged: its questions become rounds)."""
        name = request.name
        entry, left = await self._screened_entry(name, request.timeout)
        if left is not None:
            request.timeout = left
        request.entry = entry
        identity = request.identity
        if self._per_user and entry.server in self._per_user and _own_instance(identity):
            return await self._on_instance(entry.server, identity,
                                           lambda own: self._call_on(own, request))
        return await self._call_on(self._servers.handle(entry.server), request)

    async def _call_on(self, handle: WorkerHandle, request: CallRequest) -> Any:
        """A screened call on ``handle``'s worker, bridged when it is relayed to a legacy
        server."""
        name = request.name
        call_input = request.call_input
        if call_input is None or not call_input.relay or not _bridged(handle, call_input):
            return await self._calls.call_tool(handle, request)
        return await self._bridged.start(
            lambda bridged: self._calls.call_tool(
                handle, msgspec.structs.replace(request, call_input=bridged)),
            dict(call_input.capabilities or {}), ("tools/call", name), handle.name,
            self._calls.timeout_for(handle, request.timeout))

    async def _relist_for_call(self, server: str, tool: str) -> None:
        """A call's server says the tool's definition changed: re-list it; the call is
        sent again only if the tool is still admitted."""
        await self.refresh_tools(server)
        withheld = self._catalog.withheld_on(server, tool)
        if withheld is not None:
            raise withheld

    def _entry(self, name: str, catalog: Catalog | None = None) -> ToolEntry:
        """The catalog's entry for ``name`` now (no await: the common case costs no
        coroutine per call); ``catalog``: an identity's own, not the shared one."""
        try:
            return (self._catalog.catalog if catalog is None else catalog).lookup(name)
        except KeyError:
            withheld = self._catalog.withheld(name)
            if withheld is not None:
                raise withheld from None
            raise self._unknown_tool(name) from None

    def _permitted(self, name: str, arguments: Mapping[str, Any] | None,
                   identity: Any, catalog: Catalog | None = None) -> ToolEntry:
        """The entry of a tool ``identity`` may call now, under the policy: a tool it may
        not list is as unknown as one that is not there (no candidates, no quarantine
        named: that it exists is not the identity's to learn), one it may list but not
        call is ``NotPermitted``."""
        try:
            entry = (self._catalog.catalog if catalog is None else catalog).lookup(name)
        except KeyError:
            raise UnknownTool(_unknown_message(name), method="tools/call") from None
        decision = self.access.may_call_tool(identity, entry, arguments)
        if type(decision) is Allowed:
            return entry
        assert isinstance(decision, Denied)
        if decision.hidden:
            raise ToolHidden(_unknown_message(name), rule=decision.rule, method="tools/call")
        raise NotPermitted(f"calling tool {name!r} is not permitted", tool=name,
                           rule=decision.rule, method="tools/call")

    def _unknown_tool(self, name: str) -> UnknownTool:
        """``name`` is served by no ready server: the error names the servers not ready
        that could serve it (``CatalogKeeper.unserved_owners``), and why they are not."""
        candidates = []
        for server, listed in self._catalog.unserved_owners(name):
            status = self._servers.handle(server).status()
            candidates.append(ToolCandidate(server, status.state.value,
                                            status.reason or status.listing_error,
                                            status.hint, listed))
        message = _unknown_message(name)
        named = [str(c) for c in candidates[:_CANDIDATES_NAMED]]
        if len(candidates) > _CANDIDATES_NAMED:
            named.append(f"{len(candidates) - _CANDIDATES_NAMED} more servers not ready "
                         "could serve it")
        if named:
            message += "; " + "; ".join(named)
        return UnknownTool(message, method="tools/call", candidates=candidates)

    async def _screened_entry(self, name: str, timeout: float | None
                             ) -> tuple[ToolEntry, float | None]:
        """The catalog's entry for ``name`` once the changes its server announced before
        now are screened (so a tool whose definition just changed is never called), and
        what is left of the call's timeout after that wait (None: it did not wait).
        Changes announced later do not hold it: each server is waited for once."""
        entry = self._entry(name)
        if not self._catalog.settling(entry.server):
            return entry, None
        loop = asyncio.get_running_loop()
        total = self._calls.timeout_for(self._servers.handle(entry.server), timeout)
        deadline = loop.time() + total
        waited: set[str] = set()
        while self._catalog.settling(entry.server) and entry.server not in waited:
            waited.add(entry.server)
            try:
                await asyncio.wait_for(self._catalog.screened(entry.server),
                                       deadline - loop.time())
            except TimeoutError:
                raise RequestTimeout(
                    f"the server's tools were not listed again within {total:g} s of the "
                    "change it announced", timeout_s=total, server=entry.server,
                    method="tools/call", sent=False) from None
            entry = self._entry(name)  # the new screening's (it may refuse the call)
        return entry, max(deadline - loop.time(), 0.001)

    async def request(self, server: str, method: str,
                      params: Mapping[str, Any] | None = None, *,
                      timeout: float | None = None,
                      call_input: CallInput | None = None,
                      log_level: str | None = None,
                      on_log: Callable[[dict[str, Any]], None] | None = None,
                      trace_context: Mapping[str, str] | None = None,
                      identity: Identity | None = None) -> Any:
        """Any request that only reads (``prompts/list``, ``resources/templates/list``,
        ``completion/complete``, ...) to one server: retried after transport loss or a
        timeout, its input rounds completed (or relayed), its log messages given to
        ``on_log``, its ``trace_context`` continued, as ``call_tool`` says (over a
        ``_meta`` one in ``params``); the result as sent. JSON-RPC errors raise
        ``ServerError``. ``identity``: who it is made for (no policy decision: the caller
        made that): to a per-user server it goes to that identity's own instance (as
        ``call_tool`` does); to a server whose ``credentials`` mode is not ``"shared"``,
        with that identity's own credentials (``user_credentials``)."""
        _check_logs(log_level, on_log)
        handle = self._servers.handle(server)
        if self._per_user and server in self._per_user and _own_instance(identity):
            return await self._on_instance(server, identity, lambda own: self._read(
                own, method, params, timeout, call_input, log_level, on_log, trace_context,
                identity))
        return await self._read(handle, method, params, timeout, call_input, log_level,
                                on_log, trace_context, identity)

    async def _read(self, handle: WorkerHandle, method: str,
                    params: Mapping[str, Any] | None, timeout: float | None,
                    call_input: CallInput | None, log_level: str | None,
                    on_log: Callable[[dict[str, Any]], None] | None,
                    trace_context: Mapping[str, str] | None,
                    identity: Identity | None) -> Any:
        """``request``'s work, on ``handle``'s worker."""
        server = handle.name
        request = CallRequest(method=method, arguments=params, timeout=timeout,
                              call_input=call_input, log_level=log_level, on_log=on_log,
                              trace_context=None if trace_context is None
                              else carried(trace_context), identity=identity)
        if call_input is not None and call_input.relay and method in MRTR_METHODS:
            body = params or {}
            target = (method, server, str(body.get("uri", body.get("name"))))
            if BridgedCalls.claims(call_input.request_state):
                return await self._bridged.resume(call_input.request_state, target,
                                                  call_input.responses)
            if _bridged(handle, call_input):
                return await self._bridged.start(
                    lambda bridged: self._calls.read(
                        handle, msgspec.structs.replace(request, call_input=bridged)),
                    dict(call_input.capabilities or {}), target, server,
                    self._calls.timeout_for(handle, timeout))
        return await self._calls.read(handle, request)

    @property
    def lists_per_identity(self) -> bool:
        """Whether some servers are listed by each identity as itself (their credentials
        are each user's): ``tools(identity=...)`` then differs by identity, and
        ``list_tools(identity=...)`` makes what it lacks."""
        return bool(self._catalog.per_identity)

    def acts_as_each_user(self, server: str) -> bool:
        """Whether ``server`` is reached with each identity's own credentials and listed
        by each identity as itself (its ``credentials`` is not ``"shared"``)."""
        return server in self._catalog.per_identity

    @property
    def user_credentials(self) -> UserCredentials | None:
        """Each user's own credential sources (``Host(user_credentials=...)``), if any."""
        return self._credential_slots.user_credentials

    def forget_credentials(self, identity: Identity) -> bool:
        """Drop what every worker holds of ``identity``'s own credentials (they were
        revoked, or the user signed out): its header is never sent again, and its next
        call asks its credential source afresh. Whether it had any."""
        return self._credential_slots.forget(identity) is not None

    async def forget_user(self, identity: Identity, *, server: str | None = None) -> None:
        """Drop everything held in memory for ``identity``, whose credentials were revoked
        (``auth.held_credentials.revoke_user`` took them out of the store): every worker's
        header for it (``forget_credentials``), its credential sources' clients and tokens
        (``UserCredentialSources.forget``), its own catalog, and its per-user instances (of
        ``server`` only, when named), whose environment holds its secrets. Its next
        listing is made afresh, so a server it holds no credential at any more offers
        its ``sign_in`` again; the catalog's watchers are told its catalog changed."""
        self.forget_credentials(identity)
        forget = getattr(self.user_credentials, "forget", None)
        if forget is not None:
            await forget(identity)
        await self._instances.stop_identity(identity, server)
        self._user_catalogs.forget(identity)
        self._user_catalog_changed(identity)

    @property
    def user_store(self) -> FileStore | RedisStore | None:
        """The token store this host keeps users' records in (``from_config``: the
        configuration's ``"oauth"`` ``store``), where they are listed and revoked; None
        when it made none."""
        if self._owned_oauth is not None:
            return cast("FileStore | RedisStore", self._owned_oauth.store)
        return cast("FileStore | RedisStore | None", self._owned_store)

    def server_configs(self) -> dict[str, ServerConfig]:
        """Each server's configuration now, by name, in configured order."""
        return {name: self._servers.handle(name).config for name in self._servers.names()}

    def subscribe_resource(self, server: str, uri: str,
                           on_updated: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``on_updated(params)`` (``{"uri": ...}``, on the loop) whenever ``server``
        says the resource ``uri``, or a sub-resource of it, changed; returns the function
        that stops it. The server is subscribed once however many watch one URI (a modern
        server on its ``subscriptions/listen`` stream, a legacy one with
        ``resources/subscribe``), and again after each restart; updates missed while it was
        down are not replayed (read the resource again when it is back). A server that
        declared no ``resources.subscribe`` is refused (``ValueError``)."""
        return self.subscribe_resources(server, (uri,), on_updated)

    def subscribe_resources(self, server: str, uris: Iterable[str],
                            on_updated: Callable[[dict[str, Any]], None]
                            ) -> Callable[[], None]:
        """``subscribe_resource`` for many URIs of one server at once, as one change for
        its worker (a modern server's listen stream opened again once, a legacy one
        subscribed to each new URI); returns the one function that stops them all."""
        handle = self._servers.handle(server)
        declared = handle.status().capabilities
        if declared is not None and not can_subscribe(declared):
            raise ValueError(f"server {server!r} offers no resource subscriptions")
        return handle.resources.watch(uris, on_updated)

    async def read_resource(self, server: str, uri: str, *, timeout: float | None = None,
                            identity: Identity | None = None) -> dict[str, Any]:
        """``resources/read`` on one server; the result (``contents``) as sent. With a
        policy, a resource ``identity`` may not read raises ``NotPermitted`` before
        anything is sent."""
        self._may_use(identity, Item("resource", server, uri), "resources/read")
        return await self.request(server, "resources/read", {"uri": uri}, timeout=timeout,
                                  identity=identity)

    async def get_prompt(self, server: str, name: str, arguments: Mapping[str, str] | None = None,
                         *, timeout: float | None = None,
                         identity: Identity | None = None) -> dict[str, Any]:
        """``prompts/get`` on one server; the result (``messages``) as sent. With a
        policy, a prompt ``identity`` may not use raises ``NotPermitted`` first."""
        self._may_use(identity, Item("prompt", server, name), "prompts/get")
        body: dict[str, Any] = {"name": name}
        if arguments:
            body["arguments"] = dict(arguments)
        return await self.request(server, "prompts/get", body, timeout=timeout,
                                  identity=identity)

    def _may_use(self, identity: Identity | None, item: Item, method: str) -> None:
        """Raise ``NotPermitted`` unless the policy lets ``identity`` use ``item`` (the
        caller is the application, which may know what exists: hidden and refused alike)."""
        if not self.access.active:
            return
        decision = self.access.may_call(identity, item)
        if isinstance(decision, Denied):
            raise NotPermitted(f"using {item.kind} {item.name!r} is not permitted",
                               tool=item.name, rule=decision.rule, server=item.server,
                               method=method)

    # -- skills (MCP's skills extension, io.modelcontextprotocol/skills) -------------------

    async def list_skills(self, server: str | None = None, *,
                          timeout: float | None = None) -> list[SkillEntry]:
        """The skills ``server`` serves (every page of its ``skills/list``), or with no
        server those of every ready server that declared the extension, as one list: each
        a ``SkillEntry`` (its server, ``SKILL.md`` URI, frontmatter, files with their
        digests and sizes) under a ``name`` unique in the list (``catalog/skills.py``: a
        skill's path, ``<server>_<path>`` where two servers serve the same path). Only
        entries are fetched, never a file. A server that did not declare the extension
        is refused (``ValueError``); in the merged list a server whose listing fails is
        left out (logged)."""
        return await self._skills.listing(server, timeout)

    async def get_skill(self, server: str, uri: str, *,
                        timeout: float | None = None) -> SkillEntry:
        """The entry of the skill whose ``SKILL.md`` is ``uri`` on ``server``
        (``skills/get``): for a skill given by URI only (the server's instructions named
        it, it was left out of a partial listing), or to refresh one whose file no longer
        matches. A URI the server serves no skill at is its error (``ServerError``,
        -32602)."""
        return await self._skills.get(server, uri, timeout)

    async def load_skill(self, skill: SkillEntry, *, dynamic: bool = False,
                         timeout: float | None = None) -> SkillFile:
        """The skill's ``SKILL.md``, read now (``resources/read``) and returned only if it
        is what the entry describes: its size, its SHA-256 digest, and its YAML
        frontmatter field by field; else ``SkillVerificationFailed`` (the content is not
        returned). A skill whose files are ``"dynamic"`` (no digests) is read only with
        ``dynamic=True``, its frontmatter still checked."""
        return await self._skills.read(skill, skill.uri, dynamic, timeout)

    async def read_skill_file(self, skill: SkillEntry, path: str, *, dynamic: bool = False,
                              timeout: float | None = None) -> SkillFile:
        """One file of the skill, by its path relative to the skill's root
        (``references/FORMS.md``) or its URI, read now and checked against the entry as
        ``load_skill`` says. A file the entry does not list is not read
        (``SkillVerificationFailed``, kind ``unlisted``)."""
        return await self._skills.read(skill, path, dynamic, timeout)

    async def read_skill_directory(self, server: str, uri: str, *,
                                   timeout: float | None = None) -> list[dict[str, Any]]:
        """The direct children of a directory of ``server``'s skills
        (``resources/directory/read``, every page): each a resource (``uri``, ``name``,
        ``mimeType``: ``inode/directory`` for a subdirectory). Only for a server that
        declared ``directoryRead: true`` (else ``ValueError``). A child it names that the
        skill's entry does not list is still not a file of the skill
        (``read_skill_file``)."""
        return await self._skills.directory(server, uri, timeout)

    # What a gateway needs of a host

    def server_of(self, tool: str, identity: Identity | None = None) -> str | None:
        """The server whose tool is named ``tool`` (its canonical name or model-safe
        alias) in the catalog as last listed (``identity``'s own, where some servers act
        as each user); None when no tool is."""
        if self._catalog.per_identity:
            entry = self._catalog_of(identity).find(tool)
            return None if entry is None else entry.server
        return self._catalog.catalog.server_of(tool)

    def tool_entry(self, tool: str, identity: Identity | None = None) -> ToolEntry | None:
        """The catalog's entry named ``tool`` (canonical name or model-safe alias), as
        last listed (``identity``'s own, where some servers act as each user); None when
        no tool is."""
        if self._catalog.per_identity:
            return self._catalog_of(identity).find(tool)
        return self._catalog.catalog.find(tool)

    def serve_record(self, method: str, params: Mapping[str, Any], request_id: Any,
                     version: str | None, transport: str | None = None,
                     identity: Identity | None = None) -> CallRecord | None:
        """The record of one request a gateway serves on this host's behalf (its SERVER
        span, with who it speaks for, and server metrics), when telemetry is on; None
        when it is off."""
        return self.telemetry.serve(method, params, request_id, version, transport, identity)

    def incoming_trace(self, headers: Mapping[str, str]) -> Context | None:
        """The trace context an HTTP request's W3C headers (lower-cased names) carry, when
        tracing is on and they carry one."""
        return self.telemetry.incoming(headers)

    @property
    def tracing(self) -> bool:
        """Whether traces are recorded now (a gateway that records none passes its
        clients' trace context on as it came)."""
        return self.telemetry.tracer() is not None


class _Held:
    """What a ``Host.batched`` block held back from the watchers: whether the catalog
    changed (and whether it is news even with the same entries), which offerings did (and
    whether a server announced it)."""

    __slots__ = ("catalog", "entries", "forced", "offerings")

    def __init__(self, entries: Any) -> None:
        #: The catalog's entries when the block began.
        self.entries = entries
        self.catalog = False
        self.forced = False
        #: Each offering list told of, and whether a server announced its change.
        self.offerings: dict[str, bool] = {}


def _unknown_message(name: str) -> str:
    return f"no tool named {name!r} in the catalog"


def _own_instance(identity: object) -> TypeGuard[Identity]:
    """Whether a call made for ``identity`` to a per-user server goes to an instance of
    its own: any identity but none and ``local`` (the host's own, whose calls the shared
    instance serves, with the configured environment)."""
    return isinstance(identity, Identity) and identity.kind != LOCAL_KIND


def _bridged(handle: WorkerHandle, call_input: CallInput) -> bool:
    """Whether a relayed call to ``handle``'s server is bridged: the server is legacy (it
    asks with requests of its own) and the caller can answer some of what it may ask."""
    return handle.era == "legacy" and bridgeable(call_input.capabilities)


#: How many servers that could own an unknown tool its error's message names (its
#: ``candidates`` hold them all).
_CANDIDATES_NAMED = 3


def _check_logs(log_level: str | None, on_log: Callable[..., None] | None) -> None:
    if log_level is not None and log_level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {LOG_LEVELS}")
    if on_log is not None and log_level is None:
        raise ValueError("on_log needs a log_level: a server sends a request's log "
                         "messages only when it asked for a level")


def _log_to_logger(server: str, params: dict[str, Any]) -> None:
    level = params.get("level")
    py_level = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
                "warning": logging.WARNING}.get(level if isinstance(level, str) else "",
                                                logging.ERROR)
    log.log(py_level, "server %r: %s", server, params.get("data"), extra={"server": server})


def _identity(client_info: Mapping[str, str] | ClientIdentity | None,
              capabilities: Mapping[str, Any] | None) -> ClientIdentity:
    if isinstance(client_info, ClientIdentity):
        if capabilities is None:
            return client_info
        return replace(client_info, capabilities=dict(capabilities))
    info = dict(client_info or {})
    defaults = ClientIdentity()
    return ClientIdentity(
        name=info.get("name", defaults.name), version=info.get("version", defaults.version),
        title=info.get("title"), capabilities=dict(capabilities or {}),
    )


__all__ = ["CallToolResult", "Host", "ServerStatus", "ServerWarning", "UnknownTool"]
