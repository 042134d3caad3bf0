"""What the gateway answers to one downstream request, through the Host.

Shared by every face (stdio, Streamable HTTP): ``immediate`` for what needs nothing behind
the gateway (discover, initialize, ping, the merged tool list; None for anything else),
``from_fleet`` for what is asked of the servers behind (prompts, resources, completion),
``call`` for a ``tools/call``, whose progress (under the client's own token) and log
messages (at the level the client asked: in the request's ``_meta``, or for a legacy
session with ``logging/setLevel``) go to the given sink, so they travel on the call's own
stream. Each returns the whole response message, in the client's era. Connection state (a
legacy session, in-flight tasks, listen streams) belongs to the faces.

Every request sent behind the gateway is admitted first (``admission``: per client, per
server, overall), once: the face names the request's client (``client_key``: a legacy
session's id, a modern client's HTTP connection, the stdio face's one client), and a face
that must choose its response's form before the call starts (a legacy call's stream)
admits it itself (``admit_call``) and releases it when the call has ended.

A server behind that needs input (``input_required``, MCP 2026-07-28) is never answered by
the gateway itself: a modern client gets the ``input_required`` result as it is and
answers it in its next request (``inputResponses``, ``requestState``), which goes to the
server as it came; a legacy client is asked with requests of its own era
(``elicitation/create``, ``sampling/createMessage``, ``roots/list``) through the face's
``Client.ask``, and the server gets the answers. A legacy server's request about one of
its tasks names it (``_meta`` ``related-task``): the client is asked without it (the task
is the server's, which the client never saw; the gateway answers the call whole). The
server behind is told, as the request's ``clientCapabilities``, the input kinds the
client declared (and the gateway can relay); input the client did not declare is -32021,
never asked.

A request's W3C trace context (``traceparent`` in its ``_meta``, else in the HTTP face's
headers, with ``tracestate`` and ``baggage``) is continued by its SERVER span when tracing
is on. When it is off the gateway is no hop of the trace: the context, and nothing else
of the client's ``_meta``, goes to the server behind as it came (``Host``'s
``trace_context``), for a ``tools/call`` and for what is routed to one server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import log_context
from ..catalog import ToolEntry
from ..channel import ServerState
from ..errors import TrunklineError
from ..loop.awaitables import raising, ready
from ..parent.call_request import CallInput
from ..parent.host import Host
from ..parent.mrtr import InputRequired
from ..parent.results import CallToolResult
from ..parent.tasks import ToolTask
from ..policy.decisions import Allowed, Denied, Item
from ..policy.identity import LOCAL, ClaimNames, Identity
from ..protocol.listen import FILTERS, RESOURCE_SUBSCRIPTIONS, RESOURCE_UPDATED
from ..protocol.mrtr import CAPABILITY_OF
from ..protocol.tasks import RELATED_TASK
from ..protocol.versions import LOG_LEVELS, META_CLIENT_CAPABILITIES, META_LOG_LEVEL
from ..telemetry.audit import AuditLog
from ..telemetry.carried import picked
from . import extensions as ext
from . import protocol as p
from . import tasks as task_table
from . import tool_search
from .admission import Admission
from .audited import AUDITED, Auditor
from .limits import Limits
from .offering_changes import OfferingChanges
from .offerings import LISTS, Offerings, OfferingsTable, skills_page
from .tasks import NOBODY, Caller, Place, TaskTable

log = logging.getLogger("trunkline.gateway")

Send = Callable[[dict[str, Any]], None]
#: Ask the client something (``method``, ``params``) and await its result.
Ask = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Client:
    """What a face knows of the legacy client a request came from: the capabilities it
    declared in ``initialize``, how to ask it something on this exchange (None when the
    exchange cannot carry a request, e.g. a POST answered as plain JSON), and the log
    level its session set (``logging/setLevel``; None: it never did, and gets no logs)."""

    capabilities: Mapping[str, Any] = field(default_factory=dict)
    ask: Ask | None = None
    log_level: str | None = None


NO_CLIENT = Client()


class ListSight:
    """What one client (a listen stream, a legacy session, the stdio client) last saw of
    the tool list: under a policy a change of the catalog, or of the policy, is told to
    the client only when what its identity sees changed. Without one every change is."""

    __slots__ = ("_host", "_identity", "_seen")

    def __init__(self, host: Host, identity: Identity) -> None:
        self._host = host
        self._identity = identity
        self._seen = self._now()

    def _now(self) -> Sequence[ToolEntry] | None:
        host = self._host
        if host.lists_per_identity:  # its own catalog, which it alone sees change
            return tuple(host.tools(identity=self._identity))
        access = host.access
        if not access.active:
            return None
        return access.tools_visible(self._identity, host.catalog.entries)

    def changed(self, which: str) -> bool:
        """Whether a change of list ``which`` is this client's to hear (call once per
        change)."""
        if which != "tools":
            return True
        now = self._now()
        changed = now is None or now != self._seen
        self._seen = now
        return changed


class Admitted:
    """A call admitted before it starts (``Answerer.admit_call``): its place, held under
    its client until ``Answerer.release``."""

    __slots__ = ("server", "client")

    def __init__(self, server: str | None, client: Hashable) -> None:
        self.server = server
        self.client = client


#: Requests that need a call behind the gateway, or a stream: the faces run them.
CALL = "tools/call"
LISTEN = "subscriptions/listen"
#: A legacy session's resource subscriptions: the faces keep them, per session.
SUBSCRIBING = frozenset({"resources/subscribe", "resources/unsubscribe"})
#: Requests behind the gateway at once, overall and per server (``admission``): well above
#: a server's own in-flight limit (1024 by default), so waiting for a slot still happens,
#: but bounded.
DEFAULT_MAX_IN_FLIGHT = 16384
DEFAULT_MAX_PER_SERVER = 2048
#: Requests answered by the servers behind (``from_fleet``).
FLEET_METHODS = frozenset({*LISTS, "prompts/get", "resources/read", "completion/complete",
                           *ext.METHODS})


class Answerer:
    def __init__(self, host: Host, *, server_info: Mapping[str, Any],
                 instructions: str | None = None, admission: Admission | None = None,
                 tool_search: bool = False, transport: str | None = None,
                 limits: Limits | None = None, audit: AuditLog | None = None) -> None:
        self.host = host
        #: One audit record per request behind the gateway (``audited``); None: no trail.
        self.auditor = None if audit is None else Auditor(audit, host,
                                                          tool_search=tool_search)
        #: What one client may make the gateway hold (both faces read them here).
        self.limits = limits or Limits()
        #: The face's ``network.transport`` (``pipe`` for stdio, ``tcp`` for HTTP), on
        #: every SERVER span.
        self.transport = transport
        #: Serve ``search_tools`` and ``call_tool`` instead of the catalog
        #: (``gateway/tool_search.py``).
        self.tool_search = tool_search
        self.admission = admission or Admission(
            total=DEFAULT_MAX_IN_FLIGHT, per_server=DEFAULT_MAX_PER_SERVER,
            client_calls=self.limits.client_calls,
            client_server_share=self.limits.client_server_share,
            client_rate=self.limits.client_rate, client_burst=self.limits.client_burst,
            timeout_of=host.call_timeout,
            slots_of=host.call_slots)
        self._server_info = dict(server_info)
        self._instructions = instructions
        self._offerings = Offerings(host)
        #: Which changes of the prompts and resources lists clients hear of.
        self._offering_changes = OfferingChanges(host, self._offerings)
        self._unwatch_offerings = host.watch_offerings(self._offering_changes.announced,
                                                       on_moved=self._offering_changes.moved)
        with contextlib.suppress(RuntimeError):  # no loop: the first change is told as is
            self._offering_changes.start()
        #: The tasks this process holds for its clients (``gateway/tasks.py``).
        self.tasks = TaskTable(host.settings.instance, client_tasks=self.limits.client_tasks,
                               tasks=self.limits.tasks, ttl_s=self.limits.task_ttl_s)
        #: The places of rounds whose calls the host holds, by the round's token
        #: (``_hold_round``).
        self._held_rounds: dict[str, tuple[str | None, Hashable, Hashable]] = {}
        #: Every tool name ever served, and its server: a call to the tool of a server that
        #: has since gone away is told which server and why, not just "no such tool".
        self._owners: dict[str, str] = {}
        self._remember_owners(host.catalog.entries)
        self._unwatch = host.watch_catalog(self._remember_owners)
        #: The extensions servers declare that the gateway does not relay, said once each.
        self._left_out = ext.LeftOut()
        for status in host.servers():
            self._note_extensions(status)
        self._unwatch_servers = host.watch_servers(self._note_extensions)

    def close(self) -> None:
        self._unwatch()
        self._unwatch_servers()
        self._unwatch_offerings()
        self._offering_changes.close()
        self._offerings.close()

    async def aclose(self) -> None:
        """``close``, and wait for what it stopped (a listing of the offerings)."""
        self.close()
        await self._offering_changes.aclose()

    def claim_names(self) -> ClaimNames | None:
        """Which token claims carry groups and roles: the policy's in force (a reload may
        change it); None without one, when no claim beyond who and scopes is read."""
        policy = self.host.access.policy
        return policy.claims if policy is not None and policy.active else None

    def _note_extensions(self, status: Any) -> None:
        if status.state is ServerState.READY:
            self._left_out.note(status.name, status.extensions)

    def _ready_capabilities(self) -> list[Mapping[str, Any] | None]:
        return [s.capabilities for s in self.host.servers() if s.state is ServerState.READY]

    def watch_lists(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """Have ``on_change(which)`` hear that the fleet's ``tools`` (the merged catalog;
        in tool-search mode the two tools served never change), ``prompts`` or
        ``resources`` list changed, or was said to (``Host.watch_catalog``; for the prompts
        and resources, ``gateway/offering_changes.py`` says which changes): what stops
        it."""
        stops = [self._offering_changes.watch(on_change)]
        if not self.tool_search:
            stops.append(self.host.watch_catalog(lambda _catalog: on_change("tools")))

        def stop() -> None:
            for unwatch in stops:
                unwatch()
        return stop

    def sight(self, identity: Identity) -> ListSight:
        """What ``identity``'s client sees of the tool list now, to ask on each change
        whether it should be told (``ListSight``)."""
        return ListSight(self.host, identity)

    def _remember_owners(self, catalog: Iterable[ToolEntry]) -> None:
        for entry in catalog:
            self._owners[entry.model_name] = entry.server
            self._owners[entry.name] = entry.server

    def immediate(self, request: p.Request) -> dict[str, Any] | None:
        """The response to what needs nothing behind the gateway; None for what does
        (``from_fleet``), and for ``tools/call`` and a modern listen, which the faces run.
        With telemetry on, the answer is a SERVER span of its own."""
        if request.method in FLEET_METHODS or (request.method == "tools/list"
                                               and self.host.lists_per_identity
                                               and not self.tool_search):
            return None  # an identity's own listings may need making first
        record = self.host.serve_record(request.method, request.params, request.id,
                                        request.version, self.transport, request.identity)
        answer = self._immediate(request)
        if record is not None:
            record.answered(answer)
        return answer

    def _immediate(self, request: p.Request) -> dict[str, Any]:
        method, era = request.method, request.era
        if method == "initialize" and era is p.ClientEra.LEGACY:
            result = p.initialize_result(request.params.get("protocolVersion"),
                                         self._server_info, self._instructions,
                                         tools_change=not self.tool_search,
                                         extensions=ext.advertised(self._ready_capabilities(),
                                                                   legacy=True),
                                         tasks=task_table.LEGACY_CAPABILITY)
        elif method == "server/discover":
            result = p.discover_result(self._server_info, self._instructions,
                                       tools_change=not self.tool_search,
                                       extensions=ext.advertised(
                                           self._ready_capabilities(),
                                           legacy=era is p.ClientEra.LEGACY))
        elif method == "ping" and era is p.ClientEra.LEGACY:
            result = {}  # 2026-07-28 has no ping
        elif method == "tools/list":
            tools = list(tool_search.TOOLS) if self.tool_search else \
                [p.served_tool(e, era) for e in self.host.tools(identity=request.identity)]
            result = p.list_result("tools", tools, era)
        elif method == "logging/setLevel" and era is p.ClientEra.LEGACY:
            level = request.params.get("level")
            if level not in LOG_LEVELS:
                return p.error_response(request.id, p.error(
                    p.INVALID_PARAMS, f"unknown log level {level!r}: one of {LOG_LEVELS}"))
            result = {}  # the face keeps the level for the session's next calls
        else:
            return p.error_response(request.id, p.unknown_method(method))
        return p.response(request.id, result)

    def call(self, request: p.Request, notify: Send, client: Client = NO_CLIENT,
             client_key: Hashable = None, admitted: Admitted | None = None,
             caller: Caller = NOBODY) -> Coroutine[Any, Any, p.Message]:
        """The response to one ``tools/call`` (a result, or an error naming the server), to
        await. Not a coroutine itself: the checks run now and the call's own coroutine
        (``_behind``'s) is what is awaited, one frame fewer for every call in flight. A
        failure of the checks raises where the response is awaited, as a coroutine's would.
        ``client_key``: the client the call counts against (``admission``); ``admitted``:
        the face admitted it already (``admit_call``), and releases it. A modern call
        naming the tasks extension may be answered with a task, ``caller``'s
        (``gateway/tasks.py``); a legacy call naming ``params.task`` is, when there is a
        caller to bind it to (a session)."""
        try:
            return self._call(request, notify, client, client_key, admitted, caller)
        except Exception as exc:  # noqa: BLE001 - raised where it is awaited
            return raising(exc)

    def _call(self, request: p.Request, notify: Send, client: Client,
              client_key: Hashable, admitted: Admitted | None, caller: Caller
              ) -> Coroutine[Any, Any, p.Message]:
        name = request.params.get("name")
        arguments = request.params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return ready(p.error_response(request.id, p.error(
                p.INVALID_PARAMS, "tools/call needs a tool name and an arguments object")))
        identity = request.identity
        if self.tool_search:
            called = self._searched_call(request, name, arguments)
            if not isinstance(called, tuple):
                return ready(called)
            name, arguments = called
        token = request.meta.get("progressToken")
        on_progress = None
        if isinstance(token, (str, int)) and not isinstance(token, bool):
            on_progress = _progress_to(token, notify)
        level = _log_level(request, client)
        if isinstance(level, p.InBandError):
            return ready(level.response(request.id))
        server = self._server_of(name, identity)
        if server is None and not self.host.access.active and \
                (gone := self._gone(name)) is not None:
            # Under a policy, which servers are down is not every identity's to learn.
            return ready(gone.response(request.id))
        call_input = _call_input(request, client)
        if isinstance(call_input, p.InBandError):
            return ready(call_input.response(request.id))
        if call_input.request_state is not None and self._held_rounds:
            self._release_round(call_input.request_state)  # this request takes it up
        on_log = None if level is None else _logs_to(notify)
        if request.era is p.ClientEra.MODERN and task_table.takes_tasks(request.meta):
            # The client takes a task: the call may be answered with one.
            return self._behind(request, server, self.host.start_tool_relayed(
                name, arguments, on_progress=on_progress, call_input=call_input,
                log_level=level, on_log=on_log, trace_context=self._passed_on(request),
                identity=identity), client_key, admitted, caller)
        if request.era is p.ClientEra.LEGACY and caller is not NOBODY and \
                task_table.asks_task(request.params):
            # A legacy client asks for a task: it gets one, whatever its server does.
            return self._behind(request, server, self.host.start_tool(
                name, arguments, on_progress=on_progress, call_input=call_input,
                log_level=level, on_log=on_log, trace_context=self._passed_on(request),
                identity=identity), client_key, admitted, caller)
        return self._behind(request, server, self.host.call_tool_relayed(
            name, arguments, on_progress=on_progress, call_input=call_input, log_level=level,
            on_log=on_log, trace_context=self._passed_on(request), identity=identity),
            client_key, admitted)

    def _searched_call(self, request: p.Request, name: str, arguments: dict[str, Any]
                       ) -> tuple[str, dict[str, Any]] | dict[str, Any]:
        """In tool-search mode: the tool a ``tools/call`` calls and its arguments
        (``call_tool``'s), or the whole response (``search_tools``, a mistake)."""
        if name == tool_search.SEARCH:
            asked = tool_search.search_arguments(arguments)
            result = asked if isinstance(asked, dict) else tool_search.found(
                self.host.search_tools(asked[0], limit=asked[1], identity=request.identity))
            return p.response(request.id, p.served_result(result, request.era, CALL))
        if name != tool_search.CALL:
            return p.error_response(request.id, tool_search.not_served(name))
        called = tool_search.call_arguments(arguments)
        if isinstance(called, tuple) and self._callable_name(called[0], request.identity):
            return called
        if isinstance(called, tuple) and self.auditor is not None:
            # Refused here, not behind, as the host would have: hidden, or not there.
            entry = self.host.tool_entry(called[0])
            hidden = self.host.access.may_call_tool(request.identity, entry, count=False) \
                if entry is not None else None
            self.auditor.refused(request, None, "denied", getattr(hidden, "rule", None),
                                 "ToolHidden" if entry is not None else "UnknownTool")
        refusal = called if isinstance(called, dict) else tool_search.unknown_tool(called[0])
        return p.response(request.id, p.served_result(refusal, request.era, CALL))

    def _server_of(self, name: Any, identity: Identity) -> str | None:
        """The server a call of tool ``name`` counts against (``admission``): under a
        policy, none for a tool ``identity`` may not list, whose call is answered as a
        name no tool has is (a refusal naming its server would tell it is there)."""
        if not isinstance(name, str):
            return None
        if not self.host.access.active:
            return self.host.server_of(name, identity)
        entry = self.host.tool_entry(name, identity)
        if entry is None or not self.host.access.may_list_tool(identity, entry):
            return None
        return entry.server

    def _callable_name(self, name: str, identity: Identity) -> bool:
        """Whether ``call_tool`` goes on to call ``name``: a tool in the catalog (or one
        whose server went away, to be told why), and under a policy one ``identity`` may
        list (one it may not is as unknown as a name no tool has)."""
        if not self.host.access.active:
            return self.host.server_of(name, identity) is not None or name in self._owners
        entry = self.host.tool_entry(name, identity)
        return entry is not None and self.host.access.may_list_tool(identity, entry)

    def admit_call(self, request: p.Request, client_key: Hashable
                   ) -> Admitted | p.InBandError:
        """Admit a ``tools/call`` of ``client_key``'s now, for a face that must choose its
        response's form before the call starts: its place (for ``call``, then
        ``release`` once the call has ended, however it ends), or the refusal."""
        name = request.params.get("name")
        arguments = request.params.get("arguments")
        if self.tool_search and name == tool_search.CALL and isinstance(arguments, dict):
            name = arguments.get("name")
        admitted = Admitted(self._server_of(name, request.identity),
                            _budget_key(request, client_key))
        refusal = self.admission.enter(admitted.server, admitted.client, admitted)
        return admitted if refusal is None else p.InBandError(refusal)

    def release(self, admitted: Admitted) -> None:
        """The call ``admit_call`` admitted has ended."""
        self.admission.leave(admitted.server, admitted.client, admitted)

    def _gone(self, tool: str) -> p.InBandError | None:
        """The error for a tool no longer served because its server is not ready."""
        owner = self._owners.get(tool)
        if owner is None:
            # No server ever served it (a tool of an identity's own catalog, or a name
            # no tool has): nothing to say, and no server's status to read for it.
            return None
        status = next((s for s in self.host.servers() if s.name == owner), None)
        if status is None or status.state is ServerState.READY:
            return None
        why = f": {status.reason}" if status.reason else ""
        return p.in_band(p.INVALID_PARAMS, f"tool {tool!r} is not available: its server "
                       f"{owner!r} is {status.state.value}{why}",
                       {"server": owner, "state": status.state.value})

    def _passed_on(self, request: p.Request) -> dict[str, str] | None:
        """The trace context the client sent (its ``_meta``'s, else its HTTP headers'),
        to go upstream as it came while the gateway records no span: with tracing on,
        the SERVER span continues it and the host's CLIENT span's context goes instead."""
        meta = request.meta
        if "traceparent" in meta:
            context = picked(meta)
        elif request.trace_headers is not None:
            context = request.trace_headers
        else:
            return None  # most requests: nothing to look up
        return None if self.host.tracing else context

    async def from_fleet(self, request: p.Request, client: Client = NO_CLIENT,
                         notify: Send | None = None,
                         client_key: Hashable = None) -> p.Message:
        """The response to a request about the fleet's prompts and resources: lists are
        merged, the rest goes to the server the name or URI belongs to, and its log
        messages (at the level the client asked, as for a call) to ``notify``, when the
        face can carry them. ``client_key``: the client it counts against, as for
        ``call``."""
        method, era = request.method, request.era
        if method == "tools/list":  # a host whose servers may list as each user
            async def listed() -> Mapping[str, Any]:
                tools = await self.host.list_tools(identity=request.identity)
                return p.list_result("tools", [p.served_tool(e, era) for e in tools], era)
            return await self._behind(request, None, listed(), client_key)
        if method in LISTS:
            member = LISTS[method][1]

            async def merged() -> Mapping[str, Any]:
                table = await self._offerings.refresh()
                items: Sequence[dict[str, Any]] = {
                    "prompts": table.prompts, "resources": table.resources,
                    "resourceTemplates": table.templates}[member]
                if self.host.access.active:
                    items = self.host.access.visible(request.identity, member, items,
                                                     _item_of(table, member))
                return p.list_result(member, list(items), era)
            return await self._behind(request, None, merged(), client_key)
        if method in ext.METHODS and not ext.serves(method, self._ready_capabilities(),
                                                    legacy=era is p.ClientEra.LEGACY):
            return p.error_response(request.id, p.unknown_method(method))
        if method == "skills/list":
            cursor = request.params.get("cursor")
            if cursor is not None and skills_page((), cursor) is None:
                return p.error_response(request.id, p.error(
                    p.INVALID_PARAMS, f"invalid cursor {cursor!r}"))
            return await self._behind(request, None, self._skills(cursor, request.identity),
                                      client_key)
        routed = await self._route(request)
        if isinstance(routed, p.InBandError):
            return routed.response(request.id)
        server, params = routed
        if self.host.access.active:
            refused = self._refused(request, server, params)
            if refused is not None:
                error, denied = refused
                if self.auditor is not None:
                    self.auditor.refused(request, server, "denied", denied.rule)
                return error.response(request.id)
        call_input = _call_input(request, client)
        if isinstance(call_input, p.InBandError):
            return call_input.response(request.id)
        if call_input.request_state is not None and self._held_rounds:
            self._release_round(call_input.request_state)  # this request takes it up
        level = _log_level(request, client)
        if isinstance(level, p.InBandError):
            return level.response(request.id)
        on_log = _logs_to(notify) if level is not None and notify is not None else None
        return await self._behind(request, server, self.host.request(
            server, method, params, call_input=call_input,
            log_level=level if on_log is not None else None, on_log=on_log,
            trace_context=self._passed_on(request), identity=request.identity), client_key)

    async def task_request(self, request: p.Request, caller: Caller = NOBODY,
                           client_key: Hashable = None) -> p.Message:
        """The response to a modern ``tasks/get``, ``tasks/update`` or ``tasks/cancel``
        about one of ``caller``'s tasks (``gateway/tasks.py``): from the task as its host
        last heard of it (``get``; its server is not asked), its input answered
        (``update``, sent to its server as a request of ``client_key``'s), or its
        cancellation (``cancel``: its host stops following it and tells its server)."""
        if not task_table.takes_tasks(request.meta):
            return p.error_response(request.id, task_table.missing_extension())
        held = self.tasks.find(request.params.get("taskId"), caller.owner)
        if held is None:
            return p.error_response(request.id, task_table.not_found())
        task = held.task
        if request.method == "tasks/get":
            detailed = task_table.detailed_task(held, request.era)
            if isinstance(detailed, bytes):
                return p.encoded_response(request.id, detailed)
            return p.response(request.id, detailed)
        if request.method == "tasks/cancel":
            if not task.done():
                self.tasks.cancelled(held)
                await task.cancel()
            return p.response(request.id, {"resultType": "complete"})
        responses = request.params.get("inputResponses")
        if not isinstance(responses, dict):
            return p.error_response(request.id, p.error(
                p.INVALID_PARAMS, "tasks/update needs an inputResponses object"))
        # Answers to what the task does not wait for are ignored, as its server would.
        pending = task.status.input_requests
        answered = {key: value for key, value in responses.items() if key in pending}
        if not answered or task.done() or not isinstance(task, ToolTask):
            return p.response(request.id, {"resultType": "complete"})
        return await self._behind(request, task.server, _responded(task, answered),
                                  client_key)

    async def legacy_task_request(self, request: p.Request, caller: Caller) -> p.Message:
        """The response to a legacy session's ``tasks/get``, ``tasks/result``,
        ``tasks/list`` or ``tasks/cancel`` about ``caller``'s tasks (``gateway/tasks.py``
        rule 7): from the task as its host last heard of it; ``tasks/result`` waits for
        its end (the session ending cancels its tasks, which ends the wait)."""
        if request.method == "tasks/list":
            page = self.tasks.page(caller.owner, request.params.get("cursor"))
            if page is None:
                return p.error_response(request.id, p.error(
                    p.INVALID_PARAMS, f"invalid cursor {request.params.get('cursor')!r}"))
            listed, cursor = page
            result: dict[str, Any] = {"tasks": [task_table.legacy_task(h) for h in listed]}
            if cursor is not None:
                result["nextCursor"] = cursor
            return p.response(request.id, result)
        held = self.tasks.find(request.params.get("taskId"), caller.owner)
        if held is None:
            return p.error_response(request.id, task_table.not_found())
        task = held.task
        if request.method == "tasks/cancel":
            if task.done():
                return p.error_response(request.id, p.error(
                    p.INVALID_PARAMS, "Cannot cancel task: it has already ended "
                    f"({task_table.legacy_task(held)['status']})"))
            self.tasks.cancelled(held)
            await task.cancel()
        elif request.method == "tasks/result":
            if not task.done():
                with contextlib.suppress(Exception):  # its end is read below
                    await task.wait()
            ended = task_table.legacy_result(held)
            if "error" in ended:
                return p.error_response(request.id, ended["error"])
            return p.response(request.id, ended["result"])
        return p.response(request.id, task_table.legacy_task(held))

    async def watch(self, uri: Any, era: p.ClientEra,
                    on_updated: Callable[[dict[str, Any]], None], identity: Identity = LOCAL
                    ) -> Callable[[], None] | p.InBandError:
        """Have ``on_updated(params)`` hear of updates to the resource ``uri`` from the
        server it belongs to: what stops that, or the error (no such resource, or its
        server offers no subscriptions). The URI is the server's own, so its updates
        need no translation."""
        if not isinstance(uri, str):
            return p.in_band(p.INVALID_PARAMS, "a resource URI is required")
        server = await self._offerings.resource(uri)
        # One the identity may not use is as one that is not there.
        if server is None or (self.host.access.active and not isinstance(
                self.host.access.may_call(identity, Item("resource", server, uri)), Allowed)):
            return p.InBandError(p.resource_not_found(uri, era))
        try:
            return self.host.subscribe_resource(server, uri, on_updated)
        except ValueError as exc:
            return p.in_band(p.INVALID_PARAMS, f"cannot subscribe to {uri}: {exc}",
                           {"uri": uri, "server": server})

    async def watch_listed(self, request: p.Request, on_updated: Callable[[dict[str, Any]], None]
                           ) -> tuple[list[str], Callable[[], None]] | p.InBandError:
        """A modern listen request's ``resourceSubscriptions``: the URIs granted (those
        whose servers offer subscriptions) and what stops them all, or the error for a
        request naming more than ``limits.listen_uris`` (then nothing is watched). Every
        URI is routed before the first is watched, and from there nothing waits: a request
        cancelled meanwhile (its client gone) leaves nothing watched. Each server gets
        the URIs that are its own as one change (``Host.subscribe_resources``)."""
        wanted = request.params.get("notifications")
        listed = wanted.get(RESOURCE_SUBSCRIPTIONS) if isinstance(wanted, dict) else None
        uris = list(dict.fromkeys(u for u in listed if isinstance(u, str))) \
            if isinstance(listed, list) else []
        limit = self.limits.listen_uris
        if len(uris) > limit:
            return p.in_band(p.INVALID_PARAMS, f"{RESOURCE_SUBSCRIPTIONS} names {len(uris)} "
                           f"resources, over the limit of {limit} for one listen request "
                           "(listen_uris)", {"limit": "listen_uris", "max": limit})
        routes = await self._offerings.resources(uris) if uris else {}
        by_server: dict[str, list[str]] = {}
        access = self.host.access
        for uri, server in routes.items():
            if server is not None and (not access.active or isinstance(access.may_call(
                    request.identity, Item("resource", server, uri)), Allowed)):
                by_server.setdefault(server, []).append(uri)
        stops: list[Callable[[], None]] = []
        taken: set[str] = set()
        for server, owned in by_server.items():
            try:
                stops.append(self.host.subscribe_resources(server, owned, on_updated))
            except ValueError:
                continue  # the server offers no subscriptions: its URIs are not granted
            taken.update(owned)

        def stop() -> None:
            for one in stops:
                one()
        return [uri for uri in uris if uri in taken], stop

    async def _behind(self, request: p.Request, server: str | None,
                      work: Coroutine[Any, Any, Any], client_key: Hashable = None,
                      admitted: Admitted | None = None,
                      taking: Caller | None = None) -> p.Message:
        """Run ``work`` (a request to ``server``, or to the fleet, of ``client_key``'s) if
        admitted (by the face already, when ``admitted``): its result as our response, in
        the client's era, or its failure as the client's error. ``taking``: the call
        may make a task, that caller's: a place for it in the task table is taken
        first (here, where it is always given back), and a task is held in it."""
        client_key = _budget_key(request, client_key)
        place: Place | None = None
        if taking is not None:
            reserved = self.tasks.reserve(taking.client)
            if not isinstance(reserved, Place):
                work.close()
                return p.error_response(request.id, reserved)
            place = reserved
        # The work names the request in the admission while it runs.
        ticket: object = work
        if admitted is None:
            refusal = self.admission.enter(server, client_key, ticket)
            if refusal is not None:
                if self.auditor is not None and request.method in AUDITED:
                    self.auditor.refused(request, server, "limited",
                                         error=str((refusal.get("data") or {}).get("kind")))
                work.close()
                if place is not None:
                    self.tasks.release(place)
                return p.error_response(request.id, refusal)
        # Every line logged while this request is worked on names it (``log_context``).
        tool = request.params.get("name") if request.method == CALL else None
        bound = log_context.bind(server, tool if isinstance(tool, str) else None, request.id)
        started = time.perf_counter() if log.isEnabledFor(logging.INFO) else 0.0
        # The SERVER span: its context (from the request's _meta, else the face's) is
        # current while the work runs, so the host's CLIENT span continues the trace.
        record = self.host.serve_record(request.method, request.params, request.id,
                                        request.version, self.transport, request.identity)
        held = False  # the request's place is kept past its answer (a held round)
        result: Any = None
        auditor = self.auditor if request.method in AUDITED else None
        audit_from = time.perf_counter() if auditor is not None else 0.0
        try:
            result = await (work if record is None else record.run(work))
        except asyncio.CancelledError as exc:
            if auditor is not None:
                auditor.ended(request, server, audit_from, failure=exc)
            raise  # the client cancelled: it expects no answer
        except Exception as exc:  # every failure becomes the client's error
            if auditor is not None:
                auditor.ended(request, server, audit_from, failure=exc)
            if not isinstance(exc, TrunklineError):
                log.exception("%s failed inside the gateway", request.method)
            elif started:
                log.info("%s failed after %.1f ms (%s): %s", request.method,
                         (time.perf_counter() - started) * 1000, type(exc).__name__,
                         exc.message)
            return p.error_response(request.id, p.error_for(exc))
        else:
            if auditor is not None:
                auditor.ended(request, server, audit_from, result)
            if started:
                log.info("%s answered in %.1f ms", request.method,
                         (time.perf_counter() - started) * 1000)
            if admitted is None and type(result) is InputRequired and result.held is not None:
                held = self._hold_round(result, server, client_key, ticket)
        finally:
            if admitted is None and not held:
                self.admission.leave(server, client_key, ticket)
            log_context.unbind(bound)
            if place is not None and not _makes_task(result, request.era):
                self.tasks.release(place)
        if place is not None and _makes_task(result, request.era):
            assert taking is not None  # only such a call has a place
            if request.era is p.ClientEra.MODERN:
                kept = self.tasks.hold(place, result, taking.owner)
                return p.response(request.id, task_table.created_result(kept))
            if isinstance(result, CallToolResult):  # answered at once: a task that ended
                result = task_table.EndedCall(server, result)
            kept = self.tasks.hold(place, result, taking.owner,
                                   task_table.asked_ttl_ms(request.params))
            return p.response(request.id, task_table.legacy_created(kept))
        if isinstance(result, CallToolResult):
            passed = p.passed_on_result(result.raw, result.raw_json, request.era)
            if passed is not None:
                return p.encoded_response(request.id, passed)
            result = result.raw  # as the server sent it: the checks are done
        elif isinstance(result, InputRequired):
            missing = _undeclared(result, request.meta.get(META_CLIENT_CAPABILITIES))
            if missing:
                return p.error_response(request.id, p.missing_capabilities(missing))
            result = result.raw
        return p.response(request.id, p.served_result(result, request.era, request.method))

    def _hold_round(self, needed: InputRequired, server: str | None, client_key: Hashable,
                    ticket: Hashable) -> bool:
        """A round whose call the host holds in flight (a legacy server's question to a
        modern client): the request's place stays its client's until the call is taken up
        or ends, since it holds its server's slot meanwhile. Whether it was kept."""
        until = needed.held
        token = needed.raw.get("requestState")
        if until is None or until.done() or not isinstance(token, str):
            return False
        self._held_rounds[token] = (server, client_key, ticket)
        until.add_done_callback(lambda _: self._release_round(token))
        return True

    def _release_round(self, token: Any) -> None:
        """A held round's place goes back: its call was taken up (the client's next
        request brings the answers, and is admitted on its own) or ended."""
        held = self._held_rounds.pop(token, None) if isinstance(token, str) else None
        if held is not None:
            self.admission.leave(*held)

    async def _skills(self, cursor: str | None, identity: Identity) -> Mapping[str, Any]:
        """A page of the merged ``skills/list`` (``offerings``, rule 5) after ``cursor``
        (checked): the first page lists the servers again, a later one pages the list
        the first one made. Under a policy, a skill is a resource (its ``SKILL.md``)."""
        table = self._offerings.table if cursor is not None else \
            await self._offerings.refresh()
        skills: Sequence[dict[str, Any]] = table.skills
        if self.host.access.active:
            skills = self.host.access.visible(identity, "skills", skills,
                                              _item_of(table, "skills"))
        page = skills_page(skills, cursor)
        assert page is not None  # the cursor was checked
        items, next_cursor = page
        result: dict[str, Any] = {"skills": items}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    def _refused(self, request: p.Request, server: str, params: dict[str, Any]
                 ) -> tuple[p.InBandError, Denied] | None:
        """Under a policy, the error for a request about a prompt or resource its identity
        may not use (and the decision): as for one that does not exist when it may not
        list it, else "not permitted"."""
        item = _item_asked(request.method, server, params)
        if item is None:
            return None
        decision = self.host.access.may_call(request.identity, item)
        if type(decision) is Allowed:
            return None
        assert isinstance(decision, Denied)
        if decision.hidden:
            return _not_found(request), decision
        what = f"{item.kind} {item.name!r}"
        return p.InBandError(p.not_permitted(f"using {what} is not permitted")), decision

    async def _route(self, request: p.Request) -> tuple[str, dict[str, Any]] | p.InBandError:
        """The server a request goes to and its params as that server knows its things."""
        params = {k: v for k, v in request.params.items() if k not in _NOT_FORWARDED}
        if request.method == "skills/get":
            uri = params.get("uri")
            server = await self._offerings.skill(uri) if isinstance(uri, str) else None
            if server is None:
                return _not_found(request)
            return server, params
        if request.method == "resources/directory/read":
            uri = params.get("uri")
            server = await self._offerings.directory(uri) if isinstance(uri, str) else None
            if server is None:
                return _not_found(request)
            return server, params
        if request.method == "prompts/get":
            return await self._prompt_route(request, params.get("name"), lambda local: {
                **params, "name": local})
        if request.method == "resources/read":
            return await self._resource_route(request, params.get("uri"), params)
        ref = params.get("ref")  # completion/complete
        if not isinstance(ref, dict):
            return p.in_band(p.INVALID_PARAMS, "completion/complete needs a ref")
        if ref.get("type") == "ref/prompt":
            return await self._prompt_route(request, ref.get("name"), lambda local: {
                **params, "ref": {**ref, "name": local}})
        if ref.get("type") == "ref/resource":
            return await self._resource_route(request, ref.get("uri"), params)
        return p.in_band(p.INVALID_PARAMS, f"unknown ref type {ref.get('type')!r}")

    async def _prompt_route(self, request: p.Request, name: Any,
                            renamed: Callable[[str], dict[str, Any]]
                            ) -> tuple[str, dict[str, Any]] | p.InBandError:
        route = await self._offerings.prompt(name) if isinstance(name, str) else None
        if route is None:
            return _not_found(request)
        server, local = route
        return server, renamed(local)

    async def _resource_route(self, request: p.Request, uri: Any, params: dict[str, Any]
                              ) -> tuple[str, dict[str, Any]] | p.InBandError:
        if not isinstance(uri, str):
            return p.in_band(p.INVALID_PARAMS, "a resource URI is required")
        server = await self._offerings.resource(uri)
        if server is None:
            return _not_found(request)
        return server, params


def _not_found(request: p.Request) -> p.InBandError:
    """The error for a prompt, resource, skill or directory that is not there, as the
    client named it: also what one its identity may not see gets (no existence oracle)."""
    params = request.params
    ref = params.get("ref")
    named = ref if request.method == "completion/complete" and isinstance(ref, dict) \
        else params
    if request.method == "skills/get":
        uri = params.get("uri")
        return p.in_band(p.INVALID_PARAMS, f"No skill is served at {uri}", {"uri": uri})
    if request.method == "resources/directory/read":
        uri = params.get("uri")
        return p.in_band(p.INVALID_PARAMS, f"{uri} is not a directory resource", {"uri": uri})
    if request.method == "prompts/get" or named.get("type") == "ref/prompt":
        return p.in_band(p.INVALID_PARAMS, f"Prompt not found: {named.get('name')!r}")
    return p.InBandError(p.resource_not_found(str(named.get("uri")), request.era))


def _budget_key(request: p.Request, client_key: Hashable) -> Hashable:
    """Whose budgets a request counts against (``admission``): its identity's, when it
    has one (an access token's, an API key's: every connection and session of one
    identity share them), else the client the face names."""
    identity = request.identity
    return client_key if identity is LOCAL else identity.key


def _item_asked(method: str, server: str, params: Mapping[str, Any]) -> Item | None:
    """What a routed request (``Answerer._route``'s params, named as the server knows
    them) uses, as the policy's item."""
    if method == "prompts/get":
        return Item("prompt", server, str(params.get("name")))
    if method in ("resources/read", "skills/get", "resources/directory/read"):
        return Item("resource", server, str(params.get("uri")))
    ref = params.get("ref")
    if method == "completion/complete" and isinstance(ref, dict):
        if ref.get("type") == "ref/prompt":
            return Item("prompt", server, str(ref.get("name")))
        return Item("resource", server, str(ref.get("uri")))
    return None


def _item_of(table: OfferingsTable, member: str) -> Callable[[dict[str, Any]], Item]:
    """What each served item of a merged list is, as the policy's item."""
    if member == "prompts":
        def prompt(served: dict[str, Any]) -> Item:
            server, local = table.prompt_routes[served["name"]]
            return Item("prompt", server, local)
        return prompt
    if member == "resourceTemplates":
        owners = {template: server for template, _pattern, server in table.template_routes}
        return lambda served: Item("resource", owners[served["uriTemplate"]],
                                   served["uriTemplate"])
    routes = table.skill_routes if member == "skills" else table.resource_routes
    return lambda served: Item("resource", routes[served["uri"]], served["uri"])


#: Request params the gateway does not pass on as they are: its own ``_meta`` goes on each
#: hop, and a client's answers to input travel in the call's ``CallInput``.
_NOT_FORWARDED = frozenset({"_meta", "inputResponses", "requestState"})


def _call_input(request: p.Request, client: Client) -> CallInput | p.InBandError:
    """How the request's input rounds go (see the module's docstring), or the error for
    answers that are not of the right shape."""
    if request.era is p.ClientEra.MODERN:
        responses = request.params.get("inputResponses")
        state = request.params.get("requestState")
        if responses is not None and not isinstance(responses, dict):
            return p.in_band(p.INVALID_PARAMS, "inputResponses must be an object")
        if state is not None and not isinstance(state, str):
            return p.in_band(p.INVALID_PARAMS, "requestState must be a string")
        return CallInput(relay=True, responses=responses, request_state=state,
                         capabilities=_relayable(request.meta.get(META_CLIENT_CAPABILITIES)))
    capabilities = _relayable(client.capabilities) if client.ask is not None else {}
    ask = client.ask
    handlers = {} if ask is None else {
        method: _asking(ask, method) for method, capability in CAPABILITY_OF.items()
        if capability in capabilities}
    return CallInput(handlers=handlers, capabilities=capabilities)


def _log_level(request: p.Request, client: Client) -> str | p.InBandError | None:
    """The level the request's log messages are wanted at (None: none are), or the error
    for a level that is not one: a modern client names it in ``_meta``, a legacy one set
    it for its session."""
    if request.era is p.ClientEra.LEGACY:
        return client.log_level
    level = request.meta.get(META_LOG_LEVEL)
    if level is None or level in LOG_LEVELS:
        return level
    return p.in_band(p.INVALID_PARAMS, f"unknown log level {level!r} in _meta "
                   f"{META_LOG_LEVEL}: one of {LOG_LEVELS}")


def _relayable(declared: Any) -> dict[str, Any]:
    """The client's declared capabilities the gateway can act on (it relays input
    requests, nothing else): what the server behind is told this request's client has."""
    # A dict (as JSON decodes) skips the ABC check, which is not free.
    if not declared or (type(declared) is not dict and not isinstance(declared, Mapping)):
        return {}
    return {name: value for name, value in declared.items()
            if name in CAPABILITY_OF.values() and isinstance(value, dict)}


def _asking(ask: Ask, method: str) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    return lambda params: ask(method, _without_task(params))


def _makes_task(result: Any, era: p.ClientEra) -> bool:
    """Whether a call that may make a task made one: its server's task, or, for a legacy
    client, a result given at once (``gateway/tasks.py`` rule 7)."""
    return type(result) is ToolTask or (era is p.ClientEra.LEGACY
                                        and isinstance(result, CallToolResult))


def _without_task(params: dict[str, Any]) -> dict[str, Any]:
    """A server's request as its client is asked it: without the task it names."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or RELATED_TASK not in meta:
        return params
    asked = {key: value for key, value in params.items() if key != "_meta"}
    rest = {key: value for key, value in meta.items() if key != RELATED_TASK}
    if rest:
        asked["_meta"] = rest
    return asked


def _undeclared(needed: InputRequired, declared: Any) -> dict[str, Any]:
    """The client capabilities an ``input_required`` result needs that the client did not
    declare (the server behind saw the gateway's, which are broader)."""
    declared = declared if isinstance(declared, dict) else {}
    missing: dict[str, Any] = {}
    for entry in needed.input_requests.values():
        method = entry.get("method") if isinstance(entry, dict) else None
        capability = CAPABILITY_OF.get(method) if isinstance(method, str) else None
        if capability is not None and capability not in declared:
            missing[capability] = {}
    return missing


async def _responded(task: ToolTask, responses: dict[str, Any]) -> dict[str, Any]:
    """``tasks/update``: the answers go to the task's server; an empty acknowledgement."""
    await task.respond(responses)
    return {}


def _logs_to(send: Send) -> Callable[[dict[str, Any]], None]:
    """A request's log messages from behind, as notifications to its client."""
    return lambda params: send(p.notification("notifications/message", params))


def _progress_to(token: str | int, send: Send) -> Callable[[Any, Any, Any], None]:
    def progress(value: Any, total: Any, message: Any) -> None:
        params: dict[str, Any] = {"progressToken": token, "progress": value}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        send(p.notification("notifications/progress", params))
    return progress


def listen_grant(request: p.Request, resources: list[str] | None = None) -> dict[str, Any]:
    """What a modern listen stream gets: changes of the lists it asked about (tools,
    prompts, resources), and updates of the ``resources`` granted
    (``Answerer.watch_listed``)."""
    wanted = request.params.get("notifications")
    granted: dict[str, Any] = {field: True for field in FILTERS if wanted.get(field) is True} \
        if isinstance(wanted, dict) else {}
    if resources:
        granted[RESOURCE_SUBSCRIPTIONS] = resources
    return granted


def granted_lists(granted: Mapping[str, Any]) -> frozenset[str]:
    """The lists (``tools``, ``prompts``, ``resources``) whose changes a listen stream
    was granted (``listen_grant``)."""
    return frozenset(FILTERS[field][1] for field in FILTERS if granted.get(field) is True)


def resource_updated(params: dict[str, Any]) -> dict[str, Any]:
    """The notification a client gets for an update from behind the gateway."""
    return p.notification(RESOURCE_UPDATED, {"uri": params.get("uri")})
