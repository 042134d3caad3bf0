"""Operators' browser sessions at ``/admin``, and the bound on login attempts. Pure but for
the clock and the random source.

Rules:

1. A session is opened by a login with an admin key (``admin_access``). Its cookie value
   is ``<instance>.<secret>``: the gateway process that holds it (``http_rules``' instance
   name, so a copy of ``serve --processes N`` passes the request to the sibling that
   holds it) and 256 random bits. The process keeps only the secret's SHA-256, never the
   secret: a session is found by one lookup, and how long that takes tells nothing of
   how close a guess came.
2. Each session has a CSRF token of its own (256 random bits), told to the session's own
   pages (``GET /admin/api/session``) and compared in constant time.
3. A session ends ``IDLE_S`` after its last request, ``MAX_AGE_S`` after it was opened
   whatever its use, at logout, or with the process. At most ``MAX_SESSIONS`` at once:
   opening one more ends the one used least recently.
4. Failed logins are counted per source address (``http_server.peer_key``): after
   ``LOGIN_FAILURES`` within ``LOGIN_WINDOW_S`` that source's logins are refused, unread,
   until the oldest failure leaves the window. The table of sources is bounded
   (``MAX_SOURCES``; the source seen least recently is forgotten first). A login that
   succeeds forgets its source's failures.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

#: Seconds a session lasts without a request, and at most.
IDLE_S = 8 * 3600.0
MAX_AGE_S = 7 * 86400.0
#: Sessions held by one gateway process at once.
MAX_SESSIONS = 64
#: Failed logins from one source within the window before its logins are refused.
LOGIN_FAILURES = 10
LOGIN_WINDOW_S = 300.0
#: Sources whose failed logins are remembered at once.
MAX_SOURCES = 4096
#: The cookie's name.
COOKIE = "trunkline_admin"


@dataclass(slots=True)
class Session:
    """One operator's browser session (rule 1: its secret is not kept)."""

    #: The admin key's name it was opened with (never the key).
    operator: str
    csrf: str
    opened: float
    used: float

    def expires_at(self) -> float:
        return min(self.used + IDLE_S, self.opened + MAX_AGE_S)

    def csrf_matches(self, presented: str | None) -> bool:
        """Rule 2."""
        return presented is not None and hmac.compare_digest(presented.encode(),
                                                             self.csrf.encode())


class Sessions:
    """One process's sessions (rules 1-3)."""

    def __init__(self, instance: str, *, clock: Callable[[], float] = time.time) -> None:
        self.instance = instance
        self._clock = clock
        #: By the SHA-256 of their secret, least recently used first.
        self._held: OrderedDict[bytes, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def open(self, operator: str) -> tuple[str, Session]:
        """A new session: its cookie value and the session."""
        secret = secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(operator, secrets.token_urlsafe(32), now, now)
        self._held[_digest(secret)] = session
        while len(self._held) > MAX_SESSIONS:
            self._held.popitem(last=False)
        return f"{self.instance}.{secret}", session

    def find(self, cookie: str | None) -> Session | None:
        """The live session the cookie names, now used (rule 3); None for any other."""
        secret = self._secret(cookie)
        if secret is None:
            return None
        key = _digest(secret)
        session = self._held.get(key)
        if session is None:
            return None
        now = self._clock()
        if now >= session.expires_at():
            del self._held[key]
            return None
        session.used = now
        self._held.move_to_end(key)
        return session

    def close(self, cookie: str | None) -> bool:
        """End the session the cookie names; whether there was one."""
        secret = self._secret(cookie)
        return secret is not None and self._held.pop(_digest(secret), None) is not None

    def _secret(self, cookie: str | None) -> str | None:
        if cookie is None:
            return None
        instance, _, secret = cookie.rpartition(".")
        return secret if instance == self.instance and secret else None


def holder(cookie: str) -> str:
    """The instance a cookie value names as its session's holder (rule 1)."""
    return cookie.rpartition(".")[0]


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class LoginAttempts:
    """Rule 4."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def wait_s(self, source: str | None) -> float:
        """Seconds until ``source`` may try again (0: now)."""
        failures = self._recent(source)
        if failures is None or len(failures) < LOGIN_FAILURES:
            return 0.0
        return max(failures[0] + LOGIN_WINDOW_S - self._clock(), 0.0)

    def failed(self, source: str | None) -> None:
        key = source or "local"
        failures = self._recent(source)
        if failures is None:
            failures = self._failures[key] = deque(maxlen=LOGIN_FAILURES)
            while len(self._failures) > MAX_SOURCES:
                self._failures.popitem(last=False)
        failures.append(self._clock())
        self._failures.move_to_end(key)

    def succeeded(self, source: str | None) -> None:
        self._failures.pop(source or "local", None)

    def _recent(self, source: str | None) -> deque[float] | None:
        failures = self._failures.get(source or "local")
        if failures is None:
            return None
        horizon = self._clock() - LOGIN_WINDOW_S
        while failures and failures[0] <= horizon:
            failures.popleft()
        return failures


__all__ = ["COOKIE", "IDLE_S", "LOGIN_FAILURES", "LOGIN_WINDOW_S", "MAX_AGE_S", "MAX_SESSIONS",
           "LoginAttempts", "Session", "Sessions", "holder"]
