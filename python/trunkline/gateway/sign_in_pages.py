"""The gateway's two browser pages of a user's sign-in (``auth.user_sign_in``): the URL a
user is asked to open, and the authorization server's redirect back.

Rules:

1. ``GET /signin/<id>`` sends the browser on to the authorization server (302) with the
   sign-in's binding cookie (``HttpOnly``, ``SameSite=Lax``, for the callback's path only,
   ``Secure`` when the gateway is reached over https); an unknown, expired or already
   opened id gets a page saying so (400).
2. ``GET /oauth/callback?...`` hands the redirect to the sign-in whose ``state`` it carries,
   when the browser shows that sign-in's cookie, then waits (``PAGE_WAIT_S`` at most) for
   the flow to store the token and says how it ended. A refusal is a 400 page; nothing is
   handed on.
3. Pages are ``no-store`` and name no secret: what went wrong, and what to do.
4. Neither page takes an API key or a token (a browser has none): the sign-in id and the
   cookie are what binds the browser to the sign-in, the identity the sign-in belongs to
   is the one the call was made for, and nothing the browser sends changes it.
"""

from __future__ import annotations

import asyncio
import html

from ..auth.user_sign_in import BINDING_COOKIE, CALLBACK_PATH, SIGN_IN_PATH, SignInRefused, SignIns
from .exchange import Exchange
from .http_rules import cookie
from .person_check import CHECKED_PATH, PersonCheck, PersonMismatch
from .replies import HttpReply

#: Seconds the callback's page waits for the flow to end.
PAGE_WAIT_S = 20.0
_NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
_HTML = b"text/html; charset=utf-8"


def _page(status: int, title: str, text: str) -> HttpReply:
    body = (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>").encode()
    return HttpReply(status, body, _NO_STORE, _HTML)


class SignInPages:
    """Rules 1 and 2, over one process's sign-ins."""

    def __init__(self, sign_ins: SignIns, person_check: PersonCheck | None = None) -> None:
        """``person_check``: the browser proves its person first (``person_check``)."""
        self._sign_ins = sign_ins
        self._check = person_check

    def check_persons(self, check: PersonCheck) -> None:
        """From now on a browser proves its person before a sign-in goes on."""
        self._check = check

    @staticmethod
    def serves(path: str) -> bool:
        return path.startswith(SIGN_IN_PATH) or path == CALLBACK_PATH

    async def __call__(self, http: Exchange) -> HttpReply:
        if http.method != "GET":
            return HttpReply(405, b"", {"Allow": "GET"}, _HTML)
        if http.path == CALLBACK_PATH:
            return await self._callback(http)
        if http.path == CHECKED_PATH and self._check is not None:
            return await self._checked(http)
        return await self._open(http.path[len(SIGN_IN_PATH):])

    async def _open(self, sign_in_id: str) -> HttpReply:
        try:
            sign_in, binding = self._sign_ins.open(sign_in_id)
            location = sign_in.authorization_url
            if self._check is not None and self._check.checks(sign_in):
                location = await self._check.begin(sign_in)
        except SignInRefused as exc:
            return _page(400, "Sign-in link not usable", str(exc))
        # One cookie for the sign-in's pages: the person's check and the callback.
        cookie = (f"{BINDING_COOKIE}={binding}; Path=/; HttpOnly; SameSite=Lax; "
                  f"Max-Age={int(self._sign_ins.ttl_s)}"
                  + ("; Secure" if self._sign_ins.base_url.startswith("https:") else ""))
        return HttpReply(302, b"", {**_NO_STORE, "Location": location, "Set-Cookie": cookie},
                         _HTML)

    async def _checked(self, http: Exchange) -> HttpReply:
        """The browser's login at the gateway's issuer came back (``person_check``)."""
        assert self._check is not None
        try:
            sign_in = await self._check.finish(
                http.query, cookie(http.headers.get("cookie"), BINDING_COOKIE))
        except PersonMismatch as exc:
            self._sign_ins.refuse(exc.sign_in, "the browser's user was not the one asked")
            return _page(403, "Sign-in refused", str(exc))
        except SignInRefused as exc:
            return _page(400, "Sign-in refused", str(exc))
        return HttpReply(302, b"", {**_NO_STORE, "Location": sign_in.authorization_url},
                         _HTML)

    async def _callback(self, http: Exchange) -> HttpReply:
        binding = cookie(http.headers.get("cookie"), BINDING_COOKIE)
        landed = f"{self._sign_ins.callback_url}?{http.query}"
        try:
            sign_in = self._sign_ins.land(landed, binding)
        except SignInRefused as exc:
            return _page(400, "Sign-in refused", str(exc))
        try:
            async with asyncio.timeout(PAGE_WAIT_S):
                await sign_in.ended.wait()
        except TimeoutError:
            return _page(202, "Signing in", f"Still finishing the sign-in to "
                         f"{sign_in.server}; go back to your client in a moment.")
        if sign_in.failure is not None:
            return _page(400, "Sign-in failed", f"Signing in to {sign_in.server} failed: "
                         f"{sign_in.failure}")
        return _page(200, "Signed in", f"You are signed in to {sign_in.server}. You can "
                     "close this tab and go back to your client.")

