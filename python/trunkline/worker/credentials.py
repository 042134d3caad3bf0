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

A DPoP-bound header comes with its proof key (``auth.dpop`` rule 4): ``dpop`` (a
``DpopSigner``) then signs a fresh proof for each request (``proof``), with the server's
latest ``DPoP-Nonce``; a ``use_dpop_nonce`` refusal carrying a new nonce is sent again
with it, without asking the host. The key stays a ``Secret`` in the signer, never printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import channel as ch
from ..errors import AuthorizationFailed, ConfigurationError

if TYPE_CHECKING:
    from ..auth.dpop import DpopSigner

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
        #: The proofs of a DPoP-bound header (None: a Bearer header, or none).
        self.dpop: DpopSigner | None = None

    def proof(self, method: str, url: str) -> tuple[str, str | None] | None:
        """A fresh ``DPoP`` header value for one request carrying ``header``, and the
        nonce it carries; ``None`` when the header is not DPoP-bound."""
        if self.dpop is None or self.header is None:
            return None
        return self.dpop.proof(method, url, self.header, now=self._clock())

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
        try:
            self._take_dpop_key(answer.dpop_key)
        except ConfigurationError as exc:
            future.set_exception(AuthorizationFailed(exc.message, reason="dpop_key"))
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

    def _take_dpop_key(self, private_jwk: str | None) -> None:
        """The key of a DPoP-bound header; the server's nonce outlives a change of key."""
        if private_jwk is None:
            self.dpop = None
            return
        if self.dpop is not None and self.dpop.key.secret.reveal() == private_jwk:
            return
        # Imported here: only a worker whose server binds tokens pays for it.
        from ..auth.dpop import DpopSigner
        from ..auth.secret import Secret

        signer = DpopSigner(Secret(private_jwk))
        if self.dpop is not None:
            signer.nonces = self.dpop.nonces
        self.dpop = signer
