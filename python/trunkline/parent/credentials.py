"""The parent's half of OAuth: a worker's ``CredentialQuestion`` answered with the host's
``OAuthClient`` (``trunkline.auth``), for the one server that worker serves.

The worker says which server only by being that server's worker: the URL asked for is the
handle's configured one, never anything the worker or its server wrote, so a server cannot
obtain a token issued for another. The answer goes back to the generation that asked, and
only while it runs (a restarted worker asks again). Errors are answered too, never left
waiting: ``AuthorizationFailed``'s message (which names the server and never a secret), and
for anything else only its class name (an unexpected exception's text is not vetted).
A DPoP-bound header goes with its proof key (``auth.dpop`` rule 4): the worker signs the
proof of each request it sends, without asking here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import channel as ch
from ..errors import AuthorizationFailed
from .generation import Generation

if TYPE_CHECKING:
    from ..auth import OAuthClient

log = logging.getLogger("trunkline.host")


class CredentialDesk:
    """Answers one HTTP server's credential questions."""

    def __init__(self, oauth: OAuthClient | None, server: str, url: str, *,
                 legacy_fallbacks: bool = False) -> None:
        """``legacy_fallbacks``: the server is allowlisted for the legacy era
        (``ServerConfig.allow_legacy``), so the OAuth client may use the 2025-03-26
        fallbacks for it; never for any other."""
        self._oauth = oauth
        self._server = server
        self._url = url
        self._legacy_fallbacks = legacy_fallbacks

    def answer(self, gen: Generation, question: ch.CredentialQuestion) -> None:
        gen.scope.spawn(self._answer(gen, question), name="answer a credential question")

    async def _answer(self, gen: Generation, question: ch.CredentialQuestion) -> None:
        try:
            answer = await self._decide(question)
        except AuthorizationFailed as exc:
            answer = ch.CredentialAnswer(question.key, error=exc.message, reason=exc.reason,
                                         issuer=exc.issuer)
        except Exception as exc:  # noqa: BLE001 - the worker is told, never left waiting
            log.error("server %r: the OAuth client failed: %s", self._server,
                      type(exc).__name__)
            answer = ch.CredentialAnswer(
                question.key, error=f"server {self._server!r}: the host's OAuth client "
                f"failed ({type(exc).__name__})", reason="client_error")
        if not gen.ending:
            gen.send(answer.to_bytes())

    async def _decide(self, question: ch.CredentialQuestion) -> ch.CredentialAnswer:
        oauth = self._oauth
        if oauth is None:
            raise AuthorizationFailed(
                f"server {self._server!r} asks for credentials and this host has no OAuth "
                "client (Host(oauth=...))", reason="no_oauth_client",
                status=question.status or 401)
        if question.status is None:
            header = await oauth.authorization_for(self._url,
                                                   legacy_fallbacks=self._legacy_fallbacks)
        else:
            header = await oauth.on_challenge(self._url, question.status, question.challenge,
                                              rejected=question.rejected,
                                              legacy_fallbacks=self._legacy_fallbacks)
        renew_at = await oauth.renew_at(self._url) if header is not None else None
        # A source that binds no token to a key needs no ``dpop_key_for``.
        proof_key = getattr(oauth, "dpop_key_for", None)
        dpop_key = await proof_key(self._url, header) \
            if proof_key is not None and header is not None else None
        return ch.CredentialAnswer(question.key, authorization=header, renew_at=renew_at,
                                   dpop_key=dpop_key.reveal() if dpop_key is not None else None)
