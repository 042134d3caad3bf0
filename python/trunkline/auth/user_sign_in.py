"""Users signing in through the gateway: the sign-ins waiting for a person's browser, and
the user-agent step (``Authorizer``) of one user's OAuth flow that hands its authorization
URL to them instead of opening a browser.

A server whose credentials are each user's (``"credentials": "per_user"``) is authorized
per identity by an ``OAuthClient`` of its own (``parent.user_credentials``). When that flow
needs a person, its authorizer (``GatewayAuthorizer``) files a ``SignIn`` here and waits
for the browser to come back; the caller meanwhile is asked to open the sign-in's URL (the
gateway's ``/signin/<id>``, never the authorization server's URL itself).

Rules:

1. A sign-in belongs to one (server, identity). Its id is 192 random bits, the only name
   of it that leaves the gateway (in the URL the client is asked to open); the
   authorization URL, ``state`` and PKCE verifier never do.
2. The sign-in URL opens once (``open``): the first browser to open it is sent on to the
   authorization server and given a cookie (``BINDING_COOKIE``, 128 random bits) that binds
   the sign-in to that browser. A second open of the same id is refused: a link replayed
   by someone else leads nowhere.
3. The authorization server sends the browser back to the gateway's callback (``land``):
   the redirect's ``state`` must be that of a sign-in waiting here, the browser must
   carry the cookie the sign-in's ``open`` gave it, and the sign-in must not have expired.
   Otherwise the callback is refused and nothing is handed to any flow (a forged or reused
   ``state``, a callback in another browser). The redirect is then the flow's: the OAuth
   client checks ``state`` again, RFC 9207 ``iss``, and exchanges the code. The sign-in's
   tokens are stored under the identity that was asked, whatever the browser did, so a
   sign-in started for one user can only ever complete for that user.
4. A sign-in lives ``ttl_s`` (10 minutes by default); then its flow fails with
   ``sign_in_timeout`` and it is forgotten. At most ``max_pending`` wait at once (one per
   server and identity: the OAuth client flies one flow per server); past that a new one
   is refused.
5. The table says when a sign-in ended (``ended``): a call waiting for the user to sign in
   goes on once it has.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from ..errors import AuthorizationFailed

#: The cookie that binds a sign-in to the browser that opened it (rule 2).
BINDING_COOKIE = "trunkline_sign_in"
#: Seconds a sign-in waits for its person (rule 4).
DEFAULT_TTL_S = 600.0
DEFAULT_MAX_PENDING = 10_000


class SignInRefused(Exception):
    """A sign-in URL or callback the table will not take; the message says why (for the
    browser's page: it names no secret)."""


@dataclass(eq=False)
class SignIn:
    """One sign-in waiting for a person (rule 1)."""

    id: str
    server: str
    identity: Hashable
    authorization_url: str
    state: str
    expires_at: float
    #: The redirect the browser landed on, for the flow waiting on it.
    landed: asyncio.Future[str]
    #: Set once the flow that filed the sign-in ended (stored a token, or failed).
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: Why it failed, once it ended without a token.
    failure: str | None = None
    #: The cookie the browser that opened it was given (rule 2); None: not opened yet.
    binding: str | None = None


class SignIns:
    """The sign-ins of one gateway process, waiting for their people."""

    def __init__(self, *, base_url: str, ttl_s: float = DEFAULT_TTL_S,
                 max_pending: int = DEFAULT_MAX_PENDING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``base_url``: what browsers reach the gateway by (the sign-in and callback
        routes hang below it)."""
        self.base_url = base_url.rstrip("/")
        self.ttl_s = ttl_s
        self.max_pending = max_pending
        self._clock = clock
        self._by_id: dict[str, SignIn] = {}
        self._by_state: dict[str, SignIn] = {}
        self._by_owner: dict[tuple[str, Hashable], SignIn] = {}

    @property
    def callback_url(self) -> str:
        """The redirect URI the per-user OAuth clients register (rule 3)."""
        return f"{self.base_url}{CALLBACK_PATH}"

    def url_of(self, sign_in: SignIn) -> str:
        """The URL the person is asked to open."""
        return f"{self.base_url}{SIGN_IN_PATH}{sign_in.id}"

    def __len__(self) -> int:
        self._expire()
        return len(self._by_id)

    def pending(self, server: str, identity: Hashable) -> SignIn | None:
        """The sign-in waiting for ``identity`` at ``server``, if one is."""
        self._expire()
        return self._by_owner.get((server, identity))

    def get(self, sign_in_id: str) -> SignIn | None:
        self._expire()
        return self._by_id.get(sign_in_id)

    def file(self, server: str, identity: Hashable, authorization_url: str) -> SignIn:
        """A new sign-in for the flow that needs a person (rule 1); raises
        ``AuthorizationFailed`` past the bound (rule 4)."""
        self._expire()
        held = self._by_owner.get((server, identity))
        if held is not None:
            self._drop(held, "another sign-in for the same server replaced it")
        if len(self._by_id) >= self.max_pending:
            raise AuthorizationFailed(
                f"server {server!r}: {self.max_pending} sign-ins are already waiting for "
                "their users; try again later", reason="too_many_sign_ins")
        state = parse_qs(urlsplit(authorization_url).query).get("state", [""])[0]
        if not state:
            raise AuthorizationFailed(f"server {server!r}: the authorization request has no "
                                      "state", reason="no_state")
        sign_in = SignIn(id=secrets.token_urlsafe(24), server=server, identity=identity,
                         authorization_url=authorization_url, state=state,
                         expires_at=self._clock() + self.ttl_s,
                         landed=asyncio.get_running_loop().create_future())
        self._by_id[sign_in.id] = sign_in
        self._by_state[state] = sign_in
        self._by_owner[(server, identity)] = sign_in
        return sign_in

    def open(self, sign_in_id: str) -> tuple[SignIn, str]:
        """The sign-in the browser opened the URL of (to be sent on to its authorization
        URL), and the cookie to give it (rule 2)."""
        sign_in = self.get(sign_in_id)
        if sign_in is None:
            raise SignInRefused("This sign-in link is unknown or has expired. Ask your "
                                "client to call the tool again for a new one.")
        if sign_in.binding is not None:
            raise SignInRefused("This sign-in link was already opened. A sign-in link "
                                "opens once; ask your client for a new one.")
        sign_in.binding = secrets.token_urlsafe(16)
        return sign_in, sign_in.binding

    def land(self, redirect_url: str, binding: str | None) -> SignIn:
        """The browser came back from the authorization server (rule 3): the sign-in the
        redirect completes, whose flow now has it."""
        state = parse_qs(urlsplit(redirect_url).query).get("state", [""])[0]
        self._expire()
        sign_in = self._by_state.get(state) if state else None
        if sign_in is None or sign_in.landed.done():
            raise SignInRefused("This sign-in is unknown, expired or already complete.")
        if sign_in.binding is None or binding is None or \
                not secrets.compare_digest(sign_in.binding, binding):
            raise SignInRefused("This sign-in was started in another browser: finish it "
                                "in the browser that opened the sign-in link.")
        sign_in.landed.set_result(redirect_url)
        # The state is spent: a second callback with it finds nothing.
        del self._by_state[state]
        return sign_in

    def refuse(self, sign_in: SignIn, why: str) -> None:
        """End ``sign_in`` now, refused (its flow fails; nothing is stored)."""
        self._drop(sign_in, why)

    def end(self, sign_in: SignIn, failure: str | None = None) -> None:
        """The sign-in's flow ended (rule 5)."""
        sign_in.failure = failure
        sign_in.ended.set()
        self._forget(sign_in)

    def _drop(self, sign_in: SignIn, why: str) -> None:
        if not sign_in.landed.done():
            sign_in.landed.set_exception(AuthorizationFailed(
                f"server {sign_in.server!r}: {why}", reason="sign_in_ended"))
            sign_in.landed.exception()  # retrieved: its flow may be gone already
        self.end(sign_in, why)

    def _forget(self, sign_in: SignIn) -> None:
        if self._by_id.get(sign_in.id) is sign_in:
            del self._by_id[sign_in.id]
        if self._by_state.get(sign_in.state) is sign_in:
            del self._by_state[sign_in.state]
        owner = (sign_in.server, sign_in.identity)
        if self._by_owner.get(owner) is sign_in:
            del self._by_owner[owner]

    def _expire(self) -> None:
        now = self._clock()
        for sign_in in [s for s in self._by_id.values() if s.expires_at <= now]:
            self._drop(sign_in, "nobody signed in in time")

    def close(self) -> None:
        for sign_in in list(self._by_id.values()):
            self._drop(sign_in, "the gateway is stopping")


#: The routes below the gateway's base URL (rules 2 and 3).
SIGN_IN_PATH = "/signin/"
CALLBACK_PATH = "/oauth/callback"


class GatewayAuthorizer:
    """The user-agent step of one user's flow at one server: file a sign-in, wait for its
    person to come back (rule 4's bound)."""

    def __init__(self, sign_ins: SignIns, server: str, identity: Hashable,
                 on_filed: Callable[[SignIn], None]) -> None:
        """``on_filed``: told at once that a person is needed (the call that started the
        flow is answered with the sign-in URL instead of waiting)."""
        self._sign_ins = sign_ins
        self._server = server
        self._identity = identity
        self._on_filed = on_filed

    async def __call__(self, authorization_url: str) -> str:
        sign_in = self._sign_ins.file(self._server, self._identity, authorization_url)
        self._on_filed(sign_in)
        try:
            async with asyncio.timeout(max(sign_in.expires_at - self._sign_ins._clock(), 0)):
                return await asyncio.shield(sign_in.landed)
        except TimeoutError:
            self._sign_ins.end(sign_in, "nobody signed in in time")
            raise AuthorizationFailed(
                f"server {self._server!r}: nobody signed in within "
                f"{self._sign_ins.ttl_s:g} s", reason="sign_in_timeout") from None
        except BaseException:
            if not sign_in.ended.is_set():
                self._sign_ins.end(sign_in, "the sign-in was abandoned")
            raise
