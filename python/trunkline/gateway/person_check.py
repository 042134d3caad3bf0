"""The browser that opened a sign-in link proves whose it is, before the sign-in goes on:
an OpenID Connect login at the gateway's own issuer, whose ID token must name the identity
the sign-in was asked of (``auth.user_sign_in``).

Without it a sign-in link is a one-time capability: whoever opens it first signs in, and a
link shown to one user and opened by another would bind the other's account upstream to
the first user. With it (``oauth.signInClient``: the gateway's client at its own issuer),
that is refused.

Rules:

1. Only a sign-in asked of an OAuth identity from one of the gateway's issuers is checked
   (an API key's or a local user's has no person to prove at an issuer); the login goes to
   that identity's own issuer, with PKCE S256, ``state``, ``scope=openid`` and RFC 8707
   ``resource`` (the gateway), back to ``CHECKED_PATH``.
2. The redirect back must carry a ``state`` this check issued (once), from the browser
   that opened the link (its binding cookie); RFC 9207 ``iss`` is checked where the issuer
   says it sends it. The code is redeemed at the issuer's token endpoint with the gateway's
   client, and the ``id_token`` is verified as the gateway verifies access tokens
   (signature by the issuer's keys, ``iss``, ``exp``), its audience being the gateway's
   client. Its ``sub`` must be the sign-in's identity's subject: if not, the sign-in ends,
   refused, and nothing is stored.
3. Nothing of the login is kept: the ID token is read and dropped.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import aiohttp

from ..auth.authorization import AuthorizationRequest, authorization_code, authorization_request
from ..auth.registration import BASIC, CONFIGURED, ClientIdentity, client_authentication
from ..auth.secret import Secret
from ..auth.tokens import code_exchange_form
from ..auth.user_sign_in import SignIn, SignInRefused, SignIns
from ..errors import AuthorizationFailed
from ..parent.user_credentials import issuer_metadata
from ..policy.identity import OAUTH, Identity
from . import bearer

#: Where the issuer sends the browser back (rule 1).
CHECKED_PATH = "/signin/checked"
_BODY_BYTES = 1 << 20


class PersonMismatch(SignInRefused):
    """The browser's person is not the one the sign-in was asked of (rule 2)."""

    def __init__(self, sign_in: SignIn, message: str) -> None:
        super().__init__(message)
        self.sign_in = sign_in


def _user(sign_in: SignIn) -> tuple[str, str | None, str]:
    """The sign-in's identity key: (kind, issuer, subject)."""
    return cast("tuple[str, str | None, str]", sign_in.identity)


@dataclass(frozen=True)
class _Login:
    sign_in: SignIn
    request: AuthorizationRequest
    token_endpoint: str
    client: ClientIdentity
    expires_at: float


class PersonCheck:
    """Rules 1 to 3 for one gateway process."""

    def __init__(self, *, client_id: str, client_secret: Secret | None,
                 issuers: Mapping[str, bearer.KeySource], sign_ins: SignIns,
                 resource: str, timeout_s: float = 15.0) -> None:
        """``issuers``: the gateway's issuers and their keys (the access tokens' own);
        ``sign_ins``: where the sign-ins wait (and where browsers reach the gateway);
        ``resource``: the gateway's."""
        self._client_id = client_id
        self._client_secret = client_secret
        self._issuers = dict(issuers)
        self._sign_ins = sign_ins
        self._resource = resource
        self._timeout_s = timeout_s
        self._logins: dict[str, _Login] = {}
        self._session: aiohttp.ClientSession | None = None

    def checks(self, sign_in: SignIn) -> bool:
        """Whether ``sign_in``'s browser must prove its person (rule 1)."""
        kind, issuer, _subject = _user(sign_in)
        return kind == OAUTH and issuer in self._issuers

    async def begin(self, sign_in: SignIn) -> str:
        """Where to send the browser that opened ``sign_in``'s link: its issuer's login."""
        _kind, issuer, _subject = _user(sign_in)
        assert issuer is not None  # checked: an OAuth identity of one of the issuers
        meta, token_endpoint = await self._metadata(issuer)
        client = ClientIdentity(client_id=self._client_id, client_secret=self._client_secret,
                                auth_method=BASIC if self._client_secret else "none",
                                issuer=issuer, source=CONFIGURED)
        request = authorization_request(
            meta, client, redirect_uri=self._sign_ins.base_url + CHECKED_PATH,
            resource=self._resource, scope=("openid",))
        self._expire()
        self._logins[request.state] = _Login(sign_in, request, token_endpoint, client,
                                             sign_in.expires_at)
        return request.url

    async def finish(self, query: str, binding: str | None) -> SignIn:
        """The browser came back from its login (rule 2): the sign-in it may go on with,
        its person proven. Raises ``SignInRefused``."""
        from urllib.parse import parse_qs

        state = parse_qs(query).get("state", [""])[0]
        login = self._logins.pop(state, None) if state else None
        if login is None or login.expires_at <= time.monotonic():
            raise SignInRefused("This sign-in is unknown, expired or already complete.")
        sign_in = login.sign_in
        opened = sign_in.binding
        if opened is None or binding is None or not secrets.compare_digest(binding, opened):
            raise SignInRefused("This sign-in was started in another browser: finish it in "
                                "the browser that opened the sign-in link.")
        landed = f"{self._sign_ins.base_url}{CHECKED_PATH}?{query}"
        try:
            code = authorization_code(login.request, landed)
            id_token = await self._redeem(login, code)
        except AuthorizationFailed as exc:
            raise SignInRefused(f"Your login could not be checked: {exc.message}") from None
        _kind, issuer, subject = _user(sign_in)
        assert issuer is not None
        verifier = bearer.Validator(bearer.TokenPolicy((issuer,), self._client_id, ()),
                                    {issuer: self._issuers[issuer]})
        verdict = await verifier.check(f"Bearer {id_token}")
        if not isinstance(verdict, Identity):
            raise SignInRefused(f"Your login could not be checked: {verdict.reason}")
        if verdict.subject != subject:
            raise PersonMismatch(sign_in,"This sign-in link was made for another user: it has been "
                                 "cancelled. Ask your own client for a link of your own.")
        return sign_in

    async def _redeem(self, login: _Login, code: Secret) -> str:
        headers, fields = client_authentication(login.client, login.client.issuer,
                                                now=time.time())
        form = {**code_exchange_form(login.request, code), **fields}
        if login.client.client_secret is None:
            form["client_id"] = login.client.client_id
        session = self._http()
        try:
            async with session.post(login.token_endpoint, data=form, headers=headers,
                                    allow_redirects=False) as resp:
                body = await resp.content.read(_BODY_BYTES)
                status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise AuthorizationFailed(f"the issuer could not be reached ({type(exc).__name__})",
                                      reason="unreachable") from None
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = {}
        id_token = doc.get("id_token") if isinstance(doc, dict) else None
        if status != 200 or not isinstance(id_token, str):
            raise AuthorizationFailed(f"the issuer gave no ID token (HTTP {status})",
                                      reason="no_id_token")
        return id_token

    async def _metadata(self, issuer: str) -> tuple[Any, str]:
        meta = await issuer_metadata(self._http(), issuer)
        if meta is None or not meta.token_endpoint:
            raise SignInRefused(f"The gateway's issuer {urlsplit(issuer).netloc} could not "
                                "be reached to check who you are; try again later.")
        return meta, meta.token_endpoint

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self._session

    def _expire(self) -> None:
        now = time.monotonic()
        for state in [s for s, login in self._logins.items() if login.expires_at <= now]:
            del self._logins[state]

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
