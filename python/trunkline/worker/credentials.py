"""The worker's half of OAuth: its HTTP server's ``Authorization`` header, asked of the host.

Tokens live in the parent, in the host's one ``OAuthClient`` and its store (so a restarted
worker loses nothing, and many workers never race for one refresh). A worker holds only the
header it was last given, and asks the parent over the channel (``CredentialQuestion``,
answered by ``CredentialAnswer``):

1. when the server answered 401 or 403, saying what the refused request carried;
2. before a request, when the header it holds is due for renewal (``renew_at``, the
   parent's wall-clock time: the token is refreshed before it expires, not after a 401).

One question at a time: callers that need an answer while one is on its way wait for it. A
request refused with a header older than the one held since is simply sent again with the
newer one, without asking. An error answer becomes ``AuthorizationFailed`` for the request
that needed it; the message is the host's, which names the server and never a secret.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from .. import channel as ch
from ..errors import AuthorizationFailed

#: Seconds before a renewal that left the header as it was is asked for again.
_RENEW_AGAIN_S = 5.0


class HostCredentials:
    def __init__(self, to_parent: Callable[[bytes], None],
                 clock: Callable[[], float] = time.time) -> None:
        self._to_parent = to_parent
        self._clock = clock
        #: The header to send, as last given by the host (None: send none).
        self.header: str | None = None
        self._renew_at: float | None = None
        self._asking: asyncio.Future[None] | None = None
        self._key = 0  # of the question on its way

    @property
    def due(self) -> bool:
        """Whether the held header should be renewed before the next request."""
        return self._renew_at is not None and self._clock() >= self._renew_at

    async def renew(self) -> None:
        """Ask for a fresh header (the held one is due)."""
        await self._ask(None, None, None)

    async def challenged(self, status: int, challenge: str | None, sent: str | None) -> None:
        """The server refused a request that carried ``sent`` with ``status``: after this,
        ``header`` is what to send it with again. Raises ``AuthorizationFailed``."""
        if self._asking is not None:
            await asyncio.shield(self._asking)
        if self.header is not None and self.header != sent:
            return  # a newer header came meanwhile: the request goes again with it
        await self._ask(status, challenge, sent)

    async def _ask(self, status: int | None, challenge: str | None,
                   rejected: str | None) -> None:
        if self._asking is not None:
            await asyncio.shield(self._asking)
            return
        self._key += 1
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._asking = future
        self._to_parent(ch.CredentialQuestion(self._key, status, challenge,
                                              rejected).to_bytes())
        try:
            await asyncio.shield(future)
        finally:
            if self._asking is future:
                self._asking = None

    def on_answer(self, answer: ch.CredentialAnswer) -> None:
        future = self._asking
        if future is None or future.done() or answer.key != self._key:
            return  # an answer nobody waits for any more
        if answer.error is not None:
            future.set_exception(AuthorizationFailed(
                answer.error, reason=answer.reason or "refused", issuer=answer.issuer))
            # Retrieved by whoever awaits it; marked so an unawaited one is not reported.
            future.exception()
            return
        self.header = answer.authorization
        # A renewal that could not happen yet (its authorization server unreachable: the
        # host keeps the token while it lasts) is asked again a little later, not before
        # every request.
        renew_at = answer.renew_at
        if renew_at is not None and renew_at <= self._clock():
            renew_at = self._clock() + _RENEW_AGAIN_S
        self._renew_at = None if self.header is None else renew_at
        future.set_result(None)
