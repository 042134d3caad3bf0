"""A call that needs its user to sign in first (``per_user`` servers): the user is asked to
open the sign-in URL by the specification's URL-mode elicitation, and the call goes on
once they have.

Rules:

1. A call refused with ``sign_in_required`` (``parent.user_credentials``) is answered by
   what its caller can do, as declared in its client capabilities (``elicitation.url``):
   - a caller that answers rounds itself (a library host's handlers; a gateway's legacy
     client, asked with ``elicitation/create`` on its session) is asked with a URL-mode
     elicitation naming the sign-in (``elicitationId``); once it accepts, the call waits
     for the sign-in to end, within its own timeout, and is made again, once;
   - a caller that relays rounds (a gateway's 2026-07-28 client) gets an
     ``input_required`` result with the URL-mode request and ``requestState``
     ``tl-signin.<sign-in id>``; its next call with that state waits for the sign-in to
     end (within the call's timeout) and is then made;
   - a caller that declared no URL elicitation gets the error, whose message carries the
     URL and says what to do.
2. A continuation names its sign-in: one filed for another identity, or at another
   server, is refused (``NotPermitted``), never waited for: a sign-in URL or state
   replayed by someone else completes nothing for them. A continuation whose sign-in has
   ended (or expired) is simply the call again: the credential the sign-in stored is
   used, or a new sign-in is asked for.
3. Declining (or cancelling) the elicitation ends the call with the sign-in error; the
   sign-in stays open for the user until it expires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from typing import Any

from ..auth.user_sign_in import SignIn, SignIns
from ..errors import AuthorizationFailed, NotPermitted
from ..protocol.mrtr import ELICIT
from .call_request import CallInput
from .mrtr import InputRequired

#: ``requestState`` of a sign-in round (rule 1).
STATE_PREFIX = "tl-signin."
#: The key of the sign-in's request in ``inputRequests``.
REQUEST_KEY = "sign-in"
SIGN_IN_REQUIRED = "sign_in_required"


def url_elicitation_declared(capabilities: Mapping[str, Any] | None) -> bool:
    """Whether a client declared URL-mode elicitation (``elicitation: {"url": {}}``)."""
    elicitation = capabilities.get("elicitation") if capabilities else None
    return isinstance(elicitation, Mapping) and isinstance(elicitation.get("url"), Mapping)


def _message(sign_in: SignIn) -> str:
    return (f"Sign in to {sign_in.server} to let this tool act as you. The page opens "
            "your account's sign-in; come back here when it says you are signed in.")


class SignInRounds:
    """Rule 1's answers, for one host's sign-ins."""

    def __init__(self, sign_ins: SignIns) -> None:
        self._sign_ins = sign_ins

    def sign_in_for(self, server: str, identity: Hashable) -> SignIn | None:
        return self._sign_ins.pending(server, identity)

    def continued(self, call_input: CallInput | None, server: str, identity: Hashable,
                  tool: str) -> tuple[CallInput | None, SignIn | None]:
        """The call's input without a sign-in continuation it carries, and the sign-in it
        continues if that still waits (rule 2). Raises ``NotPermitted`` for another's."""
        state = call_input.request_state if call_input is not None else None
        if call_input is None or state is None or not state.startswith(STATE_PREFIX):
            return call_input, None
        rest = CallInput(handlers=call_input.handlers, capabilities=call_input.capabilities,
                         relay=call_input.relay)
        sign_in = self._sign_ins.get(state[len(STATE_PREFIX):])
        if sign_in is None:
            return rest, None
        if sign_in.identity != identity or sign_in.server != server:
            raise NotPermitted("this sign-in was not asked of you", tool=tool, rule=None)
        return rest, sign_in

    async def answer(self, refused: AuthorizationFailed, sign_in: SignIn,
                     call_input: CallInput | None, capabilities: Mapping[str, Any] | None,
                     server: str, timeout_s: float | None) -> InputRequired | None:
        """Rule 1: an ``input_required`` result for a relaying caller, ``None`` once the
        user signed in (make the call again), or ``refused`` raised."""
        url = self._sign_ins.url_of(sign_in)
        declared = call_input.capabilities if call_input is not None and \
            call_input.capabilities is not None else capabilities
        if not url_elicitation_declared(declared):
            raise refused
        params = {"mode": "url", "message": _message(sign_in), "url": url}
        if call_input is not None and call_input.relay:
            return InputRequired(raw={
                "resultType": "input_required",
                "inputRequests": {REQUEST_KEY: {"method": ELICIT, "params": params}},
                "requestState": STATE_PREFIX + sign_in.id}, server=server)
        handler = call_input.handlers.get(ELICIT) if call_input is not None else None
        if handler is None:
            raise refused
        answer = await handler({**params, "elicitationId": sign_in.id})
        if not isinstance(answer, Mapping) or answer.get("action") != "accept":
            raise refused
        await self.wait(sign_in, timeout_s)
        return None

    async def wait(self, sign_in: SignIn, timeout_s: float | None) -> None:
        """Until the sign-in ends (within ``timeout_s``); raises ``AuthorizationFailed``
        when it failed or did not end in time."""
        try:
            async with asyncio.timeout(timeout_s):
                await sign_in.ended.wait()
        except TimeoutError:
            raise AuthorizationFailed(
                f"server {sign_in.server!r}: the sign-in did not finish within the call's "
                "timeout; call again once it has", reason="sign_in_pending") from None
        if sign_in.failure is not None:
            raise AuthorizationFailed(f"server {sign_in.server!r}: the sign-in failed: "
                                      f"{sign_in.failure}", reason="sign_in_failed")
