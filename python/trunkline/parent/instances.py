"""Per-user instances of stdio servers: a worker of its own for each identity that calls
a server configured ``"instances": "per_user"``, with that identity's secrets in its
server's environment; kept while it is used, stopped when idle, bounded.

Rules:

1. Such a server has, besides the worker the supervisor keeps for it (the *catalog
   instance*: the configured ``env`` only, which lists its tools and serves the calls
   made with no identity, or as ``local``), one *instance* per identity
   (``Identity.key``) that calls it, started on that identity's first call.
2. An instance's environment is its server's configured ``env`` and, for each name of
   its ``secret_env``, the value ``UserSecrets.secrets_for`` gives for that identity
   (asked once per start; values never come from a client and are never logged). A name
   with no value fails the call with ``UserSecretMissing`` naming the variables, and
   starts nothing.
3. An instance holds a *place* from the moment its call takes one until its worker is
   reaped: starting, serving, idle and stopping all hold one. A server has at most
   ``max_instances`` places, the host ``max_user_instances`` over every server.
4. A call whose identity has no instance takes a place. At a bound the least recently
   used idle instance (nothing in flight: rule 5) that frees a place under that bound is
   stopped, and its place is handed to the new instance, whose worker starts once the
   old one is reaped; a server's own place moves only between instances of that server.
   With none idle the call fails at once with ``InstanceLimitReached`` (retry after
   ``RETRY_AFTER_S``): never queued, never forked beyond the bound.
5. An instance with nothing in flight (no call, no task followed on its worker) for its
   server's ``instance_idle_s`` is stopped by the reaper (a task of the host's scope); a
   call that comes before finds it there.
6. A start that failed (no secret, an error of the store) frees its place at once: the
   next call starts afresh. An instance whose server stays unavailable is stopped as any
   other when idle.
7. ``aclose`` stops every instance the pool made, starting, serving or stopping: none
   outlives it.
8. An identity whose secrets were revoked has its instances stopped at once
   (``stop_identity``), calls in flight on them included; its next call starts one
   afresh, with the secrets the store holds then.

What runs per call is two dict look-ups and a counter each way; the reaper wakes only
when an instance's idle deadline comes sooner than the one it waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import msgspec

from ..errors import (
    ConfigurationError,
    InstanceLimitReached,
    ServerUnavailable,
    UserSecretMissing,
)
from ..loop.tasks import TaskScope
from ..params import StdioParams
from ..policy.identity import Identity
from ..settings import ServerConfig
from .handle import WorkerHandle

log = logging.getLogger("trunkline.instances")

#: Seconds a call refused at a bound is told to wait: the instances in use end their calls
#: at times the pool cannot know.
RETRY_AFTER_S = 1

#: An instance's key: its server and its identity's ``key()``.
InstanceKey = tuple[str, tuple[str, str | None, str]]


class UserSecrets(Protocol):
    """Where each identity's secrets for per-user instances come from (the environment
    variables named by a server's ``secret_env``)."""

    async def secrets_for(self, server: str, identity: Identity,
                          names: Sequence[str]) -> dict[str, str]:
        """The values ``identity`` has for ``server``'s variables ``names``; a name it has
        none for is left out."""
        ...


class _Instance:
    """One identity's worker of one server, and what the pool knows of it."""

    __slots__ = ("key", "server", "handle", "in_flight", "idle_since", "started",
                 "victim", "gone")

    def __init__(self, key: InstanceKey, victim: _Instance | None) -> None:
        self.key = key
        self.server = key[0]
        self.handle: WorkerHandle | None = None
        self.in_flight = 0
        self.idle_since = 0.0
        #: Ends when the worker is up (or its start failed); None before it is asked.
        self.started: asyncio.Future[WorkerHandle] | None = None
        #: The instance whose place this one took: it starts once that one is reaped.
        self.victim = victim
        #: Stopped (or stopping): no longer found by its key.
        self.gone: asyncio.Future[None] | None = None

    def up(self) -> bool:
        """Started, and no call of the pool's in flight."""
        started = self.started
        return (self.in_flight == 0 and started is not None and started.done()
                and not started.cancelled() and started.exception() is None)

    def idle(self) -> bool:
        """Up, and nothing in flight on its worker either: no call (a relayed call to a
        legacy server goes on after the call that started it returned its first round),
        no task followed (one a call started and handed back)."""
        handle = self.handle
        return self.up() and (handle is None or (handle.slots.in_flight == 0
                                                 and not len(handle.tasks)))


