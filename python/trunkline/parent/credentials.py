"""The parent's half of OAuth: a worker's ``CredentialQuestion`` answered for the one server
that worker serves, from the host's ``OAuthClient`` (``trunkline.auth``) for slot 0, or from
the credential source of the identity a slot stands for.

Rules:

1. The worker says which server only by being that server's worker: the URL asked for is the
   handle's configured one, never anything the worker or its server wrote, so a server
   cannot obtain a token issued for another.
2. A server whose ``credentials`` mode is not ``"shared"`` is reached, for a call made for an
   identity, with that identity's credentials: the call's SUBMIT carries the identity's slot
   (``CredentialSlots``: a number per ``identity.key()``, the same for every server of the
   host), and that slot's questions are answered from
   ``user_credentials.source_for(server, identity)``. Slot 0 is the host's own. The identity
   of a slot is read when its question arrives.
3. Slot numbers are bounded (least recently used first); a number is given to another
   identity only after every worker was told to forget it (``CredentialsForgotten``, sent
   before any SUBMIT that uses the number again: frames are applied in order), so one
   identity's header is never sent for another's request. ``forget`` drops an identity's slot
   the same way (its credentials were revoked).
4. The answer goes back to the generation that asked, and only while it runs (a restarted
   worker asks again). Errors are answered too, never left waiting: ``AuthorizationFailed``'s
   message (which names the server and never a secret), and for anything else only its
   class name (an unexpected exception's text is not vetted).
   A DPoP-bound header goes with its proof key (``auth.dpop`` rule 4): the worker signs
   the proof of each request it sends, without asking here.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, cast

from .. import channel as ch
from ..errors import AuthorizationFailed, UserCredentialsMissing
from .generation import Generation

if TYPE_CHECKING:
    from ..auth import OAuthClient
    from ..policy.identity import Identity

log = logging.getLogger("trunkline.host")

#: The most identities with a slot number at once (rule 3).
MAX_SLOTS = 65536


class CredentialSource(Protocol):
    """Where one identity's (or the host's) credentials for servers come from: what
    ``OAuthClient`` already is."""

    async def authorization_for(self, server_url: str, *,
                                legacy_fallbacks: bool = False) -> str | None:
        """The ``Authorization`` header to send to ``server_url`` now, if any is held."""

    async def on_challenge(self, server_url: str, status: int, www_authenticate: str | None,
                           *, rejected: str | None = None,
                           legacy_fallbacks: bool = False) -> str | None:
        """The header to send again after ``server_url`` answered ``status`` 401/403 with
        ``www_authenticate`` to a request that carried ``rejected``."""

    async def renew_at(self, server_url: str) -> float | None:
        """The wall-clock time after which the header should be renewed, if known."""


class UserCredentials(Protocol):
    """The host's credential sources for users (``Host(user_credentials=...)``)."""

    def source_for(self, server: str, identity: Identity) -> CredentialSource:
        """``identity``'s source for the server named ``server``; may raise
        ``AuthorizationFailed`` (e.g. the identity has not signed in to it)."""


class CredentialSlots:
    """Slot numbers of identities (``identity.key()`` -> a number from 1 up), for every
    server of one host (rule 3)."""

    def __init__(self, user_credentials: UserCredentials | None, *,
                 forget: Callable[[list[int]], None] = lambda _slots: None,
                 max_slots: int = MAX_SLOTS) -> None:
        """``forget(slots)``: tell every worker to forget these slots, now."""
        self.user_credentials = user_credentials
        self._forget = forget
        self._max_slots = max_slots
        self._slots: collections.OrderedDict[object, int] = collections.OrderedDict()
        self._identities: dict[int, Identity] = {}
        self._free: list[int] = []
        self._next = 1

    def __len__(self) -> int:
        return len(self._slots)

    def slot_for(self, identity: Identity, server: str) -> int:
        """``identity``'s slot number, given on its first use. Raises
        ``UserCredentialsMissing`` (naming ``server``) when the host has no sources."""
        if self.user_credentials is None:
            raise UserCredentialsMissing(
                f"server {server!r} is reached with each user's own credentials, and this "
                "host has no credential sources for users (Host(user_credentials=...))",
                server=server, sent=False)
        key = identity.key
        slot = self._slots.get(key)
        if slot is not None:
            self._slots.move_to_end(key)
        else:
            if len(self._slots) >= self._max_slots:
                _, old = self._slots.popitem(last=False)
                self._release(old)
            slot = self._free.pop() if self._free else self._take()
            self._slots[key] = slot
        self._identities[slot] = identity
        return slot

    def _take(self) -> int:
        # Never past max_slots: a number is taken only while fewer are given out.
        slot = self._next
        self._next += 1
        return slot

    def _release(self, slot: int) -> None:
        del self._identities[slot]
        self._forget([slot])
        self._free.append(slot)

    def identity_of(self, slot: int) -> Identity | None:
        return self._identities.get(slot)

    def forget(self, identity: Identity) -> int | None:
        """Drop ``identity``'s slot (every worker forgets what it held for it); the slot it
        had, if it had one."""
        slot = self._slots.pop(identity.key, None)
        if slot is not None:
            self._release(slot)
        return slot


