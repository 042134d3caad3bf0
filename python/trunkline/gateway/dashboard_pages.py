"""The operator dashboard's pages (``/admin``): a small static page and its script and
stylesheet, shipped in the package (``gateway/dashboard/``), which read everything they
show from the operator API (``operator_api``) in the browser.

Rules:

1. ``GET /admin`` (and ``/admin/``) is the fleet page to an operator (``AdminAccess``: a
   session cookie, or the admin credential as a bearer); to anyone else it is the sign-in
   page, answered 401 (a form POSTing ``key`` to ``/admin/login``, which the operator API
   answers). ``GET /admin/static/<file>`` serves the script, the stylesheet and the icon
   to an operator; the stylesheet and the icon are served to anyone, since the sign-in
   page needs them and they are the same bytes as the package's. Any other path under
   them is 404; any other method 405.
2. Every answer carries a ``Content-Security-Policy`` that lets the page load only the
   gateway's own script, stylesheet and API (``script-src 'self'``, ``style-src 'self'``,
   ``connect-src 'self'``: no inline script or style, no other origin), submit forms only
   to the gateway, and never be framed; with ``X-Content-Type-Options: nosniff`` and
   ``Referrer-Policy: no-referrer``. Pages are ``no-store``; the script and stylesheet
   ``no-cache`` with an ``ETag`` (a new version is never taken from a cache).
3. The files are read once, when the pages are made. No page holds data, so none can
   hold a secret: the data comes from the API and the script shows it as text only. The
   one thing filled in is the sign-in page's note after a refused login (``?login=``
   ``refused`` or ``limited``, where the login sends the browser back): a sentence of the
   gateway's own, chosen by that value, never the value itself.
"""

from __future__ import annotations

import hashlib
import html
from importlib import resources
from typing import Protocol
from urllib.parse import parse_qs

from .exchange import Exchange
from .replies import HttpReply

#: The paths the pages answer (the operator API hands them over: ``OperatorApi(pages=)``).
PAGE_PATHS = ("/admin", "/admin/")
STATIC_PREFIX = "/admin/static/"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_SECURITY = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
             "Referrer-Policy": "no-referrer"}
_PAGE_HEADERS = {**_SECURITY, "Cache-Control": "no-store"}
_HTML = b"text/html; charset=utf-8"
#: The static files, their content types, and whether anyone may have them (rule 1).
_STATIC: dict[str, tuple[bytes, bool]] = {
    "app.js": (b"text/javascript; charset=utf-8", False),
    "app.css": (b"text/css; charset=utf-8", True),
    "favicon.svg": (b"image/svg+xml", True),
}

#: The sign-in page's note after a refused login (rule 3), by the ``login`` query value.
LOGIN_NOTES = {
    "refused": "That is not an admin key of this gateway.",
    "limited": "Too many failed sign-ins from this address: try again in a few minutes.",
}
_NOTE_SLOT = b'<p id="login-note" class="note"></p>'


class Operators(Protocol):
    """Who is an operator (``admin_access.AdminAccess``)."""

    async def check(self, exchange: Exchange, *, changes_state: bool) -> HttpReply | None:
        """None for an operator; else the refusal to answer with."""
        ...


def _read(name: str) -> bytes:
    return (resources.files(__package__ or "trunkline.gateway") / "dashboard" / name
            ).read_bytes()


class DashboardPages:
    """The handler of ``/admin``, ``/admin/`` and ``/admin/static/*`` (rules 1 to 3)."""

    def __init__(self, operators: Operators) -> None:
        self._operators = operators
        self._index = _read("index.html")
        login = _read("login.html")
        if _NOTE_SLOT not in login:
            raise RuntimeError("the sign-in page has lost its note's slot")
        #: The sign-in page, by the ``login`` query value ("": none or one not known).
        self._logins: dict[str, bytes] = {"": login} | {
            value: login.replace(_NOTE_SLOT, _NOTE_SLOT.replace(
                b"></p>", b">" + html.escape(note).encode() + b"</p>"))
            for value, note in LOGIN_NOTES.items()}
        self._static: dict[str, tuple[bytes, bytes, str, bool]] = {}
        for name, (content_type, public) in _STATIC.items():
            body = _read(name)
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            self._static[name] = (body, content_type, etag, public)

    @staticmethod
    def serves(path: str) -> bool:
        return path in PAGE_PATHS or path.startswith(STATIC_PREFIX)

    async def __call__(self, http: Exchange) -> HttpReply:
        if http.method != "GET":
            return HttpReply(405, b"", {**_PAGE_HEADERS, "Allow": "GET"}, _HTML)
        if http.path in PAGE_PATHS:
            return await self._page(http)
        return await self._file(http, http.path[len(STATIC_PREFIX):])

    async def _page(self, http: Exchange) -> HttpReply:
        refused = await self._operators.check(http, changes_state=False)
        if refused is None:
            return HttpReply(200, self._index, _PAGE_HEADERS, _HTML)
        if refused.status == 401:
            said = parse_qs(http.query).get("login", [""])[0]
            return HttpReply(401, self._logins.get(said, self._logins[""]), _PAGE_HEADERS,
                             _HTML)
        return refused  # not a matter of signing in (no admin credential configured, ...)

    async def _file(self, http: Exchange, name: str) -> HttpReply:
        found = self._static.get(name)
        if found is None:
            return HttpReply(404, b"", _PAGE_HEADERS, _HTML)
        body, content_type, etag, public = found
        if not public:
            refused = await self._operators.check(http, changes_state=False)
            if refused is not None:
                return refused
        headers = {**_SECURITY, "Cache-Control": "no-cache", "ETag": etag}
        if http.headers.get("if-none-match") == etag:
            return HttpReply(304, b"", headers, None)
        return HttpReply(200, body, headers, content_type)


__all__ = ["CSP", "LOGIN_NOTES", "PAGE_PATHS", "STATIC_PREFIX", "DashboardPages", "Operators"]
