"""Who is an operator of the gateway: the credential every ``/admin`` route asks for.

Rules:

1. The admin credential is its own, never the ordinary callers' access: an admin key
   (``serve --admin-key-file PATH`` and ``TRUNKLINE_ADMIN_KEYS``, read as API keys are:
   ``api_keys``), or an OAuth access token of the gateway's own issuers carrying the admin
   scope (``serve --admin-scope``, default ``trunkline:admin``), checked by the gateway's
   own ``bearer.Validator`` (the same issuers, keys and audience as ``/mcp``'s) with that
   scope required instead of ``/mcp``'s. An admin key is at least ``MIN_KEY_CHARS``
   characters and is never also an API key; an admin key is not accepted at ``/mcp``,
   and no API key or token without the scope is accepted here.
2. A request shows it by ``Authorization: Bearer`` (a key or a token), or by a browser
   session's cookie (``admin_sessions``), opened by ``POST /admin/login`` with an admin key
   (form field ``key``) and ended by ``POST /admin/logout``. ``Authorization``, when sent,
   decides alone: a request that sends a bad one is refused whatever cookie it has.
3. A request that changes state (``check(..., changes_state=True)``) authenticated by the
   cookie must carry the session's CSRF token in ``X-CSRF-Token`` (else 403); one
   authenticated by ``Authorization`` needs none (a browser never adds it by itself).
   A login is the only state change without a session; what protects it is the Origin
   check every request passes (``http``) and the bound on failed logins per source.
4. Without the credential a request is 401 with ``WWW-Authenticate: Bearer
   realm="trunkline-admin"``; a token issuer whose keys cannot be fetched is 503, as at
   ``/mcp``. Refusals and log lines say why, never what was presented.
5. With ``serve --processes N`` a copy tells its siblings of an operator's state change
   (``operator_copies``) over their private sockets; such a request is let through when it
   came that way (``Exchange.internal``) and carries a signature under the copies' shared
   key (``copy_signature``: over its method, path and body) less than
   ``COPY_SIGNATURE_S`` old.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from ..errors import ConfigurationError
from ..policy.identity import Identity
from . import bearer
from .admin_sessions import COOKIE, LoginAttempts, Session, Sessions, holder
from .api_keys import ApiKeys, read_api_keys
from .exchange import Exchange
from .http_rules import cookie
from .replies import HttpReply, json_reply

log = logging.getLogger("trunkline.gateway")

#: The scope an operator's access token carries unless ``--admin-scope`` says otherwise.
DEFAULT_SCOPE = "trunkline:admin"
#: Where ``trunkline serve`` finds admin keys besides ``--admin-key-file``.
KEYS_ENV = "TRUNKLINE_ADMIN_KEYS"
#: The shortest admin key accepted.
MIN_KEY_CHARS = 16
#: The header of a sibling copy's signed request (rule 5), and how long one is good for.
COPY_HEADER = "x-trunkline-copy"
COPY_SIGNATURE_S = 30.0
#: The largest body of a sibling copy's request (rule 5) read.
_MAX_COPY_BODY = 64 * 1024
#: The largest login form read.
_MAX_LOGIN_BYTES = 4096
_NO_STORE = {"Cache-Control": "no-store"}


def read_admin_keys(path: str | None, env: Mapping[str, str] | None = None, *,
                    api_keys: ApiKeys | None = None) -> ApiKeys:
    """The admin keys of ``--admin-key-file`` ``path`` and ``TRUNKLINE_ADMIN_KEYS`` (rule
    1), named as API keys are (``admin-key-1``, ... by line, ``admin-env-1``, ... in the
    variable, or by the JSON file)."""
    keys = read_api_keys(path, env, variable=KEYS_ENV, what="admin keys", named="admin-")
    ordinary = {k.secret for k in api_keys.keys} if api_keys is not None else set()
    for key in keys.keys:
        if len(key.secret) < MIN_KEY_CHARS:
            raise ConfigurationError(f"admin key {key.identity.subject!r} is shorter than "
                                     f"{MIN_KEY_CHARS} characters")
        if key.secret in ordinary:
            raise ConfigurationError(f"admin key {key.identity.subject!r} is also an API key: "
                                     "the operator's credential is its own")
    return keys


def copy_signature(key: bytes, method: str, path: str, now: float,
                   body: bytes | None = None) -> str:
    """The ``X-Trunkline-Copy`` value of a sibling's request (rule 5): over its time,
    method, path and body."""
    stamp = f"{now:.3f}"
    digest = hashlib.sha256(body or b"").hexdigest()
    mac = hmac.new(key, f"{stamp} {method} {path} {digest}".encode(),
                   hashlib.sha256).hexdigest()
    return f"{stamp}.{mac}"


def copies_key(session_key: bytes) -> bytes:
    """The copies' shared key for rule 5, from the legacy-session key they share."""
    return hmac.new(session_key, b"trunkline admin copies", hashlib.sha256).digest()


