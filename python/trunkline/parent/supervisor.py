"""All servers of one host: start them, route to them by name, report them, stop them.

Each configured server gets a ``WorkerHandle`` (the parent's side of one server); the
supervisor keeps them in configured order (the order that decides who keeps a contested
tool name) and closes them together. It holds no state of its own about any server. A
server's new definition starts beside the old one (``staged``) and takes its place
(``swap``), so calls never find the name without a server.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from ..errors import ConfigurationError, ServerUnavailable
from ..loop.tasks import gather_all
from ..protocol.mrtr import InputHandler
from ..protocol.reply import Reply
from ..settings import HostSettings, RestartPolicy, ServerConfig
from .handle import ServerStatus, WorkerHandle
from .launchers import launcher_for

if TYPE_CHECKING:
    from ..auth import OAuthClient
    from .credentials import CredentialSlots


class Supervisor:
    def __init__(self, settings: HostSettings | None = None, *, seed: int | None = None,
                 on_state: Callable[[WorkerHandle], None] | None = None,
                 on_list_changed: Callable[[WorkerHandle, str], None] | None = None,
                 on_log: Callable[[str, dict[str, Any]], None] | None = None,
                 input_handlers: Mapping[str, InputHandler] | None = None,
                 oauth: OAuthClient | None = None,
                 credential_slots: CredentialSlots | None = None) -> None:
        """``on_state`` is called (synchronously, on the loop) when a server is added
        (starting) and after every state change of any server, e.g. to re-list tools
        when a restarted server is ready again;
        ``on_list_changed`` when a server announces that a list (``"tools"``, ...)
        changed; ``input_handlers`` answer legacy servers' own requests; ``oauth`` gives
        HTTP servers' workers their credentials (``settings.oauth`` says it does);
        ``credential_slots`` the identities' slots of servers reached with each user's own."""
        self.settings = settings or HostSettings()
        self._rng = random.Random(seed)
        self._on_state = on_state
        self._on_list_changed = on_list_changed
        self._on_log = on_log
        self._input_handlers = dict(input_handlers or {})
        self._oauth = oauth
        self._credential_slots = credential_slots
        self._handles: dict[str, WorkerHandle] = {}
        self._launcher = launcher_for(self.settings.worker_start)

    async def add(self, config: ServerConfig) -> ServerStatus:
        return (await self.add_many([config]))[0]

    async def add_many(self, configs: Iterable[ServerConfig]) -> list[ServerStatus]:
        """Start several servers concurrently, each ready or unavailable on return."""
        configs = list(configs)
        names = [c.name for c in configs]
        for name in names:
            if name in self._handles or names.count(name) > 1:
                raise ConfigurationError(f"server {name!r} is already configured")
        handles = [self._handle_for(c) for c in configs]
        for handle in handles:
            self._handles[handle.name] = handle
            handle.announce()  # its first state, starting: it is news too
        return await gather_all(*(h.start() for h in handles))

    def staged(self, config: ServerConfig) -> WorkerHandle:
        """A handle for a new definition of a configured server, not routed to yet: it
        starts beside the old one, and ``swap`` makes it the server's (a reload's
        replacement: the old one drains meanwhile)."""
        if config.name not in self._handles:
            raise ConfigurationError(f"no server named {config.name!r} to replace")
        handle = self._handle_for(config)
        handle.announce()  # starting again: news for whoever follows the server
        return handle

    def swap(self, handle: WorkerHandle) -> WorkerHandle:
        """Route the server's calls to ``handle`` from now on, in the old one's place (the
        merge order stays); the old handle, for its caller to drain and close."""
        old = self._handles[handle.name]
        self._handles[handle.name] = handle
        return old

    def _handle_for(self, config: ServerConfig) -> WorkerHandle:
        return WorkerHandle(config, self.settings, self._rng, on_state=self._on_state,
                            on_list_changed=self._on_list_changed, on_log=self._on_log,
                            input_handlers=self._input_handlers, launcher=self._launcher,
                            oauth=self._oauth, credential_slots=self._credential_slots)

    def instance_handle(self, config: ServerConfig) -> WorkerHandle:
        """A handle for one per-user instance (``parent.instances``), started as every
        worker is (the same launcher) but kept by its pool, not here: its state is no
        server's, and its server's tools are listed by the configured server's worker."""
        return WorkerHandle(config, self.settings, self._rng, on_log=self._on_log,
                            input_handlers=self._input_handlers, launcher=self._launcher)

    def handle(self, name: str) -> WorkerHandle:
        try:
            return self._handles[name]
        except KeyError:
            raise ServerUnavailable(f"no server named {name!r}", server=name) from None

    def get(self, name: str) -> WorkerHandle | None:
        return self._handles.get(name)

    async def request(self, name: str, method: str, params: bytes | None, *,
                      timeout: float) -> Reply:
        return await self.handle(name).slots.request(method, params, timeout=timeout)

    def forget_credentials(self, slots: list[int]) -> None:
        """Every worker of a server reached with each user's own credentials drops what it
        holds for these slots."""
        for handle in self._handles.values():
            handle.forget_credentials(slots)

    def statuses(self) -> list[ServerStatus]:
        return [h.status() for h in self._handles.values()]

    async def retry(self, name: str) -> ServerStatus:
        return await self.handle(name).retry()

    async def restart(self, name: str, reason: str) -> ServerStatus:
        return await self.handle(name).restart(reason)

    async def remove(self, name: str) -> None:
        """Stop one server and forget it."""
        handle = self._handles.pop(name, None)
        if handle is not None:
            await handle.aclose()

    def names(self) -> list[str]:
        """Server names in the order they were added (the catalog's merge order)."""
        return list(self._handles)

    async def aclose(self) -> None:
        # Every handle is closed, whatever another one's close raised.
        await asyncio.gather(*(h.aclose() for h in self._handles.values()),
                             return_exceptions=True)
        await self._launcher.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["HostSettings", "RestartPolicy", "ServerConfig", "ServerStatus", "Supervisor",
           "WorkerHandle"]
