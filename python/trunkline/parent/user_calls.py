"""A call on a host some of whose servers act as each user (``credentials`` ``per_user`` or
``exchange``): routed by the caller's own catalog, and answered with a sign-in when the
caller has no credential at that server yet.

Rules:

1. The tool is looked up in the identity's catalog (``parent.user_catalogs``), built first
   if it never was: the names an identity calls by are the ones it was listed. A name it
   does not find there is looked up once more after its catalog is brought up to date.
2. A call to a shared server goes on as on any host. A call to a per-user server that
   fails with ``sign_in_required`` is answered as ``parent.sign_in_rounds`` says (a URL
   elicitation, an ``input_required`` round, or the error with the URL), and once the user
   signed in it is made again, once, after the identity's listing of that server is made
   afresh.
3. The server's sign-in tool (``user_catalogs.SIGN_IN_TOOL``) is the host's own: calling it
   starts (or takes up) the identity's sign-in at that server and, once it is done, lists
   the server for the identity and says so. An identity that holds a credential there
   already is told it is signed in.
4. A continuation of a sign-in round (``requestState`` ``tl-signin.``) waits, within the
   call's timeout, for that sign-in to end, and is refused if it was asked of someone
   else; the call then goes on without it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..channel import ServerState
from ..errors import AuthorizationFailed, UnknownTool
from ..protocol.mrtr import ELICIT
from .call_request import CallInput, CallRequest
from .mrtr import InputRequired
from .results import CallToolResult
from .user_catalogs import UserCatalogs

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..policy.identity import Identity
    from .credentials import CredentialSlots
    from .sign_in_rounds import SignInRounds
    from .supervisor import Supervisor

SIGN_IN_REQUIRED = "sign_in_required"

#: The call routed in one catalog (with the tool's entry there, when it was found): the
#: host's own routing (policy, bridging, settling).
Route = Callable[["Catalog", Any], Coroutine[Any, Any, Any]]


class UserCalls:
    """Rules 1 to 4, for one host."""

    def __init__(self, catalogs: UserCatalogs, servers: Supervisor,
                 slots: CredentialSlots, rounds: SignInRounds | None,
                 host_input: Callable[[], CallInput],
                 timeout_for: Callable[[str, float | None], float],
                 reach: Callable[[str], Awaitable[object]]) -> None:
        """``host_input``: the host's own input handlers and capabilities (a call that
        brings none is asked with them); ``timeout_for(server, timeout)``: a call's
        timeout at a server; ``reach(server)``: try a server not reached yet again (a
        user just signed in)."""
        self._catalogs = catalogs
        self._servers = servers
        self._slots = slots
        self._rounds = rounds
        self._host_input = host_input
        self._timeout_for = timeout_for
        self._reach = reach

    async def call(self, request: CallRequest, identity: Identity, route: Route) -> Any:
        """``route``: the host's call path for ``request`` in a given catalog."""
        catalog = self._catalogs.cached(identity)
        entry = _lookup(catalog, request.name) if catalog is not None else None
        if entry is None:
            catalog = await self._catalogs.catalog_for(identity)
            entry = _lookup(catalog, request.name)
        assert catalog is not None
        if entry is None or entry.server not in self._catalogs.per_identity:
            return await route(catalog, entry)
        server = entry.server
        rounds = self._rounds
        if rounds is not None:
            call_input, waiting = rounds.continued(request.call_input, server, identity.key,
                                                   request.name)
            request.call_input = call_input
            if waiting is not None:
                await rounds.wait(waiting, self._timeout_for(server, request.timeout))
        if self._catalogs.is_sign_in(identity, entry):
            return await self._sign_in_tool(request, identity, server,
                                            self._timeout_for(server, request.timeout))
        try:
            return await route(catalog, entry)
        except AuthorizationFailed as exc:
            if exc.reason != SIGN_IN_REQUIRED or rounds is None:
                raise
            needed = await self._asked(exc, request, identity, server,
                                       self._timeout_for(server, request.timeout))
            if needed is not None:
                return needed
        await self._catalogs.signed_in(identity, server)
        return await route(await self._catalogs.catalog_for(identity), None)

    async def _asked(self, refused: AuthorizationFailed, request: CallRequest,
                     identity: Identity, server: str, timeout: float) -> InputRequired | None:
        """Rule 2's answer: an ``input_required`` round, or None once signed in."""
        rounds = self._rounds
        assert rounds is not None
        sign_in = rounds.sign_in_for(server, identity.key)
        if sign_in is None:
            raise refused
        return await rounds.answer(refused, sign_in, self._input_of(request), None, server,
                                   timeout)

    async def _sign_in_tool(self, request: CallRequest, identity: Identity, server: str,
                            timeout: float) -> CallToolResult | InputRequired:
        """Rule 3."""
        sources = self._slots.user_credentials
        handle = self._servers.handle(server)
        url = getattr(handle.config.params, "url", None)
        if sources is None or self._rounds is None or not isinstance(url, str):
            raise UnknownTool(f"unknown tool {request.name!r}", method="tools/call")
        source = sources.source_for(server, identity)
        if await source.authorization_for(url) is None:
            try:
                await source.on_challenge(url, 401, None)
            except AuthorizationFailed as exc:
                if exc.reason != SIGN_IN_REQUIRED:
                    raise
                needed = await self._asked(exc, request, identity, server, timeout)
                if needed is not None:
                    return needed
        if self._servers.handle(server).state is not ServerState.READY:
            await self._reach(server)  # its first user: the server can be reached now
        await self._catalogs.signed_in(identity, server)
        text = f"You are signed in to {server}: its tools are listed for you now."
        content = [{"type": "text", "text": text}]
        return CallToolResult(content=content, tool=request.name, server=server,
                              raw={"content": content, "isError": False})

    def _input_of(self, request: CallRequest) -> CallInput:
        """The call's own input, or the host's when it brought no handlers."""
        call_input = request.call_input
        if call_input is not None and (call_input.relay or ELICIT in call_input.handlers):
            return call_input
        host = self._host_input()
        if call_input is None or call_input.capabilities is None:
            return host
        return CallInput(handlers=host.handlers, capabilities=call_input.capabilities)


def _lookup(catalog: Catalog, name: str) -> Any:
    return catalog.find(name)