class CredentialDesk:
    """Answers one HTTP server's credential questions."""

    def __init__(self, oauth: OAuthClient | None, server: str, url: str, *,
                 legacy_fallbacks: bool = False, slots: CredentialSlots | None = None) -> None:
        """``legacy_fallbacks``: the server is allowlisted for the legacy era
        (``ServerConfig.allow_legacy``), so the OAuth client may use the 2025-03-26
        fallbacks for it; never for any other. ``slots``: the host's identities by slot,
        for a server reached with each user's own credentials (None: slot 0 only)."""
        self._oauth = oauth
        self._server = server
        self._url = url
        self._legacy_fallbacks = legacy_fallbacks
        self._slots = slots

    def answer(self, gen: Generation, question: ch.CredentialQuestion) -> None:
        # The slot's identity is read now, as the question arrives (rule 2).
        identity = None
        if question.slot != 0 and self._slots is not None:
            identity = self._slots.identity_of(question.slot)
        gen.scope.spawn(self._answer(gen, question, identity),
                        name="answer a credential question")

    async def _answer(self, gen: Generation, question: ch.CredentialQuestion,
                      identity: Identity | None) -> None:
        key, slot = question.key, question.slot
        try:
            answer = await self._decide(question, identity)
        except AuthorizationFailed as exc:
            answer = ch.CredentialAnswer(key, error=exc.message, reason=exc.reason,
                                         issuer=exc.issuer, slot=slot)
        except Exception as exc:  # noqa: BLE001 - the worker is told, never left waiting
            log.error("server %r: the credential source failed: %s", self._server,
                      type(exc).__name__)
            answer = ch.CredentialAnswer(
                key, error=f"server {self._server!r}: the host's credential source "
                f"failed ({type(exc).__name__})", reason="client_error", slot=slot)
        if not gen.ending:
            gen.send(answer.to_bytes())

    def _source(self, question: ch.CredentialQuestion,
                identity: Identity | None) -> CredentialSource:
        if question.slot == 0:
            users = self._slots.user_credentials if self._slots is not None else None
            shared_source = getattr(users, "shared_source", None)
            # A server that acts as each user: the host's own requests (its era's proof)
            # go with a user's credential (``parent.user_credentials`` rule 5).
            own = shared_source(self._server) if shared_source is not None else None
            if own is not None:
                return cast("CredentialSource", own)
            if self._oauth is None:
                raise AuthorizationFailed(
                    f"server {self._server!r} asks for credentials and this host has no OAuth "
                    "client (Host(oauth=...))", reason="no_oauth_client",
                    status=question.status or 401)
            return self._oauth
        slots = self._slots
        if slots is None or slots.user_credentials is None or identity is None:
            raise AuthorizationFailed(
                f"server {self._server!r} asks for the credentials of an identity this host "
                "no longer holds a slot for", reason="withdrawn", status=question.status or 401)
        return slots.user_credentials.source_for(self._server, identity)

    async def _decide(self, question: ch.CredentialQuestion,
                      identity: Identity | None) -> ch.CredentialAnswer:
        source = self._source(question, identity)
        if question.status is None:
            header = await source.authorization_for(self._url,
                                                    legacy_fallbacks=self._legacy_fallbacks)
        else:
            header = await source.on_challenge(self._url, question.status, question.challenge,
                                               rejected=question.rejected,
                                               legacy_fallbacks=self._legacy_fallbacks)
        renew_at = await source.renew_at(self._url) if header is not None else None
        # A source that binds no token to a key needs no ``dpop_key_for``.
        proof_key = getattr(source, "dpop_key_for", None)
        dpop_key = await proof_key(self._url, header) \
            if proof_key is not None and header is not None else None
        return ch.CredentialAnswer(question.key, authorization=header, renew_at=renew_at,
                                   dpop_key=dpop_key.reveal() if dpop_key is not None else None,
                                   slot=question.slot)
