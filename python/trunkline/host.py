"""The public host API: many servers, one collision-safe tool catalog, calls routed to
their owners.

``Host`` ties the supervisor (a worker process per server) to the pure catalog: it lists
each ready server's tools (every page), caches the listings by their ``ttlMs`` and
``cacheScope``, merges them in configured order under the chosen collision policy, and
routes ``call_tool`` by canonical name to the owning server with the owner's local name.
A restarted server is re-listed from scratch; a server that is not ready is never sent a
call (the call waits for it within its timeout, or fails at once with the reason).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from .catalog import (
    Catalog,
    CatalogWarning,
    ListingDriver,
    ToolCache,
    ToolCollision,
    ToolEntry,
    ToolListing,
    build_catalog,
)
from .channel import ServerState
from .config import ServerEntry, load_config
from .errors import (
    ConfigurationError,
    MalformedMessage,
    RequestTimeout,
    SchemaViolation,
    TrunklineError,
)
from .peer import Reply
from .protocol.identity import ClientIdentity
from .protocol.mrtr import (
    Done,
    Fail,
    InputNotSupported,
    MrtrLimits,
    MrtrLoop,
    NeedInput,
    Resend,
)
from .protocol.retry import Attempt, RetryPolicy, plan_call, run_with_retries
from .protocol.versions import HEADER_MISMATCH
from .schemas import OutputChecker, SchemaRefused
from .supervisor import HostSettings, ServerConfig, ServerStatus, Supervisor, WorkerHandle
from .transports.http_params import HttpParams, validated_http_params
from .transports.stdio import StdioParams

log = logging.getLogger("trunkline.host")

CollisionPolicy = Literal["prefix", "reject"]
ProgressCallback = Callable[[Any, Any, Any], None]
InputHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"

#: States in which a server's tools stay in the catalog: ready, or on its way back.
_LISTED_STATES = (ServerState.READY, ServerState.RESTARTING, ServerState.STARTING,
                  ServerState.NEGOTIATING)


class UnknownTool(TrunklineError, KeyError):
    """No tool by that name in the merged catalog."""

    def __str__(self) -> str:
        return TrunklineError.__str__(self)


@dataclass(frozen=True)
class CallToolResult:
    """A ``tools/call`` result. ``is_error`` results are returned, never raised: the model
    is meant to see them and correct itself."""

    content: list[dict[str, Any]]
    structured_content: Any = None
    is_error: bool = False
    meta: dict[str, Any] | None = None
    tool: str = ""
    server: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (what most models are shown)."""
        return "\n".join(
            block["text"] for block in self.content
            if block.get("type") == "text" and isinstance(block.get("text"), str)
        )


