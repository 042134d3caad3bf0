"""The worker's half of OAuth: its HTTP server's ``Authorization`` headers, asked of the host.

Tokens live in the parent, in the host's one ``OAuthClient`` and its store (so a restarted
worker loses nothing, and many workers never race for one refresh), and for a server reached
with each user's own credentials (``ServerConfig.credentials``), in that user's credential
source. A request says whose credentials it goes with by its credential slot (``SUBMIT``'s
``credential``: 0 the host's own, another number one identity's, given by the parent). Per
slot (``HostCredentials``) a worker holds only the header it was last given, and asks the
parent over the channel (``CredentialQuestion``, answered by ``CredentialAnswer``, both
naming the slot):

1. when the server answered 401 or 403, saying what the refused request carried;
2. before a request, when the header it holds is due for renewal (``renew_at``, the
   parent's wall-clock time: the token is refreshed before it expires, not after a 401).

One question at a time: callers that need an answer while one is on its way wait for it. A
request refused with a header older than the one held since is simply sent again with the
newer one, without asking. An error answer becomes ``AuthorizationFailed`` for the request
that needed it; the message is the host's, which names the server and never a secret.

``CredentialSlots`` holds them all: slot 0 for the worker's life, every other slot from its
first request on (which asks for the slot's header before it is sent: the parent is asked
once per identity, not after a 401), at most ``max_slots`` of them (the least recently used
idle one is dropped: its next request simply asks again). A 401 for one slot asks for that
slot only; the other slots' requests keep going with their headers. Question keys are unique
across the worker's slots, so an answer reaches the question it answers, even one of a slot
dropped since. A slot the parent says to forget (``CredentialsForgotten``: its identity's
credentials were revoked, or its number goes to another identity) is dropped at once: its
header is never sent again, and a request waiting for its answer fails.

A DPoP-bound header comes with its proof key (``auth.dpop`` rule 4): ``dpop`` (a
``DpopSigner``) then signs a fresh proof for each request (``proof``), with the server's
latest ``DPoP-Nonce``; a ``use_dpop_nonce`` refusal carrying a new nonce is sent again
with it, without asking the host. The key stays a ``Secret`` in the signer, never printed.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from .. import channel as ch
from ..errors import AuthorizationFailed, ConfigurationError

if TYPE_CHECKING:
    from ..auth.dpop import DpopSigner

#: Seconds before a renewal that left the header as it was is asked for again.
_RENEW_AGAIN_S = 5.0


#: The most credential slots a worker holds beside slot 0.
MAX_SLOTS = 4096


class HostCredentials:
    """One credential slot's header (``slot`` 0: the host's own)."""

    def __init__(self, to_parent: Callable[[bytes], None],
                 clock: Callable[[], float] = time.time, *, slot: int = 0,
                 keys: Iterator[int] | None = None,
                 questions: dict[int, HostCredentials] | None = None,
                 ask_first: bool = False) -> None:
        """``keys``: the worker's question keys (shared by its slots); ``questions``: where
        a question on its way is registered under its key, for its answer to find it;
        ``ask_first``: the first request asks for a header before it is sent (an
        identity's slot: its server is known to want one), rather than after a 401."""
        self._to_parent = to_parent
        self._clock = clock
        self.slot = slot
        self._keys = keys if keys is not None else itertools.count(1)
        self._questions = questions
        #: The header to send, as last given by the host (None: send none).
        self.header: str | None = None
        self._renew_at: float | None = 0.0 if ask_first else None
        self._asking: asyncio.Future[None] | None = None
        self._key = 0  # of the question on its way
        #: The parent said to forget this slot: nothing is asked or sent for it any more.
        self.forgotten = False
        #: The proofs of a DPoP-bound header (None: a Bearer header, or none).
        self.dpop: DpopSigner | None = None

    def proof(self, method: str, url: str) -> tuple[str, str | None] | None:
        """A fresh ``DPoP`` header value for one request carrying ``header``, and the
        nonce it carries; ``None`` when the header is not DPoP-bound."""
        if self.dpop is None or self.header is None:
            return None
        return self.dpop.proof(method, url, self.header, now=self._clock())

    @property
    def asking(self) -> bool:
        """Whether a question of this slot is on its way."""
        return self._asking is not None

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
        if self.forgotten:
            raise _withdrawn()
        if self._asking is not None:
            await asyncio.shield(self._asking)
            return
        self._key = key = next(self._keys)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._asking = future
        if self._questions is not None:
            self._questions[key] = self
        self._to_parent(ch.CredentialQuestion(key, status, challenge, rejected,
                                              slot=self.slot).to_bytes())
        try:
            await asyncio.shield(future)
        finally:
            if self._asking is future:
                self._asking = None
            if self._questions is not None and self._questions.get(key) is self:
                del self._questions[key]

    def forget(self) -> None:
        """Drop the header for good; a request waiting for an answer fails."""
        self.forgotten = True
        self.header = None
        self._renew_at = None
        future = self._asking
        if future is not None and not future.done():
            future.set_exception(_withdrawn())
            future.exception()  # retrieved by whoever awaits it

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


def _withdrawn() -> AuthorizationFailed:
    return AuthorizationFailed(
        "the credentials of the identity this request was made for were withdrawn by the "
        "host", reason="withdrawn")


class CredentialSlots:
    """A worker's credential slots: slot 0, and up to ``max_slots`` others (LRU)."""

    def __init__(self, to_parent: Callable[[bytes], None],
                 clock: Callable[[], float] = time.time, *, shared: bool = True,
                 max_slots: int = MAX_SLOTS) -> None:
        """``shared``: slot 0 asks the host (it has an OAuth client); without it a request
        of slot 0 carries no header and a 401 to it is its failure."""
        self._to_parent = to_parent
        self._clock = clock
        self._keys = itertools.count(1)
        self._questions: dict[int, HostCredentials] = {}
        self._max_slots = max_slots
        self._slots: collections.OrderedDict[int, HostCredentials] = collections.OrderedDict()
        #: Slot 0's, for the worker's life (None: the host has no credentials of its own).
        self.shared = self._new(0) if shared else None

    def _new(self, slot: int) -> HostCredentials:
        return HostCredentials(self._to_parent, self._clock, slot=slot, keys=self._keys,
                               questions=self._questions, ask_first=slot != 0)

    def __len__(self) -> int:
        """Slots held beside slot 0."""
        return len(self._slots)

    def slot(self, slot: int) -> HostCredentials | None:
        """The credentials of ``slot``, made on its first request (slot 0: ``shared``)."""
        if slot == 0:
            return self.shared
        held = self._slots.get(slot)
        if held is not None:
            self._slots.move_to_end(slot)
            return held
        held = self._slots[slot] = self._new(slot)
        if len(self._slots) > self._max_slots:
            self._evict()
        return held

    def _evict(self) -> None:
        # The least recently used slot with no question on its way (its answer must find
        # it: an asking slot stays until answered, so the bound may be passed by those).
        for slot, held in self._slots.items():
            if not held.asking:
                del self._slots[slot]
                return

    def forget(self, slots: Iterable[int]) -> None:
        """Drop these slots now (``CredentialsForgotten``); slot 0 is never dropped."""
        for slot in slots:
            held = self._slots.pop(slot, None)
            if held is not None:
                held.forget()

    def on_answer(self, answer: ch.CredentialAnswer) -> None:
        held = self._questions.get(answer.key)
        if held is not None and held.slot == answer.slot:
            held.on_answer(answer)
