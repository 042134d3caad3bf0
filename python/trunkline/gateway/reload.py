"""A running gateway's configuration read again and its fleet changed by difference
(``trunkline serve``: SIGHUP, ``--watch-config``, the operator API's reload).

``FleetChange`` is the difference itself, pure data: the configuration in force against
the one just read, server by server (``ServerConfig`` compared whole: any field that
differs makes the server *replaced*), the policy (by its digest), and what differs that
cannot change while the gateway runs. ``ReloadOutcome`` is what one reload did, or why
it was refused. ``Reloads`` carries reloads out for one gateway.

Rules:

1. The new configuration is read and checked whole before anything changes: a file
   that does not parse, an entry that is wrong, a policy that does not compile, or a
   change that needs a restart (``FleetChange.needs_restart``) refuses the reload; the
   reason is logged and in the outcome, and the fleet in force is untouched.
2. What cannot change live refuses the reload rather than being half applied: the
   ``"oauth"`` settings (the token store, the clients, sign-in), ``"pins"``,
   ``"collision"``, ``"maxUserInstances"``, and a first server of a kind the host was
   not started with the means for (a Streamable HTTP server when none was configured:
   the OAuth client; a per-user server with ``secretEnv``: the users' secrets; a server
   acting as each user: their credential sources). A restart applies them.
3. Then the fleet changes by difference, all at once: new servers start, removed ones
   drain (``Host.remove_server``: calls in flight get the drain timeout, new calls fail
   as unavailable), a changed server is replaced (``Host.replace_server``: a new worker,
   its era negotiated afresh, a new identity for its pins), an unchanged one is not
   touched (same worker, same listing), and a changed policy takes over. The host's
   watchers are told once, at the end (``Host.batched``): a client hears at most one
   change per list per reload, and only of a list it sees changed. The tools: what its
   identity may see of the catalog (``answers.ListSight``). The prompts and resources:
   the fleet's merged lists, listed again once after the reload and compared with those
   listed before it (``gateway/offering_changes.py``; before any policy, and told when
   they cannot be compared).
4. One reload at a time: one asked while another runs waits for it, then reads the
   file again (a later edit is never lost); several waiting share that one.
5. A copy of ``serve --processes N`` asked to reload (not by a signal) checks the file,
   then signals its parent, which passes SIGHUP to every copy: each copy reloads itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..channel import ServerState
from ..config import HostConfig
from ..errors import ConfigurationError, ToolCollision
from ..params import HttpParams
from ..settings import ServerConfig

if TYPE_CHECKING:
    from ..parent.handle import ServerStatus
    from ..parent.host import Host
    from ..policy import Policy

log = logging.getLogger("trunkline.gateway")

#: How often ``--watch-config`` looks at the file's content.
WATCH_EVERY_S = 1.0


@dataclass(frozen=True)
class FleetChange:
    """The difference between the configuration in force (``old``) and a new one."""

    added: tuple[ServerConfig, ...]
    removed: tuple[str, ...]
    replaced: tuple[ServerConfig, ...]
    unchanged: tuple[str, ...]
    policy_changed: bool
    #: What differs that cannot change while the gateway runs (rule 2), each said in a
    #: phrase; a reload with any is refused.
    needs_restart: tuple[str, ...] = ()

    @classmethod
    def between(cls, old: HostConfig, new: HostConfig, *,
                started: HostConfig | None = None) -> FleetChange:
        """``old`` is what the gateway runs now (its servers and policy), ``new`` the
        configuration just read, ``started`` the one the gateway started with (what rule
        2 holds fixed; None: ``old``)."""
        before = {c.name: c for c in old.servers}
        after = {c.name: c for c in new.servers}
        return cls(
            added=tuple(c for c in new.servers if c.name not in before),
            removed=tuple(c.name for c in old.servers if c.name not in after),
            replaced=tuple(c for c in new.servers
                           if c.name in before and before[c.name] != c),
            unchanged=tuple(c.name for c in new.servers
                            if c.name in before and before[c.name] == c),
            policy_changed=_digest(old.policy) != _digest(new.policy),
            needs_restart=tuple(_fixed(old if started is None else started, new)))

    @property
    def changes_servers(self) -> bool:
        return bool(self.added or self.removed or self.replaced)

    def refusal(self) -> str | None:
        """Why the reload cannot be made without a restart (rule 2), or None."""
        if not self.needs_restart:
            return None
        return ("a restart is needed to change " + "; ".join(self.needs_restart)
                + " (the configuration was not applied)")


def _digest(policy: Policy | None) -> str | None:
    return None if policy is None else policy.digest


def _fixed(old: HostConfig, new: HostConfig) -> Iterable[str]:
    """What of ``new`` differs from ``old`` (the configuration the host was started with)
    and cannot change live (rule 2)."""
    if new.oauth != old.oauth:
        yield "the \"oauth\" settings (token store, clients, sign-in)"
    if new.pins != old.pins:
        yield "the \"pins\" settings"
    if new.collision != old.collision:
        yield "\"collision\""
    if new.max_user_instances != old.max_user_instances:
        yield "\"maxUserInstances\""
    kinds = (
        (lambda c: isinstance(c.params, HttpParams),
         "a first Streamable HTTP server (the OAuth client is made at start)"),
        (lambda c: bool(c.secret_env),
         "a first per-user server with \"secretEnv\" (the users' secrets are opened at start)"),
        (lambda c: c.credentials != "shared",
         "a first server acting as each user (their credentials are opened at start)"),
    )
    for kind, said in kinds:
        if any(map(kind, new.servers)) and not any(map(kind, old.servers)):
            yield said


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload did (``ok``), or why it was refused (``error``; nothing changed).
    The names are servers; ``started_at`` / ``finished_at`` epoch seconds."""

    ok: bool
    error: str | None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    policy_changed: bool = False
    started_at: float = 0.0
    finished_at: float = 0.0
    #: Checked here and passed on to every copy of ``serve --processes N`` (rule 5),
    #: which each reload by themselves: what it says is what they will do.
    deferred: bool = False

    @classmethod
    def refused(cls, error: str, started_at: float) -> ReloadOutcome:
        return cls(ok=False, error=error, started_at=started_at, finished_at=time.time())

    @classmethod
    def of(cls, change: FleetChange, started_at: float, *, error: str | None = None,
           deferred: bool = False) -> ReloadOutcome:
        return cls(ok=error is None, error=error,
                   added=tuple(c.name for c in change.added), removed=change.removed,
                   replaced=tuple(c.name for c in change.replaced),
                   unchanged=change.unchanged, policy_changed=change.policy_changed,
                   started_at=started_at, finished_at=time.time(), deferred=deferred)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "added": list(self.added),
                "removed": list(self.removed), "replaced": list(self.replaced),
                "unchanged": list(self.unchanged), "policy_changed": self.policy_changed,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "deferred": self.deferred}