class UserInstances:
    """Every per-user instance of one host: taken by calls (``enter``/``leave``), started,
    bounded and reaped here (the rules at the top of the module)."""

    def __init__(self, make_handle: Callable[[ServerConfig], WorkerHandle], *,
                 scope: TaskScope, secrets: UserSecrets | None, max_total: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``make_handle(config)``: a worker handle for an instance's configuration
        (started and closed here); ``scope``: the host's, where starts, stops and the
        reaper run; ``secrets``: the host's ``UserSecrets``; ``max_total``: places over
        every server."""
        self._make_handle = make_handle
        self._scope = scope
        self._secrets = secrets
        self.max_total = max_total
        self._clock = clock
        self._configs: dict[str, ServerConfig] = {}
        #: Instances found by their key, least recently used first.
        self._live: OrderedDict[InstanceKey, _Instance] = OrderedDict()
        #: Places held per server, and over every server (rule 3).
        self._places: dict[str, int] = {}
        self._total = 0
        #: Every worker handle made and not closed yet (``aclose`` closes them).
        self._handles: set[WorkerHandle] = set()
        self._wake = asyncio.Event()
        self._wake_at: float | None = None
        self._reaper: asyncio.Task[None] | None = None

    # -- servers ---------------------------------------------------------------------------

    def check(self, config: ServerConfig) -> None:
        """Raise ``ConfigurationError`` if ``config``'s server cannot be served per user
        here (``add`` would refuse it)."""
        if config.secret_env and self._secrets is None:
            raise ConfigurationError(
                f"server {config.name!r}: secret_env needs per-user secrets, and the host "
                "has none (Host(user_secrets=...))")

    def add(self, config: ServerConfig) -> None:
        """Serve ``config``'s server per user (its catalog instance is the supervisor's)."""
        self.check(config)
        self._configs[config.name] = config
        self._places.setdefault(config.name, 0)
        if self._reaper is None:
            self._reaper = self._scope.spawn(self._reap(), name="per-user instance reaper")

    def serves(self, server: str) -> bool:
        return server in self._configs

    def count(self, server: str) -> int:
        """The places ``server``'s instances hold now (rule 3)."""
        return self._places.get(server, 0)

    @property
    def total(self) -> int:
        return self._total

    async def remove(self, server: str) -> None:
        """Stop every instance of ``server`` and serve it per user no more."""
        self._configs.pop(server, None)
        stopping = [self._retire(i) for i in list(self._live.values()) if i.server == server]
        await asyncio.gather(*stopping, return_exceptions=True)

    async def stop_identity(self, identity: Identity, server: str | None = None) -> int:
        """Stop ``identity``'s instances (of ``server`` only, when named), whose
        environment holds its secrets: they were revoked (rule 8). How many."""
        key = identity.key
        stopping = [self._retire(i) for i in list(self._live.values())
                    if i.key[1] == key and server in (None, i.server)]
        await asyncio.gather(*stopping, return_exceptions=True)
        return len(stopping)

    # -- calls -----------------------------------------------------------------------------

    def enter(self, server: str, identity: Identity) -> _Instance:
        """The instance a call of ``identity``'s to ``server`` goes to, counted in use
        until ``leave``; a new one when it has none (rule 4: may raise
        ``InstanceLimitReached``). ``ready`` gives its worker."""
        key = (server, identity.key)
        instance = self._live.get(key)
        if instance is None:
            instance = self._take_place(key)
            self._live[key] = instance
            instance.started = asyncio.get_running_loop().create_future()
            self._scope.spawn(self._start(instance, identity), name=f"instance of {server!r}")
        instance.in_flight += 1
        return instance

    async def ready(self, instance: _Instance) -> WorkerHandle:
        """The instance's worker, once started (its start's error, if it failed)."""
        started = instance.started
        assert started is not None
        handle: WorkerHandle = await asyncio.shield(started)
        return handle

    def leave(self, instance: _Instance) -> None:
        """A call of ``instance`` ended: with none left in flight it is idle from now."""
        instance.in_flight -= 1
        if instance.in_flight or instance.gone is not None:
            return
        now = self._clock()
        instance.idle_since = now
        self._live.move_to_end(instance.key)
        due = now + self._configs[instance.server].instance_idle_s \
            if instance.server in self._configs else now
        if self._wake_at is None or due < self._wake_at:
            self._wake.set()

    # -- places ----------------------------------------------------------------------------

    def _take_place(self, key: InstanceKey) -> _Instance:
        server = key[0]
        config = self._configs[server]
        if self._places[server] >= config.max_instances:
            victim = self._least_recent_idle(server)
            if victim is None:
                raise InstanceLimitReached(
                    f"{config.max_instances} instances of the server are running, its limit "
                    f"(maxInstances), each with a call in flight; retry after "
                    f"{RETRY_AFTER_S} s", scope="server", limit=config.max_instances,
                    retry_after_s=RETRY_AFTER_S, server=server)
            self._retire(victim, heir_server=server)
            return _Instance(key, victim)
        if self._total >= self.max_total:
            victim = self._least_recent_idle(None)
            if victim is None:
                raise InstanceLimitReached(
                    f"{self.max_total} per-user instances are running, the host's limit "
                    f"(maxUserInstances), each with a call in flight; retry after "
                    f"{RETRY_AFTER_S} s", scope="host", limit=self.max_total,
                    retry_after_s=RETRY_AFTER_S, server=server)
            self._retire(victim, heir_server=server)
            if victim.server != server:  # its own server's place it keeps until reaped
                self._places[server] += 1
            return _Instance(key, victim)
        self._places[server] += 1
        self._total += 1
        return _Instance(key, None)

    def _least_recent_idle(self, server: str | None) -> _Instance | None:
        for instance in self._live.values():
            if (server is None or instance.server == server) and instance.idle():
                return instance
        return None

    def _retire(self, instance: _Instance, heir_server: str | None = None
                ) -> asyncio.Future[None]:
        """Stop ``instance`` (no longer found by its key). Its place goes, once it is
        reaped, to the instance that took it (``heir_server``: that one's server), or is
        freed."""
        if self._live.get(instance.key) is instance:
            del self._live[instance.key]
        if instance.gone is None:
            instance.gone = self._scope.spawn(self._stop(instance, heir_server),
                                              name=f"stopping an instance of "
                                                   f"{instance.server!r}")
        return instance.gone

    def _free(self, server: str, heir_server: str | None) -> None:
        """A place of ``server``'s is no longer held: freed, or handed to an instance
        of ``heir_server`` (which holds its server's place already when it is another)."""
        if heir_server == server:
            return
        self._places[server] -= 1
        if heir_server is None:
            self._total -= 1

    # -- workers ---------------------------------------------------------------------------

    async def _start(self, instance: _Instance, identity: Identity) -> None:
        """Start the instance's worker; its callers learn the outcome from ``started``."""
        started = instance.started
        assert started is not None
        try:
            config = await self._config_for(instance.server, identity)
            if instance.victim is not None:
                victim, instance.victim = instance.victim, None
                assert victim.gone is not None
                await asyncio.shield(victim.gone)
            handle = instance.handle = self._make_handle(config)
            self._handles.add(handle)
            await handle.start()
        except BaseException as exc:
            # Rule 6: its place is freed (its victim's stop hands it on, if the victim
            # is still stopping), and the next call starts afresh.
            if not started.done():
                started.set_exception(
                    exc if isinstance(exc, Exception) else ServerUnavailable(
                        "the host is stopping", state="stopped", server=instance.server,
                        sent=False))
                started.exception()  # told to its callers; never "never retrieved"
            self._retire(instance)
            if not isinstance(exc, Exception):
                raise
        else:
            if not started.done():
                started.set_result(handle)

    async def _config_for(self, server: str, identity: Identity) -> ServerConfig:
        """The server's configuration with ``identity``'s secrets in its environment."""
        config = self._configs[server]
        names = config.secret_env
        if not names:
            return config
        assert self._secrets is not None  # add() refused it otherwise
        values = await self._secrets.secrets_for(server, identity, names)
        missing = [name for name in names if not isinstance(values.get(name), str)]
        if missing:
            raise UserSecretMissing(
                f"no per-user secret stored for {', '.join(missing)}: store it for this "
                "identity, then call again", missing=missing, server=server)
        params = config.params
        assert isinstance(params, StdioParams)  # ServerConfig refuses per_user otherwise
        env = {**params.env, **{name: values[name] for name in names}}
        # Its variables are all in ``env`` now: none is left for the checks to find twice.
        return replace(config, params=msgspec.structs.replace(params, env=env), secret_env=())

    async def _stop(self, instance: _Instance, heir_server: str | None) -> None:
        try:
            started = instance.started
            if instance.victim is not None:  # it never started: its own victim goes on
                victim = instance.victim
                assert victim.gone is not None
                with contextlib.suppress(BaseException):
                    await asyncio.shield(victim.gone)
            elif started is not None and not started.done():
                # Retired while starting (only ``remove`` does that): the start finishes,
                # and its worker is closed below.
                with contextlib.suppress(BaseException):
                    await asyncio.shield(started)
            handle = instance.handle
            if handle is not None:
                await handle.aclose()
                self._handles.discard(handle)
        finally:
            self._free(instance.server, heir_server)

    # -- the reaper ------------------------------------------------------------------------

    async def _reap(self) -> None:
        """Stop each instance idle for its server's ``instance_idle_s`` (rule 5), waking
        at the earliest deadline, or sooner when an instance becomes idle before it."""
        while True:
            now = self._clock()
            wake_at = None
            for instance in list(self._live.values()):
                if not instance.up():
                    continue
                config = self._configs.get(instance.server)
                idle_s = 0.0 if config is None else config.instance_idle_s
                due = instance.idle_since + idle_s
                if not instance.idle():  # its worker is busy still: looked at again later
                    due = max(due, now + idle_s)
                elif due <= now:
                    self._retire(instance)
                    continue
                if wake_at is None or due < wake_at:
                    wake_at = due
            self._wake_at = wake_at
            self._wake.clear()
            if wake_at is None:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wake_at - now)

    async def aclose(self) -> None:
        """Stop every instance the pool made (rule 7)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(BaseException):
                await self._reaper
        for instance in list(self._live.values()):
            started = instance.started
            if started is not None and not started.done():
                started.set_exception(ServerUnavailable(
                    "the host is stopping", state="stopped", server=instance.server,
                    sent=False))
                started.exception()
        self._live.clear()
        await asyncio.gather(*(h.aclose() for h in list(self._handles)),
                             return_exceptions=True)
        self._handles.clear()