class Host:
    """``async with Host(collision="prefix") as host: ...`` (DESIGN.md §5)."""

    def __init__(
        self,
        *,
        collision: CollisionPolicy = "prefix",
        client_info: Mapping[str, str] | ClientIdentity | None = None,
        capabilities: Mapping[str, Any] | None = None,
        model_safe_names: bool = False,
        settings: HostSettings | None = None,
        call_timeout: float = 60.0,
        list_timeout: float = 30.0,
        on_log: Callable[[str, dict[str, Any]], None] | None = None,
        retry: RetryPolicy | None = None,
        input_handlers: Mapping[str, InputHandler] | None = None,
        mrtr_limits: MrtrLimits | None = None,
    ) -> None:
        """``on_log(server, params)`` receives every ``notifications/message`` a server
        sends (``params``: ``level``, ``logger``, ``data``), tagged with the server's name;
        without it they go to the ``trunkline.host`` logger.

        ``input_handlers`` answer a server's ``input_required`` rounds (multi round-trip
        requests): ``{"sampling/createMessage": f, "elicitation/create": g,
        "roots/list": h}``, each ``async (params) -> result``; the same handlers answer
        a legacy server's own requests of those kinds. Declare the matching
        ``capabilities`` (``sampling``, ``elicitation``, ``roots``): a server asking for
        anything undeclared fails the call locally, and trunkline never answers an input
        request by itself."""
        if collision not in ("prefix", "reject"):
            raise ConfigurationError(f"collision must be 'prefix' or 'reject', not {collision!r}")
        identity = _identity(client_info, capabilities)
        base = settings or HostSettings()
        self.settings = HostSettings(
            identity=identity if (client_info or capabilities) else base.identity,
            negotiation=base.negotiation, restart=base.restart,
            max_line_bytes=base.max_line_bytes, max_frame_bytes=base.max_frame_bytes,
            stop_timeout_s=base.stop_timeout_s, listen=base.listen,
            answered_requests=frozenset(input_handlers or ()),
        )
        self.collision: CollisionPolicy = collision
        self.model_safe_names = model_safe_names
        self.call_timeout = call_timeout
        self.list_timeout = list_timeout
        self._sup = Supervisor(self.settings, on_state=self._on_server_state,
                               on_list_changed=self._on_list_changed,
                               on_log=on_log or _log_to_logger,
                               on_server_request=self._answer_server_request)
        self._server_timeouts: dict[str, float] = {}
        self._idempotent_tools: dict[str, frozenset[str]] = {}
        #: Capped exponential backoff with full jitter; reads are retried after transport
        #: loss or a timeout, tools/call only when declared idempotent.
        self.retry = retry or RetryPolicy()
        self._input_handlers = dict(input_handlers or {})
        self.mrtr_limits = mrtr_limits or MrtrLimits()
        self._cache = ToolCache()
        self._listings: dict[str, ToolListing] = {}
        self._listed_generation: dict[str, int] = {}
        self._catalog = build_catalog([], policy=collision, model_safe_aliases=model_safe_names)
        self._checkers: dict[tuple[str, str], OutputChecker | SchemaRefused] = {}
        self._pending_config: list[ServerEntry] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._adding: set[str] = set()
        self._closed = False

    # -- construction from a configuration file ------------------------------------------

    @classmethod
    def from_config(cls, path: str | os.PathLike[str], **kwargs: Any) -> Host:
        """A host for the servers of an ``{"mcpServers": {...}}`` file; they start when the
        host is entered (``async with``)."""
        host = cls(**kwargs)
        host._pending_config = load_config(path)
        return host

    async def __aenter__(self) -> Host:
        if self._pending_config:
            entries, self._pending_config = self._pending_config, []
            try:
                await self.add_servers(entries)
            except BaseException:
                await self.aclose()
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._sup.aclose()

    async def _answer_server_request(self, server: str, method: str,
                                     params: dict[str, Any]) -> dict[str, Any]:
        """A legacy server's own request (elicitation, sampling, roots), answered by the
        same ``input_handlers`` that answer modern input rounds."""
        handler = self._input_handlers.get(method)
        if handler is None:
            raise LookupError(f"no handler for {method}")
        return await handler(params)

    # -- servers -------------------------------------------------------------------------

    async def add_server(
        self,
        name: str,
        transport: StdioParams | HttpParams,
        *,
        allow_legacy: bool = False,
        max_inflight: int = 1024,
        wait_ready: bool = True,
        call_timeout: float | None = None,
        idempotent_tools: Sequence[str] = (),
    ) -> ServerStatus:
        """Start one server, decide its era, list its tools and merge them. Under the
        ``reject`` policy a tool-name collision stops the new server and raises
        ``ToolCollision`` naming both servers and the tool. ``call_timeout`` overrides the
        host's default for this server's calls (a call's own ``timeout`` wins over both).
        ``idempotent_tools`` names (by the server's own local names) the tools that are
        safe to repeat, so a call to them may be retried after it may have reached the
        server; a tool's own ``idempotentHint`` is untrusted and never counts."""
        entry = ServerEntry(name, transport, allow_legacy, tuple(idempotent_tools))
        if call_timeout is not None:
            self._server_timeouts[name] = call_timeout
        await self.add_servers([entry], max_inflight=max_inflight, wait_ready=wait_ready)
        return self._sup.handle(name).status()

    async def add_servers(self, entries: Sequence[ServerEntry], *, max_inflight: int = 1024,
                          wait_ready: bool = True) -> list[ServerStatus]:
        """Start several servers concurrently; their configured order (the order given
        here) decides who keeps a contested tool name."""
        for e in entries:
            if not e.name or "/" in e.name:
                raise ConfigurationError(
                    f"server name {e.name!r}: must be non-empty and contain no '/'")
            if isinstance(e.params, HttpParams):
                validated_http_params(e.params)
        names = {e.name for e in entries}
        for e in entries:
            self._idempotent_tools[e.name] = frozenset(e.idempotent_tools)
        self._adding |= names  # their first listing happens here, not in the callback
        try:
            statuses = await self._sup.add_many(
                ServerConfig(e.name, e.params, allow_legacy=e.allow_legacy,
                             max_inflight=max_inflight, wait_ready=wait_ready)
                for e in entries
            )
            await asyncio.gather(*(self._list_server(s.name) for s in statuses
                                   if s.state is ServerState.READY))
        finally:
            self._adding -= names
        try:
            self._rebuild()
        except ToolCollision:
            for e in entries:
                self._listings.pop(e.name, None)
                await self._sup.remove(e.name)
            self._rebuild()
            raise
        return statuses

    def servers(self) -> list[ServerStatus]:
        """State, era, version, reason and evidence of every server, in configured order."""
        return self._sup.statuses()

    async def retry(self, name: str) -> ServerStatus:
        """Try an unavailable server again (fresh restart budget); a server that comes back
        ready is listed and merged before this returns."""
        self._adding.add(name)
        try:
            status = await self._sup.retry(name)
            if status.state is ServerState.READY:
                self._cache.drop(name)
                await self._list_server(name)
        finally:
            self._adding.discard(name)
        self._safe_rebuild()
        return self._sup.handle(name).status()

    # -- the catalog ---------------------------------------------------------------------

    def tools(self) -> list[ToolEntry]:
        """The merged catalog as last listed (no I/O)."""
        return list(self._catalog)

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    @property
    def warnings(self) -> list[CatalogWarning]:
        return list(self._catalog.warnings)

    async def list_tools(self) -> list[ToolEntry]:
        """The merged catalog, refetching (lazily, now that it is needed) every listing
        whose TTL has passed."""
        loop = asyncio.get_running_loop()
        stale = [
            name for name in self._sup.names()
            if self._sup.handle(name).state is ServerState.READY
            and self._cache.get(name, None, loop.time(),
                                protocol_version=self._version(name)) is None
        ]
        if stale:
            await asyncio.gather(*(self._list_server(name) for name in stale))
            self._rebuild()
        return self.tools()

    async def refresh_tools(self, server: str | None = None) -> list[ToolEntry]:
        """Re-list one server (or all) now, whatever the TTL says, e.g. after the server
        reported a list change."""
        names = [server] if server is not None else self._sup.names()
        for name in names:
            self._cache.invalidate(name)
        await asyncio.gather(*(self._list_server(n) for n in names
                               if self._sup.handle(n).state is ServerState.READY))
        self._rebuild()
        return self.tools()

    async def _list_server(self, name: str) -> None:
        handle = self._sup.handle(name)
        status = handle.status()
        if status.era is None:
            return
        loop = asyncio.get_running_loop()
        generation = self._cache.generation(name)
        driver = ListingDriver(name, status.era, protocol_version=status.version)
        received_at: float | None = None
        more = True
        while more:
            params = orjson.dumps(driver.next_params())
            reply = await run_with_retries(
                lambda attempt: handle.request("tools/list", params, timeout=self.list_timeout),
                plan_call(self.retry, "tools/list"), was_sent=_was_sent)
            # The list's TTL counts from its first page (the catalog caches it as one).
            received_at = loop.time() if received_at is None else received_at
            more = driver.add_page(reply.decode(server=name, method="tools/list"))
        assert received_at is not None
        listing = driver.finish()
        for warning in listing.warnings:
            log.warning("%s", warning)
        self._cache.put(name, None, listing, received_at, generation=generation)
        self._listings[name] = listing
        self._listed_generation[name] = handle.generation

    def _rebuild(self) -> None:
        order = self._sup.names()
        listed = [
            self._listings[name] for name in order
            if name in self._listings and self._sup.handle(name).state in _LISTED_STATES
        ]
        self._catalog = build_catalog(listed, policy=self.collision,
                                      model_safe_aliases=self.model_safe_names,
                                      server_order=order)
        self._checkers.clear()

    def _version(self, name: str) -> str | None:
        return self._sup.handle(name).status().version

    def _on_server_state(self, handle: WorkerHandle) -> None:
        """Supervisor callback: keep the catalog in step with the servers."""
        if self._closed:
            return
        name = handle.name
        if handle.state is ServerState.READY:
            if name not in self._adding and self._listed_generation.get(name) != handle.generation:
                # A new transport: its era was renegotiated, its caches died with the old
                # one, and its tools are listed again from scratch.
                self._cache.drop(name)
                self._spawn(self._relist(name))
        elif handle.state in (ServerState.UNAVAILABLE, ServerState.STOPPED):
            if name in self._listings:
                self._safe_rebuild()

    def _on_list_changed(self, handle: WorkerHandle, which: str) -> None:
        """The server said its tool list changed: the cached list is invalid at once and
        the catalog is refetched now (not on a timer)."""
        if which != "tools" or self._closed or handle.name in self._adding:
            return
        self._cache.invalidate(handle.name)
        self._spawn(self._relist(handle.name))

    async def _relist(self, name: str) -> None:
        try:
            await self._list_server(name)
        except TrunklineError as exc:
            log.warning("server %r: re-listing tools after a restart failed: %s", name, exc)
            return
        self._safe_rebuild()

    def _safe_rebuild(self) -> None:
        try:
            self._rebuild()
        except ToolCollision as exc:
            # Under "reject", a restarted server that now collides keeps its old listing
            # out of the catalog rather than taking a name from another server.
            log.error("catalog not updated: %s", exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- calls ---------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        log_level: str | None = None,
        idempotent: bool | None = None,
        idempotency_key: str | bool | None = None,
    ) -> CallToolResult:
        """Call a tool by its canonical name (or model-safe alias). JSON-RPC errors raise
        ``ServerError``; ``isError`` results are returned.

        ``on_progress(progress, total, message)`` receives the server's progress
        notifications for this call only (a ``progressToken`` unique to the call is sent
        in ``_meta``). ``log_level`` asks a modern server to send log messages at that
        level or above for this call (``io.modelcontextprotocol/logLevel``); they reach
        the host's ``on_log``.

        A call that failed before it left the host (its server restarting) is sent again
        once the server is back. After it may have reached the server (transport lost,
        timeout) it is retried only if it is idempotent: ``idempotent=True`` here, or the
        tool listed in the server's ``idempotent_tools``. ``idempotency_key`` (a string, or
        ``True`` for a generated one) is carried in ``_meta`` under
        ``dev.trunkline/idempotencyKey``, identical on every retry, so a server that knows
        it can deduplicate. Every retry is a new JSON-RPC request with a new id."""
        try:
            entry = self._catalog.lookup(name)
        except KeyError:
            raise UnknownTool(f"no tool named {name!r} in the catalog", method="tools/call") from None
        if arguments is not None and not isinstance(arguments, Mapping):
            raise TypeError("arguments must be a mapping")
        if log_level is not None and log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {LOG_LEVELS}")
        handle = self._sup.handle(entry.server)
        era = handle.era
        body: dict[str, Any] = {"name": entry.local_name, "arguments": dict(arguments or {})}
        meta: dict[str, Any] = {}
        token = None
        if on_progress is not None:
            token = handle.watch_progress(lambda p: on_progress(
                p.get("progress"), p.get("total"), p.get("message")))
            meta["progressToken"] = token
        if log_level is not None and era == "modern":
            meta[META_LOG_LEVEL] = log_level
        if meta:
            body["_meta"] = meta
        if timeout is None:
            timeout = self._server_timeouts.get(entry.server, self.call_timeout)
        plan = plan_call(self.retry, "tools/call", tool=entry, idempotent=idempotent,
                         idempotent_tools=self._idempotent_tools.get(entry.server, ()),
                         deadline=asyncio.get_running_loop().time() + timeout,
                         idempotency_key=idempotency_key)

        async def send(attempt: Attempt) -> Reply:
            left = attempt.remaining_s
            return await handle.request(
                "tools/call", orjson.dumps(attempt.stamp(body)),
                timeout=timeout if left is None else max(min(timeout, left), 0.001))

        try:
            reply = await run_with_retries(send, plan, was_sent=_was_sent)
            if reply.error_code == HEADER_MISMATCH and isinstance(handle.config.params,
                                                                  HttpParams):
                # §8.4: the server's x-mcp-header definitions changed under our catalog.
                # It rejected the request before running it, so re-listing and sending
                # once more (a new request) is safe for any tool.
                log.info("server %r: header mismatch on %r (%s); re-listing its tools",
                         entry.server, entry.local_name, reply.error_message)
                await self.refresh_tools(entry.server)
                reply = await run_with_retries(send, plan, was_sent=_was_sent)
            result = reply.decode(server=entry.server, method="tools/call")
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                result = await self._input_rounds(handle, "tools/call", body, result, reply,
                                                  timeout)
        finally:
            if token is not None:
                handle.unwatch_progress(token)
        return self._to_result(entry, result)

    async def _input_rounds(self, handle: WorkerHandle, method: str, body: dict[str, Any],
                            result: dict[str, Any], reply: Reply, timeout: float) -> Any:
        """Multi round-trip: hand each input request to the host's handler, then send the
        original request again (a new id) with ``inputResponses`` and the server's
        ``requestState`` exactly as it sent it, until the result is complete."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        server = handle.name
        mrtr = MrtrLoop(method, body, dict(self.settings.identity.capabilities),
                        self.mrtr_limits, loop.time(), server=server)
        decision = mrtr.on_result(result, reply.result or b"", loop.time())
        while True:
            if isinstance(decision, Done):
                return decision.result
            if isinstance(decision, Fail):
                raise decision.error
            if isinstance(decision, NeedInput):
                responses = await self._answer_inputs(server, method, decision)
                decision = mrtr.responses_ready(responses, loop.time())
                continue
            assert isinstance(decision, Resend)
            left = deadline - loop.time()
            if left <= 0:
                raise RequestTimeout(f"input rounds exceeded {timeout:g} s",
                                     timeout_s=timeout, server=server, method=method)
            reply = await handle.request(method, decision.params, timeout=left)
            decoded = reply.decode(server=server, method=method)
            decision = mrtr.on_result(decoded, reply.result or b"", loop.time())

    async def _answer_inputs(self, server: str, method: str, need: NeedInput) -> dict[str, Any]:
        async def answer(item: Any) -> tuple[str, Any]:
            handler = self._input_handlers.get(item.method)
            if handler is None:
                raise InputNotSupported(
                    f"server asked for {item.method} but the host registered no handler for "
                    "it", key=item.key, kind=item.method, server=server, method=method)
            return item.key, await handler(dict(item.params or {}))
        # The worker keeps reading meanwhile: other calls to this server are unaffected.
        return dict(await asyncio.gather(*(answer(item) for item in need.requests)))

    # -- resources and prompts (reads: retried after transport loss or a timeout) ---------

    async def read_resource(self, server: str, uri: str, *,
                            timeout: float | None = None) -> dict[str, Any]:
        """``resources/read`` on one server; the result (``contents``) as sent."""
        return await self._read(server, "resources/read", {"uri": uri}, timeout)

    async def get_prompt(self, server: str, name: str, arguments: Mapping[str, str] | None = None,
                         *, timeout: float | None = None) -> dict[str, Any]:
        """``prompts/get`` on one server; the result (``messages``) as sent."""
        body: dict[str, Any] = {"name": name}
        if arguments:
            body["arguments"] = dict(arguments)
        return await self._read(server, "prompts/get", body, timeout)

    async def _read(self, server: str, method: str, body: dict[str, Any],
                    timeout: float | None) -> dict[str, Any]:
        handle = self._sup.handle(server)
        if timeout is None:
            timeout = self._server_timeouts.get(server, self.call_timeout)
        plan = plan_call(self.retry, method,
                         deadline=asyncio.get_running_loop().time() + timeout)
        reply = await run_with_retries(
            lambda attempt: handle.request(method, orjson.dumps(body), timeout=timeout),
            plan, was_sent=_was_sent)
        result = reply.decode(server=server, method=method)
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            result = await self._input_rounds(handle, method, body, result, reply, timeout)
        if not isinstance(result, dict):
            raise MalformedMessage(f"{method} result is not an object", server=server,
                                   method=method)
        return result

    def _to_result(self, entry: ToolEntry, result: Any) -> CallToolResult:
        where = {"server": entry.server, "method": "tools/call"}
        if not isinstance(result, dict):
            raise MalformedMessage("tools/call result is not an object", **where)
        # Absent means "complete" (spec §3: a MUST for clients). A modern server that omits
        # it is sloppy, not ambiguous, and the conformance suite checks that we cope.
        result_type = result.get("resultType", "complete")
        if result_type != "complete":
            raise MalformedMessage(f"tools/call resultType is {result_type!r}", **where)
        content = result.get("content")
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise MalformedMessage("tools/call result has no content list", **where)
        is_error = result.get("isError", False)
        if not isinstance(is_error, bool):
            raise MalformedMessage("tools/call isError is not a boolean", **where)
        structured = result.get("structuredContent")
        if entry.output_schema is not None and not is_error:
            self._check_output(entry, result, structured)
        meta = result.get("_meta")
        return CallToolResult(content=content, structured_content=structured, is_error=is_error,
                              meta=meta if isinstance(meta, dict) else None,
                              tool=entry.name, server=entry.server, raw=result)

    def _check_output(self, entry: ToolEntry, result: dict[str, Any], structured: Any) -> None:
        where = {"server": entry.server, "method": "tools/call"}
        key = (entry.server, entry.local_name)
        checker = self._checkers.get(key)
        if checker is None:
            try:
                checker = OutputChecker(entry.output_schema)
            except SchemaRefused as exc:
                checker = exc
            self._checkers[key] = checker
        if isinstance(checker, SchemaRefused):
            raise SchemaViolation(
                f"tool {entry.name!r} declares an outputSchema that cannot be used: {checker}",
                **where)
        if "structuredContent" not in result:
            raise SchemaViolation(
                f"tool {entry.name!r} declares an outputSchema but returned no "
                "structuredContent", **where)
        problems = checker.problems(structured)
        if problems:
            raise SchemaViolation(
                f"tool {entry.name!r} returned structuredContent that violates its "
                f"outputSchema: {'; '.join(problems)}", **where)


def _was_sent(exc: Exception) -> bool | None:
    """The supervisor marks the failures that happened before a request was written."""
    return getattr(exc, "sent", None)


def _log_to_logger(server: str, params: dict[str, Any]) -> None:
    level = params.get("level")
    py_level = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
                "warning": logging.WARNING}.get(level if isinstance(level, str) else "",
                                                logging.ERROR)
    log.log(py_level, "server %r: %s", server, params.get("data"))


def _identity(client_info: Mapping[str, str] | ClientIdentity | None,
              capabilities: Mapping[str, Any] | None) -> ClientIdentity:
    if isinstance(client_info, ClientIdentity):
        if capabilities is not None:
            return ClientIdentity(client_info.name, client_info.version, client_info.title,
                                  dict(capabilities), client_info.send_client_info)
        return client_info
    info = dict(client_info or {})
    ident = ClientIdentity(capabilities=dict(capabilities or {}))
    return ClientIdentity(
        name=info.get("name", ident.name), version=info.get("version", ident.version),
        title=info.get("title"), capabilities=dict(capabilities or {}),
    )