class AdminAccess:
    """Rules 1-5 for one gateway process. ``tokens``: the face's token validator once it
    has one (None: no OAuth); ``scope``: the admin scope (None: tokens are never an
    operator's); ``secure_cookies``: the session cookie is ``Secure`` (the gateway is
    reached over https); ``copies``: the copies' shared key (rule 5), if a copy."""

    def __init__(self, keys: ApiKeys, *, instance: str,
                 tokens: Callable[[], bearer.Validator | None] = lambda: None,
                 scope: str | None = DEFAULT_SCOPE, secure_cookies: bool = False,
                 copies: bytes | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._keys = keys
        self._tokens = tokens
        self._scope = scope
        self._admin_tokens: bearer.Validator | None = None
        self._secure = secure_cookies
        self._copies = copies
        self._clock = clock
        self.sessions = Sessions(instance, clock=clock)
        self.attempts = LoginAttempts()

    @property
    def keys(self) -> ApiKeys:
        return self._keys

    @property
    def copies(self) -> bytes | None:
        """The copies' shared key (rule 5), if this process is a copy."""
        return self._copies

    def accepts_tokens(self) -> bool:
        return self._scope is not None and self._tokens() is not None

    # -- who asks ------------------------------------------------------------------------

    async def check(self, exchange: Exchange, *, changes_state: bool) -> HttpReply | None:
        """None when the request is an operator's (its ``identity`` then says whose),
        else the refusal to answer with (rules 2-5)."""
        authorization = exchange.headers.get("authorization")
        if authorization is not None:
            return await self._bearer(exchange, authorization)
        if exchange.internal and self._copies is not None and \
                COPY_HEADER in exchange.headers:
            return await self._sibling(exchange)
        session = self.session_of(exchange)
        if session is None:
            return self._unauthorized("the admin credential is required: an admin key or "
                                      "token (Authorization: Bearer), or a session "
                                      "(POST /admin/login)")
        exchange.identity = Identity.api_key(session.operator)
        if changes_state and not session.csrf_matches(exchange.headers.get("x-csrf-token")):
            return json_reply({"error": "a change asked by a browser session needs its CSRF "
                                        "token in X-CSRF-Token (GET /admin/api/session)"},
                              403, _NO_STORE)
        return None

    def session_of(self, exchange: Exchange) -> Session | None:
        """The live session of the request's cookie, if any (rule 2)."""
        return self.sessions.find(cookie(exchange.headers.get("cookie"), COOKIE))

    def holder_of(self, exchange: Exchange) -> str | None:
        """The instance holding the session the request's cookie names, when it is not
        this process (a sibling copy may be it); None otherwise."""
        if "authorization" in exchange.headers:
            return None
        session_id = cookie(exchange.headers.get("cookie"), COOKIE)
        if session_id is None:
            return None
        instance = holder(session_id)
        return None if instance == self.sessions.instance else instance

    async def _bearer(self, exchange: Exchange, authorization: str) -> HttpReply | None:
        named = self._keys.identity_of(authorization)
        if named is not None:
            exchange.identity = named
            return None
        validator = self._token_validator()
        if validator is None:
            return self._unauthorized("not an admin key")
        verdict = await validator.check(authorization)
        if isinstance(verdict, Identity):
            exchange.identity = verdict
            return None
        log.debug("%s %s refused: %s", exchange.method, exchange.path, verdict.reason)
        if verdict.status == 503:
            return json_reply({"error": verdict.reason}, 503,
                              {**_NO_STORE, "Retry-After": "5"})
        return self._unauthorized(f"neither an admin key nor an access token with the scope "
                                  f"{self._scope}: {verdict.reason}")

    def _token_validator(self) -> bearer.Validator | None:
        if self._admin_tokens is None and self._scope is not None:
            base = self._tokens()
            if base is not None:
                self._admin_tokens = base.requiring((self._scope,))
        return self._admin_tokens

    async def _sibling(self, exchange: Exchange) -> HttpReply | None:
        assert self._copies is not None
        stamp, _, _mac = exchange.headers[COPY_HEADER].rpartition(".")
        try:
            at = float(stamp)
        except ValueError:
            at = float("-inf")
        body = await exchange.body(_MAX_COPY_BODY)
        expected = copy_signature(self._copies, exchange.method, exchange.path, at, body) \
            if abs(self._clock() - at) <= COPY_SIGNATURE_S and body is not None else ""
        if not hmac.compare_digest(expected.encode(), exchange.headers[COPY_HEADER].encode()):
            return self._unauthorized("a sibling copy's signature that does not hold")
        exchange.identity = Identity.api_key("sibling-copy")
        return None

    def _unauthorized(self, reason: str) -> HttpReply:
        challenge = 'Bearer realm="trunkline-admin"'
        if self.accepts_tokens():
            challenge += f', scope="{self._scope}"'
        return json_reply({"error": reason}, 401,
                          {**_NO_STORE, "WWW-Authenticate": challenge})

    # -- sessions ------------------------------------------------------------------------

    async def login(self, exchange: Exchange) -> HttpReply:
        """``POST /admin/login``, form ``key=<admin key>``: a session (303 to ``/admin``
        with its cookie), else 401 (a browser: 303 to ``/admin?login=refused``), or 429
        while the source has failed too often (rule 4 of ``admin_sessions``)."""
        browser = "text/html" in exchange.headers.get("accept", "")
        source = exchange.connection.peer
        wait = self.attempts.wait_s(source)
        if wait > 0:
            log.warning("admin login from %s refused: too many failed logins", source)
            if browser:
                return _see_other("/admin?login=limited")
            return json_reply({"error": "too many failed logins from this address: try "
                                        "again later"}, 429,
                              {**_NO_STORE, "Retry-After": str(int(wait) + 1)})
        if not exchange.headers.get("content-type", "").startswith(
                "application/x-www-form-urlencoded"):
            return json_reply({"error": "a login is a form: "
                                        "application/x-www-form-urlencoded, key=<admin key>"},
                              415, _NO_STORE)
        body = await exchange.body(_MAX_LOGIN_BYTES)
        keys = [] if body is None else parse_qs(body.decode(errors="replace")).get("key", [])
        named = self._keys.identity_of(f"Bearer {keys[0]}") if len(keys) == 1 else None
        if named is None:
            self.attempts.failed(source)
            log.warning("admin login from %s refused: not an admin key", source)
            if browser:
                return _see_other("/admin?login=refused")
            return json_reply({"error": "not an admin key"}, 401, _NO_STORE)
        self.attempts.succeeded(source)
        cookie, _session = self.sessions.open(named.subject)
        log.warning("operator %r logged in from %s (%d sessions)", named.subject, source,
                    len(self.sessions))
        return _see_other("/admin", {"Set-Cookie": self._cookie_header(cookie)})

    async def logout(self, exchange: Exchange) -> HttpReply:
        """``POST /admin/logout`` (once ``check`` let it through): the session ends, its
        cookie is cleared; 303 to ``/admin``."""
        if self.sessions.close(cookie(exchange.headers.get("cookie"), COOKIE)):
            log.warning("operator %r logged out", getattr(exchange.identity, "subject", None))
        return _see_other("/admin", {"Set-Cookie": self._cookie_header("", clear=True)})

    def session_document(self, exchange: Exchange) -> dict[str, Any]:
        """``GET /admin/api/session`` (once ``check`` let it through): the CSRF token of
        the request's session, when it came with one."""
        identity = exchange.identity
        session = None if "authorization" in exchange.headers else self.session_of(exchange)
        return {"operator": getattr(identity, "subject", None),
                "via": "session" if session is not None else "bearer",
                "csrf": None if session is None else session.csrf,
                "expires_at": None if session is None else session.expires_at()}

    def _cookie_header(self, value: str, *, clear: bool = False) -> str:
        header = f"{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/admin"
        if clear:
            header += "; Max-Age=0"
        return header + ("; Secure" if self._secure else "")


def _see_other(location: str, headers: Mapping[str, str] | None = None) -> HttpReply:
    return HttpReply(303, b"", {**_NO_STORE, "Location": location, **(headers or {})})



__all__ = ["COPY_HEADER", "DEFAULT_SCOPE", "KEYS_ENV", "MIN_KEY_CHARS", "AdminAccess",
           "copies_key", "copy_signature", "read_admin_keys"]
