"""The operator dashboard's pages (``/admin``): a small static page and its script and
stylesheet, shipped in the package (``gateway/dashboard/``), which read everything they
show from the operator API (``operator_api``) in the browser.

Rules:

1. ``GET /admin`` (and ``/admin/``) is the fleet page to an operator (``AdminAccess``: a
   session cookie, or the admin credential as a bearer); to anyone else it is the sign-in
   page, answered 401 (a form POSTing ``key`` to ``/admin/login``, which the operator API
   answers). ``GET /admin/static/<file>`` serves the script, the stylesheet and the icon
   to an operator; the stylesheet and the icon are served to anyone, since the sign-in
   page needs them and they are the same bytes as the package's. Every other path the
   operator API hands over (those it has no route for) is 401 without the credential,
   like the API's own, then 404; another method than GET is 405.
2. Every answer carries a ``Content-Security-Policy`` that lets the page load only the
   gateway's own script, stylesheet and API (``script-src 'self'``, ``style-src 'self'``,
   ``connect-src 'self'``: no inline script or style, no other origin), submit forms only
   to the gateway, and never be framed; with ``X-Content-Type-Options: nosniff`` and
   ``Referrer-Policy: same-origin`` (no address of the gateway's goes to another site; not
   ``no-referrer``, under which a browser sends ``Origin: null`` with the page's own
   POSTs, which the gateway's Origin check rightly refuses). Pages are ``no-store``; the
   script, stylesheet and icon ``no-cache`` with an ``ETag`` (a new version is never
   taken from a cache).
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
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from .exchange import Exchange
from .replies import HttpReply

if TYPE_CHECKING:
    from .admin_access import AdminAccess

#: The paths the pages answer (the operator API hands them over: ``OperatorApi(pages=)``).
PAGE_PATHS = ("/admin", "/admin/")
STATIC_PREFIX = "/admin/static/"

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_SECURITY = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
             "Referrer-Policy": "same-origin"}
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


def _read(name: str) -> bytes:
    return (resources.files(__package__ or "trunkline.gateway") / "dashboard" / name
            ).read_bytes()


class DashboardPages:
    """The handler of ``/admin``, ``/admin/`` and ``/admin/static/*`` (rules 1 to 3)."""

    def __init__(self, operators: AdminAccess) -> None:
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

    async def __call__(self, http: Exchange) -> HttpReply:
        """Every path under ``/admin`` the operator API has no route for."""
        found = self._static.get(http.path[len(STATIC_PREFIX):]) \
            if http.path.startswith(STATIC_PREFIX) else None
        if http.method == "GET" and found is not None and found[3]:
            return self._file(http, found)  # the sign-in page's own (rule 1)
        if http.method == "GET" and http.path in PAGE_PATHS:
            return await self._page(http)
        refused = await self._operators.check(http, changes_state=http.method != "GET")
        if refused is not None:
            return refused
        if found is None and http.path not in PAGE_PATHS:
            return HttpReply(404, b"", _PAGE_HEADERS, _HTML)
        if http.method != "GET":
            return HttpReply(405, b"", {**_PAGE_HEADERS, "Allow": "GET"}, _HTML)
        assert found is not None
        return self._file(http, found)

    async def _page(self, http: Exchange) -> HttpReply:
        refused = await self._operators.check(http, changes_state=False)
        if refused is None:
            return HttpReply(200, self._index, _PAGE_HEADERS, _HTML)
        if refused.status == 401:
            said = parse_qs(http.query).get("login", [""])[0]
            return HttpReply(401, self._logins.get(said, self._logins[""]), _PAGE_HEADERS,
                             _HTML)
        return refused  # not a matter of signing in (a token issuer unreachable, ...)

    @staticmethod
    def _file(http: Exchange, found: tuple[bytes, bytes, str, bool]) -> HttpReply:
        body, content_type, etag, _public = found
        headers = {**_SECURITY, "Cache-Control": "no-cache", "ETag": etag}
        if http.headers.get("if-none-match") == etag:
            return HttpReply(304, b"", headers, None)
        return HttpReply(200, body, headers, content_type)


__all__ = ["CSP", "LOGIN_NOTES", "PAGE_PATHS", "STATIC_PREFIX", "DashboardPages"]