@dataclass
class Reloads:
    """One gateway's reloads (rules 3 and 4): ``reload`` reads ``read()`` and changes
    ``host`` to it, each server drained for up to ``drain_s``; ``started``: the
    configuration the gateway started with."""

    host: Host
    read: Callable[[], HostConfig]
    started: HostConfig
    drain_s: float
    #: Told each policy a reload put in force (the gateway logs what it is).
    on_policy: Callable[[Policy | None], None] = lambda _policy: None
    #: A copy of ``serve --processes N``: an asked reload is passed to the parent.
    copy: bool = False
    reloading: bool = False
    last: ReloadOutcome | None = None
    #: The configuration in force (``started`` until a reload changes it).
    current: HostConfig = field(init=False)
    _watchers: list[Callable[[ReloadOutcome], None]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _asked: int = 0
    _covered: int = 0
    #: The servers this reload starts, and each one's latest state.
    _starting: dict[str, ServerState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.current = self.started

    def watch(self, on_outcome: Callable[[ReloadOutcome], None]) -> Callable[[], None]:
        self._watchers.append(on_outcome)
        return lambda: self._watchers.remove(on_outcome) \
            if on_outcome in self._watchers else None

    @property
    def starting(self) -> list[str]:
        """The servers this reload is starting (new, or a new definition) that are not
        settled yet."""
        return [name for name, state in self._starting.items()
                if state in (ServerState.STARTING, ServerState.NEGOTIATING)]

    async def reload(self, *, signalled: bool = True) -> ReloadOutcome:
        """Read the configuration again and change the fleet to it (rules 1-4).
        ``signalled``: False when asked otherwise than by SIGHUP (rule 5)."""
        if self.copy and not signalled:
            return self._pass_to_parent()
        self._asked += 1
        asked = self._asked
        async with self._lock:
            if self._covered >= asked and self.last is not None:
                return self.last  # a reload that began after this was asked covered it
            self._covered = self._asked
            self.reloading = True
            try:
                outcome = await self._reload()
            finally:
                self.reloading = False
                self._starting.clear()
        self.last = outcome
        for watcher in list(self._watchers):
            try:
                watcher(outcome)
            except Exception:  # one watcher must not break the reload
                log.exception("a reload watcher failed")
        return outcome

    def _checked(self, started: float) -> tuple[HostConfig, FleetChange] | ReloadOutcome:
        """The configuration read and checked (rule 1), or the refusal."""
        try:
            new = self.read()
            change = FleetChange.between(self._in_force(), new, started=self.started)
            refusal = change.refusal()
            if refusal is not None:
                raise ConfigurationError(refusal)
        except ConfigurationError as exc:
            log.error("configuration not reloaded (servers and policy unchanged): %s", exc)
            return ReloadOutcome.refused(str(exc), started)
        return new, change

    def _in_force(self) -> HostConfig:
        """The configuration in force, with the policy the host decides by now (which
        ``Gateway.reload_policy`` may have changed alone)."""
        return replace(self.current, policy=self.host.access.policy)

    async def _reload(self) -> ReloadOutcome:
        started = time.time()
        checked = self._checked(started)
        if isinstance(checked, ReloadOutcome):
            return checked
        new, change = checked
        if not change.changes_servers and not change.policy_changed:
            log.info("configuration reloaded: nothing changed")
            self.current = new
            return ReloadOutcome.of(change, started)
        host = self.host
        for config in (*change.added, *change.replaced):
            self._starting[config.name] = ServerState.STARTING
        unwatch = host.watch_servers(self._seen)
        error: str | None = None
        try:
            with host.batched():
                if change.policy_changed:
                    host.set_policy(new.policy)
                    self.on_policy(new.policy)
                results = await asyncio.gather(
                    host.add_servers(list(change.added)) if change.added else _nothing(),
                    *(host.replace_server(c, drain_s=self.drain_s) for c in change.replaced),
                    *(host.remove_server(n, drain_s=self.drain_s) for n in change.removed),
                    return_exceptions=True)
        finally:
            unwatch()
        failures = [r for r in results if isinstance(r, BaseException)]
        for failure in failures:
            if not isinstance(failure, Exception):
                raise failure  # a cancellation goes on
            if not isinstance(failure, (ToolCollision, ConfigurationError)):
                log.error("configuration reload: %s", failure, exc_info=failure)
        if failures:
            error = "; ".join(str(f) for f in failures) + " (the other changes were applied)"
        running = {s.name for s in host.servers()}
        self.current = replace(new, servers=[c for c in new.servers if c.name in running])
        outcome = ReloadOutcome.of(change, started, error=error)
        log.warning("configuration reloaded%s: %s", "" if error is None else " in part",
                    _summary(outcome))
        if error is not None:
            log.error("configuration reload: %s", error)
        return outcome

    def _seen(self, status: ServerStatus) -> None:
        if status.name in self._starting:
            self._starting[status.name] = status.state

    def _pass_to_parent(self) -> ReloadOutcome:
        """Rule 5: check here, then have the parent signal every copy (this one too)."""
        started = time.time()
        checked = self._checked(started)
        if isinstance(checked, ReloadOutcome):
            return checked
        _new, change = checked
        os.kill(os.getppid(), signal.SIGHUP)
        log.info("configuration reload passed to every copy of this gateway")
        return ReloadOutcome.of(change, started, deferred=True)


async def _nothing() -> None:
    return None


def _summary(outcome: ReloadOutcome) -> str:
    said = [f"{what} {', '.join(names)}" for what, names in (
        ("added", outcome.added), ("removed", outcome.removed),
        ("replaced", outcome.replaced)) if names]
    if outcome.policy_changed:
        said.append("policy changed")
    return "; ".join(said) or "nothing changed"


def content_digest(path: str | os.PathLike[str]) -> str | None:
    """The SHA-256 of the file's content; None when it cannot be read now (between an
    editor's delete and write)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


async def watch_file(path: str | os.PathLike[str], on_change: Callable[[], Awaitable[Any]],
                     seen: str | None, *, every_s: float = WATCH_EVERY_S) -> None:
    """Until cancelled: await ``on_change()`` whenever the file's content differs from
    what it was at the last look (``seen``: its digest when it was read last). A file
    that cannot be read is no change: its next readable content is compared with the
    last one seen."""
    while True:
        await asyncio.sleep(every_s)
        now = content_digest(path)
        if now is None or now == seen:
            continue
        seen = now
        try:
            await on_change()
        except Exception:  # the watching goes on: the next change is tried again
            log.exception("reloading the changed configuration failed")


__all__ = ["FleetChange", "ReloadOutcome", "Reloads", "content_digest", "watch_file"]
